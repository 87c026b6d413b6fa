"""One on-policy RL step: roll out G episodes per task, grade, group advantages, packed
minibatch updates, new weights to the engine.

The update is a pure jitted function of (TrainState, batch) with the state donated; the engine
gets the updated arrays themselves (same devices, no host copy). A non-finite loss or gradient
leaves the state unchanged inside the step (`skipped_nonfinite`); the host counts skips and
stops with a clear error after `rl.max_nonfinite` in a row.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding

from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.rl import advantages as adv_lib
from composer_jax.rl import judge as judge_lib
from composer_jax.rl import segments
from composer_jax.rl.agent import AgentLoop
from composer_jax.rl.cursor import RunCursor
from composer_jax.rl.engine import expert_shape
from composer_jax.rl.losses import LossConfig, policy_loss
from composer_jax.rl.trajectory import Episode
from composer_jax.rl.transcript import format_episode
from composer_jax.sharding import batch_sharding, logical_to_spec
from composer_jax.train.step import TrainState, next_token_targets
from composer_jax.train.update import jit_update, update


class NonFiniteUpdateError(RuntimeError):
    pass


def full_state(state: TrainState) -> nnx.State:
    """Params + buffers as one model state (what the engine merges with its graphdef)."""
    return nnx.merge_state(state.params, state.buffers)


def learner_logp(model, batch: Mapping[str, jax.Array], temperature, replay: bool):
    """(log-prob of every target token at the sampler's temperature, entropy, model aux)."""
    forced = batch["experts"] if replay and "experts" in batch else None
    xn_btd, aux = model.hidden(batch["tokens"], batch["positions"], batch["segment_ids"], forced)
    targets, _ = next_token_targets(batch["tokens"], batch["segment_ids"])
    scores = model.score(xn_btd, targets, temperature)
    return scores.logp_bt, scores.entropy_bt, aux


def sequence_ids(segment_ids_bt):
    b, t = segment_ids_bt.shape
    return jnp.arange(b, dtype=jnp.int32)[:, None] * t + segment_ids_bt


def rl_objective(params, buffers, graphdef, batch, loss_cfg: LossConfig, aux_weights, temperature, replay):
    model = nnx.merge(graphdef, params, buffers)
    logp_bt, entropy_bt, aux = learner_logp(model, batch, temperature, replay)
    loss, metrics = policy_loss(loss_cfg, logp_bt, batch["old_logp"], batch["sampler_logp"],
                                batch["advantages"], batch["loss_mask"], sequence_ids(batch["segment_ids"]),
                                batch.get("ref_logp"), entropy_bt)
    loss = loss + aux_weights[0] * aux["load_balance_loss"] + aux_weights[1] * aux["router_z_loss"]
    return loss, dict(metrics, loss=loss)


def update_step(graphdef, tx, loss_cfg, aux_weights, temperature, replay, state: TrainState, batch):
    """One optimiser step (train/update.py). The router balancing bias is frozen during RL:
    moving it between rollout and update would change routing under the sampler's feet."""
    return update(lambda params, b: rl_objective(params, state.buffers, graphdef, b, loss_cfg, aux_weights,
                                                 temperature, replay), tx, state, batch)


def make_update(graphdef, tx, loss_cfg: LossConfig, aux_weights, temperature: float, replay: bool):
    return jit_update(lambda state, batch: update_step(graphdef, tx, loss_cfg, aux_weights, temperature, replay,
                                                       state, batch))


def make_logp(graphdef, temperature: float, replay: bool):
    def fn(params, buffers, batch):
        return learner_logp(nnx.merge(graphdef, params, buffers), batch, temperature, replay)[0]
    return jax.jit(fn)


@dataclasses.dataclass
class StepResult:
    state: TrainState
    metrics: dict[str, float]


def passed(episodes: list[Episode]) -> list[int]:
    """1 for each episode that passed every hidden test, else 0."""
    return [int(ep.reward >= 1.0) for ep in episodes]


def pass_rate(episodes: list[Episode]) -> float:
    return float(np.mean(passed(episodes))) if episodes else 0.0


def episode_stats(episodes: list[Episode]) -> dict[str, float]:
    summaries = [t.end - t.start for ep in episodes for s in ep.segments for t in s.turns if t.kind == "summary"]
    ends = Counter(ep.end_reason for ep in episodes)
    resets = [c for ep in episodes for c in ep.compactions if c["needed"]]
    # Facts the env said later turns need that the summaries dropped (rollout.compaction's
    # quality); only for suites that name their facts (TaskSuite.carry_facts).
    compaction = dict(compaction_error=sum(c["dropped"] for c in resets) / max(sum(c["needed"] for c in resets), 1),
                      compaction_tokens=float(np.mean([c["tokens"] for c in resets]))) if resets else {}
    return dict(**compaction,
        reward=float(np.mean([ep.reward for ep in episodes])) if episodes else 0.0,
        pass_rate=pass_rate(episodes),
        segments_per_episode=float(np.mean([len(ep.segments) for ep in episodes])) if episodes else 0.0,
        resets_per_episode=float(np.mean([max(len(ep.segments) - 1, 0) for ep in episodes])) if episodes else 0.0,
        summaries_per_episode=len(summaries) / max(len(episodes), 1),
        summary_len=float(np.mean(summaries)) if summaries else 0.0,
        turns_per_episode=float(np.mean([ep.turns for ep in episodes])) if episodes else 0.0,
        generated_tokens=float(sum(sum(s.loss_mask) for ep in episodes for s in ep.segments)),
        transcript_tokens=float(np.mean([ep.transcript_tokens for ep in episodes])) if episodes else 0.0,
        **{f"end_{k}": float(v) for k, v in ends.items()})


class Learner:
    """Holds the jitted functions and the engine; `step` runs one full RL iteration."""

    def __init__(self, rl_cfg, model_cfg: ModelConfig, graphdef, tx, loop: AgentLoop, cursor: RunCursor,
                 *, mesh=None, judge: judge_lib.Judge | None = None,
                 rubric_for: Callable[[str], list[judge_lib.RubricItem]] | None = None,
                 ref_state: nnx.State | None = None, aux_weights=(0.0, 0.0), seed: int = 0):
        self.seed = seed  # rollout keys: (seed, step, task position); rl.train derives it (seeds.py)
        self.cfg, self.model_cfg, self.loop, self.cursor, self.mesh = rl_cfg, model_cfg, loop, cursor, mesh
        self.loss_cfg = LossConfig.from_config(rl_cfg.loss)
        if not 0.0 <= float(rl_cfg.negative_weight) <= 1.0:
            raise ConfigError(f"rl.negative_weight={rl_cfg.negative_weight}: must be in [0, 1]")
        self.judge, self.rubric_for = judge, rubric_for
        self.weights = judge_lib.RewardWeights(rl_cfg.reward_tests, rl_cfg.reward_judge)
        temperature = loop.rollout.temperature
        self.replay = bool(rl_cfg.routing_replay) and model_cfg.is_moe
        self._update = make_update(graphdef, tx, self.loss_cfg, aux_weights, temperature, self.replay)
        self._logp = make_logp(graphdef, temperature, self.replay)
        self._ref_logp = make_logp(graphdef, temperature, False)
        if self.loss_cfg.kl_coef > 0 and ref_state is None:
            raise ValueError("rl.loss.kl_coef > 0 needs a reference model state")
        self.ref = None if ref_state is None else nnx.split_state(ref_state, nnx.Param, ...)
        self.nonfinite_in_a_row = 0
        self.counts: Counter = Counter()

    # rollout + grading --------------------------------------------------------------------------
    def rollout_groups(self, step: int, n_tasks: int):
        """n_tasks tasks x G rollouts -> [(episodes, rewards)] and grading counts."""
        g = int(self.cfg.group_size)
        task_ids = self.cursor.next_tasks(n_tasks)
        tasks = [{"options": {"task_id": t}} for t in task_ids for _ in range(g)]
        # Fresh sampling keys each step and round, fixed by (seed, step, position): deterministic.
        self.loop.rollout = dataclasses.replace(self.loop.rollout, seed=int(self.seed) * 1_000_003
                                                + step * 1009 + self.cursor.position)
        t0 = time.perf_counter()
        episodes = self.loop.run(tasks)
        t1 = time.perf_counter()
        counts: Counter = Counter()
        groups = []
        for i, task_id in enumerate(task_ids):
            members = episodes[i * g:(i + 1) * g]
            rubric = self.rubric_for(task_id) if self.rubric_for is not None and self.weights.judge else None
            rewards = []
            for ep in members:
                r, c = judge_lib.combine(ep, self.weights, self.judge, rubric, self.loop.tokenizer)
                counts.update(c)
                rewards.append(r)
            groups.append((members, rewards))
        return groups, counts, (t1 - t0, time.perf_counter() - t1)

    def collect(self, step: int):
        """Dynamic sampling: keep usable groups (reward variance > 0), sample more tasks until
        `groups_per_step` are in hand or `max_sampling_rounds` rounds ran; surplus is buffered."""
        need = int(self.cfg.groups_per_step)
        usable, all_eps, counts = [], [], Counter()
        timing = np.zeros(2)
        while self.cursor.buffer and len(usable) < need:
            usable.append(self.cursor.buffer.pop(0))
        rounds = 0
        while len(usable) < need and rounds < int(self.cfg.max_sampling_rounds):
            groups, c, t = self.rollout_groups(step, need if rounds == 0 else need - len(usable))
            counts.update(c)
            timing += t
            rounds += 1
            for eps, rs in groups:
                all_eps += eps
                sel = adv_lib.select_groups([eps], [rs], self.cfg.advantage,
                                            mask_unfinished=bool(self.cfg.mask_unfinished))
                counts.update(sel.counts)
                if sel.groups:
                    usable.append((eps, rs))
        self.cursor.buffer += usable[need:]
        counts["sampling_rounds"] = rounds
        return usable[:need], all_eps, counts, timing

    # learning -----------------------------------------------------------------------------------
    def batch_rows(self, groups) -> tuple[segments.PackedRows, dict[str, int]]:
        sel = adv_lib.select_groups([e for e, _ in groups], [r for _, r in groups], self.cfg.advantage,
                                    mask_unfinished=bool(self.cfg.mask_unfinished),
                                    negative_weight=float(self.cfg.negative_weight))
        # A zero advantage (e.g. every below-baseline run at negative_weight 0) gives the policy
        # loss no gradient; without a KL or entropy term such runs are not worth packing.
        needs_all = self.loss_cfg.kl_coef > 0 or self.loss_cfg.entropy_coef > 0
        seqs = []
        for group in sel.groups:
            for ep, a, trainable in zip(group.episodes, group.advantages, group.trainable):
                if trainable and (a != 0 or needs_all):
                    seqs += segments.episode_sequences(ep, float(a), train_summaries=bool(self.cfg.train_summaries),
                                                       with_experts=self.replay)
        rows = segments.pack(seqs, int(self.cfg.row_len), row_multiple=int(self.cfg.minibatch_rows),
                             min_rows=0, expert_shape=expert_shape(self.model_cfg) if self.replay else None)
        return rows, dict(sequences=len(seqs))

    def _device(self, batch: dict[str, np.ndarray]):
        if self.mesh is None:
            return {k: jnp.asarray(v) for k, v in batch.items()}
        bsh = batch_sharding(self.mesh)
        esh = NamedSharding(self.mesh, logical_to_spec((None, "batch", "length", None)))
        return {k: jax.device_put(v, esh if k == "experts" else bsh) for k, v in batch.items()}

    def learn(self, state: TrainState, rows: segments.PackedRows) -> tuple[TrainState, dict[str, float]]:
        mb = int(self.cfg.minibatch_rows)
        n_mb = rows.rows // mb
        batches = [self._device(rows.take(np.arange(i * mb, (i + 1) * mb))) for i in range(n_mb)]
        for b in batches:  # the policy before this step's updates: the PPO ratio's denominator
            b["old_logp"] = (self._logp(state.params, state.buffers, b) if self.cfg.recompute_old_logp
                             else b["sampler_logp"])
            if self.ref is not None and self.loss_cfg.kl_coef > 0:
                b["ref_logp"] = self._ref_logp(self.ref[0], self.ref[1], b)
        history = []
        for _ in range(int(self.cfg.epochs)):
            for b in batches:
                state, m = self._update(state, b)
                history.append(m)
        metrics = {k: float(np.mean([np.asarray(m[k]) for m in history])) for k in history[0]} if history else {}
        if history:
            skipped = int(sum(int(m["skipped_nonfinite"]) for m in history))
            metrics["skipped_nonfinite"] = skipped
            metrics["max_abs_logp_diff"] = float(max(np.asarray(m["max_abs_logp_diff"]) for m in history))
            self.nonfinite_in_a_row = self.nonfinite_in_a_row + skipped if skipped else 0
            if self.nonfinite_in_a_row > int(self.cfg.max_nonfinite):
                raise NonFiniteUpdateError(
                    f"{self.nonfinite_in_a_row} minibatch updates in a row had a non-finite loss or "
                    "gradient and were skipped (state unchanged); check rl.loss, the optimiser lr and "
                    "the sampler log-probs, then resume from the last checkpoint")
        metrics["minibatches"] = len(history)
        return state, metrics

    def train_on(self, state: TrainState, collected, rollout_s: float = 0.0, grade_s: float = 0.0) -> StepResult:
        """The update on one collect's (groups, episodes, counts) and the step's metrics; the
        engine keeps its weights (the caller hands it the new ones)."""
        groups, episodes, counts = collected
        t0 = time.perf_counter()
        rows, c = self.batch_rows(groups)
        counts = Counter(counts)
        counts.update(c)  # update, not +: a count of 0 stays a metric
        if rows.rows == 0:
            counts["skipped_no_usable_groups"] += 1
            learn_metrics = {}
        else:
            state, learn_metrics = self.learn(state, rows)
        t_learn = time.perf_counter() - t0
        stats = episode_stats(episodes)
        metrics = dict(stats, **learn_metrics, **{k: float(v) for k, v in counts.items()},
                       usable_groups=len(groups), rows=rows.rows,
                       packing_efficiency=segments.packing_efficiency(rows),
                       rollout_s=rollout_s, grade_s=grade_s, learn_s=t_learn,
                       step_s=rollout_s + grade_s + t_learn,
                       rollout_tokens_per_s=stats["generated_tokens"] / max(rollout_s, 1e-9),
                       learn_tokens_per_s=float(rows.loss_mask.sum()) / max(t_learn, 1e-9))
        self.counts.update(counts)
        return StepResult(state, metrics)

    def step(self, step: int, state: TrainState) -> StepResult:
        """Collect, update, and the new weights to the engine: one synchronous RL step."""
        groups, episodes, counts, (t_roll, t_grade) = self.collect(step)
        result = self.train_on(state, (groups, episodes, counts), t_roll, t_grade)
        if result.metrics["rows"]:
            self.loop.engine.set_params(full_state(result.state))
        return result


def evaluate(loop: AgentLoop, task_ids: list[str], seed: int, samples: int = 1,
             outcomes: bool = False, sampling: tuple[float, float] | None = None) -> dict[str, Any]:
    """Pass rate on held-out tasks (`samples` rollouts each) with a 95% Wilson interval;
    `outcomes` adds `passed`, one 0/1 per episode in task order, for paired comparisons, and
    `transcript`: one episode rendered segment by segment (rl/transcript.py), the first that
    passed across a context reset when there is one. `sampling`: (temperature, top_p) of this
    evaluation (`eval_rollout` in the config), the engine's own restored after it."""
    loop.rollout = dataclasses.replace(loop.rollout, seed=seed)
    restore = loop.engine.set_sampling(*sampling) if sampling is not None else None
    try:
        episodes = loop.run([{"options": {"task_id": t}} for t in task_ids for _ in range(samples)],
                            progress="evaluation")
    finally:
        if restore is not None:
            loop.engine.set_sampling(*restore)
    n = len(episodes)
    p = pass_rate(episodes)
    lo, hi = wilson(p, n)
    out = dict(episode_stats(episodes), n=n, tasks=len(task_ids), pass_rate=p, ci95_low=lo, ci95_high=hi)
    if outcomes:
        out["passed"] = passed(episodes)
        shown = min(episodes, key=lambda e: (not (e.reward >= 1 and len(e.segments) > 1), len(e.segments) < 2),
                    default=None)
        out["transcript"] = format_episode(shown, loop.tokenizer) if shown else ""
    return out


def mcnemar(a_passed: list[int], b_passed: list[int]) -> dict[str, float]:
    """Paired comparison of two policies on the same episodes (task and sampling seed): counts
    of the four outcomes and the exact two-sided McNemar p-value (a binomial test on the
    episodes where exactly one of them passed)."""
    if len(a_passed) != len(b_passed):
        raise ValueError(f"paired outcomes of different lengths: {len(a_passed)} vs {len(b_passed)}")
    pairs = Counter(zip((bool(x) for x in a_passed), (bool(x) for x in b_passed), strict=True))
    only_a, only_b = pairs[True, False], pairs[False, True]
    n, k = only_a + only_b, min(only_a, only_b)
    p_value = min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return dict(both=pairs[True, True], only_a=only_a, only_b=only_b, neither=pairs[False, False],
                p_value=p_value)


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))
