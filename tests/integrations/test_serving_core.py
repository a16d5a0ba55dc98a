"""The serving core (rtcompile.integrations.serving) tested directly, through its own typed
operations rather than a host's renderer.

Differential against transformers 5.25.0's interpreter (hypothesis): a generation parsed whole or
streamed in random chunks, by text or by the token ids a model generates (each control token as its
id, or spelled out), accumulated by `WholeOutput`, gives the interpreter's message: the same text
per field, the same calls (names, and argument fragments that load to the message's arguments);
`Generation.has_tool_call` is whether the interpreter opened a tool-call region; `Reasoning.ended_after`
agrees with where the interpreter sends the output's first text. The reasoning-token counter is
checked against the tokens a generation writes inside its reasoning. Plus the accumulator, the tool
normalizer, the unvalidated result builder and the errors, each on its own.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pydantic
import pytest
import regex
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import rtcompile
from rtcompile.integrations.openai_stream import accumulate_deltas
from rtcompile.integrations.serving import (
    Generation,
    Reasoning,
    Route,
    ServingPlan,
    WholeOutput,
    call_parts,
    message_tool_calls,
    text_of,
    tool_dicts,
    unvalidated_builder,
)
from rtcompile.integrations.serving.host import plan_for, resolve_template, served_fields
from rtcompile.library import template_for, template_names
from strategies import chunkings

import token_serving

# --------------------------------------------------------------------------------------------------
# Generations in two bundled formats: hermes (JSON calls, qwen3 and smollm3) and glm4_5 (xml-inline)

HERMES = ("qwen3", "smollm3")
FORMATS = (*HERMES, "glm4_5")
ANCHORS = {"qwen3": "<|im_start|>assistant\n", "smollm3": "<|im_start|>assistant\n", "glm4_5": "<|assistant|>"}
ENDS = {"qwen3": "<|im_end|>", "smollm3": "<|im_end|>", "glm4_5": "<|user|>"}
# Text with delimiter look-alikes: none completes a delimiter, several start one.
_TEXT = st.lists(st.sampled_from([*"ab <>/{}\"\n:é", "<think", "</thi", "<tool", "think>"]), max_size=6).map("".join)
_WORDS = st.text(st.sampled_from(list("abxyz é中")), min_size=1, max_size=8)
_ARGUMENTS = st.dictionaries(
    st.sampled_from(["a", "city", "n"]), st.integers(-5, 99) | _WORDS | st.booleans(), max_size=3
)
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
    for name in ("get_weather", "f")
]


def _call_text(name: str, call: tuple[str, dict]) -> str:
    function, arguments = call
    if name in HERMES:
        return "<tool_call>\n" + json.dumps({"name": function, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"
    pairs = "".join(
        f"<arg_key>{key}</arg_key>\n<arg_value>{json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value}</arg_value>\n"
        for key, value in arguments.items()
    )
    return f"<tool_call>{function}\n{pairs}</tool_call>"


@st.composite
def generations(draw, name: str) -> tuple[str, str]:
    """(prompt, output) of one assistant turn in the format of bundled template `name`: reasoning
    (written, or prefilled by the prompt, or none), content, calls, the turn's end (or not)."""
    prompt = ANCHORS[name]
    output = ""
    reasoning = draw(st.sampled_from(["none", "written", "prefilled"]))
    if reasoning != "none":
        thought = draw(_TEXT)
        if reasoning == "prefilled":
            prompt += "<think>\n"
            output += thought + "\n</think>\n\n"
        else:
            output += "<think>\n" + thought + "\n</think>\n\n"
    output += draw(_TEXT)
    calls = draw(st.lists(st.tuples(st.sampled_from(["get_weather", "f"]), _ARGUMENTS), max_size=2))
    output += "\n".join(_call_text(name, call) for call in calls)
    if draw(st.booleans()):
        output += ENDS[name]
    return prompt, output


