"""transformers integration: `rtcompile.integrations.transformers.tokenizers.accelerate` / `for_tokenizer` on real tokenizers.

The tokenizers are built here, never downloaded: a byte-level BPE without merges (every byte is a
token, so decoding gives back exactly the text that was encoded), plus the template's delimiters as
added tokens, wrapped in `PreTrainedTokenizerFast`, saved with `save_pretrained` and reloaded with
`AutoTokenizer`. Every parse runs twice, through a plain tokenizer (transformers' interpreter) and
through an accelerated one, and the two must agree exactly: same messages (types and key order
included, see `canonical`) or the same exception class (rtcompile may raise a subclass).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import transformers.tokenization_utils_base as tokenization_utils_base
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils.chat_parsing.response_templates import load_response_template

import rtcompile
from rtcompile.integrations.transformers import tokenizers as integration
from rtcompile.library import UnknownTemplateError, template_for

QWEN3 = template_for("qwen3")
ASSISTANT = "<|im_start|>assistant\n"
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
DELIMITER_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "[THINK]", "[/THINK]"]

# A second, unrelated template for schema= overrides: Mistral-style bracket tokens.
BRACKETS = {
    "start_anchor": "[ANSWER]",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "[THINK]", "close": "[/THINK]", "content": "text"},
        "content": {"content": "text"},
    },
}

PLAIN = "Paris is the capital of France.<|im_end|>"
REASONED = "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?<|im_end|>"
ONE_CALL = (
    "<think>\nNeed the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Zürich", "days": "3"}}\n</tool_call><|im_end|>'
)
PARALLEL_CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n'
    '<tool_call>\n{"name": "add", "arguments": {"a": "1", "b": "2.5", "nested": {"k": [1, "</x>"]}}}\n'
    "</tool_call><|im_end|>"
)
PREFILLED_THINKING = "The user wants a poem.\n</think>\n\nRoses are red 🌹<|im_end|>"
CUT_OFF = "<think>\nStill thinking about it, and then"
BROKEN_JSON = '<tool_call>\n{"name": "add", "arguments": {"a": 1,}\n</tool_call><|im_end|>'
OUTPUTS = [PLAIN, REASONED, ONE_CALL, PARALLEL_CALLS, PREFILLED_THINKING, CUT_OFF]

PROMPT = "<|im_start|>user\nHi<|im_end|>\n" + ASSISTANT
THINKING_PROMPT = PROMPT + "<think>\n"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
            },
        },
    },
]


# ---- tokenizers ---------------------------------------------------------------------------------


def build_tokenizer(directory: Path, response_template: dict | None) -> Path:
    byte_alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(byte_alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in DELIMITER_TOKENS])
    extra = {} if response_template is None else {"response_template": response_template}
    wrapped = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", **extra)
    wrapped.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Compiled parsers go to a cache of this module's own, never the user's."""
    patch = pytest.MonkeyPatch()
    patch.setenv("RTCOMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("rtcompile-cache")))
    yield
    patch.undo()


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("qwen3-tokenizer"), QWEN3)


@pytest.fixture(scope="module")
def bare_dir(tmp_path_factory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("bare-tokenizer"), None)


@pytest.fixture(scope="module")
def interpreted(qwen3_dir):
    """A plain tokenizer: transformers' own parse_response (never accelerated, never mutated)."""
    return AutoTokenizer.from_pretrained(qwen3_dir)


@pytest.fixture(scope="module")
def accelerated(qwen3_dir):
    return integration.accelerate(AutoTokenizer.from_pretrained(qwen3_dir))


@pytest.fixture
def fresh(qwen3_dir):
    """A tokenizer a test may accelerate, patch and change."""
    return AutoTokenizer.from_pretrained(qwen3_dir)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


# ---- comparing ----------------------------------------------------------------------------------


def canonical(value: Any) -> Any:
    """What `==` would blur: exact types (1 vs 1.0 vs True), float spelling and key order."""
    if type(value) is dict:
        return ("dict", [(key, canonical(item)) for key, item in value.items()])
    if type(value) in (list, tuple):
        return (type(value).__name__, [canonical(item) for item in value])
    return (type(value).__name__, repr(value))


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "returned", call()
    except Exception as error:  # noqa: BLE001 - the exception is the result being compared
        return "raised", error


def assert_same(interpreter: tuple[str, Any], candidate: tuple[str, Any]) -> None:
    """Equal results, or the interpreter's exception class (or a subclass) from both."""
    if interpreter[0] == "raised":
        assert (
            candidate[0] == "raised"
        ), f"interpreter raised {interpreter[1]!r}, accelerated returned {candidate[1]!r}"
        assert isinstance(candidate[1], type(interpreter[1])), (interpreter[1], candidate[1])
    else:
        assert (
            candidate[0] == "returned"
        ), f"interpreter returned {interpreter[1]!r}, accelerated raised {candidate[1]!r}"
        assert canonical(candidate[1]) == canonical(interpreter[1])


def compare_parse(interpreted, accelerated, *args, **kwargs) -> Any:
    expected = outcome(lambda: interpreted.parse_response(*args, **kwargs))
    actual = outcome(lambda: accelerated.parse_response(*args, **kwargs))
    assert_same(expected, actual)
    return expected[1]


