"""The notebooks execute top to bottom in their tiny (`ci`) mode and print their results."""
import json
import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need the dev extra (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need the dev extra (nbclient)")

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str, workdir: pathlib.Path) -> list[str]:
    """Run a notebook in CI mode; returns the text outputs of its cells in order."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    env = dict(os.environ, COMPOSER_NOTEBOOK_MODE="ci", COMPOSER_NOTEBOOK_WORKDIR=str(workdir),
               XLA_FLAGS="")  # the kernel is a fresh process: one CPU device, like a user's
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS.parent)}})
    client.execute(env=env)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            if out.get("name") == "stdout":
                texts.append(out["text"])
    return texts


@pytest.mark.slow
def test_moe_vs_dense_notebook(tmp_path):
    texts = execute("moe_vs_dense.ipynb", tmp_path)
    result = json.loads(texts[-1])
    assert set(result) == {"moe", "dense"}
    # Same active FLOPs by construction: the MoE's extra parameters are inactive experts.
    assert result["moe"]["total_params"] > result["dense"]["total_params"]
    assert abs(result["moe"]["active_params"] / result["dense"]["active_params"] - 1) < 0.02
    for run in result.values():
        assert run["steps"] == 12 and run["final_val_loss"] < 9.0  # below log(8192) = 9.01
    assert (tmp_path / "moe_vs_dense.png").stat().st_size > 10_000
