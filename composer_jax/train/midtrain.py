"""Mid-training entry point.

    python -m composer_jax.train.midtrain --config configs/tiny.py --workdir runs/tiny \
        [--config.train.steps=200] [--data_dir DIR]

Resumes from workdir/checkpoints when it holds any. Data comes from --data_dir (default
workdir/data); it is built there first when it has not been (`composer_jax.data.build`).
Exit status: 0 done, 1 error (message names the field, file or step), 128+N stopped by signal N
after saving a checkpoint.
"""
from __future__ import annotations

import pathlib
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from composer_jax import memory_aware_cpu_schedule
from composer_jax.config_schema import validate
from composer_jax.data import layout
from composer_jax.data.build import build
from composer_jax.errors import ConfigError
from composer_jax.train.loop import NonFiniteError, train

_CONFIG = config_flags.DEFINE_config_file("config", None, "config file, e.g. configs/tiny.py",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory: checkpoints, metrics, TensorBoard")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "built data directory (default: WORKDIR/data)")
_PROGRESS = flags.DEFINE_bool("progress", True, "show a progress bar")


def ensure_data(config, data_dir: pathlib.Path, progress: bool) -> None:
    """Build the token stores unless a finished build (its summary file) is there."""
    if layout.summary_path(data_dir).exists():
        return
    print(f"no data in {data_dir}: building it (same as `python -m composer_jax.data.build "
          f"--config <config> --workdir {data_dir}`)", flush=True)
    build(config, data_dir, progress=progress)


def main(argv) -> None:
    memory_aware_cpu_schedule()  # before jax starts its backend
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    config, workdir = _CONFIG.value, pathlib.Path(_WORKDIR.value)
    data_dir = pathlib.Path(_DATA_DIR.value) if _DATA_DIR.value else workdir / "data"
    try:
        validate(config)
        ensure_data(config, data_dir, _PROGRESS.value)
        result = train(config, workdir, data_dir, progress=_PROGRESS.value)
    except (ConfigError, NonFiniteError) as e:  # the user's to fix: one clear line
        sys.exit(f"error: {e}")
    last = result.eval or result.train
    print(f"{result.status} at step {result.step}: " + ", ".join(
        f"{k} {v:.4g}" for k, v in last.items() if isinstance(v, float)), flush=True)
    if result.signal is not None:
        sys.exit(128 + result.signal)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)
