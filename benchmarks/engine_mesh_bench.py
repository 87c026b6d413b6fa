"""The rollout engine on a mesh, before and after the inference layout: what moves per decoded
token, and whether anything compiles after warm-up.

  git worktree add --detach /tmp/engine_before HEAD     # "before": the engine as committed
  python benchmarks/engine_mesh_bench.py --before_tree /tmp/engine_before \\
      --out benchmarks/results/engine_mesh.json

On a fake 8-device CPU mesh (data=8, 2x2x2 = data x fsdp x expert, 1x2x2x2 = ... x tensor),
configs/tiny.py:test with 8 slots. For each engine:

  per_token   the collectives of the compiled decode's while loop (body and condition: they run
              once per decoded token): count, payload bytes per device, by kind, the largest
              single array any of them moves, and how many span one device only (no traffic).
  per_call    the decode program's other collectives (once per generate call).
              (hlo.collectives leaves out collectives over one-device groups: no traffic.)
  compiles_after_warmup   XLA compiles during a second episode (set_params with weights in
              the train layout, start, append, generate) after one warm-up episode.
  tokens_match_one_device the episode's tokens (and log-probs, max_abs_logp_diff) against a
              dropless blocked MoE on one device with the same weights.

"before" rows run this same script with `--raw` in the --before_tree checkout (measured at
e004233, before the expert-parallel MoE: the blocked MoE with global routing, the engine on the
train layout, unpinned jits); the parsing (composer_jax/tools/hlo.py) happens here.
"""
from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from composer_jax.config_loading import load_config  # noqa: E402
from composer_jax.model import ModelConfig, create_sharded  # noqa: E402
from composer_jax.rl.engine_host import RolloutEngine  # noqa: E402
from composer_jax.rl.rollout_config import RolloutConfig  # noqa: E402
from composer_jax.sharding import make_mesh, state_shardings  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parents[1]
# The compile counter comes from this script's tree (the before tree predates it).
_spec = importlib.util.spec_from_file_location("_compiles", HERE / "composer_jax/tools/compiles.py")
_compiles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_compiles)
count_compiles = _compiles.count_compiles

CONFIG = "configs/tiny.py:test"
VALID = 300
ROLLOUT = dict(window=48, summary_budget=4, turn_budget=6, slots=8, temperature=0.8, top_p=0.9,
               prefill_buckets=(8,))
MESHES = {"data=8": dict(data=8), "2x2x2": dict(data=2, fsdp=2, expert=2),
          "1x2x2x2": dict(data=1, fsdp=2, expert=2, tensor=2)}
# label -> (model overrides, RolloutEngine kwargs (None = the tree's defaults), meshes)
# capacity_factor 2 is the expert-parallel dispatch's dropless bound at expert=2 (top-2 of 8).
AFTER = {
    "after": ({"moe_impl": "expert_parallel", "capacity_factor": 2.0}, None, list(MESHES)),
    "expert_parallel_train_layout": ({"moe_impl": "expert_parallel", "capacity_factor": 2.0},
                                     {"fold": ()}, ["2x2x2", "1x2x2x2"]),
    "after_fold_tensor": ({"moe_impl": "expert_parallel", "capacity_factor": 2.0},
                          {"fold": ("fsdp", "tensor")}, ["1x2x2x2"]),
}
BEFORE = {"before": ({"moe_impl": "blocked", "capacity_factor": 0.0}, None, list(MESHES))}


def episode(engine, params):
    engine.set_params(params)
    engine.start([1, 6], [jax.random.key(3), jax.random.key(4)])
    engine.append([1, 6], [list(range(11, 18)), list(range(40, 45))])
    return engine.generate([1, 6], [6, 6], [[], []])


def decode_hlo(engine) -> str:
    if hasattr(engine, "compile_decode"):
        return engine.compile_decode().as_text()
    # git HEAD's engine: an unpinned jit with max_new static.
    args = (engine.params, engine.state, np.zeros(engine.slots, bool), np.zeros(engine.slots, np.int32),
            np.full((engine.slots, 4), -1, np.int32), *engine._sampling, engine.rollout.max_new_tokens)
    with jax.set_mesh(engine.mesh):
        return engine._decode.lower(*args).compile().as_text()


def measure(overrides: dict, engine_kwargs: dict | None, mesh_name: str) -> dict:
    """Raw measurements of one engine (no HLO parsing: this also runs in the before tree)."""
    cfg = ModelConfig.from_config({**load_config(CONFIG).model, **overrides})
    mesh = make_mesh(MESHES[mesh_name])
    graphdef, params = create_sharded(cfg, mesh, seed=0)
    engine = RolloutEngine(graphdef, params, cfg, RolloutConfig(**ROLLOUT), valid_vocab=VALID,
                           mesh=mesh, **(engine_kwargs or {}))
    hlo_text = decode_hlo(engine)
    with count_compiles() as warmup:
        episode(engine, params)
    # A learner step's output: the same weights, new buffers in the train layout.
    update = jax.jit(lambda p: jax.tree.map(lambda x: x * 1.0, p),
                     out_shardings=state_shardings(params, mesh))(params)
    with count_compiles() as after:
        generated = episode(engine, update)
    return dict(mesh=mesh_name, overrides=overrides, engine_kwargs=engine_kwargs or {},
                compiles_warmup=len(warmup), compiles_after_warmup=after, hlo=hlo_text,
                tokens=[g.tokens.tolist() for g in generated], logp=[g.logp.tolist() for g in generated])


