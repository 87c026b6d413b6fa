"""Where a data build puts things under its directory (one place, shared by build and loader)."""
import pathlib

SPLITS = ("train", "val")
CORPUS_SOURCE = "code"  # the mixture name of the file corpus (stdlib + data.corpus_paths)


def manifest_path(data_dir) -> pathlib.Path:
    return pathlib.Path(data_dir) / "manifest.json"


def tokenizer_path(data_dir) -> pathlib.Path:
    return pathlib.Path(data_dir) / "tokenizer.json"


def store_path(data_dir, source: str, split: str) -> pathlib.Path:
    return pathlib.Path(data_dir) / "stores" / source / split


def summary_path(data_dir) -> pathlib.Path:
    return pathlib.Path(data_dir) / "build_summary.json"
