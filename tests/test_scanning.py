"""The scanner's shortcuts give exactly what a plain `regex` partial search gives."""

import re

import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from rtcompile.patterns import analyse_pattern, literal_charsets, whitespace
from rtcompile.runtime.scanning import literal_partial_start, search_window

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
    r"<x/?>a[^<]+",
]
texts = st.text(alphabet=ALPHABET, max_size=14)


def _classes(pattern):
    context, charsets = analyse_pattern(pattern)
    assert charsets is not None, pattern
    first = re.compile("[" + "".join(re.escape(c) for c in sorted(charsets.first)) + "]")
    return first, "".join(sorted(charsets.lead)), charsets.tail, charsets.lead_run, charsets.prefix


@given(st.sampled_from(PATTERNS), texts, st.data())
@settings(max_examples=max(settings().max_examples, 1000))
def test_search_window_equals_search_up_to_the_bound(pattern, text, data):
    compiled = regex.compile(pattern, regex.DOTALL)
    first, lead, tail, lead_run, prefix = _classes(pattern)
    pos = data.draw(st.integers(0, len(text)))
    bound = data.draw(st.integers(pos, len(text) + 1))
    for eos in (False, True):
        m = compiled.search(text, pos, partial=not eos)
        expected = None if m is None or m.start() > bound else (m.span(), m.partial)
        got = search_window(compiled, text, pos, eos, bound, first, lead, tail, lead_run, None, prefix)
        got = None if got is None else (got.span(), got.partial)
        # The empty partial match at the very end means "nothing here" to the scanner.
        if expected is not None and expected[1] and expected[0][0] == len(text):
            expected = None
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


def test_leading_star_is_recognised():
    assert analyse_pattern(r"\s*<x>")[1].lead_run
    assert not analyse_pattern(r"\s?<x>")[1].lead_run
    assert not analyse_pattern(r"<x>")[1].lead_run


def test_optional_groups_before_the_first_character_are_understood():
    _, charsets = analyse_pattern(r"(?:<\|start\|>assistant)?\s*<\|channel\|>commentary to=")
    assert charsets.first == frozenset("<") and " " in charsets.lead
    _, charsets = analyse_pattern(r"(?:ab|\s*c)?x")
    assert charsets.first == frozenset("acx") and " " in charsets.lead
    assert analyse_pattern(r"(?:ab)?")[1] is None  # can match the empty string


def test_repeated_group_names_do_not_stop_the_analysis():
    from rtcompile.patterns import _unname_groups

    assert _unname_groups(r"(?P<a>x)|(?P<a>y)") == "(x)|(y)"
    assert _unname_groups(r"[(?P<a>]\(?P<b>(?P<c>z)") == r"[(?P<a>]\(?P<b>(z)"
    assert _unname_groups(r"(?P<a>x)(?P=a)") == r"(?P<a>x)(?P=a)"
    _, charsets = analyse_pattern(r"\s*(?:to=(?P<name>\w+)<|<c>(?P<name>\w+))")
    assert charsets.first == frozenset("t<")
