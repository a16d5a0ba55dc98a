"""The scanner's shortcuts give exactly what a plain `regex` partial search gives."""

import re

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from rtcompile.frontend.patterns import analyse_pattern, literal_charsets, whitespace
from rtcompile.runtime.scanning import LazyRegex, LiteralSearch, PatternWindow, StartLiterals, literal_partial_start

from examples import scaled

ALPHABET = "ab <>/x\n\t|"
PATTERNS = [
    r"\s*<tool_call>",
    r"abc|b",
    r"a|abc",
    r"<a>.*?</a>",
    r"\s?<x>",
    r"(?<=a)b<",
    r"b+<",
    r"\n\s*<",
    r"(ab)+x",
    r"a(?=b<)",
    r"a(?!b)",
    r"</x>(\n)?",
    r"\s*(?:<\|x\|>|<b>)",
    r"[ab]{2,3}x",
    r"ab\Z",
    r"a$",
    r"x\b",
    r"(?:\s|\|)*</?a>",
    r"(?:<a>)?\s*<b>",
    r"(?:x|\s+)?a?\s*</?x>",
    r"\s+<",
    r"<a>.*</a>",
    r"(?:ab|abc)d?",
    r"a+?b<",
    r"(a|ab)(c|bcd)",
    r"x(?:<a|<ab>)?",
    r"</x>\s*",
    r"\s*\n<",
    r"(?:\s|<)*<a",
    r"\s*(?:ab|a)b?<",
    r"\s*<x>\s*<a=(?P<n>[^>\n]+)>",
    r"(?P<o>\s*<x>\s*<a=(?P<n>[^>\n]+)>)",
    r"((\s*)<x)|y",
    r"(\s*<x)?\s*<a",
    r"<x/?>a[^<]+",
]
texts = st.text(alphabet=ALPHABET, max_size=14)
# Long enough for the searches' switches from skipping between candidates to the regex engine.
long_texts = st.text(alphabet=ALPHABET, min_size=40, max_size=400)


def _classes(pattern):
    context, charsets = analyse_pattern(pattern)
    assert charsets is not None, pattern
    first = re.compile("[" + "".join(re.escape(c) for c in sorted(charsets.first)) + "]")
    return first, "".join(sorted(charsets.lead)), charsets.tail, charsets.lead_run, charsets.prefix


@given(st.sampled_from(PATTERNS), st.one_of(texts, long_texts), st.data())
@settings(max_examples=scaled(1000))
def test_pattern_window_equals_search_up_to_the_bound(pattern, text, data):
    compiled = regex.compile(pattern, regex.DOTALL)
    first, lead, tail, lead_run, prefix = _classes(pattern)
    window = PatternWindow(LazyRegex(pattern), first.pattern, lead, tail, lead_run, prefix)
    memo: dict = {}  # shared by every search of this text, in any order, as a scanner may
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(text)))
        bound = data.draw(st.integers(pos, len(text) + 1))
        for eos in (False, True):
            m = compiled.search(text, pos, partial=not eos)
            expected = None if m is None or m.start() > bound else (m.span(), m.partial)
            # The empty partial match at the very end means "nothing here" to the scanner.
            if expected is not None and expected[1] and expected[0][0] == len(text):
                expected = None
            for shared in (memo, None):
                got = window.search(text, pos, eos, bound, None, shared)
                # (a stdlib twin's match, at the end of the stream, is complete: it has no `partial`)
                got = None if got is None else (got.span(), getattr(got, "partial", False))
                if got is not None and got[1] and got[0][0] == len(text):
                    got = None
                assert got == expected


@given(st.sampled_from(PATTERNS), texts)
def test_every_match_starts_with_lead_characters_then_a_first_character(pattern, text):
    compiled = regex.compile(pattern, regex.DOTALL)
    _, charsets = analyse_pattern(pattern)
    for start in range(len(text)):
        for partial in (False, True):
            m = compiled.match(text, start, partial=partial)
            if m is None or m.start() == len(text):
                continue
            assert _starts_like(text, start, charsets, m.partial), (pattern, text, start, m)


