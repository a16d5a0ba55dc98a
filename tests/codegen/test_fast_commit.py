"""Two of feed's fast paths, checked against the same parser with its fast paths off:

* a state's fast path that finds a pattern delimiter's complete match at the start of the unread
  text, where no other delimiter of the state may match, whole or partly (`may_start_at_front`),
  hands it to Machine._commit_found, which commits it without the state's scan;
* the generated feed reads a chunk with no first character of the state's delimiters that ends in
  a run of lead characters (held back), or that follows such a run held, without Machine.feed.

Both must give the events, held text and message the scan gives, feed by feed.
"""

from __future__ import annotations

import os

import pytest
import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rtcompile
from examples import scaled
from rtcompile.runtime import Machine, may_start_at_front

from test_carried_match import _chunks
from test_fast_paths import _compare_run, scanning_only


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


@pytest.fixture
def commits_found(monkeypatch):
    """Counts the chunks committed by Machine._commit_found (the fast path's commit)."""
    calls = []
    original = Machine._commit_found

    def counting(self, found):
        calls.append(found[1][1][:4])
        return original(self, found)

    monkeypatch.setattr(Machine, "_commit_found", counting)
    return calls


# ---- may_start_at_front: the regex's anchored partial match of `[lead]*(?:literals)` -----------

_LEADS = st.sampled_from(["", " ", " \n", "\t "])
_LITERAL_CHARS = "<>/ab\n "


@given(_LEADS, st.lists(st.text(_LITERAL_CHARS, min_size=1, max_size=4), min_size=1, max_size=3), st.text(_LITERAL_CHARS, max_size=8))
@settings(max_examples=scaled(1000), deadline=None)
def test_may_start_at_front_is_the_anchored_partial_match(lead, literals, text):
    assume(not any(literal[0] in lead for literal in literals))  # (what the code generator requires)
    lead_class = f"[{regex.escape(lead)}]*" if lead else ""
    pattern = regex.compile(lead_class + "(?:" + "|".join(map(regex.escape, literals)) + ")")
    expected = pattern.match(text, partial=True) is not None
    assert may_start_at_front(text, tuple(literals), lead) == expected


# ---- the fast commit, on templates whose delimiters share start literals -------------------------

# Delimiters of one state that start alike (with and without a lead run, literal prefixes that
# extend each other), so that the guard must refuse as often as it lets a commit through.
_STARTS = st.sampled_from(["<t", "<to>", "<tx", "<a>", "<to"])
_LEAD_PARTS = st.sampled_from(["", "\\s*"])
# (mostly patterns the fast path carries; "" and "=(?:ab|a)>" make literals and literal runs)
_RESTS = st.sampled_from(["", "[a-z]+>", "=(?:ab|a)>", "\\s*<f=[^>\\n]+>", "\\s*<f=[^>\\n]+>", "(?:a|b)*>", "(?:a|b)*>"])


def _delimiter(lead: str, start: str, rest: str) -> dict:
    if not lead and not rest:
        return {"literal": start}
    return {"pattern": lead + regex.escape(start) + rest}


def _text_for(draw, lead: str, start: str, rest: str) -> str:
    """A match of the delimiter, or a near miss (its start alone, cut short)."""
    body = {"": "", "[a-z]+>": "ab>", "=(?:ab|a)>": "=a>", "\\s*<f=[^>\\n]+>": "\n<f=x>", "(?:a|b)*>": "ab>"}[rest]
    whole = (draw(st.sampled_from(["", " ", "\n\n"])) if lead else "") + start + body
    return draw(st.sampled_from([whole, whole, whole[: max(1, len(whole) - 2)]]))


@given(st.data())
@settings(max_examples=scaled(60), deadline=None)  # (each example compiles a module)
def test_fast_commits_read_what_the_scan_reads(data):
    opens = [(data.draw(_LEAD_PARTS), data.draw(_STARTS), data.draw(_RESTS)) for _ in range(3)]
    fields = {}
    for name, (lead, start, rest) in zip(["reasoning_content", "tool_calls", "content"], opens):
        delimiter = _delimiter(lead, start, rest)
        spec = {"close": "</e>"}
        if "literal" in delimiter:
            spec["open"] = delimiter["literal"]
        else:
            spec["open_pattern"] = delimiter["pattern"]
        fields[name] = spec
    template = {"start_anchor": "<s>", "fields": fields}
    try:
        loaded = rtcompile.load(template)
    except rtcompile.TemplateError:  # (delimiters the front end refuses together)
        assume(False)
    pieces = [_text_for(data.draw, *data.draw(st.sampled_from(opens))) for _ in range(data.draw(st.integers(1, 5)))]
    # (mostly text after a match, and the close: the fast path commits a match with text after it)
    after = st.sampled_from(["", "x", " y ", "x</e>", "</e>", " </e>z", "x </e>"])
    text = "".join(piece + data.draw(after) for piece in pieces)
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": _chunks(data.draw, text)})
    _compare_run(loaded.ResponseParser, run, data.draw(st.booleans()))