def core_run(
    template: dict, chunks: list, *, tools: Optional[list] = None, prefix: str = "", **options: Any
) -> tuple[Generation, WholeOutput]:
    """A generation of the core over `chunks` (text, or ids with `tokenizer=`), routed as the
    final message has each field, accumulated whole."""
    whole = WholeOutput()
    generation = Generation(
        plan_for(template),
        whole,
        {
            "content": Route.message("content"),
            "reasoning_content": Route.message("reasoning"),
            "tool_calls": Route.calls("content"),
        },
        prefix=prefix,
        tools=tools,
        **options,
    )
    for chunk in chunks:
        generation.feed("" if "tokenizer" in options else chunk, chunk if "tokenizer" in options else None)
    generation.finish()
    return generation, whole


def whole_view(template: dict, whole: WholeOutput) -> dict:
    return {
        "content": whole.joined("content"),
        "reasoning": whole.joined("reasoning"),
        "calls": [(call.name, json.loads(call.arguments or "{}")) for call in whole.calls],
    }


def message_view(template: dict, message: dict) -> dict:
    calls = []
    for item in message_tool_calls(message, template):
        name, arguments, _ = call_parts(item)
        calls.append((name, arguments if isinstance(arguments, dict) else json.loads(arguments)))
    return {
        "content": text_of(message.get("content")),
        "reasoning": text_of(message.get("reasoning_content")),
        "calls": calls,
    }


def assert_core_is_interpreter(template: dict, expected: Any, generation: Generation, whole: WholeOutput) -> bool:
    """The core's message and whole output are the interpreter's; for a region the interpreter
    refuses, the core keeps its text (its calls announced so far depend on the chunking). Whether
    the interpreter parsed the output."""
    if isinstance(expected, Exception):
        event("the interpreter raised")
        errors = generation.message.get("rtcompile_parse_errors")
        assert errors
        for error in errors:
            assert error["raw"] in whole.joined("content")
        return False
    message, events = expected
    closes = [e["field"] for e in events if e["type"] == "region_close"]
    if any(closes.count(f) > 1 and not template["fields"][f].get("repeats") for f in set(closes)):
        # errors="keep" joins a field written twice where the interpreter keeps the last value
        event("a field written by several regions")
        return False
    assert generation.message == message
    assert whole_view(template, whole) == message_view(template, message)
    assert not generation.divergences
    return True


# --------------------------------------------------------------------------------------------------
# Parsing: whole and streamed, by text and by token ids


@pytest.mark.parametrize("name", FORMATS)
@given(data=st.data())
def test_text_whole_and_streamed_give_the_interpreters_message(name, data):
    template = template_for(name)
    prompt, output = data.draw(generations(name), label="turn")
    chunks = data.draw(chunkings(output), label="chunks")
    tools = TOOLS if data.draw(st.booleans(), label="with tools") else None
    expected = token_serving.interpreter_run(template, prompt, chunks, tools)
    streamed, streamed_whole = core_run(template, chunks, tools=tools, prefix=prompt)
    at_once, at_once_whole = core_run(template, [output], tools=tools, prefix=prompt)
    assert not streamed.reads_ids
    assert streamed.message == at_once.message
    if assert_core_is_interpreter(template, expected, streamed, streamed_whole):
        assert whole_view(template, streamed_whole) == whole_view(template, at_once_whole)


@pytest.mark.parametrize("name", ("qwen3", "glm4_5"))
@given(data=st.data())
def test_token_ids_whole_and_streamed_give_the_interpreters_message(name, data):
    """The ids a model generates, each control token as its id or spelled out with ordinary tokens
    (then it is text), fed one or several at a time or all at once."""
    template = template_for(name)
    prompt, output = data.draw(generations(name), label="turn")
    ids = data.draw(token_serving.generation_ids(name, output), label="ids")
    chunks = data.draw(token_serving.id_chunks(ids), label="chunks")
    tools = TOOLS if data.draw(st.booleans(), label="with tools") else None
    tokenizer = token_serving.tokenizer_for(name)
    prompt_ids = token_serving.encode(name, prompt)
    note(f"prompt={prompt!r} output={output!r} chunks={chunks!r}")
    expected = token_serving.interpreter_run(template, prompt_ids, chunks, tools, tokenizer)
    options = {"tokenizer": tokenizer, "prompt_token_ids": prompt_ids}
    streamed, streamed_whole = core_run(template, chunks, tools=tools, **options)
    at_once, at_once_whole = core_run(template, [ids], tools=tools, **options)
    assert streamed.reads_ids
    assert streamed.message == at_once.message
    if assert_core_is_interpreter(template, expected, streamed, streamed_whole):
        assert whole_view(template, streamed_whole) == whole_view(template, at_once_whole)


