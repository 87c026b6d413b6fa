"""Does a policy predict the harness's control tokens? Teacher-forced on expert demonstrations, the
probability each checkpoint gives every trained token, split into the turn-ending ids (tool-call
open and close, end of turn) and the rest. A policy that never predicts the close never ends a
turn: every turn then runs to its budget (what the first Qwen SFT policy did on the H200).

    python -m benchmarks.stop_token_probe --config configs/qwen_coder_0p5b.py:bugfix --demos 16 \\
        base=~/.cache/composer_jax/qwen2.5-coder-0.5b-instruct sft=runs/qwen_bugfix/sft/checkpoints \\
        --out benchmarks/results/stop_token_probe_qwen.json

Demonstrations: the scripted expert on `--demos` train tasks spread over the split, through the
harness with no model run (`rl.train.demonstrations`): their tokens depend only on the tokenizer
and the rollout settings.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

from benchmarks.common import write_result


def mean_target_prob_by_class(log_probs, seqs, class_of, names) -> dict:
    """Mean probability of every trained token (`loss_mask`) of `seqs` under `log_probs(tokens)`
    ([t, vocab] log-probs of the next token), grouped by `class_of(token)`, one of `names`."""
    import numpy as np

    probs: dict[str, list[float]] = {k: [] for k in names}
    for s in seqs:
        tokens = np.asarray(s.tokens, np.int32)
        logp = np.asarray(log_probs(tokens))
        for i in np.flatnonzero(np.asarray(s.loss_mask)[1:] > 0) + 1:  # token i, predicted at i - 1
            probs[class_of(int(tokens[i]))].append(float(np.exp(logp[i - 1, tokens[i]])))
    return {k: dict(tokens=len(v), mean_p=float(np.mean(v)) if v else None) for k, v in probs.items()}


def demo_sequences(c, n: int):
    from composer_jax.rl import sft
    from composer_jax.rl.envs import sample_ids
    from composer_jax.rl.train import demonstrations, load_tokenizer

    episodes = demonstrations(c, sample_ids(c.rl, "train", n))
    return sft.demo_sequences(episodes), load_tokenizer(c.rl)


def probe(c, directory: str, seqs, control: dict[str, int]) -> dict:
    """Mean teacher-forced probability of the trained tokens: per control id and for the rest."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from composer_jax.model.config import ModelConfig
    from composer_jax.model.create import abstract_model
    from composer_jax.rl.train import load_params, make_mesh
    from composer_jax.train.optim import make_optimizer

    cfg, mesh = ModelConfig.from_config(c.model), make_mesh(c.mesh)
    graphdef, _ = abstract_model(cfg)
    with jax.set_mesh(mesh):
        state = load_params(c, directory, cfg, mesh, make_optimizer(c.sft.optim))
        logp_fn = jax.jit(lambda st, x: jax.nn.log_softmax(nnx.merge(graphdef, st)(x)[0][0], axis=-1))
        return mean_target_prob_by_class(
            lambda tokens: logp_fn(state, jnp.asarray(tokens[None])), seqs,
            lambda t: next((k for k, v in control.items() if v == t), "other"), (*control, "other"))


def main(argv=None):
    from composer_jax.config_loading import apply_override, load_config, split_overrides
    from composer_jax.harness import special_tokens as st

    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--demos", type=int, default=16, help="demonstrations to probe on")
    p.add_argument("policies", nargs="+", metavar="NAME=CHECKPOINTS_DIR")
    p.add_argument("--out", default="")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.demos < 1:
        p.error(f"--demos must be >= 1, got {args.demos}")
    policies = {}
    for item in args.policies:
        name, sep, directory = item.partition("=")
        directory = str(pathlib.Path(directory).expanduser())
        if not sep or not name or name in policies or not pathlib.Path(directory).is_dir():
            p.error(f"{item!r}: expected a new NAME=CHECKPOINTS_DIR with an existing directory")
        policies[name] = directory
    c = load_config(args.config)
    for item in overrides:
        apply_override(c, item)
    t = time.perf_counter()
    seqs, tok = demo_sequences(c, args.demos)
    if not seqs:
        raise SystemExit(f"none of {args.demos} demonstrations succeeded; nothing to probe")
    control = {"tool_call_open": tok.special_seq(st.TOOL_CALL_OPEN)[0],
               "tool_call_close": tok.special_seq(st.TOOL_CALL_CLOSE)[0],
               "end_of_turn": tok.special_seq(st.END_OF_TURN)[0]}
    result = {name: probe(c, d, seqs, control) for name, d in policies.items()}
    write_result(args.out, dict(bench="stop_token_probe", config=args.config, demos=len(seqs),
                                control_ids=control, policies=policies, mean_p=result,
                                wall_s=time.perf_counter() - t))


if __name__ == "__main__":
    main()
