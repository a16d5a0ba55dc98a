"""JSON lines: JSONL input read in batches of lines and each line parsed as one row, and the one
writer of JSON lines, for every job that writes them (`JsonlWriter`, `JsonLineFormat`).

A JSONL input line is written back as it was, byte for byte, with the two columns appended as its
last two fields; a line that is not a JSON object is kept whole in its error record (`line`). The
lines are formatted on the workers, which send back bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .files import open_new
from .rows import MISSING, Columns, RowError, RowParser, check_output_columns, dumps_message, error_kinds, error_record
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


def parse_lines(parser: RowParser, batch: LineBatch) -> tuple[list[dict | None], list[tuple]]:
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
        else:
            check_output_columns(row, columns, where=f"line {number}")
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


@dataclass
class EncodedLines:
    """What a worker sends back for one batch of lines."""

    data: bytes  # the output lines
    kinds: dict  # how many rows carry an error, by kind
    with_text: int  # how many rows (JSON objects) have the text column, null or not
    first_row_columns: list | None  # the first object's keys (None: no line was an object)


def encode_batch(parser: RowParser, batch: LineBatch) -> EncodedLines:
    """The worker task for one batch of lines: its output lines and what the job counts."""
    lines, errors, has_text, first_row_columns = encode_lines(parser, batch)
    return EncodedLines(b"".join(lines), error_kinds(errors), sum(has_text), first_row_columns)


def encode_lines(parser: RowParser, batch: LineBatch) -> tuple[list[bytes], list, list[bool], list | None]:
    """Each line's output line (see `JsonLineFormat`; a line that was not an object is kept whole
    in its error record), its error record, and whether it has the text column; and the first
    object's keys. The same in every engine."""
    line_format = JsonLineFormat(parser.columns)
    objects, results = parse_lines(parser, batch)
    out, errors, has_text = [], [], []
    first_row_columns = next((list(row) for row in objects if row is not None), None)
    for (number, line), row, (message, error) in zip(batch.lines, objects, results):
        has_text.append(row is not None and parser.columns.text in row)
        if row is None:
            error = dict(error, line=line.decode("utf-8", "replace").rstrip("\r\n"))
            head = "{"
        else:
            head = line.rstrip().decode("utf-8")[:-1].rstrip()  # the object as written, up to its closing brace
        out.append(line_format.line(head, None if message is None else dumps_message(message), error))
        errors.append(error)
    return out, errors, has_text, first_row_columns


class JsonLineFormat:
    """Every output line of every job that writes JSON lines: a JSON object's text up to its
    closing brace (a JSONL input line as written, or an Arrow row serialized), then the message
    and the error record as its last two fields:

        {"prompt": "...", "completion": "..."}
        {"prompt": "...", "completion": "...", "message": {"role": ...}, "error": null}

    The message is written as a JSON object, by every engine. A lone surrogate (from a `\\ud800`
    escape in the input) has no UTF-8 form: it is written as that escape again, and the rest of the
    line as it was.
    """

    def __init__(self, columns: Columns):
        self._message_key = json.dumps(columns.message)
        self._error_key = json.dumps(columns.error)

    def line(self, head: str, message_json: str | None, error: dict | None) -> bytes:
        """One line, newline included. `head`: the object's text without its closing brace and the
        whitespace before it (just "{" for an object with no fields); `message_json`: the message
        as JSON text, or None."""
        separator = "" if head.endswith("{") else ", "  # (no JSON value ends with "{")
        message = "null" if message_json is None else message_json
        error_json = json.dumps(error, ensure_ascii=False)
        text = f"{head}{separator}{self._message_key}: {message}, {self._error_key}: {error_json}}}\n"
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text).encode("utf-8")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonlWriter:
    """The JSON lines writer of every job: lines already formatted (`write_lines`: a JSONL input's,
    from the workers), or record batches with the two added columns (`write`, for Arrow input)."""

    def __init__(self, path: Path, columns: Columns):
        self.columns = columns
        self._format = JsonLineFormat(columns)
        self._sink = open_new(path)

    def write_lines(self, data: bytes) -> None:
        self._sink.write(data)

    def write(self, batch) -> None:
        self._sink.write(b"".join(arrow_lines(batch, self._format, self.columns)))

    def close(self) -> None:
        self._sink.close()


def arrow_lines(batch, line_format: JsonLineFormat, columns: Columns) -> list[bytes]:
    """The output lines of a record batch (or table) with the two added columns: each row
    serialized, with bytes as base64 text and dates and times in ISO format."""
    names = batch.schema.names
    inputs = batch.drop_columns([columns.message, columns.error]).to_pylist()
    messages = batch.column(names.index(columns.message)).to_pylist()
    errors = batch.column(names.index(columns.error)).to_pylist()
    lines = []
    for row, message, error in zip(inputs, messages, errors):
        head = json.dumps(row, ensure_ascii=False, default=_json_default)[:-1]
        lines.append(line_format.line(head, message, error))
    return lines


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
