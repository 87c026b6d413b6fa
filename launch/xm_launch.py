"""Run the composer_jax pipeline: locally (default) or as XManager jobs on TPU slices.

  python launch/xm_launch.py                                  # full tiny pipeline on this CPU
  python launch/xm_launch.py --stages=data,midtrain --workdir=runs/tiny
  python launch/xm_launch.py --config=configs/kimi_k2_5.py --launch_mode=vertex --dry_run

Overrides: --config.train.steps=100. A rerun reuses finished stages (workdir/stages/*.json).
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

from absl import app, flags, logging
from ml_collections import config_flags

REPO = pathlib.Path(__file__).resolve().parents[1]

_CONFIG = config_flags.DEFINE_config_file("config", str(REPO / "configs" / "tiny.py") + ":pipeline",
                                          "config file[:variant]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory for every stage (default runs/<config.name>)")
_STAGES = flags.DEFINE_list("stages", [], "stages to run (default: all, in order)")
_MODE = flags.DEFINE_string("launch_mode", "local", "local | vertex | gke")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "print the cloud job spec; contact nothing")


def config_arg() -> str:
    """The --config value as given (path[:variant]), for the remote command line."""
    for arg in sys.argv[1:]:
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return "configs/tiny.py:pipeline"


def main(argv) -> None:
    from composer_jax.errors import ConfigError
    from composer_jax.launch import cloud, stages
    from composer_jax.launch.report import write_report
    from composer_jax.config_schema import validate

    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    config = _CONFIG.value
    workdir = pathlib.Path(_WORKDIR.value or f"runs/{config.name}")
    try:
        validate(config)
        if _MODE.value != "local":
            overrides = [a for a in sys.argv[1:] if a.startswith("--config.")]
            names = [s.name for s in stages.select(_STAGES.value, workdir)] if _STAGES.value else list(stages.STAGES)
            specs = cloud.job_specs(config, config_arg(), str(workdir), names, _MODE.value, overrides)
            if _DRY_RUN.value:
                print(json.dumps(specs, indent=2))
                return
            cloud.submit(specs, experiment_title=config.name)
            return
        if os.environ.get("COMPOSER_JAX_DISTRIBUTED") == "1":
            import jax
            jax.distributed.initialize()
        records = stages.run_stages(config, workdir, _STAGES.value)
        out = write_report(workdir, records)
        print(f"report: {out / 'report.md'} (plots and summary.json beside it)")
    except ConfigError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    app.run(main)
