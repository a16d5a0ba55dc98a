"""The faster engines stand in for `regex` only where they give exactly its results.

* runtime/twin.py: a pattern's stdlib `re` twin, for complete matches without a time bound.
* content_parsers.unquoted_key_ascii: the unquoted-keys rewrite on ASCII text.
* content_parsers._literal_stasher: json string_delims replaced by str.find.
"""

import sys
from typing import Any

import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rtcompile.runtime import content_parsers
from rtcompile.runtime.scanning import LazyRegex
from rtcompile.runtime.twin import REGEX_WHITESPACE, stdlib_twin

from examples import scaled

# ---- the whitespace set the twin spells out ---------------------------------------------------


def test_regex_whitespace_is_the_spelled_out_set_over_every_code_point():
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert "".join(regex.findall(r"\s", every)) == REGEX_WHITESPACE


def test_ascii_spellings_of_s_and_w_are_regexs():
    ascii_chars = "".join(map(chr, range(128)))
    assert "".join(regex.findall(r"\s", ascii_chars)) == "\t\n\x0b\x0c\r "
    assert "".join(regex.findall(r"\w", ascii_chars)) == "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"


# ---- which patterns get a twin ---------------------------------------------------------------


def test_the_bundled_formats_patterns_have_twins():
    for source in [
        r"<parameter=(?P<key>[^>\n]+)>\n?(?P<value>.*?)\n?</parameter>",
        r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>",
        r"\s*</function>\s*</tool_call>",
        r"<\|tool_call>call:(?P<name>[^{<\s]+)",
        r"(?:<\|start\|>assistant)?\s*to=functions\.(?P<name>[^\s<]+)\S*(?=<)",
    ]:
        assert stdlib_twin(source) is not None, source


def test_patterns_the_engines_read_differently_get_none():
    for source in [r"\w+", r"\d", r"a\b", r"\Ba", r"(?i)abc", r"(a)\1", r"a++", r"(?>a)", r"[\S\n]", r"[^\S]x\p{L}",
                   r"(?x) a b", r"(?m)^a", r"[[a]", r"(?<=a|bc)x", r"(?|(a)|(b))", r"(?(1)a|b)", r"a{2}+"]:
        assert stdlib_twin(source) is None, source


def test_a_class_of_s_excludes_the_separators_re_would_add():
    twin = stdlib_twin(r"\s+|[^\s]")
    assert twin is not None
    assert [m.group() for m in twin.finditer("\x1c\t \x1f")] == ["\x1c", "\t ", "\x1f"]


# ---- differential: twin against regex ----------------------------------------------------------

TEXT_ALPHABET = "ab<>/ \n\t\x1c\x1f\x85\xa0\u2028é|"
_LITERALS = ["a", "b", "<", ">", "/", " ", "\\n", "\\t", "\\|", "é", "\\x1c", "\\.", "="]
_CLASS_ITEMS = ["a", "b", "<", "a-c", "\\s", "\\n", " ", "\\x1c-\\x1f", "/", "\\S", "\\d"]
_ODD = ["\\w", "\\b", "\\d", "(?i)a", "a++"]  # outside the core: must get no twin, never a wrong one


@st.composite
def _classes(draw) -> str:
    items = draw(st.lists(st.sampled_from(_CLASS_ITEMS), min_size=1, max_size=3))
    return "[" + ("^" if draw(st.booleans()) else "") + "".join(items) + "]"


def _atoms() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(_LITERALS),
        st.just("."),
        st.just("\\s"),
        st.just("\\S"),
        _classes(),
        st.sampled_from(["^", "$", "\\A", "\\Z"]),
        st.sampled_from(_ODD),
    )


