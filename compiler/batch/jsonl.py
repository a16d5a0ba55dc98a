"""JSON lines: the input read in batches of lines, each line parsed as one row, and JSON lines
written out.

A JSONL input line is written back as it was, byte for byte, with the two columns appended as its
last two fields; a line that is not a JSON object is kept whole in its error record (`line`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .files import open_new
from .rows import MISSING, BatchError, Columns, RowError, RowParser, error_record, existing_columns_message
from .workers import BATCH_ROWS, BATCH_TEXT_BYTES


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
            raise BatchError(f"line {number}: {existing_columns_message(columns)}")
        else:
            result = parser.parse_row(
                row.get(columns.text, MISSING),
                "" if columns.prefix is None else row.get(columns.prefix, MISSING),
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


def jsonl_task(parser: RowParser, batch: LineBatch):
    return jsonl_output_lines(parser, batch)


class JsonlWriter:
    """Arrow rows as JSON objects: the input columns (bytes as base64 text, dates and times in
    ISO format), then the message as an object and the error record."""

    def __init__(self, path: Path, schema, columns: Columns):
        self.schema, self.columns = schema, columns
        self._sink = open_new(path)
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


def count_rows(path: Path) -> int:
    """The number of non-blank lines (rows), for the progress bar's time left."""
    count = 0
    with open(path, "rb") as f:
        for line in f:
            count += bool(line.strip())
    return count
