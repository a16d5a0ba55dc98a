"""The parse options as one frozen object: given as `options=`, as keywords, or both (keywords
laid over the object), to the public functions and a generated module's own; bad options are one
clear error."""

from __future__ import annotations

import dataclasses

import pytest

import rtcompile
from rtcompile import ParseOptions

TEMPLATE = {
    "start_anchor": "<|a|>",
    "fields": {
        "content": {"content": "text"},
        "calls": {"open": "<c>", "close": "</c>", "content": "json", "optional": True},
    },
}
PROMPT = "<|a|>"
BROKEN = "hi<c>{bad</c>bye"


def test_options_as_an_object_are_the_options_as_keywords():
    by_object = rtcompile.parse_response(BROKEN, TEMPLATE, prefix=PROMPT, options=ParseOptions(errors="keep"))
    by_keyword = rtcompile.parse_response(BROKEN, TEMPLATE, prefix=PROMPT, errors="keep")
    assert by_object == by_keyword
    assert by_object["rtcompile_parse_errors"][0]["raw"] == "{bad"
    with pytest.raises(ValueError):  # (the default is strict: the interpreter's behaviour)
        rtcompile.parse_response(BROKEN, TEMPLATE, prefix=PROMPT)


def test_keywords_are_laid_over_the_object():
    keep = ParseOptions(errors="keep")
    with pytest.raises(ValueError):
        rtcompile.parse_response(BROKEN, TEMPLATE, prefix=PROMPT, options=keep, errors="strict")
    parser = rtcompile.ResponseParser(TEMPLATE, PROMPT, options=keep, report_closers=True)
    events = parser.feed(BROKEN) + parser.finalize()[1]
    closes = [e for e in events if e["type"] == "region_close" and e["field"] == "calls"]
    assert closes[0]["closer"] == "</c>" and closes[0]["error"]


def test_a_generated_module_takes_the_same_options():
    module = rtcompile.load(TEMPLATE)
    options = ParseOptions(errors="keep", timeout=5.0)
    assert module.parse_response(BROKEN, prefix=PROMPT, options=options) == rtcompile.parse_response(BROKEN, TEMPLATE, prefix=PROMPT, errors="keep")
    parser = module.ResponseParser(PROMPT, options=ParseOptions(eager=True))
    assert any(e["type"] == "region_open" for e in parser.feed("a<c>"))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: ParseOptions(errors="lenient"), ValueError, "errors must be 'strict' or 'keep'"),
        (lambda: ParseOptions(timeout=0), ValueError, "timeout must be a positive number"),
        (lambda: ParseOptions(timeout="5"), ValueError, "timeout must be a positive number"),
        (lambda: rtcompile.parse_response("x", TEMPLATE, prefix=PROMPT, eror="keep"), TypeError, "unexpected keyword argument 'eror'"),
        (lambda: rtcompile.parse_response("x", TEMPLATE, prefix=PROMPT, options={"errors": "keep"}), TypeError, "options must be a ParseOptions"),
        (lambda: rtcompile.parse_response("x", TEMPLATE, prefix=PROMPT, refuse_unknown_ids=True), TypeError, "give tokenizer="),
    ],
)
def test_bad_options_are_one_line(call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_options_are_frozen():
    options = ParseOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.errors = "keep"  # type: ignore[misc]