def one_device_reference() -> dict:
    dropless = {"moe_impl": "blocked", "capacity_factor": 0.0}
    cfg = ModelConfig.from_config({**load_config(CONFIG).model, **dropless})
    graphdef, params = create_sharded(cfg, make_mesh({"data": 1}, jax.devices()[:1]), seed=0)
    engine = RolloutEngine(graphdef, params, cfg, RolloutConfig(**ROLLOUT), valid_vocab=VALID)
    episode(engine, params)
    generated = episode(engine, params)
    return dict(tokens=[g.tokens.tolist() for g in generated], logp=[g.logp.tolist() for g in generated])


# ---------------------------------------------------------------------------------------------
def summarize(collectives) -> dict:
    by_kind: dict[str, dict] = {}
    for c in collectives:
        k = by_kind.setdefault(c.kind, dict(count=0, bytes=0.0))
        k["count"] += 1
        k["bytes"] += c.bytes
    return dict(collectives=len(collectives), bytes=sum(c.bytes for c in collectives), by_kind=by_kind,
                largest_array_bytes=max((c.largest_array_bytes for c in collectives), default=0.0),
                arrays=[f"{c.kind} {' '.join(f'{t}{list(d)}' for t, d in c.shapes)}" for c in collectives])


def row(label: str, raw: dict, reference: dict, tree: str) -> dict:
    from composer_jax.tools.hlo import loop_collectives
    from composer_jax.tools import hlo

    text = raw["hlo"]
    per_token = loop_collectives(text)
    names = {c.name for c in per_token}
    per_call = [c for c in hlo.collectives(text) if c.name not in names]
    tokens_match = raw["tokens"] == reference["tokens"]
    logp_diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0))
                    for a, b in zip(raw["logp"], reference["logp"]))
    return dict(label=label, tree=tree, mesh=raw["mesh"], model=raw["overrides"],
                engine_kwargs=raw["engine_kwargs"], per_token=summarize(per_token),
                per_call=summarize(per_call), compiles_warmup=raw["compiles_warmup"],
                compiles_after_warmup=raw["compiles_after_warmup"],
                tokens_match_one_device=tokens_match, max_abs_logp_diff=logp_diff)


def run_raw(variants: dict) -> list[dict]:
    out = []
    for label, (overrides, kwargs, meshes) in variants.items():
        for mesh_name in meshes:
            print(f"[engine_mesh_bench] {label} {mesh_name}", file=sys.stderr, flush=True)
            out.append(dict(measure(overrides, kwargs, mesh_name), label=label))
    return out


def git_head(tree: pathlib.Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--before_tree", default="", help="a checkout of the commit to compare with")
    parser.add_argument("--raw", default="", help="(internal) write raw before-tree measurements here")
    args = parser.parse_args()
    if args.raw:
        pathlib.Path(args.raw).write_text(json.dumps(run_raw(BEFORE)))
        return

    reference = one_device_reference()
    rows = []
    if args.before_tree:
        tree = pathlib.Path(args.before_tree).resolve()
        with tempfile.TemporaryDirectory() as tmp:
            raw_path = pathlib.Path(tmp) / "before.json"
            env = dict(os.environ, PYTHONPATH=str(tree))
            subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--raw", str(raw_path)],
                           cwd=tree, env=env, check=True)
            rows += [row(r["label"], r, reference, f"{tree} (git {git_head(tree)})")
                     for r in json.loads(raw_path.read_text())]
    status = subprocess.run(["git", "-C", str(HERE), "status", "--short"], capture_output=True,
                            text=True).stdout.split("\n")
    here = f"{HERE} (git {git_head(HERE)} + {sum(bool(s) for s in status)} uncommitted changes)"
    rows += [row(r["label"], r, reference, here) for r in run_raw(AFTER)]

    table = {}
    for r in rows:
        table.setdefault(r["mesh"], {})[r["label"]] = dict(
            per_token_collectives=r["per_token"]["collectives"], per_token_bytes=r["per_token"]["bytes"],
            per_token_largest_array_bytes=r["per_token"]["largest_array_bytes"],
            per_call_collectives=r["per_call"]["collectives"], per_call_bytes=r["per_call"]["bytes"],
            compiles_after_warmup=len(r["compiles_after_warmup"]),
            tokens_match_one_device=r["tokens_match_one_device"])
    write_result(args.out, dict(config=CONFIG, rollout=ROLLOUT, meshes=MESHES, table=table, rows=rows))


def write_result(path, result):
    from benchmarks.common import write_result as write

    write(path, result)


if __name__ == "__main__":
    main()
