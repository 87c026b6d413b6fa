"""Cloud launch: the job spec for Vertex AI or GKE TPU slices, and its XManager submission.

The spec is plain data (tested, printed by --dry_run); xmanager is imported only to submit it.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from composer_jax.errors import ConfigError
from composer_jax.tools.hardware import parse_slice

LAUNCH_MODES = ("local", "vertex", "gke")


def job_specs(config, config_arg: str, workdir: str, stages: Sequence[str], mode: str,
              overrides: Sequence[str] = ()) -> list[dict]:
    """One job per stage (`launch.one_job_per_stage`) or one job running them all."""
    if mode not in LAUNCH_MODES[1:]:
        raise ConfigError(f"--launch_mode={mode!r}: unknown; use one of {', '.join(LAUNCH_MODES)}")
    slice_ = parse_slice(config.launch.slice)
    groups = [[s] for s in stages] if config.launch.one_job_per_stage else [list(stages)]
    specs = []
    for group in groups:
        argv = ["python", "launch/xm_launch.py", "--launch_mode=local", f"--config={config_arg}",
                f"--workdir={workdir}", f"--stages={','.join(group)}", *overrides]
        specs.append(dict(
            name=f"{config.name}-{'-'.join(group)}",
            platform=mode,
            image=config.launch.image,
            accelerator=dict(slice=slice_.name, chip=slice_.chip.name, chips=slice_.n_chips,
                             hosts=max(slice_.n_chips // config.launch.chips_per_host, 1),
                             topology=slice_.topology),
            command=shlex.join(argv),
            env={
                # Every host runs the same command; jax.distributed.initialize() finds its peers
                # from the TPU metadata (Vertex/GKE set it), so the mesh spans the whole slice.
                "COMPOSER_JAX_DISTRIBUTED": "1",
                "JAX_COMPILATION_CACHE_DIR": f"{workdir}/jax_cache",
                "TF_CPP_MIN_LOG_LEVEL": "2",
            },
            stages=group,
        ))
    return specs


def submit(specs: list[dict], experiment_title: str) -> None:
    """Create an XManager experiment with one job per spec (needs the `xm` extra)."""
    try:
        from xmanager import xm, xm_local  # noqa: PLC0415 — cloud modes only
    except ImportError as e:
        raise ConfigError("cloud launch needs XManager: pip install -e '.[xm]'") from e
    with xm_local.create_experiment(experiment_title=experiment_title) as experiment:
        for spec in specs:
            [executable] = experiment.package([xm.python_container(
                executor_spec=xm_local.Vertex.Spec() if spec["platform"] == "vertex" else xm_local.Kubernetes.Spec(),
                path=".", base_image=spec["image"], entrypoint=xm.CommandList([spec["command"]]))])
            executor = (xm_local.Vertex if spec["platform"] == "vertex" else xm_local.Kubernetes)(
                requirements=xm.JobRequirements(**{spec["accelerator"]["chip"]: spec["accelerator"]["chips"]}))
            experiment.add(xm.Job(executable=executable, executor=executor, env_vars=spec["env"]))
