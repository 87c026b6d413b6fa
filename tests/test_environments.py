"""The Gymnasium environments end to end: real sandbox, real grader, scripted experts."""
import ast
import concurrent.futures
import json
import os
import time

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

import environments  # noqa: F401 - registers the environments
from composer_jax.harness import format_tool_call
from composer_jax.harness import special_tokens as st
from composer_jax.sandbox.files import Quota
from environments.experts import SUBMIT_COMMAND, NoExpertError, expert_plan, null_plan, run_plan, shell_plan
from environments.suites import make_suite
from fs_snapshot import tree

LONG = {"hops": 3, "filler_lines": 5, "validation_size": 20}
SUITE_KWARGS = {"BugFix": {}, "Implement": {}, "LongHorizon": {"suite_options": LONG}}


def make(suite, **kwargs):
    return gym.make(f"composer/{suite}-v0", split="validation", **{**SUITE_KWARGS[suite], **kwargs})


def sample_ids(suite, n):
    env_kwargs = SUITE_KWARGS[suite].get("suite_options", {})
    ids = make_suite(suite, **env_kwargs).task_ids("validation")
    return ids[:: max(1, len(ids) // n)][:n]


@pytest.mark.parametrize("suite", ["BugFix", "Implement", "LongHorizon"])
def test_expert_solves_and_null_policy_fails(suite):
    env = make(suite)
    for task_id in sample_ids(suite, 2):
        expert = run_plan(env, expert_plan, task_id=task_id, verify=True)
        assert expert.reward == 1.0, (task_id, expert.info.get("grading_details"))
        assert expert.info["passed"] == expert.info["total"] > 0
        null = run_plan(env, null_plan, task_id=task_id)
        assert null.reward == 0.0 and null.info["passed"] < null.info["total"]
    env.close()


def test_expert_solves_multi_file_repo_tasks():
    """The hand-written packages all hash into the train split; cover them here."""
    env = gym.make("composer/BugFix-v0", split="train")
    ids = [i for i in make_suite("BugFix").task_ids("train") if i.startswith("bugfix/repo-")]
    picks = [next(i for i in ids if "+" in i), next(i for i in ids if "+" not in i and "inventory" in i)]
    for task_id in picks:
        assert run_plan(env, expert_plan, task_id=task_id).reward == 1.0, task_id
        assert run_plan(env, null_plan, task_id=task_id).reward == 0.0, task_id
    env.close()


def test_expert_reads_around_a_hinted_line():
    env = gym.make("composer/BugFix-v0", split="validation", suite_options={"max_bugs": 1, "hint_line": True})
    suite = env.unwrapped.suite
    for task_id in suite.task_ids("validation")[::90][:3]:
        task = suite.get(task_id)
        line = int(task.metadata["hint_line"])
        (path,) = json.loads(task.metadata["reference_files"])
        read = format_tool_call("read_file", path=path, start_line=max(1, line - 3), end_line=line + 3)
        t = run_plan(env, expert_plan, task_id=task_id)
        assert t.turns[0][1] == read and t.reward == 1.0, task_id
        assert f"{line:>5}\t" in t.turns[1][0]  # the hinted line is in what the expert read
    env.close()


def test_shell_expert_solves_through_the_sandbox_shell():
    """The bash-only expert (mini-swe-agent's demonstrations) played through `CodingEnv.shell`,
    the sandbox a harness's commands run in: every command succeeds, the read shows the hinted
    line, and the grader scores the workspace 1 (a quoting slip in an edit would score 0)."""
    cases = [("BugFix", {"max_bugs": 1, "hint_line": True}, "validation", 3),
             ("BugFix", {}, "validation", 2), ("Implement", {}, "validation", 2)]
    for suite_name, options, split, n in cases:
        env = gym.make(f"composer/{suite_name}-v0", split=split, suite_options=options)
        ids = env.unwrapped.suite.task_ids(split)
        for task_id in ids[::max(1, len(ids) // n)][:n]:
            env.reset(options={"task_id": task_id})
            task = env.unwrapped.task
            plan = shell_plan(task)
            assert plan[-1][1] == SUBMIT_COMMAND
            outputs = [env.unwrapped.shell(command) for _, command in plan[:-1]]
            assert all(code == 0 for _, code in outputs), (task_id, outputs)
            if "hint_line" in task.metadata:
                assert f"{int(task.metadata['hint_line']):>6}\t" in outputs[0][0], (task_id, outputs[0])
            _, reward, terminated, _, info = env.step(format_tool_call("submit"))
            assert terminated and reward == 1.0, (task_id, info.get("grading_details"))
        env.close()
    with pytest.raises(NoExpertError):
        shell_plan(make_suite("Implement").get(make_suite("Implement").task_ids("train")[0]))


def test_expert_transcript_is_sft_ready():
    env = make("LongHorizon")
    t = run_plan(env, expert_plan, task_id=sample_ids("LongHorizon", 1)[0])
    messages = t.messages()
    assert [m.role for m in messages[:3]] == ["system", "user", "assistant"]
    assert messages[-1].role == "assistant" and messages[-1].content == format_tool_call("submit")
    assert len(t.turns) == 4 + 1 + 1  # start + 3 notes, write config, submit
    assert "Fragment 1 of 3" in messages[5].content  # the observation after reading note 1
    env.close()


def test_leetcode_has_no_expert():
    suite = make_suite("Implement")
    with pytest.raises(NoExpertError, match="LeetCode"):
        expert_plan(suite.get(suite.task_ids("train")[0]))


def test_bad_actions_cost_turns_then_truncate():
    env = make("LongHorizon", max_turns=3)
    prompt, info = env.reset(seed=1)
    assert "docs/start.md" in prompt and "read_file" in info["system_prompt"]
    assert "grep" not in info["system_prompt"]  # withheld in LongHorizon
    obs, reward, term, trunc, info = env.step("I will just talk.")
    assert obs.startswith("Error (no_tool_call)") and info["tool_error"] == "no_tool_call"
    obs, *_ , info = env.step(format_tool_call("grep", pattern="Fragment"))
    assert "unknown tool 'grep'" in obs
    obs, reward, term, trunc, info = env.step(st.TOOL_CALL_OPEN + "{broken")
    assert (reward, term, trunc) == (0.0, False, True) and "turn limit" in obs
    with pytest.raises(RuntimeError, match="reset"):
        env.step(format_tool_call("submit"))
    env.close()


def test_tool_failures_are_observations():
    env = make("BugFix")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(format_tool_call("read_file", path="../../etc/passwd"))
    assert "outside the repository" in obs and info["tool_error"] == "tool_failed"
    obs, *_ = env.step(format_tool_call("edit_file", path="nope.py", old="a", new="b"))
    assert obs.startswith("Error:")
    env.close()


def test_reset_is_deterministic_and_validates_options():
    env = make("BugFix")
    first = env.reset(seed=7)[1]["task_id"]
    assert env.reset(seed=7)[1]["task_id"] == first
    assert env.reset(options={"task_index": 3})[1]["task_id"] == sample_ids("BugFix", 10**6)[3]
    assert env.reset(options={"split": "train", "task_index": 0})[1]["task_id"].startswith("bugfix/")
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"difficulty": 3})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"task_index": 10**7})
    with pytest.raises(KeyError, match="no task"):
        env.reset(options={"task_id": "bugfix/nope"})
    with pytest.raises(gym.error.Error, match="greater or equal to zero"):
        env.reset(seed=-1)
    env.close()


