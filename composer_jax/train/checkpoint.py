"""Checkpoints: train state + RNG + grain iterator state + resume config, saved together by orbax.

Layout under `directory` (one orbax step directory per save, written to a temporary directory
and renamed when complete, so a killed save never looks finished):
    <step>/state    params, buffers, optimiser state, step counter, base RNG key (sharded arrays)
    <step>/data     the grain iterator position, per host
    <step>/config   the config fields a resume must not change (model shapes, data stream)
A checkpoint whose config or state cannot be read is moved to `<directory>.corrupt/` with a
warning and the previous one is used; a config or data position that does not match the
current run is an error that names the field or file. Restores take their shardings from the *current* mesh, so a run saved as
data=8 resumes as data=2,fsdp=4.
"""
from __future__ import annotations

import dataclasses
import logging
import pathlib
import shutil
import time
from collections.abc import Mapping

import grain
import jax
import optax
import orbax.checkpoint as ocp

from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model
from composer_jax.sharding import state_shardings
from composer_jax.train.step import TrainState, init_train_state, train_state_shardings

log = logging.getLogger(__name__)

# data fields that define the sequence of batches: changing one makes "resume" a different run.
STREAM_FIELDS = ("seq_len", "batch_size", "shuffle_seed", "mixture")


def resume_fingerprint(config) -> dict:
    data = config.data.to_dict()
    return {"model": config.model.to_dict(), "data": {k: data[k] for k in STREAM_FIELDS}}


def config_mismatches(saved: Mapping, current: Mapping) -> list[str]:
    """'section.field: checkpoint has X, config has Y' for every resume-critical difference."""
    out = []
    for section in sorted(set(saved) | set(current)):
        a, b = saved.get(section, {}), current.get(section, {})
        out += [f"{section}.{k}: checkpoint has {a.get(k)!r}, config has {b.get(k)!r}"
                for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return out


def abstract_train_state(model_cfg: ModelConfig, mesh: jax.sharding.Mesh,
                         tx: optax.GradientTransformation) -> TrainState:
    """ShapeDtypeStructs carrying their shardings on `mesh`, without allocating anything."""
    _, abstract = abstract_model(model_cfg)
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            abstract, state_shardings(abstract, mesh))
    shardings = train_state_shardings(abstract, tx)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        jax.eval_shape(lambda s: init_train_state(s, tx), abstract), shardings)


@dataclasses.dataclass(frozen=True)
class Restored:
    step: int
    train_state: TrainState
    rng: jax.Array  # typed PRNG key


class Checkpointer:
    """Periodic, asynchronous, keep-last-K checkpoints of one run."""

    def __init__(self, directory: str | pathlib.Path, config, keep: int, async_save: bool = True):
        if keep < 1:
            raise ConfigError(f"checkpoint.keep must be >= 1, got {keep}")
        self.directory = pathlib.Path(directory).absolute()
        self.fingerprint = resume_fingerprint(config)
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, cleanup_tmp_directories=True))

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, train_state: TrainState, rng: jax.Array, data_iter) -> None:
        """Starts the save (arrays are copied off-device before this returns) and goes on."""
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave({"train_state": train_state,
                                         "rng": jax.random.key_data(rng)}),
            data=grain.checkpoint.CheckpointSave(data_iter),
            config=ocp.args.JsonSave(self.fingerprint)), force=True)

    def restore_latest(self, target: TrainState, data_iter=None) -> Restored | None:
        """The newest checkpoint that restores, onto `target`'s shardings (None when there is none);
        with `data_iter`, that iterator is moved to the checkpoint's position.

        Unreadable checkpoints are set aside and the previous one tried. A config mismatch and a
        data position that does not fit the dataset are errors instead: older checkpoints share
        them, so falling back would only discard good checkpoints.
        """
        key_shape = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
        for step in reversed(self.all_steps()):
            try:
                saved = self.manager.restore(step, args=ocp.args.Composite(
                    config=ocp.args.JsonRestore()))["config"]
            except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is handled alike
                self._quarantine(step, e)
                continue
            mismatches = config_mismatches(saved, self.fingerprint)
            if mismatches:
                raise ConfigError(
                    f"{self.directory / str(step)} was saved with a different config and cannot "
                    f"be resumed: {'; '.join(mismatches)}. Use a fresh --workdir or the same config.")
            try:
                state = self.manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore({"train_state": target, "rng": key_shape})))["state"]
            except Exception as e:  # noqa: BLE001 - as above
                self._quarantine(step, e)
                continue
            if data_iter is not None:
                try:
                    self.manager.restore(step, args=ocp.args.Composite(
                        data=grain.checkpoint.CheckpointRestore(data_iter)))
                except Exception as e:  # re-raised with the file to look at
                    raise ConfigError(
                        f"{self.directory / str(step) / 'data'}: the saved data position does not "
                        f"fit the current dataset ({type(e).__name__}: {e}); was the data "
                        "directory rebuilt?") from e
            return Restored(step, state["train_state"], jax.random.wrap_key_data(state["rng"]))
        return None

    def _quarantine(self, step: int, error: Exception) -> None:
        """Move an unrestorable checkpoint aside (kept for inspection) so its step can be saved
        again by the resumed run."""
        dest = self.directory.with_name(self.directory.name + ".corrupt") / f"{step}-{int(time.time())}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(self.directory / str(step)), dest)
        self.manager.reload()
        log.warning("checkpoint %s is corrupt or incomplete (%s: %s); moved to %s, falling back "
                    "to the previous one", self.directory / str(step), type(error).__name__,
                    str(error).splitlines()[0] if str(error) else "", dest)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()
