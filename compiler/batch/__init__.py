"""Parse datasets of finished generations: JSONL, Parquet and `datasets` folders, on every core.

    python -m rtcompile parse rollouts.jsonl -o parsed.jsonl --template qwen3
    python -m rtcompile parse evals.parquet -o parsed.parquet --template path/to/tokenizer_dir

    table = parse_table(table, "qwen3")                      # a pyarrow Table
    dataset = parse_dataset(dataset, "qwen3", num_proc=8)    # a datasets.Dataset (Dataset.map)

Each row's generation (`text_column`), prompt (`prefix_column`) and tools (`tools_column`: a
list, or a JSON string of one) go through the compiled parser; the output keeps every input
column, in the input's order of rows, and adds `message` (the parsed message: a JSON object in
JSONL, a JSON string in Arrow formats) and `error` (null, or a record of what went wrong:
`{"kind", "column", "exception", "detail"}`). A bad row never stops the job (except under
`errors="strict"`) and never disappears: it gets an error record on its own row.

Errors modes:
* "default": the message is exactly the interpreter's strict `parse_response` wherever that
  succeeds; where it raises, the row carries the error and what `errors="keep"` recovers.
* "keep": keep semantics throughout (a field written twice is joined, which the interpreter
  does not do); rows whose regions failed carry a "region" error pointing at
  `message.rtcompile_parse_errors`.
* "strict": the first error stops the job, naming its row (`RowError`).

Input is read and output written in batches, so memory does not grow with the input, and the
output is written to a temporary file (or folder) beside it and renamed into place only when
the job has finished: an error never leaves a half-written output. Worker processes receive the
response template (plain data) and compile or load the parser from the cache themselves; no code
object is ever pickled. This module depends on the compiler's public API and the runtime, never
the other way round; pyarrow (Parquet, datasets folders, tables) and tqdm (the progress bar) are
optional: `pip install 'rtcompile[batch]'`.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

ERRORS_MODES = ("default", "keep", "strict")
FORMATS = ("jsonl", "parquet", "datasets")
DEFAULT_TEXT_COLUMN = "completion"
DEFAULT_PREFIX_COLUMN = "prompt"
DEFAULT_TOOLS_COLUMN = "tools"
# Rows per batch handed to a worker, and the most text one batch may hold: what bounds memory,
# together with the number of batches in flight (two per worker).
BATCH_ROWS = 512
BATCH_TEXT_BYTES = 16 << 20
KEEP_ERRORS_KEY = "rtcompile_parse_errors"
# The error record's fields, in this order in every format (a struct column in Arrow formats).
ERROR_FIELDS = ("kind", "column", "exception", "detail")


class BatchError(Exception):
    """The job cannot go on (unreadable input, unwritable output, bad options): one line."""


class RowError(BatchError):
    """Under errors="strict": the first bad row, by its index (0-based, in input order)."""

    def __init__(self, row: int, record: dict, line: int | None = None):
        where = f"row {row}" + (f" (line {line})" if line is not None else "")
        column = f" column {record['column']!r}:" if record.get("column") else ""
        exception = f" {record['exception']}:" if record.get("exception") else ""
        super().__init__(f"{where}:{column}{exception} {record['detail']}")
        self.row, self.record, self.line = row, record, line

    def __reduce__(self):  # (raised in a worker process, re-raised in the parent)
        return RowError, (self.row, self.record, self.line)


@dataclass(frozen=True)
class Columns:
    """Where each row's inputs are, and the names of the two added columns. `prefix=None` parses
    every generation with an empty prefix (the generation holds the whole message)."""

    text: str = DEFAULT_TEXT_COLUMN
    prefix: str | None = DEFAULT_PREFIX_COLUMN
    tools: str | None = DEFAULT_TOOLS_COLUMN
    message: str = "message"
    error: str = "error"


def error_record(kind: str, detail: str, column: str | None = None, exception: str | None = None) -> dict:
    return {"kind": kind, "column": column, "exception": exception, "detail": detail}


class _Missing:
    """A row without the column at all (a JSONL object, a table without it): one object in every
    process, since it pickles by name."""

    def __reduce__(self) -> str:
        return "_MISSING"

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


# ---- one row -----------------------------------------------------------------------------------


class RowParser:
    """The per-row job, the same in every engine: inputs checked, parsed, message and error.

    Pickles as its template and options only (the compiled module is loaded again, from the
    cache, in whichever process uses it), so it can be handed to worker processes, to
    `Dataset.map(num_proc=N)` and to Ray actors.
    """

    def __init__(self, template: Any, columns: Columns = Columns(), errors: str = "default", timeout: float | None = None):
        if errors not in ERRORS_MODES:
            raise ValueError(f"errors must be one of {', '.join(ERRORS_MODES)}, not {errors!r}")
        self.template = _template_data(template)
        self.columns = columns
        self.errors = errors
        self.timeout = timeout
        self._module = None
        self._anchor = None
        self._tools_text = self._tools_value = None  # the last tools JSON string, decoded

    def __getstate__(self) -> dict:
        return {"template": self.template, "columns": self.columns, "errors": self.errors, "timeout": self.timeout}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _module=None, _anchor=None, _tools_text=None, _tools_value=None)

    @property
    def module(self):
        if self._module is None:
            from rtcompile import api

            self._module = api.load(self.template)
            self._anchor = _anchor_test(self._module.TEMPLATE)
        return self._module

    def parse_row(self, text: Any, prefix: Any = "", tools: Any = None) -> tuple[dict | None, dict | None]:
        """(message, error) for one row's values; `_MISSING` stands for an absent column."""
        module = self.module
        columns = self.columns
        if text is _MISSING or text is None:
            return None, error_record("missing", "no generation (the column is missing or null)", columns.text)
        if not isinstance(text, str):
            return None, error_record("type", f"the generation is a {type(text).__name__}, not a string", columns.text)
        if prefix is _MISSING or prefix is None:
            return None, error_record("missing", "no prompt (the column is missing or null)", columns.prefix)
        if not isinstance(prefix, str):
            return None, error_record("type", f"the prompt is a {type(prefix).__name__}, not a string", columns.prefix)
        if prefix and not self._anchor(prefix):
            return None, error_record(
                "prefix_without_anchor", "the prompt does not contain the template's start anchor", columns.prefix
            )
        if isinstance(tools, str) and tools == self._tools_text:  # most datasets repeat one tools string
            tools = self._tools_value
        else:
            text_form = tools if isinstance(tools, str) else None
            tools, problem = _tools_value(tools, columns.tools)
            if problem is not None:
                return None, problem
            if text_form is not None:
                self._tools_text, self._tools_value = text_form, tools
        if self.errors == "keep":
            try:
                message = module.parse_response(text, prefix=prefix, tools=tools, errors="keep", timeout=self.timeout)
            except Exception as e:  # (keep mode records region failures; this is anything else)
                return None, error_record("parse", _one_line(e), exception=type(e).__name__)
            failed = message.get(KEEP_ERRORS_KEY)
            if failed:
                names = ", ".join(dict.fromkeys(str(record.get("field")) for record in failed))
                detail = f"{len(failed)} region(s) failed to parse ({names}): see message.{KEEP_ERRORS_KEY}"
                return message, error_record("region", detail)
            return message, None
        try:
            return module.parse_response(text, prefix=prefix, tools=tools, timeout=self.timeout), None
        except Exception as e:
            error = error_record("parse", _one_line(e), exception=type(e).__name__)
        if self.errors == "strict":
            return None, error
        try:  # what keep mode recovers, beside the interpreter's error
            message = module.parse_response(text, prefix=prefix, tools=tools, errors="keep", timeout=self.timeout)
        except Exception:
            message = None
        return message, error

    def parse_columns(self, texts: list, prefixes: list | None, tools: list | None, first_row: int = 0) -> tuple[list, list]:
        """Messages as JSON strings (or None) and error records (or None) for columns of values;
        None for a column the input does not have."""
        messages, errors = [], []
        count = len(texts)
        prefixes = _column_or(prefixes, count, "" if self.columns.prefix is None else _MISSING)
        tools = _column_or(tools, count, None)
        strict = self.errors == "strict"
        for index in range(count):
            message, error = self.parse_row(texts[index], prefixes[index], tools[index])
            if error is not None and strict:
                raise RowError(first_row + index, error)
            messages.append(None if message is None else _dumps(message))
            errors.append(error)
        return messages, errors

    # -- datasets.Dataset.map(parser, batched=True, num_proc=N) --

    def __call__(self, batch: dict) -> dict:
        columns = self.columns
        if columns.message in batch or columns.error in batch:
            raise BatchError(_existing_column_message(columns))
        texts = batch[columns.text] if columns.text in batch else [_MISSING] * _batch_length(batch)
        messages, errors = self.parse_columns(texts, _get(batch, columns.prefix), _get(batch, columns.tools))
        return {columns.message: messages, columns.error: errors}

    def output_features(self, features):
        """The `features=` for Dataset.map: the input's, plus the two added columns (an all-null
        first batch would otherwise leave datasets unable to type them)."""
        import datasets

        out = datasets.Features(dict(features))
        out[self.columns.message] = datasets.Value("string")
        out[self.columns.error] = {name: datasets.Value("string") for name in ERROR_FIELDS}
        return out


