"""Exceptions raised by generated parsers beyond the interpreter's own (ValueError, KeyError, ...)."""

from __future__ import annotations


class RegionParseError(ValueError):
    """A region's text could not be parsed by its content parser (bad JSON, a failed int(), ...).

    A ValueError, like the interpreter's, with the field's name and the offending text attached."""

    def __init__(self, field: str, text: str, cause: BaseException):
        super().__init__(f"Field {field!r}: {cause}")
        self.field = field
        self.text = text


class ParserFailedError(RuntimeError):
    """`feed`/`finalize` after the parser raised: its state is mid-commit, so it refuses to go on."""

    def __init__(self, cause: BaseException):
        super().__init__(
            f"this parser already raised {type(cause).__name__}: {cause}; it cannot continue "
            "(create a new parser, or use errors='keep' to recover from broken regions)"
        )
        self.cause = cause


class ParserLoopError(RuntimeError):
    """The template makes the parser commit zero-width delimiters forever at one position.

    The interpreter hangs on such templates (an open and a close that both match the empty string
    at one place); generated parsers raise this instead."""

    def __init__(self, field: str, position: int):
        super().__init__(
            f"field {field!r}: delimiters keep matching the empty string at one position without "
            "consuming input; the template's open and close patterns loop forever here"
        )
        self.field = field
        self.position = position


class MatchTimeoutError(TimeoutError):
    """A delimiter pattern took longer than the parser's `timeout` (catastrophic backtracking)."""

    def __init__(self, field: str | None, timeout: float | None):
        super().__init__(
            f"matching a delimiter pattern (parser state: field {field!r}) took longer than "
            f"timeout={timeout}s; the template's pattern is too slow for this output"
        )
        self.field = field
