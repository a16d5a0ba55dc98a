"""The intermediate representation the code generator reads.

The front end (`frontend.py`) turns a raw response-template dict into these frozen dataclasses; the
code generator (`codegen.py`) never looks at the raw dict. Everything a template author wrote is kept
as plain data (strings, numbers, JSON values) and only ever reaches generated code through
`codegen.py:py_literal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

OPEN = "open"
CLOSE = "close"


@dataclass(frozen=True)
class CharSets:
    """What a delimiter's matches look like at their start, for the per-state quick reject.

    Every match, and every partial match other than the empty one at the buffer's end, starts with
    a run of `lead` characters followed by a character of `first` (or by the buffer's end, for a
    partial match). So if `first` occurs nowhere in the unread text and the text does not end in a
    `lead` character, the delimiter cannot match there and no regex call is needed.
    """

    lead: frozenset[str]
    first: frozenset[str]
    # The pattern starts with `[lead]*` itself: then, with no `first` character in the unread
    # text, the partial match starts exactly where the trailing run of lead characters starts.
    lead_run: bool = False
    # The longest text a match can span after its leading [lead]* (the whole match, if the
    # pattern does not start with one); None if unbounded or unknown. A partial match must reach
    # the buffer's end, so it cannot start further back than that (plus a lead run).
    tail: int | None = None
    # Literal text every match has right after its leading lead run (when no lead character is
    # also a first character): candidates without it are skipped without a regex call.
    prefix: str = ""


@dataclass(frozen=True)
class LiteralRun:
    """A pattern that is only a run of `lead` characters (possibly none) then one of `literals`,
    with no literal starting with a lead character: `\\s*<tool_call>`, `<\\|im_end\\|>|<\\|eot\\|>`.

    Its leftmost match then ends at the first place one of the literals occurs, and starts where the
    run of lead characters before that place starts; among literals occurring at one place, the
    engine takes the first of `literals` (its preference order). So it is searched like a literal
    delimiter (str.find, one pass over a long buffer) with no regex call. As for every pattern, a
    match ending at the buffer's end is held: the interpreter assumes a pattern may still grow.
    """

    lead: str
    literals: tuple[str, ...]


@dataclass(frozen=True)
class Delimiter:
    """An open or close delimiter: literal strings or a regex pattern."""

    # Literal form: de-duplicated, first-seen order (None for a pattern).
    literals: tuple[str, ...] | None
    # Pattern form: the regex source, compiled with regex.DOTALL (None for literals).
    pattern: str | None
    # A literal list in which one literal is a strict prefix of another: a complete match at the
    # buffer's end may still grow, so it is held like a regex match.
    can_extend: bool
    # Named groups of the pattern (captures reach the output only through a transform).
    group_names: tuple[str, ...]
    # Characters before the search position the pattern may look at (lookbehind, \b, ^);
    # None when that cannot be bounded, which disables trimming of consumed text.
    context: int | None
    # The quick-reject character sets, or None when the pattern is not simple enough to analyse.
    charsets: CharSets | None
    # Pattern form only: the pattern as a lead run then a literal, when it is just that.
    literal_run: LiteralRun | None = None
    # Pattern form only: whether matches depend on where the search starts (`\G`).
    search_anchored: bool = False
    # Pattern form only: whether a complete match ending before the buffer's end may still change
    # as text arrives (it tests the end, or can match the "\x00" the interpreter extends the buffer
    # with): then such a match is re-checked before it commits (transformers 5.24.0).
    reads_past_match: bool = False
    # Whether a match that ends before the buffer's end is the one found once more text arrives
    # (patterns.match_is_final; literal lists: none occurs in another).
    final: bool = False
    # Pattern form only: whether a complete match ending at the buffer's end cannot change either
    # (patterns.match_is_final_at_edge): a parser built with eager=True commits it there.
    final_at_edge: bool = False

    @property
    def alternation(self) -> str:
        """The regex the interpreter compiles for this delimiter (literals longest first)."""
        if self.pattern is not None:
            return self.pattern
        import regex

        ordered = sorted(self.literals, key=len, reverse=True)
        return "|".join(regex.escape(s) for s in ordered)


@dataclass(frozen=True)
class Literal:
    """A transform leaf copied to the output as is (strings without a placeholder, numbers, ...)."""

    value: Any


@dataclass(frozen=True)
class Placeholder:
    """A whole-string `{root.key1.key2}` placeholder in a transform."""

    path: str
    root: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class DictNode:
    items: tuple[tuple[str, "TransformNode"], ...]


@dataclass(frozen=True)
class ListNode:
    items: tuple["TransformNode", ...]


TransformNode = Union[Literal, Placeholder, DictNode, ListNode]


@dataclass(frozen=True)
class Content:
    """A content parser and its arguments, exactly as the template gave them."""

    parser: str
    args: Any


@dataclass(frozen=True)
class Field:
    index: int
    name: str
    open: Delimiter | None
    close: Delimiter | None
    content: Content
    repeats: bool
    join: str | None
    optional: bool
    transform: TransformNode | None
    transform_each: bool

    @property
    def dirty(self) -> bool:
        """Chunks of structured parsers are raw text that only parses at the region's close."""
        return self.content.parser not in ("text", "int", "float", "bool")


@dataclass(frozen=True)
class Template:
    fields: tuple[Field, ...]
    # Index of the field without an open delimiter (the leftover sink), if any.
    implicit: int | None
    defaults: dict
    start_anchor: Delimiter
    # The template as given, and its canonical text (see canonical.py) and SHA-256.
    source: dict
    canonical: str
    sha256: str

    @property
    def one_pass(self) -> bool:
        """Whether a whole message may be parsed in one pass at the end of the stream (see
        Machine.ONE_PASS): not when a delimiter's matches depend on where a scan starts."""
        return not any(d.search_anchored for f in self.fields for d in (f.open, f.close) if d is not None)

    @property
    def prefix_in_one_pass(self) -> bool:
        """Whether parse_response may read the prefix in its one pass too (Machine.PREFIX_IN_ONE_PASS):
        when what the constructor commits while reading the prefix cannot change as the rest arrives."""
        return self.one_pass and all(d.final for f in self.fields for d in (f.open, f.close) if d is not None)

    @property
    def context(self) -> int | None:
        """Characters of consumed text the parser must keep before its position (None: keep all)."""
        widths = [
            d.context
            for f in self.fields
            for d in (f.open, f.close)
            if d is not None
        ]
        if any(w is None for w in widths):
            return None
        return max(widths, default=0)