def _get(batch: dict, name: str | None):
    return batch.get(name) if name is not None and name in batch else None


def _batch_length(batch: dict) -> int:
    return len(next(iter(batch.values()))) if batch else 0


def _column_or(values: list | None, count: int, fill: Any) -> list:
    return [fill] * count if values is None else values


def _tools_value(value: Any, column: str | None) -> tuple[list | None, dict | None]:
    """Tools as the parser takes them: a list, or None. A JSON string holding a list is decoded;
    null, a missing column and the empty string mean no tools."""
    if value is _MISSING or value is None:
        return None, None
    if isinstance(value, str):
        if not value.strip():
            return None, None
        try:
            value = json.loads(value)
        except ValueError as e:
            return None, error_record("tools_json", f"the tools are not valid JSON: {e}", column)
        if value is None:
            return None, None
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        return None, error_record("type", f"the tools are a {type(value).__name__}, not a list", column)
    return value, None


def _anchor_test(template: dict) -> Callable[[str], bool]:
    """Whether a prompt contains the template's start anchor (the interpreter then parses only
    what follows it; without one it would parse the whole prompt as the assistant's text)."""
    literals = template.get("start_anchor")
    if literals is not None:
        literals = [literals] if isinstance(literals, str) else list(literals)
        return lambda prefix: any(literal in prefix for literal in literals)
    import regex

    pattern = regex.compile(template["start_anchor_pattern"], regex.DOTALL)
    return lambda prefix: pattern.search(prefix) is not None


