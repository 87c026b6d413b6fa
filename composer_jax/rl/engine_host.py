"""Host side of the rollout engine: jit once per bucket, pad requests to buckets, numpy results.

Shapes stay fixed so nothing recompiles mid-rollout: a prefill pads its chunk length up to one
of `rollout.prefill_buckets` (longer inputs go in several chunks) and its slot count up to one
of a few slot buckets (powers of 4 times the batch shard count, and all slots); decode runs
over the running slots padded to a slot bucket (all slots: the state as it is; fewer: their rows
gathered and scattered back), with a static output length of `rollout.max_new_tokens`.

On a mesh the engine keeps the policy in an inference layout (`inference_mesh`,
`inference_shardings`): the train mesh's devices with the FSDP axis folded into `data`, so the
weights are replicated over the batch axes and split only over `expert` and `tensor`, and a
decoded token moves activations (the MoE's all-to-all, tensor all-reduces), never a weight. The
weights are resharded once per `set_params` (a policy update), and every jit pins its input and
output shardings, so an input arriving in another layout is moved, not recompiled for.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from composer_jax.errors import ConfigError
from composer_jax.model.attention import KVCache
from composer_jax.model.config import ModelConfig
from composer_jax.rl import engine
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.sharding import RULES, logical_to_spec
from composer_jax.sharding import state_shardings as param_shardings


@dataclasses.dataclass
class Scored:
    """Appended tokens with their tempered log-probs (given what precedes) and expert choices."""
    logp: np.ndarray | None  # float32 [n]; None when appended with score=False
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


# Mesh axes the inference layout folds into `data`: the weights' FSDP split, which would cost a
# gather of every weight per decode call (or per token, where XLA keeps it in the loop).
INFERENCE_FOLD = ("fsdp",)


def inference_mesh(mesh: jax.sharding.Mesh, fold: Sequence[str] = INFERENCE_FOLD) -> jax.sharding.Mesh:
    """The same devices as `mesh` with the `fold` axes merged into `data` (left at size 1).

    The rules table then applies unchanged: a weight split over a folded axis is replicated
    over it, and the batch axes (data, fsdp, expert) give every device the same slots as on
    `mesh` when only fsdp is folded. Returns `mesh` itself when every folded axis has size 1."""
    names = tuple(mesh.axis_names)
    fold = tuple(a for a in names if a in fold and a != "data")
    if all(mesh.shape[a] == 1 for a in fold):
        return mesh
    order = [names.index("data"), *(names.index(a) for a in fold),
             *(i for i, a in enumerate(names) if a != "data" and a not in fold)]
    devices = np.transpose(mesh.devices, order)
    merged = int(np.prod(devices.shape[:1 + len(fold)]))
    rest = [a for a in names if a != "data" and a not in fold]
    sizes = {"data": merged, **{a: 1 for a in fold}, **{a: mesh.shape[a] for a in rest}}
    devices = devices.reshape([sizes[a] for a in ["data", *fold, *rest]])
    devices = np.transpose(devices, [["data", *fold, *rest].index(a) for a in names])
    return jax.sharding.Mesh(devices, names, axis_types=(AxisType.Auto,) * len(names))


def inference_shardings(params: nnx.State, mesh: jax.sharding.Mesh,
                        fold: Sequence[str] = INFERENCE_FOLD) -> nnx.State:
    """Where the engine keeps the policy: the rules table's shardings on `inference_mesh(mesh)`
    (by default split over expert and tensor, replicated over data and fsdp)."""
    return param_shardings(params, inference_mesh(mesh, fold))


FOLDED_WEIGHTS_FRACTION = 0.4  # of a device's memory; the KV cache and the learner need the rest


def folded_weights_fit(params: nnx.State, mesh: jax.sharding.Mesh,
                       fold: Sequence[str] = INFERENCE_FOLD, bytes_limit: float | None = None) -> bool:
    """Whether the engine's own copy of the weights in the folded layout fits beside training
    (a Kimi-size model replicated over FSDP would not: it then keeps the train layout). The
    limit is the device's own; a device that reports none (CPU) is taken to have room."""
    if bytes_limit is None:
        bytes_limit = (mesh.devices.flat[0].memory_stats() or {}).get("bytes_limit")
    if bytes_limit is None:
        return True
    per_device = sum(math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize for x, s in zip(
        jax.tree.leaves(params), jax.tree.leaves(inference_shardings(params, mesh, fold))))
    return per_device <= FOLDED_WEIGHTS_FRACTION * bytes_limit


