"""Serve a policy over OpenAI's chat-completions API.

    python -m composer_jax.serve --config configs/tiny.py:test --port 8000      # a fresh model
    python -m composer_jax.serve --config configs/qwen_coder_0p5b.py --checkpoint runs/qwen/checkpoints

`--checkpoint` is a checkpoints directory of this codebase (an SFT or RL run's) or an imported
model (checkpoints.qwen_setup); without it the config's model is freshly initialised (smoke
tests). The window, slots and budgets are the config's `rollout` block (`--config.rollout.x=v`).
Any OpenAI client then talks to http://HOST:PORT/v1 with model=NAME.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from composer_jax.config_loading import load_config, split_overrides
from composer_jax.errors import ConfigError
from composer_jax.serve.server import Server


def build_server(config, checkpoint: str = "", *, model_name: str = "", chunk: int = 16,
                 summarize: bool = True) -> Server:
    """The config's policy (the checkpoint's params when given) on a RolloutEngine, scheduled."""
    from composer_jax.rl import train  # the policy is built exactly as RL builds it

    run = train.build(config, None, init_from=checkpoint, make_env=lambda: None)
    name = model_name or (pathlib.Path(checkpoint).name if checkpoint else config.name)
    return Server(run.engine, run.tokenizer, model_name=name, chunk=chunk, summarize_at_endpoint=summarize,
                  seed=int(config.seed))


def main(argv=None) -> None:
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m composer_jax.serve", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="path/to/config.py[:variant]")
    p.add_argument("--checkpoint", default="", help="checkpoints directory or imported model (default: fresh)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model-name", default="", help="the name clients ask for (default: checkpoint or config name)")
    p.add_argument("--chunk", type=int, default=16, help="tokens decoded between admissions (stream granularity)")
    p.add_argument("--no-summarize", action="store_true",
                   help="answer a conversation longer than the window with an error instead of summarising")
    args = p.parse_args(argv)
    import uvicorn

    from composer_jax.serve.app import create_app
    from composer_jax.config_schema import validate
    try:
        config = load_config(args.config, overrides)
        validate(config)
        server = build_server(config, args.checkpoint, model_name=args.model_name,
                              chunk=args.chunk, summarize=not args.no_summarize)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    r = server.rollout
    print(f"serving {server.model_name!r} at http://{args.host}:{args.port}/v1 (window {r.window}, "
          f"{r.slots} slots, chunk {args.chunk}, summarisation {'on' if server.summarize else 'off'})", flush=True)
    try:
        uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="info")
    finally:
        server.close()


if __name__ == "__main__":
    main()