def stream(parser, chunks) -> list:
    """Everything a streaming parser reports: initial events, events per chunk, the final message.
    It stops at the first exception: after one, the interpreter carries on from a half-done commit
    while rtcompile's parsers refuse (ParserFailedError), by design."""
    steps = [("initial", copy.deepcopy(parser.initial_events))]
    for chunk in chunks:
        steps.append(("feed", outcome(lambda: copy.deepcopy(parser.feed(chunk)))))
        if steps[-1][1][0] == "raised":
            return steps
    steps.append(("finalize", outcome(lambda: copy.deepcopy(parser.finalize()))))
    return steps


def assert_same_stream(expected: list, actual: list) -> None:
    assert len(expected) == len(actual)
    for (kind, expected_step), (other_kind, actual_step) in zip(expected, actual):
        assert kind == other_kind
        if kind == "initial":
            assert canonical(actual_step) == canonical(expected_step)
        else:
            assert_same(expected_step, actual_step)


# ---- the loaded tokenizer is what the tests think it is -----------------------------------------


def test_reloaded_tokenizer_carries_the_template_and_decodes_exactly(interpreted):
    assert isinstance(interpreted, PreTrainedTokenizerFast)
    assert interpreted.response_template == QWEN3
    for text in OUTPUTS + [PROMPT]:
        token_ids = ids(interpreted, text)
        assert interpreted.decode(token_ids) == text
    # The delimiters are single tokens, so token-level inputs exercise real special tokens.
    assert len(ids(interpreted, "<think></think><|im_end|>")) == 3


# ---- parse_response: identical results ----------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    OUTPUTS + [BROKEN_JSON],
    ids=["plain", "reasoned", "one_call", "parallel", "prefilled", "cut_off", "broken_json"],
)
@pytest.mark.parametrize(
    "prefix", ["", PROMPT, THINKING_PROMPT], ids=["no_prompt", "prompt", "thinking_prompt"]
)
def test_single_string(interpreted, accelerated, output, prefix):
    compare_parse(interpreted, accelerated, output, prefix=prefix)


def test_outputs_parse_to_the_messages_they_were_written_for(interpreted, accelerated):
    """Guards the comparisons against vacuity: the fixtures really contain reasoning and calls."""
    message = accelerated.parse_response(ONE_CALL, prefix=PROMPT)
    assert message["reasoning_content"] == "Need the weather."
    assert message["content"] == "Let me check."
    assert message["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": {"city": "Zürich", "days": "3"},
    }
    assert accelerated.parse_response(PREFILLED_THINKING, prefix=THINKING_PROMPT)[
        "reasoning_content"
    ] == ("The user wants a poem.")
    assert len(accelerated.parse_response(PARALLEL_CALLS, prefix="")["tool_calls"]) == 2


@pytest.mark.parametrize(
    "output", OUTPUTS, ids=["plain", "reasoned", "one_call", "parallel", "prefilled", "cut_off"]
)
def test_token_ids_as_list_and_numpy(interpreted, accelerated, output):
    token_ids = ids(interpreted, output)
    prefix_ids = ids(interpreted, THINKING_PROMPT)
    for response in (token_ids, np.array(token_ids), np.array(token_ids, dtype=np.int32)):
        for prefix in (prefix_ids, np.array(prefix_ids), THINKING_PROMPT, [], ""):
            result = compare_parse(interpreted, accelerated, response, prefix=prefix)
            assert isinstance(result, dict)


def test_batch_of_strings_list_and_tuple(interpreted, accelerated):
    for batch in (list(OUTPUTS), tuple(OUTPUTS)):
        result = compare_parse(interpreted, accelerated, batch, prefix=PROMPT)
        assert isinstance(result, list) and len(result) == len(OUTPUTS)


def test_batch_of_one_string_is_still_a_batch(interpreted, accelerated):
    result = compare_parse(interpreted, accelerated, [PLAIN], prefix="")
    assert isinstance(result, list) and len(result) == 1


def test_nested_token_lists_of_different_lengths(interpreted, accelerated):
    batch = [ids(interpreted, output) for output in OUTPUTS]
    assert len({len(row) for row in batch}) > 1
    result = compare_parse(interpreted, accelerated, batch, prefix=ids(interpreted, PROMPT))
    assert len(result) == len(OUTPUTS)


def test_two_dimensional_numpy_batch_with_per_item_numpy_prefixes(interpreted, accelerated):
    outputs = [REASONED, ONE_CALL.replace("Zürich", "Bern!!")]
    rows = [ids(interpreted, output) for output in outputs]
    width = max(len(row) for row in rows)
    eos = interpreted.convert_tokens_to_ids("<|im_end|>")
    batch = np.array([row + [eos] * (width - len(row)) for row in rows])  # right-padded with EOS
    prompts = [ids(interpreted, PROMPT), ids(interpreted, THINKING_PROMPT)]
    prefix_width = max(len(p) for p in prompts)
    space = ids(interpreted, " ")[0]
    prefixes = np.array([[space] * (prefix_width - len(p)) + p for p in prompts])  # left-padded
    result = compare_parse(interpreted, accelerated, batch, prefix=prefixes)
    assert len(result) == 2