def test_a_control_token_spelled_out_is_text_and_its_id_a_delimiter():
    template = template_for("qwen3")
    tokenizer = token_serving.tokenizer_for("qwen3")
    prompt_ids = token_serving.encode("qwen3", ANCHORS["qwen3"])
    spelled = token_serving.spelled("<think>", [3]) + token_serving.encode("qwen3", "hi")
    generation, whole = core_run(template, [spelled], tokenizer=tokenizer, prompt_token_ids=prompt_ids)
    assert whole.joined("content") == "<think>hi" and whole.joined("reasoning") == ""
    real = token_serving.encode("qwen3", "<think>hi</think>ok")
    generation, whole = core_run(template, [real], tokenizer=tokenizer, prompt_token_ids=prompt_ids)
    assert (whole.joined("reasoning"), whole.joined("content")) == ("hi", "ok")


def test_raw_routes_send_the_regions_text_as_written():
    """`Route.raw`: a region's text unstripped (vLLM's and SGLang's text), content and reasoning."""
    whole = WholeOutput()
    generation = Generation(
        plan_for(template_for("qwen3")),
        whole,
        {
            "content": Route.raw("content"),
            "reasoning_content": Route.raw("reasoning"),
            "tool_calls": Route.calls("content"),
        },
        prefix=ANCHORS["qwen3"],
    )
    for chunk in ["<think>\n plan", " \n</think>", "\n\n Hi ", "there<|im_end|>"]:
        generation.feed(chunk)
    generation.finish()
    assert whole.joined("reasoning") == "\n plan \n"
    assert whole.joined("content") == "\n\n Hi there"
    assert generation.message == {"role": "assistant", "reasoning_content": "plan", "content": "Hi there"}


# --------------------------------------------------------------------------------------------------
# has_tool_call


def _pieces(name: str) -> st.SearchStrategy[str]:
    """Pieces of a turn of format `name`: whole calls, their parts, reasoning delimiters, text."""
    call = _call_text(name, ("f", {}))
    body = '\n{"name": "f", "arguments": {}}\n' if name in HERMES else "f\n"
    return st.sampled_from([call, call, "<tool_call>", body, "</tool_call>", "<think>", "</think>", "a ", "\n", "<tool", ENDS[name]])


@pytest.mark.parametrize("name", FORMATS)
@given(data=st.data())
def test_has_tool_call_is_whether_the_interpreter_opens_a_tool_call_region(name, data):
    template = template_for(name)
    prompt_pieces = data.draw(st.lists(_pieces(name), max_size=3), label="prompt")
    pieces = data.draw(st.lists(_pieces(name), max_size=6), label="output")
    prompt, output = ANCHORS[name] + "".join(prompt_pieces), "".join(pieces)
    expected = token_serving.interpreter_run(template, prompt, [output], None)
    assume(not isinstance(expected, Exception))
    _, events = expected
    opened = any(e["type"] == "region_open" and e["field"] == "tool_calls" for e in events)
    generation, _ = core_run(template, [output], prefix=prompt)
    assert generation.has_tool_call is opened
    event(f"a tool call: {opened}")


