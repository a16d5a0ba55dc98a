"""infer: response templates derived from chat templates' renders, then proven by verify."""

from __future__ import annotations

import json

import pytest

from rtcompile.authoring import infer as infer_module
from rtcompile.authoring import verify as v
from rtcompile.__main__ import main
from rtcompile.authoring.chat_render import ChatRenderer, ChatTemplate, load_chat_template
from rtcompile.library import template_for, template_names
from test_verify import CHATML, REOPENED
from test_verify_bundled import CHAT_TEMPLATES, TABLE

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


# ---- what real chat templates do that the probes alone would not show ----------------------------------

# Tool instructions with example calls in the very syntax of real calls (placeholder names), written
# after the history: before the generation prompt, inside it, or (no generation prompt at all)
# right where the model starts writing. The instructions name the tools offered.
INSTRUCTIONS = (
    "{% if tools %}<|system|>You can call {{ tools | map(attribute='function.name') | join(', ') }}. "
    "Answer directly, or call tools:\n"
    '<call>{"name": "$FUNCTION_NAME", "arguments": {"$ARGUMENT": "$VALUE"}}</call>'
    '<call>{"name": "$ANOTHER_FUNCTION", "arguments": {}}</call>\n{% endif %}'
)


def instructed(after_history: str, in_prompt: str, generation_prompt: bool = True) -> str:
    """A chat template with `INSTRUCTIONS` after the history, inside the generation prompt, or
    (no generation prompt, no assistant header at all) right where the model starts writing."""
    header = "<|{{ m.role }}|>" if generation_prompt else "{% if m.role != 'assistant' %}<|{{ m.role }}|>{% endif %}"
    prompt = "{%- if add_generation_prompt %}" + in_prompt + "<|assistant|>{% endif -%}" if generation_prompt else ""
    return (
        "{%- for m in messages -%}\n" + header + "\n"
        "{%- if m.role == 'assistant' %}{{ m.content or '' }}{% for c in m.tool_calls or [] %}"
        '<call>{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}</call>{% endfor %}\n'
        "{%- else %}{{ m.content }}{% endif %}<|end|>\n{% endfor -%}\n" + after_history + prompt
    )


PLACEMENTS = {
    "after the history": instructed(INSTRUCTIONS, ""),
    "in the generation prompt": instructed("", INSTRUCTIONS),
    "where the model starts (no generation prompt)": instructed(INSTRUCTIONS, "", generation_prompt=False),
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_example_calls_in_the_tool_instructions_are_not_calls(placement):
    """Text a render holds whatever the calls are (instructions, example calls with placeholder
    names) is not what the template writes for a call: the calls are read off what the finished
    turn inserts, and a plain answer parses without calls wherever tools are offered."""
    source = PLACEMENTS[placement]
    inference, report = infer_and_verify(source, examples=3)
    by_id = {r.id: r for r in report.results}
    for case in ("answer", "one_call", "parallel_calls", "content_call", "answer_after_tool_result"):
        assert by_id[case].status == v.PASSED, report.format_text()
    assert report.count(v.FAILED) == 0, report.format_text()
    calls = inference.template["fields"]["tool_calls"]
    assert "$FUNCTION_NAME" not in calls["open_pattern"] and "system" not in calls["open_pattern"]
    # Real use offers other tools than the probes: the instructions then name them, and the
    # examples must still stay out of the message.
    import rtcompile
    from transformers.utils.chat_parsing import parse_response

    tools = v.tools_for([{"role": "assistant", "tool_calls": [v.function_call("lookup_stock", {"ticker": "ACME"})]}])
    conversation = [
        {"role": "user", "content": "Price of ACME?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", **v.function_call("lookup_stock", {"ticker": "ACME"})}]},
        {"role": "tool", "name": "lookup_stock", "content": "42"},
    ]
    with ChatRenderer(ChatTemplate(source, "test.jinja")) as renderer:
        prefix = renderer.render(conversation, tools=tools, add_generation_prompt=True)
    for parse in (parse_response, rtcompile.parse_response):
        message = parse("ACME trades at 42.<|end|>", inference.template, prefix=prefix, tools=tools)
        assert message == {"role": "assistant", "content": "ACME trades at 42."}


