"""The `parse` command's job on files (`parse_file`): the input read in batches, each batch parsed on
worker processes, the results written in input order to a temporary output that replaces the
target only when the job has finished; a progress bar on a terminal, and a `Summary` at the end.

A job imports what its formats need: a JSONL job neither the Arrow modules nor pyarrow, and tqdm
only for a progress bar.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import jsonl
from .files import atomic_output, detect_format
from .rows import BatchError, Columns, RowParser, error_kinds, check_output_columns, check_text_column, no_row_has_the_text_column, one_line
from .workers import check_jobs, run_in_order


@dataclass
class Summary:
    """What a finished job wrote: its rows, how many of them carry an error, and those by the
    error's kind (`{"parse": 3, "missing": 1}`)."""

    rows: int = 0
    errors: int = 0
    kinds: dict = field(default_factory=dict)

    def add(self, rows: int, kinds: dict) -> None:
        """Count a batch: its rows, and its rows with an error by kind."""
        self.rows += rows
        for kind, count in kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + count
            self.errors += count

    def __str__(self) -> str:
        """The job's last line: `6000 rows, 4 with an error (parse 3, missing 1)`, the most
        frequent kind first."""
        text = f"{self.rows} rows, {self.errors} with an error"
        if not self.kinds:
            return text
        kinds = sorted(self.kinds.items(), key=lambda item: (-item[1], item[0]))
        return f"{text} ({', '.join(f'{kind} {count}' for kind, count in kinds)})"


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
    check_jobs(jobs)
    input_path, output_path = Path(input_path), Path(output_path)
    source_format = detect_format(input_path, input_format, must_exist=True)
    target_format = detect_format(output_path, output_format, must_exist=False)
    if source_format == "jsonl" and target_format != "jsonl":
        raise BatchError("JSONL input is written as JSONL (its rows need not share one schema); use a .jsonl output")
    if output_path.resolve() == input_path.resolve():
        raise BatchError(f"{output_path}: the output would replace the input")
    parser = RowParser(template, columns, errors, timeout)
    parser.module  # compile (or load) once here: workers then load it from the cache
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
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
    """JSONL to JSONL. Rows need not share their columns, so a text column that no row has is
    known only at the end: the job then fails, before its output is renamed into place."""
    writer = jsonl.JsonlWriter(temporary, parser.columns)
    rows_with_text, first_row_columns = 0, None
    try:
        batches = jsonl.jsonl_batches(input_path)
        pairs = ((len(batch.lines), batch) for batch in batches)
        for rows, encoded in run_in_order(parser, jsonl.encode_batch, pairs, jobs):
            writer.write_lines(encoded.data)
            _count(summary, bar, rows, encoded.kinds)
            rows_with_text += encoded.with_text
            if first_row_columns is None:
                first_row_columns = encoded.first_row_columns
    finally:
        writer.close()
    if first_row_columns is not None and rows_with_text == 0:
        raise no_row_has_the_text_column(parser.columns, input_path, first_row_columns)


def _arrow_job(parser, input_path, source_format, temporary, target_format, jobs, summary, bar) -> None:
    from .arrow import batch_tasks, output_schema, parse_inputs, split_batches, with_results

    columns = parser.columns
    schema, batches = _read_arrow(input_path, source_format)
    check_output_columns(schema.names, columns)
    check_text_column(schema.names, columns, input_path)
    source_folder = input_path if source_format == "datasets" else None
    writer = open_writer(temporary, target_format, output_schema(schema, columns), columns, source_folder)
    try:
        pairs = batch_tasks(split_batches(batches, columns), columns)
        for batch, (messages, errors) in run_in_order(parser, parse_inputs, pairs, jobs):
            writer.write(with_results(batch, columns, messages, errors))
            _count(summary, bar, batch.num_rows, error_kinds(errors))
    finally:
        writer.close()


def _read_arrow(path: Path, source_format: str):
    """The schema and the record batches of a Parquet file or a datasets folder."""
    from .arrow import pyarrow

    pyarrow()  # (a one-line error without it)
    if source_format == "parquet":
        from .parquet import read_parquet

        return read_parquet(path)
    from .datasets_folder import read_datasets_folder

    return read_datasets_folder(path)


def open_writer(temporary: Path, target_format: str, schema, columns: Columns, source_folder: Path | None):
    """The writer of the output format, into the temporary file (or folder) of the job."""
    if target_format == "parquet":
        from .parquet import ParquetWriter

        return ParquetWriter(temporary, schema)
    if target_format == "jsonl":
        return jsonl.JsonlWriter(temporary, columns)
    from .datasets_folder import DatasetsFolderWriter

    return DatasetsFolderWriter(temporary, schema, source_folder)


def _count(summary: Summary, bar, rows: int, kinds: dict) -> None:
    summary.add(rows, kinds)
    if bar is not None:
        bar.update(rows)


def _count_rows(path: Path, source_format: str) -> int | None:
    """The row count for the progress bar's time left, where it is cheap to know."""
    try:
        if source_format == "parquet":
            from .parquet import count_rows

            return count_rows(path)
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
