"""Plan a run on paper: per-chip memory, FLOPs, communication and step time, before launching it.

  python -m composer_jax.tools.plan --config configs/kimi_k2_5.py --slice v5p-1024
  python -m composer_jax.tools.plan --config configs/kimi_k2_5.py --slice v5p-1024 \
      --config.data.seq_len=4096 --config.train.grad_accum=2

Memory per chip is the peak of the compiled train step, term by term:
  * training state: float32 params, grads and AdamW moments, each variable split as the
    logical-axis rules in composer_jax/sharding.py place it (exact);
  * gathered weights: FSDP all-gathers a layer's float32 weights before using them (an
    expert-parallel MoE only its local experts; the dense reference all of them); without remat
    the backward pass keeps every layer's, with remat about two layers' are live;
  * vocabulary tables: the gathered head/embedding and their full-size float32 gradients before
    the reduce-scatter;
  * saved activations (per the remat policy) and the attention scores (no flash attention here:
    [heads, seq, seq] per row, float32 plus the compute-dtype probabilities);
  * MoE buffers sized by the send capacity, per impl: expert-parallel send/receive/return
    buffers and the expert intermediates of the grouped matmul; the blocked kernel's
    block-expanded weights (one [d, f] copy per block); the dense reference's E x activations
    and the global batch's [tokens, E, d] cotangent XLA replicates on every chip;
  * the backward working set: one layer's weight gradients before their reduce-scatter;
  * logits, and the rollout KV cache (RL only; not part of the train step).
The terms add up, except that with grad_accum=1 the gradients appear only as the backward pass
frees the activations, so the peak counts the larger of the two (with accumulation the scan
carries them through every micro-batch). A plan that does not fit is refused, naming the
largest term. The remat branches (one layer recomputed at a time) are not yet checked against
a compile: remat over a MoE block does not trace today.

Step time = max(compute, overlappable communication) + all-to-all time. FSDP gathers,
gradient reduce-scatters and all-reduces do not depend on the layer they feed and XLA's
latency-hiding scheduler runs them under the previous layer's compute, so they cost time only
beyond it; the MoE all-to-all sits between the router and the expert matmul (and again before
the combine), so every MoE layer waits for it. Each collective moves its per-chip bytes at the
chip's one-direction interconnect bandwidth (tools/hardware.py); a ring or all-to-all over n
chips sends (n-1)/n of the buffer.

Checked against the compiler (tests/test_plan.py on the 8-device CPU mesh, and
benchmarks/kimi_compile_check.py at Kimi-K2.5 dims on 64 fake devices): plan the CPU program
with `--slice cpu-N`, whose chip computes bf16 matmuls in float32 and runs expert_parallel's
blocked kernel, as XLA:CPU does.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections import defaultdict

import jax
import numpy as np
from flax import nnx

from composer_jax.config_loading import apply_override, load_config, split_overrides
from composer_jax.config_schema import validate
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, init_cache
from composer_jax.model.create import abstract_model
from composer_jax.model.moe import block_size, send_capacity
from composer_jax.model.stats import model_stats
from composer_jax.sharding import MESH_AXES, RULES, logical_to_spec
from composer_jax.tools.hardware import Slice, parse_slice

USABLE_MEMORY_FRACTION = 0.9  # headroom for XLA scratch and fragmentation
F32 = 4


@dataclasses.dataclass(frozen=True)
class MoEPlan:
    """How one MoE layer dispatches on this mesh, per device and micro-batch."""
    impl: str  # model.moe_impl
    dispatch: str  # expert_parallel (per-device routing, all-to-all) | global (dense reference)
    kernel: str  # ragged | blocked | dense: the grouped matmul the program runs
    tokens_per_device: int
    expert_shards: int  # X: devices on the mesh's expert axis
    experts_per_device: int
    send_capacity: int  # C: rows a device sends to each expert shard
    rows: int  # X * C rows sent (and received) per device
    kernel_rows: int  # rows the grouped matmul runs (blocked: padded to whole blocks)
    n_blocks: int  # blocked kernel only
    # The all-to-all, per layer and micro-batch: what the token rows alone would move
    # (tokens x top_k x d_model x bytes x 2 directions x forward + backward) and what the
    # capacity-sized buffers move (the compiled program's all-to-all payload).
    token_bytes_per_layer: float
    all_to_all_bytes_per_layer: float


@dataclasses.dataclass(frozen=True)
class Plan:
    slice: str
    n_chips: int
    mesh: dict
    memory_bytes: dict  # per chip, by term
    memory_total_bytes: float  # the peak: the terms' sum, but with grad_accum=1 the gradients
    # and the activation-side terms are not live together (the larger counts)
    memory_available_bytes: float
    train_step_bytes: float  # the compiled step's peak: the total less the rollout KV cache
    flops_per_step: float
    tokens_per_step: int
    tokens_per_chip_per_micro_batch: int
    assumed_mfu: float
    compute_time_s: float
    communication_bytes: dict  # per chip per step, by collective
    communication_time_s: dict
    step_time_s: float
    moe: dict | None
    fits: bool


def resolve_mesh(mesh_config, n_chips: int) -> dict:
    sizes = {a: int(mesh_config.get(a, 1)) for a in MESH_AXES}
    fixed = math.prod(s for s in sizes.values() if s != -1)
    for axis, size in sizes.items():
        if size == -1:
            if n_chips % fixed:
                raise ConfigError(f"mesh.{axis}=-1: the other axes ({fixed}) do not divide {n_chips} chips")
            sizes[axis] = n_chips // fixed
    if math.prod(sizes.values()) != n_chips:
        raise ConfigError(f"mesh: {sizes} uses {math.prod(sizes.values())} chips but the slice has {n_chips}")
    return sizes


def _axes(entry) -> tuple[str, ...]:
    return () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))


def shards_of(spec, mesh: dict, skip: tuple[str, ...] = ()) -> int:
    """How many ways a PartitionSpec splits an array on a mesh of the given axis sizes
    (`skip`: mesh axes a gather has undone)."""
    return math.prod(mesh[a] for entry in spec for a in _axes(entry) if a not in skip)


def _shapes_only(cfg: ModelConfig) -> ModelConfig:
    """`cfg` with the fields that change no parameter shape (nor model_stats) normalised, so
    plans of variants share one abstract model (seconds to build at 1T parameters)."""
    return dataclasses.replace(cfg, remat="none", moe_impl="ragged", capacity_factor=0.0)


def _params(cfg: ModelConfig) -> tuple:
    """(path, shape, logical axes) of every optimised parameter."""
    return _abstract_params(_shapes_only(cfg))


@functools.lru_cache(maxsize=8)
def _abstract_params(cfg: ModelConfig) -> tuple:
    _, state = abstract_model(cfg)
    return tuple((path, v.shape, v.get_metadata()["logical_axes"])
                 for path, v in nnx.to_flat_state(state) if isinstance(v, nnx.Param))


@functools.lru_cache(maxsize=8)
def _model_stats(cfg: ModelConfig, seq_len: int):
    return model_stats(cfg, seq_len)


def state_bytes_per_chip(cfg: ModelConfig, mesh: dict) -> dict:
    """Training state per chip, each variable divided by the shards its logical axes map to."""
    per_chip = sum(math.prod(shape) / shards_of(logical_to_spec(axes), mesh)
                   for _, shape, axes in _params(cfg))
    return dict(params_f32=4 * per_chip, grads_f32=4 * per_chip, adam_moments_f32=8 * per_chip)


def gathered_bytes(cfg: ModelConfig, mesh: dict, all_experts: bool) -> tuple[dict, float]:
    """float32 bytes per chip of each layer's weights after the FSDP gather ({layer: bytes})
    and of the vocabulary tables (embedding, head). `all_experts`: the expert axis is gathered
    too (the dense reference routes the global batch against every expert)."""
    fsdp_axes = _axes(RULES["embed"])
    layers: dict = defaultdict(float)
    vocab = 0.0
    for path, shape, axes in _params(cfg):
        skip = fsdp_axes + (_axes(RULES["expert"]) if all_experts and "expert" in axes else ())
        size = F32 * math.prod(shape) / shards_of(logical_to_spec(axes), mesh, skip)
        if path[0] == "layers":
            layers[path[1]] += size
        elif "vocab" in axes:
            vocab += size
    return dict(layers), vocab


def _width(cfg: ModelConfig, slice_: Slice) -> int:
    """Bytes per activation element: the compute dtype, but XLA:CPU computes bf16 matmuls in
    float32 and keeps the float32 copies."""
    return F32 if slice_.chip.kind == "cpu" or cfg.dtype != "bfloat16" else 2


def _attention_dims(cfg: ModelConfig) -> float:
    """Per-token widths one attention layer keeps for its backward pass, beyond its input."""
    n = cfg.n_heads
    if cfg.attention == "mla":
        p, r, v, c = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        q_low = 2 * cfg.q_lora_rank  # the low-rank query and its norm
        return q_low + n * (p + r) + 2 * c + r + n * (p + v) + n * v
    return (n + 2 * cfg.n_kv_heads) * cfg.head_dim + n * cfg.head_dim


def activation_bytes_per_token_layer(cfg: ModelConfig, seq_len: int, tensor: int, width: int,
                                     moe_layer: bool) -> dict:
    """Bytes one layer keeps per token for the backward pass with nothing rematerialised:
    {'activations': ..., 'attention_scores': ...}. A MoE layer's routed experts are sized by
    `moe_plan` (capacity rows, not tokens); here only its shared experts and router."""
    d = cfg.d_model
    if moe_layer:
        ffn = cfg.n_shared_experts * cfg.d_ff_expert
        router = 3 * F32 * cfg.n_experts  # float32 logits, scores, selection
    else:
        ffn, router = cfg.d_ff, 0
    # Residual stream and the two norms' outputs; attention projections; SwiGLU gate, up,
    # silu(gate), product (split over tensor).
    acts = width * (4 * d + _attention_dims(cfg) / tensor + 4 * ffn / tensor) + router
    scores = (F32 + width) * cfg.n_heads * seq_len / tensor
    return dict(activations=acts, attention_scores=scores)


def remat_saved_bytes_per_token_layer(cfg: ModelConfig, tensor: int, width: int) -> float:
    """What a rematerialised layer keeps per token across the forward pass."""
    if cfg.remat == "full":
        return width * cfg.d_model  # the layer input only
    # save_dots_except_mlp: the input and the named attention tensors (query_proj, key_proj,
    # value_proj, attn_out, out_proj).
    n = cfg.n_heads
    if cfg.attention == "mla":
        named = (n * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) + cfg.kv_lora_rank
                 + cfg.qk_rope_head_dim + n * cfg.v_head_dim)
    else:
        named = (2 * n + 2 * cfg.n_kv_heads) * cfg.head_dim
    return width * (2 * cfg.d_model + named / tensor)


def expert_parallel(cfg: ModelConfig, n_chips: int) -> bool:
    """As model/moe.py's uses_expert_parallel: on more than one device every impl but the
    dense reference dispatches per device."""
    return cfg.moe_impl == "expert_parallel" or (cfg.moe_impl != "dense" and n_chips > 1)


def moe_plan(cfg: ModelConfig, mesh: dict, slice_: Slice, tokens: int) -> MoEPlan:
    """Dispatch shapes of one MoE layer for `tokens` per device per micro-batch."""
    k, e, d = cfg.top_k, cfg.n_experts, cfg.d_model
    width = _width(cfg, slice_)
    n_chips = math.prod(mesh.values())
    x = math.prod(mesh[a] for a in _axes(RULES["expert"]))
    if expert_parallel(cfg, n_chips):
        dispatch = "expert_parallel"
        kernel = cfg.moe_impl if cfg.moe_impl in ("ragged", "blocked") else (
            "ragged" if slice_.chip.kind in ("tpu", "gpu") else "blocked")
        local = e // x
        capacity = send_capacity(tokens, k, x, local, cfg.capacity_factor)
        rows = x * capacity
    else:
        dispatch, kernel = "global", cfg.moe_impl
        local, x, capacity, rows = e, 1, tokens * k, tokens * k
    n_blocks, kernel_rows = 0, rows
    if kernel == "blocked":
        block = block_size(rows, local)
        n_blocks = -(-rows // block) + local
        kernel_rows = n_blocks * block
    passes = 3 if cfg.remat != "none" else 2  # forward, backward (+ the rematerialised forward)
    token_bytes = tokens * k * d * width * 2 * 2
    a2a = 0.0
    if dispatch == "expert_parallel" and x > 1:
        # Rows there and back per pass, plus the int32 local-expert ids once per forward.
        a2a = passes * 2 * rows * d * width + (passes - 1) * rows * 4
    return MoEPlan(cfg.moe_impl, dispatch, kernel, tokens, x, local, capacity, rows, kernel_rows,
                   n_blocks, token_bytes, a2a)


def moe_layer_bytes(cfg: ModelConfig, m: MoEPlan, tensor: int, width: int, cpu: bool = False) -> dict:
    """Bytes one MoE layer keeps for its backward pass (per device), by term."""
    d, f, k, t = cfg.d_model, cfg.d_ff_expert / tensor, cfg.top_k, m.tokens_per_device
    out = {}
    if m.kernel == "dense":
        # Every expert on every token: gate, up, silu, product [t, E, f] and outputs [t, E, d].
        out["moe_dense_all_experts"] = width * t * cfg.n_experts * (4 * f + d)
        return out
    # Token rows per assignment (gathered inputs, weighted outputs) and the capacity-sized
    # send / receive / return buffers (expert-parallel) around the kernel.
    buffers = 2 * t * k + (4 * m.rows if m.dispatch == "expert_parallel" else 0)
    out["moe_dispatch_buffers"] = width * d * buffers
    # The grouped matmul's rows: sorted inputs and outputs, gate, up, silu, product.
    out["moe_expert_activations"] = width * m.kernel_rows * (2 * d + 4 * f)
    if m.kernel == "blocked":
        # One copy of its expert's [d, f] weights per block, for each of the 3 projections.
        out["moe_block_expanded_weights"] = width * 3 * m.n_blocks * d * f
    if m.kernel == "ragged" and cpu:
        # XLA:CPU lowers ragged_dot densely: every row masked for every local expert, float32
        # ([experts, rows, d] for the gate and up projections, [experts, rows, f] for down).
        out["moe_ragged_dense_lowering_cpu"] = F32 * m.experts_per_device * m.rows * (2 * d + f)
    return out


def plan(config, slice_: Slice, mfu: float) -> Plan:
    cfg = ModelConfig.from_config(config.model)
    mesh = resolve_mesh(config.mesh, slice_.n_chips)
    seq_len, batch = int(config.data.seq_len), int(config.data.batch_size)
    accum = int(config.train.grad_accum)
    batch_shards = mesh["data"] * mesh["fsdp"] * mesh["expert"]
    if batch % accum or (batch // accum) % batch_shards:
        raise ConfigError(f"data.batch_size={batch} / train.grad_accum={accum} rows per micro-batch "
                          f"do not split over the {batch_shards} batch shards (mesh data x fsdp x "
                          f"expert): each micro-batch needs a whole number of rows per chip")
    rows_per_chip = batch // accum // batch_shards
    tokens = rows_per_chip * seq_len  # per chip per micro-batch
    tensor, width = mesh["tensor"], _width(cfg, slice_)
    n_moe, n_dense = cfg.n_moe_layers, cfg.n_layers - cfg.n_moe_layers

    memory = state_bytes_per_chip(cfg, mesh)
    m = moe_plan(cfg, mesh, slice_, tokens) if cfg.is_moe else None
    layer_gathered, vocab_gathered = gathered_bytes(cfg, mesh, all_experts=bool(m and m.dispatch == "global"))
    remat = cfg.remat != "none"
    per_layer = [layer_gathered[i] for i in sorted(layer_gathered)]
    fsdp = mesh["fsdp"] > 1  # without FSDP nothing is gathered
    memory["gathered_weights"] = (2 * max(per_layer) if remat else sum(per_layer)) if fsdp else 0.0
    # The tables' full float32 gradients (before their reduce-scatter), and with FSDP the
    # gathered head (or tied table) its backward needs.
    kept = (1.0 if cfg.tie_embeddings else 0.5) if fsdp else 0.0
    memory["vocab_tables"] = vocab_gathered * (1 + kept)

    dense_layer = activation_bytes_per_token_layer(cfg, seq_len, tensor, width, moe_layer=False)
    moe_layer = activation_bytes_per_token_layer(cfg, seq_len, tensor, width, moe_layer=True)
    moe_terms = moe_layer_bytes(cfg, m, tensor, width, slice_.chip.kind == "cpu") if m else {}
    if not remat:
        memory["activations"] = tokens * (n_dense * dense_layer["activations"]
                                          + n_moe * moe_layer["activations"])
        memory["attention_scores"] = tokens * cfg.n_layers * dense_layer["attention_scores"]
        for term, size in moe_terms.items():
            memory[term] = n_moe * size
    else:  # saved inputs of every layer, plus one layer recomputed during its backward
        memory["activations"] = tokens * (cfg.n_layers * remat_saved_bytes_per_token_layer(cfg, tensor, width)
                                          + max(dense_layer["activations"], moe_layer["activations"]))
        memory["attention_scores"] = tokens * dense_layer["attention_scores"]
        for term, size in moe_terms.items():
            memory[term] = size
    # Backward working set: one layer's float32 weight gradients as the backward pass makes
    # them, before their reduce-scatter (the blocked kernel's come per block too, one
    # projection's at a time).
    grads_working = max(per_layer, default=0.0)
    if m and m.kernel == "blocked":
        grads_working += F32 * m.n_blocks * cfg.d_model * cfg.d_ff_expert / tensor
    memory["layer_weight_grads"] = grads_working
    if m and m.kernel == "dense":
        # XLA cannot move the [tokens, E, d] output's cotangent from token-sharded to
        # expert-sharded for the weight gradient and replicates it: the micro-batch's global
        # tokens on every chip, float32 (plus its bf16 copy for the next matmul).
        global_tokens = tokens * batch_shards
        memory["moe_dense_replicated_cotangent"] = (global_tokens * cfg.n_experts * cfg.d_model / tensor
                                                    * (F32 + (2 if cfg.dtype == "bfloat16" else 0)))
    chunk = cfg.logits_chunk if 0 < cfg.logits_chunk < seq_len else seq_len
    memory["logits_f32"] = rows_per_chip * chunk * cfg.vocab_size / tensor * F32 * 2
    # With gradient accumulation the scan carries the float32 gradients through every
    # micro-batch; without it they are built as the backward pass frees the activations, so the
    # peak holds one or the other.
    state = memory["params_f32"] + memory["adam_moments_f32"]
    rest = sum(v for k, v in memory.items() if k not in ("params_f32", "adam_moments_f32", "grads_f32"))
    grads = memory["grads_f32"]
    train_step = float(state + (grads + rest if accum > 1 else max(grads, rest)))
    if "rollout" in config:
        cache = jax.eval_shape(lambda: init_cache(cfg, int(config.rollout.slots), int(config.rollout.window)))
        cache_bytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache))
        memory["rollout_kv_cache"] = cache_bytes / batch_shards
    total = train_step + memory.get("rollout_kv_cache", 0.0)
    available = slice_.chip.hbm_bytes * USABLE_MEMORY_FRACTION

    flops = _model_stats(_shapes_only(cfg), seq_len).flops_per_token_train * batch * seq_len
    if m and m.kernel == "dense":  # the reference runs every expert on every token
        flops += 6 * 3 * cfg.d_model * cfg.d_ff_expert * (cfg.n_experts - cfg.top_k) * n_moe * batch * seq_len
    compute = flops / (slice_.n_chips * slice_.chip.peak_flops * mfu)
    comm, comm_time = communication(cfg, mesh, layer_gathered, vocab_gathered, memory["grads_f32"],
                                    m, accum, remat, slice_.chip.collective_bytes_per_s(slice_.n_chips))
    overlapped = sum(t for kind, t in comm_time.items() if kind != "all-to-all")
    step_time = max(compute, overlapped) + comm_time.get("all-to-all", 0.0)
    return Plan(slice_.name, slice_.n_chips, mesh, memory, total, available, train_step, flops,
                batch * seq_len, tokens, mfu, compute, comm, comm_time, step_time,
                dataclasses.asdict(m) if m else None, total <= available)


def _ring(n: int, all_reduce: bool = False) -> float:
    """Share of a collective's per-chip buffer that crosses links over n chips: (n-1)/n for a
    gather, reduce-scatter or all-to-all, 2(n-1)/n for an all-reduce."""
    return (2 if all_reduce else 1) * (n - 1) / n if n > 1 else 0.0


def communication(cfg: ModelConfig, mesh: dict, layer_gathered: dict, vocab: float, grads: float,
                  m: MoEPlan | None, accum: int, remat: bool, bandwidth: float) -> tuple[dict, dict]:
    """Per-chip payload bytes per step by collective (the compiled program's convention: the
    gathered / exchanged buffer on one chip) and the seconds they take at `bandwidth`:
      all-gather: every layer's float32 weights each micro-batch (again in the backward pass
        when remat recomputes the forward), expert-parallel experts only the local ones;
      reduce-scatter: their gradients each micro-batch;
      all-reduce: the sharded gradients over the axes that replicate them, each micro-batch:
        data for the routed experts, data x expert for everything else (the expert axis
        splits the batch);
      all-to-all: the MoE dispatch and combine of every MoE layer, forward and backward."""
    gathered = sum(layer_gathered.values()) + vocab
    fsdp, data, x = mesh["fsdp"], mesh["data"], mesh["expert"]
    sizes, times = {}, {}

    def add(kind, size, crossing):
        if size and crossing:
            sizes[kind] = sizes.get(kind, 0.0) + size
            times[kind] = times.get(kind, 0.0) + size * crossing / bandwidth

    add("all-gather", accum * gathered * (2 if remat else 1), _ring(fsdp))
    add("reduce-scatter", accum * gathered, _ring(fsdp))
    experts = (accum * cfg.n_moe_layers * 3 * F32 * cfg.n_experts * cfg.d_model * cfg.d_ff_expert
               / (x * fsdp * mesh["tensor"])) if m is not None and m.dispatch == "expert_parallel" else 0.0
    everything = accum * grads  # the sharded float32 gradients
    add("all-reduce", experts, _ring(data, all_reduce=True))
    add("all-reduce", everything - experts, _ring(data * x, all_reduce=True))
    if m is not None:
        add("all-to-all", accum * cfg.n_moe_layers * m.all_to_all_bytes_per_layer, _ring(x))
    return sizes, times


def refusal(p: Plan) -> str:
    term, size = max(p.memory_bytes.items(), key=lambda kv: kv[1])
    return (f"plan does not fit: {p.memory_total_bytes / 2**30:.1f} GiB per chip needed, "
            f"{p.memory_available_bytes / 2**30:.1f} GiB usable on {p.slice}; the largest term is "
            f"{term} = {size / 2**30:.1f} GiB (shard it further, use remat, or a bigger slice)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="path/to/config.py[:variant]")
    parser.add_argument("--slice", required=True, help="e.g. v5p-1024, v6e-256, h100-8, cpu-64")
    parser.add_argument("--mfu", type=float, default=0.35, help="assumed model FLOPs utilisation")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        for item in overrides:
            apply_override(config, item)
        validate(config)
        p = plan(config, parse_slice(args.slice), args.mfu)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(p), indent=2))
    if not p.fits:
        print(f"error: {refusal(p)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
