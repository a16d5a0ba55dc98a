"""rtcompile.structural_tag's request handling, errors, cache and command line."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest
import xgrammar as xgr

import rtcompile
from grammar_walk import Walker, family_tokenizer, text_of
from rtcompile.grammar import message as grammar_message

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.mark.parametrize(
    "tools, choice, parallel, message",
    [
        ([WEATHER], "sometimes", True, "tool_choice: must be 'auto', 'required', 'none'"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, True, "tool_choice: names 'nope'"),
        ([], "required", True, "tool_choice: 'required' needs at least one tool"),
        ([WEATHER, WEATHER], "auto", True, "tools[1]: names 'get_weather' twice"),
        ([{"type": "function", "function": {}}], "auto", True, "tools[0]: needs a function with a name"),
        ([{"type": "web_search"}], "auto", True, "tools[0]: type 'web_search' is not a function tool"),
        ([WEATHER], "auto", "no", "parallel_tool_calls: must be true or false"),
    ],
)
def test_a_malformed_request_is_one_line_naming_the_argument(tools, choice, parallel, message):
    with pytest.raises(rtcompile.GrammarError) as error:
        rtcompile.structural_tag("qwen3", tools, tool_choice=choice, parallel_tool_calls=parallel)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value) and isinstance(error.value, ValueError)


def test_a_template_that_cannot_be_expressed_is_refused_naming_the_field():
    template = rtcompile.template_for("qwen3")
    template["fields"]["tool_calls"]["open_pattern"] = r"(?<=x)<tool_call>"
    with pytest.raises(rtcompile.GrammarError) as error:
        rtcompile.structural_tag(template, [WEATHER], tool_choice="required")
    assert error.value.where.startswith("fields.tool_calls.open") and "lookbehind" in error.value.reason


def test_a_name_no_delimiter_captures_is_refused():
    """A transform that names a capture the opener does not define: the parser raises KeyError for
    every call, so no grammar can give a call."""
    template = rtcompile.template_for("qwen3_5")
    template["fields"]["tool_calls"]["transform"]["function"]["name"] = "{tool}"
    with pytest.raises(rtcompile.GrammarError) as error:
        rtcompile.structural_tag(template, [WEATHER], tool_choice="required")
    assert error.value.where == "fields.tool_calls.transform" and "{tool}" in error.value.reason


def test_a_forced_request_without_a_tool_call_field_is_refused():
    template = {"start_anchor": "<a>", "fields": {"content": {"content": "text"}}}
    with pytest.raises(rtcompile.GrammarError, match="no 'tool_calls' field"):
        rtcompile.structural_tag(template, [WEATHER], tool_choice="required")


def test_the_construction_is_cached_per_request(monkeypatch):
    built = []
    original = grammar_message.MessageWriter.output
    monkeypatch.setattr(grammar_message.MessageWriter, "output", lambda self, *a: built.append(1) or original(self, *a))
    rtcompile.grammar._CACHE.clear()
    first = rtcompile.structural_tag("qwen3", [WEATHER], tool_choice="required")
    second = rtcompile.structural_tag("qwen3", [WEATHER], tool_choice="required")
    third = rtcompile.structural_tag("qwen3", [WEATHER], tool_choice="auto")
    assert first == second and first is not second and len(built) == 2 and third != first
    written = json.dumps(first)
    deepest = second
    while any(isinstance(v, (dict, list)) and v for v in (deepest.values() if isinstance(deepest, dict) else deepest)):
        deepest = next(v for v in (deepest.values() if isinstance(deepest, dict) else deepest) if isinstance(v, (dict, list)) and v)
    deepest.clear()  # (a caller changing its copy, however deep, changes no other)
    second["format"] = None
    assert json.dumps(rtcompile.structural_tag("qwen3", [WEATHER], tool_choice="required")) == json.dumps(first) == written


def test_a_prompt_that_opens_the_reasoning_starts_the_grammar_inside_it():
    template = rtcompile.template_for("qwen3")
    tokenizer, stops = family_tokenizer(template)
    walker = Walker(tokenizer, stops)
    prompt = tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", add_special_tokens=False)
    tag = rtcompile.structural_tag(template, [WEATHER], tool_choice="required", prefix=prompt, tokenizer=tokenizer, stop_tokens=stops)
    grammar = walker.compile(tag)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    thinking = tokenizer.encode("Weather.\n</think>\n\n" + call, add_special_tokens=False)
    assert walker.accepts(grammar, thinking)[0]
    # Outside the reasoning the same call is accepted right away; inside it, not before `</think>`.
    assert not walker.accepts(grammar, tokenizer.encode(call, add_special_tokens=False))[0]
    outside = rtcompile.structural_tag(template, [WEATHER], tool_choice="required", tokenizer=tokenizer, stop_tokens=stops)
    assert walker.accepts(walker.compile(outside), tokenizer.encode(call, add_special_tokens=False))[0]


def test_control_tokens_are_matched_by_id_never_by_their_spelling():
    template = rtcompile.template_for("qwen3")
    tokenizer, stops = family_tokenizer(template)
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, [WEATHER], tool_choice="required", tokenizer=tokenizer, stop_tokens=stops)
    grammar = walker.compile(tag)
    body = '\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
    by_id = [tokenizer.convert_tokens_to_ids("<tool_call>"), *tokenizer.encode(body, add_special_tokens=False), tokenizer.convert_tokens_to_ids("</tool_call>")]
    assert walker.accepts(grammar, by_id)[0]
    from grammar_walk import ordinary_spelling

    spelled = [*ordinary_spelling(tokenizer, "<tool_call>"), *tokenizer.encode(body, add_special_tokens=False), tokenizer.convert_tokens_to_ids("</tool_call>")]
    assert not walker.accepts(grammar, spelled)[0]


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtcompile", "grammar", *args], capture_output=True, text=True, cwd=cwd)


def test_the_command_prints_a_tag_xgrammar_compiles(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]))
    done = _run("qwen3", "--tools", str(tools), "--tool-choice", "get_weather", "--no-parallel")
    assert done.returncode == 0, done.stderr
    tag = json.loads(done.stdout)
    assert tag == rtcompile.structural_tag(
        "qwen3", [WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False
    )
    tokenizer, stops = family_tokenizer(rtcompile.template_for("qwen3"))
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=stops)
    xgr.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(done.stdout)


def test_the_command_takes_the_stop_tokens(tmp_path):
    """minimax_m2 as text: its content's closer can overlap itself in free text, so the grammar
    needs its end of turn among the stops; `--stop` passes it, as a server passes its stops."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER]))
    refused = _run("minimax_m2", "--tools", str(tools))
    assert refused.returncode == 2 and "overlaps itself" in refused.stderr
    done = _run("minimax_m2", "--tools", str(tools), "--stop", "[e~[")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == rtcompile.structural_tag("minimax_m2", [WEATHER], stop_tokens=["[e~["])


