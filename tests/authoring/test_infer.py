"""infer: response templates derived from chat templates' renders, then proven by verify."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", reason="infer renders with transformers (the `test` extra installs it)")

from rtcompile.authoring import infer as infer_module  # noqa: E402
from rtcompile.authoring import verify as v  # noqa: E402
from rtcompile.__main__ import main  # noqa: E402
from rtcompile.authoring.chat_render import ChatRenderer, ChatTemplate, load_chat_template  # noqa: E402
from rtcompile.library import template_for, template_names  # noqa: E402
from test_verify import CHATML  # noqa: E402
from test_verify_bundled import CHAT_TEMPLATES, TABLE  # noqa: E402

# Calls as XML-style parameter tags inside a wrapper, reasoning in [THINK]..[/THINK], a role line.
XML_PARAMS = """
{%- for m in messages -%}
[{{ m.role }}]
{%- if m.role == 'assistant' -%}
{% if m.reasoning_content %}[THINK]{{ m.reasoning_content }}[/THINK]{% endif %}{{ m.content or '' }}
{%- for c in m.tool_calls or [] %}<call name="{{ c.function.name }}">
{%- for k, val in c.function.arguments.items() %}<arg key="{{ k }}">{{ val if val is string else val|tojson }}</arg>{% endfor -%}
</call>{% endfor %}[END]
{% else %}{{ m.content }}[END]
{% endif -%}
{% endfor -%}
{%- if add_generation_prompt %}[assistant]{% endif -%}
""".strip()

# A Python-style call list between wrapper tokens; no reasoning.
PYTHON_CALLS = """
{%- for m in messages -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- if m.tool_calls %}<|calls|>[
{%- for c in m.tool_calls %}{{ c.function.name }}(
{%- for k, val in c.function.arguments.items() %}{{ k }}={{ val|tojson }}{{ ", " if not loop.last }}{% endfor %})
{{- ", " if not loop.last }}{% endfor %}]<|/calls|>{% endif %}<|end|>
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}
""".strip()

# No tool calls and no reasoning at all.
PLAIN = """
{%- for m in messages %}<s>{{ m.role }}: {{ m.content }}</s>{% endfor -%}
{%- if add_generation_prompt %}<s>assistant: {% endif -%}
""".strip()


def infer_and_verify(source: str, examples: int = 4):
    with ChatRenderer(ChatTemplate(source, "test.jinja")) as renderer:
        inference = infer_module.infer(renderer)
        infer_module.validate(inference.template)
        report = v.verify(inference.template, renderer, examples=examples)
    return inference, report


def parts(inference) -> dict:
    return {part.name: part for part in inference.parts}


def test_chatml_with_json_calls():
    inference, report = infer_and_verify(CHATML)
    fields = inference.template["fields"]
    assert inference.template["start_anchor"] == "<|im_start|>assistant\n"
    assert fields["reasoning_content"] == {"open": "<think>", "close": "</think>", "content": "text"}
    assert fields["tool_calls"]["content"] == "json"
    assert fields["tool_calls"]["transform"] == {"type": "function", "function": "{content}"}
    assert fields["content"]["close_pattern"] == r"\s*(?:<\|im_end\|>)"
    assert report.count(v.FAILED) == 0 and report.count(v.UNRENDERABLE) == 0, report.format_text()


def test_xml_parameter_tags():
    inference, report = infer_and_verify(XML_PARAMS)
    fields = inference.template["fields"]
    assert fields["reasoning_content"]["open"] == "[THINK]" and fields["reasoning_content"]["close"] == "[/THINK]"
    assert fields["tool_calls"]["content"] == "xml-inline"
    assert "(?P<key>" in fields["tool_calls"]["content_args"]["tag_pattern"]
    assert fields["content"]["close_pattern"] == r"\s*(?:\[END\])"
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.count(v.PASSED) == len(v.fixed_cases()) + 4, report.format_text()


def test_python_style_call_list():
    inference, report = infer_and_verify(PYTHON_CALLS)
    calls = inference.template["fields"]["tool_calls"]
    assert calls["content"] == "python-call-list" and calls["transform_each"] is True
    assert calls["close"] == "<|/calls|>"
    assert "reasoning_content" not in inference.template["fields"]
    assert parts(inference)["reasoning"].status == "not derived"
    # Python-style lists parse once rtcompile's python-call-list parser is in; until then they fail.
    call_cases = [r for r in report.results if r.id in ("one_call", "parallel_calls")]
    assert call_cases and all(r.status in (v.PASSED, v.FAILED) for r in call_cases)
    assert all(r.status == v.PASSED for r in report.results if r.id in ("answer", "answer_multi_turn"))


def test_what_cannot_be_derived_is_said_and_the_rest_is_written():
    inference, report = infer_and_verify(PLAIN)
    found = parts(inference)
    assert found["tool_calls"].status == "not derived"
    assert found["reasoning"].status == "not derived"
    assert set(inference.template["fields"]) == {"content"}
    assert inference.template["fields"]["content"]["close_pattern"] == r"\s*(?:</s>)"
    assert report.count(v.FAILED) == 0
    assert {r.id for r in report.results if r.status == v.PASSED} >= {"answer", "answer_multi_turn"}
    assert "tool_calls       not derived" in inference.format_text()


def test_infer_never_reads_a_family_table():
    """The same format with every marker renamed is inferred just as well."""
    renamed = CHATML.replace("<|im_start|>", "<|begin_turn|>").replace("<|im_end|>", "<|finish_turn|>")
    renamed = renamed.replace("<think>", "<ponder>").replace("</think>", "</ponder>")
    renamed = renamed.replace("<tool_call>", "<invoke_fn>").replace("</tool_call>", "</invoke_fn>")
    inference, report = infer_and_verify(renamed, examples=0)
    assert inference.template["fields"]["reasoning_content"]["open"] == "<ponder>"
    assert report.count(v.FAILED) == 0 and report.count(v.PASSED) == len(v.fixed_cases()), report.format_text()


REAL_ROWS = [
    pytest.param(label, file_name, bundled, variables, id=label)
    for label, file_name, bundled, variables in TABLE.ROWS
    if (CHAT_TEMPLATES / file_name).is_file()
]


@pytest.mark.parametrize(("label", "file_name", "bundled", "variables"), REAL_ROWS)
def test_inferred_passes_at_least_as_many_cases_as_the_bundled_template(label, file_name, bundled, variables):
    with ChatRenderer(load_chat_template(CHAT_TEMPLATES / file_name), variables) as renderer:
        inference = infer_module.infer(renderer)
        infer_module.validate(inference.template)
        # Portable: transformers' interpreter must parse every case back too.
        inferred = v.verify(inference.template, renderer, variables=variables, examples=2, parsers=v.PARSERS)
        if bundled in template_names():
            reference = v.verify(template_for(bundled), renderer, variables=variables, examples=2)
            assert inferred.count(v.PASSED) >= reference.count(v.PASSED), inferred.format_text()
    assert inferred.count(v.PASSED) >= 1, inferred.format_text()


def test_cli_writes_the_template_and_prints_the_report(tmp_path, capsys):
    (tmp_path / "chat.jinja").write_text(CHATML, encoding="utf-8")
    out = tmp_path / "template.json"
    assert main(["infer", str(tmp_path / "chat.jinja"), "-o", str(out), "--examples", "2"]) == 0
    printed = capsys.readouterr().out
    assert "inferred parts:" in printed and "0 failed" in printed
    template = json.loads(out.read_text(encoding="utf-8"))
    assert template["start_anchor"] == "<|im_start|>assistant\n"
    assert main(["verify", str(out), "--chat-template", str(tmp_path / "chat.jinja"), "--examples", "0"]) == 0


def test_cli_json_and_a_missing_chat_template(tmp_path, capsys):
    (tmp_path / "chat.jinja").write_text(PLAIN, encoding="utf-8")
    assert main(["infer", str(tmp_path / "chat.jinja"), "--json", "--examples", "0"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"template", "parts", "verify"} and result["verify"]["failed"] == 0
    assert main(["infer", str(tmp_path / "nope.jinja")]) == 2
    assert "no such chat template" in capsys.readouterr().err


# Formats no bundled template has, each in a ChatML-like frame with its own reasoning markers:
# infer must derive them from the renders alone.
FRAME = """{%- for m in messages -%}
<|start|>{{ m.role }}<|sep|>
{%- if m.role == 'assistant' -%}
{% if m.reasoning_content %}[REASON]{{ m.reasoning_content }}[/REASON]{% endif %}{{ m.content or '' }}CALLS<|stop|>
{%- else %}{{ m.content }}<|stop|>{% endif %}
{% endfor -%}
{%- if add_generation_prompt %}<|start|>assistant<|sep|>{% endif -%}"""
UNSEEN_CALLS = {
    "kv_lines": "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}\n{% for k, val in c.function.arguments.items() %}{{ k }}: {{ val if val is string else val|tojson }}\n{% endfor %}</tool_call>{% endfor %}",
    "name_in_tag": "{% for c in m.tool_calls or [] %}<function={{ c.function.name }}>{{ c.function.arguments|tojson }}</function>{% endfor %}",
    "plugin_object": "{% for c in m.tool_calls or [] %}<|action_start|><|plugin|>\n{{ {'name': c.function.name, 'parameters': c.function.arguments}|tojson }}<|action_end|>\n{% endfor %}",
    "json_list": "{% if m.tool_calls %}<|tool_call|>{{ m.tool_calls|map(attribute='function')|list|tojson }}{% endif %}",
    "fenced_section": "{% if m.tool_calls %}<calls_begin>{% for c in m.tool_calls %}<call_begin>function<sep>{{ c.function.name }}\n```json\n{{ c.function.arguments|tojson }}\n```<call_end>{% if not loop.last %}\n{% endif %}{% endfor %}<calls_end>{% endif %}",
    "fullwidth_attributes": "{% if m.tool_calls %}\n\n<｜DSML｜function_calls>{% for c in m.tool_calls %}\n<｜DSML｜invoke name=\"{{ c.function.name }}\">{% for k, val in c.function.arguments.items() %}\n<｜DSML｜parameter name=\"{{ k }}\" string=\"{{ 'true' if val is string else 'false' }}\">{{ val if val is string else val|tojson }}</｜DSML｜parameter>{% endfor %}\n</｜DSML｜invoke>{% endfor %}\n</｜DSML｜function_calls>{% endif %}",
    "namespaced_tags": "{% for c in m.tool_calls or [] %}<seed:tool_call>\n<function={{ c.function.name }}>\n{% for k, val in c.function.arguments.items() %}<parameter={{ k }}>{{ val if val is string else val|tojson }}</parameter>\n{% endfor %}</function>\n</seed:tool_call>{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(UNSEEN_CALLS))
def test_unseen_call_formats(name):
    inference, report = infer_and_verify(FRAME.replace("CALLS", UNSEEN_CALLS[name]), examples=3)
    assert inference.template["fields"]["reasoning_content"]["open"] == "[REASON]"
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.count(v.PASSED) == len(v.fixed_cases()) + 3, report.format_text()


def test_a_bare_call_list_after_reasoning():
    bare = FRAME.replace(
        "CALLS",
        "{% if m.tool_calls %}[{% for c in m.tool_calls %}{{ c.function.name }}({% for k, val in c.function.arguments.items() %}"
        "{{ k }}={{ val|tojson }}{{ ', ' if not loop.last }}{% endfor %}){{ ', ' if not loop.last }}{% endfor %}]{% endif %}",
    )
    inference, report = infer_and_verify(bare, examples=0)
    by_id = {r.id: r for r in report.results}
    assert by_id["reasoning_call"].status == v.PASSED, report.format_text()
    assert by_id["parallel_calls"].status == v.PASSED, report.format_text()
    # Content right before a bare list cannot be told from the list: that case is lost.
    assert by_id["content_call"].status == v.FAILED


def test_turns_without_an_end_marker_end_at_the_next_opener():
    glm_like = """{%- for m in messages -%}
{% if m.role == 'user' %}<|user|>
{{ m.content }}{% elif m.role == 'tool' %}<|observation|>
{{ m.content }}{% else %}<|assistant|>
{{ m.content or '' }}{% for c in m.tool_calls or [] %}<call>{{ c.function.name }}{{ c.function.arguments|tojson }}</call>{% endfor %}{% endif %}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""
    inference, report = infer_and_verify(glm_like, examples=2)
    content = inference.template["fields"]["content"]
    assert "<\\|user\\|>" in content["close_pattern"] and "<\\|observation\\|>" in content["close_pattern"]
    assert report.count(v.FAILED) == 0, report.format_text()


