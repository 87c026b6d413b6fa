"""RL (and its SFT warm start) from the command line.

    python -m composer_jax.rl.train --config configs/tiny.py:test --workdir runs/rl [--mode sft|rl] \
        [--config.rl.steps=40 --config.rl.optim.steps=40 ...] \
        [--config.fleet.backend=ray --config.fleet.rl_mode=async]

`--mode sft` trains on scripted-expert demonstrations and checkpoints to WORKDIR/checkpoints;
`--mode rl` starts from `rl.init_from` (a checkpoints directory, e.g. an SFT run's) or a fresh
model, and resumes exactly from WORKDIR/checkpoints when it holds one (params, optimiser, RNG,
task cursor and buffered rollouts). Metrics go to WORKDIR/metrics.jsonl, TensorBoard and the
console. Envs (demonstrations, rollouts, evaluations) run on `fleet.backend` (rl/envs.py);
`fleet.rl_mode="async"` generates step t+1's rollouts while step t's update runs
(fleet/learner_bridge.py). Seeds derive from the root `seed` (composer_jax/seeds.py).
"""
from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import json
import pathlib
import pickle
import sys
import time

import jax
import numpy as np
from flax import nnx

from composer_jax import memory_aware_cpu_schedule
from composer_jax.checkpoints import store
from composer_jax.config_loading import apply_override, load_config, split_overrides
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetConfig, FleetUnavailableError
from composer_jax.fleet.learner_bridge import run_learner
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model, create_sharded
from composer_jax.rl import harness_demos
from composer_jax.rl import judge as judge_lib
from composer_jax.rl import sft
from composer_jax.rl.agent import AgentLoop
from composer_jax.config_schema import validate
from composer_jax.rl.config import EvalRolloutConfig, SFTConfig
from composer_jax.rl.cursor import RunCursor
from composer_jax.rl.engine_host import RolloutEngine, TeacherForcedOnly
from composer_jax.rl.envs import RunEnvs, local_factory, sample_ids, task_ids
from composer_jax.rl.learner import Learner, evaluate, full_state, wilson
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.seeds import seeds
from composer_jax.sharding import make_mesh
from composer_jax.train.checkpoint import Checkpointer, abstract_train_state
from composer_jax.train.metrics import MetricsWriter
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state


def rollout_config(config, **overrides) -> RolloutConfig:
    return dataclasses.replace(RolloutConfig.from_config(config.rollout), **overrides)


def eval_sampling(config) -> tuple[float, float]:
    """(temperature, top_p) of every evaluation: `eval_rollout`, declared apart from the training
    rollouts' `rollout.temperature` / `rollout.top_p`."""
    e = EvalRolloutConfig.from_config(config.get("eval_rollout", {}))
    return e.temperature, e.top_p


def load_tokenizer(rl_cfg) -> Tokenizer:
    """rl.tokenizer's tokenizer.json; an imported model's (a `special_text.json` beside it) comes
    with its chat template, so the harness speaks the template the model was tuned on."""
    return store.load_tokenizer(rl_cfg.tokenizer) if rl_cfg.tokenizer else Tokenizer.byte_level()


@dataclasses.dataclass
class Run:
    config: object
    model_cfg: ModelConfig
    mesh: jax.sharding.Mesh
    tokenizer: Tokenizer
    graphdef: nnx.GraphDef
    tx: object  # None for a policy that is only evaluated
    state: object  # TrainState; None for a policy that is only evaluated
    engine: RolloutEngine | None
    loop: AgentLoop | None


