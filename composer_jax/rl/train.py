"""RL (and its SFT warm start) from the command line.

    python -m composer_jax.rl.train --config configs/tiny.py:test --workdir runs/rl [--mode sft|rl] \
        [--set rl.steps=40 --set rl.optim.steps=40 ...]

`--mode sft` trains on scripted-expert demonstrations and checkpoints to WORKDIR/checkpoints;
`--mode rl` starts from `rl.init_from` (a checkpoints directory, e.g. an SFT run's) or a fresh
model, and resumes exactly from WORKDIR/checkpoints when it holds one (params, optimiser, RNG,
task cursor and buffered rollouts). Metrics go to WORKDIR/metrics.jsonl, TensorBoard and the
console.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import pickle
import time

import gymnasium as gym
import jax
import numpy as np
from flax import nnx

from composer_jax.checkpoints import store
from composer_jax.config_loading import apply_override, load_config
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model, create_sharded
from composer_jax.rl import judge as judge_lib
from composer_jax.rl import sft
from composer_jax.rl.agent import AgentLoop
from composer_jax.rl.engine_host import RolloutEngine, TeacherForcedOnly
from composer_jax.rl.learner import Learner, evaluate, full_state
from composer_jax.rl.replay import RunCursor
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.scripted import ExpertPolicy, NoteChainPolicy
from composer_jax.sharding import make_mesh
from composer_jax.train.checkpoint import Checkpointer, abstract_train_state
from composer_jax.train.metrics import MetricsWriter
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state


class SystemPrompt(gym.Wrapper):
    """Replace the env's system prompt (a tiny window cannot hold the full tool manual)."""

    def __init__(self, env, text: str):
        super().__init__(env)
        self.text = text

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, dict(info, system_prompt=self.text)


def env_factory(rl_cfg, split: str | None = None):
    import environments  # noqa: F401 - registers the envs

    def make():
        extra = dict(reward_mode=rl_cfg.reward_mode) if rl_cfg.get("reward_mode") else {}
        env = gym.make(rl_cfg.env_id, split=split or "train", max_turns=int(rl_cfg.env_max_turns),
                       suite_options=dict(rl_cfg.suite_options), **extra)
        return SystemPrompt(env, rl_cfg.system_prompt) if rl_cfg.system_prompt else env
    return make


def task_ids(rl_cfg, split: str) -> list[str]:
    env = env_factory(rl_cfg, split)()
    try:
        return env.unwrapped.suite.task_ids(split)
    finally:
        env.close()


def rollout_config(config, **overrides) -> RolloutConfig:
    return dataclasses.replace(RolloutConfig.from_config(config.rollout), **overrides)


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
    tx: object
    state: object  # TrainState
    engine: RolloutEngine | None
    loop: AgentLoop | None


def build(config, optim_cfg, *, init_from: str = "", make_policy=None, engine: bool = True) -> Run:
    """Model (fresh, or the params of the newest checkpoint under `init_from`), a fresh
    optimiser state and, with `engine`, the rollout engine and the agent loop (SFT needs neither:
    the engine's KV cache alone is 8 GB for the Qwen bugfix config's 64 slots)."""
    model_cfg = ModelConfig.from_config(config.model)
    mesh = make_mesh(config.mesh)
    tok = load_tokenizer(config.rl)
    tx = make_optimizer(optim_cfg)
    if init_from:  # no random init to overwrite: its compile alone took 157 s for Qwen-0.5B on a GPU
        graphdef, _ = abstract_model(model_cfg)
        with jax.set_mesh(mesh):
            state, _ = create_train_state(load_params(config, init_from, model_cfg, mesh, tx), tx)
    else:
        graphdef, params = create_sharded(model_cfg, mesh, config.seed)
        state, _ = create_train_state(params, tx)
    if not engine:
        return Run(config, model_cfg, mesh, tok, graphdef, tx, state, None, None)
    rollout_engine = RolloutEngine(graphdef, full_state(state), model_cfg, rollout_config(config),
                                   valid_vocab=tok.vocab_size, mesh=mesh)
    loop = AgentLoop(rollout_engine, tok, rollout_engine.rollout, env_factory(config.rl), make_policy=make_policy)
    return Run(config, model_cfg, mesh, tok, graphdef, tx, state, rollout_engine, loop)


def load_params(config, directory: str, model_cfg, mesh, tx) -> nnx.State:
    """The params under `directory`: a checkpoints directory of this codebase, or an imported
    pretrained model (`model.json` + `params/`, e.g. from checkpoints.qwen_setup)."""
    if (pathlib.Path(directory) / "model.json").is_file():
        imported_cfg = store.load_model_config(directory)
        if store.shapes(imported_cfg) != store.shapes(model_cfg):
            raise ConfigError(f"{directory} holds a different model than config.model: "
                              f"{store.shapes(imported_cfg)} vs {store.shapes(model_cfg)}")
        return store.load_imported(directory, mesh).state
    ckpt = Checkpointer(directory, config, keep=1, async_save=False)
    restored = ckpt.restore_latest(abstract_train_state(model_cfg, mesh, tx))
    ckpt.close()
    if restored is None:
        raise FileNotFoundError(f"{directory!r} holds no checkpoint")
    return full_state(restored.train_state)


