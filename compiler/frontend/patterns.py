"""Static facts about delimiter patterns, used to make generated scanners cheap.

Two questions are answered for each regex delimiter, conservatively (None = "don't know"):

* context: how many characters before the search position a match may look at (lookbehind,
  `\\b`, `^`). The generated parser keeps that many consumed characters and drops the rest, which
  keeps streaming linear. Unknown means the parser keeps everything (as the interpreter does).
* charsets: the characters a match can start with (see `ir.CharSets`). A parser state whose
  delimiters all have charsets can skip every regex call while the unread text has none of them.

The analysis reads Python's own regex parser (`re._parser`), and gives up (None) on anything it does
not understand or that `regex` may read differently from `re`: a parse error (regex-only syntax),
any warning (possible nested sets, which `regex` reads as POSIX classes or set operations), case
folding or ASCII/locale flags, wide character classes.
"""

from __future__ import annotations

import warnings

try:  # Python 3.11+
    from re import _constants as sre
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants as sre  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from .ir import CharSets, LiteralRun

# Character sets larger than this are not worth a quick reject (and \d, \w are huge in Unicode).
MAX_SET_SIZE = 512
UNSAFE_FLAGS = sre.SRE_FLAG_IGNORECASE | sre.SRE_FLAG_ASCII | sre.SRE_FLAG_LOCALE
REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}
ATOMIC = getattr(sre, "ATOMIC_GROUP", None)
ZERO_WIDTH_AT_START = {sre.AT_END, sre.AT_END_LINE, sre.AT_END_STRING}


def literal_charsets(literals: list[str]) -> CharSets:
    return CharSets(lead=frozenset(), first=frozenset(s[0] for s in literals))


def analyse_pattern(source: str) -> tuple[int | None, CharSets | None]:
    """(context width, charsets) of a delimiter pattern; None where unknown."""
    parsed = _parse(source)
    if parsed is None:
        return None, None
    charsets = _charsets(parsed)
    if charsets is not None:
        lead_run = bool(charsets.lead) and _starts_with_star_of(parsed, charsets.lead)
        rest = parsed[1:] if lead_run and parsed[0][0] in REPEATS else parsed
        opened = _leading_groups_opened(parsed)  # (the literal prefix may be inside a group)
        after_lead = opened[1:] if lead_run and opened[0][0] in REPEATS else opened
        prefix = ""
        if not (charsets.lead & charsets.first) and (not charsets.lead or (lead_run and after_lead is not opened)):
            prefix = _literal_prefix(after_lead)
        charsets = CharSets(charsets.lead, charsets.first, lead_run, _max_width(rest), prefix)
    return _context(parsed), charsets


def reads_past_match(source: str) -> bool:
    """Whether a complete match that ends before the buffer's end may change once more text comes
    (transformers 5.24.0 then holds it: see Machine's scan contract). False only when provably
    not: the interpreter re-runs the match on the buffer extended by "\\x00", and the result can
    differ only if some item can match "\\x00" or an assertion tests the end (`$`, `\\Z`, `\\b`).
    Then, on the extended buffer, every step of the engine fails or succeeds as before."""
    parsed = _parse(source)
    return parsed is None or _may_see_the_end(parsed)


# Assertions that read nothing after the position they test.
_START_ASSERTIONS = {sre.AT_BEGINNING, sre.AT_BEGINNING_STRING}


def match_is_final(source: str) -> bool:
    """Whether a match found before the buffer's end is the one found once any text is appended
    (Machine.PREFIX_IN_ONE_PASS). True only when provably so: the engine then never reads past the
    match, and a match attempt cannot run into the end of the buffer while a later one completes.
    That holds for sequences of one-character items, repeats of one character that nothing after
    them can start with (`\\s*<`, `[^>]+>`) or that end the pattern, groups of those, branches of
    literals none of which occurs in another, and lookbehinds; not for `.*<a` (it reads to the end
    and backs off), lookaheads, end assertions, back references."""
    parsed = _parse(source)
    return parsed is not None and _final_sequence(_flattened(parsed))