def _starts_like(text, start, charsets, partial):
    """text[start:] begins with lead characters, then a first character (or, for a partial match,
    the end of the text)."""
    for q in range(start, len(text)):
        if text[q] in charsets.first:
            return True
        if text[q] not in charsets.lead:
            return False
    return partial


@given(st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), min_size=1, max_size=3), texts, st.data())
def test_literal_partial_start_equals_the_regex_partial_search(literals, text, data):
    literals = list(dict.fromkeys(literals))
    pos = data.draw(st.integers(0, len(text)))
    alternation = regex.compile("|".join(regex.escape(s) for s in sorted(literals, key=len, reverse=True)))
    m = alternation.search(text, pos, partial=True)
    if m is not None and not m.partial:
        return  # complete matches are found with str.find
    expected = len(text) if m is None else m.start()
    assert literal_partial_start(text, pos, tuple(literals), max(map(len, literals))) == expected


def test_unanalysable_patterns_are_left_to_the_engine():
    assert analyse_pattern(r"\p{L}+<x>") == (None, None)  # regex-only syntax
    assert analyse_pattern(r"(?i)<x>")[1] is None  # case folding
    assert analyse_pattern(r"[[:alpha:]]<")[1] is None  # a POSIX class in regex, a set in re
    assert analyse_pattern(r"\w+<")[1] is None  # too wide
    assert analyse_pattern(r"(?=<)")[1] is None  # can match the empty string
    assert analyse_pattern(r"(?<=a.*)<")[0] is None  # unbounded lookbehind: keep all text


def test_context_widths():
    assert analyse_pattern(r"<x>")[0] == 0
    assert analyse_pattern(r"(?<=ab)<")[0] == 2
    assert analyse_pattern(r"\b<")[0] == 1
    assert analyse_pattern(r"^<")[0] == 1
    assert analyse_pattern(r"<$")[0] == 0


def test_whitespace_set_is_what_regex_calls_whitespace():
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert whitespace() == frozenset(regex.findall(r"\s", everything))


def test_literal_charsets_are_first_characters():
    assert literal_charsets(["<a>", "[b"]).first == frozenset("<[")
    assert literal_charsets(["<a>"]).lead == frozenset()


@given(st.sampled_from([p for p in PATTERNS if analyse_pattern(p)[1].lead_run]), texts, st.data())
def test_without_first_characters_a_leading_star_holds_exactly_the_trailing_run(pattern, text, data):
    from rtcompile.runtime.scanning import trailing_run

    _, charsets = analyse_pattern(pattern)
    pos = data.draw(st.integers(0, len(text)))
    if any(c in charsets.first for c in text[pos:]):
        return
    m = regex.compile(pattern, regex.DOTALL).search(text, pos, partial=True)
    expected = len(text) if m is None else m.start()
    assert trailing_run(text, pos, "".join(charsets.lead)) == expected


@given(st.sampled_from([p for p in PATTERNS if analyse_pattern(p)[1].prefix]), texts)
def test_where_no_literal_prefix_starts_no_match_starts(pattern, text):
    """The generated fast path's test on a fresh chunk: every match starts, after its lead run, with
    the pattern's literal prefix; where no position starts it (or a prefix of it at the end) and
    the text does not end in a lead character, a partial search finds nothing."""
    _, charsets = analyse_pattern(pattern)
    if not StartLiterals((charsets.prefix,)).starts_nowhere(text) or (text and text[-1] in charsets.lead):
        return
    m = regex.compile(pattern, regex.DOTALL).search(text, partial=True)
    assert m is None or m.start() == len(text), (pattern, text, m)


@given(st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), min_size=1, max_size=3), texts)
def test_starts_nowhere_is_no_complete_or_partial_literal(literals, text):
    literals = list(dict.fromkeys(literals))
    alternation = regex.compile("|".join(regex.escape(s) for s in sorted(literals, key=len, reverse=True)))
    m = alternation.search(text, partial=True)
    found = m is not None and m.start() < len(text)
    assert StartLiterals(tuple(literals)).starts_nowhere(text) == (not found)


