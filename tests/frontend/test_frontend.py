"""The front end accepts and rejects exactly what the interpreter does, naming the JSON path."""

import copy
import json

import pytest
from transformers.utils.chat_parsing.response_templates import load_response_template

import rtcompile
from rtcompile import frontend

BASE = {
    "start_anchor": "<|assistant|>",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open_pattern": r"<call name=(?P<name>\w+)>",
            "close": "</call>",
            "content": "json",
            "repeats": True,
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close": "<|end|>"},
    },
}


def variant(**edits):
    """BASE with edits: key paths joined by '__' (fields__content__close=...), None deletes."""
    template = copy.deepcopy(BASE)
    for dotted, value in edits.items():
        *parents, last = dotted.split("__")
        node = template
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return template


DELETE = object()

INVALID = [
    ("not a dict", ["a list"], ""),
    ("version 2", variant(version=2), "version"),
    ("unknown top-level key", variant(extra=1), ""),
    ("defaults not a dict", variant(defaults=[1]), "defaults"),
    ("no fields", variant(fields={}), "fields"),
    ("fields not a dict", variant(fields=[1]), "fields"),
    ("field not a dict", variant(fields__content="text"), "fields.content"),
    ("unknown field key", variant(fields__content__opne="x"), "fields.content"),
    ("unknown content parser", variant(fields__content__content="yaml"), "fields.content.content"),
    ("unhashable content parser", variant(fields__content__content=["text"]), "fields.content.content"),
    ("open and open_pattern", variant(fields__reasoning_content__open_pattern="x"), "fields.reasoning_content"),
    ("close and close_pattern", variant(fields__content__close_pattern="x"), "fields.content"),
    ("empty literal list", variant(fields__content__close=[]), "fields.content.close"),
    ("non-string literal", variant(fields__content__close=["a", 1]), "fields.content.close"),
    ("empty literal", variant(fields__content__close=["a", ""]), "fields.content.close"),
    ("literal of wrong type", variant(fields__content__close=3), "fields.content.close"),
    ("invalid regex", variant(fields__tool_calls__open_pattern="(<call"), "fields.tool_calls.open_pattern"),
    ("pattern not a string", variant(fields__content__close_pattern=5, fields__content__close=DELETE), "fields.content.close_pattern"),
    ("join not a string", variant(fields__tool_calls__join=1), "fields.tool_calls.join"),
    ("join without repeats", variant(fields__content__join="\n"), "fields.content.join"),
    ("transform_each not a bool", variant(fields__tool_calls__transform_each="yes"), "fields.tool_calls.transform_each"),
    ("transform_each without transform", variant(fields__content__transform_each=True), "fields.content.transform_each"),
    ("mixed placeholder", variant(fields__tool_calls__transform={"f": "call {name}"}), "fields.tool_calls.transform.f"),
    ("named group without transform", variant(fields__tool_calls__transform=DELETE), "fields.tool_calls.open_pattern"),
    ("two implicit fields", variant(fields__reasoning_content__open=DELETE), "fields"),
    ("no start anchor", variant(start_anchor=DELETE), ""),
    ("start anchor and pattern", variant(start_anchor_pattern="x"), ""),
    ("invalid start anchor pattern", variant(start_anchor=DELETE, start_anchor_pattern="["), "start_anchor_pattern"),
]


@pytest.mark.parametrize("name, template, path", INVALID, ids=[case[0] for case in INVALID])
def test_rejected_like_the_interpreter_with_the_json_path(name, template, path):
    with pytest.raises(Exception) as expected:
        load_response_template(copy.deepcopy(template))
    with pytest.raises(Exception) as actual:
        rtcompile.compile_template(template)
    assert isinstance(actual.value, type(expected.value)), (type(actual.value), type(expected.value))
    assert isinstance(actual.value, frontend.TemplateError)
    assert actual.value.path == path
    if path:
        assert str(actual.value).startswith(path + ": ")


