"""The per-state fast paths of a generated parser (Machine.feed's own test of a chunk, the state's
`_common_*` method, feed_text) read exactly what the state's scan would: the same parser class with
its fast paths off, fed the same chunks, gives the same events feed by feed, holds back the same
text, and ends with the same message (or raises the same exception class).

This checks the fast paths against the scan itself, with no interpreter in the loop, so it runs many
chunkings of many generated templates; the differential tests compare the scan with the interpreter.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtcompile
from examples import scaled
from rtcompile.runtime import Machine
from strategies import cases, known_format_cases, tool_call_cases


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


def scanning_only(parser_class: type) -> type:
    """The parser class with no fast path: every chunk goes through the state's scan."""
    return type(
        parser_class.__name__,
        (parser_class,),
        {
            "feed": Machine.feed,  # (not the generated one's test of the commonest chunk)
            "SINK_COMMON": None,
            "STATE_COMMONS": (None,) * len(parser_class.FIELD_NAMES),
        },
    )


def _outcome(action) -> tuple[str, Any]:
    try:
        return "ok", action()
    except Exception as error:  # (the class is what must agree)
        return "raised", type(error).__name__


def _canonical(value: Any) -> Any:
    """A comparable form that keeps what `==` blurs or breaks: exact types, float spelling (a nan
    value is equal to itself here), dict key order."""
    kind = type(value)
    if kind is dict:
        return ("dict", tuple((_canonical(k), _canonical(v)) for k, v in value.items()))
    if kind in (list, tuple):
        return (kind.__name__, tuple(_canonical(v) for v in value))
    if kind is float:
        return ("float", repr(value))
    return (kind.__name__, value)


def _compare_run(parser_class: type, run: Any, through_feed_text: bool) -> None:
    reference_class = scanning_only(parser_class)
    built = _outcome(lambda: reference_class(run.prefix, tools=run.tools))
    candidate = _outcome(lambda: parser_class(run.prefix, tools=run.tools))
    assert candidate[0] == built[0], (candidate, built)
    if built[0] != "ok":
        assert candidate[1] == built[1]
        return
    reference, parser = built[1], candidate[1]
    assert _canonical(parser.initial_events) == _canonical(reference.initial_events)
    for chunk in run.chunks:
        expected = _outcome(lambda: reference.feed(chunk))
        got = _outcome(lambda: _feed(parser, chunk, through_feed_text))
        assert _canonical(got) == _canonical(expected), (chunk, got, expected)
        if expected[0] != "ok":
            return
        assert parser.unread_text == reference.unread_text, chunk
        assert parser.current_field == reference.current_field, chunk
    assert _canonical(_outcome(parser.finalize)) == _canonical(_outcome(reference.finalize))


def _feed(parser: Any, chunk: str, through_feed_text: bool) -> list[dict]:
    """feed(chunk), or feed_text first as the servers call it: what it reads stands for the one
    region_chunk event feed would have given (none for "")."""
    if not through_feed_text:
        return parser.feed(chunk)
    taken = parser.feed_text(chunk)
    if taken is None:
        return parser.feed_declined(chunk)
    field, text = taken
    return [parser.chunk_event(text)] if text else []


@given(st.one_of(cases(), tool_call_cases(), known_format_cases()), st.booleans())
@settings(max_examples=scaled(1000), deadline=None)
def test_fast_paths_read_what_the_scan_reads(case, through_feed_text):
    loaded = _outcome(lambda: rtcompile.load(case.template))
    if loaded[0] != "ok":
        return  # (an invalid template: no parser to compare)
    for run in case.runs:
        _compare_run(loaded[1].ResponseParser, run, through_feed_text)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5", "gpt_oss", "gemma4"])
@given(data=st.data())
@settings(max_examples=scaled(200), deadline=None)
def test_bundled_fast_paths_read_what_the_scan_reads_in_any_chunking(name, data):
    """The benchmark's kind of generation (reasoning, content, tool calls, end markers), cut
    anywhere: every delimiter arrives split in every possible way."""
    module = rtcompile.load(rtcompile.template_for(name))
    text = _SAMPLES[name]
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=len(text) // 2)))
    chunks = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)])]
    run = type("Run", (), {"prefix": _PREFIXES[name], "tools": None, "chunks": chunks})
    _compare_run(module.ResponseParser, run, data.draw(st.booleans()))


