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


@pytest.mark.slow
def test_quickstart_notebook(tmp_path):
    texts = execute("quickstart.ipynb", tmp_path)
    assert (tmp_path / "sft" / "checkpoints").is_dir()  # it trained, saved, then loaded this
    transcript, result = texts[-2], json.loads(texts[-1])
    assert result["segments"] >= 1 and result["policy_tokens"] > 0
    assert transcript.count("===== segment ") == result["segments"]
    assert transcript.count("[carried summary]") == result["segments"] - 1  # one per reset
    assert result["task_id"] in transcript and f"end={result['end_reason']}" in transcript


@pytest.mark.slow
def test_summarization_ablation_notebook(tmp_path):
    texts = execute("summarization_ablation.ipynb", tmp_path)
    result = json.loads(texts[-1])
    assert set(result["held_out"]) == set(result["sweep"]) == {"trained", "masked", "none"}
    for name in result["held_out"]:  # each arm trained from the same SFT checkpoint
        assert (tmp_path / name / "checkpoints").is_dir()
    sweep = result["sweep"]
    assert [p["hops"] for p in sweep["trained"]] == [2, 4]
    # Summaries let a run outgrow its window; without them a run is one context, never longer.
    assert max(p["transcript_windows"] for p in sweep["trained"]) > 1.0
    assert all(p["segments_per_episode"] == 1 and p["transcript_windows"] <= 1.0 for p in sweep["none"])
    assert (tmp_path / "summarization_ablation.png").stat().st_size > 10_000


def test_long_horizon_notebook(tmp_path):
    """It reads the committed result files: the headline (`horizon.json`, run 5: three seeds, every
    arm) in issue #26's schema, the trained policy's solved held-out 100x episode one line per
    reset, then run 2's tables and episode."""
    texts = execute("long_horizon.ipynb", tmp_path)
    result = json.loads(texts[-1])
    record = json.loads((NOTEBOOKS.parent / "benchmarks" / "results" / "horizon.json").read_text())
    assert result["seeds"] == record["seeds"] == [0, 1, 2] and result["horizons"] == record["horizons"] == [1, 3, 10, 30, 100]
    assert result["arms"] == list(record["pass_rate"]) and set(result["arms"]) == {"trained", "masked", "none", "harness", "sft"}
    assert result["pass_rate"] == record["pass_rate"] == record["series"]["pass_rate"]
    for key in ("compaction_error", "summary_tokens"):  # one value per arm and horizon
        assert {arm: len(v) for arm, v in record[key].items()} == {arm: 5 for arm in result["arms"]}
    header = result["transcript_header"]  # a held-out 100x episode the trained policy solved (>= 50k tokens)
    assert "reward=1.000" in header and "/h162-" in header and int(header.split("transcript_tokens=")[1].split()[0]) >= 50_000
    episode = next(t for t in texts if t.startswith(header))
    assert episode.count("\nsegment ") == result["transcript_segments"] - 2 > 100
    assert episode.count("The access key is") >= result["transcript_segments"] - 1
    run2 = json.loads((NOTEBOOKS.parent / "benchmarks" / "results" / "horizon_run2.json").read_text())
    assert result["run2_arms"] == list(run2["pass_rate"]) and result["run2_horizons"] == run2["horizons"]
    assert "reward=1.000" in result["run2_transcript_header"] and result["run2_transcript_segments"] > 1
    run2_episode = next(t for t in texts if t.startswith(result["run2_transcript_header"]))
    assert run2_episode.count("[carried summary]") == result["run2_transcript_segments"] - 1
    # the code tier: a held-out 100x episode solved, app.py written from the summary carried into it
    code = json.loads((NOTEBOOKS.parent / "benchmarks" / "results" / "horizon_code.json").read_text())
    assert code["seeds"] == [0, 1, 2] and result["code_pass_rate"] == code["pass_rate"] and "/h162-" in result["code_transcript_header"]
    assert "reward=1.000" in result["code_transcript_header"] and result["code_segments"] > 100
    assert "from pkg." in texts[-2] and texts[-2].count("[carried summary]") == 1
