"""Execute notebooks in their full mode, keep the outputs in the .ipynb and copy their figures
to notebooks/figures/ (what the README shows).

    python benchmarks/run_notebooks.py quickstart summarization_ablation
    COMPOSER_NOTEBOOK_STEPS=150 python benchmarks/run_notebooks.py moe_vs_dense
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import tempfile
import time

import nbclient
import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS, FIGURES = ROOT / "notebooks", ROOT / "notebooks" / "figures"


def run(name: str) -> float:
    path = NOTEBOOKS / f"{name}.ipynb"
    if not path.exists():
        raise SystemExit(f"no notebook {path}; have {sorted(p.stem for p in NOTEBOOKS.glob('*.ipynb'))}")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"{name}_"))
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, COMPOSER_NOTEBOOK_WORKDIR=str(workdir), XLA_FLAGS="")
    env.pop("COMPOSER_NOTEBOOK_MODE", None)
    t = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute(env=env)
    nbformat.write(nb, path)
    FIGURES.mkdir(exist_ok=True)
    for png in workdir.glob("*.png"):
        shutil.copy(png, FIGURES / png.name)
        print("figure", FIGURES / png.name)
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+", help="notebook names without .ipynb")
    for name in p.parse_args().names:
        print(f"{name}: {run(name):.0f} s", flush=True)


if __name__ == "__main__":
    main()
