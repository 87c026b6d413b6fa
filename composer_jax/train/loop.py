"""Mid-training loop: grain batches -> sharded jitted step -> metrics, validation, checkpoints.

One process, one pass: resume from the newest good checkpoint in `workdir/checkpoints` (or
initialise), train to `train.steps`, validate every `train.eval_every` steps, checkpoint every
`checkpoint.every` steps, at the end, and on SIGTERM/SIGINT. A non-finite loss, gradient or
parameter stops the run before the bad state can be saved. Metrics are read one step late (the
device computes step t+1 while the host logs step t, as nanodo does); a step that is evaluated
or checkpointed is read first.
"""
from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import signal
import time

import jax
import numpy as np
import tqdm
from flax import nnx

from composer_jax.data import layout
from composer_jax.data.build import validate_data_config
from composer_jax.data.pipeline import make_dataset, to_device
from composer_jax.data.store import TokenStore
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, abstract_model, create_sharded
from composer_jax.sharding import batch_sharding, check_divisibility, make_mesh
from composer_jax.train.checkpoint import Checkpointer, abstract_train_state
from composer_jax.train.flops import measure_peak_flops, mfu, train_flops_per_token
from composer_jax.train.metrics import MetricsWriter, batch_digest, perplexity
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import TrainState, create_train_state, lm_loss, make_train_step


class NonFiniteError(RuntimeError):
    """Training produced NaN/inf; the message names the step and the last good checkpoint."""


# Per-step metrics that must be finite before the state they produced may be checkpointed.
FINITE_METRICS = ("loss", "grad_norm", "param_norm")


def open_split(config, data_dir: str | pathlib.Path, split: str) -> tuple[list[TokenStore], list[float]]:
    stores, weights = [], []
    for source, weight in config.data.mixture.items():
        stores.append(TokenStore.open(layout.store_path(data_dir, source, split)))
        weights.append(float(weight))
    return stores, weights


def dataset(config, data_dir, split: str):
    stores, weights = open_split(config, data_dir, split)
    vocab = max(s.meta["vocab_size"] for s in stores)
    if vocab > config.model.vocab_size:
        raise ConfigError(f"model.vocab_size={config.model.vocab_size} is smaller than the "
                          f"tokenizer of {data_dir} ({vocab} tokens)")
    return make_dataset(stores, weights, seq_len=config.data.seq_len,
                        global_batch_size=config.data.batch_size, seed=config.data.shuffle_seed)


def validation_batches(config, data_dir, n: int) -> list[dict[str, np.ndarray]]:
    """The first `n` batches of the validation split: the same tokens at every evaluation."""
    it = iter(dataset(config, data_dir, "val"))
    return [next(it) for _ in range(n)]


def make_eval_step(graphdef, train_cfg):
    def eval_step(params, buffers, batch):
        _, m = lm_loss(nnx.merge(graphdef, params, buffers), batch, train_cfg)
        return m["ce"] * m["tokens"], m["tokens"]
    return jax.jit(eval_step)


def evaluate(eval_step, state: TrainState, batches) -> dict[str, float]:
    """Token-weighted mean next-token cross-entropy (nats) over `batches`."""
    nll, tokens = 0.0, 0.0
    for batch in batches:
        s, n = jax.device_get(eval_step(state.params, state.buffers, batch))
        nll, tokens = nll + float(s), tokens + float(n)
    loss = nll / max(tokens, 1.0)
    return {"loss": loss, "perplexity": perplexity(loss), "tokens": tokens}


def check_finite(step: int, metrics: dict, last_checkpoint: int | None) -> None:
    bad = {k: metrics[k] for k in FINITE_METRICS if not np.isfinite(metrics[k])}
    if bad:
        where = (f"the last good checkpoint (step {last_checkpoint}) is intact"
                 if last_checkpoint is not None else "no checkpoint was written")
        raise NonFiniteError(
            f"step {step}: non-finite {', '.join(f'{k}={v}' for k, v in bad.items())}; training "
            f"stopped without saving this state and {where}. Check the data, train.lr and "
            "train.warmup_steps, then resume.")


