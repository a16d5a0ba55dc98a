"""transformers serve 5.25.0 on compiled parsers (rtcompile.integrations.transformers.serve), driven
through transformers.cli.serving itself.

Every request runs twice, through transformers' own serving code as it is (the interpreter) and after
`accelerate_transformers_serve()` (compiled parsers), and the two must agree exactly:

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
from hypothesis import given, note, settings
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
    r"<\|[^<>|\s]*\|>|<｜[^｜]*｜>|<\|[a-z_]+>|<[a-z_]+\|>|</?[a-z_:]+>|\[/?[A-Z_]+\]|\]~b\]|\[e~\["
)
# Tags like `<think>` are ordinary added tokens that the chat template writes (Qwen's, DeepSeek's);
# the rest are special tokens. Both are control tokens in transformers 5.25.0.
TAG_SHAPE = re.compile(r"</?[a-z_:]+>")
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def control_tokens(template: dict) -> list[str]:
    """The control tokens a template's family has, read off the template: every string of a control
    token's shape in its delimiters, anchors and patterns (regex escapes and group names removed)."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, str):
            found.update(CONTROL_TOKEN_SHAPE.findall(_NAMED_GROUP.sub("(", value).replace("\\", "")))
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


def build_tokenizer(directory: Path, template: Any, tokens: list[str]) -> Any:
    """A byte-level BPE without merges (every byte one token, so decoding gives back the text) plus
    `tokens`: special ones, and tags that the chat template writes (control tokens both), saved to
    `directory` with `template` as its response_template and reloaded with AutoTokenizer."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens if is_special(t)])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in tokens if not is_special(t)])
    written = "".join(t for t in tokens if not is_special(t))
    chat_template = (
        "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
        + written  # (literal text: what makes the tags control tokens)
    )
    extra = {} if template is None else {"response_template": template}
    wrapped = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template, **extra)
    wrapped.save_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


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


def token_ids(tokenizer: Any, text: str, spelled_out: list[bool]) -> list[int]:
    """`text` as generated ids: each control token as its id, or spelled out with ordinary tokens
    where `spelled_out` (one flag per occurrence, in order) says so."""
    tokens = [str(t) for t in tokenizer.added_tokens_decoder.values()]
    ids: list[int] = []
    position = 0
    for (start, end, token), spell in zip(occurrences(text, tokens), spelled_out + [False] * len(text)):
        ids += tokenizer.encode(text[position:start], add_special_tokens=False)
        if spell:
            ids += tokenizer.encode(token, add_special_tokens=False, split_special_tokens=True)
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
    """The same result, or an exception of the interpreter's class (rtcompile's are subclasses)."""
    if expected[0] == "raised":
        assert actual[0] == "raised" and isinstance(actual[1], type(expected[1])), (path, expected, actual)
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
    """What the API server's Detokenizer queues for these generated ids (one `put_token` each, as they
    come from the model's process), then `end()`."""
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
    """What the handlers use of transformers' EngineClient, generating `generated`: a streaming request
    gets a real Detokenizer, handed one id per event-loop turn (as the results thread hands it each
    message of the model's process), and a failing `put_token` fails the request with a
    `_StreamError`, as EngineClient does."""

    model_id = "local-model"
    use_cb = False

    def __init__(self, tokenizer: Any, model_config: Any, generated: list[int]):
        self.processor, self.model_config, self.generated = tokenizer, model_config, generated

    def generate_streaming(self, inputs: dict, generation_kwargs: dict, response_parser: Any = None):
        queue: asyncio.Queue = asyncio.Queue()
        streamer = serving.Detokenizer(self.processor._tokenizer, queue, response_parser=response_parser)
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


