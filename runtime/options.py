"""The options of a parse: one frozen object from the public API down to the generated modules
and the machine, instead of one keyword per option threaded through every layer.

The public functions (`rtcompile.parse_response`, `rtcompile.ResponseParser`, a generated
module's `parse_response` and `ResponseParser`) take `options=ParseOptions(...)`, and the same
options as keywords (`errors="keep"`), which are laid over `options`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class ParseOptions:
    """`errors="keep"`: a region whose text fails to parse does not raise; its raw text and the
    error are recorded under ERRORS_KEY and the stream goes on. `timeout`: seconds allowed to each
    delimiter regex search before MatchTimeoutError. `report_closers`: each region_close event
    also carries `closer`, the text its close delimiter matched. `eager`: a delimiter match that
    no more text could change is committed in the feed that completes it (the interpreter waits
    for the next). By token ids only: `refuse_unknown_ids`, an id that names no token raises
    TokenIdError (the interpreter decodes it to nothing); `recover_decode_errors`, decoding goes on
    where tokenizers' DecodeStream fails on byte-fallback ids (see runtime/TOKEN_IDS.md)."""

    errors: str = "strict"
    timeout: float | None = None
    report_closers: bool = False
    eager: bool = False
    refuse_unknown_ids: bool = False
    recover_decode_errors: bool = False

    def __post_init__(self) -> None:
        if self.errors not in ("strict", "keep"):
            raise ValueError(f"errors must be 'strict' or 'keep', got {self.errors!r}")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not self.timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, got {self.timeout!r}")

    @classmethod
    def of(cls, options: "ParseOptions | None", keywords: dict[str, Any]) -> "ParseOptions":
        """`options` (default: the defaults) with the options given as keywords laid over it; an
        unknown keyword is a TypeError naming it."""
        if options is not None and not isinstance(options, ParseOptions):
            raise TypeError(f"options must be a ParseOptions, got {type(options).__name__}")
        base = DEFAULT_OPTIONS if options is None else options
        if not keywords:
            return base
        try:  # (a server builds parsers with the same keywords request after request)
            key = (base, tuple(keywords.items()))
            made = _MADE.get(key)
        except TypeError:  # (an unhashable value: refused below)
            key = made = None
        if made is None:
            unknown = sorted(set(keywords) - _NAMES)
            if unknown:
                raise TypeError(f"unexpected keyword argument {unknown[0]!r} (the parse options are {', '.join(sorted(_NAMES))})")
            made = replace(base, **keywords)
            if key is not None and len(_MADE) < 256:
                _MADE[key] = made
        return made

    @property
    def by_token_ids(self) -> bool:
        """Whether an option that applies to token ids only is set."""
        return self.refuse_unknown_ids or self.recover_decode_errors

    def of_text(self) -> "ParseOptions":
        """The options of the text machine that reads what a token-id parser decodes."""
        return replace(self, refuse_unknown_ids=False, recover_decode_errors=False) if self.by_token_ids else self


DEFAULT_OPTIONS = ParseOptions()
_MADE: dict[tuple, ParseOptions] = {}  # (options, keywords) -> the options they make
_NAMES = frozenset(f.name for f in fields(ParseOptions))