def test_a_call_field_that_finds_calls_in_a_plain_answer_is_left_out():
    """The last guard: whatever put them there, calls found in a plain answer drop the field."""
    source = PLACEMENTS["where the model starts (no generation prompt)"]
    with ChatRenderer(ChatTemplate(source, "test.jinja")) as renderer:
        inference = infer_module.infer(renderer)
        # Anchored before the instructions, the parser would read their example calls.
        inference.template["start_anchor"] = "<|end|>\n"
        prober = infer_module.Prober(renderer, v.discover_conventions(renderer)[0])
        infer_module._drop_calls_found_in_plain_answers(prober, inference)
    assert "tool_calls" not in inference.template["fields"]
    note = parts(inference)["tool_calls"]
    assert note.status == "not derived" and "$FUNCTION_NAME" in note.detail and "plain answer" in note.detail


# Python-style calls, one per line inside an XML block, strings in single quotes.
PYTHON_LINES = FRAME.replace(
    "CALLS",
    "{% if m.tool_calls %}<function_calls>\n{% for c in m.tool_calls %}{{ c.function.name }}("
    "{% for k, val in c.function.arguments.items() %}{{ k }}="
    "{% if val is string %}'{{ val }}'{% else %}{{ val | tojson }}{% endif %}{{ ', ' if not loop.last }}{% endfor %})"
    "{{ '\\n' if not loop.last }}{% endfor %}\n</function_calls>{% endif %}",
)
# JSON calls, one object per line inside a single block.
JSON_LINES = FRAME.replace(
    "CALLS",
    "{% if m.tool_calls %}<tool_calls>\n{% for c in m.tool_calls %}"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n{% endfor %}</tool_calls>{% endif %}",
)


def test_python_style_calls_in_a_fenced_block_with_content_after_it():
    """The block's close has text before its token (a code fence), and content follows the block."""
    fenced = FRAME.replace(
        "{{ m.content or '' }}CALLS",
        "{% if m.tool_calls %}<|calls|>\n```python\n{% for c in m.tool_calls %}{{ c.function.name }}("
        "{% for k, val in c.function.arguments.items() %}{{ k }}={{ val | tojson }}{{ ',' if not loop.last }}"
        "{% endfor %})\n"
        "{% endfor %}```\n<|/calls|>\n{% endif %}{{ m.content or '' }}",
    )
    inference, report = infer_and_verify(fenced, examples=3)
    assert inference.template["fields"]["tool_calls"]["content"] == "xml-inline"
    by_id = {r.id: r for r in report.results}
    for case in ("one_call", "parallel_calls", "content_call", "reasoning_call"):
        assert by_id[case].status == v.PASSED, report.format_text()
    assert report.count(v.FAILED) == 0, report.format_text()


def test_python_style_calls_one_per_line_in_a_block():
    inference, report = infer_and_verify(PYTHON_LINES, examples=4)
    calls = inference.template["fields"]["tool_calls"]
    assert calls["content"] == "xml-inline" and calls["repeats"] is True
    assert calls["content_args"]["value_parser"]["args"]["string_delims"] == [["'", "'"]]
    by_id = {r.id: r for r in report.results}
    for case in ("one_call", "parallel_calls", "reasoning_call", "content_call", "answer"):
        assert by_id[case].status == v.PASSED, report.format_text()
    import rtcompile
    from transformers.utils.chat_parsing import parse_response

    # Commas, parentheses and other quotes inside strings, unicode, and types from the tool schema.
    generation = ("<function_calls>\nnote(text='a, b (c) \"d\" 東京 🚀', count=3, on=True)\n"
                  "search(query='x=1')\n</function_calls><|stop|>")
    tools = v.tools_for([{"tool_calls": [v.function_call("note", {"text": "", "count": 0, "on": False}),
                                         v.function_call("search", {"query": ""})]}])
    expected = [v.function_call("note", {"text": 'a, b (c) "d" 東京 🚀', "count": 3, "on": True}),
                v.function_call("search", {"query": "x=1"})]
    for parse in (parse_response, rtcompile.parse_response):
        message = parse(generation, inference.template, prefix="<|start|>assistant<|sep|>", tools=tools)
        assert message == {"role": "assistant", "tool_calls": expected}