def test_empty_batches(interpreted, accelerated):
    for empty in ([], ()):
        assert compare_parse(interpreted, accelerated, empty, prefix="") == []
        assert compare_parse(interpreted, accelerated, empty, prefix=[]) == []
    # The interpreter validates the template per item, so an empty batch never looks at it.
    assert compare_parse(interpreted, accelerated, [], {"fields": {}}, prefix="") == []


@pytest.mark.parametrize(
    "make_prefix",
    [
        lambda tok: PROMPT,
        lambda tok: "",
        lambda tok: [],
        lambda tok: (),
        lambda tok: ids(tok, THINKING_PROMPT),
        lambda tok: np.array(ids(tok, THINKING_PROMPT)),
    ],
    ids=["string", "empty_string", "empty_list", "empty_tuple", "token_ids", "numpy"],
)
def test_one_prefix_is_broadcast_to_the_batch(interpreted, accelerated, make_prefix):
    result = compare_parse(
        interpreted,
        accelerated,
        [PLAIN, PREFILLED_THINKING, REASONED],
        prefix=make_prefix(interpreted),
    )
    assert len(result) == 3


def test_one_prefix_per_item(interpreted, accelerated):
    outputs = [PREFILLED_THINKING, PREFILLED_THINKING, REASONED]
    prompts = [THINKING_PROMPT, PROMPT, ""]
    as_strings = compare_parse(interpreted, accelerated, outputs, prefix=prompts)
    # The thinking prompt matters: only the first item has reasoning.
    assert [("reasoning_content" in m) for m in as_strings] == [True, False, True]
    as_ids = compare_parse(
        interpreted,
        accelerated,
        [ids(interpreted, o) for o in outputs],
        prefix=[ids(interpreted, p) for p in prompts],
    )
    assert canonical(as_ids) == canonical(as_strings)
    compare_parse(interpreted, accelerated, tuple(outputs), prefix=tuple(prompts))


def test_a_one_item_prefix_batch_for_a_single_response(interpreted, accelerated):
    compare_parse(interpreted, accelerated, PREFILLED_THINKING, prefix=[THINKING_PROMPT])


@pytest.mark.parametrize(
    "override", [BRACKETS, template_for("deepseek_r1")], ids=["brackets", "deepseek_r1"]
)
def test_schema_override(interpreted, accelerated, override):
    outputs = ["[THINK]plan[/THINK]The answer", "<think>\nhmm\n</think>\n\nYes.", PLAIN]
    for output in outputs:
        compare_parse(interpreted, accelerated, output, override, prefix="")
        compare_parse(interpreted, accelerated, output, schema=override, prefix="[ANSWER][THINK]")
    compare_parse(interpreted, accelerated, outputs, override, prefix="")
    assert accelerated.parse_response("[THINK]plan[/THINK]The answer", BRACKETS, prefix="") == {
        "role": "assistant",
        "reasoning_content": "plan",
        "content": "The answer",
    }
    # The override does not stick: the tokenizer's own template is used again afterwards.
    assert (
        compare_parse(interpreted, accelerated, REASONED, prefix="")["content"]
        == "Hello! How can I help?"
    )


def test_schema_override_as_a_loaded_interpreter_template(interpreted, accelerated):
    """transformers also accepts its own loaded `ResponseTemplate`; that goes to the interpreter."""
    loaded = load_response_template(BRACKETS)
    compare_parse(interpreted, accelerated, "[THINK]a[/THINK]b", loaded, prefix="")
    expected = interpreted.get_response_parser(loaded, prefix="")
    actual = accelerated.get_response_parser(loaded, prefix="")
    assert_same_stream(
        stream(expected, ["[THI", "NK]a[/THINK]b"]), stream(actual, ["[THI", "NK]a[/THINK]b"])
    )


def test_tools_cast_arguments_like_the_interpreter(interpreted, accelerated):
    for output in (ONE_CALL, PARALLEL_CALLS):
        with_tools = compare_parse(interpreted, accelerated, output, prefix=PROMPT, tools=TOOLS)
        without = compare_parse(interpreted, accelerated, output, prefix=PROMPT)
        assert with_tools != without  # the tools changed something, so the comparison saw the casts
    typed = accelerated.parse_response(ONE_CALL, prefix=PROMPT, tools=TOOLS)
    assert typed["tool_calls"][0]["function"]["arguments"] == {"city": "Zürich", "days": 3}
    compare_parse(interpreted, accelerated, [ONE_CALL, PARALLEL_CALLS], prefix="", tools=TOOLS)


def test_python_functions_as_tools(interpreted, accelerated):
    def get_weather(city: str, days: int):
        """Get the weather.

        Args:
            city: The city.
            days: How many days.
        """

    typed = compare_parse(interpreted, accelerated, ONE_CALL, prefix=PROMPT, tools=[get_weather])
    assert typed["tool_calls"][0]["function"]["arguments"]["days"] == 3


# ---- parse_response: identical errors -----------------------------------------------------------


def test_prefix_is_required(interpreted, accelerated):
    for response in (PLAIN, [PLAIN], ids(interpreted, PLAIN), []):
        compare_parse(interpreted, accelerated, response)
        with pytest.raises(ValueError, match="requires `prefix=`"):
            accelerated.parse_response(response, prefix=None)


