"""The str.find tag reader (runtime/tags.py) against the regex engine.

Tag patterns of the reader's shape are generated from a tiny alphabet, so that the opening,
middle and closing literals, the optional characters and the key's stop characters collide,
overlap and prefix one another; texts are built from those same pieces. For every pattern and text
the reader must give exactly the (key, value) pairs `regex.finditer` gives, in order.
"""

from __future__ import annotations

import regex
from hypothesis import event, example, given
from hypothesis import strategies as st

from rtcompile.runtime.tags import tag_reader

ALPHABET = "<>/=ab\n "
literals = st.text(ALPHABET, min_size=1, max_size=4)
optional_chars = st.sampled_from(["", "", "\n", " ", ">", "a"])


@st.composite
def tag_patterns(draw) -> tuple[str, list[str]]:
    """A pattern of the reader's shape, and the literal pieces it is made of."""
    opening, middle, closing = draw(literals), draw(literals), draw(literals)
    before, after = draw(optional_chars), draw(optional_chars)
    if draw(st.booleans()):
        stops = draw(st.sets(st.sampled_from(ALPHABET), max_size=3)) | {middle[0]}
        key = "(?P<key>[^" + "".join(regex.escape(c) for c in sorted(stops)) + "]+)"
    else:
        key = "(?P<key>.*?)"
    parts = [regex.escape(opening), key, regex.escape(middle)]
    parts.append(regex.escape(before) + "?" if before else "")
    parts.append("(?P<value>.*?)")
    parts.append(regex.escape(after) + "?" if after else "")
    parts.append(regex.escape(closing))
    return "".join(parts), [opening, middle, closing, before, after]


@st.composite
def pattern_and_text(draw) -> tuple[str, str]:
    pattern, pieces = draw(tag_patterns())
    opening, middle, closing, before, after = pieces
    words = [piece for piece in pieces if piece] + ["key", "v", "x y"]
    noise = st.one_of(st.sampled_from(words), st.text(ALPHABET, max_size=3))
    # Whole tags as the pattern means them, and tags with a piece missing or doubled.
    tag = st.builds(
        lambda key, a, value, b: opening + key + middle + a + value + b + closing,
        st.sampled_from(["k", "key", "", "a b"]),
        st.sampled_from(["", before, before * 2]),
        st.text(ALPHABET, max_size=4),
        st.sampled_from(["", after, after * 2]),
    )
    chunks = draw(st.lists(st.one_of(tag, noise, noise), max_size=12))
    return pattern, "".join(chunks)


def finditer_pairs(pattern: str, text: str) -> list[tuple[str, str]]:
    return [m.group("key", "value") for m in regex.finditer(pattern, text, flags=regex.DOTALL)]


@example(case=("<parameter=(?P<key>[^>\\n]+)>\\n?(?P<value>.*?)\\n?</parameter>", "<parameter=a>\n\n</parameter>"))
@example(case=("<(?P<key>.*?)>\\n?(?P<value>.*?)\\n?<", "<a>\n<"))  # [A] given back: the close is right there
@example(case=("a(?P<key>[^b]+)b\\n?(?P<value>.*?)\\n?\\n", "axb\n\n\n"))  # the close starts with [B]
@given(case=pattern_and_text())
def test_tag_reader_finds_what_the_regex_engine_finds(case):
    pattern, text = case
    reader = tag_reader(pattern)
    assert reader is not None, pattern
    expected = finditer_pairs(pattern, text)
    event("tags found" if expected else "no tag")
    assert reader(text) == expected, (pattern, text)


def test_the_bundled_tag_patterns_have_a_reader():
    assert tag_reader("<parameter=(?P<key>[^>\\n]+)>\\n?(?P<value>.*?)\\n?</parameter>") is not None
    assert tag_reader('<parameter name="(?P<key>[^"]+)">(?P<value>.*?)</parameter>') is not None


def test_other_shapes_keep_the_regex_engine():
    for pattern in (
        r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>",  # a run between
        r"<(?P<key>[^>]*)>(?P<value>.*?)</(?P=key)>",  # a back reference
        r"<(?P<key>[^=]+)>(?P<value>.*?)</p>",  # the key's run could give back a character
        r"<(?P<key>\w+)>(?P<value>.*?)</p>",  # a class of its own
        r"(?i)<p=(?P<key>[^>]+)>(?P<value>.*?)</p>",  # flags
        r"<p=(?P<key>[^>]+)>(?P<value>.+?)</p>",  # a value of at least one character
        r"<p=(?P<name>[^>]+)>(?P<value>.*?)</p>",  # no key group
        r"<p=(?P<key>[^>]+)>(?P<value>.*?)</p>(x)",  # another group
    ):
        assert tag_reader(pattern) is None, pattern