_STREAMS = {
    "qwen3_5": (
        "<|im_start|>assistant\n<think>\n",
        "so x < 3 </think>\n\nSure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n"
        "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call><|im_end|>",
        4,  # (two opens, two closes of tool calls)
    ),
    "gpt_oss": (
        "<|start|>assistant",
        "<|channel|>analysis<|message|>x < 3<|end|><|start|>assistant to=functions.f<|channel|>commentary "
        'json<|message|>{"a": 1}<|call|><|start|>assistant to=functions.g<|channel|>commentary json'
        "<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>done<|return|>",
        2,  # (the two call headers, a pattern; the other delimiters are literals)
    ),
    "gemma4": (
        "<|turn>model\n",
        '<|channel>thought\nx<channel|><|tool_call>call:f{a:<|"|>1<|"|>}<tool_call|><|tool_call>call:g{}'
        "<tool_call|>Sure<turn|>",
        2,  # (the two call openers)
    ),
}


@pytest.mark.parametrize("name", sorted(_STREAMS))
def test_bundled_delimiters_written_in_pieces_are_committed_by_the_fast_path(name, commits_found):
    """Each pattern delimiter arrives in pieces, its last piece with text after it: the fast path
    commits it (no scan), and the parser reads what the one with no fast path reads."""
    prefix, text, expected_commits = _STREAMS[name]
    module = rtcompile.load(rtcompile.template_for(name))
    chunks = [text[i : i + 3] for i in range(0, len(text), 3)]
    run = type("Run", (), {"prefix": prefix, "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, False)
    assert len(commits_found) >= expected_commits, commits_found


def test_a_delimiter_that_may_also_start_there_leaves_the_commit_to_the_scan(commits_found):
    """`\\s*<to>[a-z]+>` matches at the start, but the literal `<to>ab>z` of another field could
    too: the scan decides (longest wins), not the fast path."""
    template = {
        "start_anchor": "<s>",
        "fields": {
            "reasoning_content": {"open_pattern": "\\s*<to>[a-z]+>", "close": "</e>"},
            "content": {"open": "<to>ab>z", "close": "</e>"},
        },
    }
    module = rtcompile.load(template)
    chunks = ["<to", ">ab", ">z", "x</e>"]
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, False)
    assert commits_found == []
    parser = module.ResponseParser("<s>")
    for chunk in chunks:
        parser.feed(chunk)
    assert parser.finalize()[0] == {"content": "x"}


# ---- the generated feed's reading of lead runs ---------------------------------------------------


def test_chunks_ending_in_whitespace_are_read_by_the_generated_feed(monkeypatch):
    """qwen3.5's content and tool calls hold a trailing whitespace run (the \\s* of
    \\s*<tool_call>): words ending in a space, and the words after them, never reach Machine.feed,
    and the events are those of the parser with no fast path."""
    module = rtcompile.load(rtcompile.template_for("qwen3_5"))
    words = ["Sure ", "thing, ", "let ", "me ", "look. \n", "Then ", "more", " words ", "  "]
    prefix = "<|im_start|>assistant\n<think>\n"
    chunks = ["x</think>", "\n\nA", *words, "<|im_end|>"]
    reference = scanning_only(module.ResponseParser)(prefix)
    expected = [reference.feed(chunk) for chunk in chunks]
    reached = []
    original = Machine.feed

    def spying(self, text):
        reached.append(text)
        return original(self, text)

    monkeypatch.setattr(Machine, "feed", spying)
    parser = module.ResponseParser(prefix)
    got = [parser.feed(chunk) for chunk in chunks]
    assert got == expected
    assert not set(words[:-1]) & set(reached), reached  # (a chunk of spaces alone after a held run waits in pieces: Machine.feed)
    assert parser.finalize() == reference.finalize()


# ---- the generated feed's holding of a literal being written ------------------------------------

_LITERALS = st.sampled_from(["<x>", "<x>tail", "<xy>", "x>t", "<|a|>", "<|a|>b<|c|>", "<|c|>"])


@given(st.data())
@settings(max_examples=scaled(60), deadline=None)  # (each example compiles a module)
def test_literals_being_written_are_held_as_the_scan_holds_them(data):
    """Literal delimiters, some of whose literals occur inside others (`<x>` in `<x>tail`: that
    delimiter's search finds the shorter one complete, so its longer one being written is not
    held), fed texts of their pieces cut anywhere: the parser reads what the scan reads."""
    opens = [data.draw(st.lists(_LITERALS, min_size=1, max_size=3, unique=True)) for _ in range(2)]
    closes = data.draw(st.lists(_LITERALS, min_size=1, max_size=2, unique=True))
    template = {
        "start_anchor": "<s>",
        "fields": {
            "reasoning_content": {"open": opens[0], "close": closes},
            "tool_calls": {"open": opens[1], "close": closes, "content": "text", "repeats": True},
            "content": {},
        },
    }
    try:
        loaded = rtcompile.load(template)
    except rtcompile.TemplateError:  # (delimiters the front end refuses together)
        assume(False)
    pieces = data.draw(st.lists(st.sampled_from([*opens[0], *opens[1], *closes, "x", "<", " t"]), min_size=1, max_size=8))
    text = "".join(pieces)
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": _chunks(data.draw, text)})
    _compare_run(loaded.ResponseParser, run, data.draw(st.booleans()))


def test_a_literal_inside_another_of_its_delimiter_is_not_held_as_its_start():
    """`<x>` is complete inside `<x>t`, the start of `<x>tail`: the delimiter's search finds it,
    and the scan commits it; so does the parser with its fast paths."""
    template = {"start_anchor": "<s>", "fields": {"reasoning_content": {"open": ["<x>tail", "<x>"], "close": "</x>"}, "content": {}}}
    module = rtcompile.load(template)
    chunks = ["a<", "x", ">t", "ai", "l b</x>c"]
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, False)
    parser = module.ResponseParser("<s>")
    events = [parser.feed(chunk) for chunk in chunks]
    assert {"type": "region_open", "field": "reasoning_content"} in events[2]


