"""transformers serve 5.25.0 on compiled parsers (rtcompile.integrations.transformers.serve), driven
through transformers.cli.serving itself.

Every request runs twice, through transformers' own serving code as it is (the interpreter) and
after `accelerate_transformers_serve()` (compiled parsers), and the two must agree exactly:

- streaming: `build_response_parser` builds the parser from the prompt's token ids, a real
  `Detokenizer` feeds it the generated ids one at a time (as the API server does with each id from
  the model's process) and queues `response_events_to_chunks` items; the chat-completions and
  Responses handlers turn them into SSE chunks, byte for byte the same;
- whole responses: `parse_assistant_message` and the handlers' JSON bodies, byte for byte;
- every bundled template, with generated turns (tests/integrations/test_openai_stream.py) whose
  control tokens are generated as ids or, now and then, spelled out with ordinary tokens (which
  then stay text);
- transformers' fallback templates by `model_type`, a template the compiler does not take (the
  interpreter's own parser then), no template at all;
- API servers started with multiprocessing `spawn` (`--api-server-count N`), through transformers'
  own `Serve.run_api_servers`: they run compiled parsers and give the same results;
- the refusal of unsupported transformers releases;
- end to end (full tier): `python -m rtcompile serve` with two API servers and plain `transformers
  serve`, on a tiny randomly initialised model, answering the official `openai` client the same.

The tokenizers are built here (byte-level BPE without merges, plus the template family's control
tokens as added tokens, saved and reloaded with AutoTokenizer): no hub.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pytest
import transformers
from hypothesis import given, note
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.cli import serve as serve_command
from transformers.cli.serving import chat_completion, model_manager, response
from transformers.cli.serving import utils as serving
from transformers.utils.chat_parsing import ResponseParser as InterpreterParser
from transformers.utils.chat_parsing.response_templates import load_response_template

import rtcompile
from rtcompile.__main__ import main as rtcompile_main
from rtcompile.integrations.transformers import serve as integration
from rtcompile.library import template_for
from test_openai_stream import FORMATS, Turn, tools_for, turns
from tokenizer_pool import occurrences

# ---- tokenizers ---------------------------------------------------------------------------------

# What a control token of the bundled templates' families looks like: `<|im_end|>` (ChatML, Llama,
# harmony, Cohere, Kimi, Phi), `<｜Assistant｜>` (DeepSeek), `<|turn>` / `<turn|>` (Gemma 4), tags
# such as `<think>`, `</tool_call>`, `<eos>`, `</s>`, `[TOOL_CALLS]` / `[/INST]` (Mistral), `]~b]` /
# `[e~[` (MiniMax).
CONTROL_TOKEN_SHAPE = re.compile(
    r"<\|[^<>|\s]*\|>|<｜[^｜]*｜>|<\|[a-z_]+>|<[a-z_]+\|>"
    r"|</?[a-z_:]+>|\[/?[A-Z_]+\]|\]~b\]|\[e~\["
)
# Tags like `<think>` are ordinary added tokens that the chat template writes (Qwen's, DeepSeek's);
# the rest are special tokens. Both are control tokens in transformers 5.25.0.
TAG_SHAPE = re.compile(r"</?[a-z_:]+>")
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def control_tokens(template: dict) -> list[str]:
    """The control tokens a template's family has, read off the template: every string of a control
    token's shape in its delimiters, anchors and patterns (regex escapes and group names removed).
    """
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, str):
            found.update(
                CONTROL_TOKEN_SHAPE.findall(_NAMED_GROUP.sub("(", value).replace("\\", ""))
            )
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(template)
    return sorted(found)


def is_special(token: str) -> bool:
    return not TAG_SHAPE.fullmatch(token) or token in ("</s>", "<eos>")


GENERIC_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
)


def build_tokenizer(
    directory: Path, template: Any, tokens: list[str], chat_template: str = GENERIC_CHAT_TEMPLATE
) -> Any:
    """A byte-level BPE without merges (every byte one token, so decoding gives back the text) plus
    `tokens`: special ones, and tags that the chat template writes (control tokens both), saved to
    `directory` with `template` as its response_template and reloaded with AutoTokenizer."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in tokens if is_special(t)]
    )
    backend.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in tokens if not is_special(t)]
    )
    written = "".join(t for t in tokens if not is_special(t))
    # (the tags as literal text of the template, in a branch never rendered: what makes them
    # control tokens)
    chat_template += "{% if false %}" + written + "{% endif %}"
    extra = {} if template is None else {"response_template": template}
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=chat_template, **extra
    )
    wrapped.save_pretrained(directory)
    reloaded = AutoTokenizer.from_pretrained(directory)
    assert sorted(reloaded._get_control_tokens(reloaded.chat_template)) == sorted(tokens)
    return reloaded


_TOKENIZER_DIRECTORIES: dict[str, Path] = {}


