"""Host side of the rollout engine: jit once per bucket, pad requests to buckets, numpy results.

Shapes stay fixed so nothing recompiles mid-rollout: a prefill pads its chunk length up to one
of `rollout.prefill_buckets` (longer inputs go in several chunks) and its slot count up to one
of a few slot buckets (powers of 4 times the batch shard count, and all slots); decode always
runs over every slot with a static output length of `rollout.max_new_tokens`.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding

from composer_jax.errors import ConfigError
from composer_jax.model.attention import KVCache
from composer_jax.model.config import ModelConfig
from composer_jax.rl import engine
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.sharding import RULES, logical_to_spec


@dataclasses.dataclass
class Scored:
    """Appended tokens with their tempered log-probs (given what precedes) and expert choices."""
    logp: np.ndarray  # float32 [n]
    experts: np.ndarray  # int32 [n, moe_layers, k]


@dataclasses.dataclass
class Generated:
    tokens: np.ndarray  # int32 [n]
    logp: np.ndarray  # float32 [n], tempered, full vocab (what the learner recomputes)
    logp_sampler: np.ndarray  # float32 [n], under the truncated distribution sampled from
    experts: np.ndarray  # int32 [n, moe_layers, k]
    stopped: bool  # ended on a stop id (else budget)


MAX_STOPS = 4  # stop ids per slot (a fixed width, so changing stop sets never recompiles)


def batch_shards(mesh: jax.sharding.Mesh | None) -> int:
    if mesh is None:
        return 1
    axes = RULES["cache_batch"]
    axes = (axes,) if isinstance(axes, str) else axes
    return int(np.prod([mesh.shape[a] for a in axes]))


def state_shardings(state: engine.EngineState, mesh: jax.sharding.Mesh) -> engine.EngineState:
    def spec(*names):
        return NamedSharding(mesh, logical_to_spec(names))

    kv = spec("cache_batch", "cache_kv_heads", "cache_length", None)
    layers = len(state.cache.k_bksh)
    return engine.EngineState(
        cache=KVCache((kv,) * layers, (kv,) * layers, spec("cache_batch"), spec("cache_batch", None)),
        next_logits_sv=spec("cache_batch", None), keys_sk=spec("cache_batch", None),
        steps_s=spec("cache_batch"))


def bucket(n: int, sizes: Sequence[int]) -> int:
    return next(s for s in sizes if s >= n)


def check_window(lengths: np.ndarray, window: int, slots: Sequence[int], tokens: Sequence[Sequence[int]]) -> None:
    for slot, toks in zip(slots, tokens):
        if lengths[slot] + len(toks) > window:
            raise ValueError(f"slot {slot}: appending {len(toks)} tokens to {lengths[slot]} "
                             f"would pass rollout.window={window}")


class RolloutEngine:
    """Owns the engine state; every method is one or a few jitted calls on fixed shapes."""

    def __init__(self, graphdef: nnx.GraphDef, params: nnx.State, cfg: ModelConfig,
                 rollout: RolloutConfig, *, valid_vocab: int | None = None,
                 mesh: jax.sharding.Mesh | None = None):
        shards = batch_shards(mesh)
        if rollout.slots % shards:
            raise ConfigError(f"rollout.slots={rollout.slots} must be a multiple of the {shards} "
                              "batch shards of the mesh (sharding.RULES['cache_batch'])")
        self.cfg, self.rollout, self.mesh, self.params = cfg, rollout, mesh, params
        self.slots = rollout.slots
        self.window = rollout.window
        self.max_len = rollout.window + max(rollout.prefill_buckets)  # slack for a padded chunk
        self.valid_vocab = cfg.vocab_size if valid_vocab is None else valid_vocab
        self.slot_buckets = sorted({min(shards * 4 ** i, self.slots) for i in range(16)})
        self._lengths = np.zeros(self.slots, np.int64)  # host mirror of the slot lengths
        self._sampling = (jnp.float32(rollout.temperature), jnp.float32(rollout.top_p),
                          jnp.int32(self.valid_vocab))
        state = engine.init_state(cfg, self.slots, self.max_len)
        if mesh is not None:
            state = jax.device_put(state, state_shardings(state, mesh))
        self.state = state

        def with_model(fn):
            return lambda params, *args: fn(nnx.merge(graphdef, params), *args)

        self._prefill = jax.jit(with_model(engine.prefill), donate_argnums=1)
        self._decode = jax.jit(with_model(engine.decode), donate_argnums=1, static_argnums=8)
        self._clear = jax.jit(engine.clear, donate_argnums=0)
        self._seed = jax.jit(engine.seed, donate_argnums=0)

    # ------------------------------------------------------------------------------------------
    def _mesh_context(self):
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    def _slot_array(self, slots: Sequence[int]) -> np.ndarray:
        size = bucket(len(slots), self.slot_buckets)
        return np.array(list(slots) + [self.slots] * (size - len(slots)), np.int32)  # pad = dropped

    def lengths(self) -> np.ndarray:
        return self._lengths.copy()

    def set_params(self, params: nnx.State) -> None:
        """New policy weights (same shapes: no recompile)."""
        self.params = params

    def start(self, slots: Sequence[int], keys: Sequence[jax.Array]) -> None:
        """New episodes in `slots`: empty contexts, episode keys, step counters at 0."""
        slots_p = self._slot_array(slots)
        keys_pk = jnp.stack([jax.random.key_data(k) for k in keys])
        keys_pk = jnp.concatenate([keys_pk, jnp.zeros((len(slots_p) - len(slots), keys_pk.shape[1]),
                                                      keys_pk.dtype)])
        with self._mesh_context():
            self.state = self._clear(self._seed(self.state, slots_p, keys_pk), slots_p)
        self._lengths[list(slots)] = 0

    def clear(self, slots: Sequence[int]) -> None:
        """Empty the contexts of `slots` (a summary reset), keeping their keys and counters."""
        with self._mesh_context():
            self.state = self._clear(self.state, self._slot_array(slots))
        self._lengths[list(slots)] = 0

    def append(self, slots: Sequence[int], tokens: Sequence[Sequence[int]]) -> list[Scored]:
        """Append each slot's tokens (chunked and padded to the buckets); score every token."""
        check_window(self._lengths, self.window, slots, tokens)
        logp = [[] for _ in slots]
        experts = [[] for _ in slots]
        done = [0] * len(slots)
        chunk = max(self.rollout.prefill_buckets)
        temperature = self._sampling[0]
        while True:
            todo = [i for i, toks in enumerate(tokens) if done[i] < len(toks)]
            if not todo:
                break
            pieces = [list(tokens[i][done[i]:done[i] + chunk]) for i in todo]
            t = bucket(max(map(len, pieces)), self.rollout.prefill_buckets)
            slots_p = self._slot_array([slots[i] for i in todo])
            tokens_pt = np.zeros((len(slots_p), t), np.int32)
            n_p = np.zeros(len(slots_p), np.int32)
            for row, piece in enumerate(pieces):
                tokens_pt[row, :len(piece)] = piece
                n_p[row] = len(piece)
            with self._mesh_context():
                self.state, logp_pt, experts_ptlk = self._prefill(
                    self.params, self.state, slots_p, tokens_pt, n_p, temperature)
            logp_pt, experts_ptlk = np.asarray(logp_pt), np.asarray(experts_ptlk)
            for row, i in enumerate(todo):
                logp[i].append(logp_pt[row, :n_p[row]])
                experts[i].append(experts_ptlk[row, :n_p[row]])
                done[i] += int(n_p[row])
                self._lengths[slots[i]] += int(n_p[row])
        layers, k = engine.expert_shape(self.cfg)
        return [Scored(np.concatenate(lp) if lp else np.zeros(0, np.float32),
                       np.concatenate(ex) if ex else np.zeros((0, layers, k), np.int32))
                for lp, ex in zip(logp, experts)]

    def generate(self, slots: Sequence[int], budgets: Sequence[int],
                 stops: Sequence[Sequence[int]]) -> list[Generated]:
        """Decode `slots` together until each hits one of its stop ids or its budget."""
        max_new = self.rollout.max_new_tokens
        active_s = np.zeros(self.slots, bool)
        budget_s = np.zeros(self.slots, np.int32)
        stops_sk = np.full((self.slots, MAX_STOPS), -1, np.int32)
        for slot, budget, stop in zip(slots, budgets, stops):
            if budget > max_new:
                raise ValueError(f"slot {slot}: budget {budget} exceeds rollout.max_new_tokens={max_new}")
            if len(stop) > MAX_STOPS:
                raise ValueError(f"slot {slot}: {len(stop)} stop ids; at most {MAX_STOPS}")
            active_s[slot], budget_s[slot] = True, min(budget, self.window - self._lengths[slot])
            stops_sk[slot, :len(stop)] = stop
        with self._mesh_context():
            self.state, out = self._decode(self.params, self.state, active_s, budget_s, stops_sk,
                                           *self._sampling, max_new)
        out = jax.tree.map(np.asarray, out)
        results = []
        for slot in slots:
            n = int(out.n_s[slot])
            self._lengths[slot] += n
            results.append(Generated(out.tokens_sn[slot, :n], out.logp_sn[slot, :n],
                                     out.logp_sampler_sn[slot, :n], out.experts_snlk[slot, :n],
                                     bool(out.stopped_s[slot])))
        return results


