"""verify: rendering untrusted chat templates (sandbox, deadline, loading) and the round trip."""

from __future__ import annotations

import json

import pytest

from rtcompile.authoring import verify as v
from rtcompile.__main__ import main
from rtcompile.authoring.chat_render import (
    ChatRenderer,
    ChatTemplate,
    ChatTemplateError,
    RenderError,
    RenderTimeout,
    load_chat_template,
)

# A ChatML chat template with <think> reasoning and Hermes-style JSON calls.
CHATML = """
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.role == 'assistant' and m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content or '' }}
{%- for c in m.tool_calls or [] %}
<tool_call>
{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}
</tool_call>
{%- endfor %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
""".strip()

# The same format, but reasoning is never written and content beside calls is dropped.
CHATML_LOSSY = CHATML.replace(
    "{% if m.role == 'assistant' and m.reasoning_content %}", "{% if false %}"
).replace("{{ m.content or '' }}", "{{ '' if m.tool_calls else (m.content or '') }}")

RESPONSE_TEMPLATE = {
    "start_anchor": "<|im_start|>assistant\n",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close": "<|im_end|>", "content": "text"},
    },
}


def chat(source: str, origin: str = "test.jinja") -> ChatTemplate:
    return ChatTemplate(source=source, origin=origin)


# ---- rendering ------------------------------------------------------------------------------------


def test_render_runs_the_template_in_the_sandbox():
    with ChatRenderer(chat(CHATML)) as renderer:
        text = renderer.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_loops_forever_times_out_and_the_renderer_recovers():
    looping = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"
    renderer = ChatRenderer(chat(looping + "{% if add_generation_prompt %}x{% endif %}"), timeout=1)
    with renderer:
        with pytest.raises(RenderTimeout, match="render timed out"):
            renderer.render([], add_generation_prompt=False)
    # A killed worker is replaced on the next render.
    quick = ChatRenderer(chat("{{ messages[0].content }}"), timeout=5)
    with quick:
        assert quick.render([{"role": "user", "content": "ok"}], add_generation_prompt=False) == "ok"


def test_the_sandbox_refuses_unsafe_attribute_access():
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with ChatRenderer(chat(escape)) as renderer:
        with pytest.raises(RenderError, match="SecurityError|unsafe"):
            renderer.render([], add_generation_prompt=False)


def test_raise_exception_is_a_render_error():
    with ChatRenderer(chat("{{ raise_exception('roles must alternate') }}")) as renderer:
        with pytest.raises(RenderError, match="roles must alternate"):
            renderer.render([], add_generation_prompt=False)


