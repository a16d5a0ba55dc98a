"""End to end: the example OpenAI-compatible server (examples/openai_server.py), consumed over HTTP on a
loopback port by the official `openai` client, streaming and not.

The server replays a scripted generation through a compiled parser and `OpenAIStream`; whatever the
client reconstructs from the server-sent events must equal rtcompile's one-shot parse of the same
generation (`rtcompile.parse_response`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

import rtcompile
from rtcompile.library import template_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load_example():
    spec = importlib.util.spec_from_file_location(
        "openai_server_example", EXAMPLES / "openai_server.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


server_example = _load_example()

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string"},
                "days": {"type": "integer"},
                "options": {
                    "type": "object",
                    "properties": {
                        "hourly": {"type": "boolean"},
                        "fields": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["hourly", "fields"],
                    "additionalProperties": False,
                },
            },
            "required": ["city", "unit", "days", "options"],
            "additionalProperties": False,
        },
    },
}

# A second format: text-valued XML arguments that only get their types from the tools' schemas.
QWEN3_5_PREFIX = (
    "<|im_start|>user\nWeather in Paris and Tokyo?<|im_end|>\n<|im_start|>assistant\n<think>\n"
)
QWEN3_5_GENERATION = (
    "Two cities, two calls.\n</think>\n\nChecking both.\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
    '<tool_call>\n<function=get_weather>\n<parameter=city>\nTōkyō — "東京"\n</parameter>\n'
    "<parameter=days>\n5\n</parameter>\n</function>\n</tool_call><|im_end|>"
)
QWEN3_5_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]

SCRIPTS = {
    "qwen3": (
        server_example.Script(
            "qwen3", server_example.DEFAULT_PREFIX, server_example.DEFAULT_GENERATION, 3
        ),
        [WEATHER_TOOL],
    ),
    "qwen3_5": (
        server_example.Script("qwen3_5", QWEN3_5_PREFIX, QWEN3_5_GENERATION, 5),
        QWEN3_5_TOOLS,
    ),
}


@contextlib.contextmanager
def serving(name: str):
    """(server, client, script, tools) with the server running on 127.0.0.1, an ephemeral port;
    stopped (and its thread joined) on exit."""
    script, tools = SCRIPTS[name]
    server = server_example.ReplayServer(script, "127.0.0.1", 0)
    thread = server.start()
    client = openai.OpenAI(base_url=server.base_url, api_key="x", timeout=10, max_retries=0)
    try:
        yield server, client, script, tools
    finally:
        client.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.fixture(params=sorted(SCRIPTS))
def served(request):
    with serving(request.param) as running:
        yield running


def expected_message(script, tools) -> dict:
    return rtcompile.parse_response(
        script.generation, template_for(script.template), prefix=script.prefix, tools=tools
    )


def assert_client_message_is(message, expected: dict) -> None:
    """The client's message (an openai model object) against rtcompile's parsed message."""
    assert (message.content or None) == (expected.get("content") or None)
    assert getattr(message, "reasoning_content", None) == expected.get("reasoning_content")
    calls = message.tool_calls or []
    assert [call.function.name for call in calls] == [
        call["function"]["name"] for call in expected.get("tool_calls", [])
    ]
    for call, want in zip(calls, expected.get("tool_calls", [])):
        assert call.type == "function" and call.id.startswith("call_")
        assert json.loads(call.function.arguments) == want["function"]["arguments"]


MESSAGES = [{"role": "user", "content": "What is the weather?"}]


def test_streaming_client_sees_the_parsed_message(served):
    server, client, script, tools = served
    state = ChatCompletionStreamState()
    chunks = list(
        client.chat.completions.create(
            model=script.model, messages=MESSAGES, tools=tools, stream=True
        )
    )
    for chunk in chunks:
        state.handle_chunk(chunk)
    choice = state.get_final_completion().choices[0]
    expected = expected_message(script, tools)
    assert_client_message_is(choice.message, expected)
    assert choice.finish_reason == "tool_calls"
    # Arguments arrived in pieces, not in one final chunk.
    argument_chunks = [
        c
        for c in chunks
        if c.choices
        and c.choices[0].delta.tool_calls
        and c.choices[0].delta.tool_calls[0].function.arguments
    ]
    assert len(argument_chunks) > len(expected["tool_calls"])
    assert server.requests[-1]["stream"] is True and server.requests[-1]["tools"] == tools


def test_stream_helper_parses_strict_tool_arguments():
    """The client's higher-level `.stream()` helper (events, partial JSON parsing of strict tools;
    it accepts only strict function tools, which the qwen3 script has)."""
    with serving("qwen3") as (server, client, script, tools):
        with client.chat.completions.stream(
            model=script.model, messages=MESSAGES, tools=tools
        ) as stream:
            kinds = {event.type for event in stream}
            completion = stream.get_final_completion()
    assert {
        "content.delta",
        "tool_calls.function.arguments.delta",
        "tool_calls.function.arguments.done",
    } <= kinds
    message = completion.choices[0].message
    expected = expected_message(script, tools)
    assert_client_message_is(message, expected)
    assert [call.function.parsed_arguments for call in message.tool_calls] == [
        call["function"]["arguments"] for call in expected["tool_calls"]
    ]


def test_non_streaming_response_is_the_same_message(served):
    server, client, script, tools = served
    completion = client.chat.completions.create(model=script.model, messages=MESSAGES, tools=tools)
    choice = completion.choices[0]
    assert_client_message_is(choice.message, expected_message(script, tools))
    assert choice.finish_reason == "tool_calls"
    assert completion.usage.completion_tokens == len(script.chunks())


def test_max_tokens_cuts_the_stream_with_finish_reason_length(served):
    server, client, script, tools = served
    limit = (
        script.generation.rindex("city") // script.chunk_size + 1
    )  # inside the last call's arguments
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(
        model=script.model, messages=MESSAGES, tools=tools, stream=True, max_tokens=limit
    ):
        state.handle_chunk(chunk)
    choice = state.current_completion_snapshot.choices[0]
    assert choice.finish_reason == "length"
    cut = "".join(script.chunks()[:limit])
    parser = rtcompile.ResponseParser(
        template_for(script.template), script.prefix, tools=tools, errors="keep"
    )
    parser.feed(cut)
    message, _ = parser.finalize()
    calls = choice.message.tool_calls or []
    parsed = message.get("tool_calls", [])
    broken = message.get("rtcompile_parse_errors", [])
    # The calls that parsed are the client's; a call cut off mid-JSON was announced and then closed
    # with its complete arguments (valid JSON), and its raw text went to the content.
    assert len(parsed) <= len(calls) <= len(parsed) + len(broken)
    for call, want in zip(calls, parsed):
        assert call.function.name == want["function"]["name"]
        assert json.loads(call.function.arguments) == want["function"]["arguments"]
    for call in calls:
        json.loads(call.function.arguments)
    for record in broken:
        assert record["raw"] in choice.message.content
    assert broken or len(calls) == len(parsed)


def test_bad_requests_get_errors_not_hangs(served):
    server, client, script, tools = served
    with pytest.raises(openai.NotFoundError):
        client.post("/nowhere", body={}, cast_to=object)
    models = client.models.list()
    assert [model.id for model in models] == [script.model]
