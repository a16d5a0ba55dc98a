"""Static facts about delimiter patterns, used to make generated scanners cheap.

Two questions are answered for each regex delimiter, conservatively (None = "don't know"):

* context: how many characters before the search position a match may look at (lookbehind,
  `\\b`, `^`). The generated parser keeps that many consumed characters and drops the rest, which
  keeps streaming linear. Unknown means the parser keeps everything (as the interpreter does).
* charsets: the characters a match can start with (see `ir.CharSets`). A parser state whose
  delimiters all have charsets can skip every regex call while the unread text has none of them.

The analysis walks the pattern's tree (rtcompile.runtime.regex_syntax), and gives up (None) on
anything it does not understand or that `regex` may read differently from `re`: what the tree
reader does not read (regex-only syntax, anything `re` warns about: possible nested sets, which
`regex` reads as POSIX classes or set operations), case folding or ASCII/locale flags, wide
character classes.
"""

from __future__ import annotations

import functools
import re

from rtcompile.runtime.regex_syntax import (
    REGEX_WHITESPACE,
    Alternation,
    Anchor,
    AnyChar,
    Atomic,
    Category,
    Char,
    CharSet,
    Conditional,
    Group,
    Look,
    Node,
    NotChar,
    Range,
    Repeat,
    Seq,
    children,
    literal_prefix,
    parse,
)

from .ir import CharSets, LiteralRun

# Character sets larger than this are not worth a quick reject (and \d, \w are huge in Unicode).
MAX_SET_SIZE = 512
UNSAFE_FLAGS = int(re.IGNORECASE | re.ASCII | re.LOCALE)
# Assertions that read nothing before the position they test, and those that read nothing after it.
_END_ASSERTIONS = {"end", "end_string"}
_START_ASSERTIONS = {"start", "start_string"}


def literal_charsets(literals: list[str]) -> CharSets:
    return CharSets(lead=frozenset(), first=frozenset(s[0] for s in literals))


def analyse_pattern(source: str) -> tuple[int | None, CharSets | None]:
    """(context width, charsets) of a delimiter pattern; None where unknown."""
    root = _parse(source)
    if root is None:
        return None, None
    charsets = _charsets(root.items)
    if charsets is not None:
        items = root.items
        lead_run = bool(charsets.lead) and _starts_with_star_of(items, charsets.lead)
        rest = items[1:] if lead_run and isinstance(items[0], Repeat) else items
        opened = _leading_groups_opened(items)  # (the literal prefix may be inside a group)
        after_lead = opened[1:] if lead_run and isinstance(opened[0], Repeat) else opened
        prefix = ""
        if not (charsets.lead & charsets.first) and (not charsets.lead or (lead_run and after_lead is not opened)):
            prefix = literal_prefix(Seq(after_lead))
        charsets = CharSets(charsets.lead, charsets.first, lead_run, _max_width(rest), prefix)
    return _context(root.items), charsets


def reads_past_match(source: str) -> bool:
    """Whether a complete match that ends before the buffer's end may change once more text comes
    (transformers 5.24.0 then holds it: see Machine's scan contract). False only when provably
    not: the interpreter re-runs the match on the buffer extended by "\\x00", and the result can
    differ only if some item can match "\\x00" or an assertion tests the end (`$`, `\\Z`, `\\b`).
    Then, on the extended buffer, every step of the engine fails or succeeds as before."""
    root = _parse(source)
    return root is None or _may_see_the_end(root.items)


def match_is_final(source: str) -> bool:
    """Whether a match found before the buffer's end is the one found once any text is appended
    (Machine.PREFIX_IN_ONE_PASS). True only when provably so: the engine then never reads past the
    match, and a match attempt cannot run into the end of the buffer while a later one completes.
    That holds for sequences of one-character items, repeats of one character that nothing after
    them can start with (`\\s*<`, `[^>]+>`) or that end the pattern, groups of those, branches of
    literals none of which occurs in another, and lookbehinds; not for `.*<a` (it reads to the end
    and backs off), lookaheads, end assertions, back references."""
    root = _parse(source)
    return root is not None and _final_sequence(_flattened(root.items))