def test_has_tool_call_counts_a_call_the_prompt_left_open_and_a_failed_one():
    template = template_for("qwen3")
    generation, whole = core_run(template, ["{not json</tool_call>"], prefix=ANCHORS["qwen3"] + "<tool_call>")
    assert generation.has_tool_call
    assert "{not json" in whole.joined("content")  # the failed region's text is kept
    generation, _ = core_run(template, ["no call here<|im_end|>"], prefix=ANCHORS["qwen3"])
    assert not generation.has_tool_call
    without_field = Generation(plan_for(template), WholeOutput(), {}, prefix=ANCHORS["qwen3"])
    without_field.feed("<tool_call>\n{}</tool_call>")
    without_field.finish()
    assert not without_field.has_tool_call  # (no tool field was given: nothing is tracked)


# --------------------------------------------------------------------------------------------------
# Reasoning: where it ends, and its tokens

_MARKER = "Ω"  # never in a generated prompt: where the interpreter sends it tells where output goes


def _reasoning_templates() -> list[str]:
    return sorted(
        name for name in template_names() if "reasoning_content" in template_for(name)["fields"]
    )


def _prompt_pieces(template: dict) -> list[str]:
    pieces = ["a", " ", "\n", "<", "|"]
    for spec in template["fields"].values():
        for key in ("open", "close"):
            value = spec.get(key)
            for literal in [value] if isinstance(value, str) else value or []:
                pieces += [literal, literal[: len(literal) // 2]]
    anchor = template.get("start_anchor")
    pieces += [anchor] if isinstance(anchor, str) else list(anchor or [])
    return pieces


@pytest.mark.parametrize("name", _reasoning_templates())
@given(data=st.data())
def test_reasoning_ended_after_a_prompt_is_where_the_interpreter_sends_the_output(name, data):
    """With thinking off, output after the prompt is past the reasoning exactly when the
    interpreter does not read the output's first text as reasoning (a prompt that opens reasoning
    at most once: vLLM's rule reads the first close of the reasoning as its end)."""
    template = template_for(name)
    spec = template["fields"]["reasoning_content"]
    pieces = data.draw(st.lists(st.sampled_from(_prompt_pieces(template)), max_size=5), label="prompt")
    prompt = "".join(pieces)
    reasoning = Reasoning.of(plan_for(template), "reasoning_content")
    if spec.get("repeats"):
        assert reasoning.ended_after(prompt, thinking_disabled=True) is False
        return
    openers = [spec["open"]] if isinstance(spec.get("open"), str) else list(spec.get("open") or [])
    assume(sum(prompt.count(opener) for opener in openers) <= 1)
    expected = token_serving.interpreter_run(template, prompt, [_MARKER], None)
    assume(not isinstance(expected, Exception))
    message, _ = expected
    marker_in_reasoning = _MARKER in text_of(message.get("reasoning_content"))
    assert reasoning.ended_after(prompt, thinking_disabled=True) is not marker_in_reasoning
    if marker_in_reasoning:  # (thinking on changes only prompts with no reasoning decided)
        assert reasoning.ended_after(prompt) is False
    event(f"ended: {not marker_in_reasoning}")


def test_reasoning_ended_with_thinking_on_and_off():
    reasoning = Reasoning.of(plan_for(template_for("qwen3")), "reasoning_content")
    anchor = ANCHORS["qwen3"]
    assert reasoning.ended_after(anchor) is False  # the model may still open its reasoning
    assert reasoning.ended_after(anchor, thinking_disabled=True) is True
    assert reasoning.ended_after(anchor + "<think>\nplan") is False
    assert reasoning.ended_after(anchor + "<think>\nplan</think>") is True
    assert reasoning.ended_after(anchor + "<think>\nplan</thi") is False  # (held back: may close)
    assert reasoning.ended_after(anchor + "<tool_call>") is True
    assert reasoning.ended_after(lambda: anchor + "<think></think>") is True  # (made when read)
    assert Reasoning.of(plan_for(template_for("qwen3")), None).ended_after("anything") is True


def test_reasoning_ended_is_false_for_a_prompt_that_cannot_be_read():
    reasoning = Reasoning.of(plan_for(template_for("qwen3")), "reasoning_content")

    def undecodable() -> str:
        raise ValueError("cannot decode")

    assert reasoning.ended_after(undecodable) is False
    assert Reasoning.of(plan_for(template_for("qwen3")), "reasoning_content") is reasoning  # (made once)


@st.composite
def reasoning_generations(draw) -> tuple[str, list[int], int]:
    """(prompt, output ids, reasoning tokens) for qwen3: the reasoning's delimiters as their ids
    (whole tokens, as in the models the templates serve), its body ordinary tokens."""
    tokenizer = token_serving.tokenizer_for("qwen3")
    think, unthink = (tokenizer.convert_tokens_to_ids(token) for token in ("<think>", "</think>"))
    body_text = draw(st.text(st.sampled_from(list("ab xé\n.")), max_size=12))
    cuts = draw(st.lists(st.integers(1, max(1, len(body_text) - 1)), max_size=4))
    body = token_serving.spelled(body_text, cuts) if body_text else []
    prefilled = draw(st.booleans())
    prompt = ANCHORS["qwen3"] + ("<think>" if prefilled else "")
    ids = ([] if prefilled else [think]) + body
    if draw(st.booleans()):  # the reasoning closes, content follows
        ids += [unthink] + token_serving.encode("qwen3", draw(st.text(st.sampled_from(list("ab <>")), max_size=6)))
    return prompt, ids, len(body)


@given(reasoning_generations(), st.data())
def test_reasoning_tokens_are_the_tokens_written_inside_the_reasoning(generation, data):
    prompt, ids, expected = generation
    tokenizer = token_serving.tokenizer_for("qwen3")
    reasoning = Reasoning.of(plan_for(template_for("qwen3")), "reasoning_content")

    def decode(token_ids: list[int]) -> str:
        return tokenizer.decode(token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    counter = reasoning.token_counter(prompt, decode)
    assert counter.count(ids) == expected
    # counted as the output grows: the same count at the end
    growing = reasoning.token_counter(prompt, decode)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4), label="cuts"))
    for cut in [*cuts, len(ids)]:
        assert growing.continues(ids[:cut])
        count = growing.count(ids[:cut])
    assert count == expected
    if ids:  # another output is not this one grown
        assert not growing.continues([ids[0] + 1, *ids[1:]])


