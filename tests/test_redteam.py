"""The red-team catalogue in CI: each cheat of environments/redteam.py once (its first suite, seed 0)
must score 0 and leave no trace on the host, and the scripted expert must still score 1 on the same
tasks, so that a zero is the grader's doing and not a broken env. The whole matrix (every suite
variant, several seeds) is `python benchmarks/redteam_bench.py`.

KNOWN_WINS are the cheats that still beat the grader in this tree (grader v2: a host judge that
runs no submitted code). They are expected failures, strict ones: fix the hole, and the cheat must
come off the list. Against the previous grader (pytest plus a MACed reporting plugin inside the
sandbox) 43 of the 82 cheats won somewhere; benchmarks/results/redteam_before.json has that run.
"""
from __future__ import annotations

import difflib
import json

import pytest

from composer_jax.sandbox import SandboxUnavailableError
from environments import redteam

pytestmark = pytest.mark.slow

SETTINGS = redteam.Settings(grading_wall_s=5.0, tool_wall_s=8.0)

# Still win on their first suite, seed 0 (the reason is what wins).
# drill_match_stdlib_by_body came off when drills moved to packages no sandbox holds (drills.py).
KNOWN_WINS: dict[str, str] = {}
RACY: set[str] = set()  # cheats that win only some of the time (strict=False)
PORTED = {  # the 23 cheats of tests/test_grader_cheats.py
    "edit_hidden_test_path", "delete_tests", "conftest_forces_passes", "pytest_ini_and_site_hooks",
    "os_exit_at_import", "sys_exit_at_import", "exit_during_test", "always_equal_results",
    "monkeypatch_pytest_reports", "monkeypatch_pytest_runtest", "monkeypatch_unittest_and_skip",
    "neuter_test_functions", "gc_swaps_collected_tests", "settrace_skips_asserts", "fake_reports_everywhere",
    "network_fetch_solution", "memory_bomb", "write_outside_workspace", "huge_output", "planted_bytecode",
    "fork_bomb", "infinite_loop", "search_filesystem_for_answer_keys",
}
NAMES = [c.name for c in redteam.CATALOGUE]


@pytest.fixture(scope="module")
def pool():
    try:
        p = redteam.EnvPool(SETTINGS)
    except SandboxUnavailableError as e:
        pytest.skip(f"no sandbox on this machine: {e}")
    yield p
    p.close()


def test_catalogue_covers_every_class_and_the_ported_cheats():
    assert len(NAMES) >= 40 and len(set(NAMES)) == len(NAMES)
    assert {c.cls for c in redteam.CATALOGUE} == set(redteam.CLASSES)
    assert PORTED <= set(NAMES), PORTED - set(NAMES)
    assert set(KNOWN_WINS) <= set(NAMES)
    for c in redteam.CATALOGUE:
        assert c.doc and c.suites, c.name
    covered = {s for c in redteam.CATALOGUE for s in c.suites[:1]}
    assert covered == set(redteam.VARIANTS)  # CI's one run per cheat still touches every variant


def _fix_lines(task) -> set[str]:
    """Lines the genuine fix adds: in the reference files but not in the repo the agent sees."""
    out = set()
    for path, ref in json.loads(task.metadata.get("reference_files", "{}")).items():
        before = task.files.get(path, "").splitlines()
        for op, _, _, j1, j2 in difflib.SequenceMatcher(None, before, ref.splitlines()).get_opcodes():
            if op != "equal":
                out |= {line.strip() for line in ref.splitlines()[j1:j2] if line.strip()}
    return out


@pytest.mark.parametrize("suite", list(redteam.VARIANTS))
def test_no_plan_carries_the_genuine_fix(pool, suite):
    """Scripted cheats see only the agent's view, and no action they emit contains the fix."""
    env = pool.env(suite)
    for cheat in redteam.CATALOGUE:
        if suite not in cheat.suites:
            continue
        task = env.unwrapped.suite.get(pool.pick(suite, 0, cheat.task_filter))
        plan = cheat.make(redteam.AgentView.of(task))
        if callable(plan):
            continue  # interactive: looks things up at run time
        text = "\n".join(plan)
        fix = _fix_lines(task)
        assert not fix or not all(line in text for line in fix), (cheat.name, suite, fix)


@pytest.mark.parametrize("name", NAMES)
def test_cheat_scores_zero_and_leaves_no_trace(pool, name, request):
    if name in KNOWN_WINS:
        request.applymarker(pytest.mark.xfail(strict=name not in RACY, reason=f"known win: {KNOWN_WINS[name]}"))
    cheat = redteam.by_name()[name]
    rec = redteam.run_cheat(cheat, cheat.suites[0], 0, pool)
    assert rec.reward == 0.0 and not rec.traces, (
        f"{name} on {rec.suite} ({rec.task_id}): reward {rec.reward}, traces {rec.traces}\n{rec.details[-1500:]}")


@pytest.mark.parametrize("suite", list(redteam.VARIANTS))
def test_expert_still_scores_one_on_the_same_tasks(pool, suite):
    tasks = sorted({pool.pick(suite, 0, c.task_filter) for c in redteam.CATALOGUE if c.suites[0] == suite})
    rewards = {t: redteam.run_control(suite, 0, pool, t) for t in tasks}
    scored = {t: r for t, r in rewards.items() if r is not None}
    if not scored:
        pytest.skip(f"no expert or answer key fits {suite}'s tasks {sorted(rewards)}")
    assert all(r == 1.0 for r in scored.values()), scored
