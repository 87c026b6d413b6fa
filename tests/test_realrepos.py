"""RealRepos: a package's own test suite validated, bugs planted and kept only when a test catches
them, tasks graded by grader v2 (the expert's revert scores 1, doing nothing 0), and bad sources
skipped with a reason. The package is a small real-layout sdist made here, so CI fetches nothing
(the pinned registry packages are built by `python -m environments.suites.realrepos`)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import gymnasium as gym
import pytest

import environments  # noqa: F401 - registers the envs
from composer_jax.sandbox import SandboxUnavailableError, get_backend
from environments.experts import expert_plan, null_plan, run_plan
from environments.suites import mutations, realrepos_build, realrepos_bundle
from environments.suites import realrepos_pins as pins
from environments.suites import realrepos_sources as sources

CORE = '''\
def _make_default():
    return 3


DEFAULT = _make_default()  # runs when the tests are collected: never mutated


def clamp(x, lo=0, hi=10):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def words(text, sep=" ", limit=None):
    parts = [w for w in text.split(sep) if w]
    if limit is not None:
        parts = parts[:limit]
    return parts


def apply(fn, x):
    return fn(x)


def backend():
    try:  # on the host, not in the sandbox runtime
        import numpy  # noqa: F401
    except ImportError:
        return "plain"
    return "numpy"


class Tally:
    def __init__(self):
        self.counts = {}

    def add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]

    def top(self):
        best = None
        for key, n in self.counts.items():
            if best is None or n > self.counts[best]:
                best = key
        return best
'''
TESTS = '''\
import pytest

from cjmini import clamp, mean, words
from cjmini import core


def test_clamp_inside():
    assert clamp(5) == 5


def test_clamp_low():
    assert clamp(-3) == 0 and clamp(-3, lo=-5) == -3


def test_clamp_high():
    assert clamp(12, hi=11) == 11 and clamp(12) == 10


def test_mean():
    assert mean([1, 2, 3]) == 2 and mean([4]) == 4


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_words():
    assert words("a  b c") == ["a", "b", "c"]
    assert words("a,b", sep=",") == ["a", "b"]


def test_words_limit():
    assert words("a b c", limit=2) == ["a", "b"]


def test_tally():
    t = core.Tally()
    t.add("x")
    t.add("y", 5)
    assert t.add("x", 2) == 3
    assert t.top() == "y"


def test_default():
    assert core._make_default() == 3 and core.DEFAULT == 3


def test_plain_backend():  # green only if the build runs the code in the sandbox's runtime
    assert core.backend() == "plain"


def test_passes_a_function():  # a callback: runs in the judge when the package calls it, gradable
    assert core.apply(lambda s: len(s) * 2, "abc") == 6


def test_passes_type():  # type returns the judge's objects: never crosses, not gradable
    assert core.apply(type, "abc") is str


def test_known_failure():  # fails before any mutation: dropped
    assert clamp(5, lo=6) == 5


@pytest.mark.skip(reason="skipped upstream")
def test_skipped():
    pass
'''
UNCOLLECTABLE = '''\
import cjmini

HERE = cjmini.__file__  # a module attribute the judge's proxies do not give: the module is dropped


def test_here():
    assert HERE
'''


SLOW_S = 3.0
SLOW = f"""\
import time


def test_waits():  # green everywhere, but slow in the judge: its file leaves a task too little of the wall
    time.sleep({SLOW_S})
