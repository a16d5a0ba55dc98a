"""A pattern delimiter's partial match carried from chunk to chunk (runtime/carry.py) says what the
`regex` module's partial search says, and the fast paths built on it read what the scan reads.

The automaton answers one question of a text (the held text and a chunk): would
`pattern.search(text, partial=True)` return a match that starts at 0 and runs into the end
(`held`)? `dead`: it would not, whatever follows; `unknown`: a complete match exists somewhere, and
the regex is asked. Patterns of the shapes it takes are generated here (characters, sets, `.`, `\\s`,
groups, alternation, greedy repeats), with texts made of their pieces, read whole and in any
chunking; patterns of the shapes it refuses (lazy and possessive repeats, anchors, lookarounds,
back references, flags, empty matches) must get no automaton.
"""

from __future__ import annotations

import os

import pytest
import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rtcompile
from examples import scaled
from rtcompile.runtime import regex_syntax as rs
from rtcompile.runtime.carry import carried_match

from test_fast_paths import _compare_run

_ALPHABET = "ab<>=/ \nctfol"


@pytest.fixture(autouse=True, scope="module")
def private_compile_cache(tmp_path_factory):
    """Each example compiles a new template: keep them out of the user's cache directory."""
    previous = os.environ.get("RTCOMPILE_CACHE_DIR")
    os.environ["RTCOMPILE_CACHE_DIR"] = str(tmp_path_factory.mktemp("rtcompile-cache"))
    yield
    if previous is None:
        del os.environ["RTCOMPILE_CACHE_DIR"]
    else:
        os.environ["RTCOMPILE_CACHE_DIR"] = previous


_ATOMS = st.one_of(
    st.sampled_from(["a", "b", "<", ">", "=", " ", "\\n", "\\s", "\\S", "."]),
    st.builds(
        lambda negated, chars: "[" + ("^" if negated else "") + "".join(chars).replace("\n", "\\n") + "]",
        st.booleans(),
        st.lists(st.sampled_from("ab<>= \n"), min_size=1, max_size=3, unique=True),
    ),
    st.sampled_from(["<tool>", "<f=", "</f>"]),
)
_GREEDY = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,2}"])


def _sequence(items: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(items, _GREEDY), min_size=1, max_size=4).map(
        lambda parts: "".join(f"(?:{item}){repeat}" if repeat and len(item) > 1 else item + repeat for item, repeat in parts)
    )


def _groups(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(lambda a, b: f"(?:{a}|{b})", _sequence(inner), _sequence(inner)),
        _sequence(inner).map(lambda body: f"({body})"),
        _sequence(inner).map(lambda body: f"(?P<name>{body})"),
    )


# The shapes the automaton takes: sequences of atoms, groups and alternations, greedy repeats.
PLAIN_PATTERNS = _sequence(st.recursive(_ATOMS, _groups, max_leaves=6))
# Each of these puts a part the automaton refuses into a plain pattern.
REFUSED_PARTS = st.sampled_from(
    ["a*?", "a+?", "[ab]{1,3}?", "a*+", "(?>ab)", "^", "$", "\\b", "\\A", "(?=a)", "(?!b)", "(?<=a)", "(a)\\1", "\\d", "\\w", "(?i:a)"]
)


def _held_by_regex(compiled, text: str) -> bool:
    m = compiled.search(text, partial=True)
    return m is not None and m.start() == 0 and (m.partial or m.end() == len(text))


@st.composite
def texts_for(draw, source: str) -> str:
    """Pieces of matches of `source` (whole, cut short) and characters of its alphabet."""
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 2))
        if kind == 0:
            pieces.append(draw(st.text(_ALPHABET, max_size=4)))
        else:
            sample = _sample(draw, rs.parse(source, regex.DOTALL).root)
            pieces.append(sample if kind == 1 else sample[: draw(st.integers(0, len(sample)))])
    return "".join(pieces)