def test_mismatched_batch_sizes(interpreted, accelerated):
    with pytest.raises(ValueError, match=r"Got 3 response\(s\) but 2 prefix\(es\)"):
        accelerated.parse_response([PLAIN, PLAIN, PLAIN], prefix=["", ""])
    compare_parse(interpreted, accelerated, [PLAIN, PLAIN, PLAIN], prefix=["", ""])
    compare_parse(interpreted, accelerated, PLAIN, prefix=["", ""])
    compare_parse(interpreted, accelerated, [], prefix=[PROMPT])
    token_batch = [ids(interpreted, PLAIN)] * 2
    compare_parse(interpreted, accelerated, token_batch, prefix=[ids(interpreted, PROMPT)] * 3)
    compare_parse(
        interpreted,
        accelerated,
        np.array(token_batch),
        prefix=np.array([ids(interpreted, PROMPT)] * 3),
    )


def test_invalid_schema_override(interpreted, accelerated):
    for bad in (
        {"fields": {}},
        {"start_anchor": "<a>", "fields": {"x": {"open_pattern": "(", "close": "b"}}},
        "qwen3",
        7,
        [],
    ):
        compare_parse(interpreted, accelerated, PLAIN, bad, prefix="")
        # The template is checked before the missing prefix only when parsing starts, as in transformers:
        compare_parse(interpreted, accelerated, PLAIN, bad)
    with pytest.raises(rtcompile.TemplateError):
        accelerated.parse_response(PLAIN, "qwen3", prefix="")  # a name is not a template here


def test_broken_region_content(interpreted, accelerated):
    compare_parse(interpreted, accelerated, BROKEN_JSON, prefix="")
    compare_parse(interpreted, accelerated, [PLAIN, BROKEN_JSON], prefix="")
    with pytest.raises(ValueError):
        accelerated.parse_response(BROKEN_JSON, prefix="")


def test_odd_response_types(interpreted, accelerated):
    compare_parse(interpreted, accelerated, [PLAIN, 3], prefix="")  # a batch starting with a str
    compare_parse(interpreted, accelerated, None, prefix="")
    compare_parse(interpreted, accelerated, PLAIN, prefix=7)


def test_no_template_at_all(bare_dir):
    plain = AutoTokenizer.from_pretrained(bare_dir)
    fast = integration.accelerate(AutoTokenizer.from_pretrained(bare_dir))
    assert fast.response_template is None and integration.is_accelerated(fast)
    for call in (
        lambda tok: tok.parse_response(PLAIN, prefix=""),
        lambda tok: tok.parse_response(PLAIN),  # the template is checked before the prefix
        lambda tok: tok.get_response_parser(prefix=""),
    ):
        expected = outcome(lambda: call(plain))
        assert expected[0] == "raised" and type(expected[1]) is AttributeError
        actual = outcome(lambda: call(fast))
        assert type(actual[1]) is AttributeError and str(actual[1]) == str(expected[1])
    # An explicit schema still works without a template on the tokenizer.
    compare_parse(plain, fast, "[THINK]a[/THINK]b", BRACKETS, prefix="")


# ---- get_response_parser ------------------------------------------------------------------------


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize(
    "output",
    OUTPUTS + [BROKEN_JSON],
    ids=["plain", "reasoned", "one_call", "parallel", "prefilled", "cut_off", "broken_json"],
)
def test_streaming_events_match(interpreted, accelerated, output):
    for make_prefix in (
        lambda: THINKING_PROMPT,
        lambda: ids(interpreted, THINKING_PROMPT),
        lambda: "",
        lambda: [],
    ):
        for size in (1, 4, 1000):
            expected = stream(
                interpreted.get_response_parser(prefix=make_prefix(), tools=TOOLS),
                chunked(output, size),
            )
            actual = stream(
                accelerated.get_response_parser(prefix=make_prefix(), tools=TOOLS),
                chunked(output, size),
            )
            assert_same_stream(expected, actual)


def test_streaming_parser_is_compiled(accelerated):
    parser = accelerated.get_response_parser(prefix=THINKING_PROMPT)
    assert type(parser).__module__.startswith("rtcompile_generated_")
    assert parser.initial_events[0] == {"type": "region_open", "field": "reasoning_content"}


def test_streaming_override_and_errors(interpreted, accelerated):
    expected = stream(
        interpreted.get_response_parser(BRACKETS, prefix="[ANSWER][THINK]"), ["x[/TH", "INK]y"]
    )
    actual = stream(
        accelerated.get_response_parser(BRACKETS, prefix="[ANSWER][THINK]"), ["x[/TH", "INK]y"]
    )
    assert_same_stream(expected, actual)
    assert actual[-1][1][1][0]["reasoning_content"] == "x"
    bad_calls = [
        lambda tok: tok.get_response_parser(),  # prefix None: the parser itself refuses
        lambda tok: tok.get_response_parser(
            prefix=np.array([ids(tok, PROMPT)] * 2)
        ),  # two prefixes
        lambda tok: tok.get_response_parser(prefix=[ids(tok, PROMPT)] * 2),
        lambda tok: tok.get_response_parser({"fields": {}}, prefix=""),
        lambda tok: tok.get_response_parser(
            {"fields": {}}
        ),  # template error before the prefix error
        lambda tok: tok.get_response_parser("qwen3", prefix=""),
    ]
    for call in bad_calls:
        expected_error = outcome(lambda: call(interpreted))
        assert expected_error[0] == "raised"
        assert_same(expected_error, outcome(lambda: call(accelerated)))
    with pytest.raises(ValueError, match="must be a single sequence"):
        accelerated.get_response_parser(prefix=[ids(accelerated, PROMPT)] * 2)