# --------------------------------------------------------------------------------------------------
# The whole-output accumulator


def test_whole_output_keeps_texts_by_key_and_calls_in_announcement_order():
    whole = WholeOutput()
    whole.text("content", "a")
    whole.text("reasoning", "r")
    whole.call_started(0, "f", None)
    whole.arguments(0, '{"x": ')
    whole.call_started(1, "g", "call_7")
    whole.arguments(0, "1}")
    whole.arguments(5, "lost?")  # a call never announced: no call to go to
    whole.text("content", "b")
    assert whole.take() is None
    assert whole.keys() == ["content", "reasoning"]
    assert (whole.joined("content"), whole.joined("reasoning"), whole.joined("other")) == ("ab", "r", "")
    assert [(c.index, c.name, c.id, c.arguments) for c in whole.calls] == [(0, "f", None, '{"x": 1}'), (1, "g", "call_7", "")]
    assert whole.call(1) is whole.calls[1] and whole.call(5) is None


def test_accumulate_deltas_replays_a_stream_onto_the_accumulator():
    deltas = [
        {"role": "assistant"},
        {"reasoning_content": "pl"},
        {"reasoning_content": "an"},
        {"content": "Hi"},
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
    ]
    assert accumulate_deltas(deltas) == {
        "role": "assistant",
        "reasoning_content": "plan",
        "content": "Hi",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    with pytest.raises(ValueError, match="index 2 skips"):
        accumulate_deltas([{"tool_calls": [{"index": 2, "function": {"name": "f"}}]}])


# --------------------------------------------------------------------------------------------------
# The request's tools, and results built without validation


class _Function(pydantic.BaseModel):
    name: str
    description: Optional[str] = None
    parameters: Optional[dict] = None


class _Tool(pydantic.BaseModel):
    type: str = "function"
    function: _Function


def test_tool_dicts_normalizes_dicts_models_and_attribute_objects():
    as_dict = {"type": "function", "function": {"name": "a"}}
    model = _Tool(function=_Function(name="b", description="B", parameters={"type": "object"}))
    assert tool_dicts([as_dict, model, "junk", 3]) == [
        as_dict,
        {"type": "function", "function": {"name": "b", "description": "B", "parameters": {"type": "object"}}},
    ]
    assert tool_dicts([as_dict, model], parsing_only=True) == [
        as_dict,
        {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}},
    ]
    assert tool_dicts(None) == [] and tool_dicts(()) == []
    assert tool_dicts([as_dict])[0] is as_dict  # (dicts as they are, not copied)


