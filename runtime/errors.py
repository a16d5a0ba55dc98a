"""Exceptions raised by generated parsers beyond the interpreter's own (ValueError, KeyError, ...)."""

from __future__ import annotations


class RegionError(Exception):
    """A region's text failed to become a value: its content parser, its transform, or `join`.

    Raised as a subclass of the interpreter's own class for the same failure (RegionParseError
    for ValueError, RegionKeyError for KeyError), with the field's name and the region's text."""

    field: str
    text: str


def _describe(field: str, text: str, cause: BaseException) -> str:
    detail = str(cause.args[0] if isinstance(cause, KeyError) and cause.args else cause)
    # (The interpreter's own `join` message already starts with the field's name.)
    named = detail.startswith((f"Field {field!r}: ", f"Field '{field}': "))
    message = detail if named else f"Field {field!r}: {detail}"
    if repr(text) not in message:
        message += f"\nRegion text: {text!r}"
    return message


class RegionParseError(RegionError, ValueError):
    """A ValueError, like the interpreter's: bad JSON, a failed int(), a dotted placeholder that
    cannot be followed, a `join` of a non-string."""

    def __init__(self, field: str, text: str, cause: BaseException):
        super().__init__(_describe(field, text, cause))
        self.field = field
        self.text = text


class RegionKeyError(RegionError, KeyError):
    """A KeyError, like the interpreter's: a transform placeholder that is not defined, or a
    value_parser naming an unknown parser."""

    def __init__(self, field: str, text: str, cause: BaseException):
        super().__init__(_describe(field, text, cause))
        self.field = field
        self.text = text

    def __str__(self) -> str:  # KeyError would show the message quoted, like a dict key
        return str(self.args[0])


def region_error(field: str, text: str, cause: BaseException) -> BaseException:
    """The interpreter's exception `cause`, with the field and region text attached where its class
    allows (other classes, e.g. TypeError from malformed content_args, are passed on as they are)."""
    if isinstance(cause, RegionError):
        return cause
    if isinstance(cause, ValueError):
        return RegionParseError(field, text, cause)
    if isinstance(cause, KeyError):
        return RegionKeyError(field, text, cause)
    return cause


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
