"""The one-shot reader's runtime: what a generated module's `parse_response` uses on a finished text.

A finished message needs none of the streaming machine's work (events, holding back text that may
start a delimiter, partial matches). The code generator writes, per template, straight-line code
that finds each next delimiter with one search and calls the fields' content parsers directly
(`compiler/codegen/one_shot.py` says when a template may be read that way, and why not). What is
the same for every template lives here: where the reading starts (the prompt read in the same
pass, or by the machine first), how a region's value joins the message under `errors="strict"`
and `errors="keep"`, and the finished message. Every rule is the machine's (`machine.py`), so the
message and the exception are the machine's and so the interpreter's.
"""

from __future__ import annotations

from typing import Any

from .coerce import tool_parameters
from .errors import region_error
from .options import ParseOptions
from .machine import ERRORS_KEY, PREFIX_REQUIRED, failed_region_record, finished_message, kept_both

__all__ = ["PlainRegex", "ReadAgain", "WholeMessage", "finished_message", "join_error", "start_whole"]


class ReadAgain(Exception):
    """Raised by a one-shot reader at a delimiter that matched the empty string where the machine's
    one pass would stop there or go round in circles (Machine._parse_to_end): parse_response then
    reads the message with the machine (parse_whole), which settles it as the interpreter does."""


class WholeMessage:
    """The message a one-shot reader is building, and the options that shape it.

    `output` is the message so far (the template's defaults, then each region's value),
    `tool_params` the tools' parameter schemas (arguments are cast when it is not empty), `keep`
    whether errors="keep" is on, `closed` the fields closed so far (errors="keep" only)."""

    __slots__ = ("output", "tool_params", "keep", "closed", "stalled")

    def __init__(self, output: dict, tool_params: dict, keep: bool, closed: set | None):
        self.output = output
        self.tool_params = tool_params
        self.keep = keep
        self.closed = closed
        self.stalled = -1  # where the last delimiter that matched the empty string was committed

    def zero_width(self, position: int, empty_close: bool) -> None:
        """A delimiter matched the empty string at `position`, about to be committed. The machine
        stops at the close of a region that holds nothing (and reads on from there), and counts
        such commits made in a row at one place; the one-shot reader leaves both to the machine."""
        if empty_close or self.stalled == position:
            raise ReadAgain
        self.stalled = position

    def region_failed(self, name: str, body: str, captures: dict, error: Exception) -> None:
        """A region's text did not become a value: raise the interpreter's exception (with the
        field and the text), or under errors="keep" record it and go on (Machine._close_current)."""
        if isinstance(error, TimeoutError):
            raise error  # (a time bound is never a kept region; the one-shot reader sets none)
        if self.keep:
            record = failed_region_record(name, body, captures, error)
            self.output.setdefault(ERRORS_KEY, []).append(record)
            return
        wrapped = region_error(name, body, error)
        if wrapped is error:
            raise error
        raise wrapped from error

    def keep_both(self, name: str, value: Any) -> None:
        """errors="keep": a field without `repeats` closed again (see Machine._keep_both)."""
        self.output[name] = kept_both(self.output, name, self.output.get(name), value)


def join_error(name: str, value: Any) -> ValueError:
    """The interpreter's error for a `join` field whose region parsed to something else than text."""
    return ValueError(f"Field '{name}': 'join' requires each match to parse to a string, got {type(value).__name__}.")


def start_whole(machine_class: type, text: str, prefix: str | None, tools: Any, options: ParseOptions, prefix_in_one_pass: bool) -> tuple:
    """Where a one-shot read of `text` starts: (message, buffer, position, current field, head,
    captures). The field is the machine's state index (None: outside explicit regions), `head`
    the text its region already holds, `captures` what its open delimiter captured.

    The options are checked in the machine's order. The prompt's part after the last start
    anchor is read in the same pass (the buffer starts with it) where the template allows
    (Machine.PREFIX_IN_ONE_PASS); otherwise the machine reads it as its constructor does, and
    the one-shot reader goes on from the machine's state, as parse_whole does."""
    if prefix is None:
        raise ValueError(PREFIX_REQUIRED)
    keep = options.errors == "keep"
    truncated = machine_class._truncate_prefix(prefix) if prefix else ""
    if prefix_in_one_pass or not truncated:
        run = WholeMessage(machine_class._new_output(), tool_parameters(tools) if tools else {}, keep, set() if keep else None)
        return run, truncated + text, 0, machine_class.IMPLICIT, "", {}
    machine = machine_class(prefix, tools=tools, options=options)  # (as parse_whole builds it)
    run = WholeMessage(machine._output, machine._tool_params, keep, machine._closed)
    return run, machine._buf + text, machine._pos, machine._current, "".join(machine._parts), machine._captures


class PlainRegex:
    """A pattern for complete matches without a time bound, compiled when first used: its stdlib
    twin where one exists (twin.py) and `twin` is true, else the `regex` pattern (DOTALL). `search`
    and `match` are the compiled pattern's own methods once it is compiled, so a call costs no
    Python frame. (`re` is the faster engine, but not for an alternation of groups: it then tries
    the pattern at every place, where `regex` still skips to the places a match can start.)"""

    __slots__ = ("source", "twin", "search", "match")

    def __init__(self, source: str, twin: bool = True):
        self.source = source
        self.twin = twin
        self.search = self._compile_then_search
        self.match = self._compile_then_match

    def _compile(self) -> None:
        from .twin import stdlib_twin

        compiled = stdlib_twin(self.source) if self.twin else None
        if compiled is None:
            import regex

            compiled = regex.compile(self.source, regex.DOTALL)
        self.search = compiled.search
        self.match = compiled.match

    def _compile_then_search(self, *args: Any) -> Any:
        self._compile()
        return self.search(*args)

    def _compile_then_match(self, *args: Any) -> Any:
        self._compile()
        return self.match(*args)

    def __repr__(self) -> str:
        return f"PlainRegex({self.source!r})"
