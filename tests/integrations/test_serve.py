"""transformers serve on compiled parsers (rtcompile.integrations.transformers.serve), through transformers.cli.serving itself.

Every bundled template, with generated turns and random chunkings: after
`accelerate_transformers_serve()`, transformers' own `build_response_parser` hands out compiled
parsers, its `DirectStreamer` / `CBStreamer` queue the same items (`response_events_to_chunks`),
and its `parse_assistant_message` returns the same (content, reasoning, tool calls) as with the
interpreter. The tokenizers are built here (byte-level BPE with the delimiters as added tokens,
saved and reloaded with AutoTokenizer): no hub.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.cli.serving import utils as serving
from transformers.utils.chat_parsing import ResponseParser as InterpreterParser

import rtcompile
import rtcompile.integrations.transformers.serve
from rtcompile.library import template_for
from strategies import chunkings
from test_openai_stream import FORMATS, tools_for, turns


def delimiters(template: dict) -> list[str]:
    """The template's literal delimiters and anchors: added tokens, as in the real tokenizers."""
    found: set[str] = set()
    anchor = template.get("start_anchor")
    found.update([anchor] if isinstance(anchor, str) else anchor or [])
    for spec in template["fields"].values():
        for key in ("open", "close"):
            value = spec.get(key)
            found.update([value] if isinstance(value, str) else value or [])
    return sorted(found)


def build_tokenizer(directory: Path, template: dict | None, specials: list[str]) -> Any:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    extra = {} if template is None else {"response_template": template}
    PreTrainedTokenizerFast(tokenizer_object=backend, **extra).save_pretrained(directory)
    return AutoTokenizer.from_pretrained(directory)


_TOKENIZERS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    def directory(name: str) -> Path:
        if name not in _TOKENIZERS:
            template = template_for(name)
            path = tmp_path_factory.mktemp(f"tokenizer-{name}")
            build_tokenizer(path, template, delimiters(template))
            _TOKENIZERS[name] = path
        return _TOKENIZERS[name]

    return directory


@pytest.fixture
def accelerated_serve():
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()
    yield
    rtcompile.integrations.transformers.serve.deaccelerate_transformers_serve()


def original(function: Any) -> Any:
    """transformers' own function behind a patched one."""
    return getattr(function, "_rtcompile_original", function)


MODEL = SimpleNamespace(config=SimpleNamespace(model_type="not-a-bundled-type"))


class Tensor(list):
    """What the streamers read of a tensor (`tolist`): torch is not needed to drive them."""

    def tolist(self) -> list:
        return list(self)


def direct_streamer_items(tokenizer, parser, token_ids: list[int]) -> list:
    """The stream-queue items transformers' DirectStreamer produces for these generated tokens."""
    loop = asyncio.new_event_loop()
    try:
        queue: asyncio.Queue = asyncio.Queue()
        streamer = serving.DirectStreamer(tokenizer._tokenizer, loop, queue, response_parser=parser)
        streamer.put(Tensor([0]))  # the first put is the prompt: skipped
        for token_id in token_ids:
            streamer.put(Tensor([token_id]))
        streamer.end()
        loop.run_until_complete(asyncio.sleep(0))
        items = []
        while not queue.empty():
            items.append(queue.get_nowait())
        return items
    finally:
        loop.close()


def cb_streamer_items(tokenizer, parser, token_ids: list[int]) -> list:
    queue: asyncio.Queue = asyncio.Queue()
    streamer = serving.CBStreamer(None, "r", tokenizer._tokenizer, None, queue, response_parser=parser)
    generated: list[int] = []
    for token_id in token_ids:
        generated.append(token_id)
        streamer.put(SimpleNamespace(generated_tokens=list(generated)))
    streamer.end()
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def comparable(items: list) -> list:
    """Queue items as plain data: text, reasoning text, and tool calls (name, arguments text)."""
    out = []
    for item in items:
        if isinstance(item, serving.ToolCall):
            out.append(("call", item.name, item.arguments))
        elif isinstance(item, serving.ReasoningText):
            out.append(("reasoning", str(item)))
        else:
            out.append(("text", item))
    return out


def outcome(call) -> tuple:
    try:
        return ("ok", call())
    except Exception as error:  # noqa: BLE001 - both sides must fail the same way
        return ("raised", error)


def assert_same_outcome(expected: tuple, actual: tuple) -> None:
    """The same result, or an exception of the interpreter's class (rtcompile's are subclasses)."""
    if expected[0] == "raised":
        assert actual[0] == "raised" and isinstance(actual[1], type(expected[1])), actual
    else:
        assert actual == expected