class _Result(pydantic.BaseModel):
    text: str = ""
    calls: list = []
    note: Optional[str] = None


class _MutableDefault(pydantic.BaseModel):
    text: str = ""
    table: dict = {}


@given(st.text(max_size=8))
def test_unvalidated_builder_builds_what_validation_builds(text):
    from rtcompile.integrations.serving import same_as_validated

    build = unvalidated_builder(_Result, ("text",), [("x<y",)])
    assert build.__name__ == "build"
    made = build(text)
    assert same_as_validated(made, _Result(text=text))
    made.calls.append(1)  # a fresh default list each time
    assert build(text).calls == []
    every = unvalidated_builder(_Result, tuple(_Result.model_fields), [("a", [1], None)])
    assert same_as_validated(every(text, [text], text), _Result(text=text, calls=[text], note=text))
    two = unvalidated_builder(_Result, ("note", "text"), [("n", "a")])  # (defaults kept, given in any order)
    assert two.__name__ == "build"
    made = two(text, "t")
    assert same_as_validated(made, _Result(text="t", note=text))
    made.calls.append(1)
    assert two(text, "t").calls == []


def test_unvalidated_builder_falls_back_to_validation_where_it_cannot_match_it():
    mutable = unvalidated_builder(_MutableDefault, ("text",), [("x",)])
    assert mutable.__name__ == "validated" and mutable("x") == _MutableDefault(text="x")
    assert unvalidated_builder(_Result, ("text",), []).__name__ == "validated"

    class Plain:
        def __init__(self, text: str = "") -> None:
            self.text = text

    assert unvalidated_builder(Plain, ("text",), [("x",)]).__name__ == "validated"


# --------------------------------------------------------------------------------------------------
# Errors


def test_a_call_that_fails_to_parse_is_closed_and_its_text_kept():
    template = template_for("qwen3")
    generation, whole = core_run(
        template, ['<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": [</tool_call>tail'], prefix=ANCHORS["qwen3"]
    )
    assert [call.name for call in whole.calls] in ([], ["f"])
    for call in whole.calls:
        json.loads(call.arguments)  # closed with the arguments complete so far: valid JSON
    assert '"b": [' in whole.joined("content") and whole.joined("content").endswith("tail")


def test_a_finished_generation_takes_nothing_more():
    generation, whole = core_run(template_for("qwen3"), ["done"], prefix=ANCHORS["qwen3"])
    assert generation.finished and generation.feed("more") is None and generation.finish("more") is None
    assert whole.joined("content") == "done"


def test_a_token_generation_refuses_text():
    tokenizer = token_serving.tokenizer_for("qwen3")
    generation = Generation(
        plan_for(template_for("qwen3")),
        WholeOutput(),
        {"content": Route.message("content")},
        tokenizer=tokenizer,
        prompt_token_ids=token_serving.encode("qwen3", ANCHORS["qwen3"]),
    )
    with pytest.raises(TypeError, match="takes token ids"):
        generation.feed("text", "text")