# ---- property: any token sequence parses the same -----------------------------------------------

_PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|im_end|>",
    "<|im_start|>",
    "\n",
    " ",
    "a",
    "é",
    '{"name": "f", "arguments": {}}',
    '"',
    "{",
    "}",
]


@given(
    output=st.lists(st.sampled_from(_PIECES), max_size=14),
    prompt=st.lists(st.sampled_from(_PIECES + [ASSISTANT]), max_size=6),
    as_ids=st.booleans(),
)
def test_any_token_sequence_parses_like_the_interpreter(
    interpreted, accelerated, output, prompt, as_ids
):
    text, prefix = "".join(output), "".join(prompt)
    if as_ids:
        compare_parse(
            interpreted, accelerated, ids(interpreted, text), prefix=ids(interpreted, prefix)
        )
    else:
        compare_parse(interpreted, accelerated, [text, text + "<|im_end|>"], prefix=prefix)


# ---- what accelerate does to the tokenizer ------------------------------------------------------


def test_accelerated_parsing_never_reaches_the_interpreter(fresh, monkeypatch):
    integration.accelerate(fresh)

    def interpreter_called(*args, **kwargs):
        raise AssertionError("the interpreter was used")

    monkeypatch.setattr(tokenization_utils_base, "_template_parse_response", interpreter_called)
    monkeypatch.setattr(tokenization_utils_base, "ResponseParser", interpreter_called)
    assert fresh.parse_response(REASONED, prefix="")["content"] == "Hello! How can I help?"
    assert (
        fresh.parse_response([ids(fresh, REASONED)], prefix="")[0]["reasoning_content"]
        == "The user greets me."
    )
    fresh.get_response_parser(prefix="").feed("x")
    integration.deaccelerate(fresh)
    with pytest.raises(AssertionError, match="the interpreter was used"):
        fresh.parse_response(REASONED, prefix="")


def test_only_the_instance_is_patched(fresh, interpreted):
    cls = type(fresh)
    class_methods = (cls.parse_response, cls.get_response_parser)
    integration.accelerate(fresh)
    assert (cls.parse_response, cls.get_response_parser) == class_methods
    assert "parse_response" not in vars(interpreted) and not integration.is_accelerated(interpreted)
    assert integration.is_accelerated(fresh)
    assert isinstance(fresh.parse_response, integration._AcceleratedMethod)


def test_accelerate_is_idempotent_and_undone_by_one_deaccelerate(fresh):
    returned = integration.accelerate(fresh)
    assert returned is fresh
    patched = fresh.parse_response
    integration.accelerate(fresh)
    assert fresh.parse_response is patched
    integration.deaccelerate(fresh)
    assert not integration.is_accelerated(fresh)
    assert "parse_response" not in vars(fresh) and "get_response_parser" not in vars(fresh)
    assert fresh.parse_response.__func__ is type(fresh).parse_response
    assert integration.deaccelerate(fresh) is fresh  # a second undo is harmless
    assert fresh.response_template == QWEN3


def test_deaccelerate_restores_methods_the_instance_already_had(fresh):
    def custom(*args, **kwargs):
        return "custom"

    fresh.parse_response = custom
    integration.accelerate(fresh)
    assert fresh.parse_response is not custom
    integration.deaccelerate(fresh)
    assert fresh.parse_response is custom


def test_accelerated_tokenizer_follows_a_changed_template(fresh):
    integration.accelerate(fresh)
    fresh.response_template = BRACKETS
    assert fresh.parse_response("[THINK]a[/THINK]b", prefix="")["reasoning_content"] == "a"
    fresh.response_template = None
    with pytest.raises(AttributeError):
        fresh.parse_response(PLAIN, prefix="")


def test_accelerate_with_a_template_for_a_tokenizer_without_one(bare_dir, tmp_path):
    plain = AutoTokenizer.from_pretrained(bare_dir)
    for name in ("qwen3", "qwen3_moe"):  # a bundled name, then a model_type it serves
        tokenizer = integration.accelerate(AutoTokenizer.from_pretrained(bare_dir), name)
        assert tokenizer.response_template == QWEN3
        for output in OUTPUTS:
            assert_same(
                outcome(lambda: plain.parse_response(output, QWEN3, prefix=PROMPT, tools=TOOLS)),
                outcome(lambda: tokenizer.parse_response(output, prefix=PROMPT, tools=TOOLS)),
            )
    # save_pretrained writes the template it was given, so a reload parses without rtcompile.
    tokenizer.save_pretrained(tmp_path)
    assert (
        json.loads((tmp_path / "tokenizer_config.json").read_text())["response_template"] == QWEN3
    )
    assert AutoTokenizer.from_pretrained(tmp_path).parse_response(REASONED, prefix="")[
        "content"
    ] == ("Hello! How can I help?")
    integration.deaccelerate(tokenizer)
    assert tokenizer.response_template is None


