"""Sets of characters as the grammar needs them: from a pattern's classes, written as xgrammar regex
classes, and tested for overlap (does the text after a greedy capture stop it?)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rtcompile.runtime import regex_syntax as rs
from rtcompile.runtime.twin import REGEX_WHITESPACE

from .errors import GrammarError

# The whitespace the grammar itself writes where a pattern allows `\s` (a subset of every engine's).
LAYOUT_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class CharClass:
    """`chars` and `ranges` (inclusive pairs) name characters; `negated` takes the complement."""

    chars: frozenset[str] = frozenset()
    ranges: tuple[tuple[str, str], ...] = ()
    negated: bool = False
    # Only some characters of the pattern's class (\d, \w written as ASCII): fine to write, wrong
    # to complement.
    approximate: bool = False

    def contains(self, char: str) -> bool:
        inside = char in self.chars or any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated

    def is_empty(self) -> bool:
        return not self.negated and not self.chars and not self.ranges

    def disjoint(self, other: "CharClass") -> bool:
        """Whether no character is in both (False when unsure)."""
        if self.negated and other.negated:
            return False
        if self.negated or other.negated:
            positive, negative = (other, self) if self.negated else (self, other)
            excluded = CharClass(negative.chars, negative.ranges)
            return all(excluded.contains(c) for c in positive.chars) and all(
                _range_within(r, excluded) for r in positive.ranges
            )
        if any(other.contains(c) for c in self.chars) or any(self.contains(c) for c in other.chars):
            return False
        return not any(a <= d and c <= b for a, b in self.ranges for c, d in other.ranges)

    def without(self, chars: str) -> "CharClass":
        """This class less `chars` (a positive class of explicit characters only)."""
        assert not self.negated and not self.ranges
        return CharClass(self.chars - set(chars))

    def source(self) -> str:
        """The class as a regex class (xgrammar's regex dialect, which `re` reads alike)."""
        return class_source(self.chars, self.ranges, self.negated)


def _range_within(bounds: tuple[str, str], cls: CharClass) -> bool:
    low, high = bounds
    if any(a <= low and high <= b for a, b in cls.ranges):
        return True
    if ord(high) - ord(low) > 512:
        return False
    return all(cls.contains(chr(code)) for code in range(ord(low), ord(high) + 1))


def escape_chars(chars: str) -> str:
    """Characters escaped for a class, in the syntax xgrammar's regexes and EBNF share."""
    return "".join(_escape(char) for char in dict.fromkeys(chars))


def _escape(char: str) -> str:
    if char in "\\]^-[":
        return "\\" + char
    code = ord(char)
    if code < 0x20 or 0x7F <= code:
        return f"\\u{code:04x}" if code <= 0xFFFF else char
    return char


def class_source(chars: Iterable[str], ranges: Iterable[tuple[str, str]] = (), negated: bool = False) -> str:
    """A class of `chars` and inclusive `ranges` (their complement when `negated`), in the syntax
    xgrammar's regexes and EBNF share. A negated class that names a character beyond ASCII is
    written as the positive class of its complement: xgrammar 0.2.7 (SGLang's) clamps the
    characters of a negated class to ASCII, which would let them through. (The complement of nothing
    is written out too: an empty negated class is no class.)"""
    chars, ranges = sorted(set(chars)), sorted(ranges)
    beyond_ascii = any(ord(c) >= 0x80 for c in chars) or any(ord(high) >= 0x80 for _, high in ranges)
    if negated and (beyond_ascii or not (chars or ranges)):
        chars, ranges, negated = [], _complement(chars, ranges), False
    body = escape_chars("".join(chars)) + "".join(f"{_escape(low)}-{_escape(high)}" for low, high in ranges)
    return "[" + ("^" if negated else "") + body + "]"


# Code points no text holds (UTF-16 surrogates): left out of a complement, never a range's end.
_SURROGATES = (0xD800, 0xDFFF)


def _complement(chars: list[str], ranges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every character outside `chars` and `ranges` (and outside the surrogates), as ranges."""
    taken = sorted([(ord(c), ord(c)) for c in chars] + [(ord(a), ord(b)) for a, b in ranges] + [_SURROGATES])
    gaps, start = [], 0
    for low, high in taken:
        if low > start:
            gaps.append((chr(start), chr(low - 1)))
        start = max(start, high + 1)
    if start <= 0x10FFFF:
        gaps.append((chr(start), chr(0x10FFFF)))
    return gaps


def of_char(char: str) -> CharClass:
    return CharClass(frozenset(char))


ANY = CharClass(negated=True)
WHITESPACE = CharClass(frozenset(REGEX_WHITESPACE))
LAYOUT = CharClass(frozenset(LAYOUT_WHITESPACE))
DIGIT = CharClass(ranges=(("0", "9"),), approximate=True)  # (a subset of \d: ASCII digits)
WORD = CharClass(frozenset("_"), (("0", "9"), ("A", "Z"), ("a", "z")), approximate=True)  # (of \w)


def of_category(name: str, where: str) -> CharClass:
    """A class for `\\s`, `\\S`, `\\d`, `\\w` that only holds characters the pattern's class holds."""
    if name == "space":
        return WHITESPACE
    if name == "not_space":
        return CharClass(WHITESPACE.chars, negated=True)
    if name == "digit":
        return DIGIT
    if name == "word":
        return WORD
    raise GrammarError(where, f"the character class \\{'D' if name == 'not_digit' else 'W'} cannot be written")


def union(classes: list[CharClass], negated: bool, where: str) -> CharClass:
    """The union of classes (each positive), complemented when `negated`. A negated class must
    be exact, so it may hold only explicit characters, ranges and `\\s`."""
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    for cls in classes:
        if cls.negated:
            if negated or len(classes) > 1:
                raise GrammarError(where, "a negated category inside a character class cannot be written")
            return cls
        chars |= cls.chars
        ranges.extend(cls.ranges)
    if negated and any(cls.approximate for cls in classes):
        raise GrammarError(where, "a negated class of \\d or \\w cannot be written exactly")
    return CharClass(frozenset(chars), tuple(ranges), negated, any(c.approximate for c in classes))


def of_node(node: rs.Node, dotall: bool, where: str) -> CharClass:
    """The class a one-character node of a pattern matches."""
    if isinstance(node, rs.Char):
        return of_char(node.char)
    if isinstance(node, rs.NotChar):
        return CharClass(frozenset(node.char), negated=True)
    if isinstance(node, rs.AnyChar):
        return ANY if dotall else CharClass(frozenset("\n"), negated=True)
    if isinstance(node, rs.Category):
        return of_category(node.name, where)
    if isinstance(node, rs.CharSet):
        parts = []
        for item in node.items:
            if isinstance(item, rs.Char):
                parts.append(of_char(item.char))
            elif isinstance(item, rs.Range):
                parts.append(CharClass(ranges=((item.low, item.high),)))
            else:
                parts.append(of_category(item.name, where))
        return union(parts, node.negated, where)
    raise GrammarError(where, f"{rs.to_source(node)!r} is not a character class")