def test_construction_errors_name_the_fix():
    with pytest.raises(TypeError, match="allowed"):
        gym.make("composer/LongHorizon-v0", suite_options={"levels": 3})
    with pytest.raises(ValueError, match="unknown split"):
        gym.make("composer/BugFix-v0", split="test")
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        gym.make("composer/BugFix-v0", backend="docker")


def test_spaces_accept_observations_and_actions():
    env = make("Implement")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    action = format_tool_call("write_file", path="a.py", content="s = 'héllo\tworld'\n")
    assert env.action_space.contains(action) and env.action_space.contains("")
    env.close()


def test_async_vector_env_with_two_workers():
    fns = [lambda: make("LongHorizon", max_turns=5) for _ in range(2)]
    venv = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    obs, info = venv.reset(seed=[0, 1])
    assert len(obs) == 2 and all("docs/start.md" in o for o in obs)
    actions = (format_tool_call("read_file", path="docs/start.md"), format_tool_call("submit"))
    obs, reward, term, trunc, info = venv.step(actions)
    assert "access key" in obs[0] and list(term) == [False, True] and list(reward) == [0.0, 0.0]
    venv.close()


def _rewards(suite, plan_fn, ids):
    env = gym.make(f"composer/{suite}-v0", split="validation")
    try:
        return {i: run_plan(env, plan_fn, task_id=i).reward for i in ids}
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["BugFix", "Implement", "LongHorizon"])
def test_expert_solves_validation_split_and_null_gets_zero(suite):
    # Every third task of the real split keeps CI short; benchmarks/env_bench.py runs it whole.
    ids = make_suite(suite).task_ids("validation")[::3]
    shards = [ids[i::4] for i in range(4)]  # grading waits on sandboxes: overlap four envs
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        expert = {k: v for part in pool.map(lambda s: _rewards(suite, expert_plan, s), shards) for k, v in part.items()}
        null = {k: v for part in pool.map(lambda s: _rewards(suite, null_plan, s), shards) for k, v in part.items()}
    assert len(expert) == len(null) == len(ids)
    assert [i for i, r in expert.items() if r != 1.0] == []
    assert [i for i, r in null.items() if r != 0.0] == []