@pytest.fixture(scope="module")
def tokenizer_directory(tmp_path_factory) -> Callable[[str], Path]:
    """The saved tokenizer of a bundled template (built once per module)."""

    def directory(name: str) -> Path:
        if name not in _TOKENIZER_DIRECTORIES:
            template = template_for(name)
            path = tmp_path_factory.mktemp(f"tokenizer-{name}")
            build_tokenizer(path, template, control_tokens(template))
            _TOKENIZER_DIRECTORIES[name] = path
        return _TOKENIZER_DIRECTORIES[name]

    return directory


@pytest.fixture(scope="module")
def fallback_tokenizer_directory(tmp_path_factory) -> Callable[[str], Path]:
    """The saved tokenizer of a model type that transformers serve has a fallback template for: no
    response_template, the fallback's control tokens (built once per module)."""

    def directory(model_type: str) -> Path:
        key = f"fallback-{model_type}"
        if key not in _TOKENIZER_DIRECTORIES:
            fallback = serving.get_response_template(
                SimpleNamespace(), SimpleNamespace(model_type=model_type)
            )
            path = tmp_path_factory.mktemp(key)
            build_tokenizer(path, None, control_tokens(fallback))
            _TOKENIZER_DIRECTORIES[key] = path
        return _TOKENIZER_DIRECTORIES[key]

    return directory


def spell_out(tokenizer: Any, token: str) -> list[int]:
    """`token` written with ordinary tokens, as a model may write it: transformers' own encoding
    without added tokens (`split_special_tokens` would still match the non-special ones)."""
    ids = tokenizer._encode_without_added_tokens(token)
    assert tokenizer.convert_tokens_to_ids(token) not in ids and tokenizer.decode(ids) == token
    return ids


def token_ids(tokenizer: Any, text: str, spelled_out: list[bool]) -> list[int]:
    """`text` as generated ids: each control token as its id, or spelled out with ordinary tokens
    where `spelled_out` (one flag per occurrence, in order) says so."""
    tokens = [str(t) for t in tokenizer.added_tokens_decoder.values()]
    ids: list[int] = []
    position = 0
    for (start, end, token), spell in zip(
        occurrences(text, tokens), spelled_out + [False] * len(text)
    ):
        ids += tokenizer.encode(text[position:start], add_special_tokens=False)
        if spell:
            ids += spell_out(tokenizer, token)
        else:
            ids.append(tokenizer.convert_tokens_to_ids(token))
        position = end
    return ids + tokenizer.encode(text[position:], add_special_tokens=False)


# ---- transformers serve's paths, driven directly ------------------------------------------------

MODEL_CONFIG = SimpleNamespace(model_type="not-a-bundled-type")
REQUEST_ID = "req-7"
# The handlers stamp chunks with time.time(); both runs of a request get the same clock.
FIXED_CLOCK = SimpleNamespace(time=lambda: 1767225600.0)


def outcome(call: Callable[[], Any]) -> tuple:
    try:
        return ("ok", call())
    except Exception as error:  # noqa: BLE001 - both sides must fail the same way
        return ("raised", error)


def assert_same_outcome(expected: tuple, actual: tuple, path: str = "") -> None:
    """The same result, or the same exception: its class and its message, which transformers serve
    sends to the client."""
    if expected[0] == "raised":
        assert actual[0] == "raised", (path, expected, actual)
        assert (type(actual[1]), str(actual[1])) == (type(expected[1]), str(expected[1])), path
    else:
        assert actual == expected, path


def plain(item: Any) -> Any:
    """A stream-queue item or a parsed message as plain data (types kept apart)."""
    if isinstance(item, serving.ToolCall):
        return ("call", item.name, item.arguments)
    if isinstance(item, serving.ReasoningText):
        return ("reasoning", str(item))
    if isinstance(item, serving._StreamError):
        return ("error", item.msg)
    if isinstance(item, (tuple, list)):
        return type(item)(plain(value) for value in item)
    return item


def detokenizer_items(tokenizer: Any, parser: Any, generated: list[int]) -> list:
    """What the API server's Detokenizer queues for these generated ids (one `put_token` each, as
    they come from the model's process), then `end()`."""
    queue: asyncio.Queue = asyncio.Queue()
    streamer = serving.Detokenizer(tokenizer._tokenizer, queue, response_parser=parser)
    for token_id in generated:
        streamer.put_token(token_id)
    streamer.end()
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return plain(items)


class Engine:
    """What the handlers use of transformers' EngineClient, generating `generated`: a streaming
    request gets a real Detokenizer, handed one id per event-loop turn (as the results thread
    hands it each message of the model's process), and a failing `put_token` fails the request
    with a `_StreamError`, as EngineClient does."""

    model_id = "local-model"
    use_cb = False

    def __init__(self, tokenizer: Any, model_config: Any, generated: list[int]):
        self.processor, self.model_config, self.generated = tokenizer, model_config, generated

    def generate_streaming(
        self, inputs: dict, generation_kwargs: dict, response_parser: Any = None
    ):
        queue: asyncio.Queue = asyncio.Queue()
        streamer = serving.Detokenizer(
            self.processor._tokenizer, queue, response_parser=response_parser
        )
        loop = asyncio.get_running_loop()

        def deliver(index: int) -> None:
            if index == len(self.generated):
                streamer.end()
                return
            try:
                streamer.put_token(self.generated[index])
            except Exception as error:  # noqa: BLE001 - the request fails, as in EngineClient
                queue.put_nowait(serving._StreamError(str(error)))
                return
            loop.call_soon(deliver, index + 1)

        loop.call_soon(deliver, 0)
        return queue, streamer

    async def generate_non_streaming(self, inputs: dict, generation_kwargs: dict):
        text = self.processor.decode(self.generated, skip_special_tokens=True)
        return text, serving.prompt_length(inputs), list(self.generated)


