"""The `parse` command's job on files (`parse_file`): the input read in batches, each batch parsed on
worker processes, the results written in input order to a temporary output that replaces the
target only when the job has finished; a progress bar on a terminal, and a `Summary` at the end.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import jsonl, parquet
from .arrow import arrow_inputs, arrow_task, check_output_columns, empty_batch, pyarrow, split_batches, with_results
from .datasets_folder import DATASETS_DATA_FILE, IpcWriter, read_datasets_folder, write_datasets_metadata
from .files import atomic_output, detect_format, open_new
from .rows import BatchError, Columns, RowParser, one_line
from .workers import zip_pairs, zip_tasks


@dataclass
class Summary:
    rows: int = 0
    errors: int = 0
    kinds: dict = field(default_factory=dict)


def parse_file(
    input_path,
    output_path,
    template: Any,
    *,
    columns: Columns = Columns(),
    errors: str = "default",
    jobs: int | None = None,
    input_format: str | None = None,
    output_format: str | None = None,
    timeout: float | None = None,
    progress: bool | None = None,
) -> Summary:
    """The `parse` command: `input_path` parsed into `output_path` (see the package docstring).
    `jobs=None` uses every core; `progress=None` shows a bar only when stderr is a terminal."""
    input_path, output_path = Path(input_path), Path(output_path)
    source_format = detect_format(input_path, input_format, must_exist=True)
    target_format = detect_format(output_path, output_format, must_exist=False)
    if source_format == "jsonl" and target_format != "jsonl":
        raise BatchError("JSONL input is written as JSONL (its rows need not share one schema); use a .jsonl output")
    if output_path.resolve() == input_path.resolve():
        raise BatchError(f"{output_path}: the output would replace the input")
    parser = RowParser(template, columns, errors, timeout)
    parser.module  # compile (or load) once here: workers then load it from the cache
    jobs = (os.cpu_count() or 1) if jobs is None else max(1, jobs)
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _progress_bar(progress, _count_rows(input_path, source_format) if progress else None)
    summary = Summary()
    try:
        with atomic_output(output_path, directory=target_format == "datasets") as temporary:
            if source_format == "jsonl":
                _jsonl_job(parser, input_path, temporary, jobs, summary, bar)
            else:
                _arrow_job(parser, input_path, source_format, temporary, target_format, jobs, summary, bar)
    except OSError as e:
        raise BatchError(f"{e.filename or input_path}: {e.strerror or e}") from None
    except BatchError:
        raise
    except Exception as e:  # pyarrow's errors for damaged or foreign files
        if type(e).__module__.startswith("pyarrow"):
            raise BatchError(f"{input_path}: {one_line(e)}") from None
        raise
    finally:
        if bar is not None:
            bar.close()
    return summary


def _jsonl_job(parser: RowParser, input_path: Path, temporary: Path, jobs: int, summary: Summary, bar) -> None:
    with open_new(temporary) as out:
        for batch, (data, failed) in zip_tasks(jsonl.jsonl_batches(input_path), parser, jsonl.jsonl_task, jobs):
            out.write(data)
            _count(summary, bar, len(batch.lines), failed)


def _arrow_job(parser, input_path, source_format, temporary, target_format, jobs, summary, bar) -> None:
    columns = parser.columns
    schema, batches = _arrow_reader(input_path, source_format)
    check_output_columns(schema, columns)
    batches = split_batches(batches, columns)
    writer = None
    first_row = 0

    def tasks():
        nonlocal first_row
        for batch in batches:
            yield batch, (arrow_inputs(batch, columns), first_row)
            first_row += batch.num_rows

    try:
        writer = _arrow_writer(temporary, target_format, with_results(empty_batch(schema), columns, [], []).schema, columns)
        for batch, (messages, errors) in zip_pairs(tasks(), parser, arrow_task, jobs):
            writer.write(with_results(batch, columns, messages, errors))
            _count(summary, bar, batch.num_rows, sum(e is not None for e in errors))
    finally:
        if writer is not None:
            writer.close()
    if target_format == "datasets":
        write_datasets_metadata(input_path if source_format == "datasets" else None, temporary, writer.schema, columns)


def _arrow_reader(path: Path, source_format: str):
    pyarrow()  # (a one-line error without it)
    if source_format == "parquet":
        return parquet.read_parquet(path)
    return read_datasets_folder(path)


def _arrow_writer(temporary: Path, target_format: str, schema, columns: Columns):
    if target_format == "parquet":
        return parquet.ParquetWriter(temporary, schema)
    if target_format == "jsonl":
        return jsonl.JsonlWriter(temporary, schema, columns)
    return IpcWriter(temporary / DATASETS_DATA_FILE, schema)


def _count(summary: Summary, bar, rows: int, failed: int) -> None:
    summary.rows += rows
    summary.errors += failed
    if bar is not None:
        bar.update(rows)


def _count_rows(path: Path, source_format: str) -> int | None:
    """The row count for the progress bar's time left, where it is cheap to know."""
    try:
        if source_format == "parquet":
            return parquet.count_rows(path)
        if source_format == "jsonl":
            return jsonl.count_rows(path)
    except Exception:
        return None
    return None


def _progress_bar(enabled: bool, total: int | None):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=" rows", unit_scale=True, file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