def test_accelerate_with_a_template_replaces_it_until_deaccelerate(fresh):
    integration.accelerate(fresh, BRACKETS)
    assert fresh.response_template is BRACKETS
    integration.accelerate(fresh, "deepseek_r1")
    assert fresh.response_template == template_for("deepseek_r1")
    integration.deaccelerate(fresh)
    assert fresh.response_template == QWEN3  # the original, not the intermediate one


def test_accelerate_rejects_bad_templates_before_patching(fresh):
    with pytest.raises(UnknownTemplateError):
        integration.accelerate(fresh, "no_such_model")
    with pytest.raises(rtcompile.TemplateError) as error:
        integration.accelerate(
            fresh, {"start_anchor": "<a>", "fields": {"x": {"open_pattern": "(", "close": "b"}}}
        )
    assert error.value.path == "fields.x.open_pattern"
    with pytest.raises(TypeError):
        integration.accelerate(fresh, 42)
    assert not integration.is_accelerated(fresh)
    assert fresh.response_template == QWEN3


def test_accelerate_a_processor_patches_its_tokenizer(fresh):
    processor = types.SimpleNamespace(tokenizer=fresh)
    assert integration.accelerate(processor) is fresh
    assert integration.is_accelerated(processor) and integration.is_accelerated(fresh)
    integration.deaccelerate(processor)
    assert not integration.is_accelerated(fresh)


def test_pickle_and_deepcopy_keep_the_acceleration(fresh):
    integration.accelerate(fresh, "qwen3")
    for clone in (pickle.loads(pickle.dumps(fresh)), copy.deepcopy(fresh)):
        assert integration.is_accelerated(clone)
        assert clone.parse_response.tokenizer is clone  # bound to the clone, not the original
        assert clone.parse_response(REASONED, prefix="")["content"] == "Hello! How can I help?"
        integration.deaccelerate(clone)
        assert clone.parse_response.__func__ is type(clone).parse_response
        assert clone.response_template == QWEN3
    assert integration.is_accelerated(fresh)


# ---- for_tokenizer ------------------------------------------------------------------------------


def test_for_tokenizer_compiles_the_tokenizers_template(interpreted):
    module = integration.for_tokenizer(interpreted)
    # Not rtcompile.load(QWEN3): save_pretrained sorts the keys of the template, fields included,
    # and rtcompile's template hash keeps key order (it can be observed in messages and errors).
    assert list(interpreted.response_template["fields"]) == sorted(QWEN3["fields"])
    assert module is rtcompile.load(interpreted.response_template)
    assert module.TEMPLATE == QWEN3
    for output in OUTPUTS:
        for prefix in ("", PROMPT, THINKING_PROMPT):
            assert_same(
                outcome(lambda: interpreted.parse_response(output, prefix=prefix)),
                outcome(lambda: module.parse_response(output, prefix=prefix)),
            )
    assert not integration.is_accelerated(interpreted)


def test_for_tokenizer_without_a_template(bare_dir):
    bare = AutoTokenizer.from_pretrained(bare_dir)
    with pytest.raises(AttributeError, match="template="):
        integration.for_tokenizer(bare)
    by_name = integration.for_tokenizer(bare, "qwen3")
    assert integration.for_tokenizer(bare, "qwen3_moe") is by_name
    assert integration.for_tokenizer(bare, QWEN3) is by_name
    assert integration.for_tokenizer(types.SimpleNamespace(tokenizer=bare), "qwen2") is by_name
    gemma = integration.for_tokenizer(bare, "gemma4")
    assert gemma is not by_name and gemma.TEMPLATE == template_for("gemma4")
    with pytest.raises(UnknownTemplateError):
        integration.for_tokenizer(bare, "not_a_model_type")
    assert bare.response_template is None  # for_tokenizer leaves the tokenizer alone


def test_for_tokenizer_explicit_template_wins_and_paths_work(interpreted, tmp_path):
    assert integration.for_tokenizer(interpreted, BRACKETS).TEMPLATE == BRACKETS
    path = tmp_path / "brackets.json"
    path.write_text(json.dumps(BRACKETS))
    assert integration.for_tokenizer(interpreted, path) is integration.for_tokenizer(
        interpreted, BRACKETS
    )


def test_for_tokenizer_never_reads_a_string_template_as_a_name(fresh):
    fresh.response_template = "qwen3"  # invalid for transformers too
    with pytest.raises(rtcompile.TemplateError, match="must be a dict"):
        integration.for_tokenizer(fresh)
    with pytest.raises(ValueError):
        fresh.parse_response(PLAIN, prefix="")


# ---- imports and the CLI ------------------------------------------------------------------------


def run_python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, **kwargs
    )