async def _event_stream(response: Any) -> list[str]:
    return [chunk async for chunk in response.body_iterator]


def handler_responses(
    tokenizer: Any, model_config: Any, prompt: Any, generated: list[int], tools: Any
) -> dict:
    """The chat-completions and Responses handlers' answers to one request, streaming (the SSE
    chunks) and whole (the JSON body): outcomes by path."""
    engine = Engine(tokenizer, model_config, generated)
    inputs = {"input_ids": prompt}
    generation_kwargs = {"max_new_tokens": 1024}
    state = serving.GenerationState()
    chat = chat_completion.ChatCompletionHandler(model_manager=None, generation_state=state)
    responses = response.ResponseHandler(model_manager=None, generation_state=state)
    body = {"tools": tools} if tools else {}
    requests = {
        "chat stream": lambda: _event_stream(
            chat._streaming(
                REQUEST_ID, engine, inputs, generation_kwargs, tools, {"include_usage": True}
            )
        ),
        "chat whole": lambda: chat._non_streaming(
            REQUEST_ID, engine, inputs, generation_kwargs, tools=tools
        ),
        "responses stream": lambda: _event_stream(
            responses._streaming(REQUEST_ID, engine, body, inputs, generation_kwargs)
        ),
        "responses whole": lambda: responses._non_streaming(
            REQUEST_ID, engine, body, inputs, generation_kwargs
        ),
    }

    async def answer(
        request: Callable,
    ) -> Any:  # (in a running event loop, as the server calls them)
        found = await request()
        return found if isinstance(found, list) else found.body

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chat_completion, "time", FIXED_CLOCK)
        patch.setattr(response, "time", FIXED_CLOCK)
        return {
            path: outcome(lambda: asyncio.run(answer(request)))
            for path, request in requests.items()
        }


def serving_results(
    tokenizer: Any, model_config: Any, prompt: Any, generated: list[int], tools: Any
) -> dict:
    """One request through every path of transformers serve that parses: outcomes by path."""
    cleaned = tokenizer.decode(generated, skip_special_tokens=True)
    return {
        "detokenizer": outcome(
            lambda: detokenizer_items(
                tokenizer,
                serving.build_response_parser(tokenizer, model_config, prompt, tools),
                generated,
            )
        ),
        "message": outcome(
            lambda: plain(
                serving.parse_assistant_message(
                    tokenizer, model_config, generated, prompt, cleaned, tools
                )
            )
        ),
        **handler_responses(tokenizer, model_config, prompt, generated, tools),
    }


def assert_same_results(expected: dict, actual: dict) -> None:
    assert sorted(actual) == sorted(expected)
    for path in expected:
        assert_same_outcome(expected[path], actual[path], path)


@pytest.fixture(scope="module")
def interpreter_and_compiled():
    """Run a function once with transformers serve as it is and once accelerated (undone after)."""

    def run(function: Callable[[], Any]) -> tuple[Any, Any]:
        integration.deaccelerate_transformers_serve()
        expected = function()
        integration.accelerate_transformers_serve()
        try:
            actual = function()
        finally:
            integration.deaccelerate_transformers_serve()
        return expected, actual

    return run


# ---- every bundled template ---------------------------------------------------------------------

# qwen3 (the ChatML family and transformers' own fallback), gpt_oss (harmony: multi-token channel
# headers, a pattern opener) and gemma4 (asymmetric tokens, its JSON dialect) run in the quick tier.
QUICK_TEMPLATES = ("qwen3", "gpt_oss", "gemma4")
ALL_TEMPLATES = [
    name if name in QUICK_TEMPLATES else pytest.param(name, marks=pytest.mark.full)
    for name in sorted(FORMATS)
]


