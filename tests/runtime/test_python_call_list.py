"""The python-call-list content parser (transformers 5.24.0) against the interpreter's.

`[name(key=value, ...), ...]` has a deliberately strict grammar, so two implementations agree only
if they agree on every corner: values (or the exception and its exact message, which names a
position) are compared for generated texts that are mostly valid and broken in one place, for
arbitrary strings over the grammar's own characters, and for a table of the hard cases (limits of
integers, floats that overflow, every escape, surrogate pairs and lone surrogates, both quotes,
names with dots and dashes, trailing text, whitespace inside and outside tokens). A few cases also
pin the value the grammar prescribes, so that the two cannot agree on a wrong answer unnoticed.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from transformers.utils.chat_parsing import content_parsers as interpreter_parsers
from transformers.utils.chat_parsing import parse_response as interpreter_parse_response

import rtcompile
from rtcompile.runtime import RegionParseError
from rtcompile.runtime.content_parsers import CALL_LIST_MAX_DEPTH, make_parser
from strategies import CALL_LIST_ATOMS, CALL_SPACE, FOREIGN_SPACE, call_list_payloads

ours = make_parser("python-call-list", {})


def interpreter(text: str):
    return interpreter_parsers.parse_content(text, "python-call-list", {})


def typed(value) -> str:
    """Equality that tells 1, 1.0 and True apart (and -0.0 from 0.0)."""
    return repr(value)


def outcome(parse, text: str):
    try:
        return "value", typed(parse(text))
    except Exception as error:  # noqa: BLE001 - the class and message are what is compared
        return type(error).__name__, str(error)


def assert_same(text: str) -> None:
    assert outcome(ours, text) == outcome(interpreter, text)


# ---- generated texts ---------------------------------------------------------------------------


@given(call_list_payloads())
def test_generated_call_lists_parse_like_the_interpreter(text):
    assert_same(text)


# The grammar's own characters, so that random strings often come close to valid call lists.
GRAMMAR_ALPHABET = "[](){}=,:.'\"\\-_ \t\n\r0123456789eE+aftnurlsNTF\xa0\u2028😀\ud800"
near_valid = st.one_of(
    st.text(GRAMMAR_ALPHABET, max_size=30),
    st.builds(
        lambda head, body, tail: f"{head}[f({body})]{tail}",
        st.text(GRAMMAR_ALPHABET, max_size=4),
        st.text(GRAMMAR_ALPHABET, max_size=20),
        st.text(GRAMMAR_ALPHABET, max_size=4),
    ),
    st.builds(lambda atom, space: f"[f(a={space}{atom}{space})]", st.sampled_from(CALL_LIST_ATOMS), st.sampled_from(CALL_SPACE + FOREIGN_SPACE)),
)


@given(near_valid)
@example("[f(a='\\ud83d\\ude00')]")
@example("[f(a='\\udc00')]")
def test_arbitrary_texts_parse_or_fail_like_the_interpreter(text):
    assert_same(text)


# ---- the hard cases, each also pinned to what the grammar says -----------------------------------

MAX = 2**53 - 1
PINNED = [
    ("[]", []),
    (" \t\r\n[ \n]\n ", []),
    ("[f()]", [{"name": "f", "arguments": {}}]),
    ("[ns.get-weather(city='Paris')]", [{"name": "ns.get-weather", "arguments": {"city": "Paris"}}]),
    ("[f( a = 1 , b = 'x' ) , g ( ) ]", [{"name": "f", "arguments": {"a": 1, "b": "x"}}, {"name": "g", "arguments": {}}]),
    (f"[f(a={MAX}, b=-{MAX})]", [{"name": "f", "arguments": {"a": MAX, "b": -MAX}}]),
    ("[f(a=1e-400, b=-0, c=-0.0, d=1E+2)]", [{"name": "f", "arguments": {"a": 0.0, "b": 0, "c": -0.0, "d": 100.0}}]),
    ("[f(a=True, b=true, c=False, d=false, e=None, f=null)]",
     [{"name": "f", "arguments": {"a": True, "b": True, "c": False, "d": False, "e": None, "f": None}}]),
    ("[f(a='\\\\\\'\\\"\\/\\b\\f\\n\\r\\t')]", [{"name": "f", "arguments": {"a": "\\'\"/\b\f\n\r\t"}}]),
    ("[f(a=\"it's\", b='say \"hi\"')]", [{"name": "f", "arguments": {"a": "it's", "b": 'say "hi"'}}]),
    ("[f(a='\\u00e9\\ud83d\\ude00\\uD83D\\uDE00')]", [{"name": "f", "arguments": {"a": "é😀😀"}}]),
    ("[f(a={'k': [1, {'n': None}]})]", [{"name": "f", "arguments": {"a": {"k": [1, {"n": None}]}}}]),
    ("[f(a=" + "[" * CALL_LIST_MAX_DEPTH + "]" * CALL_LIST_MAX_DEPTH + ")]", None),
]


@pytest.mark.parametrize("text, expected", PINNED)
def test_valid_call_lists_give_the_grammars_value(text, expected):
    assert_same(text)
    if expected is not None:
        assert typed(ours(text)) == typed(expected)


REFUSED = [
    ("", "expected '['"),
    ("[f(a=1)] trailing", "unexpected content after the closing ']'"),
    ("[f(a=1)]\xa0", "unexpected content after the closing ']'"),  # only [ \t\n\r] is whitespace
    ("[f(\u2028a=1)]", "expected a keyword argument"),
    ("[f(1)]", "expected a keyword argument"),  # positional arguments
    ("[f(a=1,)]", "expected a keyword argument"),  # trailing comma in the call
    ("[f(a=1),]", "expected a function name"),  # trailing comma in the list
    ("[f(a=[1,])]", "expected a string, number"),
    ("[f(a=1, a=2)]", "repeated name 'a'"),
    ("[f(a={'k': 1, 'k': 2})]", "repeated name 'k'"),
    ("[f(a={1: 2})]", "dict keys must be strings"),
    (f"[f(a={MAX + 1})]", "integer outside the range"),
    (f"[f(a=-{MAX + 1})]", "integer outside the range"),
    ("[f(a=" + "9" * 400 + ")]", "integer outside the range"),
    ("[f(a=1e309)]", "number too large"),
    ("[f(a=-1e400)]", "number too large"),
    ("[f(a=01)]", "expected ','"),
    ("[f(a=.5)]", "expected a string, number"),
    ("[f(a=+1)]", "expected a string, number"),
    ("[f(a=nan)]", "expected a string, number"),
    ("[f(a=Truex)]", "expected a string, number"),
    ("[f(a='line\nbreak')]", "invalid string"),
    ("[f(a='unterminated)]", "invalid string"),
    ("[f(a='\\x41')]", "unsupported escape '\\\\x'"),
    ("[f(a='\\u12')]", "unsupported escape '\\\\u'"),
    ("[f(a='\\\n')]", "unsupported escape"),
    ("[f(a='\\ud83d')]", "lone surrogate escape"),
    ("[f(a='\\udc00x')]", "lone surrogate escape"),
    ("[f(a='\\ud83d\\u0041')]", "lone surrogate escape"),
    ("[f(a='\ud800')]", "lone surrogate in the string"),
    ("[f.(a=1)]", "expected '('"),
    ("[f-(a=1)]", "expected '('"),
    ("[f(a=" + "[" * (CALL_LIST_MAX_DEPTH + 1) + "]" * (CALL_LIST_MAX_DEPTH + 1) + ")]", "nested more than 100"),
    ("[f(a=" + "{'k':" * (CALL_LIST_MAX_DEPTH + 1) + "1" + "}" * (CALL_LIST_MAX_DEPTH + 1) + ")]", "nested more than 100"),
    ("f(a=1)", "expected '['"),
]


@pytest.mark.parametrize("text, message", REFUSED)
def test_refused_call_lists_fail_with_the_interpreters_error(text, message):
    assert_same(text)
    with pytest.raises(ValueError, match="^python-call-list: .* at position [0-9]+\\.\nContent: ") as caught:
        ours(text)
    assert message in str(caught.value)


def test_the_error_names_the_position_the_reader_stood_at():
    with pytest.raises(ValueError) as caught:
        ours("[f(a=1)]  x")
    assert "at position 10." in str(caught.value)


@given(
    st.lists(st.sampled_from(CALL_SPACE), min_size=12, max_size=12),
    st.sampled_from(["'x'", "1", "[1, 2]", "{'k': None}", "True"]),
)
def test_whitespace_between_tokens_changes_nothing(spaces, value):
    pieces = ["[", "f", "(", "a", "=", value, ",", "b", "=", "2", ")", "]"]
    text = "".join(space + piece for space, piece in zip(spaces, pieces))
    assert typed(ours(text)) == typed(ours("".join(pieces)))
    assert_same(text)


@given(st.sampled_from(FOREIGN_SPACE), st.integers(0, 11))
def test_other_whitespace_is_refused(space, where):
    pieces = ["[", "f", "(", "a", "=", "1", ",", "b", "=", "2", ")", "]"]
    pieces.insert(where, space)
    text = "".join(pieces)
    with pytest.raises(ValueError):
        ours(text)
    assert_same(text)


# ---- through a compiled template, like every content parser --------------------------------------

TEMPLATE = {
    "start_anchor": "<|assistant|>",
    "fields": {
        "content": {"close": "<|end|>"},
        "tool_calls": {
            "open": "<|calls|>",
            "close": "<|/calls|>",
            "content": "python-call-list",
            "transform_each": True,
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}},
        },
    },
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"days": {"type": "integer"}, "city": {"type": "string"}}},
        },
    }
]


@given(call_list_payloads(), st.booleans())
def test_compiled_templates_match_the_interpreter_whole_and_streamed(payload, with_tools):
    text = f"Hi<|calls|>{payload}<|/calls|>done<|end|>"
    tools = TOOLS if with_tools else None
    try:
        expected = ("value", json.dumps(interpreter_parse_response(text, TEMPLATE, prefix="", tools=tools), sort_keys=True))
    except Exception as error:  # noqa: BLE001
        expected = (type(error).__name__, None)
    for stream in (False, True):
        try:
            if stream:
                parser = rtcompile.ResponseParser(TEMPLATE, "", tools=tools)
                for character in text:
                    parser.feed(character)
                message = parser.finalize()[0]
            else:
                message = rtcompile.parse_response(text, TEMPLATE, prefix="", tools=tools)
            got = ("value", json.dumps(message, sort_keys=True))
        except RegionParseError as error:  # a ValueError naming the field and its text
            assert isinstance(error, ValueError)
            got = ("ValueError", None)
        assert got == expected


def test_tool_schemas_coerce_string_arguments():
    text = "<|calls|>[get_weather(days='3', city='Paris')]<|/calls|><|end|>"
    message = rtcompile.parse_response(text, TEMPLATE, prefix="", tools=TOOLS)
    assert message["tool_calls"][0]["function"]["arguments"] == {"days": 3, "city": "Paris"}
    assert message == interpreter_parse_response(text, TEMPLATE, prefix="", tools=TOOLS)


def test_a_broken_call_list_is_kept_with_errors_keep():
    text = "<|calls|>[get_weather(days=3,)]<|/calls|>after<|end|>"
    message = rtcompile.parse_response(text, TEMPLATE, prefix="", errors="keep")
    assert message["content"] == "after"
    (record,) = message["rtcompile_parse_errors"]
    assert record["raw"] == "[get_weather(days=3,)]"
    assert "expected a keyword argument" in record["error"]