def handler_responses(tokenizer: Any, model_config: Any, prompt: Any, generated: list[int], tools: Any) -> dict:
    """The chat-completions and Responses handlers' answers to one request, streaming (the SSE chunks)
    and whole (the JSON body)."""
    engine = Engine(tokenizer, model_config, generated)
    inputs = {"input_ids": prompt}
    generation_kwargs = {"max_new_tokens": 1024}
    state = serving.GenerationState()
    chat = chat_completion.ChatCompletionHandler(model_manager=None, generation_state=state)
    responses = response.ResponseHandler(model_manager=None, generation_state=state)
    body = {"tools": tools} if tools else {}

    async def run() -> dict:
        return {
            "chat stream": await _event_stream(
                chat._streaming(REQUEST_ID, engine, inputs, generation_kwargs, tools, {"include_usage": True})
            ),
            "chat whole": (await chat._non_streaming(REQUEST_ID, engine, inputs, generation_kwargs, tools=tools)).body,
            "responses stream": await _event_stream(
                responses._streaming(REQUEST_ID, engine, body, inputs, generation_kwargs)
            ),
            "responses whole": (await responses._non_streaming(REQUEST_ID, engine, body, inputs, generation_kwargs)).body,
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chat_completion, "time", FIXED_CLOCK)
        patch.setattr(response, "time", FIXED_CLOCK)
        return asyncio.run(run())


def serving_results(tokenizer: Any, model_config: Any, prompt: Any, generated: list[int], tools: Any) -> dict:
    """One request through every path of transformers serve that parses: outcomes by path."""
    cleaned = tokenizer.decode(generated, skip_special_tokens=True)
    results = {
        "detokenizer": outcome(
            lambda: detokenizer_items(
                tokenizer, serving.build_response_parser(tokenizer, model_config, prompt, tools), generated
            )
        ),
        "message": outcome(
            lambda: plain(serving.parse_assistant_message(tokenizer, model_config, generated, prompt, cleaned, tools))
        ),
    }
    handlers = outcome(lambda: handler_responses(tokenizer, model_config, prompt, generated, tools))
    if handlers[0] == "ok":
        results.update({path: ("ok", answer) for path, answer in handlers[1].items()})
    else:
        results["handlers"] = handlers
    return results


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
    name if name in QUICK_TEMPLATES else pytest.param(name, marks=pytest.mark.full) for name in sorted(FORMATS)
]


@pytest.mark.parametrize("name", ALL_TEMPLATES)
@given(data=st.data())
def test_serving_paths_equal_the_interpreters(name, data, tokenizer_directory, interpreter_and_compiled):
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    history = data.draw(st.sampled_from(["", "Earlier turns.\n", "user: hi\n"]), label="history")
    tools = (tools_for(turn.calls) or None) if data.draw(st.booleans(), label="tools") else None
    directory = tokenizer_directory(name)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokens = [str(t) for t in tokenizer.added_tokens_decoder.values()]
    spelled_out = data.draw(
        st.lists(st.sampled_from([False, False, False, True]), max_size=len(occurrences(text, tokens))),
        label="spelled out",
    )
    generated = token_ids(tokenizer, text, spelled_out)
    prompt_ids = tokenizer.encode(history + prefix, add_special_tokens=False)
    # The prompt as continuous batching passes it (a list) or as a [1, N] tensor (numpy stands in).
    prompt = np.array([prompt_ids]) if data.draw(st.booleans(), label="prompt as array") else prompt_ids
    note(f"prefix={history + prefix!r}\ntext={text!r}\nspelled_out={spelled_out}")
    assert tokenizer.decode(generated) == text  # the ids carry exactly the rendered text

    def results() -> dict:
        served = AutoTokenizer.from_pretrained(directory)  # a fresh tokenizer, as a server loads it
        found = serving_results(served, MODEL_CONFIG, prompt, generated, tools)
        parser = serving.build_response_parser(served, MODEL_CONFIG, prompt, tools)
        return {"results": found, "compiled": not isinstance(parser, InterpreterParser), "tokenizer": served}

    expected, actual = interpreter_and_compiled(results)
    assert not expected["compiled"] and actual["compiled"]  # compiled parsers, through transformers' builder
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
    model_type, outputs_of, data, tmp_path_factory, interpreter_and_compiled
):
    """A tokenizer without a response_template: transformers' fallback for the model type, compiled."""
    model_config = SimpleNamespace(model_type=model_type)
    fallback = serving.get_response_template(SimpleNamespace(), model_config)
    key = f"fallback-{model_type}"
    if key not in _TOKENIZER_DIRECTORIES:
        path = tmp_path_factory.mktemp(key)
        build_tokenizer(path, None, control_tokens(fallback))
        _TOKENIZER_DIRECTORIES[key] = path
    directory = _TOKENIZER_DIRECTORIES[key]
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
        return serving_results(served, model_config, prompt, generated, tools), isinstance(parser, InterpreterParser)

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