def test_infer_reports_what_the_prompt_prefills():
    prefilled = CHATML.replace("<|im_start|>assistant\n{% endif -%}", "<|im_start|>assistant\n<think>\n{% endif -%}")
    inference, report = infer_and_verify(prefilled, examples=0)
    assert inference.template["start_anchor"] == "<|im_start|>assistant\n"
    assert any(p.name == "prefilled" and "opens the reasoning" in p.detail for p in inference.parts)
    assert report.count(v.FAILED) == 0, report.format_text()


def test_a_chat_template_that_cannot_render_or_never_finishes_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "raises.jinja").write_text("{{ raise_exception('a system message is required') }}", encoding="utf-8")
    assert main(["infer", str(tmp_path / "raises.jinja")]) == 2
    assert "a system message is required" in capsys.readouterr().err
    looping = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"
    (tmp_path / "loops.jinja").write_text(looping, encoding="utf-8")
    assert main(["infer", str(tmp_path / "loops.jinja"), "--timeout", "1"]) == 2
    assert "render timed out after 1 s" in capsys.readouterr().err
    assert main(["verify", "qwen3", "--chat-template", str(tmp_path / "loops.jinja"), "--timeout", "1"]) == 2
    assert "render timed out" in capsys.readouterr().err


def test_infer_from_a_saved_tokenizer_directory(tmp_path, capsys):
    """A tokenizer built and saved locally (no hub): infer reads its chat template and tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, "hello": 3}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="<|im_end|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    out = tmp_path / "template.json"
    assert main(["infer", str(tmp_path / "tokenizer"), "-o", str(out), "--examples", "1"]) == 0
    assert "0 failed" in capsys.readouterr().out
    assert json.loads(out.read_text(encoding="utf-8"))["start_anchor"] == "<|im_start|>assistant\n"


def test_call_ids_are_captured_whatever_the_model_writes():
    with_ids = FRAME.replace(
        "CALLS",
        "{% for c in m.tool_calls or [] %}[CALL]{{ c.function.name }}[ID]{{ c.id }}[ARGS]{{ c.function.arguments|tojson }}{% endfor %}",
    )
    inference, report = infer_and_verify(with_ids, examples=0)
    assert report.count(v.FAILED) == 0, report.format_text()
    import rtcompile

    generation = '[CALL]get_weather[ID]Zx81-q_Y[ARGS]{"city": "Oslo"}<|stop|>'
    message = rtcompile.parse_response(generation, inference.template, prefix="<|start|>assistant<|sep|>")
    assert message["tool_calls"] == [
        {"id": "Zx81-q_Y", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    ]


def test_a_field_the_validators_reject_is_left_out_and_said_so():
    inference = infer_module.Inference(
        template={
            "start_anchor": "A:",
            "fields": {
                "tool_calls": {"open": "<c>", "close": "</c>", "content": "no-such-parser"},
                "content": {"content": "text"},
            },
        }
    )
    infer_module._drop_what_the_validators_reject(inference)
    assert set(inference.template["fields"]) == {"content"}
    infer_module.validate(inference.template)
    assert any(p.name == "tool_calls" and "validator rejects" in p.detail for p in inference.parts)


def test_a_bare_name_before_the_arguments_opens_a_call_only_at_the_turn_start():
    bare = FRAME.replace(
        "CALLS",
        "{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments|tojson }}{% endfor %}",
    )
    inference, report = infer_and_verify(bare, examples=2)
    by_id = {r.id: r for r in report.results}
    for case in ("answer", "one_call", "reasoning_call", "answer_after_tool_result"):
        assert by_id[case].status == v.PASSED, report.format_text()
    import rtcompile

    message = rtcompile.parse_response("Hello there, friend.<|stop|>", inference.template, prefix="<|start|>assistant<|sep|>")
    assert message == {"role": "assistant", "content": "Hello there, friend."}


def test_markup_that_depends_on_the_value_type_and_sorted_keys():
    typed = FRAME.replace(
        "CALLS",
        "{% if m.tool_calls %}<|calls|>{% for c in m.tool_calls %}\n<invoke name=\"{{ c.function.name }}\">"
        "{% for k, val in c.function.arguments|dictsort %}\n<param name=\"{{ k }}\" string=\"{{ 'true' if val is string else 'false' }}\">"
        "{{ val if val is string else val|tojson }}</param>{% endfor %}\n</invoke>{% endfor %}\n<|/calls|>{% endif %}",
    )
    inference, report = infer_and_verify(typed, examples=4)
    tag_pattern = inference.template["fields"]["tool_calls"]["content_args"]["tag_pattern"]
    assert 'string="true"' in tag_pattern.replace("\\", "") and 'string="false"' in tag_pattern.replace("\\", "")
    assert report.count(v.FAILED) == 0, report.format_text()
    assert {r.id for r in report.results if r.status == v.PASSED} >= {"one_call", "parallel_calls", "content_call"}