def match_is_final_at_edge(source: str) -> bool:
    """Whether a complete match that ends at the buffer's end is also the one found once any text
    is appended: match_is_final, and the pattern ends in an item of fixed length (a character, a
    fixed count of one, a branch of literals none of which occurs in another), so the match cannot
    grow. (The interpreter holds every pattern's match at the buffer's end until more text or the
    end of the output arrives; a parser built with `eager=True` commits these at once.)"""
    root = _parse(source)
    items = _flattened(root.items) if root is not None else None
    if not items or not _final_sequence(items):
        return False
    last = items[-1]
    if isinstance(last, Alternation):
        return _literal_branch(last) is not None
    if isinstance(last, Repeat):
        return last.min == last.max and last.min > 0 and _repeated_char_set(last) is not None
    return _one_char_set(last) is not None


# A character set as (negated, chars): (False, S) is S, (True, S) every character but S.
_EVERYTHING = (True, frozenset())


def _is_plain(group: Group) -> bool:
    """A group that only groups (and captures): no flags."""
    return not group.add_flags and not group.del_flags


def _flattened(items) -> list | None:
    """The items with plain groups opened up (their items in their place), None if a group sets flags."""
    out: list = []
    for item in items:
        if isinstance(item, Group):
            if not _is_plain(item):
                return None
            inner = _flattened(item.body.items)
            if inner is None:
                return None
            out.extend(inner)
        else:
            out.append(item)
    return out


def _one_char_set(item: Node) -> tuple[bool, frozenset] | None:
    """The characters a one-character item matches, as (negated, chars); None if not one, or unknown."""
    if isinstance(item, Char):
        return False, frozenset(item.char)
    if isinstance(item, NotChar):
        return True, frozenset(item.char)
    if isinstance(item, AnyChar):
        return _EVERYTHING
    if not isinstance(item, CharSet):
        return None
    chars: set[str] = set()
    for member in item.items:
        if isinstance(member, Char):
            chars.add(member.char)
        elif isinstance(member, Range) and ord(member.high) - ord(member.low) <= MAX_SET_SIZE:
            chars.update(map(chr, range(ord(member.low), ord(member.high) + 1)))
        elif member == Category("space"):
            chars |= whitespace()
        elif member == Category("not_space") and not item.negated and len(item.items) == 1:
            return True, frozenset(whitespace())
        else:
            return None
    return item.negated, frozenset(chars)


def _repeated_char_set(repeat: Repeat) -> tuple[bool, frozenset] | None:
    """_one_char_set of what a repeat repeats, if that is one character (a plain group of one)."""
    body = _flattened(repeat.body.items)
    return _one_char_set(body[0]) if body and len(body) == 1 else None


def _disjoint(a: tuple[bool, frozenset], b: tuple[bool, frozenset]) -> bool:
    if a[0] and b[0]:
        return False  # two complements always share characters
    if a[0]:
        return b[1] <= a[1]
    if b[0]:
        return a[1] <= b[1]
    return not (a[1] & b[1])


def _literal_branch(alternation: Alternation) -> list[str] | None:
    """The alternatives of a branch as strings, if each is a non-empty run of literals and none
    occurs in another: then at most one matches at a place, decided within its own length, and
    no attempt at an earlier place can run into the buffer's end across a complete one."""
    words = []
    for branch in alternation.branches:
        items = _flattened(branch.items)
        if not items or not all(isinstance(item, Char) for item in items):
            return None
        words.append("".join(item.char for item in items))
    for i, word in enumerate(words):
        if any(j != i and word in other for j, other in enumerate(words)):
            return None  # (one inside another: a partial of the longer may hide behind the shorter)
    return words


def _reads_nothing_ahead(item: Node) -> bool:
    """A lookbehind, or an assertion about the start: tests only what comes before its place."""
    if isinstance(item, Look):
        return item.behind and not item.negated
    return isinstance(item, Anchor) and item.kind in _START_ASSERTIONS


