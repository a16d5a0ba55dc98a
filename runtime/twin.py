"""Stdlib twins of `regex` patterns: the same pattern compiled by Python's own `re`, where the two
engines provably match alike.

The interpreter matches with the `regex` module, and so do generated parsers wherever its extras
are needed (partial matches while streaming, `timeout=`). A complete match without a time bound
needs neither, and there `re` is the faster engine by a wide margin: about 2.5 times on a typical
xml-inline tag pattern, and each call costs a third of `regex`'s. So such matches (content
parsers' patterns, delimiter matches at the end of the stream) go to a twin, when one exists.

A twin exists only for patterns built from a small core whose meaning the two engines share:
literals, `.` (always DOTALL here), character sets of literals and ranges, `\\s`/`\\S`, groups,
alternation, greedy and lazy repeats, lookarounds, and the `^ $ \\A \\Z` anchors, with no flags.
Everything else (case folding, `\\d`, `\\w`, `\\b`, back references, possessive repeats, regex-only
syntax, anything `re` warns about) keeps the `regex` pattern. `\\s` is the one class they read
differently (`re` includes U+001C..U+001F, `regex` does not): the twin spells it out as `regex`'s
set. tests/runtime/test_twin.py checks the equivalence on generated patterns and texts.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .regex_syntax import (
    REGEX_WHITESPACE,
    Alternation,
    Anchor,
    AnyChar,
    Category,
    Char,
    CharSet,
    Group,
    Look,
    Node,
    NotChar,
    Range,
    Repeat,
    Seq,
    parse,
    to_source,
    walk,
)

__all__ = ["REGEX_WHITESPACE", "stdlib_twin"]

# Characters near the edge of White_Space: what \s must not match in `regex`.
_NOT_WHITESPACE = "\x1c\x1d\x1e\x1f\u180e\u200b\u2060\ufeff"

_SHARED_ANCHORS = {"start", "start_string", "end", "end_string"}  # (\b, \B: word characters differ)
_ALLOWED_FLAGS = int(re.DOTALL | re.UNICODE)


@functools.lru_cache(maxsize=None)
def stdlib_twin(source: str) -> Any:
    """The pattern compiled by `re` (DOTALL) if it matches exactly as `regex.compile(source,
    regex.DOTALL)` does, else None."""
    if not _whitespace_agrees():
        return None
    syntax = parse(source, re.DOTALL)  # (None for regex-only syntax and anything `re` warns about)
    if syntax is None or syntax.flags & ~_ALLOWED_FLAGS or not all(map(_shared, walk(syntax.root))):
        return None
    try:
        return re.compile(to_source(syntax.root, spell_space=REGEX_WHITESPACE), re.DOTALL)
    except Exception:  # a variable-width lookbehind, a name on two groups...
        return None


@functools.lru_cache(maxsize=None)
def _whitespace_agrees() -> bool:
    import regex

    return "".join(regex.findall(r"\s", REGEX_WHITESPACE + _NOT_WHITESPACE)) == REGEX_WHITESPACE


def _shared(node: Node) -> bool:
    """Whether the node means the same to both engines (its children are asked on their own)."""
    if isinstance(node, (Seq, Char, NotChar, AnyChar, Alternation, Look)):
        return True
    if isinstance(node, CharSet):
        return all(_shared_member(member, len(node.items)) for member in node.items)
    if isinstance(node, Repeat):
        return node.mode != "possessive"
    if isinstance(node, Group):
        return not node.add_flags and not node.del_flags
    if isinstance(node, Anchor):
        return node.kind in _SHARED_ANCHORS
    return False  # back references, conditionals, atomic groups...


def _shared_member(member, members: int) -> bool:
    """Literals and ranges, \\s (spelled out as `regex`'s set), and \\S when it stands alone (its
    complement is then one set)."""
    if isinstance(member, (Char, Range)) or member == Category("space"):
        return True
    return member == Category("not_space") and members == 1  # (\\d, \\w: the engines' tables differ)