def build(config, optim_cfg, *, init_from: str = "", make_policy=None, engine: bool = True,
          make_env=None) -> Run:
    """Model (fresh, or the params of the newest checkpoint under `init_from`), a fresh
    optimiser state (none when `optim_cfg` is None: a policy that is only evaluated never
    holds moments, twice the params) and, with `engine`, the rollout engine and the agent loop
    over `make_env` (default: local envs of rl.env_id). SFT needs no engine: its KV cache alone
    is 8 GB for the Qwen bugfix config's 64 slots."""
    model_cfg = ModelConfig.from_config(config.model)
    mesh = make_mesh(config.mesh)
    tok = load_tokenizer(config.rl)
    tx = make_optimizer(optim_cfg) if optim_cfg is not None else None
    if init_from:  # no random init to overwrite: its compile alone took 157 s for Qwen-0.5B on a GPU
        graphdef, _ = abstract_model(model_cfg)
        with jax.set_mesh(mesh):
            params = load_params(config, init_from, model_cfg, mesh, tx)
    else:
        graphdef, params = create_sharded(model_cfg, mesh, config.seed)
    state = None
    if tx is not None:
        with jax.set_mesh(mesh):
            state, _ = create_train_state(params, tx)
        params = full_state(state)
    if not engine:
        return Run(config, model_cfg, mesh, tok, graphdef, tx, state, None, None)
    rollout_engine = RolloutEngine(graphdef, params, model_cfg, rollout_config(config),
                                   valid_vocab=tok.vocab_size, mesh=mesh)
    loop = make_loop(config, rollout_engine, tok, make_env or local_factory(config.rl), make_policy)
    return Run(config, model_cfg, mesh, tok, graphdef, tx, state, rollout_engine, loop)


def make_loop(config, engine: RolloutEngine, tok, make_env, make_policy=None):
    """Who drives the episodes (rl.harness): our agent loop, or a third-party harness through
    the OpenAI endpoint on the same engine (rl/harness_loop.py). Same interface either way."""
    if config.rl.harness == "native":
        return AgentLoop(engine, tok, engine.rollout, make_env, make_policy=make_policy)
    if make_policy is not None:
        raise ConfigError(f"rl.harness={config.rl.harness!r}: a scripted policy plays only the native harness")
    from composer_jax.rl.harness_loop import HarnessLoop
    return HarnessLoop(engine, tok, engine.rollout, make_env, step_limit=int(config.rl.env_max_turns))


def load_params(config, directory: str, model_cfg, mesh, tx) -> nnx.State:
    """The params under `directory`: a checkpoints directory of this codebase, or an imported
    pretrained model (`model.json` + `params/`, e.g. from checkpoints.qwen_setup). `tx` (default:
    rl.optim's) gives the saved optimiser state's structure; only the params are kept."""
    if (pathlib.Path(directory) / "model.json").is_file():
        imported_cfg = store.load_model_config(directory)
        if store.shapes(imported_cfg) != store.shapes(model_cfg):
            raise ConfigError(f"{directory} holds a different model than config.model: "
                              f"{store.shapes(imported_cfg)} vs {store.shapes(model_cfg)}")
        return store.load_imported(directory, mesh).state
    ckpt = Checkpointer(directory, config, keep=1, async_save=False)
    tx = tx if tx is not None else make_optimizer(config.rl.optim)
    restored = ckpt.restore_latest(abstract_train_state(model_cfg, mesh, tx))
    ckpt.close()
    if restored is None:
        raise FileNotFoundError(f"{directory!r} holds no checkpoint")
    return full_state(restored.train_state)


def local_suite(rl_cfg):
    """The task suite behind rl.env_id, built in this process (cached on disk)."""
    env = local_factory(rl_cfg)()
    try:
        return env.unwrapped.suite
    finally:
        env.close()


def summary_judge(config, run: Run):
    """(judge, rubric_for) when rl.reward_judge > 0: the checkpoint under rl.judge_from scores
    summaries against the suite's rubric (`TaskSuite.summary_rubric`)."""
    r = config.rl
    if not r.reward_judge:
        return None, None
    suite = local_suite(r)
    if suite.summary_rubric(suite.get(suite.task_ids("train")[0])) is None:
        raise ConfigError(f"rl.reward_judge={r.reward_judge}: the {suite.name} suite ({r.env_id}) has no "
                          "summary rubric (TaskSuite.summary_rubric)")
    if not r.judge_from:
        raise ConfigError(f"rl.reward_judge={r.reward_judge} needs rl.judge_from (a checkpoints directory)")
    state = load_params(config, r.judge_from, run.model_cfg, run.mesh, run.tx)
    judge = judge_lib.ModelJudge(run.graphdef, state, run.tokenizer, max_len=int(r.row_len))
    return judge, lambda task_id: suite.summary_rubric(suite.get(task_id))