@pytest.mark.parametrize("name", sorted(FORMATS))
@settings(max_examples=min(settings().max_examples, 40))
@given(data=st.data())
def test_serving_path_equals_the_interpreters(name, data, tokenizer_dirs):
    turn = data.draw(turns(name), label="turn")
    prefix, text = FORMATS[name].render(turn)
    tools = (tools_for(turn.calls) or None) if data.draw(st.booleans(), label="tools") else None
    note(f"prefix={prefix!r}\ntext={text!r}")
    directory = tokenizer_dirs(name)
    plain = AutoTokenizer.from_pretrained(directory)
    input_ids = plain.encode(prefix, add_special_tokens=False)
    generated = plain.encode(text, add_special_tokens=False)
    assert plain.decode(generated) == text  # the streams below see exactly the rendered text

    expected_parser = original(serving.ResponseParser)
    expected_message = outcome(
        lambda: original(serving.parse_assistant_message)(plain, MODEL, generated, input_ids, "", tools)
    )
    # (transformers' own chunking of a `transform_each` region's list value raises: the same
    # failure is expected of the compiled path then)
    expected_direct = outcome(
        lambda: comparable(
            direct_streamer_items(
                plain, serving.build_response_parser(plain, MODEL, input_ids, tools), generated
            )
        )
    )
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()
    try:
        served = AutoTokenizer.from_pretrained(directory)
        parser = serving.build_response_parser(served, MODEL, input_ids, tools)
        assert not isinstance(parser, expected_parser)  # a compiled parser, through transformers' builder
        assert_same_outcome(
            expected_direct,
            outcome(lambda: comparable(direct_streamer_items(served, parser, generated))),
        )
        cb_parser = serving.build_response_parser(served, MODEL, input_ids, tools)
        assert_same_outcome(
            expected_direct,
            outcome(lambda: comparable(cb_streamer_items(served, cb_parser, generated))),
        )
        message = outcome(
            lambda: serving.parse_assistant_message(served, MODEL, generated, input_ids, "", tools)
        )
        assert rtcompile.is_accelerated(served)
    finally:
        rtcompile.integrations.transformers.serve.deaccelerate_transformers_serve()
    assert_same_outcome(expected_message, message)

    # the events behind the chunks, for a random chunking of the decoded text
    chunks = data.draw(chunkings(text), label="chunks")
    interpreter = InterpreterParser(template_for(name), prefix=prefix, tools=tools)
    compiled = rtcompile.ResponseParser(template_for(name), prefix, tools=tools)
    for chunk in chunks:
        expected = outcome(lambda: serving.response_events_to_chunks(interpreter.feed(chunk)))
        assert_same_outcome(
            expected, outcome(lambda: serving.response_events_to_chunks(compiled.feed(chunk)))
        )
        if expected[0] == "raised":  # (after a failure the two parsers differ by design: README)
            break


def test_model_type_fallbacks_and_no_template(tmp_path, accelerated_serve):
    """A tokenizer without a template: transformers' fallback for the model type is compiled; with
    no fallback either, no parser and the cleaned text, as before."""
    bare = build_tokenizer(tmp_path, None, ["<|im_start|>", "<|im_end|>", "<think>", "</think>"])
    qwen = SimpleNamespace(config=SimpleNamespace(model_type="qwen3"))
    prompt = bare.encode("<|im_start|>assistant\n", add_special_tokens=False)
    output = bare.encode("<think>hmm</think>Hello<|im_end|>", add_special_tokens=False)
    parser = serving.build_response_parser(bare, qwen, prompt)
    assert parser is not None and not isinstance(parser, InterpreterParser)
    assert serving.parse_assistant_message(bare, qwen, output, prompt, "cleaned") == ("Hello", "hmm", None)
    assert serving.build_response_parser(bare, MODEL, prompt) is None
    assert serving.parse_assistant_message(bare, MODEL, output, prompt, "cleaned") == ("cleaned", None, None)


def test_a_processor_carries_its_tokenizer(tokenizer_dirs, accelerated_serve):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dirs("qwen3"))
    processor = SimpleNamespace(tokenizer=tokenizer)
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    output = tokenizer.encode(
        '<think>a</think>b<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call><|im_end|>',
        add_special_tokens=False,
    )
    content, reasoning, calls = serving.parse_assistant_message(processor, MODEL, output, prompt)
    assert (content, reasoning) == ("b", "a")
    assert calls == [serving.ToolCall(name="f", arguments='{"x": 1}')]
    assert rtcompile.is_accelerated(tokenizer)


def test_accelerating_is_idempotent_and_undone(monkeypatch):
    before = (serving.ResponseParser, serving.parse_assistant_message)
    # a handler module imported before the call (the real ones need the serving extras)
    handler = SimpleNamespace(parse_assistant_message=serving.parse_assistant_message)
    monkeypatch.setitem(sys.modules, "transformers.cli.serving.chat_completion", handler)
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()
    patched = (serving.ResponseParser, serving.parse_assistant_message)
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()
    try:
        assert rtcompile.integrations.transformers.serve.is_transformers_serve_accelerated()
        assert (serving.ResponseParser, serving.parse_assistant_message) == patched
        assert patched != before
        assert handler.parse_assistant_message is serving.parse_assistant_message
        assert original(serving.ResponseParser) is before[0]
    finally:
        rtcompile.integrations.transformers.serve.deaccelerate_transformers_serve()
    assert (serving.ResponseParser, serving.parse_assistant_message) == before
    assert handler.parse_assistant_message is before[1]
    assert not rtcompile.integrations.transformers.serve.is_transformers_serve_accelerated()


def test_the_serve_command_is_transformers_serve():
    run = subprocess.run(
        [sys.executable, "-m", "rtcompile", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "--port" in run.stdout and "--continuous-batching" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rtcompile", "serve", "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "no-such-option" in bad.stderr + bad.stdout
