"""The pattern automata (compiler/grammar/automata.py) against Python's own regex engine, on every
short text over a small alphabet: where they say a closer cannot start inside a content, no
search finds a match that does; where they say a lookahead always holds, every written text
starts with a match of it; where they say a format's pieces spell no closer, no text it writes
holds one."""

from __future__ import annotations

import itertools
import re

from hypothesis import example, given
from hypothesis import strategies as st

from rtcompile.grammar import formats as F
from rtcompile.grammar.automata import always_holds, spells, starts_inside
from rtcompile.grammar.delimiters import _blocking
from rtcompile.runtime import regex_syntax as rs

ALPHABET = "ab< "
ATOMS = ["a", "b", "<", ">", ".", "[^<]", "\\s", "[ab]", "(?:a|<b)"]
QUANTIFIERS = ["", "", "", "*", "*?", "+", "?"]

atoms = st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS)).map("".join)
patterns = st.lists(atoms, min_size=1, max_size=4).map("".join)


def _texts(longest: int):
    for size in range(longest + 1):
        for letters in itertools.product(ALPHABET + ">", repeat=size):
            yield "".join(letters)


SHORT = list(_texts(3))
WRITTEN = list(_texts(5))


@given(closer=patterns)
@example(closer="a.*?<a>")  # (from the `a` of a call's name to the written `<a>`)
@example(closer="\\s*<a")  # (only whitespace taken from the content: allowed)
@example(closer="abab")  # (a closer that overlaps itself)
def test_a_closer_said_not_to_start_inside_never_does(closer):
    syntax = rs.parse(closer, re.DOTALL)
    blocking = _blocking(syntax.root)
    if not blocking:
        return  # (the grammar refuses a closer with no fixed text before asking)
    blocking = tuple(dict.fromkeys(blocking))
    source = rs.to_source(syntax)
    if starts_inside(source, source, blocking):
        return
    search = re.compile(closer, re.DOTALL)
    written = [w for w in WRITTEN if search.fullmatch(w)][:40]
    for content in SHORT:
        if not content or any(literal in content for literal in blocking):
            continue
        for text in written:
            for after in ("", "a", "<", " "):
                match = search.search(content + text + after)
                assert match is None or match.start() >= len(content) or content[match.start() :].isspace(), (
                    content,
                    text,
                    after,
                )


@given(look=patterns, written=patterns)
@example(look='\\s*<a', written="\\s*<a>")
@example(look="<a", written="(?:<a|<b)")  # (one alternative breaks it)
def test_a_lookahead_said_to_hold_holds_for_every_written_text(look, written):
    if not always_holds(rs.to_source(rs.parse(look, re.DOTALL)), rs.to_source(rs.parse(written, re.DOTALL))):
        return
    for text in WRITTEN:
        if re.fullmatch(written, text, re.DOTALL):
            assert re.match(look, text, re.DOTALL), text


def test_the_automata_answer_both_ways():
    """(So the properties above are not vacuous.)"""
    assert starts_inside("(?s)a.*?<a>", "(?s)a[^<]*<a>", ("<a>",))
    assert not starts_inside("(?s)<a>.*?<a>", "(?s)<a>[^<]*<a>", ("<a>",))
    assert not starts_inside("(?s)\\s*</a>", "(?s)\\s*</a>", ("</a>",))
    assert always_holds('(?s)\\s*\\{\\s*"n"', '[ \\n]*\\{ *"n" *:')
    assert not always_holds('(?s)\\{"n"', '[ \\n]*\\{ *"n" *:')
    assert not always_holds('(?s)\\{"n"', '\\{"')  # (the written text may end before it holds)


pieces = st.one_of(
    st.text(alphabet="ab<>", min_size=1, max_size=3).map(F.const),
    st.sampled_from(["[ ]*", "[ab]", "a?", "(?:<|>)"]).map(F.regex),
    st.text(alphabet="ab<>", min_size=1, max_size=2).map(lambda text: F.optional(F.const(text))),
    st.text(alphabet="ab<>", min_size=1, max_size=2).map(lambda text: F.star(F.const(text))),
    st.just("free"),
)


def _format(drawn: list, blocking: tuple[str, ...]) -> dict:
    return F.sequence(*(F.any_text(blocking) if piece == "free" else piece for piece in drawn))


def _written(drawn: list, blocking: tuple[str, ...]):
    """Every short text the pieces write (free text: every short text holding no literal)."""
    options = []
    for piece in drawn:
        if piece == "free":
            options.append([t for t in SHORT if len(t) <= 2 and not any(b in t for b in blocking)])
        elif piece["type"] == "const_string":
            options.append([piece["value"]])
        elif piece["type"] == "optional":
            options.append(["", piece["content"]["value"]])
        elif piece["type"] == "star":
            options.append([piece["content"]["value"] * count for count in range(3)])
        else:
            options.append([t for t in SHORT if len(t) <= 2 and re.fullmatch(piece["pattern"], t)])
    for parts in itertools.product(*options):
        yield "".join(parts)


@given(drawn=st.lists(pieces, min_size=1, max_size=4), blocking=st.lists(st.text(alphabet="ab<> ", min_size=1, max_size=3), min_size=1, max_size=2))
@example(drawn=[F.const("<p>"), "free"], blocking=[">a"])  # (a tag's end, then free text)
@example(drawn=[F.const("<p>"), F.regex("[ ]*")], blocking=["> "])
def test_pieces_said_to_spell_no_literal_write_none(drawn, blocking):
    blocking = tuple(dict.fromkeys(blocking))
    spelled = spells(_format(drawn, blocking), blocking)
    if spelled is not None:
        return
    for text in _written(drawn, blocking):
        assert not any(literal in text for literal in blocking), text


def test_spells_answers_both_ways():
    assert spells(F.sequence(F.const("<p>"), F.any_text([">a"])), (">a",)) == ">a"
    assert spells(F.sequence(F.const("<p>"), F.any_text(["x"])), ("x",)) is None
    assert spells(F.sequence(F.const("<p>"), F.token(5), F.const("a")), (">a",)) is None  # (a token by id is no text)
