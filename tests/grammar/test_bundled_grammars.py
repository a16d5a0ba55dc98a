"""Every bundled template's grammar, walked with xgrammar's matcher and parsed by the interpreter.

For each template, tool choice and `parallel_tool_calls`, random walks through the structural tag
(control tokens favoured, and spelled out with ordinary tokens wherever the grammar lets them) must
parse, by transformers 5.25.0's interpreter in token-id mode, into a message whose calls satisfy
the request: at least one where forced, only the named tool, none for "none", at most one without
parallel calls, every call a tool's, its arguments valid against the tool's schema. The same holds
in text mode (no tokenizer: delimiters are text). A grammar that let a spelled-out control token
stand for a delimiter, or JSON that swallowed a closer, would fail here.
"""

from __future__ import annotations

import json
import random

import pytest
from transformers.utils.chat_parsing import parse_response as interpreter_parse

import rtcompile
from grammar_walk import Walker, check_calls, family_tokenizer, message_calls, text_of
from rtcompile.library import template_names

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "exact": {"type": "boolean"},
                    "limit": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query", "exact"],
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},  # (no parameters)
]
CHOICES = ["auto", "required", "none", {"type": "function", "function": {"name": "search"}}]
WALKS = 10


def _anchor(template: dict) -> str:
    anchor = template.get("start_anchor", "")
    return anchor[0] if isinstance(anchor, list) else anchor


def _walk_and_check(template, walker, tag, prefix, tokenizer, choice, parallel) -> tuple[int, int]:
    grammar = walker.compile(tag)
    rng = random.Random(repr((choice, parallel)))
    ended = calls = 0
    for _ in range(WALKS):
        ids, finished = walker.walk(grammar, rng, max_tokens=400)
        if not finished:
            continue
        ended += 1
        if tokenizer is None:
            text = text_of(walker.tokenizer, ids)
            message = interpreter_parse(text, template, prefix=prefix, tools=TOOLS)
        else:
            message = interpreter_parse(ids, template, prefix=prefix, tools=TOOLS, tokenizer=tokenizer)
        problems = check_calls(message, TOOLS, choice, parallel)
        assert not problems, (problems, walker.tokenizer.decode(ids))
        calls += len(message_calls(message))
    return ended, calls


@pytest.mark.parametrize("name", template_names())
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "single"])
def test_walks_parse_into_the_calls_the_request_allows(name, parallel):
    template = rtcompile.template_for(name)
    tokenizer, stops = family_tokenizer(template)
    walker = Walker(tokenizer, stops)
    prefix = tokenizer.encode("Hi." + _anchor(template), add_special_tokens=False)
    forced_calls = 0
    for choice in CHOICES:
        tag = rtcompile.structural_tag(
            template, TOOLS, tool_choice=choice, parallel_tool_calls=parallel, prefix=prefix, tokenizer=tokenizer, stop_tokens=stops
        )
        ended, calls = _walk_and_check(template, walker, tag, prefix, tokenizer, choice, parallel)
        assert ended, f"no walk of {choice!r} ended"
        if choice in ("required",) or isinstance(choice, dict):
            forced_calls += calls
    assert forced_calls > 0


@pytest.mark.parametrize("name", template_names())
def test_text_mode_walks_parse_into_allowed_calls(name):
    """Without a tokenizer the grammar matches delimiters as text, and the text parser reads them."""
    template = rtcompile.template_for(name)
    tokenizer, stops = family_tokenizer(template)
    stop_texts = [tokenizer.convert_ids_to_tokens(i) for i in stops]
    walker = Walker(tokenizer, stops)
    prefix = "Hi." + _anchor(template)
    for choice in ("required", "auto"):
        tag = rtcompile.structural_tag(template, TOOLS, tool_choice=choice, prefix=prefix, stop_tokens=stop_texts)
        assert '"type": "token"' not in json.dumps(tag)  # (no token format: text only)
        _walk_and_check(template, walker, tag, prefix, None, choice, True)


def test_a_grammar_that_matches_control_tokens_as_text_fails_these_checks():
    """The check has teeth: qwen3's text-mode tag (its `<tool_call>` a text delimiter) walked as a
    model would (control tokens sometimes spelled out with ordinary tokens) and read by the
    token-id interpreter, for which only a control token's id is a delimiter, gives outputs that
    fail: a forced request without its call, or a call region that does not parse."""
    template = rtcompile.template_for("qwen3")
    tokenizer, stops = family_tokenizer(template)
    walker = Walker(tokenizer, stops)
    prefix = "Hi." + _anchor(template)
    stop_texts = [tokenizer.convert_ids_to_tokens(i) for i in stops]
    tag = rtcompile.structural_tag(template, TOOLS, tool_choice="required", prefix=prefix, stop_tokens=stop_texts)
    grammar = walker.compile(tag)
    rng = random.Random(0)
    failed = 0
    for _ in range(40):
        ids, finished = walker.walk(grammar, rng, max_tokens=400, spell=0.9)
        if not finished:
            continue
        try:
            message = interpreter_parse(ids, template, prefix=tokenizer.encode(prefix, add_special_tokens=False), tools=TOOLS, tokenizer=tokenizer)
        except ValueError:  # (a region the spelled-out closer did not end fails to parse)
            failed += 1
            continue
        failed += bool(check_calls(message, TOOLS, "required", True))
    assert failed
