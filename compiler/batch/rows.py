"""One row: where its inputs are (`Columns`), how it is parsed (`RowParser`, the same in every engine
and format) and the error record a bad row gets in place of its message.

A row's inputs are its generation (`Columns.text`), its prompt (`Columns.prefix`) and its tools
(`Columns.tools`: a list, or a JSON string of one). `RowParser.parse_row` gives `(message, error)`:
the message as `parse_response` returns it (or None), and None or an error record
`{"kind", "column", "exception", "detail"}` (see the package docstring for the kinds).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

ERRORS_MODES = ("default", "keep", "strict")
DEFAULT_TEXT_COLUMN = "completion"
DEFAULT_PREFIX_COLUMN = "prompt"
DEFAULT_TOOLS_COLUMN = "tools"
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


def error_kinds(errors) -> dict:
    """Error records (None where a row has none) counted by kind: `{"parse": 3, "missing": 1}`."""
    kinds: dict = {}
    for error in errors:
        if error is not None:
            kinds[error["kind"]] = kinds.get(error["kind"], 0) + 1
    return kinds


class _Missing:
    """A row without the column at all (a JSONL object, a table without it): one object in every
    process, since it pickles by name."""

    def __reduce__(self) -> str:
        return "MISSING"

    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


class RowParser:
    """The per-row job, the same in every engine: inputs checked, parsed, message and error.

    Pickles as its template and options only (the compiled module is loaded again, from the
    cache, in whichever process uses it), so it can be handed to worker processes, to
    `Dataset.map(num_proc=N)` and to Ray actors.
    """

    def __init__(self, template: Any, columns: Columns = Columns(), errors: str = "default", timeout: float | None = None):
        if errors not in ERRORS_MODES:
            raise ValueError(f"errors must be one of {', '.join(ERRORS_MODES)}, not {errors!r}")
        self.template = template_data(template)
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
        """(message, error) for one row's values; `MISSING` stands for an absent column."""
        self.module  # (loaded, with the anchor test)
        columns = self.columns
        if text is MISSING or text is None:
            return None, error_record("missing", "no generation (the column is missing or null)", columns.text)
        if not isinstance(text, str):
            return None, error_record("type", f"the generation is a {type(text).__name__}, not a string", columns.text)
        if prefix is MISSING or prefix is None:
            return None, error_record("missing", "no prompt (the column is missing or null)", columns.prefix)
        if not isinstance(prefix, str):
            return None, error_record("type", f"the prompt is a {type(prefix).__name__}, not a string", columns.prefix)
        if isinstance(tools, str) and tools == self._tools_text:  # most datasets repeat one tools string
            tools = self._tools_value
        else:
            text_form = tools if isinstance(tools, str) else None
            tools, problem = _tools_value(tools, columns.tools)
            if problem is not None:
                return None, problem
            if text_form is not None:
                self._tools_text, self._tools_value = text_form, tools
        message, error = self._parse(text, prefix, tools)
        if prefix and not self._anchor(prefix):
            error = _noting_missing_anchor(error, columns.prefix)
        return message, error

    def _parse(self, text: str, prefix: str, tools: list | None) -> tuple[dict | None, dict | None]:
        """(message, error) of the parser in this errors mode."""
        module = self.module
        if self.errors == "keep":
            try:
                message = module.parse_response(text, prefix=prefix, tools=tools, errors="keep", timeout=self.timeout)
            except Exception as e:  # (keep mode records region failures; this is anything else)
                return None, error_record("parse", one_line(e), exception=type(e).__name__)
            failed = message.get(KEEP_ERRORS_KEY)
            if failed:
                names = ", ".join(dict.fromkeys(str(record.get("field")) for record in failed))
                detail = f"{len(failed)} region(s) failed to parse ({names}): see message.{KEEP_ERRORS_KEY}"
                return message, error_record("region", detail)
            return message, None
        try:
            return module.parse_response(text, prefix=prefix, tools=tools, timeout=self.timeout), None
        except Exception as e:
            error = error_record("parse", one_line(e), exception=type(e).__name__)
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
        prefixes = _column_or(prefixes, count, "" if self.columns.prefix is None else MISSING)
        tools = _column_or(tools, count, None)
        strict = self.errors == "strict"
        for index in range(count):
            message, error = self.parse_row(texts[index], prefixes[index], tools[index])
            if error is not None and strict:
                raise RowError(first_row + index, error)
            messages.append(None if message is None else dumps_message(message))
            errors.append(error)
        return messages, errors

    # -- datasets.Dataset.map(parser, batched=True, num_proc=N) --

    def __call__(self, batch: dict) -> dict:
        columns = self.columns
        check_output_columns(batch, columns)
        texts = batch[columns.text] if columns.text in batch else [MISSING] * _batch_length(batch)
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
    if value is MISSING or value is None:
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