def test_json_calls_one_per_line_in_a_block():
    inference, report = infer_and_verify(JSON_LINES, examples=4)
    calls = inference.template["fields"]["tool_calls"]
    assert calls["content"] == "json" and calls["repeats"] is True
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.count(v.PASSED) == len(v.fixed_cases()) + 4, report.format_text()
    import rtcompile

    # An argument object holding a "name" key of its own does not end the call early.
    generation = ('<tool_calls>\n{"name": "f", "arguments": {"who": {"name": "x"}}}\n'
                  '{"name": "g", "arguments": {}}\n</tool_calls><|stop|>')
    message = rtcompile.parse_response(generation, inference.template, prefix="<|start|>assistant<|sep|>")
    assert message["tool_calls"] == [v.function_call("f", {"who": {"name": "x"}}), v.function_call("g", {})]


# A role label written at the start of answer turns, only when tools are offered, and no
# generation prompt: the model writes the label itself.
LABELLED = """{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{%- if m.tool_calls %}{{ m.content or '' }}<tool_calls>
{{- m.tool_calls | map(attribute='function') | list | tojson }}</tool_calls>
{%- else %}{% if tools %}助手：{% endif %}{{ m.content }}{% endif %}<|eos|>
{%- elif m.role == 'tool' %}<tool_response>{{ m.content }}</tool_response><|extra_0|>
{%- else %}用户：{{ m.content }}<|extra_0|>{% endif %}
{%- endfor -%}"""


def test_a_role_label_at_the_start_of_answers_is_not_content():
    inference, report = infer_and_verify(LABELLED, examples=3)
    assert parts(inference)["role label"].status == "derived" and "助手：" in parts(inference)["role label"].detail
    by_id = {r.id: r for r in report.results}
    for case in ("answer", "answer_after_tool_result", "one_call", "parallel_calls", "content_call"):
        assert by_id[case].status == v.PASSED, report.format_text()
    import rtcompile
    from transformers.utils.chat_parsing import parse_response

    for parse in (parse_response, rtcompile.parse_response):
        # Only where the turn starts: the same text later in an answer is content.
        message = parse("助手：它说 助手：好。<|eos|>", inference.template, prefix="用户：问<|extra_0|>")
        assert message == {"role": "assistant", "content": "它说 助手：好。"}