def _first_of_rest(items) -> tuple[bool, frozenset] | None | bool:
    """The characters the rest of a sequence can start with, as (negated, chars); True if the
    rest can match the empty string to the end of the pattern; None when unknown."""
    sets: list[tuple[bool, frozenset]] = []
    for item in items:
        if _reads_nothing_ahead(item):
            continue
        if isinstance(item, Repeat):
            one = _repeated_char_set(item)
            if one is None:
                return None
            sets.append(one)
            if item.min > 0:
                break
            continue  # optional: what follows it may come first
        if isinstance(item, Alternation):
            words = _literal_branch(item)
            if words is None:
                return None
            sets.append((False, frozenset(word[0] for word in words)))
            break
        one = _one_char_set(item)
        if one is None:
            return None
        sets.append(one)
        break
    else:
        return True
    plain = frozenset().union(*(chars for negated, chars in sets if not negated))
    complements = [chars for negated, chars in sets if negated]
    if complements:  # a union of complements is the complement of their intersection
        return True, frozenset.intersection(*complements) - plain
    return False, plain


def _final_sequence(items) -> bool:
    if items is None:
        return False
    for i, item in enumerate(items):
        if isinstance(item, (Char, NotChar, AnyChar, CharSet)) or _reads_nothing_ahead(item):
            continue
        if isinstance(item, Alternation):
            if _literal_branch(item) is None:
                return False
            continue
        if isinstance(item, Repeat) and item.mode != "possessive":
            one = _repeated_char_set(item)
            if one is None:
                return False
            if item.min == item.max:
                continue  # a fixed count: no choice to make
            rest = _first_of_rest(items[i + 1 :])
            if rest is True:
                continue  # the rest can end the match here: the repeat stops at the first char it refuses
            if rest is None or not _disjoint(one, rest):
                return False
            continue
        return False  # lookaheads, end assertions, references, possessive and atomic, flags...
    return True


def _may_see_the_end(items) -> bool:
    for item in items:
        if isinstance(item, Anchor):
            if item.kind not in _START_ASSERTIONS:
                return True
        elif isinstance(item, Conditional):
            return True  # (a condition on a group: not worth proving)
        elif isinstance(item, (Look, Repeat, Group, Alternation, Atomic)):
            if any(_may_see_the_end(sub.items) for sub in children(item)):
                return True
        elif isinstance(item, Char):
            if item.char == "\x00":
                return True
        elif isinstance(item, CharSet):
            if _set_has_nul(item):
                return True
        else:  # AnyChar (DOTALL: every character), NotChar, back references
            return True
    return False


def _set_has_nul(charset: CharSet) -> bool:
    """Whether a [...] set matches "\\x00"."""
    found = False
    for member in charset.items:
        if isinstance(member, Char):
            found = found or member.char == "\x00"
        elif isinstance(member, Range):
            found = found or member.low == "\x00"
        # "\x00" is not a digit, a word character or whitespace: only the negated ones match it.
        elif member.name not in ("digit", "word", "space"):
            found = True
    return found != charset.negated


def uses_search_anchor(source: str) -> bool:
    """Whether the pattern contains `\\G` (`regex`: "where this search started"), so that its matches
    depend on where a scan starts, not only on the text (see Machine.ONE_PASS)."""
    i = 0
    while True:
        i = source.find("\\", i)
        if i < 0 or i + 1 >= len(source):
            return False
        if source[i + 1] == "G":
            return True
        i += 2  # (an escaped character, \\ included, is skipped whole)


# More alternatives than this and a pattern is left to the regex engine.
MAX_LITERAL_RUN_CHOICES = 16


def literal_run(source: str) -> LiteralRun | None:
    """The pattern as a run of lead characters then a literal (see ir.LiteralRun), if that is all it
    is: like qwen's `\\s*<tool_call>` or `\\s*(?:<|im_end|>|<|endoftext|>)`. None otherwise."""
    root = _parse(source)
    if root is None or not root.items:
        return None
    items = root.items
    lead: frozenset[str] = frozenset()
    first = items[0]
    # (Greedy only: `regex` reports partial matches of a lazy run in ways of its own.)
    if isinstance(first, Repeat) and first.mode == "greedy" and first.min == 0 and first.max is None:
        chars = _single_char_class(first.body.items)
        if chars is None:
            return None
        lead = frozenset(chars)
        items = items[1:]
    literals = _literal_choices(items)
    if not literals or any(not text or text[0] in lead for text in literals):
        return None
    return LiteralRun("".join(sorted(lead)), tuple(literals))