@given(
    st.lists(st.tuples(st.text(alphabet="ab<>", min_size=1, max_size=5), st.sampled_from(["", " ", " \n"])), min_size=1, max_size=4),
    st.text(alphabet="ab<> \n", max_size=16),
)
@settings(max_examples=scaled(1000))
def test_start_literals_hold_where_the_partial_search_holds(starts, text):
    """A state's fast path: where no start literal occurs whole, the leftmost partial match of the
    delimiters (each a run of its lead characters, then one of its literals) is a proper prefix
    of a literal at the end of the text, walked back over its lead (the widest, where literals
    of several delimiters share a prefix). A partial match of lead characters alone is the caller's
    (it holds a trailing run of them)."""
    literals = tuple(literal for literal, _ in starts)
    leads = tuple(lead for _, lead in starts)
    search = StartLiterals(literals, leads)
    delimiters = "|".join(f"[{lead}]*{regex.escape(literal)}" if lead else regex.escape(literal) for literal, lead in starts)
    m = regex.compile(delimiters).search(text, partial=True)
    assert search.occurs(text) == (m is not None and not m.partial)
    if m is not None and not m.partial:
        assert search.starts_at(text) == -1
    if m is None or not m.partial:
        return
    hold = search.hold(text)
    assert search.starts_at(text) == hold  # (the fast paths' one call for both)
    if hold == len(text):  # (no literal is starting at the end: a lead run alone may be held)
        assert m.start() == len(text) or (set(text[m.start() :]) <= set(" \n") and text[m.start() :])
    else:
        assert hold == m.start()


def test_start_literals_refuse_leads_that_do_not_nest():
    with pytest.raises(ValueError, match="not nested"):
        StartLiterals(("<a", "<b"), (" ", "\n")).hold("x<")


@given(st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), min_size=1, max_size=3), texts, st.sampled_from(["", " \n"]), st.data())
def test_partial_start_is_the_partial_search_with_its_lead_run(literals, text, lead, data):
    literals = tuple(dict.fromkeys(literals))
    pos = data.draw(st.integers(0, len(text)))
    expected = literal_partial_start(text, pos, literals, max(map(len, literals)))
    while expected > pos and text[expected - 1] in lead:
        expected -= 1
    assert LiteralSearch(literals, lead).partial_start(text, pos) == expected


def test_literal_prefixes_are_found_inside_leading_groups():
    assert analyse_pattern(r"(?P<o>\s*<x>\s*<a=(?P<n>[^>\n]+)>)")[1].prefix == "<x>"
    assert analyse_pattern(r"\s*</x>\s*</y>")[1].prefix == "</x>"
    assert analyse_pattern(r"(?s:\s*<x>)")[1].prefix == ""  # (a group with flags stays shut)


def test_leading_star_is_recognised():
    assert analyse_pattern(r"\s*<x>")[1].lead_run
    assert not analyse_pattern(r"\s?<x>")[1].lead_run
    assert not analyse_pattern(r"<x>")[1].lead_run
    # inside the groups it starts with (a server's verbatim opener is wrapped in one)
    assert analyse_pattern(r"(?P<o>\s*<x>\s*<a=(?P<n>[^>\n]+)>)")[1].lead_run
    assert analyse_pattern(r"((?:\s*)<x)b")[1].lead_run
    assert not analyse_pattern(r"(?s:\s*<x)")[1].lead_run  # (a group with flags stays shut)


def test_optional_groups_before_the_first_character_are_understood():
    _, charsets = analyse_pattern(r"(?:<\|start\|>assistant)?\s*<\|channel\|>commentary to=")
    assert charsets.first == frozenset("<") and " " in charsets.lead
    _, charsets = analyse_pattern(r"(?:ab|\s*c)?x")
    assert charsets.first == frozenset("acx") and " " in charsets.lead
    assert analyse_pattern(r"(?:ab)?")[1] is None  # can match the empty string


def test_repeated_group_names_do_not_stop_the_analysis():
    _, charsets = analyse_pattern(r"\s*(?:to=(?P<name>\w+)<|<c>(?P<name>\w+))")
    assert charsets.first == frozenset("t<")


# ---- patterns searched as literals (ir.LiteralRun) ----------------------------------------------