def test_templates_a_server_cannot_serve_are_refused_in_one_line():
    def served(fields: dict, **template: Any) -> str | None:
        return served_fields(plan_for({"start_anchor": "<s>", "fields": fields, **template}))

    with pytest.raises(ValueError, match=r"fields rtcompile cannot serve: \['extra'\]") as refused:
        served({"content": {}, "extra": {"open": "<x>", "close": "</x>"}})
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=r"cannot serve: \['defaults.tone'\]"):
        served({"content": {}}, defaults={"role": "assistant", "tone": "dry"})
    with pytest.raises(ValueError, match="both `reasoning_content` and `thinking`"):
        served({"reasoning_content": {"open": "<r>", "close": "</r>"}, "thinking": {"open": "<t>", "close": "</t>"}})
    assert served({"thinking": {"open": "<t>", "close": "</t>"}, "content": {}}, defaults={"role": "assistant"}) == "thinking"
    assert served({"content": {}}) is None
    with pytest.raises(ValueError, match="no response template") as missing:
        resolve_template(None, environment_variable="RTCOMPILE_TEST_NO_SUCH_VARIABLE")
    assert "\n" not in str(missing.value)
    with pytest.raises(ValueError, match="must be a dict, a name or a path"):
        resolve_template(None, 42, environment_variable="RTCOMPILE_TEST_NO_SUCH_VARIABLE")


def test_a_plan_is_made_once_per_compiled_template():
    template = template_for("qwen3")
    assert plan_for(template) is plan_for(template) is ServingPlan.of(rtcompile.load(template))


BUNDLED = [entry["name"] for entry in rtcompile.list_templates()]


@pytest.mark.parametrize("name", BUNDLED)
def test_the_serving_plan_reads_the_facts_the_compiler_computed_from_the_ir(name):
    """The serving plan reads a template's facts off its compiled module (FIELD_FACTS,
    TEMPLATE_FACTS, CLOSERS_ENDING_IN_ANCHOR): what the front end computed from the validated IR,
    which the parser and the grammar backend read too."""
    from rtcompile.frontend import facts, lower

    template = rtcompile.read_template(name)
    ir = lower(template)
    plan = ServingPlan.of(rtcompile.load(template))
    assert plan.pattern_closed == facts.pattern_closed(ir)
    assert plan.closers == facts.closers_ending_in_anchor(ir)
    assert plan.start_anchor == facts.delimiter_literals(ir.start_anchor)
    assert plan.defaults == ir.defaults
    assert list(plan.fields) == [field.name for field in ir.fields]
    for field in ir.fields:
        fact = plan.fields[field.name]
        assert plan.literals(field.name, "open") == fact.open == facts.delimiter_literals(field.open)
        assert plan.literals(field.name, "close") == fact.close == facts.delimiter_literals(field.close)
        assert fact.open_regex == (field.open.alternation if field.open is not None else None)
        assert fact.close_regex == (field.close.alternation if field.close is not None else None)
        assert (fact.content, fact.content_args) == (field.content.parser, field.content.args)
        assert (fact.repeats, fact.join, fact.optional) == (field.repeats, field.join, field.optional)
        assert fact.transform_each == field.transform_each
        if field.transform is None:
            assert fact.call is None and fact.value_is_content
            continue
        shape, calls = facts.call_shape(field), plan.tool_call_plan(field.name)
        assert calls.each == shape.each
        for part in ("name", "arguments", "id"):
            source = getattr(shape, part)
            expected = ("unknown", None) if source is None else (source.kind, source.value)
            assert (getattr(calls, part).kind, getattr(calls, part).value) == expected
    assert ServingPlan.for_template(template) is plan  # (one plan per compiled template)


@pytest.mark.parametrize("name", BUNDLED)
def test_the_facts_are_the_interpreters_reading_of_the_template(name):
    """Every fact the serving layer reads is what transformers 5.25.0's interpreter reads off the
    same template (its `load_response_template`): the fields in order, each delimiter's literals and
    the strings its regex matches, content parser and arguments (defaults filled), repeats, join,
    optional, transform_each, whether the value is the content as parsed; the start anchor's
    literals and the defaults."""
    template = rtcompile.read_template(name)
    plan = plan_for(template)
    assert_facts_are_the_interpreters(template, plan.fields, plan.start_anchor, plan.defaults)