@contextlib.contextmanager
def stop_on_signals(signals=(signal.SIGTERM, signal.SIGINT)):
    """Yields a dict whose 'signal' is set when one arrives: the loop saves, then stops.
    A second identical signal gets the default action (a second Ctrl-C kills at once)."""
    received: dict = {"signal": None}

    def handler(signum, frame):
        received["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@dataclasses.dataclass
class RunResult:
    status: str  # completed | interrupted
    step: int
    train: dict
    eval: dict | None
    signal: int | None = None


def step_record(metrics: dict, digest: str, timing: tuple[float, float] | None) -> dict:
    """The JSONL record of one step; throughput (tokens/s, MFU) only when the step time is known."""
    record = dict(metrics, batch_hash=digest)
    if timing is not None:
        record["tokens_per_s"], record["mfu"] = timing
    return record


def train(config, workdir: str | pathlib.Path, data_dir: str | pathlib.Path | None = None,
          progress: bool = True) -> RunResult:
    """Train `config` in `workdir` (data from `data_dir`, default workdir/data)."""
    # Handlers go in first: a signal during start-up still ends in a clean save-and-stop.
    with stop_on_signals() as stop:
        return _train(config, pathlib.Path(workdir), data_dir, progress, stop)


def _train(config, workdir: pathlib.Path, data_dir, progress: bool, stop: dict) -> RunResult:
    data_dir = pathlib.Path(data_dir) if data_dir is not None else workdir / "data"
    model_cfg = ModelConfig.from_config(config.model)
    validate_data_config(config)
    mesh = make_mesh(config.mesh)
    check_divisibility(model_cfg, mesh, config.data.batch_size)
    tcfg, ccfg = config.train, config.checkpoint
    for field in ("log_every", "eval_every", "eval_batches"):
        if tcfg[field] < 1:
            raise ConfigError(f"train.{field} must be >= 1, got {tcfg[field]}")
    if ccfg.every < 1:
        raise ConfigError(f"checkpoint.every must be >= 1, got {ccfg.every}")

    train_iter = iter(dataset(config, data_dir, "train"))
    tx = make_optimizer(tcfg)
    ckpt = Checkpointer(workdir / "checkpoints", config, keep=ccfg.keep, async_save=ccfg.async_save)
    target = abstract_train_state(model_cfg, mesh, tx)
    state_sharding = jax.tree.map(lambda x: x.sharding, target)
    restored = ckpt.restore_latest(target, train_iter)
    if restored is None:
        _, params = create_sharded(model_cfg, mesh, config.seed)
        state, _ = create_train_state(params, tx)
        start, rng = 0, jax.random.key(config.seed)
    else:
        state, start, rng = restored.train_state, restored.step, restored.rng
    last_checkpoint = restored.step if restored else None

    graphdef = abstract_model(model_cfg)[0]
    bsh = batch_sharding(mesh)
    train_step = make_train_step(graphdef, tx, model_cfg, tcfg, state_sharding, bsh)
    eval_step = make_eval_step(graphdef, tcfg)
    val = [to_device(b, bsh) for b in validation_batches(config, data_dir, tcfg.eval_batches)]
    peak = tcfg.peak_flops or measure_peak_flops(model_cfg.dtype)
    flops_per_token = train_flops_per_token(model_cfg, config.data.seq_len)
    tokens_per_step = config.data.batch_size * config.data.seq_len
    writer = MetricsWriter(workdir, resume_step=start)
    writer.write(start, "run", {"peak_flops": peak, "flops_per_token": flops_per_token,
                                "devices": mesh.size, "resumed": restored is not None})

    metrics, eval_metrics, result = {}, None, None
    bar = tqdm.tqdm(total=tcfg.steps, initial=start, desc="midtrain", unit="step",
                    disable=not progress, dynamic_ncols=True)
    clock = {"last": time.perf_counter()}

    def finish(step: int, device_metrics, digest: str) -> dict:
        """Read a dispatched step's metrics (the device has moved on to the next step), log them
        and stop on a non-finite one."""
        out = {k: v.item() for k, v in jax.device_get(device_metrics).items()}
        now = time.perf_counter()
        dt, clock["last"] = now - clock["last"], now
        # The first step after start-up includes compilation: no throughput for it.
        timing = None
        if step > start + 1:
            tps = tokens_per_step / dt
            timing = (tps, mfu(tps, flops_per_token, peak, mesh.size))
        is_log = step % tcfg.log_every == 0 or step == tcfg.steps
        writer.write(step, "train", step_record(out, digest, timing), tensorboard=is_log)
        check_finite(step, out, last_checkpoint)
        bar.update(1)
        if is_log:
            # Capacity drops are shown whenever they happen, never only in the JSONL.
            drop = out.get("dropped_fraction", 0.0)
            bar.set_postfix(loss=f"{out['loss']:.3f}", lr=f"{out['lr']:.2e}",
                            tok_s=f"{timing[0]:.0f}" if timing else "-",
                            **({"dropped": f"{drop:.2%}"} if drop > 0 else {}))
        return out

    pending = None  # (step, device metrics, batch digest): read once the next step is dispatched
    try:
        with jax.set_mesh(mesh):
            for step in range(start + 1, tcfg.steps + 1):
                host_batch = next(train_iter)
                state, device_metrics = train_step(state, to_device(host_batch, bsh))
                if pending is not None:
                    metrics = finish(*pending)
                pending = (step, device_metrics, batch_digest(host_batch))
                is_eval = step % tcfg.eval_every == 0 or step == tcfg.steps
                is_save = step % ccfg.every == 0 or step == tcfg.steps or stop["signal"] is not None
                if not (is_eval or is_save):
                    continue
                # This state is evaluated or saved only after its own metrics are read and finite.
                metrics, pending = finish(*pending), None
                if is_eval:
                    eval_metrics = evaluate(eval_step, state, val)
                    writer.write(step, "eval", eval_metrics)
                    bar.write(f"step {step}: val loss {eval_metrics['loss']:.4f} "
                              f"ppl {eval_metrics['perplexity']:.2f}")
                if is_save:
                    ckpt.save(step, state, rng, train_iter)
                    last_checkpoint = step
                if stop["signal"] is not None:
                    bar.write(f"signal {stop['signal']}: checkpoint saved at step {step}, stopping")
                    result = RunResult("interrupted", step, metrics, eval_metrics, stop["signal"])
                    break
            else:
                result = RunResult("completed", tcfg.steps, metrics, eval_metrics)
    finally:
        bar.close()
        ckpt.wait()  # a save in flight (a good state) completes even when training failed
        ckpt.close()
        writer.close()
    return result