"""


def _sdist(path, top: str, files: dict[str, str]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _package(cache_dir, name="cjmini", files=None, split="validation") -> sources.Package:
    """A pinned package whose sdist is already in the cache (so fetch reuses it, offline)."""
    files = files if files is not None else {
        "cjmini/__init__.py": "from cjmini.core import clamp, mean, words\n", "cjmini/core.py": CORE,
        "tests/__init__.py": "", "tests/test_core.py": TESTS, "tests/test_paths.py": UNCOLLECTABLE,
        "tests/test_slow.py": SLOW,
        "setup.py": "raise SystemExit('not part of the repo')\n"}
    os.makedirs(sources.sdist_dir(cache_dir), exist_ok=True)
    sha = _sdist(os.path.join(sources.sdist_dir(cache_dir), f"{name}-1.0.tar.gz"), f"{name}-1.0", files)
    return sources.Package(name, "1.0", sha, ("cjmini",), ("tests",), split=split)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    try:
        get_backend("auto")
    except SandboxUnavailableError as e:
        pytest.skip(f"no sandbox: {e}")
    cache_dir = str(tmp_path_factory.mktemp("rr-cache"))
    package = _package(cache_dir)
    with pytest.MonkeyPatch.context() as mp:  # test_core.py takes ~0.3 s in the judge, test_slow.py 3+
        mp.setattr(realrepos_build, "JUDGE_BUDGET_S", SLOW_S / 2)
        return cache_dir, package, realrepos_build.load_packages((package,), cache_dir, workers=2)


def test_validation_keeps_only_tests_green_everywhere(built):
    _, package, out = built
    b = out["packages"][package.label]
    assert out["skipped"] == {}
    green = set(b["green"])
    assert "tests/test_core.py::test_clamp_inside" in green and "tests/test_core.py::test_tally" in green
    assert "tests/test_core.py::test_plain_backend" in green  # the fast path ran in the task's runtime
    assert b["dropped_tests"] == {"failed_or_skipped": 2, "not_gradable": 1, "module_not_collectable": 1,
                                  "judge_too_slow": 1}
    assert b["judge_seconds"]["tests/test_slow.py"] > SLOW_S > b["judge_seconds"]["tests/test_core.py"]
    assert "tests/test_core.py::test_passes_a_function" in green  # a callback of the test
    assert not green & {"tests/test_core.py::test_known_failure", "tests/test_core.py::test_passes_type",
                        "tests/test_paths.py::test_here", "tests/test_core.py::test_skipped",
                        "tests/test_slow.py::test_waits"}


def test_bugs_are_caught_by_green_tests_and_distinct(built):
    _, package, out = built
    b = out["packages"][package.label]
    records = b["records"]
    assert len(records) >= 8
    for r in records:
        assert r["failing"] and set(r["failing"]) <= set(b["green"]), r
        assert r["function"] != "_make_default"  # ran during collection: left alone
        assert r["source"] != CORE and r["report"]
        assert r["line"] >= 1
    assert len({frozenset(r["failing"]) for r in records}) == len(records)  # deduplicated by failing set
    assert [r["task_id"] for r in records] == [realrepos_build.task_id(package, r["operator"], r["source"])
                                               for r in records]
    assert len({r["task_id"] for r in records}) == len(records)
    kinds = {r["operator"] for r in records}
    assert {"remove_branch", "drop_return"} & kinds, kinds
    assert any("+" in k for k in kinds)  # two-bug tasks
    assert sum(b["bugs_kept"].values()) <= sum(b["bugs_tried"].values())


def test_cached_build_is_reused(built, monkeypatch):
    cache_dir, package, out = built

    def no_rebuild(*a, **k):
        raise AssertionError("rebuilt a cached package")

    monkeypatch.setattr(realrepos_build, "build_package", no_rebuild)
    assert realrepos_build.load_packages((package,), cache_dir) == out


def test_bundle_carries_a_build_to_a_fresh_cache(built, tmp_path, monkeypatch):
    cache_dir, package, out = built
    bundle = str(tmp_path / "rr.tar.gz")
    manifest = realrepos_bundle.export_bundle(bundle, (package,), cache_dir)
    assert list(manifest["packages"]) == [package.label]
    fresh = str(tmp_path / "fresh")
    assert realrepos_bundle.import_bundle(bundle, (package,), fresh) == dict(imported=[package.label], skipped={})

    def no_rebuild(*a, **k):
        raise AssertionError("rebuilt an imported package")

    monkeypatch.setattr(realrepos_build, "build_package", no_rebuild)
    assert realrepos_build.load_packages((package,), fresh) == out
    offline = ("--no-index",)  # the imported sdist is the pinned one: nothing to download
    assert sources.fetch(package, fresh, pip_args=offline).startswith(sources.sdist_dir(fresh))
    with pytest.raises(FileNotFoundError, match="cjother-1.0"):  # built nowhere: named, nothing written
        realrepos_bundle.export_bundle(str(tmp_path / "none.tar.gz"), (_package(cache_dir, "cjother"),), cache_dir)
    assert not (tmp_path / "none.tar.gz").exists()


def _bundle(path, manifest: dict, files: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {realrepos_bundle.MANIFEST: json.dumps(manifest).encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_bundle_import_trusts_nothing_it_cannot_check(built, tmp_path, capsys):
    cache_dir, package, _ = built
    good = str(tmp_path / "good.tar.gz")
    entry = realrepos_bundle.export_bundle(good, (package,), cache_dir)["packages"][package.label]
    with tarfile.open(good) as tar:
        files = {n: tar.extractfile(n).read() for n in (entry["build"], entry["sdist"])}
    fresh = tmp_path / "fresh"
    stale = dict(entry, build=entry["build"].replace(package.label, package.label + "-0"))
    tampered = {**files, entry["sdist"]: files[entry["sdist"]] + b"\0"}
    for manifest, content, why in (
            (dict(packages={package.label: stale}), {stale["build"]: files[entry["build"]],
                                                     entry["sdist"]: files[entry["sdist"]]}, "key differs"),
            (dict(packages={package.label: entry}), tampered, "checksum mismatch"),
            (dict(packages={"cjelse-1.0": entry}), files, "not pinned")):
        got = realrepos_bundle.import_bundle(_bundle(tmp_path / "b.tar.gz", manifest, content), (package,), str(fresh))
        assert got["imported"] == [] and why in next(iter(got["skipped"].values()))
        assert why in capsys.readouterr().err
    escape = dict(entry, sdist="realrepos/sdists/../../../escaped.tar.gz")
    with pytest.raises(ValueError, match="not a pinned sdist"):
        realrepos_bundle.import_bundle(_bundle(tmp_path / "b.tar.gz", dict(packages={package.label: escape}),
                                               {entry["build"]: files[entry["build"]], escape["sdist"]: b"x"}),
                                       (package,), str(fresh))
    link = tmp_path / "link.tar.gz"
    with tarfile.open(link, "w:gz") as tar:  # the build a symlink out of the cache: refused
        data = json.dumps(dict(packages={package.label: entry})).encode()
        info = tarfile.TarInfo(realrepos_bundle.MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(entry["build"])
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(ValueError, match="not a regular file"):
        realrepos_bundle.import_bundle(str(link), (package,), str(fresh))
    assert not any(p.is_file() for p in fresh.rglob("*"))  # nothing landed from any of them


def test_env_expert_scores_one_and_null_zero(built, monkeypatch):
    cache_dir, package, _ = built
    monkeypatch.setattr(pins, "PACKAGES", (package,))
    env = gym.make("composer/RealRepos-v0", split="validation", max_turns=12, suite_options={"cache_dir": cache_dir})
    suite = env.unwrapped.suite
    ids = suite.task_ids("validation")
    assert ids and suite.task_ids("train") == []  # the package is held out whole
    task = suite.get(ids[0])
    failing = json.loads(task.metadata["fail_to_pass"])
    assert all(f"FAILED {n}" in task.prompt for n in failing)  # a CI failure report, not the line
    assert "tests/test_core.py" in task.files and task.hidden_tests["tests/test_core.py"] == TESTS
    assert set(failing) < set(task.graded_tests)  # PASS_TO_PASS graded too
    for task_id in ids[:6]:
        assert run_plan(env, expert_plan, task_id=task_id).reward == 1.0, task_id
        assert run_plan(env, null_plan, task_id=task_id).reward == 0.0, task_id
    env.close()


def test_bad_sources_are_skipped_with_a_reason(tmp_path, capsys):
    cache_dir = str(tmp_path)
    no_tests = _package(cache_dir, "cjnotests", {"cjmini/__init__.py": "X = 1\n"})
    unsafe = _package(cache_dir, "cjunsafe", {"cjmini/__init__.py": "", "../evil.py": "", "tests/test_a.py": ""})
    # a cached copy that does not match its pin is removed and fetched again: from no registry
    mismatch = sources.Package("cjmismatch", "1.0", "0" * 64, ("cjmini",), ("tests",))
    with open(os.path.join(sources.sdist_dir(cache_dir), "cjmismatch-1.0.tar.gz"), "wb") as f:
        f.write(b"tampered")
    offline = ("--isolated", "--index-url", "http://127.0.0.1:9/simple", "--retries", "0", "--timeout", "1")
    with pytest.raises(sources.SourceError, match="no package could be built") as e:
        realrepos_build.load_packages((no_tests, unsafe, mismatch), cache_dir, pip_args=offline)
    text = str(e.value)
    assert "cjnotests-1.0: its sdist ships no tests" in text
    assert "unsafe member path" in text
    assert "cjmismatch-1.0: pip download failed" in text
    assert not os.path.exists(os.path.join(sources.sdist_dir(cache_dir), "cjmismatch-1.0.tar.gz"))
    assert "RealRepos: skipped cjnotests-1.0" in capsys.readouterr().err


def test_real_bug_mutations_are_opt_in():
    src = "def f(x, n=1):\n    if x < 0:\n        x = 0\n    y = x + n\n    return y\n"
    plain = {m.operator for m in mutations.mutants(src)}
    real = {m.operator: m.source for m in mutations.mutants(src, real_bugs=True)}
    assert not plain & {"wrong_default", "drop_return", "remove_branch"}  # BugFix's set is unchanged
    assert real["wrong_default"].startswith("def f(x, n=2):")
    assert real["drop_return"].endswith("    y\n")
    assert "if x < 0" not in real["remove_branch"]


SCAN = r'''
import json, os, sys, tarfile, zipfile
dirs, modules, stdlib = json.loads(sys.argv[1])
def copy(path, loose):
    parts = path.split("/")
    if any(d in parts[:-1] for d in dirs):
        return True  # a directory named like a pinned package
    return parts[-1] in modules and not (loose and path.startswith(tuple(stdlib)))  # stdlib's own parse.py
hits = []
for dirpath, dirnames, filenames in os.walk("/"):
    if dirpath.startswith(("/proc", "/sys", "/dev", "/workspace")):
        dirnames[:] = []
        continue
    for name in filenames:
        full = os.path.join(dirpath, name)
        if name.endswith(".py") and copy(full, True):
            hits.append(full)
        elif name.endswith((".whl", ".zip", ".egg", ".pyz", ".tar.gz", ".tgz")):
            try:
                arc = tarfile.open(full) if name.endswith(("gz", "tgz")) else zipfile.ZipFile(full)
                members = arc.getnames() if isinstance(arc, tarfile.TarFile) else arc.namelist()
            except Exception:
                continue
            hits += [f"{full}:{m}" for m in members if m.endswith(".py") and copy("/" + m, False)]
print(json.dumps(hits))
'''


@pytest.mark.slow
def test_no_pinned_package_is_readable_in_the_sandbox():
    """The answer-key class for this suite: a pristine copy of a pinned package anywhere the
    sandbox can read (site-packages, wheels bundled with the interpreter, SDKs that vendor them)
    would let a policy restore the original instead of fixing the bug."""
    import sys
    import sysconfig

    from composer_jax.sandbox import runtime
    from composer_jax.sandbox.base import Limits
    try:
        backend = get_backend("auto")
    except SandboxUnavailableError as e:
        pytest.skip(f"no sandbox: {e}")
    dirs = sorted({c.rpartition("/")[2] for p in pins.PACKAGES for c in p.code if not c.endswith(".py")})
    modules = sorted({c.rpartition("/")[2] for p in pins.PACKAGES for c in p.code if c.endswith(".py")})
    stdlib = sorted({os.path.realpath(sysconfig.get_paths()["stdlib"]), f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}"})
    rt = runtime.build(())
    ws = backend.create({"scan.py": SCAN}, rt)
    try:
        res = backend.run(ws, [rt.python, "scan.py", json.dumps([dirs, modules, stdlib])],
                          Limits(wall_s=300, cpu_s=300, max_output_bytes=8 << 20))
    finally:
        backend.destroy(ws)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout) == []


def test_pins_keep_tests_where_the_agent_cannot_change_them():
    """Every test path of a pin is one the grader restores from the pristine repo (a test helper
    the submission could replace would let it decide its own verdict), and the split is by package."""
    from composer_jax.grading.submission import protected_reason
    for p in pins.PACKAGES:
        for t in p.tests:
            assert protected_reason(t if t.endswith(".py") else f"{t}/helpers.py"), (p.label, t)
        assert len(p.sha256) == 64 and p.split in ("train", "validation")
    assert len(pins.PACKAGES) >= 10
    assert {p.split for p in pins.PACKAGES} == {"train", "validation"}


def test_a_judge_run_whose_channel_broke_is_judged_again(monkeypatch):
    """A broken channel fails every later test; validation must not count those as not
    gradable: it judges again and keeps the try with the most passes."""
    from composer_jax.grading.task import GradeResult
    tries = iter([GradeResult(0.0, 1, 3, {}, f"x\n{realrepos_build.BROKEN}: the submission's process has exited"),
                  GradeResult(1.0, 3, 3, {}, "fine")])
    monkeypatch.setattr(realrepos_build.grader, "grade", lambda *a, **k: next(tries))
    repo = sources.SourceRepo(pins.PACKAGES[0], {}, ())
    assert realrepos_build._judged(None, repo, None).passed == 3


def _singles(n: int) -> list[dict]:
    """n single-bug records, one per function of one file: function i's `+ 1` made `- 1`."""
    original = "".join(f"def f{i}(x):\n    return x + 1\n\n\n" for i in range(n))
    out = []
    for i in range(n):
        start = original.index(f"def f{i}(") + original[original.index(f"def f{i}("):].index("+")
        edits = (mutations.Edit(start, start + 1, b"-"),)
        out.append({"path": "m.py", "function": f"f{i}", "operator": "wrong_operator", "line": 2 + 4 * i,
                    "edits": edits, "source": mutations.apply_edits(original, edits), "original": original,
                    "tests": [f"tests/test_m.py::test_f{i}"]})
    return out