def _dumps(message: dict) -> str:
    return json.dumps(message, ensure_ascii=False)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:2000] + (" ..." if len(text) > 2000 else "") if text else type(error).__name__


def _template_data(template: Any) -> dict:
    if isinstance(template, (str, os.PathLike)):
        from rtcompile import api

        return api.read_template(template)
    if not isinstance(template, dict):
        raise TypeError(f"a response template is a dict, a path or a bundled name, not {type(template).__name__}")
    return template


def _existing_column_message(columns: Columns) -> str:
    return (
        f"the input already has a {columns.message!r} or {columns.error!r} column; "
        "name the added columns otherwise (--message-column, --error-column)"
    )


# ---- JSONL: lines in, lines out ------------------------------------------------------------------


@dataclass
class LineBatch:
    first_row: int
    first_line: int  # 1-based line number of the batch's first line
    lines: list  # (line number, bytes) of the non-blank lines


def jsonl_batches(path: Path) -> Iterator[LineBatch]:
    """Non-blank lines in batches of BATCH_ROWS rows or BATCH_TEXT_BYTES bytes."""
    rows = 0
    lines, size = [], 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            lines.append((number, line))
            size += len(line)
            if len(lines) >= BATCH_ROWS or size >= BATCH_TEXT_BYTES:
                yield LineBatch(rows, lines[0][0], lines)
                rows += len(lines)
                lines, size = [], 0
    if lines:
        yield LineBatch(rows, lines[0][0], lines)


