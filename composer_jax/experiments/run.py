"""Run an experiment from its config file: every setting is in the file, the command names only
the file, the workdir and where the record goes (and, for another seed, `--config.seed=N`).

    python -m composer_jax.experiments.run --config configs/rl_longhorizon.py --workdir runs/rl_longhorizon \
        --out benchmarks/results/rl_longhorizon.json

Stages, each left as WORKDIR/stages/<stage>.json with the identity of the config parts it
depends on, and reused by a rerun whose parts are the same (a stage of other parts stops the run
before any work, naming the first field that differs):
  1. tokenizer   unless rl.tokenizer names one: a BPE on the suite's agent texts
                 (data.tokenizer_agent_tasks expert episodes, data.tokenizer_agent_repeat times)
  2. sft runs    each one an arm or a policy needs (rl.train.run_sft: sft.copy_warmup steps of
                 copy drills, then the expert's demonstrations)
  3. arms        RL from their SFT run (rl.train.run_rl, resumable from its checkpoints)
  4. evaluations every policy on every held-out set it plays: the same tasks and the same
                 sampling keys (seeds.eval) for all, outcomes kept, so each pair compares
                 episode by episode; cached per (set, policy) under WORKDIR/evals/
  5. the record  one schema for every experiment (experiments/records.py), rewritten after every
                 evaluation, with a plot of pass rate by set and one rendered transcript beside it
`experiment.only=ARM` (the configs' `:ARM` variants) stops after that arm: arms can train side by
side in one workdir (a stage being built by another process is waited for, not built twice).
Pool the records of several seeds with `python -m composer_jax.experiments.pool`.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import fcntl
import hashlib
import json
import pathlib
import sys
import time

from composer_jax import memory_aware_cpu_schedule
from composer_jax.config_loading import load_config, split_overrides
from composer_jax.errors import ConfigError
from composer_jax.experiments import records
from composer_jax.experiments.config import ExperimentConfig

# Rollout fields that fix the shapes of the engine's compiled programs: every evaluation shares
# one engine, so a set or a policy may not change them.
ENGINE_FIELDS = ("window", "slots", "turn_budget", "summary_budget", "prefill_buckets")
# rl.* fields that SFT reads (its demonstrations' envs, the row length; the tokenizer counts by
# its stage's identity, not its path, so a workdir can move)
SFT_RL_FIELDS = ("env_id", "suite_options", "env_max_turns", "reward_mode", "system_prompt", "row_len")
# What never changes what a stage trains: the config's name (a variant's label), evaluation
# sampling, the pipeline's final evaluation, cloud launch, where envs run (local and Ray fleets
# give the same episodes)
NOT_TRAINING = ("name", "experiment", "eval_rollout", "pipeline", "launch", "fleet")


def _plain(config) -> dict:
    return json.loads(config.to_json_best_effort(sort_keys=True))


def _digest(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def first_difference(a, b, path: str = "") -> str:
    """The first dotted key at which two plain config trees differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                return first_difference(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}.{key}" if path else key)
        return ""
    return f"{path}: {a!r} there, {b!r} here"


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    """One process at a time builds a stage (arms run side by side share the workdir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stage(work: pathlib.Path, name: str, parts: dict, produce, log=print) -> dict:
    """`produce()`'s result, or the one a finished stage of the same `parts` left; a finished
    stage of other parts is a ConfigError naming the first field that differs."""
    path, started = work / "stages" / f"{name}.json", work / "stages" / f"{name}.started"
    identity, plain = _digest(parts), json.loads(json.dumps(parts, default=str))
    with _locked(path):
        for marker, verb in ((path, "finished"), (started, "began")):  # an interrupted stage resumes
            if marker.exists() and (done := json.loads(marker.read_text()))["identity"] != identity:
                raise ConfigError(f"{marker}: stage {name!r} {verb} under another config "
                                  f"({first_difference(done['parts'], plain)}); use a fresh --workdir, or "
                                  f"remove {work / 'stages' / name}.* and what the stage wrote ({work / name})")
        if path.exists():
            log(f"{name}: finished earlier ({path})")
            return json.loads(path.read_text())
        log(f"{name}: running")
        records.write_atomic(started, dict(identity=identity, parts=parts))
        t = time.perf_counter()
        result = produce()
        done = dict(stage=name, identity=identity, seconds=time.perf_counter() - t, result=result, parts=parts)
        records.write_atomic(path, done)
        return done


def train_parts(config, rl_fields=None, **extra) -> dict:
    """What a training stage depends on: the config without the blocks that train nothing
    (rl reduced to `rl_fields` when given), plus `extra`."""
    plain = {k: v for k, v in _plain(config).items() if k not in NOT_TRAINING}
    if rl_fields is not None:
        plain["rl"] = {k: plain["rl"][k] for k in rl_fields}
    return dict(plain, **extra)


def tokenizer_stage(c, work: pathlib.Path, log=print) -> dict:
    """rl.tokenizer when the config names one; else a BPE trained here on the suite's agent
    texts (TaskSuite.tokenizer_texts: every secret word, path and tool call the policy meets)."""
    if c.rl.tokenizer:
        return dict(result=dict(path=str(c.rl.tokenizer)), identity=f"given:{c.rl.tokenizer}", seconds=0.0)
    path = work / "tokenizer.json"
    parts = dict(vocab_size=c.model.vocab_size, tasks=c.data.tokenizer_agent_tasks,
                 repeat=c.data.tokenizer_agent_repeat,
                 rl={k: _plain(c)["rl"][k] for k in ("env_id", "suite_options", "system_prompt")})

    def produce():
        from composer_jax.data.tokenizer import Tokenizer
        from composer_jax.rl.envs import agent_texts

        texts = agent_texts(c.rl, int(c.data.tokenizer_agent_tasks)) * int(c.data.tokenizer_agent_repeat)
        Tokenizer.train(texts, vocab_size=int(c.model.vocab_size)).save(path)
        return dict(path=str(path), texts=len(texts))

    return stage(work, "tokenizer", parts, produce, log)


def sft_config(c, overrides: dict):
    """The config an SFT run of experiment.sft trains under: its rollout.* overrides, and its
    sft.* ones under the key "sft"."""
    cs, rollout = copy.deepcopy(c), dict(overrides)
    cs.sft.update(rollout.pop("sft", {}))
    cs.rollout.update(rollout)
    return cs


def sft_stage(c, work: pathlib.Path, name: str, overrides: dict, tok_identity: str, log=print) -> dict:
    from composer_jax.rl.train import run_sft

    cs = sft_config(c, overrides)
    parts = train_parts(cs, SFT_RL_FIELDS, tokenizer=tok_identity)
    demos = work / f"demos_{name}_{_digest(parts)}.pkl"  # the demonstrations of these parts only
    return stage(work, name, parts, lambda: run_sft(cs, work / name, demos_cache=demos, log=log), log)


def arm_config(c, work: pathlib.Path, arm):
    ca = copy.deepcopy(c)
    ca.rl.init_from = str(work / arm.sft / "checkpoints")
    ca.rl.update(arm.rl)
    ca.rollout.update(arm.rollout)
    return ca


def arm_stage(c, work: pathlib.Path, name: str, arm, sft_identity: str, log=print) -> dict:
    from composer_jax.config_schema import validate
    from composer_jax.rl.train import run_rl

    ca = arm_config(c, work, arm)
    validate(ca)

    def produce():
        out = run_rl(ca, work / name, log=lambda line: log(f"[{name}] {line}"))
        evals = {str(step): {k: v for k, v in ev.items() if k not in ("passed", "transcript")}
                 for step, ev in out["evals"].items()}
        return dict(steps=int(ca.rl.steps), metrics=out["metrics"], counts=out["counts"], evals=evals,
                    train_log=records.train_log(work / name))

    parts = train_parts(ca, sft=sft_identity, arm=dataclasses.asdict(arm))
    for path in ("init_from", "tokenizer"):  # in the SFT run's identity (a workdir can move)
        parts["rl"].pop(path)
    return stage(work, name, parts, produce, log)


def eval_set_rl(c, ev):
    """rl.* for a held-out set: rl.env_id's suite (its options merged with the set's) or another
    suite (the set's options alone), with the set's rl overrides."""
    rl = copy.deepcopy(c.rl)
    with rl.unlocked():
        if ev.env_id and ev.env_id != c.rl.env_id:
            rl.env_id, rl.suite_options = ev.env_id, dict(ev.suite_options)
        else:
            rl.suite_options = {**dict(c.rl.suite_options), **ev.suite_options}
        rl.update(ev.rl)
    return rl


def check_engine_fields(exp: ExperimentConfig) -> None:
    for kind, items in (("evaluations", exp.evaluations), ("policies", exp.policies)):
        for name, item in items.items():
            if shaped := sorted(set(item.rollout) & set(ENGINE_FIELDS)):
                raise ConfigError(f"experiment.{kind}.{name}.rollout.{shaped[0]}: every evaluation runs on one engine, "
                                  f"whose {', '.join(ENGINE_FIELDS)} are rollout.*'s; set it there")


class Evaluator:
    """One engine (compiled once) that plays each policy's params on each held-out set."""

    def __init__(self, c, first_checkpoint: str):
        from composer_jax.rl.envs import RunEnvs
        from composer_jax.rl.train import build

        self.c = c
        self.envs = RunEnvs(c)
        self.run = build(c, None, init_from=first_checkpoint)
        self.run.loop.close()
        self.loaded = None

    def __call__(self, checkpoint: str, rl_cfg, ids: list[str], rollout: dict) -> dict:
        import jax

        from composer_jax.rl.harness_loop import HarnessLoop
        from composer_jax.rl.learner import evaluate
        from composer_jax.rl.train import eval_sampling, load_params, make_loop
        from composer_jax.seeds import seeds

        run = self.run
        if self.loaded != checkpoint:
            with jax.set_mesh(run.mesh):
                run.engine.set_params(load_params(run.config, checkpoint, run.model_cfg, run.mesh, run.tx))
            self.loaded = checkpoint
        c = copy.deepcopy(self.c)
        with c.unlocked():
            c.rl = rl_cfg  # the set's rl.*: its harness (rl.harness) plays it
        loop = make_loop(c, run.engine, run.tokenizer, self.envs.factory(rl_cfg, "validation"))
        loop.rollout = dataclasses.replace(loop.rollout, **rollout)
        t = time.perf_counter()
        try:
            with jax.set_mesh(run.mesh):
                ev = evaluate(loop, ids, seed=seeds(self.c).eval, outcomes=True, sampling=eval_sampling(self.c))
        finally:
            loop.close()
        if isinstance(loop, HarnessLoop):  # a third-party harness: how its sessions ended, commands run
            ev["harness"] = dict(loop.stats)
        return dict(ev, wall_s=time.perf_counter() - t)

    def close(self) -> None:
        self.envs.close()


def by_kind(rl_cfg, ids: list[str], passed: list[int]) -> dict | None:
    """Pass rates per task kind (a task's `operator` metadata: the bug's mutation), or None."""
    from composer_jax.rl.train import local_suite

    suite = local_suite(rl_cfg)
    kinds = [suite.get(t).metadata.get("operator") for t in ids]
    if None in kinds:
        return None
    tally: dict[str, list[int]] = {}
    for kind, ok in zip(kinds, passed, strict=True):
        tally.setdefault(kind, []).append(int(ok))
    return {k: dict(passed=sum(v), tasks=len(v), pass_rate=sum(v) / len(v)) for k, v in sorted(tally.items())}


def expert_windows(c, rl_cfg, ids: list[str], rollout: dict) -> float | None:
    """The scripted expert's transcript length on a set's first tasks, in windows (the set's
    real horizon), under the set's rollout caps; None when the suite has no expert for them."""
    from composer_jax.rl.train import demonstrations

    cx = copy.deepcopy(c)
    cx.rl = rl_cfg
    cx.rollout.update(rollout)  # the set's turn and segment caps: the training ones cut a long chain short
    try:
        episodes = demonstrations(cx, ids[:2])
    except Exception as e:  # noqa: BLE001 - a suite without an expert (LeetCode) has no horizon to measure
        print(f"expert windows: none ({type(e).__name__}: {e})", flush=True)
        return None
    return sum(ep.transcript_tokens for ep in episodes) / len(episodes) / int(c.rollout.window)


def checkpoint_dir(work: pathlib.Path, exp: ExperimentConfig, policy) -> str:
    runs = set(exp.sft) | set(exp.arms)
    return str(work / policy.checkpoint / "checkpoints") if policy.checkpoint in runs else policy.checkpoint


def evaluations(c, exp: ExperimentConfig, work: pathlib.Path, identities: dict[str, str], on_point, log=print) -> dict:
    """Every policy on every set it plays, cached per (set, policy): a cached result whose
    identity (checkpoint, set, policy, sampling, seed) differs is evaluated again."""
    from composer_jax.rl.envs import sample_ids

    out, evaluator = {}, None
    try:
        for set_name, ev in exp.evaluations.items():
            rl_cfg = eval_set_rl(c, ev)
            ids = sample_ids(rl_cfg, "validation", ev.tasks)
            point = out[set_name] = dict(x=ev.x, tasks=len(ids), env_id=rl_cfg.env_id,
                                         suite_options=dict(rl_cfg.suite_options), policies={})
            windows = work / "evals" / set_name / "expert_windows.json"
            if not windows.exists():
                records.write_atomic(windows, dict(windows=expert_windows(c, rl_cfg, ids, ev.rollout)))
            point["expert_windows"] = json.loads(windows.read_text())["windows"]
            for name in exp.plays(set_name):
                policy = exp.policies[name]
                ckpt = checkpoint_dir(work, exp, policy)
                parts = dict(checkpoint=identities.get(policy.checkpoint, ckpt), policy=dataclasses.asdict(policy),
                             eval_set=dataclasses.asdict(ev), ids=ids, seed=c.seed, model=_plain(c)["model"],
                             rollout=_plain(c)["rollout"], eval_rollout=_plain(c).get("eval_rollout"),
                             tokenizer=identities["tokenizer"],
                             rl={k: v for k, v in _plain(rl_cfg).items() if k in SFT_RL_FIELDS + ("harness",)})
                cached = work / "evals" / set_name / f"{name}.json"
                if cached.exists() and json.loads(cached.read_text())["identity"] == _digest(parts):
                    result = json.loads(cached.read_text())["result"]
                else:
                    if evaluator is None:
                        evaluator = Evaluator(c, ckpt)
                    result = evaluator(ckpt, rl_cfg, ids, {**ev.rollout, **policy.rollout})
                    result["by_kind"] = by_kind(rl_cfg, ids, result["passed"])
                    records.write_atomic(cached, dict(identity=_digest(parts), result=result))
                point["policies"][name] = result
                log(f"{set_name} {name}: pass {result['pass_rate']:.3f} [{result['ci95_low']:.3f}, "
                    f"{result['ci95_high']:.3f}] reward {result['reward']:.3f} n={result['n']} "
                    f"({result['wall_s']:.0f} s)")
                on_point(out)
    finally:
        if evaluator is not None:
            evaluator.close()
    return out


def run_experiment(c, work: pathlib.Path, out: str, command: list[str], log=print) -> dict | None:
    """Every stage of the experiment in `c` (see the module docstring); the record, or None when
    `experiment.only` stops after one arm."""
    from composer_jax.config_schema import validate

    validate(c)
    exp = ExperimentConfig.from_config(c.experiment)
    for overrides in exp.sft.values():  # a bad SFT run is named before any stage runs
        validate(sft_config(c, overrides))
    check_engine_fields(exp)
    work.mkdir(parents=True, exist_ok=True)
    given = c  # the recipe as written: the record's config (rl.tokenizer below is a path in this workdir)
    c = copy.deepcopy(c)
    tok = tokenizer_stage(c, work, log)
    c.rl.tokenizer = tok["result"]["path"]
    done = {"tokenizer": tok}
    arms = [exp.only] if exp.only else list(exp.arms)
    needed = {exp.arms[a].sft for a in arms}
    if not exp.only:
        needed |= {p.checkpoint for p in exp.policies.values() if p.checkpoint in exp.sft}
    for name in exp.sft:
        if name in needed:
            done[name] = sft_stage(c, work, name, exp.sft[name], tok["identity"], log)
    for name in arms:
        done[name] = arm_stage(c, work, name, exp.arms[name], done[exp.arms[name].sft]["identity"], log)
    if exp.only:
        log(f"experiment.only={exp.only!r}: trained; the full config evaluates it beside the other arms")
        return None
    identities = {name: d["identity"] for name, d in done.items()}

    def save(points):
        rec = records.experiment_record(given, exp, command, done, points, tokenizer=c.rl.tokenizer)
        records.write_result(out, rec, quiet=True)
        records.write_extras(out, rec, points, exp)
        return rec

    rec = save(evaluations(c, exp, work, identities, on_point=save, log=log))
    print(json.dumps(records.summary(rec), indent=1), flush=True)
    return rec


def main(argv=None):
    memory_aware_cpu_schedule()  # before jax starts its backend
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="path.py[:variant] with an `experiment` block")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", default="", help="the record (default WORKDIR/result.json)")
    argv = sys.argv[1:] if argv is None else list(argv)
    rest, overrides = split_overrides(argv)
    args = p.parse_args(rest)
    try:
        c = load_config(args.config, overrides)
        if "experiment" not in c:
            raise ConfigError(f"--config {args.config}: no `experiment` block (configs/rl_*.py have one)")
        run_experiment(c, pathlib.Path(args.workdir), args.out or str(pathlib.Path(args.workdir) / "result.json"),
                       ["python -m composer_jax.experiments.run", *argv])
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