LEADS = [r"\s*", r"[ \t]*", r"\n*", r"\s*?", ""]
RUN_LITERALS = st.text(alphabet="ab<>|x", min_size=1, max_size=3)


@st.composite
def literal_run_patterns(draw):
    """Patterns of the shapes literal_run accepts: a lead star, then literals combined by
    alternation, groups and one-character classes."""
    a, b, c = (regex.escape(draw(RUN_LITERALS)) for _ in range(3))
    body = draw(
        st.sampled_from(
            [a, f"{a}|{b}", f"(?:{a}|{b})", f"{a}(?:{b}|{c})", f"(?:{a}|{a}{b})(?:{c}|{b})", f"{a}[xb]{c}", f"({a}){b}"]
        )
    )
    return draw(st.sampled_from(LEADS)) + body


def _as_literal_run(run, text, pos, eos):
    """What the generated scanner makes of a literal run: (start, end, partial), or None."""
    alternation = re.compile("|".join(re.escape(s) for s in run.literals))
    m = alternation.search(text, pos)
    if m is not None:
        start = m.start()
        while start > pos and text[start - 1] in run.lead:
            start -= 1
        return start, m.end(), False
    if eos:
        return None
    start = literal_partial_start(text, pos, run.literals, max(map(len, run.literals)))
    while start > pos and text[start - 1] in run.lead:
        start -= 1
    return None if start == len(text) else (start, len(text), True)


@given(st.one_of(literal_run_patterns(), st.sampled_from(PATTERNS)), texts, st.data())
@settings(max_examples=scaled(1000))
def test_a_literal_run_finds_what_the_regex_partial_search_finds(pattern, text, data):
    from rtcompile.frontend.patterns import literal_run

    run = literal_run(pattern)
    if run is None:
        return
    pos = data.draw(st.integers(0, len(text)))
    for eos in (False, True):
        m = regex.compile(pattern, regex.DOTALL).search(text, pos, partial=not eos)
        expected = None if m is None else (m.start(), m.end(), m.partial)
        if expected is not None and expected[2] and expected[0] == len(text):
            expected = None  # the empty partial match at the end: nothing to hold
        assert _as_literal_run(run, text, pos, eos) == expected, (pattern, run)


def test_literal_runs_are_recognised_only_where_they_are_exact():
    from rtcompile.frontend.patterns import literal_run

    run = literal_run(r"\s*(?:<\|im_end\|>|<\|endoftext\|>)")
    assert run.literals == ("<|im_end|>", "<|endoftext|>") and "\n" in run.lead and " " in run.lead
    assert literal_run(r"(?:a|ab)(?:bc|c)").literals == ("abc", "ac", "abbc", "abc")  # preference order
    assert literal_run(r"<x>").lead == ""
    for pattern in [
        r"\s* <x>",  # a literal starting with a lead character
        r"\s*\s<x>",
        r"(?i)<x>",  # case folding
        r"<x>\s*",  # a run after the literal can grow
        r"(?:<x>)?",  # may match the empty string
        r"[a-c]x",  # a range: left to the engine
        r"[^<]x",
        r"<x>$",
        r"(?<=a)<x>",
        r"\s+<x>",
        r"(?:a|b|c|d)(?:a|b|c|d)(?:a|b)",  # too many choices
        r"\p{L}<x>",  # regex-only syntax
        r"\s*?<x>",  # a lazy run: regex's partial matches of it differ
    ]:
        assert literal_run(pattern) is None, pattern


@given(
    st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), min_size=1, max_size=3),
    st.one_of(st.text(alphabet="ab<> \n", max_size=30), st.text(alphabet="ab<> \n", min_size=100, max_size=600)),
    st.sampled_from(["", " \n"]),
    st.data(),
)
@settings(max_examples=scaled(500))
def test_literal_search_with_memo_and_bounds_agrees_with_a_fresh_search(literals, text, lead, data):
    literals = list(dict.fromkeys(sorted(literals, key=len, reverse=True)))
    alternation = re.compile("|".join(re.escape(s) for s in literals))
    search = LiteralSearch(tuple(literals), lead)
    memo: dict = {}
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(text)))  # in any order: the memo must not care
        bound = data.draw(st.one_of(st.none(), st.integers(pos, len(text))))
        got = search.find(data.draw(st.sampled_from([memo, None])), text, pos, bound)
        m = alternation.search(text, pos)
        if got[0] >= 0:
            assert m is not None and got == m.span()
        elif got == (-1, -1):
            assert m is None  # "none" is only ever said of the whole rest
        else:
            assert got == (-2, -2) and bound is not None
            limit = bound
            while limit < len(text) and text[limit] in lead:
                limit += 1
            # "none that early": no occurrence could start a match at or before the bound, and
            # no literal can be partly there at the end of the text before it either.
            assert m is None or m.start() > limit
            assert limit + search.longest < len(text)
        if bound is None:
            assert got == ((-1, -1) if m is None else m.span())


