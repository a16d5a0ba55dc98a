"""`datasets` folders, as `Dataset.save_to_disk` writes them (state.json, dataset_info.json and
Arrow stream files), read and written without the datasets library."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .arrow import pyarrow
from .files import open_new
from .rows import BatchError
from .workers import BATCH_ROWS

DATASETS_DATA_FILE = "data-00000-of-00001.arrow"


def read_datasets_folder(path: Path):
    """The folder's schema, and its rows as an iterator of record batches of BATCH_ROWS rows at
    most, file after file in the order state.json lists them."""
    pa = pyarrow()
    files = _datasets_files(path)
    schema = _ipc_schema(files[0]) if files else None
    if schema is None:
        raise BatchError(f"{path}: a datasets folder without data files")

    def batches():
        for file in files:
            with pa.memory_map(str(file)) as source:
                reader = pa.ipc.open_stream(source)
                if reader.schema != schema:
                    raise BatchError(f"{file}: its columns differ from the first data file's")
                for batch in reader:
                    yield from (batch.slice(start, BATCH_ROWS) for start in range(0, batch.num_rows, BATCH_ROWS))

    return schema, batches()


def _datasets_files(path: Path) -> list[Path]:
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise BatchError(f"{path / 'state.json'}: not a datasets state file ({e})") from None
    if any(os.sep in name or name.startswith("..") for name in names):
        raise BatchError(f"{path / 'state.json'}: data files outside the folder")
    return [path / name for name in names]


def _ipc_schema(file: Path):
    pa = pyarrow()
    with pa.memory_map(str(file)) as source:
        return pa.ipc.open_stream(source).schema


class DatasetsFolderWriter:
    """A datasets folder of one Arrow stream file, with the state.json and dataset_info.json that
    `save_to_disk` writes beside it. Those two depend only on the schema (and on the input
    folder's dataset_info.json, when the input is a datasets folder), so they are written first."""

    def __init__(self, folder: Path, schema, source: Path | None = None):
        pa = pyarrow()
        self.schema = schema
        _write_metadata(folder, schema, source)
        self._sink = open_new(folder / DATASETS_DATA_FILE)
        self._writer = pa.ipc.new_stream(self._sink, schema)

    def write(self, batch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def _write_metadata(folder: Path, schema, source: Path | None) -> None:
    """state.json and dataset_info.json as `save_to_disk` writes them, for one data file."""
    import hashlib

    info = {}
    if source is not None and (source / "dataset_info.json").exists():
        info = json.loads((source / "dataset_info.json").read_text(encoding="utf-8"))
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is not None:
        info["features"] = json.loads(raw)["info"]["features"]
    else:
        info.pop("features", None)  # datasets infers them from the Arrow schema
    for stale in ("splits", "download_checksums", "download_size", "dataset_size", "size_in_bytes"):
        info.pop(stale, None)
    state = {
        "_data_files": [{"filename": DATASETS_DATA_FILE}],
        "_fingerprint": hashlib.sha256(os.urandom(16)).hexdigest()[:16],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    for name, data in (("dataset_info.json", info), ("state.json", state)):
        with open_new(folder / name, text=True) as f:
            json.dump(data, f, indent=2)