ACCEPTED_QUIRKS = [
    ("version true equals 1", variant(version=True)),
    ("version 1.0", variant(version=1.0)),
    ("content_args not a dict (fails only while parsing)", variant(fields__content__content_args=[1])),
    ("xml-inline without tag_pattern", variant(fields__content__content="xml-inline")),
    ("repeats of any type", variant(fields__content__repeats="no")),
    ("placeholder that can never resolve", variant(fields__content__transform="{nothing}")),
    ("duplicate literals", variant(fields__content__close=["<|end|>", "<|end|>", "<eos>"])),
    ("literal list anchor", variant(start_anchor=["<a>", "<b>"])),
    ("zero-width close", variant(fields__content__close=DELETE, fields__content__close_pattern=r"(?=<)")),
]


@pytest.mark.parametrize("name, template", ACCEPTED_QUIRKS, ids=[case[0] for case in ACCEPTED_QUIRKS])
def test_accepted_like_the_interpreter(name, template):
    load_response_template(copy.deepcopy(template))
    source = rtcompile.compile_template(template)
    assert "class ResponseParser(Machine)" in source


def test_ir_keeps_field_order_and_dedupes_literals():
    lowered = frontend.lower(variant(fields__content__close=["<|end|>", "<eos>", "<|end|>"]))
    assert [f.name for f in lowered.fields] == ["reasoning_content", "tool_calls", "content"]
    assert lowered.fields[2].close.literals == ("<|end|>", "<eos>")
    assert lowered.implicit == 2
    assert lowered.fields[1].open.group_names == ("name",)


def test_literal_lists_that_extend_each_other_are_marked():
    lowered = frontend.lower(variant(fields__content__close=["<e", "<end>"]))
    assert lowered.fields[2].close.can_extend
    assert not frontend.lower(BASE).fields[2].close.can_extend


def test_json_path_brackets_names_that_are_not_plain_words():
    assert frontend.json_path("fields", "tool_calls", "open") == "fields.tool_calls.open"
    assert frontend.json_path("fields", "a.b\n", "close") == 'fields["a.b\\n"].close'


def test_template_errors_are_value_errors_carrying_the_path():
    with pytest.raises(ValueError) as info:
        rtcompile.compile_template(variant(fields__content__close_pattern="(", fields__content__close=DELETE))
    assert info.value.path == "fields.content.close_pattern"
    assert "invalid regex" in str(info.value)


def test_python_only_values_are_refused_with_a_clear_error():
    with pytest.raises(frontend.TemplateError, match="must be data"):
        rtcompile.compile_template(variant(defaults={"when": object()}))


def test_tuples_are_kept_apart_from_lists_as_the_interpreter_does():
    as_tuple = variant(fields__content__transform=("{content}", 1))
    as_list = variant(fields__content__transform=["{content}", 1])
    assert frontend.lower(as_tuple).sha256 != frontend.lower(as_list).sha256
    text = "<think>r</think>answer<|end|>"
    assert rtcompile.parse_response(text, as_tuple, prefix="")["content"] == ("{content}", 1)
    assert rtcompile.parse_response(text, as_list, prefix="")["content"] == ["answer", 1]


def test_the_public_names_are_all_dir_shows():
    assert {"Any", "annotations", "importlib"}.isdisjoint(dir(rtcompile))
    assert set(rtcompile.__all__) <= set(dir(rtcompile))
    for name in rtcompile.__all__:
        assert getattr(rtcompile, name) is not None


def test_the_drop_ins_take_a_template_file(tmp_path):
    """`load` reads a path; so do the interpreter's drop-ins and template_for."""
    template = rtcompile.template_for("qwen3")
    path = tmp_path / "my.json"
    path.write_text(json.dumps(template), encoding="utf-8")
    generation = "<think>a</think>b"
    expected = rtcompile.parse_response(generation, template, prefix="")
    for spec in (str(path), path):
        assert rtcompile.parse_response(generation, spec, prefix="") == expected
        parser = rtcompile.ResponseParser(spec, "")
        parser.feed(generation)
        assert parser.finalize()[0] == expected
        assert rtcompile.template_for(spec) == template
    tokenizer_dir = tmp_path / "tok"
    tokenizer_dir.mkdir()
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps({"response_template": template}), encoding="utf-8")
    assert rtcompile.template_for(tokenizer_dir) == template
