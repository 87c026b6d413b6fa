"""Print a config's parameter counts, FLOPs per token and training-state bytes as JSON.

  python -m composer_jax.tools.model_stats --config configs/kimi_k2_5.py
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from composer_jax.config_loading import load_config
from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.stats import model_stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="path/to/config.py[:variant]")
    parser.add_argument("--seq_len", type=int, default=None,
                        help="sequence length for attention FLOPs (default: config data.seq_len)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        cfg = ModelConfig.from_config(config.model)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seq_len = args.seq_len or config.data.seq_len
    stats = dataclasses.asdict(model_stats(cfg, seq_len))
    print(json.dumps(dict(config=args.config, seq_len=seq_len, **stats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
