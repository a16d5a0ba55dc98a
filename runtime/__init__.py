"""The runtime that generated parser modules import: `from rtcompile.runtime import ...`.

`__all__` is the interface between the code generator and generated code (its ABI). A generated
module checks `RUNTIME_ABI` at import and refuses to run against a runtime it was not built for.
What the serving integrations may use of a parser object (its public methods and properties, its
token decoder's, its tokenizer profile's) is listed in TOKEN_IDS.md, "The servers' interface";
that is not part of the ABI (the integrations ship with the runtime).
This package imports nothing from the compiler side (`rtcompile` proper), nor jinja2, black or
transformers, so importing a generated parser stays cheap.
"""

from __future__ import annotations

import regex

from .content_parsers import make_parser
from .errors import MatchTimeoutError, ParserFailedError, ParserLoopError, RegionError, RegionKeyError, RegionParseError
from .scanning import (
    MEMO_BUFFER,
    SHORT_BUFFER,
    LazyRegex,
    LiteralSearch,
    PatternWindow,
    StartLiterals,
    may_start_at_front,
    moved_by_more,
    trailing_run,
    truncate_after_last,
)
from .machine import ERRORS_KEY, Machine, parse_whole
from .token_ids import MARKER, TokenIdError
from .options import ParseOptions
from .token_parser import parse_message
from .coerce import coerce_tool_calls
from .transforms import each_scope, resolve
from .whole import PlainRegex, ReadAgain, WholeMessage, finished_message, join_error, start_whole

# Bump when anything in __all__ changes meaning or signature; generated modules pin it.
RUNTIME_ABI = 15


class RuntimeMismatchError(ImportError):
    """A generated module was built for another version of the runtime: regenerate it."""


def check_abi(expected: int) -> None:
    if expected != RUNTIME_ABI:
        raise RuntimeMismatchError(
            f"this parser was generated for rtcompile runtime ABI {expected}, but the installed "
            f"runtime has ABI {RUNTIME_ABI}; regenerate it with the installed rtcompile"
        )


__all__ = [
    "RUNTIME_ABI",
    "SHORT_BUFFER",
    "MEMO_BUFFER",
    "ERRORS_KEY",
    "LazyRegex",
    "LiteralSearch",
    "MARKER",
    "Machine",
    "MatchTimeoutError",
    "ParserFailedError",
    "ParserLoopError",
    "ParseOptions",
    "PatternWindow",
    "PlainRegex",
    "ReadAgain",
    "RegionError",
    "RegionKeyError",
    "RegionParseError",
    "StartLiterals",
    "TokenIdError",
    "WholeMessage",
    "check_abi",
    "coerce_tool_calls",
    "each_scope",
    "finished_message",
    "join_error",
    "make_parser",
    "may_start_at_front",
    "moved_by_more",
    "parse_message",
    "parse_whole",
    "regex",
    "resolve",
    "start_whole",
    "trailing_run",
    "truncate_after_last",
]