def match_is_final_at_edge(source: str) -> bool:
    """Whether a complete match that ends at the buffer's end is also the one found once any text
    is appended: match_is_final, and the pattern ends in an item of fixed length (a character, a
    fixed count of one, a branch of literals none of which occurs in another), so the match cannot
    grow. (The interpreter holds every pattern's match at the buffer's end until more text or the
    end of the output arrives; a parser built with `eager=True` commits these at once.)"""
    parsed = _parse(source)
    items = _flattened(parsed) if parsed is not None else None
    if not items or not _final_sequence(items):
        return False
    op, av = items[-1]
    if op is sre.BRANCH:
        return _literal_branch(av) is not None
    if op in REPEATS:
        return av[0] == av[1] and av[0] > 0 and _repeated_char_set(av) is not None
    return _one_char_set(op, av) is not None


# A character set as (negated, chars): (False, S) is S, (True, S) every character but S.
_EVERYTHING = (True, frozenset())


def _flattened(items) -> list | None:
    """The items with plain groups opened up (their items in their place), None if a group sets flags."""
    out: list = []
    for op, av in items:
        if op is sre.SUBPATTERN:
            if av[1] or av[2]:
                return None
            inner = _flattened(av[3])
            if inner is None:
                return None
            out.extend(inner)
        else:
            out.append((op, av))
    return out


def _one_char_set(op, av) -> tuple[bool, frozenset] | None:
    """The characters a one-character item matches, as (negated, chars); None if not one, or unknown."""
    if op is sre.LITERAL:
        return False, frozenset(chr(av))
    if op is sre.NOT_LITERAL:
        return True, frozenset(chr(av))
    if op is sre.ANY:
        return _EVERYTHING
    if op is not sre.IN:
        return None
    negated = bool(av) and av[0][0] is sre.NEGATE
    chars: set[str] = set()
    for item_op, item_av in av[1:] if negated else av:
        if item_op is sre.LITERAL:
            chars.add(chr(item_av))
        elif item_op is sre.RANGE and item_av[1] - item_av[0] <= MAX_SET_SIZE:
            chars.update(map(chr, range(item_av[0], item_av[1] + 1)))
        elif item_op is sre.CATEGORY and item_av is sre.CATEGORY_SPACE:
            chars |= whitespace()
        elif item_op is sre.CATEGORY and item_av is sre.CATEGORY_NOT_SPACE and len(av) == 1:
            return True, frozenset(whitespace())
        else:
            return None
    return negated, frozenset(chars)


def _repeated_char_set(av) -> tuple[bool, frozenset] | None:
    """_one_char_set of what a repeat repeats, if that is one character (a plain group of one)."""
    body = _flattened(av[2])
    return _one_char_set(*body[0]) if body and len(body) == 1 else None


def _disjoint(a: tuple[bool, frozenset], b: tuple[bool, frozenset]) -> bool:
    if a[0] and b[0]:
        return False  # two complements always share characters
    if a[0]:
        return b[1] <= a[1]
    if b[0]:
        return a[1] <= b[1]
    return not (a[1] & b[1])


def _literal_branch(av) -> list[str] | None:
    """The alternatives of a branch as strings, if each is a non-empty run of literals and none
    occurs in another: then at most one matches at a place, decided within its own length, and
    no attempt at an earlier place can run into the buffer's end across a complete one."""
    words = []
    for alternative in av[1]:
        items = _flattened(alternative)
        if not items or any(op is not sre.LITERAL for op, _ in items):
            return None
        words.append("".join(chr(av_) for _, av_ in items))
    for i, word in enumerate(words):
        if any(j != i and word in other for j, other in enumerate(words)):
            return None  # (one inside another: a partial of the longer may hide behind the shorter)
    return words