def cache_shardings(state: engine.EngineState, mesh: jax.sharding.Mesh) -> engine.EngineState:
    def spec(*names):
        return NamedSharding(mesh, logical_to_spec(names))

    kv = spec("cache_batch", "cache_kv_heads", "cache_length", None)
    layers = len(state.cache.k_bksh)
    return engine.EngineState(
        cache=KVCache((kv,) * layers, (kv,) * layers, spec("cache_batch"), spec("cache_batch", None)),
        next_logits_sv=spec("cache_batch", None), keys_sk=spec("cache_batch", None),
        steps_s=spec("cache_batch"), mark_lengths_s=spec("cache_batch"),
        mark_recent_sk=spec("cache_batch", None), mark_logits_sv=spec("cache_batch", None))


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
                 mesh: jax.sharding.Mesh | None = None, fold: Sequence[str] | None = None):
        """`mesh` is the train mesh; the engine runs on `inference_mesh(mesh, fold)` (fold=()
        keeps the train layout; ("fsdp", "tensor") also replicates over tensor, trading
        tensor-fold weight memory for no tensor all-reduces per token). By default FSDP is
        folded when the folded weights fit in `FOLDED_WEIGHTS_FRACTION` of a device."""
        if fold is None:
            fold = INFERENCE_FOLD if mesh is None or folded_weights_fit(params, mesh) else ()
        train_mesh, mesh = mesh, None if mesh is None else inference_mesh(mesh, fold)
        shards = batch_shards(mesh)
        if rollout.slots % shards:
            raise ConfigError(f"rollout.slots={rollout.slots} must be a multiple of the {shards} "
                              "batch shards of the mesh (sharding.RULES['cache_batch'])")
        self.cfg, self.rollout, self.mesh, self.train_mesh = cfg, rollout, mesh, train_mesh
        self.slots = rollout.slots
        self.window = rollout.window
        self.max_len = rollout.window + max(rollout.prefill_buckets)  # slack for a padded chunk
        self.valid_vocab = cfg.vocab_size if valid_vocab is None else valid_vocab
        self.slot_buckets = sorted({min(shards * 4 ** i, self.slots) for i in range(16)})
        self._lengths = np.zeros(self.slots, np.int64)  # host mirror of the slot lengths
        sampling = (jnp.float32(rollout.temperature), jnp.float32(rollout.top_p),
                    jnp.int32(self.valid_vocab))
        state = engine.init_state(cfg, self.slots, self.max_len)
        # The jits take the weights as a flat list in this order (set_params matches by path,
        # so a state whose variables carry other metadata still fits).
        self._param_paths, self._param_tree = _paths(params), jax.tree.structure(params)
        pins: dict[str, dict] = dict(prefill={}, decode={}, decode_rows={}, clear={}, seed={}, mark={}, rewind={})
        self._param_shardings = None
        if mesh is not None:
            self._param_shardings = jax.tree.leaves(inference_shardings(params, train_mesh, fold))
            rep = NamedSharding(mesh, PartitionSpec())

            def rows(*rest):  # per-slot arrays: split like the cache
                return NamedSharding(mesh, logical_to_spec(("cache_batch", *rest)))

            def pin(ins, outs):
                return dict(in_shardings=ins, out_shardings=outs)

            st, w = cache_shardings(state, mesh), self._param_shardings
            state, sampling = jax.device_put(state, st), jax.device_put(sampling, rep)
            decoded = engine.Decoded(tokens_sn=rows(None), logp_sn=rows(None), logp_sampler_sn=rows(None),
                                     experts_snlk=rows(None, None, None), n_s=rows(), stopped_s=rows())
            pins = dict(prefill=pin((w, st, rep, rep, rep, rep), (st, rows(None), rows(None, None, None))),
                        decode=pin((w, st, rows(), rows(), rows(None), rep, rep, rep), (st, decoded)),
                        decode_rows=pin((w, st, rep, rep, rep, rep, rep, rep), (st, decoded)),
                        clear=pin((st, rep), st), seed=pin((st, rep, rep), st),
                        mark=pin((st, rep), st), rewind=pin((st, rep), st))
        self.state, self._sampling = state, sampling
        self._sampling_sharding = rep if mesh is not None else None
        self._params: list[jax.Array] = []
        self.set_params(params)

        def with_model(fn):
            def run(flat_params, *args, **kwargs):
                model = nnx.merge(graphdef, jax.tree.unflatten(self._param_tree, flat_params))
                return fn(model, *args, **kwargs)
            return run

        decode = functools.partial(with_model(engine.decode), max_new=rollout.max_new_tokens)
        self._prefill = {score: jax.jit(functools.partial(with_model(engine.prefill), score=score),
                                        donate_argnums=1, **pins["prefill"]) for score in (True, False)}
        self._decode = jax.jit(decode, donate_argnums=1, **pins["decode"])
        self._decode_rows = jax.jit(functools.partial(with_model(engine.decode_rows), max_new=rollout.max_new_tokens),
                                    donate_argnums=1, **pins["decode_rows"])
        self._clear = jax.jit(engine.clear, donate_argnums=0, **pins["clear"])
        self._seed = jax.jit(engine.seed, donate_argnums=0, **pins["seed"])
        self._mark = jax.jit(engine.mark, donate_argnums=0, **pins["mark"])
        self._rewind = jax.jit(engine.rewind, donate_argnums=0, **pins["rewind"])
        self._marks = np.zeros(self.slots, np.int64)  # host mirror of the marks

    # ------------------------------------------------------------------------------------------
    def _mesh_context(self):
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    def _slot_array(self, slots: Sequence[int]) -> np.ndarray:
        size = bucket(len(slots), self.slot_buckets)
        return np.array(list(slots) + [self.slots] * (size - len(slots)), np.int32)  # pad = dropped

    def lengths(self) -> np.ndarray:
        return self._lengths.copy()

    def set_params(self, params: nnx.State) -> None:
        """New policy weights (same shapes: no recompile), moved once into the inference layout
        (a no-op for arrays already in it: the engine then shares the caller's buffers)."""
        by_path = dict(zip(_paths(params), jax.tree.leaves(params)))
        if set(by_path) != set(self._param_paths):
            missing = sorted(set(self._param_paths) - set(by_path))
            extra = sorted(set(by_path) - set(self._param_paths))
            raise ValueError(f"set_params: the new state's variables differ from the engine's "
                             f"(missing {missing[:3]}, unexpected {extra[:3]})")
        flat = [by_path[p] for p in self._param_paths]
        if self._param_shardings is not None:
            flat = jax.device_put(flat, self._param_shardings)
        self._params = flat

    def set_sampling(self, temperature: float, top_p: float) -> tuple[float, float]:
        """Sampling of the next generations (evaluations sample apart from training rollouts);
        they are arguments of the compiled programs, so nothing recompiles. Returns the old pair."""
        old = (float(self._sampling[0]), float(self._sampling[1]))
        sampling = (jnp.float32(temperature), jnp.float32(top_p), self._sampling[2])
        if self._sampling_sharding is not None:
            sampling = jax.device_put(sampling, self._sampling_sharding)
        self._sampling = sampling
        return old

    @property
    def sampling(self) -> tuple[float, float]:
        """(temperature, top_p) of the next generations."""
        return float(self._sampling[0]), float(self._sampling[1])

    @property
    def params(self) -> nnx.State:
        """The policy as the engine holds it (in the inference layout on a mesh)."""
        return jax.tree.unflatten(self._param_tree, self._params)

    def compile_decode(self, rows: int | None = None):
        """The compiled decode program over all slots, or over a bucket of `rows` slots (its
        per-token collectives: `tools.hlo.loop_collectives`; its cost: `cost_analysis()`)."""
        rows = self.slots if rows is None else bucket(rows, self.slot_buckets)
        ends = (np.zeros(rows, np.int32), np.full((rows, MAX_STOPS), -1, np.int32), *self._sampling)
        with self._mesh_context():
            if rows == self.slots:
                return self._decode.lower(self._params, self.state, np.zeros(rows, bool), *ends).compile()
            return self._decode_rows.lower(self._params, self.state, np.full(rows, self.slots, np.int32),
                                           *ends).compile()

    def _keys_array(self, slots_p: np.ndarray, keys: Sequence[jax.Array]) -> jax.Array:
        """Key data per padded slot row (padding rows get zeros; their writes are dropped)."""
        keys_pk = jnp.stack([jax.random.key_data(k) for k in keys])
        return jnp.concatenate([keys_pk, jnp.zeros((len(slots_p) - len(keys), keys_pk.shape[1]), keys_pk.dtype)])

    def start(self, slots: Sequence[int], keys: Sequence[jax.Array]) -> None:
        """New episodes in `slots`: empty contexts, episode keys, step counters at 0."""
        slots_p = self._slot_array(slots)
        keys_pk = self._keys_array(slots_p, keys)
        with self._mesh_context():
            self.state = self._clear(self._seed(self.state, slots_p, keys_pk), slots_p)
        self._lengths[list(slots)] = 0

    def seed(self, slots: Sequence[int], keys: Sequence[jax.Array]) -> None:
        """New sampling keys (step counters at 0) for `slots`, keeping their contexts (a served
        request continuing a parked context samples as if its prompt were fresh)."""
        slots_p = self._slot_array(slots)
        with self._mesh_context():
            self.state = self._seed(self.state, slots_p, self._keys_array(slots_p, keys))

    def clear(self, slots: Sequence[int]) -> None:
        """Empty the contexts of `slots` (a summary reset), keeping their keys and counters."""
        with self._mesh_context():
            self.state = self._clear(self.state, self._slot_array(slots))
        self._lengths[list(slots)] = 0

    def mark(self, slots: Sequence[int]) -> None:
        """Remember where each slot's context ends now (the end of an episode's prompt)."""
        with self._mesh_context():
            self.state = self._mark(self.state, self._slot_array(slots))
        self._marks[list(slots)] = self._lengths[list(slots)]

    def rewind(self, slots: Sequence[int]) -> None:
        """Cut each slot's context back to its mark, keeping the KV (and the token-shift
        history and next logits) of everything before it: a summary reset then prefills only
        the summary behind the prompt."""
        with self._mesh_context():
            self.state = self._rewind(self.state, self._slot_array(slots))
        self._lengths[list(slots)] = self._marks[list(slots)]

    def append(self, slots: Sequence[int], tokens: Sequence[Sequence[int]], *, score: bool = True) -> list[Scored]:
        """Append each slot's tokens (chunked and padded to the buckets); with `score`, each
        token's log-prob given what precedes it (else Scored.logp is None: the prefill skips the
        vocabulary projection of every position but the last)."""
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
                self.state, logp_pt, experts_ptlk = self._prefill[score](
                    self._params, self.state, slots_p, tokens_pt, n_p, temperature)
            logp_pt, experts_ptlk = np.asarray(logp_pt), np.asarray(experts_ptlk)
            for row, i in enumerate(todo):
                logp[i].append(logp_pt[row, :n_p[row]])
                experts[i].append(experts_ptlk[row, :n_p[row]])
                done[i] += int(n_p[row])
                self._lengths[slots[i]] += int(n_p[row])
        layers, k = engine.expert_shape(self.cfg)
        return [Scored((np.concatenate(lp) if lp else np.zeros(0, np.float32)) if score else None,
                       np.concatenate(ex) if ex else np.zeros((0, layers, k), np.int32))
                for lp, ex in zip(logp, experts)]

    def generate(self, slots: Sequence[int], budgets: Sequence[int],
                 stops: Sequence[Sequence[int]]) -> list[Generated]:
        """Decode `slots` together until each hits one of its stop ids or its budget. Each step
        costs the slot bucket that holds `slots`, not every slot."""
        max_new = self.rollout.max_new_tokens
        slots_p = self._slot_array(slots)
        full = len(slots_p) == self.slots or not self.rollout.decode_buckets  # the state as it is
        rows = self.slots if full else len(slots_p)
        row_of = {slot: slot if full else i for i, slot in enumerate(slots)}
        active_r = np.zeros(rows, bool)
        budget_r = np.zeros(rows, np.int32)
        stops_rk = np.full((rows, MAX_STOPS), -1, np.int32)
        for slot, budget, stop in zip(slots, budgets, stops):
            if budget > max_new:
                raise ValueError(f"slot {slot}: budget {budget} exceeds rollout.max_new_tokens={max_new}")
            if len(stop) > MAX_STOPS:
                raise ValueError(f"slot {slot}: {len(stop)} stop ids; at most {MAX_STOPS}")
            r = row_of[slot]
            active_r[r], budget_r[r] = True, min(budget, self.window - self._lengths[slot])
            stops_rk[r, :len(stop)] = stop
        with self._mesh_context():
            if full:
                self.state, out = self._decode(self._params, self.state, active_r, budget_r, stops_rk,
                                               *self._sampling)
            else:
                self.state, out = self._decode_rows(self._params, self.state, slots_p, budget_r, stops_rk,
                                                    *self._sampling)
        out = jax.tree.map(np.asarray, out)
        results = []
        for slot in slots:
            r, n = row_of[slot], int(out.n_s[row_of[slot]])
            self._lengths[slot] += n
            results.append(Generated(out.tokens_sn[r, :n], out.logp_sn[r, :n],
                                     out.logp_sampler_sn[r, :n], out.experts_snlk[r, :n],
                                     bool(out.stopped_s[r])))
        return results