def test_two_bug_pairs_survive_a_lost_single():
    """A rebuild that keeps one single fewer (a mutant near its time limit on a busy machine)
    keeps every other pair it drew: pairs are ranked by a hash of the two bugs, not shuffled."""
    singles = _singles(12)
    pairs = lambda found: {frozenset(d["function"].split(", "))
                           for d in realrepos_build._doubles(found, len(found), seed=7)}
    before = pairs(singles)
    assert len(before) == 12
    for lost in range(12):
        after = pairs(singles[:lost] + singles[lost + 1:])
        kept = {p for p in before if f"f{lost}" not in p}
        assert len(kept - after) <= 1, (lost, kept - after)
        assert not {p for p in after if f"f{lost}" in p}
    assert pairs(singles[::-1]) == before  # the order singles were found in does not matter


def test_task_ids_name_the_bug_not_its_place():
    package = sources.Package("pkg", "1.0", "0" * 64, ("pkg",), ("tests",))
    a, b = _singles(2)
    assert realrepos_build.task_id(package, "wrong_operator", a["source"]) == \
        realrepos_build.task_id(package, "wrong_operator", a["source"])
    assert realrepos_build.task_id(package, "wrong_operator", a["source"]) != \
        realrepos_build.task_id(package, "wrong_operator", b["source"])