def _first_of_rest(items) -> tuple[bool, frozenset] | None | bool:
    """The characters the rest of a sequence can start with, as (negated, chars); True if the
    rest can match the empty string to the end of the pattern; None when unknown."""
    sets: list[tuple[bool, frozenset]] = []
    for op, av in items:
        if (op is sre.ASSERT and av[0] < 0) or (op is sre.AT and av in _START_ASSERTIONS):
            continue  # reads nothing ahead
        if op in REPEATS:
            one = _repeated_char_set(av)
            if one is None:
                return None
            sets.append(one)
            if av[0] > 0:
                break
            continue  # optional: what follows it may come first
        if op is sre.BRANCH:
            words = _literal_branch(av)
            if words is None:
                return None
            sets.append((False, frozenset(word[0] for word in words)))
            break
        one = _one_char_set(op, av)
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
    for i, (op, av) in enumerate(items):
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            continue
        if op is sre.AT and av in _START_ASSERTIONS:
            continue
        if op is sre.ASSERT and av[0] < 0:
            continue  # lookbehind: reads before the match only
        if op is sre.BRANCH:
            if _literal_branch(av) is None:
                return False
            continue
        if op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            one = _repeated_char_set(av)
            if one is None:
                return False
            if av[0] == av[1]:
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
    for op, av in items:
        if op is sre.AT:
            if av not in _START_ASSERTIONS:
                return True
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            if _may_see_the_end(av[1]):
                return True
        elif op in REPEATS or op is sre.SUBPATTERN or op is sre.BRANCH or op is sre.GROUPREF_EXISTS or op is ATOMIC:
            if op is sre.GROUPREF_EXISTS:
                return True  # (a condition on a group: not worth proving)
            if any(_may_see_the_end(sub) for sub in _children(op, av)):
                return True
        elif op is sre.LITERAL:
            if av == 0:
                return True
        elif op is sre.IN:
            if _set_has_nul(av):
                return True
        else:  # ANY (DOTALL: every character), NOT_LITERAL, group references, anything else
            return True
    return False


def _set_has_nul(items) -> bool:
    """Whether a [...] set (sre's IN argument) matches "\\x00"."""
    negated = bool(items) and items[0][0] is sre.NEGATE
    found = False
    for op, av in items[1:] if negated else items:
        if op is sre.LITERAL:
            found = found or av == 0
        elif op is sre.RANGE:
            found = found or av[0] == 0
        elif op is sre.CATEGORY:
            # "\x00" is not a digit, a word character or whitespace: only the negated ones match it.
            if av not in (sre.CATEGORY_DIGIT, sre.CATEGORY_WORD, sre.CATEGORY_SPACE):
                found = True
        else:
            return True  # anything else: assume it may
    return found != negated


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
    parsed = _parse(source)
    if parsed is None or not len(parsed):
        return None
    items = list(parsed)
    lead: frozenset[str] = frozenset()
    op, av = items[0]
    # (Greedy only: `regex` reports partial matches of a lazy run in ways of its own.)
    if op is sre.MAX_REPEAT and av[0] == 0 and av[1] == sre.MAXREPEAT:
        chars = _single_char_class(av[2])
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
    for op, av in items:
        if op is sre.LITERAL:
            options = [chr(av)]
        elif op is sre.IN:
            if not all(item_op is sre.LITERAL for item_op, _ in av):
                return None  # ranges, categories, negation: not a short list of characters
            options = [chr(item_av) for _, item_av in av]  # one character: at most one fits
        elif op is sre.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                return None
            options = _literal_choices(sub)
        elif op is sre.BRANCH:
            options = []
            for alternative in av[1]:
                texts = _literal_choices(alternative)
                if texts is None:
                    return None
                options.extend(texts)
        else:
            return None
        if options is None or len(choices) * len(options) > MAX_LITERAL_RUN_CHOICES:
            return None
        choices = [done + option for done in choices for option in options]
    return choices


def _literal_prefix(items) -> str:
    """The literal characters the items start with (before anything else)."""
    chars = []
    for op, av in items:
        if op is not sre.LITERAL:
            break
        chars.append(chr(av))
    return "".join(chars)