_NO_ANCHOR_DETAIL = (
    "the prompt does not contain the template's start anchor: the whole prompt was parsed as the "
    "assistant's text, followed by the generation, as the interpreter does"
)


def _noting_missing_anchor(error: dict | None, column: str | None) -> dict:
    """The row's error record, noting that its prompt lacks the start anchor: a record of kind
    `prefix_without_anchor` when the parse itself went well, else the parse's own record with the
    note added to its detail."""
    if error is None:
        return error_record("prefix_without_anchor", _NO_ANCHOR_DETAIL, column)
    return dict(error, detail=f"{error['detail']} ({_NO_ANCHOR_DETAIL})")


def dumps_message(message: dict) -> str:
    """A message as the JSON text the message column holds."""
    return json.dumps(message, ensure_ascii=False)


def one_line(error: BaseException) -> str:
    """An exception's message on one line, at most about 2,000 characters."""
    text = " ".join(str(error).split())
    return text[:2000] + (" ..." if len(text) > 2000 else "") if text else type(error).__name__


def template_data(template: Any) -> dict:
    """The response template as plain data, from a dict, a path or a bundled template's name."""
    if isinstance(template, (str, os.PathLike)):
        from rtcompile import api

        return api.read_template(template)
    if not isinstance(template, dict):
        raise TypeError(f"a response template is a dict, a path or a bundled name, not {type(template).__name__}")
    return template


def check_output_columns(names, columns: Columns, where: str | None = None) -> None:
    """Refuse an input that already has a column named like one of the two added ones (its values
    would be lost). `names`: the input's column names, or one row's keys; `where` (a JSONL line)
    starts the message."""
    if columns.message in names or columns.error in names:
        message = (
            f"the input already has a {columns.message!r} or {columns.error!r} column; "
            "name the added columns otherwise (--message-column, --error-column)"
        )
        raise BatchError(f"{where}: {message}" if where else message)


_TEXT_COLUMN_HINT = "name the column of the generations with --text-column"


def check_text_column(names, columns: Columns, source=None) -> None:
    """Refuse an input whose columns (a schema's names) do not include the text column: every row
    would be a `missing` error, which is a mistake in the options, not a dataset of bad rows."""
    if columns.text not in names:
        where = f"{source}: " if source is not None else ""
        raise BatchError(f"{where}no column {columns.text!r} (the input's columns: {_listed(names)}); {_TEXT_COLUMN_HINT}")


def no_row_has_the_text_column(columns: Columns, source, first_row_columns) -> BatchError:
    """The error for a JSONL input in which no row has the text column (see check_text_column)."""
    return BatchError(
        f"{source}: no row has a column {columns.text!r} (the first row's columns: {_listed(first_row_columns)}); "
        f"{_TEXT_COLUMN_HINT}"
    )


def _listed(names, most: int = 20) -> str:
    """Column names for an error message: the first `most` of them."""
    names = [str(name) for name in names]
    if not names:
        return "none"
    more = f", ... ({len(names)} in all)" if len(names) > most else ""
    return ", ".join(names[:most]) + more