def test_importing_rtcompile_does_not_import_transformers():
    result = run_python(
        "import sys, rtcompile, rtcompile.integrations.transformers.tokenizers, rtcompile.generated.qwen3\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'transformers')\n"
        "assert not loaded, loaded\n"
        "print('clean')"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


def test_cli_compiles_a_tokenizer_directory(qwen3_dir, interpreted, tmp_path):
    output = tmp_path / "parser.py"
    result = subprocess.run(
        [sys.executable, "-m", "rtcompile", str(qwen3_dir), "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    spec = importlib.util.spec_from_file_location("cli_tokenizer_parser", output)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TEMPLATE == QWEN3
    for output_text in OUTPUTS + [BROKEN_JSON]:
        for prefix in ("", THINKING_PROMPT):
            assert_same(
                outcome(
                    lambda: interpreted.parse_response(output_text, prefix=prefix, tools=TOOLS)
                ),
                outcome(lambda: module.parse_response(output_text, prefix=prefix, tools=TOOLS)),
            )


# ---- token ids as token ids (transformers 5.25.0) -----------------------------------------------
# Fast tokenizers parse token ids directly: a control token acts as a delimiter only where the
# model generated it as its id. The tokenizers below come from tests/tokenizer_pool.py, with the
# template's delimiters as added tokens (special ones, and non-special ones the chat template
# writes); generations write them both as ids and spelled out with ordinary tokens.

from hypothesis import strategies as hst  # noqa: E402

from parity import InterpreterLoop, loop_guarded_interpreter  # noqa: E402
from rtcompile.runtime import ParserLoopError  # noqa: E402
from token_strategies import Recipe, TokenCase, token_cases  # noqa: E402
from tokenizer_pool import AddedSpec, ordinary_ids  # noqa: E402
from tokenizer_pool import build_tokenizer as build_pool_tokenizer  # noqa: E402

QWEN3_TOKENS = Recipe(
    "bpe",
    (
        AddedSpec("<|im_start|>", "special"),
        AddedSpec("<|im_end|>", "special"),
        AddedSpec("<|endoftext|>", "special"),
        AddedSpec("<think>", "template"),
        AddedSpec("</think>", "template"),
        AddedSpec("<tool_call>", "template"),
        AddedSpec("</tool_call>", "template"),
    ),
)


def tokenizer_pair(recipe: Recipe):
    """Two equal tokenizers of one recipe: the interpreter's, and an accelerated one."""
    build = lambda: build_pool_tokenizer(  # noqa: E731
        recipe.base, list(recipe.added), named_templates=recipe.named_templates, listed_mode=recipe.listed_mode
    )
    return build(), integration.accelerate(build())


@pytest.fixture(scope="module")
def qwen3_token_pair():
    plain, fast = tokenizer_pair(QWEN3_TOKENS)
    plain.response_template = QWEN3
    fast.response_template = QWEN3
    return plain, fast


def spelled(tokenizer, text: str) -> list[int]:
    """`text` written with ordinary tokens only (no added token's id)."""
    return ordinary_ids("bpe", text, [], byte_wise=False)


def test_a_spelled_out_end_token_stays_text_and_an_id_ends_the_message(qwen3_token_pair):
    plain, fast = qwen3_token_pair
    answer = ids(plain, "<think>\nhm\n</think>\n\nUse ") + spelled(plain, "<|im_end|>") + ids(plain, " to stop.<|im_end|>")
    for tokenizer in (plain, fast):
        message = tokenizer.parse_response(answer, prefix=ids(plain, PROMPT))
        assert message == {
            "role": "assistant",
            "reasoning_content": "hm",
            "content": "Use <|im_end|> to stop.",
        }
    compare_parse(plain, fast, answer, prefix=ids(plain, PROMPT))


def test_token_ids_single_batches_and_arrays(qwen3_token_pair):
    plain, fast = qwen3_token_pair
    rows = [
        ids(plain, ONE_CALL),
        spelled(plain, "<think>") + ids(plain, "a</think>b<|im_end|>"),
        ids(plain, REASONED)[:7],
    ]
    prompt = ids(plain, THINKING_PROMPT)
    for response in (rows[0], np.array(rows[0]), np.array(rows[0], dtype=np.int32), tuple(rows[1])):
        for prefix in (prompt, np.array(prompt), THINKING_PROMPT, [], "", [prompt]):
            compare_parse(plain, fast, response, prefix=prefix, tools=TOOLS)
    result = compare_parse(plain, fast, rows, prefix=prompt)  # a batch, one prefix broadcast
    assert isinstance(result, list) and len(result) == 3
    compare_parse(plain, fast, rows, prefix=[prompt, [], prompt])
    compare_parse(plain, fast, rows, prefix=[prompt, prompt])  # ValueError: 3 responses, 2 prefixes
    width = max(map(len, rows))
    eos = plain.convert_tokens_to_ids("<|im_end|>")
    padded = np.array([row + [eos] * (width - len(row)) for row in rows])
    assert len(compare_parse(plain, fast, padded, prefix=np.array([prompt] * 3))) == 3
    compare_parse(plain, fast, [], prefix=prompt)  # an empty list is an empty batch of texts
    compare_parse(plain, fast, np.array([], dtype=np.int64), prefix=prompt)


def test_odd_prefixes_and_ids(qwen3_token_pair):
    plain, fast = qwen3_token_pair
    output = ids(plain, REASONED)
    for prefix in (7, 0, 1.5, None, [None], [[1, 2], [3]], {"a": 1}):
        compare_parse(plain, fast, output, prefix=prefix)
    with pytest.raises(TypeError):
        fast.parse_response(output, prefix=7)
    for response in (output + [-1], output + [1.5], [[1, 2], 3], [output, [-4]]):
        compare_parse(plain, fast, response, prefix="")


def test_torch_tensors_parse_like_lists(qwen3_token_pair):
    torch = pytest.importorskip("torch")  # (the same path as numpy arrays: to_py_obj)
    plain, fast = qwen3_token_pair
    rows = [ids(plain, ONE_CALL), ids(plain, ONE_CALL)]
    compare_parse(plain, fast, torch.tensor(rows), prefix=torch.tensor(ids(plain, PROMPT)))
    compare_parse(plain, fast, torch.tensor(rows[0]), prefix=ids(plain, PROMPT))


def test_get_response_parser_with_token_ids(qwen3_token_pair):
    plain, fast = qwen3_token_pair
    output = ids(plain, ONE_CALL) + spelled(plain, "</tool_call>") + ids(plain, "x<|im_end|>")
    for prefix in (ids(plain, THINKING_PROMPT), THINKING_PROMPT, np.array(ids(plain, PROMPT)), []):
        for size in (1, 3, 1000):
            chunks = [output[i : i + size] for i in range(0, len(output), size)] + [[]]
            expected = stream(plain.get_response_parser(prefix=prefix, tools=TOOLS, token_ids=True), chunks)
            actual = stream(fast.get_response_parser(prefix=prefix, tools=TOOLS, token_ids=True), chunks)
            assert_same_stream(expected, actual)
    parser = fast.get_response_parser(prefix=[], token_ids=True)
    assert type(parser).__module__.startswith("rtcompile_generated_")
    with pytest.raises(TypeError, match="takes token ids, not text"):
        parser.feed("text")
    assert not parser.defused
    parser.feed(spelled(plain, "<tool_call>"))
    assert parser.defused  # the model wrote a control token with ordinary tokens
    for call in (
        lambda tok: tok.get_response_parser(token_ids=True),  # no prefix
        lambda tok: tok.get_response_parser({"fields": {}}, prefix=[], token_ids=True),
        lambda tok: tok.get_response_parser(prefix=[[1], [2]], token_ids=True),
    ):
        assert_same(outcome(lambda: call(plain)), outcome(lambda: call(fast)))


@given(case=token_cases(), batch=hst.booleans(), numpy=hst.booleans())
def test_any_token_case_parses_like_the_interpreter(case: TokenCase, batch: bool, numpy: bool):
    plain, fast = tokenizer_pair(case.recipe)
    outputs = [[i for chunk in run.id_chunks for i in chunk] for run in case.runs]
    prefix = case.runs[0].prefix
    if prefix is None:
        prefix = []
    for output in outputs:
        compare_guarded_parse(plain, fast, output, case.template, prefix=prefix, tools=case.runs[0].tools)
    if batch:
        if numpy and len({len(o) for o in outputs}) == 1 and all(type(i) is int for o in outputs for i in o):
            response = np.array(outputs, dtype=np.int64)
        else:
            response = outputs
        compare_guarded_parse(plain, fast, response, case.template, prefix=prefix)


def compare_guarded_parse(interpreted, accelerated, *args, **kwargs) -> None:
    """compare_parse for generated templates, where the interpreter can spin forever (a zero-width
    open and close at one position, its event list growing until memory runs out): it runs loop
    guarded, and where it would spin, rtcompile raises ParserLoopError (the README's difference)."""
    with loop_guarded_interpreter():
        expected = outcome(lambda: interpreted.parse_response(*args, **kwargs))
    actual = outcome(lambda: accelerated.parse_response(*args, **kwargs))
    if expected[0] == "raised" and isinstance(expected[1], InterpreterLoop):
        assert actual[0] == "raised" and isinstance(actual[1], ParserLoopError), actual
        return
    assert_same(expected, actual)


def test_a_template_the_interpreter_would_spin_on_is_compared_loop_guarded():
    """A zero-width open and close at one position: the interpreter never returns from
    `tokenizer.parse_response(ids)` (its event list grows until memory runs out); guarded, it raises
    InterpreterLoop, and the accelerated tokenizer raises ParserLoopError."""
    from transformers.utils.chat_parsing import response_parser

    looping = {"start_anchor": "@", "fields": {"content": {}, "z": {"open_pattern": "(?=Q)", "close_pattern": "(?=Q)"}}}
    plain, fast = tokenizer_pair(Recipe("bpe", (AddedSpec("<|im_end|>", "special"),)))
    ids = plain.encode("abQ", add_special_tokens=False)
    original = response_parser.ResponseParser
    with loop_guarded_interpreter():
        with pytest.raises(InterpreterLoop):
            plain.parse_response(ids, looping, prefix=[])
    assert response_parser.ResponseParser is original
    with pytest.raises(ParserLoopError):
        fast.parse_response(ids, looping, prefix=[])
    compare_guarded_parse(plain, fast, ids, looping, prefix=[])