def _max_width(items) -> int | None:
    """The longest text `items` can match, if bounded and nothing in them looks ahead or tests a
    position (such tests can make a partial match reach further than the text consumed)."""
    if _has_position_tests(items):
        return None
    high = sre_parse.SubPattern(items.state, list(items)).getwidth()[1] if hasattr(items, "state") else None
    return None if high is None or high >= sre.MAXREPEAT else high


def _has_position_tests(items) -> bool:
    for op, av in items:
        if op is sre.AT:
            return True
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            if av[0] >= 0:  # lookahead
                return True
            continue  # lookbehind reads only text before the match
        if any(_has_position_tests(sub) for sub in _children(op, av)):
            return True
    return False


def _starts_with_star_of(items, lead: frozenset[str]) -> bool:
    """Whether, up to its first required item, the pattern is `[lead]*` stars and optional items
    whose matches start with a first character (no lead): then, in text without first
    characters, a partial match starts exactly where the trailing run of lead characters does."""
    stars: set[str] = set()
    for op, av in _leading_groups_opened(items):
        facts = _item_starts(op, av)
        if facts is None:
            return False
        if not facts[2]:  # the first required item
            return stars == set(lead) and not facts[0]
        if op in REPEATS and av[0] == 0 and av[1] == sre.MAXREPEAT and _single_char_class(av[2]) is not None:
            stars |= _single_char_class(av[2])
        elif facts[0] or op is sre.AT or op in (sre.ASSERT, sre.ASSERT_NOT):
            return False  # optional lead characters, or a test of the position: no shortcut
    return False


def _leading_groups_opened(items) -> list:
    """The items with the groups they start with opened up: `(\\s*<a)b` matches as `\\s*<ab` (a
    group decides what is captured, not what matches), as the openers the servers' verbatim tool
    fields wrap in a group are."""
    items = list(items)
    while items and items[0][0] is sre.SUBPATTERN:
        _group, add_flags, del_flags, sub = items[0][1]
        if add_flags or del_flags:
            break
        items = list(sub) + items[1:]
    return items


def _parse(source: str):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            parsed = sre_parse.parse(_unname_groups(source), 0)
        except Exception:  # regex-only syntax, or anything `re` rejects: don't guess
            return None
    if parsed.state.flags & UNSAFE_FLAGS:
        return None
    return parsed


def min_width(source: str) -> int | None:
    """The shortest text the pattern can match (0: it may match the empty string); None if unknown."""
    parsed = _parse(source)
    return None if parsed is None else parsed.getwidth()[0]


def has_nested_unbounded_repeat(source: str) -> bool | None:
    """Whether an unbounded repeat contains another one, like (a+)+ (exponential backtracking on
    a near miss); None if the pattern cannot be analysed."""
    parsed = _parse(source)
    return None if parsed is None else _nested_repeat(parsed, inside=False)


def _nested_repeat(items, inside: bool) -> bool:
    for op, av in items:
        if op in REPEATS and av[1] >= sre.MAXREPEAT:
            if inside:
                return True
            if _nested_repeat(av[2], inside=True):
                return True
            continue
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            children = [av[1]]
        else:
            children = _children(op, av)
        if any(_nested_repeat(sub, inside) for sub in children):
            return True
    return False