def jsonl_rows(parser: RowParser, batch: LineBatch) -> tuple[list[dict | None], list[tuple]]:
    """Each line's object (None if the line is not one) and the (message, error) of its row."""
    columns = parser.columns
    objects, results = [], []
    for offset, (number, line) in enumerate(batch.lines):
        try:
            row = json.loads(line)
        except ValueError as e:
            row, error = None, error_record("invalid_line", f"line {number} is not valid JSON: {e}")
        else:
            if not isinstance(row, dict):
                row, error = None, error_record("invalid_line", f"line {number} is a JSON {type(row).__name__}, not an object")
        if row is None:
            result = (None, error)
        elif columns.message in row or columns.error in row:
            raise BatchError(f"line {number}: {_existing_column_message(columns)}")
        else:
            result = parser.parse_row(
                row.get(columns.text, _MISSING),
                "" if columns.prefix is None else row.get(columns.prefix, _MISSING),
                None if columns.tools is None else row.get(columns.tools),
            )
        if result[1] is not None and parser.errors == "strict":
            raise RowError(batch.first_row + offset, result[1], line=number)
        objects.append(row)
        results.append(result)
    return objects, results


def jsonl_output_lines(parser: RowParser, batch: LineBatch) -> tuple[bytes, int]:
    """The batch's output lines (each input object with the two columns appended; a line that
    was not an object is kept whole in its error record) and how many rows carry an error."""
    columns = parser.columns
    objects, results = jsonl_rows(parser, batch)
    out = []
    failed = 0
    tail_keys = (json.dumps(columns.message), json.dumps(columns.error))
    for (number, line), row, (message, error) in zip(batch.lines, objects, results):
        failed += error is not None
        if row is None:
            error = dict(error, line=line.decode("utf-8", "replace").rstrip("\r\n"))
            text = json.dumps({columns.message: None, columns.error: error}, ensure_ascii=False)
        else:
            head = line.rstrip().decode("utf-8")[:-1].rstrip()  # the object without its closing brace
            separator = "" if not row else ", "
            text = f"{head}{separator}{tail_keys[0]}: {json.dumps(message, ensure_ascii=False)}, {tail_keys[1]}: {json.dumps(error, ensure_ascii=False)}}}"
        try:
            out.append(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate (from a \ud800 escape): keep it escaped
            out.append(_escaped_line(row, columns, message, error).encode("ascii"))
    return b"".join(part + b"\n" for part in out), failed


def _escaped_line(row, columns: Columns, message, error) -> str:
    base = {} if row is None else row
    return json.dumps({**base, columns.message: message, columns.error: error}, ensure_ascii=True)


# ---- Arrow: record batches in, record batches out ------------------------------------------------


def _pyarrow():
    try:
        import pyarrow
    except ImportError:
        raise BatchError("Parquet, datasets folders and tables need pyarrow: pip install 'rtcompile[batch]'") from None
    return pyarrow


def error_type():
    pa = _pyarrow()
    return pa.struct([(name, pa.string()) for name in ERROR_FIELDS])


def arrow_inputs(batch, columns: Columns) -> tuple[list, list | None, list | None]:
    """The text, prefix and tools columns of a record batch as Python values (None: absent)."""
    names = batch.schema.names

    def column(name):
        return batch.column(names.index(name)).to_pylist() if name is not None and name in names else None

    texts = column(columns.text)
    if texts is None:
        texts = [_MISSING] * batch.num_rows
    return texts, column(columns.prefix), column(columns.tools)


def arrow_results(parser: RowParser, inputs: tuple, first_row: int) -> tuple[list, list]:
    return parser.parse_columns(*inputs, first_row=first_row)


def with_results(batch, columns: Columns, messages: list, errors: list):
    """The record batch with the message and error columns appended."""
    pa = _pyarrow()
    arrays = [*batch.columns, pa.array(messages, pa.string()), pa.array(errors, error_type())]
    schema = batch.schema.append(pa.field(columns.message, pa.string())).append(pa.field(columns.error, error_type()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.with_metadata(_output_metadata(batch.schema, columns)))


def check_output_columns(schema, columns: Columns) -> None:
    if columns.message in schema.names or columns.error in schema.names:
        raise BatchError(_existing_column_message(columns))


def _output_metadata(schema, columns: Columns) -> dict | None:
    """The schema's metadata, with the datasets features (if any) extended by the two columns."""
    metadata = dict(schema.metadata or {})
    raw = metadata.get(b"huggingface")
    if raw is not None:
        try:
            info = json.loads(raw)
            features = info["info"]["features"]
            features[columns.message] = {"dtype": "string", "_type": "Value"}
            features[columns.error] = {name: {"dtype": "string", "_type": "Value"} for name in ERROR_FIELDS}
            metadata[b"huggingface"] = json.dumps(info).encode()
        except (ValueError, KeyError, TypeError):
            del metadata[b"huggingface"]  # features we cannot extend: datasets infers them instead
    return metadata or None


def parse_table(table, template: Any, *, columns: Columns = Columns(), errors: str = "default", jobs: int = 1, timeout: float | None = None):
    """A pyarrow Table with the message and error columns appended (rows in the same order)."""
    pa = _pyarrow()
    check_output_columns(table.schema, columns)
    parser = RowParser(template, columns, errors, timeout)
    parser.module  # an invalid template fails here, once
    batches = [b for b in _split_batches(table.to_batches(max_chunksize=BATCH_ROWS), columns)]
    offsets = _offsets(b.num_rows for b in batches)
    tasks = ((arrow_inputs(b, columns), first) for b, first in zip(batches, offsets))
    out = [with_results(b, columns, *result) for b, result in zip(batches, _ordered(parser, _arrow_task, tasks, jobs))]
    if not out:
        return pa.Table.from_batches([], schema=with_results(_empty_batch(table.schema), columns, [], []).schema)
    return pa.Table.from_batches(out)


def _empty_batch(schema):
    pa = _pyarrow()
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _offsets(counts) -> list[int]:
    out, total = [], 0
    for count in counts:
        out.append(total)
        total += count
    return out


def _split_batches(batches, columns: Columns):
    """Record batches cut so that none holds more than about BATCH_TEXT_BYTES of generations."""
    for batch in batches:
        names = batch.schema.names
        size = batch.column(names.index(columns.text)).nbytes if columns.text in names else 0
        pieces = max(1, -(-size // BATCH_TEXT_BYTES))
        step = max(1, -(-batch.num_rows // pieces))
        for start in range(0, batch.num_rows, step):
            yield batch.slice(start, step)


def parse_dataset(dataset, template: Any, *, columns: Columns = Columns(), errors: str = "default", num_proc: int | None = None, timeout: float | None = None, **map_kwargs):
    """A datasets.Dataset with the message and error columns added, through `Dataset.map`
    (batched, `num_proc` worker processes, each loading the parser from the template)."""
    parser = RowParser(template, columns, errors, timeout)
    parser.module
    check_output_columns_names(dataset.column_names, columns)
    return dataset.map(
        parser, batched=True, num_proc=num_proc, features=parser.output_features(dataset.features), **map_kwargs
    )


def check_output_columns_names(names, columns: Columns) -> None:
    if columns.message in names or columns.error in names:
        raise BatchError(_existing_column_message(columns))


# ---- workers -----------------------------------------------------------------------------------

_WORKER: RowParser | None = None


def _init_worker(parser: RowParser) -> None:
    global _WORKER
    _WORKER = parser
    parser.module  # load (from the cache the parent filled) before the first batch


def _arrow_task(parser: RowParser, task):
    inputs, first_row = task
    return arrow_results(parser, inputs, first_row)


def _jsonl_task(parser: RowParser, batch: LineBatch):
    return jsonl_output_lines(parser, batch)


def _in_worker(function, task):
    return function(_WORKER, task)


def _ordered(parser: RowParser, function, tasks, jobs: int) -> Iterator:
    """function(parser, task) for each task, in order; on `jobs` worker processes when jobs > 1,
    with at most two tasks per worker in flight (so memory does not grow with the input)."""
    if jobs <= 1:
        for task in tasks:
            yield function(parser, task)
        return
    import multiprocessing

    # spawn: workers start clean and load the parser from its template, on every platform alike.
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(jobs, initializer=_init_worker, initargs=(parser,))
    try:
        pending = collections.deque()
        for task in tasks:
            pending.append(pool.apply_async(_in_worker, (function, task)))
            if len(pending) >= 2 * jobs:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


# ---- files -------------------------------------------------------------------------------------


def detect_format(path: Path, explicit: str | None = None, *, must_exist: bool) -> str:
    if explicit is not None:
        if explicit not in FORMATS:
            raise BatchError(f"unknown format {explicit!r} (one of {', '.join(FORMATS)})")
        return explicit
    name = path.name.lower()
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if path.is_dir() and (path / "state.json").exists():
        return "datasets"
    if must_exist and not path.exists():
        raise BatchError(f"{path}: no such file or directory")
    if path.is_dir() and (path / "dataset_dict.json").exists():
        raise BatchError(f"{path}: a DatasetDict folder; give one split's folder (e.g. {path / 'train'})")
    if not must_exist and "." not in path.name:
        return "datasets"
    raise BatchError(f"{path}: cannot tell the format from the name; use --{'input' if must_exist else 'output'}-format")


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
    """The `parse` command: `input_path` parsed into `output_path` (see the module docstring).
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
        with _atomic_output(output_path, directory=target_format == "datasets") as temporary:
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
            raise BatchError(f"{input_path}: {_one_line(e)}") from None
        raise
    finally:
        if bar is not None:
            bar.close()
    return summary


def _jsonl_job(parser: RowParser, input_path: Path, temporary: Path, jobs: int, summary: Summary, bar) -> None:
    with _open_new(temporary) as out:
        for batch, (data, failed) in _zip_tasks(jsonl_batches(input_path), parser, _jsonl_task, jobs):
            out.write(data)
            _count(summary, bar, len(batch.lines), failed)


def _arrow_job(parser, input_path, source_format, temporary, target_format, jobs, summary, bar) -> None:
    columns = parser.columns
    schema, batches = _arrow_reader(input_path, source_format)
    check_output_columns(schema, columns)
    batches = _split_batches(batches, columns)
    writer = None
    first_row = 0

    def tasks():
        nonlocal first_row
        for batch in batches:
            yield batch, (arrow_inputs(batch, columns), first_row)
            first_row += batch.num_rows

    try:
        writer = _arrow_writer(temporary, target_format, with_results(_empty_batch(schema), columns, [], []).schema, columns)
        for batch, (messages, errors) in _zip_pairs(tasks(), parser, _arrow_task, jobs):
            writer.write(with_results(batch, columns, messages, errors))
            _count(summary, bar, batch.num_rows, sum(e is not None for e in errors))
    finally:
        if writer is not None:
            writer.close()
    if target_format == "datasets":
        _write_datasets_metadata(input_path if source_format == "datasets" else None, temporary, writer.schema, columns)


def _zip_tasks(tasks, parser, function, jobs):
    """(task, result) pairs in order, computing on workers while the tasks are still read."""
    pending = collections.deque()

    def remembered():
        for task in tasks:
            pending.append(task)
            yield task

    for result in _ordered(parser, function, remembered(), jobs):
        yield pending.popleft(), result


def _zip_pairs(pairs, parser, function, jobs):
    """Like _zip_tasks for (kept, task) pairs: the parent keeps the first, workers get the second."""
    kept = collections.deque()

    def tasks():
        for keep, task in pairs:
            kept.append(keep)
            yield task

    for result in _ordered(parser, function, tasks(), jobs):
        yield kept.popleft(), result


def _count(summary: Summary, bar, rows: int, failed: int) -> None:
    summary.rows += rows
    summary.errors += failed
    if bar is not None:
        bar.update(rows)


def _arrow_reader(path: Path, source_format: str):
    pa = _pyarrow()
    if source_format == "parquet":
        import pyarrow.parquet as pq

        reader = pq.ParquetFile(path)
        return reader.schema_arrow, reader.iter_batches(batch_size=BATCH_ROWS)
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
    pa = _pyarrow()
    with pa.memory_map(str(file)) as source:
        return pa.ipc.open_stream(source).schema


class _IpcWriter:
    def __init__(self, path: Path, schema):
        pa = _pyarrow()
        self.schema = schema
        self._sink = _open_new(path)
        self._writer = pa.ipc.new_stream(self._sink, schema)

    def write(self, batch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


class _ParquetWriter:
    """Batches gathered into row groups of up to ROW_GROUP_ROWS rows or ROW_GROUP_BYTES bytes
    (one row group per small batch would make the file slow to read)."""

    ROW_GROUP_ROWS = 65_536
    ROW_GROUP_BYTES = 64 << 20

    def __init__(self, path: Path, schema):
        import pyarrow.parquet as pq

        self.schema = schema
        self._sink = _open_new(path)
        self._writer = pq.ParquetWriter(self._sink, schema)
        self._pending, self._rows, self._bytes = [], 0, 0

    def write(self, batch) -> None:
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self.ROW_GROUP_ROWS or self._bytes >= self.ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pa = _pyarrow()
            self._writer.write_table(pa.Table.from_batches(self._pending, schema=self.schema), row_group_size=self._rows)
        self._pending, self._rows, self._bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._sink.close()


DATASETS_DATA_FILE = "data-00000-of-00001.arrow"


class _JsonlWriter:
    """Arrow rows as JSON objects: the input columns (bytes as base64 text, dates and times in
    ISO format), then the message as an object and the error record."""

    def __init__(self, path: Path, schema, columns: Columns):
        self.schema, self.columns = schema, columns
        self._sink = _open_new(path)
        self._tail = (json.dumps(columns.message), json.dumps(columns.error))

    def write(self, batch) -> None:
        names = batch.schema.names
        inputs = batch.drop_columns([self.columns.message, self.columns.error]).to_pylist()
        messages = batch.column(names.index(self.columns.message)).to_pylist()
        errors = batch.column(names.index(self.columns.error)).to_pylist()
        lines = []
        for row, message, error in zip(inputs, messages, errors):
            head = json.dumps(row, ensure_ascii=False, default=_json_default)[:-1]
            separator = ", " if row else ""
            message = "null" if message is None else message
            lines.append(f"{head}{separator}{self._tail[0]}: {message}, {self._tail[1]}: {json.dumps(error, ensure_ascii=False)}}}\n")
        self._sink.write("".join(lines).encode("utf-8"))

    def close(self) -> None:
        self._sink.close()


def _json_default(value):
    import base64

    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    if hasattr(value, "as_tuple"):  # decimal.Decimal
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _arrow_writer(temporary: Path, target_format: str, schema, columns: Columns):
    if target_format == "parquet":
        return _ParquetWriter(temporary, schema)
    if target_format == "jsonl":
        return _JsonlWriter(temporary, schema, columns)
    return _IpcWriter(temporary / DATASETS_DATA_FILE, schema)


def _write_datasets_metadata(source: Path | None, folder: Path, schema, columns: Columns) -> None:
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
        with _open_new(folder / name, text=True) as f:
            json.dump(data, f, indent=2)


def _open_new(path: Path, text: bool = False):
    """A new file with the mode any new file of the user gets (0666 less the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    return os.fdopen(fd, "w", encoding="utf-8") if text else os.fdopen(fd, "wb")


class _atomic_output:
    """A temporary file (or folder) beside `path`, renamed to it on success and removed on any
    failure, so an interrupted or failed job never leaves a half-written output."""

    def __init__(self, path: Path, directory: bool, replaceable: Callable[[Path], bool] | None = None):
        self.path, self.directory = path, directory
        self.replaceable = replaceable or (lambda folder: (folder / "state.json").exists())

    def __enter__(self) -> Path:
        import secrets

        parent = self.path.parent
        if not parent.is_dir():
            raise BatchError(f"{parent}: no such directory")
        self.temporary = parent / f".{self.path.name}.{secrets.token_hex(6)}.tmp"
        if self.directory:
            if self.path.exists() and not (self.path.is_dir() and self.replaceable(self.path)):
                raise BatchError(f"{self.path}: exists and is not a folder this job writes; not replacing it")
            self.temporary.mkdir()
            from rtcompile.cache import user_file_mode

            os.chmod(self.temporary, user_file_mode(directory=True))
        return self.temporary

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                self._commit()
                return
            except BaseException:
                self._remove()
                raise
        self._remove()

    def _commit(self) -> None:
        if self.directory and self.path.exists():
            import shutil

            old = self.path.parent / f".{self.path.name}.old.tmp"
            os.replace(self.path, old)
            os.replace(self.temporary, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.temporary, self.path)

    def _remove(self) -> None:
        import shutil

        if self.temporary.is_dir():
            shutil.rmtree(self.temporary, ignore_errors=True)
        else:
            try:
                os.unlink(self.temporary)
            except OSError:
                pass


def _count_rows(path: Path, source_format: str) -> int | None:
    """The row count for the progress bar's time left, where it is cheap to know."""
    try:
        if source_format == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        if source_format == "jsonl":
            count = 0
            with open(path, "rb") as f:
                for line in f:
                    count += bool(line.strip())
            return count
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


# ---- Ray Data ----------------------------------------------------------------------------------


def ray_parse_batch(batch, template: dict, columns: Columns, errors: str, timeout: float | None):
    """The map_batches function: a Ray worker gets the template (plain data) and loads the parser
    itself, from its own cache, once per worker process (api.load memoizes it); no code object
    is pickled. (Tasks rather than actors: actors would hold every CPU of a small cluster and
    leave none to the read and write tasks.)"""
    pa = _pyarrow()
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
    Connects to the cluster `ray.init()` finds (RAY_ADDRESS), else starts a local one."""
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
    template = _template_data(template)
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
    check_output_columns_names(dataset.schema().names, columns)
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
        with _atomic_output(output_path, directory=True, replaceable=_only_data_files) as temporary:
            _write_in_order(parsed, Path(temporary), target_format)
    written = ray.data.read_parquet if target_format == "parquet" else ray.data.read_json
    summary = Summary()
    for batch in written(str(output_path)).select_columns([columns.error]).iter_batches(batch_format="pyarrow"):
        summary.rows += batch.num_rows
        summary.errors += batch.num_rows - batch.column(0).null_count
    return summary


def _write_in_order(parsed, folder: Path, target_format: str) -> None:
    """The parsed rows into `folder` in the input's order: the driver streams the batches Ray
    yields in order (preserve_order) into one file. Ray's own writers name files by the order
    their tasks start, which under load is not always the rows' order."""
    import pyarrow.parquet as pq

    path = folder / f"part-00000.{'parquet' if target_format == 'parquet' else 'json'}"
    writer = None
    with open(path, "wb") as out:
        for batch in parsed.iter_batches(batch_format="pyarrow", batch_size=None):
            if target_format == "parquet":
                if writer is None:
                    writer = pq.ParquetWriter(out, batch.schema)
                writer.write_table(batch)  # (a pyarrow Table)
            else:
                for row in batch.to_pylist():
                    out.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        if writer is not None:
            writer.close()


def _only_data_files(folder: Path) -> bool:
    """Whether a folder holds only what an earlier Ray job wrote (so it may be replaced)."""
    return all(p.is_file() and p.suffix in (".parquet", ".json", ".jsonl") for p in folder.iterdir())


def _is_uri(path) -> bool:
    return "://" in str(path)
