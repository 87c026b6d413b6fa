"""Grader pieces: which agent files reach grading, the record channel, task validation."""
from __future__ import annotations

import dataclasses
import secrets

import pytest

from composer_jax.grading import (
    GradeConfig,
    InvalidTaskError,
    Task,
    grade,
    validate_task,
)
from composer_jax.grading.report import parse, record_mac
from composer_jax.grading.submission import merge, protected_reason
from composer_jax.sandbox import SandboxUnavailableError, get_backend

GOOD = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
BUG = "def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n"
HIDDEN = """from clampx import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_above():
    assert clamp(50, 0, 10) == 10


class TestBelow:
    def test_below(self):
        assert clamp(-5, 0, 10) == 0


def test_still_buggy():
    assert clamp(5, 0, 10) == 0
"""
TASK = Task(
    task_id="unit/clamp", suite="BugFix", prompt="fix clamp",
    files={"clampx.py": BUG, "README.md": "clamp\n"},
    hidden_tests={"test_clamp_hidden.py": HIDDEN},
    graded_tests=("test_clamp_hidden.py::test_inside", "test_clamp_hidden.py::test_above",
                  "test_clamp_hidden.py::TestBelow::test_below"),
    tripwire_tests=("test_clamp_hidden.py::test_still_buggy",),
)


@pytest.fixture(scope="module")
def backend():
    try:
        return get_backend("auto")
    except SandboxUnavailableError as e:
        pytest.skip(f"no sandbox on this machine: {e}")


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


def _record(key, nonce, seq, kind, node):
    body = f"{seq} {kind} {node.encode().hex()}"
    return f"{nonce} {body} {record_mac(key, body)}"


def test_report_parse_accepts_genuine_records_amid_noise():
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    text = "\n".join(["noise", "junk" + _record(key, nonce, 0, "pass", "t.py::a"),
                      _record(key, nonce, 1, "fail", "t.py::b"), _record(key, nonce, 2, "end", "")])
    rep = parse(text, key, nonce)
    assert rep.outcomes == {"t.py::a": "pass", "t.py::b": "fail"}
    assert rep.problems == () and rep.finished


@pytest.mark.parametrize("forge", ["bad_mac", "replay", "skip_seq", "other_key"])
def test_report_parse_flags_forgery(forge):
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    lines = [_record(key, nonce, 0, "fail", "t.py::a")]
    if forge == "bad_mac":
        lines.append(_record(key, nonce, 1, "pass", "t.py::b")[:-4] + "0000")
    elif forge == "replay":
        lines += [_record(key, nonce, 1, "pass", "t.py::b"), _record(key, nonce, 2, "pass", "t.py::b")]
    elif forge == "skip_seq":
        lines.append(_record(key, nonce, 5, "pass", "t.py::b"))
    else:
        lines.append(_record(secrets.token_bytes(32), nonce, 1, "pass", "t.py::b"))
    assert parse("\n".join(lines), key, nonce).problems


def test_grade_fix_partial_and_tripwire(backend):
    full = grade(TASK, {**TASK.files, "clampx.py": GOOD}, backend)
    assert (full.reward, full.passed, full.total) == (1.0, 3, 3), full.details
    partial = grade(TASK, {**TASK.files, "clampx.py": "def clamp(x, lo, hi):\n    return min(x, hi)\n"}, backend)
    assert partial.reward == pytest.approx(2 / 3), partial.details
    assert partial.tests["test_clamp_hidden.py::TestBelow::test_below"] is False
    sneaky = ("import sys\n\n\ndef clamp(x, lo, hi):\n"
              "    if sys._getframe(1).f_code.co_name == 'test_still_buggy':\n        return 0\n"
              "    return max(lo, min(x, hi))\n")
    tripped = grade(TASK, {**TASK.files, "clampx.py": sneaky}, backend)
    assert tripped.tripwire_tripped and tripped.reward == 0.0, tripped.details


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
    assert res.reward == 0.75 and "test_nonexistent: missing from report" in res.details


def test_unknown_reward_mode(backend):
    with pytest.raises(ValueError, match="unknown reward mode"):
        grade(TASK, TASK.files, backend, GradeConfig(reward="best_of"))


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


def test_validate_task_accepts_a_good_task(backend):
    validate_task(TASK, {**TASK.files, "clampx.py": GOOD}, backend)


def test_validate_task_rejects_failing_reference(backend):
    with pytest.raises(InvalidTaskError, match="reference solution fails hidden tests"):
        validate_task(TASK, TASK.files, backend)


def test_validate_task_rejects_a_tripwire_the_reference_passes(backend):
    task = dataclasses.replace(TASK, tripwire_tests=("test_clamp_hidden.py::test_inside",))
    with pytest.raises(InvalidTaskError, match="scores 0.0"):
        validate_task(task, {**TASK.files, "clampx.py": GOOD}, backend)


def test_validate_task_rejects_a_task_with_nothing_to_fix(backend):
    task = dataclasses.replace(TASK, files={**TASK.files, "clampx.py": GOOD})
    with pytest.raises(InvalidTaskError, match="already passes"):
        validate_task(task, task.files, backend)


def test_validate_task_rejects_unknown_test_files(backend):
    task = dataclasses.replace(TASK, graded_tests=("nowhere.py::test_x",))
    with pytest.raises(InvalidTaskError, match="missing test files"):
        validate_task(task, TASK.files, backend)