def _unname_groups(source: str) -> str:
    """The pattern with `(?P<name>` turned into `(`: `regex` allows one name on several groups
    (e.g. alternatives that capture the same thing), `re` does not, and names change nothing
    about what matches. Patterns that refer back to a name are left as they are."""
    if "(?P=" in source or "(?&" in source:
        return source
    out = []
    i, n, in_class = 0, len(source), False
    while i < n:
        char = source[i]
        if char == "\\":
            out.append(source[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            out.append(char)
            i += 1
            # A "]" right after "[" or "[^" is a member, not the end of the class.
            if i < n and source[i] == "^":
                out.append("^")
                i += 1
            if i < n and source[i] == "]":
                out.append("]")
                i += 1
            continue
        elif source.startswith("(?P<", i):
            close = source.find(">", i)
            if close > 0:
                out.append("(")
                i = close + 1
                continue
        out.append(char)
        i += 1
    return "".join(out)


def _context(items) -> int | None:
    """Characters before a match's start that the pattern may read."""
    width = 0
    for op, av in items:
        if op is sre.AT:
            if av not in ZERO_WIDTH_AT_START:
                width = max(width, 1)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            direction, sub = av
            inner = _context(sub)
            if inner is None:
                return None
            if direction < 0:
                hi = sub.getwidth()[1]
                if hi >= sre.MAXREPEAT:
                    return None
                inner += hi
            width = max(width, inner)
        else:
            for sub in _children(op, av):
                inner = _context(sub)
                if inner is None:
                    return None
                width = max(width, inner)
    return width


def _children(op, av):
    if op in REPEATS:
        return [av[2]]
    if op is sre.SUBPATTERN:
        return [av[3]]
    if op is sre.BRANCH:
        return list(av[1])
    if op is sre.GROUPREF_EXISTS:
        return [sub for sub in av[1:] if sub is not None]
    if ATOMIC is not None and op is ATOMIC:
        return [av]
    return []


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
    for op, av in items:
        facts = _item_starts(op, av)
        if facts is None:
            return None
        item_lead, item_first, nullable = facts
        lead |= item_lead
        first |= item_first
        if not nullable:
            return lead, first, False
    return lead, first, True


def _item_starts(op, av) -> Starts:
    if op is sre.AT or op in (sre.ASSERT, sre.ASSERT_NOT):
        return set(), set(), True  # zero-width: it can only narrow where a match starts
    if op in REPEATS:
        low, _high, sub = av
        chars = _single_char_class(sub)
        if chars is not None:
            # [c]* and [c]? are runs of lead characters; [c]+ starts with a first character.
            return (chars, set(), True) if low == 0 else (set(), chars, False)
        inner = _sequence_starts(sub)
        if inner is None:
            return None
        return inner[0], inner[1], inner[2] or low == 0
    if op is sre.SUBPATTERN:
        _group, add_flags, _del_flags, sub = av
        return None if add_flags & UNSAFE_FLAGS else _sequence_starts(sub)
    if ATOMIC is not None and op is ATOMIC:
        return _sequence_starts(av)
    if op is sre.BRANCH:
        alternatives = [_sequence_starts(alt) for alt in av[1]]
        if any(a is None for a in alternatives):
            return None
        return (
            set().union(*(a[0] for a in alternatives)),
            set().union(*(a[1] for a in alternatives)),
            any(a[2] for a in alternatives),
        )
    chars = _single_char_class([(op, av)])
    return None if chars is None else (set(), chars, False)


def _single_char_class(items) -> set[str] | None:
    """The characters matched by a one-character item (a literal or a [...] class), else None."""
    if len(items) != 1:
        return None
    op, av = items[0]
    if op is sre.LITERAL:
        return {chr(av)}
    if op is not sre.IN:
        return None
    chars: set[str] = set()
    for item_op, item_av in av:
        if item_op is sre.LITERAL:
            chars.add(chr(item_av))
        elif item_op is sre.RANGE:
            low, high = item_av
            if high - low > MAX_SET_SIZE:
                return None
            chars.update(map(chr, range(low, high + 1)))
        elif item_op is sre.CATEGORY and item_av is sre.CATEGORY_SPACE:
            chars |= whitespace()
        else:  # negated classes, \d, \w, ...: too wide or too subtle
            return None
    return chars if len(chars) <= MAX_SET_SIZE else None


# What `regex` matches with \\s (Unicode White_Space); a test checks it against the installed
# regex module over every code point, so a change there cannot go unnoticed.
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def whitespace() -> frozenset[str]:
    return WHITESPACE