def test_a_template_the_compiler_does_not_take_goes_to_the_interpreter(tokenizer_directory, interpreter_and_compiled):
    """transformers' already-loaded ResponseTemplate object (not JSON): the interpreter's own parser
    and parse_response run it, with the same results."""
    directory = tokenizer_directory("qwen3")
    turn = Turn("plan", "Let me check.", [("f", {"x": 1})], prefill=False, ensure_ascii=False, call_ids=[""])
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


def test_a_processor_carries_its_tokenizer(tokenizer_directory, interpreter_and_compiled):
    """A multimodal processor: transformers reads its `.tokenizer`, and so does the acceleration."""
    directory = tokenizer_directory("qwen3")
    prompt_text = "<|im_start|>assistant\n"
    text = '<think>a</think>b<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>'

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
    """What transformers serve's modules currently bind under the names the acceleration replaces."""
    return {
        "utils": tuple(getattr(serving, name) for name in PATCHED),
        "chat_completion": chat_completion.parse_assistant_message,
        "response": response.parse_assistant_message,
        "model_manager": model_manager.run_until_parent_exits,
    }


def test_accelerating_replaces_the_names_everywhere_idempotently_and_is_undone():
    integration.deaccelerate_transformers_serve()
    before = serving_names()
    assert before["utils"] == (InterpreterParser, before["chat_completion"], before["model_manager"])
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
        assert patched["chat_completion"] is patched["response"] is integration.parse_assistant_message_accelerated
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
        '<think>\nNeed it.\n</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Zürich"}}\n</tool_call><|im_end|>',
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
                "handlers bind it": chat_completion.parse_assistant_message is serving.parse_assistant_message,
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
                staticmethod(lambda *args, api_servers: (model_process, reports, [None] * api_servers)),
            )
            with pytest.raises(RuntimeError, match="stopped: stopping the server"):
                probe.run_api_servers(count)  # (it ends once an API server stops, here after reporting)
    finally:
        for number, handler in signals.items():  # run_api_servers installs its own
            signal.signal(number, handler)
        model_process.close()
    found = []
    while not reports.empty():
        found.append(reports.get())
    return sorted(found, key=lambda report: report["index"])


def test_api_servers_started_with_spawn_run_compiled_parsers(tokenizer_directory, interpreter_and_compiled):
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
    assert f"transformers {version} is installed" in message and "supports transformers 5.25.0" in message
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
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    with pytest.raises(integration.UnsupportedTransformersError, match="transformers is not installed"):
        integration.accelerate_transformers_serve()


def test_the_supported_release_is_the_installed_one():
    """The tests above run against the release the integration supports."""
    assert transformers.__version__ in integration.SUPPORTED_TRANSFORMERS_RELEASES
    assert integration.check_transformers_release() == transformers.__version__


# ---- the command ----------------------------------------------------------------------------------


def test_the_serve_command_is_transformers_serve():
    run = subprocess.run(
        [sys.executable, "-m", "rtcompile", "serve", "--help"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "--api-server-count" in run.stdout and "--continuous-batching" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rtcompile", "serve", "--no-such-option"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "no-such-option" in bad.stderr + bad.stdout