@pytest.mark.parametrize("name", ALL_TEMPLATES)
@given(data=st.data())
def test_serving_paths_equal_the_interpreters(
    name, data, tokenizer_directory, interpreter_and_compiled
):
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    history = data.draw(st.sampled_from(["", "Earlier turns.\n", "user: hi\n"]), label="history")
    tools = (tools_for(turn.calls) or None) if data.draw(st.booleans(), label="tools") else None
    directory = tokenizer_directory(name)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokens = [str(t) for t in tokenizer.added_tokens_decoder.values()]
    count = len(occurrences(text, tokens))
    spelled_out = []  # every control token generated as its id, as models do; or some spelled out
    if data.draw(st.booleans(), label="some control tokens spelled out"):
        spelled_out = data.draw(
            st.lists(st.booleans(), min_size=count, max_size=count), label="spelled out"
        )
    generated = token_ids(tokenizer, text, spelled_out)
    prompt_ids = tokenizer.encode(history + prefix, add_special_tokens=False)
    # The prompt as continuous batching passes it (a list) or as a [1, N] tensor (numpy stands in).
    prompt = (
        np.array([prompt_ids]) if data.draw(st.booleans(), label="prompt as array") else prompt_ids
    )
    note(f"prefix={history + prefix!r}\ntext={text!r}\nspelled_out={spelled_out}")
    assert tokenizer.decode(generated) == text  # the ids carry exactly the rendered text

    def results() -> dict:
        served = AutoTokenizer.from_pretrained(directory)  # a fresh tokenizer, as a server loads it
        found = serving_results(served, MODEL_CONFIG, prompt, generated, tools)
        parser = serving.build_response_parser(served, MODEL_CONFIG, prompt, tools)
        return {
            "results": found,
            "compiled": not isinstance(parser, InterpreterParser),
            "tokenizer": served,
        }

    expected, actual = interpreter_and_compiled(results)
    assert (
        not expected["compiled"] and actual["compiled"]
    )  # compiled parsers, through transformers' builder
    assert rtcompile.is_accelerated(actual["tokenizer"])  # by parse_assistant_message
    assert_same_results(expected["results"], actual["results"])


# ---- transformers' fallbacks by model_type, templates only the interpreter takes, no template ----

# A model_type of each family of transformers' `_RESPONSE_TEMPLATE_FALLBACKS`, with the bundled
# template whose outputs it parses.
FALLBACK_FAMILIES = [
    ("qwen3", "qwen3"),
    pytest.param("qwen3_5", "qwen3_5", marks=pytest.mark.full),
    pytest.param("gemma4", "gemma4", marks=pytest.mark.full),
]


@pytest.mark.parametrize("model_type, outputs_of", FALLBACK_FAMILIES)
@given(data=st.data())
def test_fallback_templates_by_model_type_are_compiled(
    model_type, outputs_of, data, fallback_tokenizer_directory, interpreter_and_compiled
):
    """A tokenizer without a response_template: transformers' fallback for the model type,
    compiled."""
    model_config = SimpleNamespace(model_type=model_type)
    directory = fallback_tokenizer_directory(model_type)
    turn = data.draw(turns(outputs_of), label="turn")
    prefix, text = FORMATS[outputs_of].render(turn)
    tools = (tools_for(turn.calls) or None) if data.draw(st.booleans(), label="tools") else None
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert tokenizer.response_template is None
    generated = token_ids(tokenizer, text, [])
    prompt = tokenizer.encode(prefix, add_special_tokens=False)
    note(f"prefix={prefix!r}\ntext={text!r}")

    def results() -> tuple[dict, bool]:
        served = AutoTokenizer.from_pretrained(directory)
        parser = serving.build_response_parser(served, model_config, prompt, tools)
        return serving_results(served, model_config, prompt, generated, tools), isinstance(
            parser, InterpreterParser
        )

    (expected, interpreted), (actual, still_interpreted) = interpreter_and_compiled(results)
    assert interpreted and not still_interpreted
    assert_same_results(expected, actual)


def test_no_template_and_no_fallback_streams_the_text(tmp_path, interpreter_and_compiled):
    """No template, no fallback for the model type: no parser, the text decoded without special
    tokens, as before."""
    bare = build_tokenizer(tmp_path, None, control_tokens(template_for("qwen3")))
    prompt = bare.encode("<|im_start|>assistant\n", add_special_tokens=False)
    generated = bare.encode("<think>hmm</think>Hello 😀<|im_end|>", add_special_tokens=False)

    def results() -> tuple[dict, Any]:
        served = AutoTokenizer.from_pretrained(tmp_path)
        parser = serving.build_response_parser(served, MODEL_CONFIG, prompt)
        return serving_results(served, MODEL_CONFIG, prompt, generated, None), parser

    (expected, no_parser), (actual, still_no_parser) = interpreter_and_compiled(results)
    assert no_parser is None and still_no_parser is None
    assert actual["message"] == ("ok", ("<think>hmm</think>Hello 😀", None, None))
    assert_same_results(expected, actual)


@pytest.mark.parametrize(
    "template",
    [
        "qwen3",  # (a string: rtcompile would read it as a bundled template's name)
        {"fields": {"content": {"content": "text"}}},  # (no start anchor)
        {"start_anchor": "<|im_start|>assistant\n", "fields": {"content": {"content": "nope"}}},
    ],
    ids=["a string", "no start anchor", "an unknown content parser"],
)
def test_a_template_the_compiler_rejects_fails_with_the_interpreters_error(
    template, tokenizer_directory, interpreter_and_compiled
):
    """The interpreter gets the template, and fails with its own error and message (which the
    server sends to the client), streaming and whole."""
    directory = tokenizer_directory("qwen3")

    def results() -> dict:
        served = AutoTokenizer.from_pretrained(directory)
        served.response_template = template
        prompt = served.encode("<|im_start|>assistant\n", add_special_tokens=False)
        generated = served.encode("<think>a</think>b<|im_end|>", add_special_tokens=False)
        return serving_results(served, MODEL_CONFIG, prompt, generated, None), served

    (expected, _), (actual, served) = interpreter_and_compiled(results)
    assert expected["detokenizer"][0] == expected["message"][0] == "raised"
    assert not rtcompile.is_accelerated(served)
    assert_same_results(expected, actual)