def test_wall_backstop_grows_with_the_load():
    from environments.suites import pytest_runner
    assert pytest_runner.wall_backstop(3.0, load=0.5, cpus=2) == 11.0
    assert pytest_runner.wall_backstop(3.0, load=8.0, cpus=2) == 44.0


def test_files_that_judge_alone_but_not_together_are_dropped(monkeypatch):
    """A task grades its files together in one judge: a file that collects alone but not beside
    the others (python-slugify's test_release.py did, before the judge kept rebound submodule
    names) is left out, and a test counts only if it passes alone and together."""
    from composer_jax.grading.task import GradeResult
    files = {"tests/test_a.py": "", "tests/test_b.py": "", "tests/test_c.py": ""}
    repo = sources.SourceRepo(sources.Package("pkg", "1.0", "0" * 64, ("pkg",), ("tests",)), files, tuple(files))
    nodes = ["tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_b.py::t", "tests/test_c.py::t"]

    def judged(task, repo, backend):
        graded = realrepos_build.grader.graded_files(task)
        if len(graded) > 1 and "tests/test_b.py" in graded:
            return GradeResult(0.0, 0, 1, {}, "", "hidden tests could not be collected: tests/test_b.py: boom")
        together = len(graded) > 1
        return GradeResult(1.0, 1, 1, {n: not (together and n.endswith("t2")) for n in task.graded_tests}, "")

    monkeypatch.setattr(realrepos_build, "_judged", judged)
    tests, uncollectable, seconds, error = realrepos_build._judge_outcomes(repo, nodes, None)
    assert uncollectable == ["tests/test_b.py"] and error == "" and set(seconds) == set(files)
    assert tests == {"tests/test_a.py::t1": True, "tests/test_a.py::t2": False, "tests/test_b.py::t": False,
                     "tests/test_c.py::t": True}
