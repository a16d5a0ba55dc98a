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
set. tests/test_twin.py checks the equivalence on generated patterns and texts.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

try:  # Python 3.11+
    from re import _compiler as sre_compile
    from re import _constants as sre
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_compile  # type: ignore[no-redef]
    import sre_constants as sre  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

# What `regex` matches with \s (Unicode White_Space). build() checks it against the installed
# module (on the characters where the engines' tables could differ), and a test over every code point.
REGEX_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# Characters near the edge of White_Space: what \s must not match in `regex`.
_NOT_WHITESPACE = "\x1c\x1d\x1e\x1f\u180e\u200b\u2060\ufeff"

_SHARED_ANCHORS = {sre.AT_BEGINNING, sre.AT_BEGINNING_STRING, sre.AT_END, sre.AT_END_STRING}
_ALLOWED_FLAGS = sre.SRE_FLAG_DOTALL | sre.SRE_FLAG_UNICODE
_WHITESPACE_ITEMS = [(sre.LITERAL, ord(c)) for c in REGEX_WHITESPACE]


class _NoTwin(Exception):
    pass


@functools.lru_cache(maxsize=None)
def stdlib_twin(source: str) -> Any:
    """The pattern compiled by `re` (DOTALL) if it matches exactly as `regex.compile(source,
    regex.DOTALL)` does, else None."""
    if not _whitespace_agrees():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. a possible nested set, which regex reads otherwise
            parsed = sre_parse.parse(source, sre.SRE_FLAG_DOTALL)
            if parsed.state.flags & ~_ALLOWED_FLAGS:
                return None
            _rewrite(parsed.data)
            return sre_compile.compile(parsed, parsed.state.flags)
    except Exception:  # _NoTwin, a parse error (regex-only syntax), a variable-width lookbehind...
        return None


@functools.lru_cache(maxsize=None)
def _whitespace_agrees() -> bool:
    import regex

    return "".join(regex.findall(r"\s", REGEX_WHITESPACE + _NOT_WHITESPACE)) == REGEX_WHITESPACE


def _rewrite(items: list) -> None:
    """Check that every item is in the shared core; spell \\s out in place."""
    for i, (op, av) in enumerate(items):
        if op is sre.LITERAL or op is sre.NOT_LITERAL or op is sre.ANY:
            continue
        if op is sre.IN:
            items[i] = (op, _set_items(av))
        elif op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            _rewrite(av[2].data)
        elif op is sre.SUBPATTERN:
            group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise _NoTwin
            _rewrite(sub.data)
        elif op is sre.BRANCH:
            for alternative in av[1]:
                _rewrite(alternative.data)
        elif op is sre.ASSERT or op is sre.ASSERT_NOT:
            _rewrite(av[1].data)
        elif op is sre.AT:
            if av not in _SHARED_ANCHORS:
                raise _NoTwin  # \b, \B: word characters differ between the engines
        else:
            raise _NoTwin  # back references, conditionals, atomic groups, possessive repeats...


def _set_items(items: list) -> list:
    negated = bool(items) and items[0][0] is sre.NEGATE
    rest = items[1:] if negated else items
    out = [(sre.NEGATE, None)] if negated else []
    for op, av in rest:
        if op is sre.LITERAL or op is sre.RANGE:
            out.append((op, av))
        elif op is sre.CATEGORY and av is sre.CATEGORY_SPACE:
            out.extend(_WHITESPACE_ITEMS)
        elif op is sre.CATEGORY and av is sre.CATEGORY_NOT_SPACE and len(rest) == 1:
            # [\S] (or \S) is "not whitespace", [^\S] is whitespace.
            return _WHITESPACE_ITEMS if negated else [(sre.NEGATE, None), *_WHITESPACE_ITEMS]
        else:
            raise _NoTwin  # \d, \w, and \S beside other items
    return out