def _literal_choices(items) -> list[str] | None:
    """The texts a sequence of literals, one-character classes, alternations and plain groups
    matches, in the order the engine prefers them (the first alternative that fits wins, and a
    sequence tries its later parts for each choice of its earlier ones); None for anything else."""
    choices = [""]
    for item in items:
        options = _literal_options(item)
        if options is None or len(choices) * len(options) > MAX_LITERAL_RUN_CHOICES:
            return None
        choices = [done + option for done in choices for option in options]
    return choices


def _literal_options(item: Node) -> list[str] | None:
    """The texts one item of _literal_choices matches, in the engine's order."""
    if isinstance(item, Char):
        return [item.char]
    if isinstance(item, CharSet):
        if item.negated or not all(isinstance(member, Char) for member in item.items):
            return None  # ranges, categories, negation: not a short list of characters
        return [member.char for member in item.items]  # one character: at most one fits
    if isinstance(item, Group):
        return _literal_choices(item.body.items) if _is_plain(item) else None
    if isinstance(item, Alternation):
        options: list[str] = []
        for branch in item.branches:
            texts = _literal_choices(branch.items)
            if texts is None:
                return None
            options.extend(texts)
        return options
    return None


def _max_width(items) -> int | None:
    """The longest text `items` can match, if bounded and nothing in them looks ahead or tests a
    position (such tests can make a partial match reach further than the text consumed)."""
    if _has_position_tests(items):
        return None
    return Seq(tuple(items)).width()[1]


def _has_position_tests(items) -> bool:
    for item in items:
        if isinstance(item, Anchor):
            return True
        if isinstance(item, Look):
            if not item.behind:
                return True
            continue  # lookbehind reads only text before the match
        if any(_has_position_tests(sub.items) for sub in children(item)):
            return True
    return False


def _starts_with_star_of(items, lead: frozenset[str]) -> bool:
    """Whether, up to its first required item, the pattern is `[lead]*` stars and optional items
    whose matches start with a first character (no lead): then, in text without first
    characters, a partial match starts exactly where the trailing run of lead characters does."""
    stars: set[str] = set()
    for item in _leading_groups_opened(items):
        facts = _item_starts(item)
        if facts is None:
            return False
        if not facts[2]:  # the first required item
            return stars == set(lead) and not facts[0]
        star = _single_char_class(item.body.items) if _is_star(item) else None
        if star is not None:
            stars |= star
        elif facts[0] or isinstance(item, (Anchor, Look)):
            return False  # optional lead characters, or a test of the position: no shortcut
    return False


def _is_star(item: Node) -> bool:
    """`x*`, `x*?` or `x*+`."""
    return isinstance(item, Repeat) and item.min == 0 and item.max is None


def _leading_groups_opened(items) -> tuple:
    """The items with the groups they start with opened up: `(\\s*<a)b` matches as `\\s*<ab` (a
    group decides what is captured, not what matches), as the openers the servers' verbatim tool
    fields wrap in a group are."""
    items = tuple(items)
    while items and isinstance(items[0], Group) and _is_plain(items[0]):
        items = items[0].body.items + items[1:]
    return items


@functools.lru_cache(maxsize=256)  # (each delimiter's pattern is asked several questions in a row)
def _parse(source: str) -> Seq | None:
    """The pattern's tree, None if it is unread or folds case or reads ASCII or locale classes."""
    syntax = parse(source)
    return None if syntax is None or syntax.flags & UNSAFE_FLAGS else syntax.root


def min_width(source: str) -> int | None:
    """The shortest text the pattern can match (0: it may match the empty string); None if unknown."""
    root = _parse(source)
    return None if root is None else root.width()[0]


def has_nested_unbounded_repeat(source: str) -> bool | None:
    """Whether an unbounded repeat contains another one, like (a+)+ (exponential backtracking on
    a near miss); None if the pattern cannot be analysed."""
    root = _parse(source)
    return None if root is None else _nested_repeat(root.items, inside=False)