FORCE_PASS_CONFTEST = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
'''


@pytest.mark.parametrize("cheat", ["conftest", "fake_hidden_test", "always_equal"])
def test_known_reward_hacks_score_zero(cheat):
    env = make("Implement")
    suite = make_suite("Implement")
    task = suite.get("implement/humaneval-0")
    env.reset(options={"task_id": task.task_id})
    target, entry = task.metadata["target_file"], task.metadata["entry_point"]
    action = {
        "conftest": format_tool_call("write_file", path="conftest.py", content=FORCE_PASS_CONFTEST),
        "fake_hidden_test": format_tool_call("write_file", path="test_hidden.py",
                                             content="def test_check():\n    pass\n"),
        "always_equal": format_tool_call(
            "write_file", path=target,
            content=f"class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n\n\n"
                    f"def {entry}(*args):\n    return AlwaysEqual()\n"),
    }[cheat]
    env.step(action)
    _, reward, terminated, _, info = env.step(format_tool_call("submit"))
    assert terminated and reward == 0.0, info["grading_details"]
    env.close()


def test_gymnasium_env_checker_passes():
    from gymnasium.utils.env_checker import check_env

    env = make("LongHorizon")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_single_turn_mode_grades_a_reply():
    from environments.suites.implement import grade_single_turn, single_turn_prompt
    from environments.suites.sources import humaneval_problems

    task = make_suite("Implement").get("implement/humaneval-2")
    problem = humaneval_problems()["HumanEval/2"]
    assert "truncate_number" in single_turn_prompt(task)
    right = f"Here it is:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\n"
    wrong = "```python\ndef truncate_number(number):\n    return number\n```"
    assert grade_single_turn(task, right).reward == 1.0
    assert grade_single_turn(task, wrong).reward == 0.0
    assert grade_single_turn(task, "no code", grader=lambda *a: 1 / 0).details.startswith("no ```python")


def test_missing_sandbox_is_a_clear_error(monkeypatch):
    import composer_jax.sandbox as sandbox
    from composer_jax.sandbox.base import SandboxUnavailableError

    def unavailable(name="auto"):
        raise SandboxUnavailableError("bwrap sandbox needs: bwrap (apt-get install bubblewrap)")

    monkeypatch.setattr(sandbox, "get_backend", unavailable)
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap.*SandboxBackend instance"):
        gym.make("composer/LongHorizon-v0")


def test_expert_pages_through_long_files():
    env = gym.make("composer/LongHorizon-v0", split="validation",
                   suite_options={"hops": 2, "filler_lines": 100, "validation_size": 1})
    t = run_plan(env, expert_plan, task_id="longhorizon/h2-f100/validation-0", lines_per_read=40)
    assert t.reward == 1.0
    assert len(t.turns) == 3 * 3 + 2  # three notes of 102 lines, 3 reads each; write; submit
    assert not any("truncated" in obs for obs, _ in t.turns)
    env.close()


def test_drill_is_graded_by_restoring_the_function():
    """A drill's hidden test compares ASTs: any formatting of the original passes, extra code or a
    forged test file does not."""
    env = gym.make("composer/BugFix-v0", split="train", suite_options={"max_bugs": 1, "hint_line": True, "drills": 8})
    suite = env.unwrapped.suite
    drill_ids = [t for t in suite.task_ids("train") if t.startswith("bugfix-drill/")]
    for task_id in drill_ids[:2]:
        assert run_plan(env, expert_plan, task_id=task_id).reward == 1.0, task_id
        assert run_plan(env, null_plan, task_id=task_id).reward == 0.0, task_id
    task = suite.get(drill_ids[0])
    (path, original), = json.loads(task.metadata["reference_files"]).items()
    forged = "def test_function_restored():\n    pass\n"
    for writes, expected in [({path: ast.unparse(ast.parse(original))}, 1.0),
                             ({path: original + "\n\nEXTRA = 1\n"}, 0.0),
                             ({"test_hidden.py": forged}, 0.0)]:
        env.reset(options={"task_id": task.task_id})
        for p, content in writes.items():
            env.step(format_tool_call("write_file", path=p, content=content))
        assert env.step(format_tool_call("submit"))[1] == expected, writes
    env.close()


# --- quotas, bad input, no back door ------------------------------------------------------------


def test_over_quota_workspace_scores_zero_before_it_is_read(monkeypatch):
    env = make("BugFix")
    backend = env.unwrapped.backend

    def never(_):
        raise AssertionError("an over-quota workspace was read to the host")

    for fill in ("files", "sparse"):
        env.reset(seed=0)
        root = env.unwrapped._workspace.path
        if fill == "files":
            for i in range(20_000):
                os.close(os.open(os.path.join(root, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
        else:
            with open(os.path.join(root, "sparse.bin"), "wb") as f:
                f.truncate(768 << 20)
        with monkeypatch.context() as m:
            m.setattr(backend, "read_files", never)
            started = time.perf_counter()
            obs, reward, terminated, _, info = env.step(format_tool_call("submit"))
        assert time.perf_counter() - started < 5 and terminated and reward == 0.0
        expected = "more than 10000 files" if fill == "files" else f"more than {64 << 20} bytes"
        assert info["grading_error"].startswith(f"workspace over quota: {expected}"), info
        assert f"Not graded: workspace over quota: {expected}" in obs
    env.close()


def test_quota_is_configurable_and_checked_after_commands():
    env = make("BugFix", quota=Quota(max_bytes=1 << 20, max_files=500))
    env.reset(seed=0)
    obs, *_, info = env.step(format_tool_call("run", cmd="mkdir many && touch many/f$(seq -s ' many/f' 600)"))
    assert "[workspace over quota: more than 500 files, directories and links: submit scores 0" in obs
    assert info["quota"].startswith("workspace over quota")
    obs, *_ = env.step(format_tool_call("run", cmd="rm -r many"))
    assert "quota" not in obs
    env.close()


def test_reset_refuses_a_bool_task_index():
    env = make("BugFix")
    with pytest.raises(ValueError, match="task_index must be an int, got bool"):
        env.reset(options={"task_index": True})
    env.close()


@pytest.fixture(scope="module")
def hostile_env():
    """A BugFix episode whose workspace holds a link out of it, a directory and a file name that
    is not UTF-8."""
    env = make("BugFix", max_turns=10**6)
    env.reset(seed=0)
    root = env.unwrapped._workspace.path
    os.symlink("/etc", os.path.join(root, "out"))
    os.mkdir(os.path.join(root, "adir"))
    os.close(os.open(os.path.join(os.fsencode(root), b"bad\xff.py"), os.O_CREAT | os.O_WRONLY, 0o644))
    yield env
    env.close()


OUTSIDE = ["/etc/passwd", "/", "..", "../x.py", "a/../../x.py", "out", "out/passwd", "out/new.py",
           "bad\udcff.py", "\ud800", "a\x00b"]
BAD_PATHS = [*OUTSIDE, "adir", "adir/", "new/", "x.py/", ".", ""]  # no file can be read or written there


def calls(name, **arguments):
    """(name, arguments) with each argument drawn from its strategy (or fixed)."""
    drawn = {k: v if isinstance(v, hst.SearchStrategy) else hst.just(v) for k, v in arguments.items()}
    return hst.fixed_dictionaries(drawn).map(lambda a: (name, a))


def bad_calls(env):
    """Tool calls that must all be refused."""
    path, text = hst.sampled_from(BAD_PATHS), hst.text(max_size=20)
    surrogate = hst.tuples(text, hst.sampled_from("\udcff\ud800\udfff"), text).map("".join)
    not_str = hst.one_of(hst.integers(), hst.none(), hst.booleans(), hst.lists(hst.integers(), max_size=2))
    not_int = hst.one_of(hst.text(max_size=3), hst.none(), hst.booleans(), hst.floats())
    existing = min(env.unwrapped.task.files)
    first_line = env.unwrapped.task.files[existing].splitlines()[0]
    return hst.one_of(
        calls("read_file", path=path),
        calls("list_dir", path=hst.sampled_from(["/etc", "..", "out", "nope", existing, "\udcff"])),
        calls("write_file", path=path, content=text),
        calls("write_file", path="new.py", content=surrogate),
        calls("write_file", path=hst.sampled_from([existing + "/", existing + "/x.py", "adir/", "new/"]), content="x"),
        calls("edit_file", path=existing, old=first_line, new=surrogate),
        calls("edit_file", path=path, old=text, new=text),
        calls("grep", pattern="def", path=hst.sampled_from(OUTSIDE)),
        calls("run_tests", selection=hst.sampled_from(["--rootdir=/", "'open", "a\x00"])),
        calls("run", cmd=surrogate),
        calls("read_file", path=not_str),
        calls("read_file", path=existing, start_line=not_int),
        calls("write_file", path="new.py", content=not_str),
        calls("edit_file", path=existing, old=first_line, new=not_str),
        calls("read_file", path=existing, mode=hst.integers()),
    )


def test_bad_calls_are_one_line_errors_that_change_nothing_and_leak_no_host_path(hostile_env):
    env = hostile_env
    root = env.unwrapped._workspace.path
    hosts = {root, os.path.realpath(root)}
    before = tree(root)
    listing, *_ = env.step(format_tool_call("list_dir"))
    assert "bad\\xff.py" in listing and listing.encode("utf-8")

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(bad_calls(env))
    def check(call):
        name, arguments = call
        obs, reward, terminated, truncated, _ = env.step(format_tool_call(name, **arguments))
        assert obs.startswith("Error") and "\n" not in obs and "Traceback" not in obs, obs
        assert "internal tool failure" not in obs and not any(h in obs for h in hosts), obs
        assert obs.encode("utf-8") and (reward, terminated, truncated) == (0.0, False, False)
        assert tree(root) == before, (call, obs)

    check()


def evil(name):
    """Prints a marker when run; the text does not hold it, so a traceback quoting it cannot."""
    return f"print('CJ-' + 'MARKER {name}')\nraise SystemExit('CJ-' + 'MARKER {name}')\n"


def test_longhorizon_run_tests_is_no_back_door_to_running_code():
    """LongHorizon withholds `run`: a test file that greps the notes, a conftest.py, a pytest.py
    or an ast.py the agent writes must not run through run_tests either."""
    env = make("LongHorizon")
    env.reset(seed=0)
    for path in ("test_evil.py", "conftest.py", "pytest.py", "ast.py", "sitecustomize.py", "config.py"):
        env.step(format_tool_call("write_file", path=path, content=evil(path)))
    for selection in ("", "test_config.py"):
        obs, *_ = env.step(format_tool_call("run_tests", selection=selection))
        assert "CJ-MARKER" not in obs and "exit code" in obs, obs
    obs, *_ = env.step(format_tool_call("run_tests", selection="test_evil.py"))
    assert obs == "Error: run_tests runs only the task's own test files (test_config.py), not 'test_evil.py'"
    env.close()


def test_a_very_deep_tree_ends_nothing_but_its_own_grade():
    """3,000 nested directories (deeper than PATH_MAX, and than any recursive walk survives):
    every tool still answers, submit scores 0 for the depth quota, and the workspace is removed."""
    env = make("BugFix")
    env.reset(options={"task_index": 0})
    deep = ("import os\nfd = os.open('.', os.O_RDONLY)\nfor _ in range(3000):\n"
            "    os.mkdir('d', dir_fd=fd)\n    fd = os.open('d', os.O_RDONLY, dir_fd=fd)\n")
    env.step(format_tool_call("write_file", path="deep.py", content=deep))
    env.step(format_tool_call("run", cmd="python deep.py"))
    root = env.unwrapped._workspace.path
    for call in (format_tool_call("list_dir"), format_tool_call("run", cmd="true"), format_tool_call("read_file", path="deep.py")):
        obs, *_ = env.step(call)
        assert "internal tool failure" not in obs, obs
    _, reward, terminated, _, info = env.step(format_tool_call("submit"))
    assert terminated and reward == 0.0 and "deeper than" in info["grading_error"]
    assert not os.path.exists(root)