def demo_policy(rl_cfg):
    """The suite's scripted expert (`TaskSuite.scripted_policy`), for any env of that suite
    (a local one or a fleet RemoteEnv: both expose `unwrapped.task`)."""
    return local_suite(rl_cfg).scripted_policy


def train_and_save_sft(config, run: Run, seqs, ids: list[str], workdir: pathlib.Path, log=print,
                       stop=None) -> list[dict]:
    """SFT on packed demonstration sequences (until `stop(step, state)`, see sft.train_sft), then
    one checkpoint in WORKDIR/checkpoints at the step it ended."""
    s = config.sft
    writer = MetricsWriter(workdir)
    with jax.set_mesh(run.mesh):
        state, history = sft.train_sft(
            run.state, run.graphdef, run.tx, seqs, row_len=int(config.rl.row_len), batch_rows=int(s.batch_rows),
            steps=int(s.optim.steps), seed=seeds(config).sft,
            embed_lr_scale=float(s.optim.get("embed_lr_scale", 1.0)), stop=stop,
            log=lambda step, m: (writer.write(step + 1, "sft", m),
                                 log(f"sft {step + 1}: loss {m['loss']:.4f}") if (step + 1) % 50 == 0 else None))
    ckpt = Checkpointer(workdir / "checkpoints", config, keep=1, async_save=False)
    ckpt.save(len(history), state, jax.random.key(config.seed), RunCursor(ids, seeds(config).rl_tasks))
    ckpt.wait()
    ckpt.close()
    writer.close()
    return history