def _paths(tree) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


class TeacherForcedOnly:
    """The engine's interface for loops whose policy writes every token (scripted
    demonstrations): slot lengths and the window check as in RolloutEngine, no model run, zero
    log-probs and expert choices. SFT reads only the tokens, so demonstrations cost no forward
    passes (48 Qwen2.5-0.5B demonstrations spent 20 min in prefills on this CPU)."""

    def __init__(self, cfg: ModelConfig, rollout: RolloutConfig):
        self.cfg, self.slots, self.window = cfg, rollout.slots, rollout.window
        self._lengths = np.zeros(self.slots, np.int64)
        self._marks = np.zeros(self.slots, np.int64)

    def start(self, slots: Sequence[int], keys: Sequence[jax.Array]) -> None:
        self._lengths[list(slots)] = 0

    def clear(self, slots: Sequence[int]) -> None:
        self._lengths[list(slots)] = 0

    def mark(self, slots: Sequence[int]) -> None:
        self._marks[list(slots)] = self._lengths[list(slots)]

    def rewind(self, slots: Sequence[int]) -> None:
        self._lengths[list(slots)] = self._marks[list(slots)]

    def append(self, slots: Sequence[int], tokens: Sequence[Sequence[int]], *, score: bool = True) -> list[Scored]:
        check_window(self._lengths, self.window, slots, tokens)
        layers, k = engine.expert_shape(self.cfg)
        for slot, toks in zip(slots, tokens):
            self._lengths[slot] += len(toks)
        return [Scored(np.zeros(len(t), np.float32) if score else None, np.zeros((len(t), layers, k), np.int32))
                for t in tokens]

    def generate(self, slots: Sequence[int], budgets: Sequence[int], stops: Sequence[Sequence[int]]):
        raise RuntimeError("TeacherForcedOnly runs no model: a policy that samples needs a RolloutEngine")