@pytest.mark.parametrize(
    "args, message",
    [
        (["qwen3", "--tools", "missing.json"], "missing.json: cannot read"),
        (["qwen3", "--tools", "bad.json"], "bad.json: not valid JSON"),
        (["qwen3", "--tools", "tools.json", "--tool-choice", "nope"], "qwen3: tool_choice: names 'nope'"),
        (["no_such_template", "--tools", "tools.json"], "no_such_template: no bundled response template"),
        (["qwen3"], "grammar: the following arguments are required: --tools"),
    ],
)
def test_the_command_fails_with_one_line(tmp_path, args, message):
    (tmp_path / "tools.json").write_text(json.dumps([WEATHER]))
    (tmp_path / "bad.json").write_text("[")
    done = _run(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rtcompile: error: ") and message in lines[0]


def _sentencepiece(*added: str):
    from token_strategies import Recipe, tokenizer_for
    from tokenizer_pool import AddedSpec

    return tokenizer_for(Recipe("sentencepiece", tuple(AddedSpec(a, "special") for a in added), False, False))


def test_an_opener_whose_space_the_first_token_loses_is_refused():
    """A sentencepiece decoder drops the space the first token of a text starts with, and the
    token-id parser decodes the output from its first token, prompt or not: an output that opens
    with ` >` is read as `>`, no call. The grammar refuses such an opener (text mode is not
    affected: a server decodes the text after the prompt)."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>",
        "fields": {"tool_calls": {"open": " >", "close": "</call>", "content": "json", "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    tokenizer = _sentencepiece("</call>", "<|a|>")
    tools = [{"type": "function", "function": {"name": "a"}}]
    prompt = tokenizer.encode("Hi.<|a|>", add_special_tokens=False)
    call = tokenizer.encode(' >{"name": "a", "arguments": {}}</call>', add_special_tokens=False)
    assert interpreter_parse(call, template, prefix=prompt, tokenizer=tokenizer) == {}  # (why)
    assert interpreter_parse(tokenizer.decode(prompt + call), template, prefix="")["tool_calls"]
    with pytest.raises(rtcompile.GrammarError, match=r"fields.tool_calls.open: .* without its leading whitespace"):
        rtcompile.structural_tag(template, tools, tool_choice="required", prefix=prompt, tokenizer=tokenizer)
    rtcompile.structural_tag(template, tools, tool_choice="required", prefix="Hi.<|a|>")


def test_xgrammar_free_text_with_excludes_takes_bytes_that_form_no_character():
    """Why the walks keep to UTF-8 (grammar_walk.Walker): xgrammar 0.2.8's `any_text` with
    excludes takes a lone lead byte then `]`, which its `any_text` without excludes and its
    regexes refuse. When this fails, xgrammar keeps free text UTF-8 and the walks need no filter."""
    tokenizer = _sentencepiece("<a>", "<|end_of_output|>")
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[tokenizer.convert_tokens_to_ids("<|end_of_output|>")])
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    lone, bracket = tokenizer.convert_tokens_to_ids(["<0xC5>", "<0x5D>"])

    def takes(fmt: dict) -> bool:
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps({"type": "structural_tag", "format": fmt})))
        return matcher.accept_token(lone) and matcher.accept_token(bracket)

    assert takes({"type": "any_text", "excludes": ["<a>"]})
    assert not takes({"type": "any_text"}) and not takes({"type": "regex", "pattern": "[^<]*"})


@pytest.mark.parametrize(
    "args, close, keys, seam",
    [
        ({"unquoted_keys": True}, ["{x}", "{x"], ("a", "x_1"), "{x"),  # (`{` then the bare key x_1)
        ({}, '"<', ("a",), '"<'),  # (a quote, then a string's text)
        ({}, "x}", ("a",), None),  # (no seam spells it: `}` never follows a bare `x`)
    ],
)
def test_json_that_could_spell_its_closer_across_its_pieces_is_refused(args, close, keys, seam):
    """The string automaton keeps a closer out of a string's text and each constant is checked
    alone, but the closer can also be spelled across two pieces: the parser would close the
    region inside the arguments."""
    template = {
        "start_anchor": "<|a|>",
        "fields": {"tool_calls": {"open": "<a>", "close": close, "content": "json", "content_args": args, "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    parameters = {"type": "object", "properties": {k: {"type": "string"} for k in keys}, "required": list(keys)}
    tools = [{"type": "function", "function": {"name": "a", "parameters": parameters}}]
    if seam is None:
        rtcompile.structural_tag(template, tools, tool_choice="required")
        return
    with pytest.raises(rtcompile.GrammarError, match=f"could spell .* across {re.escape(repr(seam))}"):
        rtcompile.structural_tag(template, tools, tool_choice="required")
    # Without the key that makes the seam, or with the closer apart from the syntax, it is written.
    if args.get("unquoted_keys"):
        tools[0]["function"]["parameters"] = {"type": "object", "properties": {"a": {"type": "string"}}}
        rtcompile.structural_tag(template, tools, tool_choice="required")


def test_an_anchor_written_before_an_opener_does_not_become_part_of_it():
    """Where text outside regions is dropped, the grammar may write the start anchor before each
    region. An anchor `a` before the opener `a(?P<name>\\w+)>`, written `aa>` for the tool `a`,
    would make the parser read `aaa>`: a call of `aa`. Such an anchor is not written there."""
    from grammar_walk import END_OF_OUTPUT, check_calls, ordinary_spelling, text_of
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "a",
        "fields": {"tool_calls": {"open_pattern": "a(?P<name>\\w+)>", "close": "<a>", "content": "xml-inline", "repeats": True,
                                  "content_args": {"tag_pattern": '<arg (?P<key>\\w+)="(?P<value>[^"]*)"/>'},
                                  "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    assert interpreter_parse("a" + "aa><a>", template, prefix="a")["tool_calls"][0]["function"]["name"] == "aa"  # (why)
    tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, tools, tool_choice="auto", parallel_tool_calls=True, prefix="a", stop_tokens=[END_OF_OUTPUT])
    grammar = walker.compile(tag)
    rng = __import__("random").Random(0)
    checked = 0
    for _ in range(30):
        ids, ended = walker.walk(grammar, rng, max_tokens=60)
        if ended:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="a", tools=tools)
            assert not check_calls(message, tools, "auto", True), message
            checked += 1
    assert checked >= 10
    assert not walker.accepts(grammar, ordinary_spelling(tokenizer, "aaa><a>"))[0]


@pytest.mark.parametrize("parallel", [False, True])
def test_whitespace_written_outside_regions_spells_no_opener_with_what_follows(parallel):
    """Outside regions the parser reads the grammar's own whitespace and the text after it as one
    text: a space, then free text `>!|`, spell the opener ` >` (the region would open there and
    hold `!|`); whitespace ` ` before the opener ` >>` opens it one space early. Such whitespace
    is not written."""
    from grammar_walk import END_OF_OUTPUT, check_calls, ordinary_spelling, text_of
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>",
        "fields": {
            "content": {"content": "text"},
            "tool_calls": {"open": [" >", " >>"], "close": "<a>", "content": "json", "repeats": True,
                           "transform": {"type": "function", "function": "{content}"}},
        },
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, tools, tool_choice="required", parallel_tool_calls=parallel, prefix="<|a|>", stop_tokens=[END_OF_OUTPUT])
    grammar = walker.compile(tag)
    call = '{"name": "a", "arguments": {}}<a>'
    assert walker.accepts(grammar, ordinary_spelling(tokenizer, "x >" + call))[0]  # (a call after content)
    assert not walker.accepts(grammar, ordinary_spelling(tokenizer, " >!| >" + call))[0]
    rng = __import__("random").Random(1)
    checked = 0
    for _ in range(80):
        ids, ended = walker.walk(grammar, rng, max_tokens=300)
        if ended:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="<|a|>", tools=tools)
            assert not check_calls(message, tools, "required", parallel), (text_of(tokenizer, ids), message)
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    "opener, refused",
    [
        ("(?<!<a>)</a>", True),  # (looks at the text before the opener: free text may end with <a>)
        ("(?<=<a>)</a>", True),
        ("x(?<!<a>)</a>", False),  # (the x written right before decides it)
        ("<a>(?<=<a>)</a>", False),
        ("a>(?<!<a>)</a>", True),  # (`<` before the opener would make it <a>)
    ],
)
def test_a_lookbehind_is_written_only_where_the_written_text_decides_it(opener, refused):
    template = {
        "start_anchor": "<|a|>",
        "fields": {"content": {}, "tool_calls": {"open_pattern": opener, "close": "<b>", "content": "json", "repeats": True,
                                                 "transform": {"type": "function", "function": "{content}"}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    if not refused:
        rtcompile.structural_tag(template, tools, tool_choice="required")
        return
    with pytest.raises(rtcompile.GrammarError, match="a lookbehind that what is written before does not decide"):
        rtcompile.structural_tag(template, tools, tool_choice="required")


def test_an_opener_another_field_could_read_as_its_own_is_refused():
    """The tool-call opener `[/]` is written `/`, which the other field's opener `[>/]` matches
    too: the parser may open that field (the first) instead of the call."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>",
        "fields": {
            "notes": {"open_pattern": "[>/]", "close": "<a>", "content": "text"},
            "tool_calls": {"open_pattern": "[/]", "close": "<a>", "content": "json", "repeats": True,
                           "transform": {"type": "function", "function": "{content}"}},
        },
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    assert "tool_calls" not in interpreter_parse('/{"name": "a", "arguments": {}}<a>', template, prefix="<|a|>")  # (why)
    with pytest.raises(rtcompile.GrammarError, match=r"fields.tool_calls: its delimiter written '/' may be read as 'notes'"):
        rtcompile.structural_tag(template, tools, tool_choice="required")
    template["fields"]["notes"]["open_pattern"] = "[>]"
    rtcompile.structural_tag(template, tools, tool_choice="required")


def test_a_closer_anchored_at_a_line_start_is_written_after_a_newline():
    """`(?m)^<a>` closes only where a line starts: the grammar writes the newline before it (JSON
    ending in a tab, then `<a>`, would stay open). `^<a>` without MULTILINE never closes a region
    (a closer is never where the text starts): refused."""
    from grammar_walk import END_OF_OUTPUT, check_calls, ordinary_spelling, text_of
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {"tool_calls": {"repeats": True, "content": "json", "open": "<a>", "close_pattern": "(?m)^<a>",
                               "transform": {"type": "function", "function": "{content}"}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, tools, tool_choice="auto", prefix="<|a|>\n", stop_tokens=[END_OF_OUTPUT])
    grammar = walker.compile(tag)
    call = '<a>{"name": "a", "arguments": {}}'
    assert walker.accepts(grammar, ordinary_spelling(tokenizer, call + "\n<a>"))[0]
    assert not walker.accepts(grammar, ordinary_spelling(tokenizer, call + "\t<a>"))[0]
    rng = __import__("random").Random(1)
    checked = 0
    for _ in range(40):
        ids, ended = walker.walk(grammar, rng, max_tokens=300)
        if ended:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="<|a|>\n", tools=tools)
            assert not check_calls(message, tools, "auto", True), (text_of(tokenizer, ids), message)
            checked += 1
    assert checked >= 10
    template["fields"]["tool_calls"]["close_pattern"] = "^<a>"
    with pytest.raises(rtcompile.GrammarError, match=r"fields.tool_calls.close: .*only where the text starts"):
        rtcompile.structural_tag(template, tools, tool_choice="auto")


def test_a_call_object_takes_one_member_under_another_key_before_and_after_the_read_ones():
    """A call's id as chat templates write it, before the keys the transform reads and after them,
    under a key no read key is (after them it would win, as in JSON; before them a reader that
    streams the call would report it). An opener whose lookahead reads into the content keeps the
    read keys first."""
    from grammar_walk import END_OF_OUTPUT, ordinary_spelling

    def accepts(template, prefix, text):
        tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
        walker = Walker(tokenizer, stops)
        tag = rtcompile.structural_tag(template, tools, tool_choice="required", prefix=prefix, stop_tokens=[END_OF_OUTPUT])
        return walker.accepts(walker.compile(tag), ordinary_spelling(tokenizer, text))[0]

    tools = [WEATHER]
    call = '"name": "get_weather", "arguments": {"city": "Oslo"}'
    template = {
        "start_anchor": "<|a|>",
        "fields": {"tool_calls": {"open": "<c>", "close": "</c>", "content": "json", "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    assert accepts(template, "<|a|>", "<c>{" + call + "}</c>")
    assert accepts(template, "<|a|>", '<c>{"tool_call_id": "0", ' + call + "}</c>")
    assert accepts(template, "<|a|>", '<c>{"type": "x", ' + call + ', "id": "abc123def"}</c>')
    assert not accepts(template, "<|a|>", "<c>{" + call + ', "name": "x"}</c>')  # (it would win)
    assert not accepts(template, "<|a|>", '<c>{"name": "x", ' + call + "}</c>")  # (streamed first)
    assert not accepts(template, "<|a|>", '<c>{"a": "b", "c": "d", ' + call + "}</c>")  # (one at most)
    looking = rtcompile.template_for("llama3_json")
    anchor = looking["start_anchor"]
    arguments = '"name": "get_weather", "parameters": {"city": "Oslo"}'
    assert accepts(looking, anchor, "{" + arguments + ', "id": "a"}<|eot_id|>')
    assert not accepts(looking, anchor, '{"id": "a", ' + arguments + "}<|eot_id|>")  # (the opener looks for "name")


@pytest.mark.parametrize("keys", [["name", "arguments"], ["id"], ["a", "ab", "abc"], []])
def test_a_key_after_the_read_ones_is_any_word_but_a_read_key(keys):
    from xgrammar.testing import _is_grammar_accept_string as xgrammar_accepts

    from rtcompile.grammar.values import key_other_than

    grammar = xgr.Grammar.from_ebnf("\n".join(["root ::= key", *key_other_than(keys)]))
    for word in ["name", "names", "nam", "n", "arguments", "argument", "id", "i", "ids", "a", "ab", "abc", "abcd", "b", "x_1", "Z"]:
        assert xgrammar_accepts(grammar, f'"{word}"') is (word not in keys), word
    for not_a_word in ['""', '"a b"', '"é"', "name"]:
        assert not xgrammar_accepts(grammar, not_a_word)


def test_a_region_opened_by_a_lookahead_is_written_with_the_text_it_looks_for():
    """The content opens on `(?=<a>)`: written as nothing, the opener did not open it, and the
    closer `/` written after free text opened the other field instead. Its text is written
    first; a lookahead no written text satisfies for sure (`(?=<a>\\d)`) leaves the field
    unopened."""
    from grammar_walk import END_OF_OUTPUT, text_of
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {
            "tool_calls": {"open": "/", "close": "<a>"},
            "content": {"open_pattern": "(?=<a>)", "close": "/"},
        },
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, tools, tool_choice="none", prefix="<|a|>\n", stop_tokens=[END_OF_OUTPUT])
    grammar = walker.compile(tag)
    rng = __import__("random").Random(3)
    opened = 0
    for _ in range(30):
        ids, ended = walker.walk(grammar, rng, max_tokens=100)
        if ended:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="<|a|>\n", tools=tools)
            assert "tool_calls" not in message, (text_of(tokenizer, ids), message)
            opened += "content" in message
    assert opened >= 5
    template["fields"]["content"]["open_pattern"] = "(?=<a>\\d)"
    assert '"<a>"' not in json.dumps(rtcompile.structural_tag(template, tools, tool_choice="none", prefix="<|a|>\n"))


def test_a_lazy_repeat_is_written_so_the_match_ends_where_the_grammar_ends_it():
    """The closer `<a>.*?<a>` closes at the first `<a>` after its start: text written in its
    `.*?` holds no `<` (else the closer would end early and the rest open another call). A greedy
    `<a>.*<a>` would run over later text to a later `<a>`: refused."""
    from grammar_walk import END_OF_OUTPUT, check_calls, ordinary_spelling, text_of
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {"tool_calls": {"repeats": True, "content": "json", "open": "<a>", "close_pattern": "<a>.*?<a>",
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    tokenizer, stops = family_tokenizer(template, (END_OF_OUTPUT,))
    walker = Walker(tokenizer, stops)
    tag = rtcompile.structural_tag(template, tools, tool_choice="auto", parallel_tool_calls=False, prefix="<|a|>\n", stop_tokens=[END_OF_OUTPUT])
    grammar = walker.compile(tag)
    call = '<a>{"name": "a", "arguments": {}}'
    assert walker.accepts(grammar, ordinary_spelling(tokenizer, call + "<a>x)<a>"))[0]
    assert not walker.accepts(grammar, ordinary_spelling(tokenizer, call + "<a>x<a>)<a>"))[0]
    rng = __import__("random").Random(2)
    checked = 0
    for _ in range(40):
        ids, ended = walker.walk(grammar, rng, max_tokens=200)
        if ended:
            message = interpreter_parse(text_of(tokenizer, ids), template, prefix="<|a|>\n", tools=tools)
            assert not check_calls(message, tools, "auto", False), (text_of(tokenizer, ids), message)
            checked += 1
    assert checked >= 10
    template["fields"]["tool_calls"]["close_pattern"] = "<a>.*<a>"
    with pytest.raises(rtcompile.GrammarError, match="a repeat that could run over the '<a>' after it"):
        rtcompile.structural_tag(template, tools, tool_choice="auto")


def test_a_closer_whose_match_could_start_inside_the_content_is_refused():
    """`a.*?<a>` after a call's JSON: a search for it finds the `a` of `"name"` first and runs on
    to the written `<a>`, so the region would close inside the call. Closers whose matches cannot
    start inside the content stay: one led by whitespace (only the content's trailing whitespace
    moves), one whose fixed text the content never holds (`<a>.*?<a>`)."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    def template(close_pattern):
        return {
            "start_anchor": "<|a|>\n",
            "fields": {"tool_calls": {"repeats": True, "content": "json", "open": "<a>", "close_pattern": close_pattern,
                                      "transform": {"type": "function", "function": "{content}"}}},
        }

    tools = [{"type": "function", "function": {"name": "a"}}]
    with pytest.raises(ValueError):  # (what the grammar would write closes the region early)
        interpreter_parse('<a>{"name": "a", "arguments": {}}a<a>', template("a.*?<a>"), prefix="<|a|>\n", tools=tools)
    with pytest.raises(rtcompile.GrammarError, match="fields.tool_calls.close: a match of the closer could start inside"):
        rtcompile.structural_tag(template("a.*?<a>"), tools, tool_choice="required")
    for refused in ("x+<a>", "(?:a|b)[^<]*<a>", "abab"):
        with pytest.raises(rtcompile.GrammarError, match="could start inside"):
            rtcompile.structural_tag(template(refused), tools, tool_choice="required")
    for accepted in ("\\s*<a>", "<a>.*?<a>", "\\n```\\s*<b>", "</a>\\s*<b>"):
        assert rtcompile.structural_tag(template(accepted), tools, tool_choice="required")["type"] == "structural_tag"


def test_an_openers_lookahead_must_hold_for_every_content_written_after_it():
    """An opener that looks ahead into the call's JSON (`(?=\\{\\s*"name"\\s*:)`) is written only
    where every object the content may write satisfies it, in any layout (the opener's `\\s*`
    before the lookahead takes the object's leading whitespace) and key order. Its first
    character alone does not decide it: `{"arguments": ...}` starts with `{` too."""

    def template(open_pattern, transform=None):
        return {
            "start_anchor": "<|a|>",
            "fields": {"tool_calls": {"open_pattern": open_pattern, "close": "<|b|>", "content": "json", "repeats": True,
                                      "transform": transform or {"type": "function", "function": {"name": "{content.name}", "arguments": "{content.parameters}"}}}},
        }

    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]
    for accepted in ('^\\s*(?=\\{\\s*"name"\\s*:)', '^\\s*(?:<\\|p\\|>\\s*)?(?=\\{\\s*"name"\\s*:\\s*"get")', '<\\|c\\|>(?=\\s*\\{\\s*"name")'):
        assert rtcompile.structural_tag(template(accepted), tools, tool_choice="required")["type"] == "structural_tag"
    for refused in (
        '^\\s*(?=\\{\\s*"parameters")',  # (the name comes first)
        '^\\s*(?=\\{"name")',  # (the content may write whitespace after the brace)
        '<\\|c\\|>(?=\\{\\s*"name")',  # (... and before it, with no `\\s*` in the opener to take it)
        '^\\s*(?=\\{\\s*"name"\\s*:\\s*"other")',
        '^\\s*(?!\\[)',
    ):
        with pytest.raises(rtcompile.GrammarError, match="fields.tool_calls"):
            rtcompile.structural_tag(template(refused), tools, tool_choice="required")
    # (keys in sorted order put "arguments" first: a lookahead for the name is refused)
    sorted_first = {"type": "function", "function": {"name": "{content.name}", "arguments": "{content.arguments}"}}
    with pytest.raises(rtcompile.GrammarError, match="may not hold for the content written after it"):
        rtcompile.structural_tag(template('^\\s*(?=\\{\\s*"arguments")', sorted_first), tools, tool_choice="required")


def test_a_prompt_the_parser_loops_on_is_refused_with_one_line():
    """Delimiters that match the empty string at one place (an optional opener and closer) make
    the parser loop on the prompt; the grammar says so as a GrammarError, not the parser's error."""
    template = {
        "start_anchor": "<|a|>\n",
        "fields": {"content": {"open_pattern": "(?:<a>)?", "close_pattern": "(?:<a>)?"},
                   "tool_calls": {"open": "<b>", "close": "</b>", "content": "json", "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    with pytest.raises(rtcompile.GrammarError, match="^prefix: the prompt does not parse: ParserLoopError") as raised:
        rtcompile.structural_tag(template, tools, tool_choice="auto", prefix="</a>")
    assert "\n" not in str(raised.value)


def test_xml_content_whose_pieces_could_spell_the_closer_is_refused():
    """A tag's `>` then a value `a` spell the closer `>a`; a tag's `>` then the whitespace after
    it spell `> `. The parser would close the call inside its arguments. Neither piece holds the
    closer alone, so each piece's own check passed."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    def template(closers):
        return {
            "start_anchor": "<|a|>\n",
            "fields": {"tool_calls": {"repeats": True, "content": "xml-inline", "open_pattern": "<call=(?P<name>\\w+)>", "close": closers,
                                      "content_args": {"tag_pattern": "<parameter=(?P<key>[^>\\n]+)>\\s*(?P<value>.*?)\\s*</parameter>"},
                                      "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}},
        }

    enum = [{"type": "function", "function": {"name": "a", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "enum": ["a"]}}, "required": ["a"]}}}]
    number = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]
    # (what such a grammar would write: the required argument is lost)
    message = interpreter_parse("<call=a><parameter=a>a</parameter>>a", template([" ", ">a"]), prefix="<|a|>\n", tools=enum)
    assert message["tool_calls"][0]["function"]["arguments"] == {}
    for closers, tools, spelled in (([" ", ">a"], enum, ">a"), (["\n", "> "], number, "> ")):
        with pytest.raises(rtcompile.GrammarError, match=f"could spell its closer {spelled!r} across them"):
            rtcompile.structural_tag(template(closers), tools, tool_choice="auto")
    assert rtcompile.structural_tag(template(["</call>"]), enum, tool_choice="required")["type"] == "structural_tag"


def test_a_closer_that_looks_ahead_is_refused():
    """`<a>(?!ab)` closes only where `ab` does not follow: what the grammar writes after the
    closer (free text, the next call's opener) could keep the region open. A closer whose
    alternative is only a lookahead at the next call (`(?=<b>)|</s>`) is read apart and stays."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    def template(close_pattern):
        return {
            "start_anchor": "<|a|>\n",
            "fields": {"tool_calls": {"repeats": True, "content": "json", "open": "b", "close_pattern": close_pattern,
                                      "transform": {"type": "function", "function": "{content}"}}},
        }

    tools = [{"type": "function", "function": {"name": "a"}}]
    call = 'b{"name": "a", "arguments": {}}<a>'
    with pytest.raises(ValueError):  # (the first closer is not one: both calls are read as one region)
        interpreter_parse(call + "ab" + call, template("<a>(?!ab)"), prefix="<|a|>\n", tools=tools)
    for refused in ("<a>(?!ab)", "<a>(?=\\n)"):
        with pytest.raises(rtcompile.GrammarError, match="the closer looks ahead at the text after it"):
            rtcompile.structural_tag(template(refused), tools, tool_choice="required")
    assert rtcompile.structural_tag(template("(?=b)|</s>"), tools, tool_choice="required")["type"] == "structural_tag"


def test_a_prompt_that_opens_a_region_the_defaults_leave_no_place_for_is_refused():
    """A repeating field whose default is None cannot take a region (the parser appends to None).
    The grammar never opens one, but a prompt can (`a` opens it inside `"name"`): refused."""
    template = {
        "start_anchor": "<a>",
        "defaults": {"b_b": None},
        "fields": {"tool_calls": {"repeats": True, "content": "json", "open": "<a>", "close": "</call>",
                                  "transform": {"type": "function", "function": "{content}"}},
                   "b_b": {"open": "a", "close": "<a>", "repeats": True}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    prompt = '<a>{"name": "a", "arguments": {}}</call>'
    with pytest.raises(rtcompile.GrammarError, match="^prefix: the prompt opens a 'b_b' region"):
        rtcompile.structural_tag(template, tools, tool_choice="auto", prefix=prompt)
    assert rtcompile.structural_tag(template, tools, tool_choice="auto", prefix="<a>")["type"] == "structural_tag"


def test_a_call_field_whose_regions_are_joined_as_text_is_refused():
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>",
        "fields": {"tool_calls": {"open": "<a>", "close": "</a>", "content": "json", "repeats": True, "join": "",
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    with pytest.raises(ValueError, match="'join' requires each match to parse to a string"):  # (why)
        interpreter_parse('<a>{"name": "a", "arguments": {}}</a>', template, prefix="<|a|>")
    with pytest.raises(rtcompile.GrammarError, match=r"fields.tool_calls.join: regions joined as text cannot hold tool calls"):
        rtcompile.structural_tag(template, [{"type": "function", "function": {"name": "a"}}], tool_choice="auto")


@pytest.mark.parametrize(
    "opener, token",
    [
        ("<a>(?P<name>\\w+)<a>", "<a>a<a>"),  # (three pieces: `<a>`, the name, `<a>`)
        ("<a>[^<]*<a>", "<a><a>"),  # (the class may write nothing)
        ("<a>(?:=(?P<name>[\\w.]+))?<", "<a><"),  # (the group may write nothing)
    ],
)
def test_a_control_token_that_pieces_of_a_delimiter_could_spell_is_refused(opener, token):
    """By token ids, a control token whose text the opener's pieces could write together is one
    the grammar (text to xgrammar's matcher) would let through as the opener, and the parser
    would not read as it."""
    from grammar_walk import END_OF_OUTPUT
    from tokenizer_pool import AddedSpec, build_tokenizer

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {"tool_calls": {"open_pattern": opener, "close": "</call>", "content": "json", "repeats": True,
                                  "transform": {"type": "function", "function": "{content}"}}},
    }
    # (`<a>` itself no token: the opener's pieces are text)
    tokenizer = build_tokenizer("bpe", [AddedSpec(t, "special") for t in ("</call>", token, END_OF_OUTPUT)])
    tools = [{"type": "function", "function": {"name": "a"}}]
    with pytest.raises(rtcompile.GrammarError, match=f"the control token {re.escape(repr(token))} could be spelled across"):
        rtcompile.structural_tag(template, tools, tool_choice="required", tokenizer=tokenizer, stop_tokens=[END_OF_OUTPUT])


def test_an_implicit_field_closed_only_where_the_text_starts_is_refused():
    """The content (no opener) closes on `^`: after a prompt's text it never closes, and the
    parser reads no call the grammar writes after it."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {
            "content": {"close_pattern": "^", "content": "int"},
            "tool_calls": {"open_pattern": "<a>(?P<name>\\w+)>", "close": "<a>", "content": "xml-inline", "repeats": True,
                           "content_args": {"tag_pattern": '<arg (?P<key>\\w+)="(?P<value>[^"]*)"/>'},
                           "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}},
        },
    }
    assert "tool_calls" not in interpreter_parse("<a>a>\n<a>", template, prefix="0")  # (why)
    with pytest.raises(rtcompile.GrammarError, match=r"fields.content.close: the closer matches only where the text starts"):
        rtcompile.structural_tag(template, [{"type": "function", "function": {"name": "a"}}], tool_choice="required", prefix="0")


def test_an_anchor_token_that_starts_with_another_anchor_leaves_no_dead_end():
    """Anchors `<a>` and `<a><` (a control token) before calls opening `<a>name>`: read byte by
    byte, `<a>` and the opener's `<` could start the token's bytes, and once that reading failed
    xgrammar's matcher allowed no token after `<a><` `<a>a>`. Every walk goes on to its end."""
    from tokenizer_pool import AddedSpec, build_tokenizer

    template = {
        "start_anchor": ["<a>", "<a><"],
        "fields": {"tool_calls": {"repeats": True, "content": "xml-inline", "open_pattern": "<a>(?P<name>\\w+)>", "close": "</call>",
                                  "content_args": {"tag_pattern": '<arg (?P<key>\\w+)="(?P<value>[^"]*)"/>'},
                                  "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}},
    }
    tokenizer = build_tokenizer("bytes", [AddedSpec("<a><", "special"), AddedSpec("<|end_of_output|>", "special")])
    stops = [tokenizer.convert_tokens_to_ids("<|end_of_output|>")]
    tools = [{"type": "function", "function": {"name": "a"}}]
    tag = rtcompile.structural_tag(template, tools, tool_choice="auto", parallel_tool_calls=False, prefix=[], tokenizer=tokenizer, stop_tokens=stops)
    walker = Walker(tokenizer, stops)
    grammar = walker.compile(tag)
    for seed in range(40):
        walker.walk(grammar, random.Random(seed), max_tokens=60)  # (AssertionError at a dead end)


def test_a_closer_that_another_closer_extends_is_not_written():
    """Calls close on `a` or `a<`: written `a`, the next call's opener `<a>a>` would extend it to
    `a<`, which the parser reads instead, and the call after it opens as content. Only `a<` is
    written: every walk parses."""
    from transformers.utils.chat_parsing import parse_response as interpreter_parse

    template = {
        "start_anchor": "<|a|>\n",
        "fields": {"content": {"open": "a", "content": "json"},
                   "tool_calls": {"repeats": True, "content": "xml-inline", "open_pattern": "<a>(?P<name>\\w+)>", "close": ["a", "a<"],
                                  "content_args": {"tag_pattern": '<arg (?P<key>\\w+)="(?P<value>[^"]*)"/>'},
                                  "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}},
    }
    tools = [{"type": "function", "function": {"name": "a"}}]
    tokenizer, stops = family_tokenizer(template)
    walker = Walker(tokenizer, stops)
    grammar = walker.compile(rtcompile.structural_tag(template, tools, tool_choice="auto", prefix=""))
    parsed = 0
    for seed in range(40):
        ids, ended = walker.walk(grammar, random.Random(seed), max_tokens=200)
        if ended:
            interpreter_parse(text_of(tokenizer, ids), template, prefix="", tools=tools)
            parsed += 1
    assert parsed
