"""The same job on Ray Data (`parse_with_ray`, `parse --engine ray`): read_parquet / read_json,
map_batches with tasks that receive the template as plain data, and the parsed batches written in
the input's order.

Unlike the local engine, the message is a JSON string in JSON lines too: what Ray's own writers
give on object storage, so the engine writes one shape wherever it writes. Ray is imported only
inside `parse_with_ray` (`pip install 'rtcompile[ray]'`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .arrow import arrow_inputs, error_type, pyarrow
from .files import atomic_output, detect_format
from .job import Summary
from .jsonl import JsonlWriter
from .parquet import ParquetWriter
from .rows import BatchError, Columns, RowParser, check_output_columns, check_text_column, template_data
from .workers import BATCH_ROWS, check_jobs


def ray_parse_batch(batch, template: dict, columns: Columns, errors: str, timeout: float | None):
    """The map_batches function: a Ray worker gets the template (plain data) and loads the parser
    itself, from its own cache, once per worker process (api.load memoizes it); no code object
    is pickled. (Tasks rather than actors: actors would hold every CPU of a small cluster and
    leave none to the read and write tasks.)"""
    pa = pyarrow()
    key = (json.dumps(template, sort_keys=True), columns, errors, timeout)
    parser = _RAY_PARSERS.get(key)
    if parser is None:
        parser = _RAY_PARSERS[key] = RowParser(template, columns, errors, timeout)
    messages, found = parser.parse_columns(*arrow_inputs(batch, columns))
    batch = batch.append_column(pa.field(columns.message, pa.string()), pa.array(messages, pa.string()))
    return batch.append_column(pa.field(columns.error, error_type()), pa.array(found, error_type()))


_RAY_PARSERS: dict = {}


def parse_with_ray(
    input_path: str,
    output_path,
    template: Any,
    *,
    columns: Columns = Columns(),
    errors: str = "default",
    input_format: str | None = None,
    output_format: str | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
) -> Summary:
    """The same job on Ray Data: read_parquet / read_json, map_batches, write_parquet /
    write_json into a folder of files (written to a temporary folder, renamed at the end).
    Connects to the cluster `ray.init()` finds (RAY_ADDRESS), else starts a local one.
    `concurrency` caps the parse tasks running at once (None: as many as Ray likes)."""
    check_jobs(concurrency, "concurrency")
    try:
        import ray
    except ImportError:
        raise BatchError("--engine ray needs Ray: pip install 'rtcompile[ray]'") from None
    if errors == "strict":
        raise BatchError("--errors strict stops at the first bad row, which Ray's parallel batches cannot name in order; use --engine local")
    source_format = detect_format(Path(input_path), input_format, must_exist=not _is_uri(input_path))
    target_format = output_format or ("jsonl" if str(output_path).lower().rstrip("/").endswith((".jsonl", ".json")) else "parquet")
    if source_format == "datasets" or target_format == "datasets":
        raise BatchError("--engine ray reads and writes JSONL and Parquet; convert datasets folders with --engine local")
    template = template_data(template)
    RowParser(template, columns, errors, timeout).module  # an invalid template fails here, not on a worker
    if not ray.is_initialized():
        import logging

        ray.init(ignore_reinit_error=True, log_to_driver=False, logging_level=logging.WARNING)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = sys.stderr.isatty()
    reader = ray.data.read_parquet if source_format == "parquet" else ray.data.read_json
    dataset = reader(str(input_path))
    names = dataset.schema().names
    check_output_columns(names, columns)
    check_text_column(names, columns, input_path)
    parsed = dataset.map_batches(
        ray_parse_batch,
        fn_kwargs={"template": template, "columns": columns, "errors": errors, "timeout": timeout},
        batch_format="pyarrow",
        batch_size=BATCH_ROWS,
        **({"compute": ray.data.TaskPoolStrategy(size=concurrency)} if concurrency else {}),
    )
    write = parsed.write_parquet if target_format == "parquet" else parsed.write_json
    if _is_uri(output_path):  # object storage: no rename there; Ray writes each file whole
        # (Ray names each file by the index of its write task, given as tasks start: under load
        # that order can differ from the rows' own, so the files' order is not the rows' here.)
        write(str(output_path))
    else:
        output_path = Path(output_path)
        with atomic_output(output_path, directory=True, replaceable=_only_data_files) as temporary:
            _write_in_order(parsed, Path(temporary), target_format, columns)
    written = ray.data.read_parquet if target_format == "parquet" else ray.data.read_json
    summary = Summary()
    for batch in written(str(output_path)).select_columns([columns.error]).iter_batches(batch_format="pyarrow"):
        summary.rows += batch.num_rows
        summary.errors += batch.num_rows - batch.column(0).null_count
    return summary


def _write_in_order(parsed, folder: Path, target_format: str, columns: Columns) -> None:
    """The parsed rows into `folder` in the input's order: the driver streams the batches Ray
    yields in order (preserve_order) into one file, through the local engine's writers (JSON
    lines with the message as a JSON string, the shape Ray's own writers give on object storage).
    Ray's own writers name files by the order their tasks start, which under load is not always
    the rows' order."""
    writer = None
    if target_format == "jsonl":
        writer = JsonlWriter(folder / "part-00000.json", columns, message_as_text=True)
    try:
        for table in parsed.iter_batches(batch_format="pyarrow", batch_size=None):
            if writer is None:  # Parquet, whose schema is the first batch's
                writer = ParquetWriter(folder / "part-00000.parquet", table.schema)
            for batch in table.to_batches():
                writer.write(batch)
    finally:
        if writer is not None:
            writer.close()


def _only_data_files(folder: Path) -> bool:
    """Whether a folder holds only what an earlier Ray job wrote (so it may be replaced)."""
    return all(p.is_file() and p.suffix in (".parquet", ".json", ".jsonl") for p in folder.iterdir())


def _is_uri(path) -> bool:
    return "://" in str(path)