def test_load_from_jinja_config_and_tokenizer_directory(tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text(CHATML, encoding="utf-8")
    assert load_chat_template(jinja).source == CHATML

    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": CHATML, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    loaded = load_chat_template(config)
    assert loaded.source == CHATML and loaded.variables == {"bos_token": "<s>", "eos_token": "</s>"}

    named = tmp_path / "named" / "tokenizer_config.json"
    named.parent.mkdir()
    named.write_text(json.dumps({"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}]}))
    assert load_chat_template(named).source == "A"
    assert load_chat_template(named.parent, "tool_use").source == "B"
    with pytest.raises(ChatTemplateError, match="no chat template named 'rag'"):
        load_chat_template(named, "rag")

    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (directory / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
    loaded = load_chat_template(directory)
    assert loaded.source == CHATML and loaded.variables == {"eos_token": "<|im_end|>"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such chat template"),
        ("{not json", "not valid JSON"),
        (json.dumps({"bos_token": "<s>"}), "has no 'chat_template'"),
        (json.dumps({"chat_template": 3}), "must be a string or a list"),
    ],
)
def test_bad_chat_template_sources_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "tokenizer_config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ChatTemplateError, match=message):
        load_chat_template(path)


def test_a_directory_without_a_chat_template_is_an_error(tmp_path):
    with pytest.raises(ChatTemplateError, match="without a chat template"):
        load_chat_template(tmp_path)


# ---- the round trip -------------------------------------------------------------------------------


def test_a_matching_template_passes_every_case():
    report = v.verify(RESPONSE_TEMPLATE, chat(CHATML), examples=6)
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.count(v.UNRENDERABLE) == 0, report.format_text()
    assert report.count(v.PASSED) == len(v.fixed_cases()) + 6
    assert report.anchor_problems == [] and report.anchor_prompts_checked >= 6
    assert report.ok


def test_a_wrong_template_fails_with_the_first_difference():
    broken = json.loads(json.dumps(RESPONSE_TEMPLATE))
    broken["fields"]["reasoning_content"]["close"] = "</thinking>"  # never matches
    report = v.verify(broken, chat(CHATML), examples=0)
    failed = {r.id: r for r in report.results if r.status == v.FAILED}
    assert set(failed) == {"reasoning_answer", "reasoning_call"}
    assert "message.reasoning_content" in failed["reasoning_answer"].detail
    assert not report.ok
    assert "FAIL  reasoning_answer" in report.format_text()


def test_what_the_chat_template_loses_is_not_round_trippable_not_failed():
    report = v.verify(RESPONSE_TEMPLATE, chat(CHATML_LOSSY), examples=0)
    by_id = {r.id: r for r in report.results}
    assert by_id["reasoning_answer"].status == v.UNRENDERABLE
    assert "reasoning" in by_id["reasoning_answer"].detail
    assert by_id["content_call"].status == v.UNRENDERABLE
    assert "drops the content beside tool calls" in by_id["content_call"].detail
    assert by_id["answer"].status == v.PASSED and by_id["one_call"].status == v.PASSED
    assert report.ok


def test_a_prompt_the_finished_turn_does_not_start_with_is_detected():
    # The generation prompt pre-writes '<think>\n'; finished turns never contain it.
    prefilled = CHATML.replace("<|im_start|>assistant\n{% endif -%}", "<|im_start|>assistant\n<think>\n{% endif -%}")
    report = v.verify(RESPONSE_TEMPLATE, chat(prefilled), examples=0)
    for result in report.results:
        if result.id.startswith("reasoning"):  # a turn with reasoning does start with '<think>\n'
            assert result.status == v.PASSED
        else:
            assert result.status == v.UNRENDERABLE
            assert "rendered differently from the generation prompt" in result.detail


# The user turn already opens the assistant's turn (`<｜User｜>question<｜Assistant｜><think>`), and the
# generation prompt writes an empty exchange after it and opens the turn again, as a published
# DeepSeek-V3.2 chat template does. The finished conversation continues the history, where the
# user's words stand between the two markers; the tools preamble shows example calls.
REOPENED = """
{%- if tools -%}
## Tools
Call a tool like this:
<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>$FUNCTION_NAME<｜tool▁sep｜>{"$PARAMETER_NAME": "$VALUE"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
{% for tool in tools %}{{ tool.function | tojson }}
{% endfor %}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}
<｜User｜>{{ m.content }}<｜Assistant｜><think>
{%- elif m.role == 'assistant' -%}
{{ m.reasoning_content or '' }}</think>{{ m.content or '' }}
{%- if m.tool_calls -%}
<｜tool▁calls▁begin｜>
{%- for c in m.tool_calls -%}
<｜tool▁call▁begin｜>{{ c.function.name }}<｜tool▁sep｜>{{ c.function.arguments | tojson }}<｜tool▁call▁end｜>
{%- endfor -%}
<｜tool▁calls▁end｜>
{%- endif -%}
<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' -%}
<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜><think>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<｜User｜>{{ "\\n" }}<｜Assistant｜><think>{%- endif -%}
""".strip()

REOPENED_TEMPLATE = {
    # After a tool result the last `<｜Assistant｜>` opens the turn before the calls: the tool
    # output's close marks where the next turn starts.
    "start_anchor": ["<｜Assistant｜>", "<｜tool▁output▁end｜>"],
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>", "content": "text"},
        "tool_calls": {
            "open_pattern": r"(?:<｜tool▁calls▁begin｜>)?<｜tool▁call▁begin｜>(?P<name>[^<]+)<｜tool▁sep｜>",
            "close": "<｜tool▁call▁end｜>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"content": "text", "close_pattern": r"\s*(?:<｜end▁of▁sentence｜>|<｜tool▁calls▁end｜>)"},
    },
}


def test_a_generation_prompt_that_opens_the_turn_again_round_trips_after_the_history():
    report = v.verify(REOPENED_TEMPLATE, chat(REOPENED), examples=4)
    assert report.count(v.UNRENDERABLE) == 0, report.format_text()
    assert report.count(v.FAILED) == 0, report.format_text()
    assert report.anchor_problems == [] and report.ok
    # The prompt each case is parsed after is the history the finished turn continues: the
    # user's words, then the markers that open the turn (never the generation prompt's empty
    # exchange, which the finished conversation does not hold).
    case = next(c for c in v.fixed_cases() if c.id == "answer")
    with ChatRenderer(chat(REOPENED)) as renderer:
        conventions, _ = v.discover_conventions(renderer)
        rendered = v.render_turn(renderer, case, conventions, v.tools_for(case.history + [case.message]))
    assert rendered.prefix.endswith("Answer briefly.<｜Assistant｜><think>")
    assert rendered.generation == "</think>It is sunny in Paris.<｜end▁of▁sentence｜>"


# An anchor that spans the user's turn: found in the generation prompt's empty exchange only.
SPANNING_ANCHOR = {**REOPENED_TEMPLATE, "start_anchor": "<｜User｜>\n<｜Assistant｜>"}


def test_a_start_anchor_missing_from_realistic_prompts_fails_loudly():
    report = v.verify(SPANNING_ANCHOR, chat(REOPENED), examples=0)
    assert report.anchor_problems, report.format_text()
    assert not report.ok
    text = report.format_text()
    # One line near the top says it, and the summary repeats it.
    warning = text.splitlines()[1]
    assert warning.startswith("  FAIL  start anchor '<｜User｜>\\n<｜Assistant｜>' is missing from ")
    assert "the parser reads the whole prompt as the answer" in warning
    assert "start anchor missing" in text.splitlines()[-1]
    assert all("after the user's message" in problem or "after the tool result" in problem
               for problem in report.anchor_problems)
    json_report = report.to_json()
    assert json_report["ok"] is False and json_report["start_anchor"]["missing"] == report.anchor_problems


def test_a_start_anchor_that_never_occurs_is_reported_even_when_no_case_is_checked():
    # A typo: one newline too many. Every case fails too, but the report says why first.
    typo = json.loads(json.dumps(RESPONSE_TEMPLATE))
    typo["start_anchor"] = "<|im_start|>assistant\n\n"
    report = v.verify(typo, chat(CHATML), examples=0)
    assert len(report.anchor_problems) == report.anchor_prompts_checked > 0
    assert not report.ok
    # A pattern anchor is checked by the same rule.
    pattern = json.loads(json.dumps(RESPONSE_TEMPLATE))
    del pattern["start_anchor"]
    pattern["start_anchor_pattern"] = r"<\|im_start\|>assistant\n"
    assert v.verify(pattern, chat(CHATML), examples=0).anchor_problems == []
    # An invalid template has no anchor to find: said so, not raised.
    invalid = {"start_anchor": "<|im_start|>assistant\n", "fields": {"content": {"content": "no-such-parser"}}}
    report = v.verify(invalid, chat(CHATML), examples=0)
    assert not report.ok and "the template is invalid" in report.anchor_problems[0]


def test_cli_a_missing_start_anchor_is_exit_status_1(tmp_path, capsys):
    (tmp_path / "chat.jinja").write_text(REOPENED, encoding="utf-8")
    (tmp_path / "spanning.json").write_text(json.dumps(SPANNING_ANCHOR))
    (tmp_path / "good.json").write_text(json.dumps(REOPENED_TEMPLATE))
    args = ["--chat-template", str(tmp_path / "chat.jinja"), "--examples", "0"]
    assert main(["verify", str(tmp_path / "spanning.json"), *args]) == 1
    assert "FAIL  start anchor" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "good.json"), *args]) == 0
    assert "start anchor" not in capsys.readouterr().out


def test_spellings_are_found_by_rendering():
    # Reasoning read from a thinking chunk, arguments that must be JSON strings.
    source = CHATML.replace(
        "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n{{ m.reasoning_content }}",
        "{% if m.role == 'assistant' and m.content is not string and m.content %}<think>\n{{ m.content[0].thinking }}",
    ).replace("{{ m.content or '' }}", "{{ (m.content if m.content is string else (m.content[1].text if m.content|length > 1 else '')) or '' }}")
    source = source.replace(
        '{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}',
        '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}',
    )
    with ChatRenderer(chat(source)) as renderer:
        conventions, _ = v.discover_conventions(renderer)
        assert conventions.reasoning_answer == "thinking_chunk"
        assert conventions.arguments_as == "json"
        report = v.verify(RESPONSE_TEMPLATE, renderer, examples=0)
    assert report.count(v.FAILED) == 0 and report.count(v.PASSED) == len(v.fixed_cases()), report.format_text()


def test_generated_cases_are_deterministic_and_varied():
    first = v.generated_cases(10, ["<tool_call", "<|im_end|"])
    second = v.generated_cases(10, ["<tool_call", "<|im_end|"])
    assert [c.message for c in first] == [c.message for c in second]
    shapes = {tuple(sorted(k for k in c.message if k != "role")) for c in first}
    assert len(shapes) >= 3
    for case in first:
        for text in (case.message.get("content"), case.message.get("reasoning_content")):
            assert text is None or (text and text == text.strip())


def test_first_difference_names_the_path():
    expected = {"tool_calls": [{"function": {"arguments": {"a": 1}}}]}
    actual = {"tool_calls": [{"function": {"arguments": {"a": "1"}}}]}
    assert v.first_difference(expected, actual) == "message.tool_calls[0].function.arguments.a: expected 1, got '1'"
    assert v.first_difference({"a": 1}, {"a": 1, "b": 2}) == "message.b: unexpected 2"
    assert v.first_difference({"a": [1]}, {"a": [1, 2]}) == "message.a: expected 1 items, got 2"


# ---- command line ---------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path):
    (tmp_path / "chat.jinja").write_text(CHATML, encoding="utf-8")
    (tmp_path / "good.json").write_text(json.dumps(RESPONSE_TEMPLATE))
    broken = json.loads(json.dumps(RESPONSE_TEMPLATE))
    broken["fields"]["content"]["close"] = "<|eot|>"
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    return tmp_path


def test_cli_exit_status_and_json(files, capsys):
    assert main(["verify", str(files / "good.json"), "--chat-template", str(files / "chat.jinja"), "--examples", "2"]) == 0
    assert "0 failed" in capsys.readouterr().out
    status = main(["verify", str(files / "bad.json"), "--chat-template", str(files / "chat.jinja"), "--examples", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 1 and report["failed"] > 0
    assert {"id", "status", "description"} <= set(report["cases"][0])


def test_cli_passes_chat_template_variables(files, capsys):
    switchable = CHATML.replace("<|im_start|>assistant\n{% endif -%}", "<|im_start|>assistant\n{% if prefill %}<think>\n{% endif %}{% endif -%}")
    (files / "switch.jinja").write_text(switchable, encoding="utf-8")
    args = ["verify", str(files / "good.json"), "--chat-template", str(files / "switch.jinja"), "--examples", "0"]
    assert main(args) == 0
    assert "not round-trippable by the chat template" in capsys.readouterr().out
    main(args + ["--var", "prefill=true", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["variables"] == {"prefill": True} and report["not_round_trippable"] == len(report["cases"]) - 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["good.json", "--chat-template", "missing.jinja"], "no such chat template"),
        (["nothing.json", "--chat-template", "chat.jinja"], "nothing.json"),
        (["good.json", "--chat-template", "chat.jinja", "--var", "no-equals"], "--var expects NAME=VALUE"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(files, capsys, args, message, monkeypatch):
    monkeypatch.chdir(files)
    assert main(["verify", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_a_tokenizer_directory_holds_both_templates(tmp_path, capsys):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML, "response_template": RESPONSE_TEMPLATE, "eos_token": "<|im_end|>"})
    )
    assert main(["verify", str(tmp_path), "--examples", "1"]) == 0
    assert "0 failed" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "tokenizer_config.json").write_text(json.dumps({"response_template": RESPONSE_TEMPLATE}))
    assert main(["verify", str(empty)]) == 2
    assert "without a chat template" in capsys.readouterr().err


def test_ids_are_compared_only_where_the_chat_template_renders_them():
    rendered = v.RenderedTurn(
        prefix="", generation="[CALL]f[ID]abc", expected={"role": "assistant", "tool_calls": [v.function_call("f", {})]},
        given_ids=["abc"],
    )
    parsed = {"role": "assistant", "tool_calls": [{"id": "abc", **v.function_call("f", {})}, {"id": "zzz", **v.function_call("g", {})}]}
    expected, compared = v._comparable(parsed, rendered)
    assert expected["tool_calls"][0]["id"] == "abc" and "id" not in compared["tool_calls"][1]
    assert v.first_difference(expected, compared) == "message.tool_calls: expected 1 items, got 2"
    rendered.generation = "[CALL]f"  # the template renumbers: the parsed id is not compared
    expected, compared = v._comparable(parsed, rendered)
    assert "id" not in expected["tool_calls"][0] and "id" not in compared["tool_calls"][0]


def test_with_another_thread_alive_the_worker_is_spawned_not_forked():
    import threading

    release = threading.Event()
    waiter = threading.Thread(target=release.wait)
    waiter.start()
    try:
        from rtcompile.authoring import chat_render

        assert chat_render._context().get_start_method() == "spawn"
        with ChatRenderer(chat(CHATML), timeout=60) as renderer:
            text = renderer.render([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    finally:
        release.set()
        waiter.join()
    assert text == "<|im_start|>user\nhi<|im_end|>\n"


def test_cli_interpreter_checks_both_parsers(files, capsys):
    args = ["verify", str(files / "good.json"), "--chat-template", str(files / "chat.jinja"), "--examples", "0"]
    assert main(args + ["--interpreter"]) == 0
    assert "0 failed" in capsys.readouterr().out
    bad = ["verify", str(files / "bad.json"), "--chat-template", str(files / "chat.jinja"), "--examples", "0"]
    assert main(bad + ["--interpreter", "--json"]) == 1
    failed = [case for case in json.loads(capsys.readouterr().out)["cases"] if case["status"] == v.FAILED]
    assert failed and all(case["detail"].startswith("rtcompile, ") for case in failed)


def test_a_conversation_that_hangs_the_template_is_that_case_only():
    # Loops forever only on the text of one case's answer.
    hanging = CHATML.replace(
        "{{ m.content or '' }}",
        "{% if m.content == 'Sunny, 21 degrees.' %}{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}{% endif %}{{ m.content or '' }}",
    )
    with ChatRenderer(chat(hanging), timeout=2) as renderer:
        report = v.verify(RESPONSE_TEMPLATE, renderer, examples=0)
    by_id = {r.id: r for r in report.results}
    assert by_id["answer_multi_turn"].status == v.UNRENDERABLE
    assert "does not finish" in by_id["answer_multi_turn"].detail
    assert by_id["answer"].status == v.PASSED and by_id["one_call"].status == v.PASSED and report.ok


def test_a_bundled_name_without_a_chat_template_says_what_is_needed(capsys):
    assert main(["verify", "qwen3"]) == 2
    err = capsys.readouterr().err
    assert "qwen3 is a bundled template name" in err and "--chat-template FILE|DIR" in err
    assert "tokenizer directory holding both templates" in err and err.count("\n") == 1


@pytest.mark.parametrize("where", ["after the history", "in the generation prompt"])
def test_instructions_the_prompt_shows_outside_the_turn_leave_it_round_trippable(where):
    """A template that writes tool instructions after the last message (or in the generation
    prompt, before the assistant header) renders the finished turn somewhere other than right
    after the prompt; the turn is what the finished conversation inserts there."""
    instructions = (
        "{% if tools %}<|im_start|>system\nCall a tool with <tool_call>{...}</tool_call>.<|im_end|>\n{% endif %}"
    )
    if where == "after the history":
        source = CHATML.replace("{% endfor -%}\n", "{% endfor -%}\n" + instructions)
    else:
        source = CHATML.replace("{%- if add_generation_prompt %}", "{%- if add_generation_prompt %}" + instructions)
    assert source != CHATML
    with ChatRenderer(chat(source)) as renderer:
        report = v.verify(RESPONSE_TEMPLATE, renderer, examples=2)
    assert report.count(v.UNRENDERABLE) == 0 and report.count(v.FAILED) == 0, report.format_text()


def test_whitespace_the_prompt_ends_with_but_the_finished_turn_lacks():
    """The generation prompt followed by a newline the finished turn does not have there (the
    template's layout): the turn is what follows the prompt, less that whitespace."""
    layout = (
        "{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }}"
        "{% else %}ASSISTANT: {{ m.content }} <|end|>{% endif %}"
        "{% if loop.last and add_generation_prompt %}{{ '\\nASSISTANT: ' }}{% endif %}{{ '\\n' }}{% endfor %}"
    )
    template = {"start_anchor": "ASSISTANT: ", "defaults": {"role": "assistant"},
                "fields": {"content": {"close": "<|end|>", "content": "text"}}}
    with ChatRenderer(chat(layout)) as renderer:
        prompt = renderer.render([{"role": "user", "content": "q"}], add_generation_prompt=True)
        assert prompt == "USER: q\nASSISTANT: \n"
        report = v.verify(template, renderer, examples=0)
    by_id = {r.id: r for r in report.results}
    assert by_id["answer"].status == v.PASSED and by_id["answer"].generation == "It is sunny in Paris. <|end|>"
    assert report.count(v.FAILED) == 0, report.format_text()


def test_a_system_block_written_only_for_generation():
    """The prompt opens with a block the finished conversation does not have (written only when a
    generation prompt is asked for): the turn is still what the finished conversation adds."""
    source = "{% if add_generation_prompt %}<|im_start|>system\nBe brief.<|im_end|>\n{% endif %}" + CHATML
    with ChatRenderer(chat(source)) as renderer:
        report = v.verify(RESPONSE_TEMPLATE, renderer, examples=2)
    assert report.count(v.UNRENDERABLE) == 0 and report.count(v.FAILED) == 0, report.format_text()