def test_a_template_the_compiler_does_not_take_goes_to_the_interpreter(
    tokenizer_directory, interpreter_and_compiled
):
    """transformers' already-loaded ResponseTemplate object (not JSON): the interpreter's own parser
    and parse_response run it, with the same results."""
    directory = tokenizer_directory("qwen3")
    turn = Turn(
        "plan", "Let me check.", [("f", {"x": 1})], prefill=False, ensure_ascii=False, call_ids=[""]
    )
    prompt_text, text = FORMATS["qwen3"].render(turn)

    def results() -> tuple[dict, Any]:
        served = AutoTokenizer.from_pretrained(directory)
        served.response_template = load_response_template(template_for("qwen3"))
        prompt = served.encode(prompt_text, add_special_tokens=False)
        generated = served.encode(text, add_special_tokens=False)
        parser = serving.build_response_parser(served, MODEL_CONFIG, prompt)
        return serving_results(served, MODEL_CONFIG, prompt, generated, None), type(parser)

    (expected, expected_class), (actual, actual_class) = interpreter_and_compiled(results)
    assert expected_class is InterpreterParser and actual_class is InterpreterParser
    assert actual["message"] == ("ok", ("Let me check.", "plan", [("call", "f", '{"x": 1}')]))
    assert_same_results(expected, actual)


def test_a_region_that_fails_to_parse_fails_with_the_interpreters_exception(
    tokenizer_directory, interpreter_and_compiled
):
    """A call that is not JSON: the stream's error chunk and the whole request's exception carry the
    interpreter's message (rtcompile's own adds the field's name and the region's text)."""
    directory = tokenizer_directory("qwen3")
    prompt_text = "<|im_start|>assistant\n"
    text = (
        '<think>a</think>b<tool_call>\n{"name": "f", "arguments": {"x": 1,}\n</tool_call><|im_end|>'
    )

    def results() -> dict:
        served = AutoTokenizer.from_pretrained(directory)
        prompt = served.encode(prompt_text, add_special_tokens=False)
        generated = served.encode(text, add_special_tokens=False)
        return serving_results(served, MODEL_CONFIG, prompt, generated, None)

    expected, actual = interpreter_and_compiled(results)
    assert expected["message"][0] == "raised" and type(expected["message"][1]) is ValueError
    assert '"error": "json parser could not parse region as JSON.' in expected["chat stream"][1][-1]
    assert_same_results(expected, actual)


def test_a_processor_carries_its_tokenizer(tokenizer_directory, interpreter_and_compiled):
    """A multimodal processor: transformers reads its `.tokenizer`, and so does the acceleration."""
    directory = tokenizer_directory("qwen3")
    prompt_text = "<|im_start|>assistant\n"
    text = (
        '<think>a</think>b<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>'
    )

    def results() -> tuple[Any, Any]:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        processor = SimpleNamespace(tokenizer=tokenizer)
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        generated = tokenizer.encode(text, add_special_tokens=False)
        message = plain(serving.parse_assistant_message(processor, MODEL_CONFIG, generated, prompt))
        parser = serving.build_response_parser(processor, MODEL_CONFIG, prompt)
        return (message, detokenizer_items(tokenizer, parser, generated)), tokenizer

    (expected, _), (actual, tokenizer) = interpreter_and_compiled(results)
    assert actual == expected
    assert actual[0] == ("b", "a", [("call", "f", '{"x": 1}')])
    assert rtcompile.is_accelerated(tokenizer)


# ---- patching -----------------------------------------------------------------------------------

PATCHED = ("ResponseParser", "parse_assistant_message", "run_until_parent_exits")


def serving_names() -> dict[str, Any]:
    """What transformers serve's modules bind now under the names the acceleration replaces."""
    return {
        "utils": tuple(getattr(serving, name) for name in PATCHED),
        "chat_completion": chat_completion.parse_assistant_message,
        "response": response.parse_assistant_message,
        "model_manager": model_manager.run_until_parent_exits,
    }


def test_accelerating_replaces_the_names_everywhere_idempotently_and_is_undone():
    integration.deaccelerate_transformers_serve()
    before = serving_names()
    assert before["utils"] == (
        InterpreterParser,
        before["chat_completion"],
        before["model_manager"],
    )
    integration.accelerate_transformers_serve()
    patched = serving_names()
    integration.accelerate_transformers_serve()
    try:
        assert integration.is_transformers_serve_accelerated()
        assert serving_names() == patched
        assert patched["utils"] == (
            integration.compiled_response_parser,
            integration.parse_assistant_message_accelerated,
            integration.run_until_parent_exits_accelerated,
        )
        # the handlers and the model manager imported before the call bound transformers' own
        assert (
            patched["chat_completion"]
            is patched["response"]
            is integration.parse_assistant_message_accelerated
        )
        assert patched["model_manager"] is integration.run_until_parent_exits_accelerated
    finally:
        integration.deaccelerate_transformers_serve()
    assert serving_names() == before
    assert not integration.is_transformers_serve_accelerated()


