"""xml-inline tags read by `str.find`, for tag patterns of one common shape.

Most xml-inline tag patterns are literals around a key and a lazily matched value:

    <parameter=(?P<key>[^>\\n]+)>\\n?(?P<value>.*?)\\n?</parameter>      (Qwen3.5, Qwen3-Coder)
    <parameter name="(?P<key>[^"]+)">(?P<value>.*?)</parameter>          (MiniMax-M2)

The regex engine reads the lazy value one character at a time, trying the closing literal at each
(about 10 ns a character in `re`); `str.find` finds that literal at memchr speed. `tag_reader`
recognises the shape from the parsed pattern and returns a reader that gives exactly what
`finditer` gives for the (key, value) groups, else None:

    OPEN  KEY  MID  [A]?  (?P<value>.*?)  [B]?  CLOSE

OPEN, MID and CLOSE are non-empty literals; [A]? and [B]? optional single characters (greedy);
KEY is `(?P<key>[^S]+)` with MID's first character in S (the run stops exactly where MID must
start, so it never gives back a character), or `(?P<key>.*?)` (it ends at the first MID).
tests/runtime/test_tags.py checks the reader against the regex engine on generated patterns and
texts.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from .regex_syntax import AnyChar, Char, CharSet, Group, Node, NotChar, Repeat, Seq, parse

__all__ = ["tag_reader"]

_ALLOWED_FLAGS = int(re.DOTALL | re.UNICODE)


@functools.lru_cache(maxsize=None)
def tag_reader(source: str) -> Callable[[str], list[tuple[str, str]]] | None:
    """A reader of the (key, value) pairs `finditer` finds with `source`, or None (another shape)."""
    syntax = parse(source, re.DOTALL)
    if syntax is None or syntax.flags & ~_ALLOWED_FLAGS:
        return None  # (regex-only syntax, or flags: not this shape)
    names = syntax.group_names
    if set(names.values()) != {"key", "value"} or syntax.groups != 2:
        return None
    items = syntax.root.items
    opening, items = _literal(items)
    key, items = _group(items, names, "key")
    middle, items = _literal(items)
    before, items = _optional_char(items)
    value, items = _group(items, names, "value")
    after, items = _optional_char(items)
    closing, items = _literal(items)
    if items or not opening or not middle or not closing or key is None or value is None:
        return None
    if not _is_lazy_any(value):
        return None
    stops = _negated_run(key)
    if stops is not None:
        if middle[0] not in stops:
            return None
    elif not _is_lazy_any(key):
        return None
    return _make_reader(opening, stops, middle, before, after, closing)


def _literal(items: tuple) -> tuple[str, tuple]:
    chars = []
    while items and isinstance(items[0], Char):
        chars.append(items[0].char)
        items = items[1:]
    return "".join(chars), items


def _group(items: tuple, names: dict, name: str) -> tuple[Node | None, tuple]:
    """The one item inside a plain group named `name` that the items start with."""
    group = items[0] if items else None
    if not isinstance(group, Group) or group.index is None or names.get(group.index) != name:
        return None, items
    if group.add_flags or group.del_flags or len(group.body.items) != 1:
        return None, items
    return group.body.items[0], items[1:]


def _optional_char(items: tuple) -> tuple[str, tuple]:
    """A greedy `c?` of one literal character ("" when there is none)."""
    first = items[0] if items else None
    if _is_repeat(first, "greedy", 0, 1):
        body = first.body.items
        if len(body) == 1 and isinstance(body[0], Char):
            return body[0].char, items[1:]
    return "", items


def _is_lazy_any(item: Node) -> bool:
    """`.*?` (any character: DOTALL)."""
    return _is_repeat(item, "lazy", 0, None) and item.body == Seq((AnyChar(),))


def _is_repeat(item: Node, mode: str, low: int, high: int | None) -> bool:
    return isinstance(item, Repeat) and (item.mode, item.min, item.max) == (mode, low, high)


def _negated_run(item: Node) -> frozenset | None:
    """S for `[^S]+` (greedy, literal characters only), else None."""
    if not _is_repeat(item, "greedy", 1, None) or len(item.body.items) != 1:
        return None
    member = item.body.items[0]
    if isinstance(member, NotChar):
        return frozenset(member.char)
    if not isinstance(member, CharSet) or not member.negated:
        return None
    if not all(isinstance(char, Char) for char in member.items):
        return None
    return frozenset(char.char for char in member.items)


def _key_runs_to_middle(text: str, key_start: int, key_end: int, middle: str, other: str | None, others: tuple) -> bool:
    """Whether [^S]+ runs from `key_start` to MIDDLE at `key_end`: a non-empty key, MIDDLE there,
    and no other character of S (`others`; `other` where it is the only one) before it."""
    if key_end == key_start or not text.startswith(middle, key_end):
        return False
    if other is not None:  # (the common case, tested without a loop)
        return text.find(other, key_start, key_end) < 0
    return not any(text.find(char, key_start, key_end) >= 0 for char in others)


def _make_reader(opening: str, stops: frozenset | None, middle: str, before: str, after: str, closing: str):
    # [^S]+ ends at the first character of S, where MIDDLE must start: at MIDDLE's first character
    # (which is in S), and only if no other character of S comes before it.
    others = tuple(sorted(stops - {middle[0]})) if stops is not None else ()
    other = others[0] if len(others) == 1 else None
    lazy_key = stops is None
    first = middle if lazy_key else middle[0]
    open_len, middle_len, close_len = len(opening), len(middle), len(closing)

    def read(text: str) -> list[tuple[str, str]]:
        pairs = []
        n = len(text)
        find, startswith = text.find, text.startswith
        pos = 0
        # Where MIDDLE (or its first character, for [^S]+) next occurs from where it was last looked
        # for: the tags' starts only move on, so the text is searched for it once.
        next_middle = -1
        while True:
            start = find(opening, pos)
            if start < 0:
                return pairs
            key_start = start + open_len
            if next_middle < key_start:
                next_middle = find(first, key_start)
                if next_middle < 0:
                    return pairs  # no MIDDLE after this tag's start: none after a later one either
            key_end = next_middle
            if not lazy_key and not _key_runs_to_middle(text, key_start, key_end, middle, other, others):
                pos = start + 1
                continue
            value_start = key_end + middle_len
            # ([A] is taken first; given back only if CLOSE follows at once and nowhere after)
            taken = before and value_start < n and text[value_start] == before
            c = find(closing, value_start + 1 if taken else value_start)
            if c < 0:
                if not (taken and startswith(closing, value_start)):
                    return pairs  # no CLOSE after this tag: none after any later one either
                c = value_start
            elif taken:
                value_start += 1
            # The lazy value stops at the first place [B]?CLOSE fits: one sooner if [B] is before CLOSE.
            if not after:
                value_end, end = c, c + close_len
            elif c > value_start and text[c - 1] == after:
                value_end, end = c - 1, c + close_len
            elif text[c] == after and startswith(closing, c + 1):
                value_end, end = c, c + 1 + close_len
            else:
                value_end, end = c, c + close_len
            pairs.append((text[key_start:key_end], text[value_start:value_end]))
            pos = end

    return read