class TeacherForcedOnly:
    """The engine's interface for loops whose policy writes every token (scripted
    demonstrations): slot lengths and the window check as in RolloutEngine, no model run, zero
    log-probs and expert choices. SFT reads only the tokens, so demonstrations cost no forward
    passes (48 Qwen2.5-0.5B demonstrations spent 20 min in prefills on this CPU)."""

    def __init__(self, cfg: ModelConfig, rollout: RolloutConfig):
        self.cfg, self.slots, self.window = cfg, rollout.slots, rollout.window
        self._lengths = np.zeros(self.slots, np.int64)

    def start(self, slots: Sequence[int], keys: Sequence[jax.Array]) -> None:
        self._lengths[list(slots)] = 0

    def clear(self, slots: Sequence[int]) -> None:
        self._lengths[list(slots)] = 0

    def append(self, slots: Sequence[int], tokens: Sequence[Sequence[int]]) -> list[Scored]:
        check_window(self._lengths, self.window, slots, tokens)
        layers, k = engine.expert_shape(self.cfg)
        for slot, toks in zip(slots, tokens):
            self._lengths[slot] += len(toks)
        return [Scored(np.zeros(len(t), np.float32), np.zeros((len(t), layers, k), np.int32)) for t in tokens]

    def generate(self, slots: Sequence[int], budgets: Sequence[int], stops: Sequence[Sequence[int]]):
        raise RuntimeError("TeacherForcedOnly runs no model: a policy that samples needs a RolloutEngine")