def _sample(draw, seq) -> str:
    """A match of the sequence (a tree of `regex_syntax`), its characters from _ALPHABET where a
    class allows them. Drawn here rather than with `st.from_regex`, whose fullmatch filter can
    reject a pattern's samples for minutes."""
    out = []
    for node in seq.items:
        if isinstance(node, rs.Char):
            out.append(node.char)
        elif isinstance(node, rs.Group):
            out.append(_sample(draw, node.body))
        elif isinstance(node, rs.Alternation):
            out.append(_sample(draw, draw(st.sampled_from(node.branches))))
        elif isinstance(node, rs.Repeat):
            count = draw(st.integers(node.min, node.min + 2 if node.max is None else node.max))
            out.extend(_sample(draw, node.body) for _ in range(count))
        else:  # (one character of a class)
            source = rs.to_source(node)
            allowed = [c for c in _ALPHABET + "xyz\t" if regex.fullmatch(source, c, regex.DOTALL)]
            out.append(draw(st.sampled_from(allowed)) if allowed else "")
    return "".join(out)


def _chunks(draw, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text))))
    return [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)]) if text[start:end]]


@given(st.data())
@settings(max_examples=scaled(600), deadline=None)
def test_carried_state_is_the_regex_partial_search(data):
    """In any chunking, each prefix of the text read so far is `held` exactly where the partial
    search holds it from the start, `unknown` only where a complete match exists somewhere, and
    `dead` ones stay so."""
    source = data.draw(PLAIN_PATTERNS)
    compiled = regex.compile(source, regex.DOTALL)
    assume(compiled.match("") is None)  # (a pattern that matches "" has no automaton)
    automaton = carried_match(source)
    assert automaton is not None, source
    text = data.draw(texts_for(source))
    state, read = automaton.start, ""
    for chunk in _chunks(data.draw, text):
        state = automaton.advance(state, chunk)
        read += chunk
        assert state is automaton.advance(automaton.start, read) or state.settled
        if state.unknown:
            assert compiled.search(read) is not None, (source, read)
        else:
            assert state.held == _held_by_regex(compiled, read), (source, read, state.held)


@given(PLAIN_PATTERNS, REFUSED_PARTS, st.integers(0, 2))
@settings(max_examples=scaled(300), deadline=None)
def test_patterns_with_a_refused_part_get_no_automaton(plain, refused, where):
    source = (plain + refused, refused + plain, f"(?:{plain}|{refused}b)")[where]
    try:
        regex.compile(source)
    except regex.error:
        assume(False)
    assert carried_match(source) is None, source


def test_patterns_that_match_nothing_but_empty_text_get_no_automaton():
    assert carried_match("a*") is None
    assert carried_match("(?:a|)") is None
    assert carried_match("\\s*<a>") is not None


@given(st.data())
@settings(max_examples=scaled(30), deadline=None)  # (each example generates and compiles a module: seconds)
def test_fast_paths_that_carry_a_match_read_what_the_scan_reads(data):
    """Templates whose open and close delimiters are generated patterns of the shapes carried (with
    a literal start, as a tool call's opener has, or without), fed texts made of their matches cut
    anywhere: the fast paths give the scan's events feed by feed."""
    # (no named groups: a template must then say where they go; an end that every match needs)
    # (and no repeat inside a repeat: nested quantifiers make the scan's regex backtrack for
    # minutes on some texts, which says nothing about the fast paths)
    unnamed = _sequence(_ATOMS)
    ends = st.sampled_from([">", "=", "(?:>|</f>)"])
    opener = data.draw(st.sampled_from(["", "\\s*", "<c>"])) + data.draw(unnamed) + data.draw(ends)
    closer = data.draw(st.sampled_from(["", "\\s*"])) + data.draw(unnamed) + data.draw(ends)
    for source in (opener, closer):
        assert carried_match(source) is not None, source
    template = {"start_anchor": "<s>", "fields": {"reasoning_content": {"open_pattern": opener, "close_pattern": closer}, "content": {}}}
    loaded = None
    try:
        loaded = rtcompile.load(template)
    except rtcompile.TemplateError:  # (the rare pair the front end refuses)
        assume(False)
    pieces = [data.draw(texts_for(source)) for source in data.draw(st.lists(st.sampled_from([opener, closer]), max_size=4))]
    text = "".join(piece + data.draw(st.text(_ALPHABET, max_size=3)) for piece in pieces)
    assume(text)
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": _chunks(data.draw, text)})
    _compare_run(loaded.ResponseParser, run, data.draw(st.booleans()))