def held_back_ids(rl_cfg, shown: list[str], n: int) -> list[str]:
    """`n` train tasks spread over those not in `shown` (the demonstrations): SFT's own check."""
    rest = [t for t in task_ids(rl_cfg, "train") if t not in set(shown)]
    if len(rest) < n:
        raise ConfigError(f"sft.target_tasks={n}: only {len(rest)} train tasks are left beside the "
                          f"{len(shown)} demonstrated (sft.demos)")
    return [rest[i * len(rest) // n] for i in range(n)]


class RewardTarget:
    """sft.target_reward as a `stop` for sft.train_sft: every target_every steps from target_from,
    the current params play the held-back tasks on an engine of their own (evaluation sampling
    and seed, as every evaluation) and training ends once the mean reward has reached the target
    (and the pass rate sft.target_pass) `target_streak` checks in a row. `checks` keeps each
    (step, reward, pass rate)."""

    def __init__(self, config, run: Run, make_env, ids: list[str], log=print):
        s = SFTConfig.from_config(config.sft)  # typed: a config's sft block may leave the target out
        self.config, self.ids, self.log = config, ids, log
        self.target, self.every, self.start = float(s.target_reward), int(s.target_every), int(s.target_from)
        self.streak, self.target_pass = int(s.target_streak), float(s.target_pass)
        engine = RolloutEngine(run.graphdef, full_state(run.state), run.model_cfg, rollout_config(config),
                               valid_vocab=run.tokenizer.vocab_size, mesh=run.mesh)
        self.loop = make_loop(config, engine, run.tokenizer, make_env)
        self.checks: list[dict] = []

    def __call__(self, step: int, state) -> bool:
        done = step + 1
        if done < self.start or (done - self.start) % self.every:
            return False
        self.loop.engine.set_params(full_state(state))
        ev = evaluate(self.loop, self.ids, seed=seeds(self.config).eval, sampling=eval_sampling(self.config))
        self.checks.append(dict(step=done, reward=ev["reward"], pass_rate=ev["pass_rate"]))
        self.log(f"sft {done}: held-back reward {ev['reward']:.3f} pass {ev['pass_rate']:.3f} "
                 f"(target {self.target}{f', pass {self.target_pass}' if self.target_pass else ''}, "
                 f"{len(self.ids)} tasks)")
        return streak_reached(self.checks, self.target, self.streak, self.target_pass)

    def close(self) -> None:
        self.loop.close()


def streak_reached(checks: list[dict], target: float, streak: int = 1, target_pass: float = 0.0) -> bool:
    """Whether the last `streak` checks all reached `target` reward and `target_pass` pass rate."""
    return len(checks) >= streak and all(c["reward"] >= target and c["pass_rate"] >= target_pass
                                         for c in checks[-streak:])


def target_verdict(checks: list[dict], target: float, steps: int, streak: int = 1,
                   target_pass: float = 0.0) -> tuple[bool, str | None]:
    """Whether SFT reached sft.target_reward (`streak` checks in a row), and a warning when the
    stop did not land near the target: never reached, or reached from the very first check, where
    the reward may have crossed the target long before (LongHorizon seeds 1 and 2 stopped at 0.73
    and 0.86 for a 0.57 target)."""
    goal = f"sft.target_reward={target}" + (f" and sft.target_pass={target_pass}" if target_pass else "")
    if not streak_reached(checks, target, streak, target_pass):
        best = max((c["reward"] for c in checks), default=0.0)
        best_pass = max((c["pass_rate"] for c in checks), default=0.0)
        return False, (f"sft: held-back checks never reached {goal} {streak} check(s) in a row in {steps} "
                       f"steps (best reward {best:.3f}, pass {best_pass:.3f}); the policy is the last step's")
    if len(checks) == streak:
        c = checks[0]
        return True, (f"sft: the first check (step {c['step']}) already gave reward {c['reward']:.3f}, pass "
                      f"{c['pass_rate']:.3f}, reaching {goal}: the target was crossed at an unknown earlier "
                      "step, so this policy may be stronger than intended; start the checks earlier (sft.target_from)")
    return True, None


def demonstrations(config, ids: list[str], make_env=None) -> list:
    """The scripted expert's episode on each task through each harness of `sft.harnesses` (ours,
    and mini-swe-agent through the endpoint) and the real environments (`make_env`: default local
    envs of rl.env_id), tokenised as the policy would see them; no model runs."""
    model_cfg = ModelConfig.from_config(config.model)
    rollout = rollout_config(config)
    tok, make_env = load_tokenizer(config.rl), make_env or local_factory(config.rl)
    harnesses, out = SFTConfig.from_config(config.sft).harnesses, []
    if "native" in harnesses:
        loop = AgentLoop(TeacherForcedOnly(model_cfg, rollout), tok, rollout, make_env,
                         make_policy=demo_policy(config.rl))
        try:
            out += loop.run([{"options": {"task_id": t}} for t in ids], progress="demonstrations")
        finally:
            loop.close()
    if "mini_swe_agent" in harnesses:  # the same tasks in its format
        out += harness_demos.demonstrations(model_cfg, rollout, tok, make_env, ids,
                                            step_limit=int(config.rl.env_max_turns))
    return out


def run_sft(config, workdir: pathlib.Path, log=print, *, ids: list[str] | None = None,
            init_from: str | None = None, demos_cache: pathlib.Path | None = None) -> dict:
    """SFT on the scripted expert's demonstrations of `ids` (default: the first `sft.demos` train
    tasks) from `init_from` (default `sft.init_from`). `demos_cache`: a file holding the
    demonstration sequences, written on first use and read after (each demonstration runs the
    hidden tests in the sandbox)."""
    validate(config)
    s = config.sft
    ids = list(ids) if ids is not None else sample_ids(config.rl, "train", int(s.demos))
    init_from = s.init_from if init_from is None else init_from
    t0 = time.perf_counter()
    if demos_cache is not None and demos_cache.exists():
        seqs, demo_pass = pickle.loads(demos_cache.read_bytes())
    else:
        with RunEnvs(config) as envs:
            demos = demonstrations(config, ids, envs.factory(config.rl, "train"))
        seqs = sft.demo_sequences(demos, successful_only=bool(s.successful_only))
        demo_pass = float(np.mean([d.reward >= 1 for d in demos]))
        if not seqs:
            raise RuntimeError(f"none of {len(demos)} demonstrations succeeded (end reasons: "
                               f"{dict(collections.Counter(d.end_reason for d in demos))}); check "
                               "rl.suite_options and the rollout window")
        if demos_cache is not None:  # written whole or not at all: a cut-off file would be read next time
            partial = demos_cache.with_suffix(demos_cache.suffix + ".partial")
            partial.write_bytes(pickle.dumps((seqs, demo_pass)))
            partial.replace(demos_cache)
    t1 = time.perf_counter()
    warmup = None
    if int(s.copy_warmup):
        warmup, init_from = copy_warmup(config, workdir / "copy_warmup", int(s.copy_warmup), init_from, log)
    t2 = time.perf_counter()
    run = build(config, s.optim, init_from=init_from, engine=False)
    target = {}
    if SFTConfig.from_config(s).target_reward or SFTConfig.from_config(s).target_pass:
        with RunEnvs(config) as envs:
            stop = RewardTarget(config, run, envs.factory(config.rl, "train"),
                                held_back_ids(config.rl, ids, SFTConfig.from_config(s).target_tasks), log)
            try:
                history = train_and_save_sft(config, run, seqs, ids, workdir, log, stop=stop)
            finally:
                stop.close()
        reached, warning = target_verdict(stop.checks, stop.target, len(history), stop.streak, stop.target_pass)
        if warning:
            log(warning)
        target = dict(target_reward=stop.target, target_pass=stop.target_pass, target_streak=stop.streak,
                      target_reached=reached,
                      target_checks=stop.checks,
                      target_warning=warning)
    else:
        history = train_and_save_sft(config, run, seqs, ids, workdir, log)
    return dict(demos=len(ids), demo_pass_rate=demo_pass, sequences=len(seqs), demo_s=t1 - t0,
                copy_warmup=warmup, train_s=time.perf_counter() - t2, steps=len(history),
                lr=float(s.optim.lr), init_from=init_from, final_loss=history[-1]["loss"],
                final_mean_target_prob=history[-1]["mean_target_prob"], **target)


def copy_warmup(config, workdir: pathlib.Path, steps: int, init_from: str = "", log=print,
                n_seqs: int = 16384) -> tuple[dict, str]:
    """`steps` SFT steps on copy drills (rl/drills.py) from `init_from`, checkpointed under
    WORKDIR/checkpoints (reused when there); returns (its record, that checkpoints directory)."""
    from composer_jax.rl.drills import copy_drills

    out = workdir / "checkpoints"
    record = workdir / "copy_warmup.json"
    if out.exists() and record.exists():
        return json.loads(record.read_text()), str(out)
    cw = copy.deepcopy(config)
    with cw.unlocked():
        cw.sft.optim.update(steps=steps, warmup_steps=min(50, steps // 10))
    seqs = copy_drills(load_tokenizer(cw.rl), n_seqs, seeds(cw).sft)
    run = build(cw, cw.sft.optim, init_from=init_from, engine=False)
    t = time.perf_counter()
    history = train_and_save_sft(cw, run, seqs, ["copy-drills"], workdir, lambda line: log("copy " + line))
    result = dict(steps=steps, sequences=n_seqs, train_s=time.perf_counter() - t, final_loss=history[-1]["loss"],
                  final_mean_target_prob=history[-1]["mean_target_prob"])
    record.write_text(json.dumps(result))
    return result, str(out)


def curriculum_tiers(rl_cfg) -> list[list[str]]:
    """The train task ids of each curriculum tier (rl.suite_options updated by the tier's
    overrides), or [] without a curriculum."""
    tiers = []
    for overrides in rl_cfg.curriculum:
        tier = copy.deepcopy(rl_cfg)
        with tier.unlocked():
            tier.suite_options = {**dict(rl_cfg.suite_options), **dict(overrides)}
        tiers.append(task_ids(tier, "train"))
    return tiers


def step_line(step: int, metrics: dict) -> str:
    """One console line per RL step; how episodes ended and a step that trained nothing show."""
    ends = " ".join(f"{k[4:]}={int(v)}" for k, v in sorted(metrics.items()) if k.startswith("end_"))
    line = (f"rl {step}: reward {metrics['reward']:.3f} pass {metrics['pass_rate']:.3f} "
            f"groups {metrics['usable_groups']} seg/ep {metrics['segments_per_episode']:.2f} "
            f"sum_len {metrics['summary_len']:.1f} "
            + (f"compaction_err {metrics['compaction_error']:.3f} " if "compaction_error" in metrics else "")
            + f"kl {metrics.get('kl_sampler_learner_k3', 0):.2e} "
            f"rollout {metrics['rollout_s']:.1f}s learn {metrics['learn_s']:.1f}s ends [{ends}]")
    if metrics.get("lag_max"):
        line += f" lag {metrics['lag_max']:.0f} wait {metrics['wait_s']:.1f}s"
    if metrics.get("skipped_no_usable_groups"):
        line += " - nothing trained: no usable group"
    return line


def boundaries(start: int, steps: int, every: list[int]) -> list[int]:
    """The steps after `start` at which the run checkpoints or evaluates (and its last step):
    the learner runs between them, so nothing is in flight when they happen."""
    return [t for t in range(start + 1, steps + 1) if t == steps or any(e and t % e == 0 for e in every)]


def run_rl(config, workdir: pathlib.Path, log=print, eval_ids: list[str] | None = None) -> dict:
    """Train `rl.steps` steps (resuming from WORKDIR/checkpoints); returns the last metrics and
    the evaluations (before training, every `rl.eval_every` steps, at the end)."""
    validate(config)
    r = config.rl
    fleet = FleetConfig.from_config(config.fleet)
    with RunEnvs(config) as envs:  # a missing Ray extra or a dead fleet.address fails before the model is built
        run = build(config, r.optim, init_from=r.init_from, make_env=envs.factory(r, "train"))
        try:
            return _train_rl(config, fleet, run, workdir, log, eval_ids)
        finally:
            run.loop.close()


def _train_rl(config, fleet: FleetConfig, run: Run, workdir: pathlib.Path, log, eval_ids) -> dict:
    r, seed = config.rl, seeds(config)
    cursor = RunCursor(task_ids(r, "train"), seed.rl_tasks, curriculum_tiers(r))
    ckpt = Checkpointer(workdir / "checkpoints", config, keep=int(r.keep), async_save=False)
    restored = ckpt.restore_latest(abstract_train_state(run.model_cfg, run.mesh, run.tx), cursor)
    state, start = run.state, 0
    if restored is not None:
        state, start = restored.train_state, restored.step
        run.engine.set_params(full_state(state))
    ref = jax.tree.map(lambda x: x.copy(), full_state(state)) if r.loss.kl_coef > 0 else None
    judge, rubric_for = summary_judge(config, run)
    learner = Learner(r, run.model_cfg, run.graphdef, run.tx, run.loop, cursor, mesh=run.mesh, ref_state=ref,
                      judge=judge, rubric_for=rubric_for, seed=seed.rl_rollouts,
                      aux_weights=(float(config.train.load_balance_weight), float(config.train.router_z_weight)))
    if eval_ids is None and r.eval_tasks:
        eval_ids = sample_ids(r, r.eval_split, int(r.eval_tasks))
    writer = MetricsWriter(workdir, resume_step=start)
    evals, last = {}, {}

    def run_eval(step):
        ev = evaluate(run.loop, eval_ids, seed=seed.eval, samples=int(r.eval_samples), outcomes=True,
                      sampling=eval_sampling(config))
        evals[step] = ev
        writer.write(step, "eval", {k: v for k, v in ev.items() if k != "passed"})
        log(f"eval @ {step}: pass {ev['pass_rate']:.3f} [{ev['ci95_low']:.3f}, {ev['ci95_high']:.3f}] "
            f"n={ev['n']} summary_len {ev['summary_len']:.1f}")

    def on_step(step, _state, metrics):
        if len(cursor.tiers) > 1:
            metrics = dict(metrics, curriculum_level=cursor.level)
        last.update(metrics)
        writer.write(step, "train", metrics)
        log(step_line(step, metrics))
        if cursor.promote(metrics["pass_rate"], float(r.curriculum_promote_at)):
            log(f"curriculum: tier {cursor.level} of {len(cursor.tiers) - 1} from step {step + 1}: "
                f"{dict(r.curriculum[cursor.level])}")

    eval_every = int(r.eval_every) if r.eval_tasks else 0
    try:
        with jax.set_mesh(run.mesh):
            if start == 0 and r.eval_tasks:
                run_eval(0)
            for end in boundaries(start, int(r.steps), [int(r.checkpoint_every), eval_every]):
                last.clear()
                state, _ = run_learner(learner, state, steps=end - start, cfg=fleet, first_step=start + 1,
                                       on_step=on_step)
                run.engine.set_params(full_state(state))
                if end % int(r.checkpoint_every) == 0 or end == int(r.steps):
                    ckpt.save(end, state, jax.random.key(config.seed), cursor)
                if r.eval_tasks and (end % eval_every == 0 or end == int(r.steps)):
                    run_eval(end)
                start = end
    finally:
        ckpt.wait()
        ckpt.close()
        writer.close()
    return dict(metrics=dict(last), evals=evals, counts=dict(learner.counts), state=state)


def evaluate_policy(config, init_from: str, suites: dict[str, str], tasks: int, log=print) -> dict:
    """The policy under `init_from` on the first `tasks` validation tasks of each suite
    (name -> env id): one engine, no optimiser state, envs on fleet.backend, and the same
    evaluation seed as rl.train's evaluations (so the two pair). rl.suite_options apply to
    rl.env_id's suite only."""
    RunEnvs(config).close()  # a missing Ray extra or a dead fleet.address fails before the model is built
    run = build(config, None, init_from=init_from)
    run.loop.close()
    results = {}
    for name, env_id in suites.items():
        rl_cfg = copy.deepcopy(config.rl)
        with rl_cfg.unlocked():
            rl_cfg.env_id = env_id
            if env_id != config.rl.env_id:
                rl_cfg.suite_options = {}
        with RunEnvs(config) as envs:  # one suite's worker pool at a time
            loop = make_loop(config, run.engine, run.tokenizer, envs.factory(rl_cfg, "validation"))
            try:
                ids = sample_ids(rl_cfg, "validation", int(tasks))
                with jax.set_mesh(run.mesh):
                    try:
                        results[name] = evaluate(loop, ids, seed=seeds(config).eval, outcomes=True,
                                                 sampling=eval_sampling(config))
                    except ConfigError as e:  # every prompt too long for the window
                        if env_id == config.rl.env_id:
                            raise
                        # another suite's prompts may all exceed this run's window: scored 0, said so
                        lo, hi = wilson(0.0, len(ids))
                        results[name] = dict(n=len(ids), tasks=len(ids), pass_rate=0.0, ci95_low=lo, ci95_high=hi,
                                             passed=[0] * len(ids), end_prompt_too_long=float(len(ids)), error=str(e))
            finally:
                loop.close()
        log(f"eval {name}: {sum(results[name]['passed'])}/{results[name]['n']} passed")
    return results


def main(argv=None):
    memory_aware_cpu_schedule()  # before jax starts its backend
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=("sft", "rl"), default="rl")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    config = load_config(args.config)
    try:
        for item in overrides:
            apply_override(config, item)
        validate(config)
    except ConfigError as e:
        p.error(str(e))
    workdir = pathlib.Path(args.workdir)
    try:
        out = run_sft(config, workdir) if args.mode == "sft" else run_rl(config, workdir)
    except (ConfigError, FleetUnavailableError) as e:  # the field or address named, no traceback
        raise SystemExit(f"error: {e}") from None
    evals = {step: {k: ev[k] for k in ("pass_rate", "ci95_low", "ci95_high", "n")} for step, ev in out.get("evals", {}).items()}
    print(json.dumps(dict(metrics=out["metrics"] if "metrics" in out else {k: v for k, v in out.items()},
                          **({"evals": evals} if evals else {})), default=float, indent=1))


if __name__ == "__main__":
    main()
