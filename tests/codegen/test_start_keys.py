"""A state's start literals told from region text by their keys (QuickCheck.keys): the first few
characters of each, where its first character alone is also the region's own markup (the `<` of
`<parameter=...>` inside a qwen3.5 call, whose close starts `</f`).

The generated test (no key occurs, and no proper prefix of one ends the text) must say what
StartLiterals.starts_nowhere says where no key occurs (where one does, it says nothing: the state's
scan, or its fast path's exact search, decides); and parsers whose delimiters are long literals sharing
their first characters with each other and with the text around them must read every chunk on
their fast paths as their scans read it (test_fast_paths' comparison, on templates made for it).
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

import rtcompile
from examples import scaled
from rtcompile.codegen import KEY_LENGTH, MAX_KEY_CHAIN, QuickCheck, may_start
from rtcompile.runtime.scanning import StartLiterals, may_start_at_front
from test_fast_paths import _compare_run, _outcome, private_compile_cache  # noqa: F401 (its fixture)

# A few first characters, and the rest drawn from few characters: literals share prefixes of every
# length, and text made of the same characters holds their keys and near misses of them.
_FIRST = "<["
_REST = "/|ab>"
_literals = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(_FIRST),
    st.text(_REST, min_size=0, max_size=8),
)


def _quick(literals: list[str]) -> QuickCheck:
    return QuickCheck(
        first=frozenset(literal[0] for literal in literals),
        first_const=None,
        lead=None,
        lead_hold=False,
        starts=tuple((literal, "") for literal in literals),
        starts_const="STARTS_X",
        tail=True,
    )


@given(st.lists(_literals, min_size=1, max_size=7, unique=True), st.text(_FIRST + _REST + "x ", max_size=14))
@settings(max_examples=scaled(2000), deadline=None)
def test_no_start_is_starts_nowhere(literals, text):
    quick = _quick(literals)
    namespace = {"text": text}
    if quick.keys_const is not None:
        namespace[quick.keys_const] = re.compile(quick.keys_pattern)
    assert all(len(key) <= KEY_LENGTH for key in quick.keys)
    keyless = eval(quick.keys_absent("text"), namespace)
    nowhere = StartLiterals(tuple(literals)).starts_nowhere(text)
    # (where a key occurs, no start literal need: the test then says nothing, and a scan decides)
    assert eval(quick.no_start("text"), namespace) == (keyless and nowhere)
    assert not (keyless and any(literal in text for literal in literals))  # (every key found)


def test_many_keys_are_one_search():
    quick = _quick([f"<{c}ab" for c in "abcdef"])
    assert len(quick.keys) > MAX_KEY_CHAIN
    assert quick.keys_const in quick.keys_absent("text")


@st.composite
def _keyed_cases(draw):
    """A template whose delimiters are literals and patterns of 4-9 characters that share first
    characters, and a text made of them, near misses of them and the characters they are made
    of, with its chunks."""
    opener, closer, call_open, call_close, end = draw(
        st.lists(_literals.filter(lambda s: len(s) >= 4), min_size=5, max_size=5, unique=True)
    )
    pattern_open = draw(st.booleans())
    template = {
        "start_anchor": "<|assistant|>\n",
        "fields": {
            "reasoning_content": {"open": opener, "close": closer, "content": "text"},
            "tool_calls": {
                **(
                    {"open_pattern": r"\s*" + re.escape(call_open) + r"(?P<name>[a-z]+)>"}
                    if pattern_open
                    else {"open": call_open}
                ),
                "close_pattern": r"\s*" + re.escape(call_close),
                "content": "text",
                "repeats": True,
                "transform": {"name": "{name}" if pattern_open else "call", "text": "{content}"},
            },
            "content": {"close_pattern": r"\s*" + re.escape(end), "content": "text"},
        }
    }
    pieces = [opener, closer, call_open + ("get>" if pattern_open else ""), call_close, end]

    def near_miss(sample: str) -> str:
        index = draw(st.integers(1, len(sample) - 1))
        if draw(st.booleans()):
            return sample[:index]
        return sample[:index] + draw(st.sampled_from(_REST + "x")) + sample[index + 1 :]

    parts = draw(
        st.lists(
            st.one_of(
                st.sampled_from(pieces),
                st.sampled_from(pieces).map(near_miss),
                st.text(_FIRST + _REST + "x \n", min_size=1, max_size=6),
            ),
            min_size=1,
            max_size=10,
        )
    )
    text = "".join(parts)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text) // 2)))
    chunks = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)])]
    return template, chunks


@given(_keyed_cases(), st.booleans())
@settings(max_examples=scaled(400), deadline=None)
def test_keyed_fast_paths_read_what_the_scan_reads(case, through_feed_text):
    template, chunks = case
    loaded = _outcome(lambda: rtcompile.load(template))
    if loaded[0] != "ok":
        return  # (delimiters the template rules refuse: no parser to compare)
    run = type("Run", (), {"prefix": "", "tools": None, "chunks": chunks})
    _compare_run(loaded[1].ResponseParser, run, through_feed_text)


@given(
    st.lists(_literals, min_size=1, max_size=4, unique=True),
    st.sampled_from(["", " \n"]),
    st.text(_FIRST + _REST + "x \n", max_size=12),
)
@settings(max_examples=scaled(1000), deadline=None)
def test_written_guard_is_may_start_at_front(literals, lead, text):
    """The commit guards the fast paths write out (codegen.may_start) say what the runtime's
    may_start_at_front says."""
    namespace = {"joined": text, "LEAD": lead}
    written = eval(may_start(tuple(literals), "LEAD" if lead else ""), namespace)
    assert written == may_start_at_front(text, tuple(literals), lead)