def _quantified(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quantifier = st.sampled_from(["", "", "*", "+", "?", "{1,2}", "{2}", "{0,3}"])
    lazy = st.sampled_from(["", "", "?"])
    return st.tuples(inner, quantifier, lazy).map(lambda t: t[0] + t[1] + (t[2] if t[1] else ""))


def _grouped(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    alternatives = st.lists(inner, min_size=1, max_size=3).map("|".join)
    opener = st.sampled_from(["(", "(?:", "(?P<G>", "(?=", "(?!", "(?<="])
    return st.tuples(opener, alternatives).map(lambda t: t[0] + t[1] + ")")


def _sequences(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(_quantified(inner), min_size=1, max_size=4).map("".join)


patterns = st.recursive(_sequences(_atoms()), lambda inner: _sequences(st.one_of(_atoms(), _grouped(inner))), max_leaves=8)


def _named(source: str) -> str:
    count = 0
    while "(?P<G>" in source:
        source = source.replace("(?P<G>", f"(?P<g{count}>", 1)
        count += 1
    return source


def _outcome(match):
    return None if match is None else (match.span(), match.groups(), match.groupdict())


@settings(max_examples=scaled(1500), deadline=None)
@given(patterns.map(_named), st.text(TEXT_ALPHABET, max_size=10))
def test_a_twin_matches_exactly_as_regex(source, text):
    try:
        reference = regex.compile(source, regex.DOTALL)
    except regex.error:
        assume(False)
    twin = stdlib_twin(source)
    if twin is None:
        return
    for odd in _ODD:
        assert odd not in source.replace("\\\\", ""), (source, "got a twin")
    n = len(text)
    for pos in range(n + 1):
        assert _outcome(twin.search(text, pos)) == _outcome(reference.search(text, pos)), (source, text, pos)
        for end in (pos, (pos + n) // 2, n):
            assert _outcome(twin.match(text, pos, end)) == _outcome(reference.match(text, pos, end)), (source, text, pos, end)
    assert [_outcome(m) for m in twin.finditer(text)] == [_outcome(m) for m in reference.finditer(text)], (source, text)


@settings(max_examples=scaled(1500), deadline=None)
@given(patterns.map(_named), st.text(TEXT_ALPHABET, max_size=10))
def test_a_partial_search_completes_where_the_twin_finds_a_match(source, text):
    """OpenAIStream's xml-inline extractor asks the twin where it would ask `regex` for a partial
    search and use only a complete result: the partial search reports the leftmost complete match
    wherever one exists (a partial match only when none does), which is what the twin finds."""
    try:
        reference = regex.compile(source, regex.DOTALL)
    except regex.error:
        assume(False)
    twin = stdlib_twin(source)
    if twin is None:
        return
    for pos in range(len(text)):  # (at the very end, regex's partial search answers oddly)
        partial = reference.search(text, pos, partial=True)
        complete = twin.search(text, pos)
        if partial is None or partial.partial:
            assert complete is None, (source, text, pos)
        else:
            assert _outcome(complete) == _outcome(partial), (source, text, pos)


def test_lazy_regex_plain_is_the_twin_or_the_regex_pattern():
    assert LazyRegex(r"<a>(.*?)</a>").plain() is stdlib_twin(r"<a>(.*?)</a>")
    fallback = LazyRegex(r"\w+")
    assert fallback.plain() is fallback.compiled()


def test_scan_at_the_end_gives_the_complete_search_and_partial_before():
    pattern = LazyRegex(r"\s*<tool_call>")
    assert pattern.scan("x <tool", 0, False, None).partial
    assert pattern.scan("x <tool", 0, True, None) is None
    assert pattern.scan("x <tool_call> y", 0, True, None).span() == (1, 13)
    assert pattern.scan("x <tool_call> y", 0, True, 1.0).span() == (1, 13)  # (a time bound: regex)


# ---- unquoted keys on ASCII text ---------------------------------------------------------------

KEY_ALPHABET = 'ab_9 {},:"\\\n\t\x0b\x1c\x01'


@settings(max_examples=scaled(1500), deadline=None)
@given(st.text(KEY_ALPHABET, max_size=30))
def test_unquoted_keys_rewrite_ascii_text_alike(text):
    expected = content_parsers.unquoted_key().sub(content_parsers._quote_key, text)
    assert content_parsers.unquoted_key_ascii().sub(content_parsers._quote_key, text) == expected


# ---- json string_delims by str.find ------------------------------------------------------------


@settings(max_examples=scaled(1500), deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["<", "<|", "'", "<s>", "|>", "ab"]), st.sampled_from([">", "|>", "'", "</s>", "<|", "b"])), min_size=1, max_size=2),
    st.text("<|>'/sab x", max_size=24),
)
def test_literal_string_delims_stash_as_the_pattern_does(pairs, text):
    by_find, by_regex = [], []
    working_find, working_regex = text, text
    for open_d, close_d in pairs:
        pattern = regex.compile(regex.escape(open_d) + r"(.*?)" + regex.escape(close_d), regex.DOTALL)
        working_find = content_parsers._literal_stasher(open_d, close_d)(working_find, by_find)
        working_regex = content_parsers._regex_stasher(pattern)(working_regex, by_regex)
    assert (working_find, by_find) == (working_regex, by_regex)


# ---- final matches (compiler/patterns.match_is_final, Machine.PREFIX_IN_ONE_PASS) ---------------

# A pattern, a buffer, and the text appended to it later.
_appended_text = given(
    patterns.map(_named),
    st.one_of(st.text(TEXT_ALPHABET, max_size=10), st.text("ab<> \n", min_size=2, max_size=12)),
    st.text(TEXT_ALPHABET, min_size=1, max_size=6),
    st.data(),
)


def _partial_search(source: str, head: str, data) -> tuple[Any, int, Any]:
    """The compiled pattern, a drawn start in `head`, and the interpreter's partial search there
    (a pattern `regex` rejects is no example)."""
    try:
        compiled = regex.compile(source, regex.DOTALL)
    except regex.error:
        assume(False)
    pos = data.draw(st.integers(0, len(head)))
    return compiled, pos, compiled.search(head, pos, partial=True)


@settings(max_examples=scaled(4000), deadline=None)
@_appended_text
def test_a_final_match_stays_when_text_is_appended(source, head, more, data):
    """What the parser commits while reading a prefix (a complete match before the buffer's end,
    by the partial search the interpreter makes) is what the search finds once the rest is there;
    and moved_by_more, which the generated scanners skip for such patterns, never sees it change."""
    from rtcompile.frontend.patterns import match_is_final
    from rtcompile.runtime.scanning import moved_by_more

    compiled, pos, found = _partial_search(source, head, data)
    if not match_is_final(source):
        return
    if found is None or found.partial or found.end() >= len(head) or found.start() >= len(head):
        return  # (held back by the parser, not committed)
    later = compiled.search(head + more, pos, partial=True)
    assert _outcome(later) == _outcome(found), (source, head, more, pos)
    assert not moved_by_more(LazyRegex(source), head, found), (source, head, pos)


def test_finality_of_the_bundled_formats_delimiters():
    from rtcompile.frontend.patterns import match_is_final

    assert match_is_final(r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>")
    assert match_is_final(r"\s*(?:<\|im_end\|>|<\|endoftext\|>)")
    assert not match_is_final(r"<a>.*<a")  # reads to the end and backs off
    assert not match_is_final(r"(?:xabzq|ab)")  # a partial xabz... hides behind a complete ab
    assert not match_is_final(r"a(?=b)")


@settings(max_examples=scaled(4000), deadline=None)
@_appended_text
def test_a_match_final_at_the_edge_stays_when_text_is_appended(source, head, more, data):
    """What an eager parser commits at the buffer's end (a complete match ending there, where the
    interpreter waits for more text) is what the search finds once more text is there."""
    from rtcompile.frontend.patterns import match_is_final_at_edge

    compiled, pos, found = _partial_search(source, head, data)
    if not match_is_final_at_edge(source):
        return
    if found is None or found.partial or found.end() != len(head) or found.start() == len(head):
        return  # (held: partial, before the edge (see the test above), or empty at the edge)
    later = compiled.search(head + more, pos, partial=True)
    assert _outcome(later) == _outcome(found), (source, head, more, pos)


def test_finality_at_the_edge_of_the_bundled_formats_delimiters():
    from rtcompile.frontend.patterns import match_is_final_at_edge

    assert match_is_final_at_edge(r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>")
    assert match_is_final_at_edge(r"\s*</function>\s*</tool_call>")
    assert match_is_final_at_edge(r"\s*(?:<\|im_end\|>|<\|endoftext\|>)")
    assert not match_is_final_at_edge(r"<tool_call>\s*")  # more whitespace would join the match
    assert not match_is_final_at_edge(r"<a>x{1,3}")
    assert not match_is_final_at_edge(r"(?:<a>|<a>b)")
    assert not match_is_final_at_edge(r"<a>(?<=a>)")  # ends in what consumes nothing