@given(
    st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), min_size=1, max_size=3),
    st.lists(st.text(alphabet="ab<>", min_size=1, max_size=4), max_size=3),
    st.text(alphabet="ab<> \n", max_size=30),
    st.data(),
)
def test_pending_is_the_partial_match_that_could_come_first(literals, others, text, data):
    """A state searches all its literals at once; `pending` then says where one delimiter's
    partial match starts, if it could precede the first literal found."""
    literals = tuple(dict.fromkeys(sorted(literals, key=len, reverse=True)))
    search = LiteralSearch(literals)
    every = LiteralSearch(tuple(dict.fromkeys(literals + tuple(others))))
    pos = data.draw(st.integers(0, len(text)))
    found = every.find(None, text, pos)[0]
    if found >= 0 and any(text.startswith(s, found) for s in literals):
        return  # then the delimiter matches there and nothing is pending
    m = regex.compile("|".join(regex.escape(s) for s in literals)).search(text, pos, partial=True)
    expected = len(text)
    if m is not None and m.partial and (found < 0 or m.start() <= found):
        expected = m.start()
    assert search.pending(text, pos, found) == expected


def test_search_anchors_are_found_and_escaped_backslashes_are_not_mistaken_for_them():
    from rtcompile.frontend.patterns import uses_search_anchor

    assert uses_search_anchor(r"\G<a") and uses_search_anchor(r"(?:x|\G)y") and uses_search_anchor("a\\\\\\G")
    assert not uses_search_anchor(r"<a\\G") and not uses_search_anchor(r"\s*<x>") and not uses_search_anchor("\\")


# ---- the 5.24.0 re-check of complete matches that end before the buffer's end ---------------------

EDGE_PATTERNS = PATTERNS + [
    r"a[^<]*<",
    r"<f=(?P<name>[^>\n]+)>",
    r"a.*?b",
    r"ab(?=\n|$)",
    r"a\s*$",
    r"<x>\x00?",
    r"a\W",
    r"(?:a|ab)(?:c|)",
]


@settings(max_examples=scaled(400))
@given(st.sampled_from(EDGE_PATTERNS), st.text(ALPHABET + "\x00", max_size=12))
def test_patterns_said_not_to_read_past_a_match_never_move(source, buf):
    """`patterns.reads_past_match` may only say False when the interpreter's re-check (match again
    on the buffer extended by "\\x00") can never change a complete match ending before the end."""
    from rtcompile.frontend.patterns import reads_past_match
    from rtcompile.runtime.scanning import moved_by_more

    pattern = LazyRegex(source)
    for start in range(len(buf) + 1):
        m = pattern.compiled().match(buf, start)
        if m is not None and m.end() < len(buf) and moved_by_more(pattern, buf, m):
            assert reads_past_match(source), (source, buf, start)


def test_end_leaning_patterns_are_rechecked_and_plain_ones_are_not():
    from rtcompile.frontend.patterns import reads_past_match

    for source in (r"a$", r"a\Z", r"a(?=\n|$)", r"a(?=.)", r"a[^<]*<", r"a.b", r"\bx", r"a\W"):
        assert reads_past_match(source), source
    for source in (r"\s*<tool_call>", r"<a>(?P<x>\w+)</a>", r"(?:ab|a)c?", r"[ab]{2,3}x", r"^<x>", r"a(?=b)", r"a(?!b)"):
        assert not reads_past_match(source), source