# ---- API servers started with spawn -------------------------------------------------------------

# Outputs the spawned API servers parse (the qwen3 tokenizer): reasoning, content and a call; a
# reasoning block prefilled by the prompt; `</think>` spelled out by the model (stays reasoning).
SPAWN_CASES = [
    (
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n",
        "<think>\nNeed it.\n</think>\n\nChecking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call><|im_end|>',
        [],
    ),
    ("<|im_start|>assistant\n<think>\n", "plan\n</think>\n\nAnswer 😀<|im_end|>", []),
    ("<|im_start|>assistant\n", "<think>a </think> b</think>c<|im_end|>", [False, True]),
]


def spawn_case_results(directory: Path) -> list[dict]:
    """`serving_results` of the SPAWN_CASES, with a tokenizer loaded from `directory`."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    cases = []
    for prompt_text, text, spelled_out in SPAWN_CASES:
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        generated = token_ids(tokenizer, text, spelled_out)
        cases.append(serving_results(tokenizer, MODEL_CONFIG, prompt, generated, None))
    return cases


def test_the_spawn_target_pickles_by_name_and_accelerates_before_running_transformers_own():
    """What `Serve.run_api_servers` hands to `spawn` once accelerated: rtcompile's module-level
    target, which a new process unpickles by name; run, it accelerates transformers serve, then runs
    transformers' own `run_until_parent_exits` (which refuses to run outside a spawned process)."""
    integration.accelerate_transformers_serve()
    target = serving.run_until_parent_exits  # as run_api_servers imports it, at call time
    assert target is integration.run_until_parent_exits_accelerated
    assert pickle.loads(pickle.dumps(target)) is target
    integration.deaccelerate_transformers_serve()
    try:
        with pytest.raises(RuntimeError, match="for the target of a process the server spawns"):
            target(print)
        assert integration.is_transformers_serve_accelerated()
    finally:
        integration.deaccelerate_transformers_serve()


class ProbeServe(serve_command.Serve):
    """transformers' Serve, whose `run` (what each API server process runs) is a probe: it reports,
    from the spawned process, whether transformers serve builds compiled parsers there and what the
    serving paths return, then waits for the other API servers to report."""

    def run(self, socket: Any = None, engine_connection: Any = None) -> None:
        reports, _results, index = engine_connection
        tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_directory)
        parser = serving.build_response_parser(tokenizer, MODEL_CONFIG, [])
        reports.put(
            {
                "index": index,
                "process": multiprocessing.current_process().name,
                "pid": os.getpid(),
                "accelerated": integration.is_transformers_serve_accelerated(),
                "compiled": not isinstance(parser, InterpreterParser),
                "handlers bind it": (
                    chat_completion.parse_assistant_message is serving.parse_assistant_message
                ),
                "results": spawn_case_results(self.tokenizer_directory),
            }
        )
        self.all_reported.wait(timeout=300)


class IdleModelProcess:
    """Stands in for the model's process, which the probe does not use: its sentinel (a pipe nothing
    writes to) never becomes ready, so only the API servers end `run_api_servers`."""

    name, exitcode = "model", None

    def __init__(self) -> None:
        self.sentinel, self._write_end = os.pipe()

    def join(self, timeout: float | None = None) -> None:
        pass

    terminate = kill = join

    def is_alive(self) -> bool:
        return False

    def close(self) -> None:
        os.close(self.sentinel)
        os.close(self._write_end)


def run_api_servers(directory: Path, count: int) -> list[dict]:
    """Run transformers' own `Serve.run_api_servers(count)` (binding a loopback socket, spawning
    `count` API server processes with its target) with the probe as each API server and no model's
    process; return the API servers' reports."""
    spawn = multiprocessing.get_context("spawn")
    reports = spawn.SimpleQueue()
    model_process = IdleModelProcess()
    probe = ProbeServe.__new__(ProbeServe)
    probe.force_model, probe.host, probe.port = "local-model", "127.0.0.1", 0
    probe.loader = probe.generation_state = None
    probe.tokenizer_directory, probe.all_reported = directory, spawn.Barrier(count)
    signals = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(
                model_manager.EngineClient,
                "start_process",
                staticmethod(
                    lambda *args, api_servers: (model_process, reports, [None] * api_servers)
                ),
            )
            # (it ends once an API server stops, here after reporting)
            with pytest.raises(RuntimeError, match="stopped: stopping the server"):
                probe.run_api_servers(count)
    finally:
        for number, handler in signals.items():  # run_api_servers installs its own
            signal.signal(number, handler)
        model_process.close()
    found = []
    while not reports.empty():
        found.append(reports.get())
    return sorted(found, key=lambda report: report["index"])