def summary_judge(config, run: Run):
    """(judge, rubric_for) when rl.reward_judge > 0: the checkpoint under rl.judge_from scores
    LongHorizon summaries for keeping the key and fragments."""
    r = config.rl
    if not r.reward_judge:
        return None, None
    if r.env_id != "composer/LongHorizon-v0" or not r.judge_from:
        raise ConfigError("rl.reward_judge > 0 needs rl.judge_from (a checkpoints directory) and the "
                          "LongHorizon env (the only one with a summary rubric)")
    state = load_params(config, r.judge_from, run.model_cfg, run.mesh, run.tx)
    judge = judge_lib.ModelJudge(run.graphdef, state, run.tokenizer, max_len=int(r.row_len))
    suite = env_factory(r)().unwrapped.suite
    return judge, lambda task_id: judge_lib.longhorizon_summary_rubric(suite.get(task_id).metadata)


def demo_policy(rl_cfg):
    if rl_cfg.env_id == "composer/LongHorizon-v0":
        return lambda env: NoteChainPolicy(env)
    return lambda env: ExpertPolicy(env)


def train_and_save_sft(config, run: Run, seqs, ids: list[str], workdir: pathlib.Path, log=print) -> list[dict]:
    """SFT on packed demonstration sequences, then one checkpoint in WORKDIR/checkpoints."""
    s = config.sft
    writer = MetricsWriter(workdir)
    with jax.set_mesh(run.mesh):
        state, history = sft.train_sft(
            run.state, run.graphdef, run.tx, seqs, row_len=int(config.rl.row_len), batch_rows=int(s.batch_rows),
            steps=int(s.optim.steps), seed=config.seed, embed_lr_scale=float(s.optim.get("embed_lr_scale", 1.0)),
            log=lambda step, m: (writer.write(step + 1, "sft", m),
                                 log(f"sft {step + 1}: loss {m['loss']:.4f}") if (step + 1) % 50 == 0 else None))
    ckpt = Checkpointer(workdir / "checkpoints", config, keep=1, async_save=False)
    ckpt.save(int(s.optim.steps), state, jax.random.key(config.seed), RunCursor(ids, config.seed))
    ckpt.wait()
    ckpt.close()
    writer.close()
    return history


def demonstrations(config, ids: list[str]) -> list:
    """The scripted expert's episode on each task through the real harness and environments,
    tokenised as the policy would see them; no model runs (TeacherForcedOnly)."""
    model_cfg = ModelConfig.from_config(config.model)
    rollout = rollout_config(config)
    loop = AgentLoop(TeacherForcedOnly(model_cfg, rollout), load_tokenizer(config.rl), rollout,
                     env_factory(config.rl), make_policy=demo_policy(config.rl))
    try:
        return loop.run([{"options": {"task_id": t}} for t in ids], progress="demonstrations")
    finally:
        loop.close()


def run_sft(config, workdir: pathlib.Path, log=print, *, ids: list[str] | None = None,
            init_from: str | None = None, demos_cache: pathlib.Path | None = None) -> dict:
    """SFT on the scripted expert's demonstrations of `ids` (default: the first `sft.demos` train
    tasks) from `init_from` (default `sft.init_from`). `demos_cache`: a file holding the
    demonstration sequences, written on first use and read after (each demonstration runs the
    hidden tests in the sandbox)."""
    s = config.sft
    ids = list(ids) if ids is not None else task_ids(config.rl, "train")[:int(s.demos)]
    init_from = s.init_from if init_from is None else init_from
    t0 = time.perf_counter()
    if demos_cache is not None and demos_cache.exists():
        seqs, demo_pass = pickle.loads(demos_cache.read_bytes())
    else:
        demos = demonstrations(config, ids)
        seqs, demo_pass = sft.demo_sequences(demos), float(np.mean([d.reward >= 1 for d in demos]))
        if not seqs:
            raise RuntimeError(f"none of {len(demos)} demonstrations succeeded (end reasons: "
                               f"{dict(collections.Counter(d.end_reason for d in demos))}); check "
                               "rl.suite_options and the rollout window")
        if demos_cache is not None:  # written whole or not at all: a cut-off file would be read next time
            partial = demos_cache.with_suffix(demos_cache.suffix + ".partial")
            partial.write_bytes(pickle.dumps((seqs, demo_pass)))
            partial.replace(demos_cache)
    t1 = time.perf_counter()
    run = build(config, s.optim, init_from=init_from, engine=False)
    history = train_and_save_sft(config, run, seqs, ids, workdir, log)
    return dict(demos=len(ids), demo_pass_rate=demo_pass, sequences=len(seqs), demo_s=t1 - t0,
                train_s=time.perf_counter() - t1, steps=int(s.optim.steps), lr=float(s.optim.lr),
                init_from=init_from, final_loss=history[-1]["loss"],
                final_mean_target_prob=history[-1]["mean_target_prob"])