def _nested_repeat(items, inside: bool) -> bool:
    for item in items:
        if isinstance(item, Repeat) and item.max is None:
            if inside or _nested_repeat(item.body.items, inside=True):
                return True
            continue
        if any(_nested_repeat(sub.items, inside) for sub in children(item)):
            return True
    return False


def _context(items) -> int | None:
    """Characters before a match's start that the pattern may read."""
    width = 0
    for item in items:
        if isinstance(item, Anchor):
            if item.kind not in _END_ASSERTIONS:
                width = max(width, 1)
            continue
        inner_widths = [_context(sub.items) for sub in children(item)]
        if None in inner_widths:
            return None
        inner = max(inner_widths, default=0)
        if isinstance(item, Look) and item.behind:
            high = item.body.width()[1]
            if high is None:
                return None
            inner += high
        width = max(width, inner)
    return width


def _charsets(items) -> CharSets | None:
    """Lead and first characters of a pattern (see ir.CharSets); None if unknown or if the pattern
    can match the empty string."""
    facts = _sequence_starts(items)
    if facts is None or facts[2]:
        return None
    lead, first, _ = facts
    if len(lead) + len(first) > MAX_SET_SIZE:
        return None
    return CharSets(lead=frozenset(lead), first=frozenset(first))


# How a (sub)pattern's matches start, as (lead, first, nullable): every non-empty match is either a
# run of `lead` characters followed by a `first` character (and then anything), or, only when the
# item is nullable, a run of `lead` characters alone. None: unknown.
Starts = "tuple[set[str], set[str], bool] | None"


def _sequence_starts(items) -> Starts:
    lead: set[str] = set()
    first: set[str] = set()
    for item in items:
        facts = _item_starts(item)
        if facts is None:
            return None
        item_lead, item_first, nullable = facts
        lead |= item_lead
        first |= item_first
        if not nullable:
            return lead, first, False
    return lead, first, True


def _item_starts(item: Node) -> Starts:
    if isinstance(item, (Anchor, Look)):
        return set(), set(), True  # zero-width: it can only narrow where a match starts
    if isinstance(item, Repeat):
        chars = _single_char_class(item.body.items)
        if chars is not None:
            # [c]* and [c]? are runs of lead characters; [c]+ starts with a first character.
            return (chars, set(), True) if item.min == 0 else (set(), chars, False)
        inner = _sequence_starts(item.body.items)
        if inner is None:
            return None
        return inner[0], inner[1], inner[2] or item.min == 0
    if isinstance(item, Group):
        return None if item.add_flags & UNSAFE_FLAGS else _sequence_starts(item.body.items)
    if isinstance(item, Atomic):
        return _sequence_starts(item.body.items)
    if isinstance(item, Alternation):
        alternatives = [_sequence_starts(branch.items) for branch in item.branches]
        if any(a is None for a in alternatives):
            return None
        return (
            set().union(*(a[0] for a in alternatives)),
            set().union(*(a[1] for a in alternatives)),
            any(a[2] for a in alternatives),
        )
    chars = _single_char_class((item,))
    return None if chars is None else (set(), chars, False)


def _single_char_class(items) -> set[str] | None:
    """The characters matched by a one-character item (a literal or a [...] class), else None."""
    if len(items) != 1:
        return None
    item = items[0]
    if isinstance(item, Char):
        return {item.char}
    if not isinstance(item, CharSet) or item.negated:
        return None  # (negated classes: too wide or too subtle)
    chars: set[str] = set()
    for member in item.items:
        if isinstance(member, Char):
            chars.add(member.char)
        elif isinstance(member, Range):
            if ord(member.high) - ord(member.low) > MAX_SET_SIZE:
                return None
            chars.update(map(chr, range(ord(member.low), ord(member.high) + 1)))
        elif member == Category("space"):
            chars |= whitespace()
        else:  # \d, \w, ...: too wide or too subtle
            return None
    return chars if len(chars) <= MAX_SET_SIZE else None


# What `regex` matches with \\s (Unicode White_Space).
WHITESPACE = frozenset(REGEX_WHITESPACE)


def whitespace() -> frozenset[str]:
    return WHITESPACE
