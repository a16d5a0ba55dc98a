"""Character classes as the grammar writes them: the class a pattern or a string automaton means,
in a form both xgrammar releases read alike (0.2.7, SGLang's, clamps the characters of a negated
class to ASCII: a negated class that names any other character is written as its complement)."""

from __future__ import annotations

import re

from hypothesis import assume, given
from hypothesis import strategies as st

from rtcompile.grammar.charclass import class_source

chars = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=6)
ranges = st.lists(st.tuples(st.characters(exclude_categories=("Cs",)), st.characters(exclude_categories=("Cs",))).map(sorted).map(tuple), max_size=3)
probes = st.lists(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(chars, ranges, st.booleans(), probes)
def test_a_class_holds_exactly_the_characters_it_names(named, spans, negated, tried):
    assume(named or spans or negated)  # (an empty class is no class: never written)
    source = class_source(named, spans, negated)
    compiled = re.compile(source)
    for char in [*tried, *named, *(c for span in spans for c in span)]:
        inside = char in named or any(low <= char <= high for low, high in spans)
        assert bool(compiled.fullmatch(char)) == (inside != negated), (source, char)


@given(chars, ranges)
def test_a_negated_class_beyond_ascii_is_written_positive(named, spans):
    source = class_source(named, spans, negated=True)
    beyond = any(ord(c) >= 0x80 for c in named) or any(ord(high) >= 0x80 for _, high in spans)
    assert source.startswith("[^") == (not beyond and bool(named or spans))


def test_the_complement_leaves_out_surrogates_and_reaches_the_last_code_point():
    source = class_source("\uff5c", negated=True)
    assert "\\ud7ff\\ue000" in source and source.endswith("\U0010ffff]")