def step_line(step: int, metrics: dict) -> str:
    """One console line per RL step; how episodes ended and a step that trained nothing show."""
    ends = " ".join(f"{k[4:]}={int(v)}" for k, v in sorted(metrics.items()) if k.startswith("end_"))
    line = (f"rl {step}: reward {metrics['reward']:.3f} pass {metrics['pass_rate']:.3f} "
            f"groups {metrics['usable_groups']} seg/ep {metrics['segments_per_episode']:.2f} "
            f"sum_len {metrics['summary_len']:.1f} kl {metrics.get('kl_sampler_learner_k3', 0):.2e} "
            f"rollout {metrics['rollout_s']:.1f}s learn {metrics['learn_s']:.1f}s ends [{ends}]")
    if metrics.get("skipped_no_usable_groups"):
        line += " - nothing trained: no usable group"
    return line


def run_rl(config, workdir: pathlib.Path, log=print, eval_ids: list[str] | None = None) -> dict:
    """Train `rl.steps` steps (resuming from WORKDIR/checkpoints); returns the last metrics and
    the evaluations (before training, every `rl.eval_every` steps, at the end)."""
    r = config.rl
    run = build(config, r.optim, init_from=r.init_from)
    cursor = RunCursor(task_ids(r, "train"), config.seed)
    ckpt = Checkpointer(workdir / "checkpoints", config, keep=int(r.keep), async_save=False)
    restored = ckpt.restore_latest(abstract_train_state(run.model_cfg, run.mesh, run.tx), cursor)
    state, start = run.state, 0
    if restored is not None:
        state, start = restored.train_state, restored.step
        run.engine.set_params(full_state(state))
    ref = jax.tree.map(lambda x: x.copy(), full_state(state)) if r.loss.kl_coef > 0 else None
    judge, rubric_for = summary_judge(config, run)
    learner = Learner(r, run.model_cfg, run.graphdef, run.tx, run.loop, cursor, mesh=run.mesh, ref_state=ref,
                      judge=judge, rubric_for=rubric_for,
                      aux_weights=(float(config.train.load_balance_weight), float(config.train.router_z_weight)))
    eval_ids = eval_ids if eval_ids is not None else task_ids(r, r.eval_split)[:int(r.eval_tasks)]
    writer = MetricsWriter(workdir, resume_step=start)
    evals, metrics = {}, {}

    def run_eval(step):
        ev = evaluate(run.loop, eval_ids, seed=int(config.seed) + 7_777_777, samples=int(r.eval_samples))
        evals[step] = ev
        writer.write(step, "eval", ev)
        log(f"eval @ {step}: pass {ev['pass_rate']:.3f} [{ev['ci95_low']:.3f}, {ev['ci95_high']:.3f}] "
            f"n={ev['n']} summary_len {ev['summary_len']:.1f}")

    try:
        with jax.set_mesh(run.mesh):
            if start == 0 and r.eval_tasks:
                run_eval(0)
            for step in range(start + 1, int(r.steps) + 1):
                result = learner.step(step, state)
                state, metrics = result.state, result.metrics
                writer.write(step, "train", metrics)
                log(step_line(step, metrics))
                if step % int(r.checkpoint_every) == 0 or step == int(r.steps):
                    ckpt.save(step, state, jax.random.key(config.seed), cursor)
                if r.eval_tasks and (step % int(r.eval_every) == 0 or step == int(r.steps)):
                    run_eval(step)
    finally:
        ckpt.wait()
        ckpt.close()
        writer.close()
        run.loop.close()
    return dict(metrics=metrics, evals=evals, counts=dict(learner.counts), state=state)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=("sft", "rl"), default="rl")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override the config, e.g. --set rl.init_from=runs/sft/checkpoints (repeatable)")
    args = p.parse_args(argv)
    config = load_config(args.config)
    try:
        for item in args.set:
            apply_override(config, item)
    except ConfigError as e:
        p.error(str(e))
    workdir = pathlib.Path(args.workdir)
    out = run_sft(config, workdir) if args.mode == "sft" else run_rl(config, workdir)
    print({k: v for k, v in out.items() if k != "state"})


if __name__ == "__main__":
    main()