def test_a_turn_that_ends_in_several_markers():
    """`answer<|end|>` then `<|eot|>`: the content ends at the first, and the second does not open a
    second content that would replace the first."""
    two_ends = """{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% if m.role == 'assistant' %}
<|eot|>{% endif %}
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""
    inference, report = infer_and_verify(two_ends, examples=3)
    assert inference.template["fields"]["content"]["close_pattern"] == r"\s*(?:<\|end\|>|<\|eot\|>)"
    assert report.count(v.FAILED) == 0, report.format_text()
    passed = {r.id for r in report.results if r.status == v.PASSED}
    assert {"answer", "answer_after_tool_result", "answer_multi_turn"} <= passed, report.format_text()


def test_a_generation_prompt_the_template_always_writes():
    """`add_generation_prompt` adds nothing: the template opens the assistant turn after every user
    message. The anchor is what every such prompt ends with, whatever the message says."""
    always_open = """{%- for m in messages -%}
{%- if m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
<|im_start|>assistant
{% else %}{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}"""
    inference, report = infer_and_verify(always_open, examples=2)
    # (After a tool result, which this template writes as a bare turn, the model starts right away.)
    assert inference.template["start_anchor"] == ["<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>\n"]
    assert report.count(v.FAILED) == 0 and report.count(v.PASSED) >= 3, report.format_text()


# ---- what a chat template needs beyond the conversation -----------------------------------------------

NEEDY = """{%- if messages[0].role != 'system' %}
{{- raise_exception('The first message must be a system message.') }}{% endif -%}
{{ bos_token + '<|system|>' + messages[0].content + ' Today is ' + date_string + '.' }}
{%- for t in tools or [] %}{{ ' Tool: ' + t.name }}
{%- for k, p in t.parameters.properties.items() %}{{ ', ' + k + ': ' + p.description }}{% endfor %}{% endfor %}
{{- eos_token }}
{% for m in messages[1:] -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- for c in m.tool_calls or [] %}<call>{{ c.function | tojson }}</call>{% endfor %}{{ '' + eos_token }}
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""


def test_what_a_chat_template_needs_is_found_by_trying_and_reported(tmp_path, capsys):
    """Special tokens and a date nobody passed, a required system message, tools read as bare
    function schemas with a description for every parameter: each is supplied by trying
    alternatives until the template renders, and the report says which."""
    inference, report = infer_and_verify(NEEDY, examples=2)
    notes = [p.detail for p in inference.parts if p.name == "chat template"]
    assert any(n.startswith("rendered with bos_token='<s>'") for n in notes), notes
    assert any(n.startswith("rendered with eos_token='</s>'") for n in notes), notes
    assert any(n.startswith("rendered with date_string='26 Jul 2024'") for n in notes), notes
    assert any(n.startswith("rendered with a system message") and "first message must be a system" in n for n in notes)
    assert any(n.startswith("rendered with the tools as bare function schemas") for n in notes), notes
    assert any(n.startswith("rendered with the tools with a description for every parameter") for n in notes), notes
    assert report.count(v.FAILED) == 0 and report.count(v.PASSED) >= 6, report.format_text()
    (tmp_path / "needy.jinja").write_text(NEEDY, encoding="utf-8")
    assert main(["infer", str(tmp_path / "needy.jinja"), "--examples", "0", "-o", str(tmp_path / "t.json")]) == 0
    printed = capsys.readouterr().out
    assert "rendered with a system message" in printed and "0 failed" in printed


def test_what_could_not_be_supplied_is_reported_with_what_was_tried(tmp_path, capsys):
    stubborn = "{{ raise_exception('This template only renders on Tuesdays.') }}"
    with ChatRenderer(ChatTemplate(stubborn, "stubborn.jinja")) as renderer:
        notes = v.accommodate(renderer)
    assert notes == [
        "rendering a question fails: TemplateError: This template only renders on Tuesdays. "
        "(tried: a system message in front of the conversation)"
    ]
    (tmp_path / "stubborn.jinja").write_text(stubborn, encoding="utf-8")
    assert main(["infer", str(tmp_path / "stubborn.jinja")]) == 2
    err = capsys.readouterr().err
    assert "only renders on Tuesdays" in err and err.count("\n") == 1


def test_a_turn_written_in_parts_each_opened_by_the_assistant_header():
    """Reasoning, answer and calls each in a turn of their own, each opened by the header the
    generation prompt ends with: the header is the role again, not content."""
    parts_template = """{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{%- if m.reasoning_content %}<|im_start|>assistant/think
{{ m.reasoning_content }}<|im_end|>
{% endif -%}
{%- if m.content %}<|im_start|>assistant
{{ m.content }}<|im_end|>{% if not m.tool_calls %}<|endofturn|>{% endif %}
{% endif -%}
{%- if m.tool_calls %}<|im_start|>assistant -> calls
{{ m.tool_calls | map(attribute='function') | list | tojson }}<|im_end|><|stop|>
{% endif -%}
{%- else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant{% endif -%}"""
    inference, report = infer_and_verify(parts_template, examples=4)
    assert parts(inference)["turn header"].status == "derived"
    by_id = {r.id: r for r in report.results}
    for case in ("answer", "reasoning_answer", "one_call", "reasoning_call", "parallel_calls", "content_call"):
        assert by_id[case].status == v.PASSED, report.format_text()
    assert report.count(v.FAILED) == 0, report.format_text()


def test_a_template_that_alters_argument_values_still_gets_a_call_field():
    """The template writes each value with a stray letter after it (`city=Parisr`): no parser gives
    the probe's values back, but the calls' syntax is plain, so the field reads it and says the
    part is guessed."""
    altered = FRAME.replace(
        "CALLS",
        "{% if m.tool_calls %}[{% for c in m.tool_calls %}{{ c.function.name }}("
        "{% for k, val in c.function.arguments.items() %}{{ k }}={{ '%sr' | format(val) }}{{ ', ' if not loop.last }}"
        "{% endfor %}){{ ', ' if not loop.last }}{% endfor %}]{% endif %}",
    )
    inference, report = infer_and_verify(altered, examples=0)
    assert parts(inference)["tool_calls"].status == "guessed"
    import rtcompile

    generation = "[get_weather(city='Paris', days=3), get_time(zone=\"UTC\")]<|stop|>"
    tools = v.tools_for([{"tool_calls": [v.function_call("get_weather", {"city": "", "days": 0}),
                                         v.function_call("get_time", {"zone": ""})]}])
    message = rtcompile.parse_response(generation, inference.template, prefix="<|start|>assistant<|sep|>", tools=tools)
    assert message["tool_calls"] == [v.function_call("get_weather", {"city": "Paris", "days": 3}),
                                     v.function_call("get_time", {"zone": "UTC"})]


def test_a_call_that_writes_its_name_twice():
    """`to=NAME` then `<invoke name="NAME">`: the first is captured, the second matches any name."""
    twice = FRAME.replace(
        "CALLS",
        "{% for c in m.tool_calls or [] %}<|call|>to={{ c.function.name }}<|msg|>"
        "<invoke name=\"{{ c.function.name }}\">{% for k, val in c.function.arguments.items() %}"
        "<param name=\"{{ k }}\">{{ val }}</param>{% endfor %}</invoke>{% endfor %}",
    )
    inference, report = infer_and_verify(twice, examples=3)
    assert "probe_lookup" not in json.dumps(inference.template)
    by_id = {r.id: r for r in report.results}
    for case in ("one_call", "parallel_calls", "reasoning_call", "content_call"):
        assert by_id[case].status == v.PASSED, report.format_text()


USER_MESSAGES = ("", "Hi", "Several lines:\nfirst\nsecond.")


def test_the_start_anchor_holds_no_text_of_the_users_turn():
    """A generation prompt that writes an empty exchange (`<｜User｜>` "\n" `<｜Assistant｜>`) before
    opening the turn again: an anchor copied from it spans the user's turn, and a prompt with the
    user's words there never holds it. The anchor keeps only what no user message moves."""
    inference, report = infer_and_verify(REOPENED, examples=3)
    anchors = inference.template["start_anchor"]
    anchors = [anchors] if isinstance(anchors, str) else anchors
    assert not any("<｜User｜>" in anchor for anchor in anchors), anchors
    assert "<｜Assistant｜>" in anchors
    with ChatRenderer(ChatTemplate(REOPENED, "test.jinja")) as renderer:
        for words in USER_MESSAGES:
            history = [{"role": "user", "content": words}]
            finished = renderer.render(history + [{"role": "assistant", "content": "Reply."}], add_generation_prompt=False)
            before_reply = finished[: finished.rfind("Reply.")]
            after_words = before_reply.rfind(words) + len(words) if words else 0
            assert any(before_reply.rfind(anchor) >= after_words for anchor in anchors), (words, anchors)
    assert report.anchor_problems == [], report.format_text()
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.count(v.UNRENDERABLE) == 0, report.format_text()


# A plain-text header; the generation prompt ends with a newline the finished turns do not have.
PLAIN_HEADER = (
    "{%- for m in messages -%}{{ '\\n' + m.role|upper + ': ' + m.content }}"
    "{%- if m.role == 'assistant' %} <|endoftext|>{% endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '\\nASSISTANT: \\n' }}{% endif -%}"
)


def test_whitespace_only_the_generation_prompt_ends_with_stays_out_of_one_anchor():
    inference, report = infer_and_verify(PLAIN_HEADER, examples=2)
    assert inference.template["start_anchor"] == ["\nASSISTANT: \n", "\nASSISTANT: "]
    assert report.anchor_problems == [], report.format_text()
    assert report.count(v.FAILED) == 0 and report.count(v.PASSED) >= 3, report.format_text()