@pytest.mark.full  # (two new interpreters importing transformers: seconds)
def test_api_servers_started_with_spawn_run_compiled_parsers(
    tokenizer_directory, interpreter_and_compiled
):
    """Two API servers started by transformers' own `Serve.run_api_servers` after
    `accelerate_transformers_serve()`: in each spawned process transformers serve builds compiled
    parsers (the handlers, imported there, bind the accelerated function too) and every serving
    path answers as the interpreter does in this process."""
    directory = tokenizer_directory("qwen3")
    expected, _ = interpreter_and_compiled(lambda: spawn_case_results(directory))
    integration.accelerate_transformers_serve()
    try:
        reports = run_api_servers(directory, 2)
    finally:
        integration.deaccelerate_transformers_serve()
    assert [report["process"] for report in reports] == ["api-server-0", "api-server-1"]
    assert os.getpid() not in {report["pid"] for report in reports}
    for report in reports:
        assert report["accelerated"] and report["compiled"] and report["handlers bind it"]
        assert len(report["results"]) == len(expected)
        for expected_case, actual_case in zip(expected, report["results"]):
            assert_same_results(expected_case, actual_case)


@pytest.mark.full
def test_without_rtcompile_spawned_api_servers_run_the_interpreter(tokenizer_directory):
    """The control for the test above: the probe tells the two apart."""
    integration.deaccelerate_transformers_serve()
    reports = run_api_servers(tokenizer_directory("qwen3"), 2)
    assert len(reports) == 2
    assert not any(report["accelerated"] or report["compiled"] for report in reports)


# ---- supported releases -------------------------------------------------------------------------

UNSUPPORTED = ["5.24.0", "5.25.1", "5.26.0.dev0", "4.57.1"]


@pytest.mark.parametrize("version", UNSUPPORTED)
def test_an_unsupported_release_is_refused_before_anything_is_patched(version, monkeypatch):
    integration.deaccelerate_transformers_serve()
    before = serving_names()
    monkeypatch.setattr(transformers, "__version__", version)
    with pytest.raises(integration.UnsupportedTransformersError) as refused:
        integration.accelerate_transformers_serve()
    message = str(refused.value)
    assert (
        f"transformers {version} is installed" in message
        and "supports transformers 5.25.0" in message
    )
    assert "\n" not in message
    assert serving_names() == before and not integration.is_transformers_serve_accelerated()