_PREFIXES = {
    "qwen3": "<|im_start|>assistant\n",
    "qwen3_5": "<|im_start|>assistant\n<think>\n",
    "gpt_oss": "<|start|>assistant",
    "gemma4": "<|turn>model\n",
}
_SAMPLES = {
    "qwen3": (
        "<think>\nso x < 3 and </b> \n</think>\n\nSure  \n<tool_call>\n"
        '{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "g", '
        '"arguments": {}}\n</tool_call> \n<|im_end|>'
    ),
    "qwen3_5": (
        "so x < 3 and </b> \n</think>\n\nSure <b> \n\n<tool_call>\n<function=f>\n<parameter=a>\n"
        "1 < 2\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>"
        "\n</tool_call><|im_end|>"
    ),
    "gpt_oss": (
        "<|channel|>analysis<|message|>x < 3<|end|><|start|>assistant to=functions.f"
        '<|channel|>commentary json<|message|>{"a": 1}<|call|><|start|>assistant<|channel|>'
        "final<|message|>done <|x|><|return|>"
    ),
    "gemma4": (
        "<|channel>thought\nx < 3 <chan\n<channel|><|tool_call>call:f{a:<|\"|>1<|\"|>}"
        "<tool_call|>Sure <|tool <|tool_response>"
    ),
}


@pytest.mark.parametrize(
    "template",
    [
        # (lead characters that only a scan or the one-shot reader walks back over, in a state
        # without a fast path, or of a literal run no fast path names)
        {"fields": {"content": {"open_pattern": "(?=<a>)", "close": "<a>"}, "reasoning_content": {"open_pattern": "\\s*\\\n", "close": "<a>"}}, "start_anchor": "<|a|>\n"},
        {
            "fields": {
                "content": {"open_pattern": "[ \\t\\n]*(?:<a>|\\ )", "close": "<a>"},
                "reasoning_content": {"open": "<a>", "close": "<a>"},
                "tool_calls": {"open": "<a>", "close": "<a>"},
                "a": {"open_pattern": "\\s*<a>", "close": "<a>"},
            },
            "start_anchor": "<|a|>\n",
        },
    ],
)
def test_every_constant_of_lead_characters_a_module_uses_is_defined(template):
    """The module builds, streams (whole and a character at a time) and reads whole messages
    without a name it did not define; the streams and the one-shot reader agree."""
    module = rtcompile.load(template)
    text = "<a> \n<a> x"
    for chunks in ([text], list(text)):
        parser = module.ResponseParser("")
        for chunk in chunks:
            parser.feed(chunk)
        message, _ = parser.finalize()
        assert message == module.parse_response(text, prefix="")


@pytest.mark.parametrize(
    "chunks",
    [["<a>x</a>", " ", "<", "<", "y>z", "</b>"], ["<a>x</a> ", "<", "<y>z</b>"], ["<a>x</a> ", "<<y>z</b>"]],
)
def test_a_held_lead_character_that_begins_a_pattern_openers_literal_stays_held(chunks):
    """Outside regions, `\\s*<a>` holds a trailing space as its lead run and `\\ <<\\w+>` starts
    with that space: a chunk ending in a proper prefix of ` <<` leaves the space held with it
    (were it read, the null sink would drop it and the opener would never match)."""
    template = {
        "fields": {
            "content": {"open_pattern": "\\s*<a>", "close": "</a>"},
            "reasoning_content": {"open_pattern": "\\ <<\\w+>", "close": "</b>"},
        },
        "start_anchor": "<s>",
    }
    module = rtcompile.load(template)
    run = type("Run", (), {"prefix": "", "tools": None, "chunks": chunks})
    for through_feed_text in (False, True):
        _compare_run(module.ResponseParser, run, through_feed_text)
    parser = module.ResponseParser("")
    for chunk in chunks:
        parser.feed(chunk)
    assert parser.finalize()[0] == {"content": "x", "reasoning_content": "z"}
    assert module.parse_response("".join(chunks), prefix="") == {"content": "x", "reasoning_content": "z"}