@given(data=st.data())
def test_the_facts_of_random_templates_are_the_interpreters_reading(data):
    """The same for generated templates, on the facts the front end computes (what the code
    generator writes into FIELD_FACTS and TEMPLATE_FACTS)."""
    from rtcompile.frontend import facts, lower
    from rtcompile.integrations.serving import FieldFacts
    from strategies import template_plans

    template = data.draw(template_plans(tool_call=data.draw(st.booleans()), valid_only=True), label="plan").template
    try:
        ir = lower(template)
    except ValueError:
        assume(False)
    fields = {name: FieldFacts(**fact) for name, fact in facts.field_facts(ir).items()}
    whole = facts.template_facts(ir)
    assert_facts_are_the_interpreters(template, fields, whole["start_anchor"], whole["defaults"])


def assert_facts_are_the_interpreters(template: dict, fields: dict, start_anchor: tuple, defaults: dict) -> None:
    from transformers.utils.chat_parsing.response_templates import load_response_template

    loaded = load_response_template(template)
    assert list(fields) == list(loaded.fields)
    assert start_anchor == tuple(loaded.start_anchor_literals or ())
    assert defaults == loaded.defaults
    for field_name, interpreted in loaded.fields.items():
        fact = fields[field_name]
        assert fact.has_opener == (interpreted.open_re is not None)
        assert fact.pattern_closed == (interpreted.close_re is not None and interpreted.close_literals is None)
        for literals, regex_source, compiled, interpreted_literals in (
            (fact.open, fact.open_regex, interpreted.open_re, interpreted.open_literals),
            (fact.close, fact.close_regex, interpreted.close_re, interpreted.close_literals),
        ):
            assert (regex_source is None) == (compiled is None)
            if compiled is None:
                continue
            assert literals == tuple(interpreted_literals or ())
            if interpreted_literals is None:
                assert regex_source == compiled.pattern
            for literal in interpreted_literals or ():  # (the same alternative wins: longest first)
                assert regex.match(regex_source, literal).group() == compiled.match(literal).group()
        assert (fact.content, fact.content_args) == (interpreted.content, interpreted.content_args)
        # (the interpreter keeps repeats and optional as written and tests their truth: the facts are bools)
        assert (fact.repeats, fact.optional) == (bool(interpreted.repeats), bool(interpreted.optional))
        assert fact.join == interpreted.join
        assert fact.transform_each == interpreted.transform_each
        assert fact.value_is_content == (interpreted.transform in (None, "{content}"))


@pytest.mark.parametrize("name", BUNDLED)
def test_a_servers_variant_keeps_each_fields_delimiters(name):
    """The template a server parses with (made by the front end from the validated template): no
    field required, text outside every region kept (unless a content field of its own has an
    opener: the servers add one named content); every field as the template has it, or, the
    tool-call field passed on verbatim, plain text between the same delimiters (an opener that is
    no single literal captured, to be sent as written)."""
    from dataclasses import replace

    from rtcompile.integrations.serving import OPENER_GROUP
    from rtcompile.integrations.serving.host import served_plan

    base = plan_for(template_for(name))
    for tool_calls in ("parse", "verbatim"):
        served = served_plan(base, tool_calls=tool_calls)
        assert served.implicit_field is not None or ("content" in base.fields and base.fields["content"].has_opener)
        assert all(fact.optional for fact in served.fields.values())
        assert served.start_anchor == base.start_anchor and served.defaults == base.defaults
        for field, fact in base.fields.items():
            got = served.fields[field]
            if tool_calls == "parse" or field != "tool_calls":
                assert got == replace(fact, optional=True)
                continue
            assert (got.content, got.repeats, got.close_regex) == ("text", fact.repeats, fact.close_regex)
            if len(fact.open) == 1:
                assert (got.open, got.value_is_content) == (fact.open, True)
            else:
                assert got.open_regex == f"(?P<{OPENER_GROUP}>{fact.open_regex})" and got.call is not None
        assert set(served.fields) - set(base.fields) <= {"content"}