def test_the_serve_command_refuses_an_unsupported_release_with_one_error_line(monkeypatch, capsys):
    integration.deaccelerate_transformers_serve()
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    assert rtcompile_main(["serve", "--help"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # transformers serve never ran
    assert err.startswith("rtcompile: error: ") and err.count("\n") == 1
    assert "transformers 5.24.0 is installed" in err and "5.25.0" in err
    assert not integration.is_transformers_serve_accelerated()


def test_without_transformers_the_refusal_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # (`import transformers` raises)
    with pytest.raises(
        integration.UnsupportedTransformersError, match="transformers is not installed"
    ):
        integration.accelerate_transformers_serve()


def test_the_supported_release_is_the_installed_one():
    """The tests above run against the release the integration supports."""
    assert transformers.__version__ in integration.SUPPORTED_TRANSFORMERS_RELEASES
    assert integration.check_transformers_release() == transformers.__version__


# ---- the command --------------------------------------------------------------------------------


def test_the_serve_command_is_transformers_serve(capsys):
    """`python -m rtcompile serve ARGS` is transformers' own `serve` command, accelerated (run in
    this process here; the end-to-end test below starts it for real)."""
    integration.deaccelerate_transformers_serve()
    try:
        assert rtcompile_main(["serve", "--help"]) == 0
        assert integration.is_transformers_serve_accelerated()
        out, _ = capsys.readouterr()
        assert "--api-server-count" in out and "--continuous-batching" in out
        assert rtcompile_main(["serve", "--no-such-option"]) == 2  # typer's usage error, passed on
        out, err = capsys.readouterr()
        assert "no-such-option" in out + err
    finally:
        integration.deaccelerate_transformers_serve()


# ---- end to end: a tiny model behind `python -m rtcompile serve` and `transformers serve` --------

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        },
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# What the model is made to answer, in qwen3's format; the `</think>` inside the reasoning is
# spelled out with ordinary tokens, so it stays reasoning text (transformers 5.25.0's token-id
# parsing).
ANSWER = [
    "<think>\nThe user wants the weather. I could write ",
    ("</think>", "spelled out"),
    " here.\n</think>\n\nLet me check. 😀\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}\n</tool_call><|im_end|>',
]


def build_tiny_model(directory: Path) -> tuple[Any, list[int]]:
    """A 2-layer Llama, randomly initialised, with the qwen3 tokenizer built here, saved to
    `directory`; returns the tokenizer and the ids of ANSWER."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(
        directory, template_for("qwen3"), control_tokens(template_for("qwen3")), CHATML_TEMPLATE
    )
    answer: list[int] = []
    for piece in ANSWER:
        if isinstance(piece, tuple):
            answer += spell_out(tokenizer, piece[0])
        else:
            answer += tokenizer.encode(piece, add_special_tokens=False)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=end_of_turn,
        pad_token_id=end_of_turn,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = end_of_turn
    model.save_pretrained(directory)
    return tokenizer, answer


def scripted_generation(prompt: list[int], answer: list[int]) -> str:
    """A request's `generation_config` that makes greedy decoding write `answer` after `prompt`: a
    sequence bias of +100 for each answer token after the prompt and the answer so far (keyed on the
    whole prompt, so that each bias applies at its one step)."""
    bias = [[prompt + answer[: index + 1], 100.0] for index in range(len(answer))]
    return json.dumps({"sequence_bias": bias})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A server process started here (in a session of its own, so that stopping it stops the
    processes it spawned), its output in a log file."""

    def __init__(self, command: list[str], log: Path, environment: dict[str, str]):
        self.port = free_port()
        self.log = log
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def wait_until_ready(self, limit: float = 900) -> None:
        """Poll /health until it answers (the limit only ends a server that never comes up)."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the server exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/health", timeout=5
                ) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        pytest.fail(f"the server did not come up:\n{self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:  # what the server spawned, should any be left
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def ask(server: Server, model: str, prompt: list[int], answer: list[int]) -> dict:
    """One streaming and one whole chat request, with the official client; their answers as data
    (the timestamps left out). Consecutive streamed text chunks of one kind are joined: how many
    texts one chunk carries depends on how fast the server reads its queue, not on the parser."""
    from openai import OpenAI

    client = OpenAI(
        base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0, timeout=600
    )
    request = dict(
        model=model,
        messages=QUESTION,
        tools=[WEATHER_TOOL],
        temperature=0,
        extra_body={"generation_config": scripted_generation(prompt, answer)},
    )
    chunks = []
    for chunk in client.chat.completions.create(
        stream=True, extra_headers={"x-request-id": "stream-1"}, **request
    ):
        data = chunk.model_dump(exclude={"created"}, exclude_none=True)
        delta = data["choices"][0]["delta"] if data.get("choices") else {}
        text_kind = [key for key in delta if key != "role"]
        previous = chunks[-1]["choices"][0]["delta"] if chunks and chunks[-1].get("choices") else {}
        if (
            len(text_kind) == 1
            and text_kind[0] in ("content", "reasoning_content")
            and list(previous) == text_kind
        ):
            previous[text_kind[0]] += delta[text_kind[0]]
        else:
            chunks.append(data)
    whole = client.chat.completions.create(extra_headers={"x-request-id": "whole-1"}, **request)
    return {"stream": chunks, "whole": whole.model_dump(exclude={"created"}, exclude_none=True)}


@pytest.mark.full  # (starts two servers, each with a model's process)
def test_end_to_end_a_tiny_model_answers_the_same_through_rtcompile_serve(tmp_path):
    """`python -m rtcompile serve MODEL --api-server-count 2` and plain `transformers serve MODEL`
    answer the official openai client the same, streaming and whole; the rtcompile server's API
    servers (spawned) compiled the template, the parent process never parses."""
    model_directory = tmp_path / "tiny-model"
    tokenizer, answer = build_tiny_model(model_directory)
    prompt = tokenizer.apply_chat_template(
        QUESTION, tools=[WEATHER_TOOL], add_generation_prompt=True, return_dict=True
    )
    prompt = list(prompt["input_ids"])
    cache = tmp_path / "rtcompile-cache"
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",  # (a local model: never the hub)
        # (models load with hub kernels by default; `kernels` is not a test requirement)
        "USE_HUB_KERNELS": "0",
        "OMP_NUM_THREADS": "1",
        "RTCOMPILE_CACHE_DIR": str(cache),
    }
    serve_arguments = ["serve", str(model_directory), "--device", "cpu", "--log-level", "warning"]
    transformers_serve = [
        sys.executable,
        "-c",
        "from transformers.cli.transformers import app; app()",
    ]

    answers = {}
    for name, command in {
        "rtcompile": [
            sys.executable,
            "-m",
            "rtcompile",
            *serve_arguments,
            "--api-server-count",
            "2",
        ],
        "transformers": [*transformers_serve, *serve_arguments],
    }.items():
        server = Server(command, tmp_path / f"{name}.log", environment)
        try:
            server.wait_until_ready()
            if name == "rtcompile":
                assert not list(cache.glob("tmpl_*.py"))  # nothing compiled while starting
            answers[name] = ask(server, str(model_directory), prompt, answer)
        finally:
            server.stop()
    assert len(list(cache.glob("tmpl_*.py"))) == 1, "the API servers did not compile the template"

    assert answers["rtcompile"] == answers["transformers"]
    message = answers["rtcompile"]["whole"]["choices"][0]["message"]
    assert (
        message["reasoning_content"] == "The user wants the weather. I could write </think> here."
    )
    assert message["content"] == "Let me check. 😀"
    assert [call["function"] for call in message["tool_calls"]] == [
        {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}
    ]