def test_a_literal_being_written_is_held_by_the_generated_feed(monkeypatch):
    """gpt-oss's `<|channel|>analysis<|message|>` in pieces: after the first, the held text and each
    piece are still its start, held without Machine.feed; the events are the scan's."""
    module = rtcompile.load(rtcompile.template_for("gpt_oss"))
    chunks = ["<|chan", "nel|>a", "nalys", "is<|me", "ssage|", ">x <", "|end|>"]
    reference = scanning_only(module.ResponseParser)("<|start|>assistant")
    expected = [reference.feed(chunk) for chunk in chunks]
    reached = []
    original = Machine.feed

    def spying(self, text):
        reached.append(text)
        return original(self, text)

    monkeypatch.setattr(Machine, "feed", spying)
    parser = module.ResponseParser("<|start|>assistant")
    assert [parser.feed(chunk) for chunk in chunks] == expected
    assert not set(chunks[1:5]) & set(reached), reached
    assert parser.finalize() == reference.finalize()


def test_literal_delimiters_at_the_start_are_committed_by_the_fast_path(commits_found):
    """gpt-oss's channel openers and end markers (literals) arrive in pieces and end a chunk, or
    have text after them: the fast path commits each (the header's automaton shows the call
    opener cannot match there), and the parser reads what the scan reads."""
    module = rtcompile.load(rtcompile.template_for("gpt_oss"))
    chunks = ["<|chan", "nel|>analysis<|mes", "sage|>", "x <", "|end|>", "<|start|>assistant<|chan", "nel|>final<|message|>ok", "<|return|>"]
    run = type("Run", (), {"prefix": "<|start|>assistant", "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, False)
    # (`<|channel|>final<|message|>` follows `<|start|>assistant`, held as the start of a call
    # header: not at the start of the unread text, so the scan commits it)
    assert [(index, is_open) for _, _, index, is_open in commits_found] == [(0, True), (0, False), (2, False)]


def test_a_literal_that_a_pattern_may_extend_is_left_to_the_scan(commits_found):
    """`<t>` at the start, where `<t>[a-z]+>` may still be matching: the scan holds it (the
    pattern's partial match), and so does the parser with its fast paths."""
    template = {
        "start_anchor": "<s>",
        "fields": {
            "reasoning_content": {"open": "<t>", "close": "</e>"},
            "tool_calls": {"open_pattern": "<t>[a-z]+>", "close": "</e>", "content": "text", "repeats": True},
            "content": {},
        },
    }
    module = rtcompile.load(template)
    chunks = ["<", "t>ab", "c>d</e>", "<t>", " x</e>"]
    run = type("Run", (), {"prefix": "<s>", "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, False)
    parser = module.ResponseParser("<s>")
    for chunk in chunks:
        parser.feed(chunk)
    assert parser.finalize()[0] == {"tool_calls": ["d"], "reasoning_content": "x"}
    assert (0, True) not in [(index, is_open) for _, _, index, is_open in commits_found]
