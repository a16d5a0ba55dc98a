"""The same job on Ray Data (`parse_with_ray`, `parse --engine ray`), writing what the local engine
writes.

The rows are parsed by the local engine's code: a JSONL input is read as its lines, as written
(`ray_io.JsonLinesDatasource`), and each line goes through the local engine's line encoder; a
Parquet input through `RowParser.parse_columns` and `arrow.with_results`. map_batches tasks receive
the template as plain data and load the parser on each worker. A local output is written by the
driver, in the input's order, with the local engine's writers, into a temporary file (or folder)
renamed into place: the same bytes as `--engine local` for JSONL, the same schema and values for
Parquet. On object storage each write task writes one file of those bytes (`ray_io`).

Ray is imported only inside `parse_with_ray` and the tasks (`pip install 'rtcompile[ray]'`).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

from .arrow import arrow_inputs, output_schema, pyarrow, with_results
from .files import atomic_output, detect_format
from .job import Summary
from .jsonl import JsonLineFormat, LineBatch, arrow_lines, encode_lines
from .rows import BatchError, Columns, RowParser, check_output_columns, check_text_column, no_row_has_the_text_column, template_data
from .workers import BATCH_ROWS, check_jobs


def _parser(template: dict, columns: Columns, errors: str, timeout: float | None) -> RowParser:
    """The parser of a Ray worker process, loaded once per worker (api.load memoizes it)."""
    key = (json.dumps(template, sort_keys=True), columns, errors, timeout)
    parser = _RAY_PARSERS.get(key)
    if parser is None:
        parser = _RAY_PARSERS[key] = RowParser(template, columns, errors, timeout)
    return parser


_RAY_PARSERS: dict = {}


def ray_encode_lines(batch, template: dict, columns: Columns, errors: str, timeout: float | None):
    """map_batches for a JSONL input: its lines (`ray_io.INPUT_LINES`) parsed and encoded as the
    local engine encodes them (`ray_io.OUTPUT_LINES`). The worker gets the template (plain data),
    never code. (Tasks rather than actors: actors would hold every CPU of a small cluster and
    leave none to the read and write tasks.)"""
    parser = _parser(template, columns, errors, timeout)
    numbers, lines = batch.column("line_number").to_pylist(), batch.column("line").to_pylist()
    try:
        encoded, found, has_text, first_keys = encode_lines(parser, LineBatch(0, numbers[0] if numbers else 1, list(zip(numbers, lines))))
    except BatchError as e:  # (a line with an added column: the job stops, in the driver, as in the local engine)
        return _output_lines([b""], [None], [False], None, refusal=str(e))
    kinds = [None if error is None else error["kind"] for error in found]
    return _output_lines(encoded, kinds, has_text, first_keys)


def ray_parse_batch(batch, template: dict, columns: Columns, errors: str, timeout: float | None, target_format: str):
    """map_batches for a Parquet input: the batch with the two columns appended, or for a JSONL
    output its lines (`ray_io.OUTPUT_LINES`), as the local engine writes them."""
    parser = _parser(template, columns, errors, timeout)
    messages, found = parser.parse_columns(*arrow_inputs(batch, columns))
    parsed = with_results(batch, columns, messages, found)
    if target_format != "jsonl":
        return parsed
    kinds = [None if error is None else error["kind"] for error in found]
    return _output_lines(arrow_lines(parsed, JsonLineFormat(columns), columns), kinds, [True] * len(kinds), None)


def _output_lines(lines: list, kinds: list, has_text: list, first_keys: list | None, refusal: str | None = None):
    from .ray_io import OUTPUT_LINES

    pa = pyarrow()
    keys, refusals = [None] * len(lines), [None] * len(lines)
    if first_keys is not None and keys:
        keys[0] = json.dumps(first_keys)
    if refusal is not None:
        refusals[0] = refusal
    arrays = [pa.array(lines, pa.binary()), pa.array(kinds, pa.string()), pa.array(has_text, pa.bool_()), pa.array(keys, pa.string()), pa.array(refusals, pa.string())]
    return pa.Table.from_arrays(arrays, schema=OUTPUT_LINES)


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
    """The `parse` command on Ray Data (see the module's docstring). Connects to the cluster
    `ray.init()` finds (RAY_ADDRESS), else starts a local one. `concurrency` caps the parse tasks
    running at once (None: as many as Ray likes)."""
    check_jobs(concurrency, "concurrency")
    try:
        import ray
    except ImportError:
        raise BatchError("--engine ray needs Ray: pip install 'rtcompile[ray]'") from None
    if errors == "strict":
        raise BatchError("--errors strict stops at the first bad row, which Ray's parallel batches cannot name in order; use --engine local")
    source_format, target_format = _formats(input_path, output_path, input_format, output_format)
    template = template_data(template)
    RowParser(template, columns, errors, timeout).module  # an invalid template fails here, not on a worker
    _start(ray)
    options = {"template": template, "columns": columns, "errors": errors, "timeout": timeout}
    compute = {"compute": ray.data.TaskPoolStrategy(size=concurrency)} if concurrency else {}
    if source_format == "jsonl":
        from .ray_io import JsonLinesDatasource

        dataset = ray.data.read_datasource(JsonLinesDatasource(str(input_path)))
        parsed = dataset.map_batches(ray_encode_lines, fn_kwargs=options, batch_format="pyarrow", batch_size=BATCH_ROWS, **compute)
        schema = None
    else:
        dataset = ray.data.read_parquet(str(input_path))
        schema = _input_schema(input_path, dataset)
        check_output_columns(schema.names, columns)
        check_text_column(schema.names, columns, input_path)
        options["target_format"] = target_format
        parsed = dataset.map_batches(ray_parse_batch, fn_kwargs=options, batch_format="pyarrow", batch_size=BATCH_ROWS, **compute)
        schema = output_schema(schema, columns)
    if _is_uri(output_path):
        return _write_files(parsed, str(output_path), target_format, schema, columns, input_path)
    with atomic_output(Path(output_path), directory=target_format == "datasets") as temporary:
        return _write_in_order(parsed, Path(temporary), target_format, schema, columns, input_path)


def _formats(input_path, output_path, input_format: str | None, output_format: str | None) -> tuple[str, str]:
    """The input's and the output's formats, as the local engine names them."""
    source_format = detect_format(Path(input_path), input_format, must_exist=not _is_uri(input_path))
    if _is_uri(output_path):  # a folder of files on object storage
        target_format = output_format or ("jsonl" if str(output_path).lower().rstrip("/").endswith((".jsonl", ".json")) else "parquet")
    else:
        target_format = detect_format(Path(output_path), output_format, must_exist=False)
    if source_format == "datasets" or (target_format == "datasets" and _is_uri(output_path)):
        raise BatchError("--engine ray reads JSONL and Parquet and writes datasets folders only locally; use --engine local")
    if source_format == "jsonl" and target_format != "jsonl":
        raise BatchError("JSONL input is written as JSONL (its rows need not share one schema); use a .jsonl output")
    if not _is_uri(output_path) and not _is_uri(input_path) and Path(output_path).resolve() == Path(input_path).resolve():
        raise BatchError(f"{output_path}: the output would replace the input")
    return source_format, target_format


def _start(ray) -> None:
    if not ray.is_initialized():
        import logging

        ray.init(ignore_reinit_error=True, log_to_driver=False, logging_level=logging.WARNING)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = sys.stderr.isatty()


def _input_schema(input_path, dataset):
    """The input's Arrow schema as the local engine reads it: a Parquet file's own (Ray's batches
    drop its metadata, such as datasets' features), else the one Ray infers."""
    if not _is_uri(input_path) and Path(input_path).is_file():
        from .parquet import read_parquet

        return read_parquet(Path(input_path))[0]
    return dataset.schema().base_schema


def _write_in_order(parsed, temporary: Path, target_format: str, schema, columns: Columns, source) -> Summary:
    """The parsed rows into the local output, in the input's order (preserve_order), through the
    local engine's writers; the counts of the job. A JSONL input in which no row has the text column
    fails here, before its output is renamed into place."""
    from .job import open_writer
    from .ray_io import tally_lines, tally_parsed

    counts = _Counts()
    writer = open_writer(temporary, target_format, schema, columns, None)
    try:
        for table in parsed.iter_batches(batch_format="pyarrow", batch_size=None):
            if target_format == "jsonl":  # (ray_io.OUTPUT_LINES)
                writer.write_lines(b"".join(table.column("line").to_pylist()))
                counts.add(tally_lines(table))
            else:
                for batch in table.cast(schema).to_batches():
                    writer.write(batch)
                counts.add(tally_parsed(table, columns.error))
    finally:
        writer.close()
    counts.check(columns, source)
    return counts.summary


def _write_files(parsed, folder: str, target_format: str, schema, columns: Columns, source) -> Summary:
    """The parsed rows into a folder on object storage, one file per write task (named in the order
    the tasks start, which under load is not always the rows' order); the counts of the job. Where
    no row of a JSONL input has the text column, the files written are removed again."""
    from .ray_io import JsonLinesFiles, ParquetFiles

    name = uuid.uuid4().hex
    if target_format == "jsonl":
        files = JsonLinesFiles(folder, name)
    else:
        files = ParquetFiles(folder, name, schema, columns.error)
    parsed.write_datasink(files)
    counts = _Counts()
    try:
        for tally in files.tallies:
            counts.add(tally)
        counts.check(columns, source)
    except BatchError:
        files.remove_written()
        raise
    return counts.summary


class _Counts:
    """The job's Summary, with what the text column's check needs (JSONL input)."""

    def __init__(self) -> None:
        self.summary = Summary()
        self.with_text = 0
        self.first_keys = None

    def add(self, tally: dict) -> None:
        if tally["refusal"] is not None:
            raise BatchError(tally["refusal"])
        self.summary.add(tally["rows"], tally["kinds"])
        self.with_text += tally["with_text"]
        if self.first_keys is None:
            self.first_keys = tally["first_keys"]

    def check(self, columns: Columns, source) -> None:
        if self.first_keys is not None and self.with_text == 0:
            raise no_row_has_the_text_column(columns, source, self.first_keys)


def _is_uri(path) -> bool:
    return "://" in str(path)
