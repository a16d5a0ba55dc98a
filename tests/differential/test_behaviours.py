"""Hand-written checks of the interpreter behaviours that are easy to get wrong.

Each test states the behaviour concretely and also checks that rtcompile and the interpreter agree
on every event of the same run (tests/parity.py)."""

import copy
import threading

import pytest
from transformers.utils import chat_parsing as interpreter

import rtcompile
from rtcompile.runtime import ERRORS_KEY, MatchTimeoutError, ParserFailedError, ParserLoopError

from parity import assert_same

THINK = {
    "start_anchor": "<|assistant|>",
    "defaults": {"role": "assistant"},
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "content": {"close": "<|end|>"},
    },
}


def events_of(steps):
    return [e for kind, value in steps if kind in ("init", "feed") for e in value]


def chunks_of(steps, field):
    return [e["text"] for e in events_of(steps) if e["type"] == "region_chunk" and e["field"] == field]


def message_of(steps):
    assert steps[-1][0] == "final", steps[-1]
    return steps[-1][1][0]


def test_validation_runs_before_the_prefix_check():
    bad = {"fields": {"a": {"open_pattern": "("}}, "start_anchor": "x"}
    with pytest.raises(ValueError) as info:
        rtcompile.ResponseParser(bad)  # no prefix either
    assert info.value.path == "fields.a.open_pattern"
    with pytest.raises(ValueError, match="requires `prefix`"):
        rtcompile.ResponseParser(THINK)


def test_finalized_parser_refuses_more_work():
    parser = rtcompile.ResponseParser(THINK, "")
    parser.feed("hi")
    parser.finalize()
    with pytest.raises(RuntimeError, match="already finalized"):
        parser.feed("more")
    with pytest.raises(RuntimeError, match="already finalized"):
        parser.finalize()


def test_prefix_after_the_last_anchor_gives_initial_events():
    prefix = "<|assistant|>old answer<|end|><|user|>q<|assistant|><think>\nstarted"
    steps = assert_same(THINK, prefix, [" more", "</think>Answer<|end|>"])
    assert steps[0] == ("init", [
        {"type": "region_open", "field": "reasoning_content"},
        {"type": "region_chunk", "field": "reasoning_content", "text": "\nstarted", "dirty": False},
    ])
    assert message_of(steps) == {"role": "assistant", "reasoning_content": "started more", "content": "Answer"}


@pytest.mark.parametrize("anchor", [["<|assistant|>", "<|tool|>"], {"pattern": r"<\|(?:assistant|tool)\|>"}])
def test_anchor_lists_and_patterns_truncate_after_the_last_match(anchor):
    template = copy.deepcopy(THINK)
    del template["start_anchor"]
    if isinstance(anchor, dict):
        template["start_anchor_pattern"] = anchor["pattern"]
    else:
        template["start_anchor"] = anchor
    steps = assert_same(template, "<|assistant|>a<|end|><|tool|><think>x", ["y</think>z"])
    assert message_of(steps)["reasoning_content"] == "xy"


def test_anchor_missing_from_the_prefix_parses_the_whole_prefix():
    steps = assert_same(THINK, "<think>prefilled", ["</think>ok"])
    assert message_of(steps)["reasoning_content"] == "prefilled"


def test_partial_delimiter_is_held_back_until_resolved():
    steps = assert_same(THINK, "", ["<think>abc</th", "ink>done"])
    assert chunks_of(steps, "reasoning_content") == ["abc"]
    steps = assert_same(THINK, "", ["<think>abc</th", "e end"])
    assert chunks_of(steps, "reasoning_content") == ["abc", "</the end"]


def test_regex_match_at_the_buffer_end_waits_but_a_literal_commits():
    regex_close = copy.deepcopy(THINK)
    regex_close["fields"]["reasoning_content"] = {"open": "<think>", "close_pattern": "</think>"}
    steps = assert_same(regex_close, "", ["<think>a</think>", "b"])
    assert steps[1][1][-1]["type"] == "region_chunk"  # the close is still pending after feed 1
    assert steps[2][1][0] == {"type": "region_close", "field": "reasoning_content", "value": "a"}
    steps = assert_same(THINK, "", ["<think>a</think>", "b"])
    assert steps[1][1][-1] == {"type": "region_close", "field": "reasoning_content", "value": "a"}


def test_literal_that_another_literal_extends_waits_at_the_end():
    template = copy.deepcopy(THINK)
    template["fields"]["content"]["close"] = ["<|end|>", "<|end|>\n"]
    steps = assert_same(template, "", ["answer<|end|>", "\n"])
    assert [e["type"] for e in steps[1][1]] == ["region_open", "region_chunk"]


def test_leading_whitespace_pattern_holds_trailing_spaces():
    template = copy.deepcopy(THINK)
    template["fields"]["content"] = {"close_pattern": r"\s*<\|end\|>"}
    steps = assert_same(template, "", ["Hello  ", "world ", "<|end|>"])
    assert chunks_of(steps, "content") == ["Hello", "  world"]
    assert message_of(steps)["content"] == "Hello  world"


def test_optional_tail_of_a_close_pattern_can_differ_between_stream_and_one_shot():
    template = copy.deepcopy(THINK)
    template["fields"]["reasoning_content"] = {"open": "<think>", "close_pattern": "</think>(\n\n)?"}
    one_shot = assert_same(template, "", ["<think>r</think>\n\nanswer"])
    streamed = assert_same(template, "", ["<think>r</think>\n", "\nanswer"])
    # One shot: the optional "\n\n" is part of the close. Streamed: once "</think>\n" is seen, the
    # shorter match commits and the newlines become content (stripped at the region's close).
    assert chunks_of(one_shot, "content") == ["answer"]
    assert chunks_of(streamed, "content") == ["\n", "\nanswer"]
    assert message_of(one_shot)["content"] == message_of(streamed)["content"] == "answer"


def test_ties_prefer_earliest_then_longest_then_opens_then_field_name():
    template = {
        "start_anchor": "@",
        "fields": {
            "zeta": {"open": "<x", "close": ">"},
            "alpha": {"open": "<x", "close": "]"},
            "long": {"open": "<xy", "close": "}"},
            "text": {"close_pattern": "<x"},
        },
    }
    steps = assert_same(template, "", ["a<x1]"])
    assert message_of(steps) == {"text": "a", "alpha": "1"}  # same delimiter: 'alpha' < 'zeta' by name
    steps = assert_same(template, "", ["a<xy2}"])
    assert message_of(steps) == {"text": "a", "long": "2"}  # longest wins at one start


def test_whitespace_led_patterns_beside_literals_that_start_with_whitespace():
    """`\\s*<y>` is searched as the literal `<y>` after a run of whitespace, and a state usually
    finds all its literals in one search. A literal that itself starts with whitespace could then
    begin inside that run (and lose a tie it should win): such states search each delimiter alone."""
    template = {
        "start_anchor": "@",
        "fields": {
            "space": {"open": " ", "close": "!"},
            "tag": {"open_pattern": r"\s*<y>", "close": "?"},
            "word": {"open": "<w>", "close": ";"},
        },
    }
    steps = assert_same(template, "", [" <y>z?"])
    assert message_of(steps) == {"tag": "z"}  # both start at 0; the longer match wins
    assert message_of(assert_same(template, "", [" ", " <y>", "a?"])) == {"tag": "a"}
    assert message_of(assert_same(template, "", ["a b!<w>c;"])) == {"space": "b", "word": "c"}
    for chunks in (["x \n <", "y>q? <w>r;"], ["x \n <y>q? <w>r;"], list("x \n <y>q? <w>r;")):
        assert_same(template, "", chunks)


def test_null_sink_discards_text_outside_regions():
    template = {"start_anchor": "@", "fields": {"answer": {"open": "<a>", "close": "</a>"}}}
    steps = assert_same(template, "", ["noise <a>kept</a> more noise"])
    assert message_of(steps) == {"answer": "kept"}
    assert all(e["field"] == "answer" for e in events_of(steps))


def test_zero_width_close_and_end_of_text_close():
    template = {"start_anchor": "@", "fields": {"text": {"close_pattern": "(?=<)"}, "tag": {"open": "<t>", "close": "</t>"}}}
    steps = assert_same(template, "", ["before<t>x</t>after"])
    assert message_of(steps) == {"text": "after", "tag": "x"}
    template = {"start_anchor": "@", "fields": {"text": {"close_pattern": "$"}}}
    assert message_of(assert_same(template, "", ["all of it"])) == {"text": "all of it"}


def test_a_whole_message_is_one_pass_except_where_feed_then_finalize_would_differ(monkeypatch):
    """parse_response reads the text once, at the end of the stream: by the one-shot reader, and
    by the machine's one pass (parse_whole) where a template keeps it. Where an empty region
    closes on a zero-width match, the interpreter's feed stops and its finalize reads again: there
    the one-shot reader hands the message to parse_whole, which redoes it as feed then finalize.
    Either way, the interpreter's result."""
    from rtcompile.runtime import machine

    passes = []
    one_pass = machine.Machine._parse_to_end
    monkeypatch.setattr(
        machine.Machine,
        "_parse_to_end",
        lambda self, text, head="": passes.append(one_pass(self, text, head)) or passes[-1],
    )
    template = {"start_anchor": "@", "fields": {"text": {"close_pattern": "(?=<)"}, "tag": {"open": "<t>", "close": "</t>"}}}
    module = rtcompile.load(template)
    assert module.ONE_SHOT is True
    handed_back = []
    whole = module.parse_whole
    monkeypatch.setattr(module, "parse_whole", lambda *args, **kwargs: handed_back.append(True) or whole(*args, **kwargs))
    cases = [
        ("before<t>x</t>after", "", True),
        ("ab<u>cd<t>x</t>", "", False),
        ("<u><t>x</t>z", "@<", False),
        ("ab<", "", False),
        # The prefix is read in the same pass: a region it opens, a delimiter it starts.
        ("y</t>after", "sys@<t>x", True),
        ("t>x</t>after", "sys@before<", True),
    ]
    for text, prefix, in_one_pass in cases:
        expected = interpreter.parse_response(text, template, prefix=prefix)
        handed_back.clear()
        assert module.parse_response(text, prefix=prefix) == expected
        assert (not handed_back) == in_one_pass, text
        passes.clear()
        assert machine.parse_whole(module.ResponseParser, text, prefix, None) == expected
        assert (passes[0] is not None) == in_one_pass, text
    assert rtcompile.parse_response("ab<u>cd<t>x</t>", template, prefix="") == {"text": "ab"}


def test_a_prefix_whose_matches_may_still_grow_is_read_before_the_pass():
    """The interpreter commits a close `<a>.*<a` at the last `<a` of the prefix (the match survives
    its check for text leaning on the end); read in the same pass as the text, the greedy match
    would run on to a later `<a` (a differential run found this). Such templates read the prefix
    first, as the constructor does; templates whose matches are final read it in the pass."""
    template = {
        "start_anchor": "<|a|>\n",
        "fields": {
            "reasoning_content": {},
            "a": {"open": "<a>", "close_pattern": "<a>.*<a", "content": "bool"},
        },
    }
    prefix, text = "<a>true<a><a<a>", "<a>"
    expected = interpreter.parse_response(text, template, prefix=prefix)
    assert expected == {"a": False, "reasoning_content": ">"}
    assert rtcompile.parse_response(text, template, prefix=prefix) == expected
    assert rtcompile.load(template).ResponseParser.PREFIX_IN_ONE_PASS is False
    from rtcompile.library import template_for

    assert rtcompile.load(template_for("qwen3_5")).ResponseParser.PREFIX_IN_ONE_PASS is True


def test_repeats_collect_and_join_concatenates():
    template = {
        "start_anchor": "@",
        "fields": {
            "calls": {"open": "<c>", "close": "</c>", "repeats": True, "content": "int"},
            "notes": {"open": "<n>", "close": "</n>", "repeats": True, "join": " | "},
        },
    }
    steps = assert_same(template, "", ["<c> 1 </c><n>a</n>x<c>2</c><n>b</n>"])
    assert message_of(steps) == {"calls": [1, 2], "notes": "a | b"}


def test_search_anchored_patterns_parse_whole_messages_as_feed_then_finalize():
    """`\\G` matches only where a search starts, and the interpreter's finalize starts where its feed
    stopped (here: before "<a", held as a possible "<a>"). A one-pass parse would start elsewhere
    and miss the close (found by hypothesis)."""
    template = {
        "start_anchor": "@",
        "fields": {"content": {"close_pattern": r"\G<a", "content": "int"}, "r": {"open": "<a>", "close": "</a>"}},
    }
    assert interpreter.parse_response("0<a", template, prefix="") == {"content": 0}
    assert rtcompile.parse_response("0<a", template, prefix="") == {"content": 0}
    assert rtcompile.load(template).ResponseParser.ONE_PASS is False
    assert rtcompile.load(THINK).ResponseParser.ONE_PASS is True


def test_a_join_of_a_non_string_names_the_field_once():
    template = {"start_anchor": "@", "fields": {"n": {"open": "<n>", "close": "</n>", "repeats": True, "join": ",", "content": "int"}}}
    with pytest.raises(ValueError) as interpreted:
        interpreter.parse_response("<n>1</n>", template, prefix="")
    with pytest.raises(ValueError) as compiled:
        rtcompile.parse_response("<n>1</n>", template, prefix="")
    assert str(interpreted.value).startswith("Field 'n': 'join' requires")
    assert str(compiled.value).startswith(str(interpreted.value))  # and then the region's text
    assert str(compiled.value).count("Field 'n'") == 1


def test_required_field_missing_raises_at_finalize():
    template = copy.deepcopy(THINK)
    template["fields"]["reasoning_content"]["optional"] = False
    steps = assert_same(template, "", ["just an answer"])
    assert steps[-1] == ("raised", ValueError)


def test_empty_values_are_dropped_except_defaults():
    template = copy.deepcopy(THINK)
    template["defaults"] = {"role": "assistant", "content": ""}
    steps = assert_same(template, "", ["<think>   </think>"])
    assert message_of(steps) == {"role": "assistant", "content": ""}


def test_defaults_are_copied_for_every_parser():
    template = copy.deepcopy(THINK)
    template["defaults"] = {"role": "assistant", "tags": {"a": [1]}}
    first = rtcompile.parse_response("x", template, prefix="")
    first["tags"]["a"].append(2)
    assert rtcompile.parse_response("y", template, prefix="")["tags"] == {"a": [1]}


def test_transform_errors_keep_the_interpreter_classes():
    template = {
        "start_anchor": "@",
        "fields": {
            "a": {"open": "<a>", "close": "</a>", "content": "json", "transform": {"x": "{missing}"}},
            "b": {"open": "<b>", "close": "</b>", "content": "json", "transform": {"x": "{content.no}"}},
        },
    }
    assert assert_same(template, "", ["<a>{}</a>"])[-1] == ("raised", KeyError)
    assert assert_same(template, "", ["<b>{}</b>"])[-1] == ("raised", ValueError)


def test_tool_arguments_are_coerced_from_schemas_and_functions():
    template = rtcompile.template_for("qwen3_5")
    text = "<tool_call>\n<function=add>\n<parameter=a>\n7\n</parameter>\n<parameter=b>\n2.5\n</parameter>\n</function>\n</tool_call>"

    def add(a: int, b: float):
        """Add.

        Args:
            a: first
            b: second
        """

    for tools in ([{"type": "function", "function": {"name": "add", "parameters": {"properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}}}], [add]):
        steps = assert_same(template, "", [text], tools=tools)
        assert message_of(steps)["tool_calls"][0]["function"]["arguments"] == {"a": 7, "b": 2.5}


def test_parse_error_names_the_field_and_the_parser_then_refuses_to_continue():
    parser = rtcompile.ResponseParser(rtcompile.template_for("qwen3"), "")
    with pytest.raises(ValueError) as info:
        parser.feed("<tool_call>{not json}</tool_call>")
    assert "tool_calls" in str(info.value) and "{not json}" in str(info.value)
    with pytest.raises(ParserFailedError):
        parser.feed("more")


def test_errors_keep_records_the_raw_region_and_goes_on():
    parser = rtcompile.ResponseParser(rtcompile.template_for("qwen3"), "", errors="keep")
    events = parser.feed('<tool_call>{not json}</tool_call>\nok <tool_call>{"name": "f", "arguments": {}}</tool_call>')
    message, _ = parser.finalize()
    failed = [e for e in events if e["type"] == "region_close" and "error" in e]
    assert len(failed) == 1 and failed[0]["value"] is None
    assert message[ERRORS_KEY] == [{"field": "tool_calls", "raw": "{not json}", "error": failed[0]["error"]}]
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": {}}}]
    assert message["content"] == "ok"


def test_endless_zero_width_loop_raises_instead_of_hanging():
    template = {"start_anchor": "@", "fields": {"z": {"open_pattern": "(?=a)", "close_pattern": "(?=a)"}}}
    result = []

    def run():
        try:
            rtcompile.parse_response("xa", template, prefix="")
        except ParserLoopError as e:
            result.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the parser hung"
    assert len(result) == 1 and result[0].field == "z"


def test_slow_pattern_times_out_with_a_clear_error():
    template = {"start_anchor": "@", "fields": {"x": {"open_pattern": r"(a|aa)+b", "close": "!"}}}
    parser = rtcompile.ResponseParser(template, "", timeout=0.05)
    with pytest.raises(MatchTimeoutError, match="timeout=0.05"):
        parser.feed("a" * 40 + "c")


def test_interpreter_reference_is_the_one_installed():
    import transformers

    from rtcompile.version import INTERPRETER_RELEASE

    # The differential tests prove parity with the installed interpreter: it must be the release
    # the generated parsers declare they implement.
    assert transformers.__version__ == INTERPRETER_RELEASE == "5.25.0"
    assert rtcompile.load({"start_anchor": "@", "fields": {"content": {}}}).IMPLEMENTS_TRANSFORMERS == INTERPRETER_RELEASE
    assert interpreter.parse_response is not rtcompile.parse_response


@pytest.mark.parametrize(
    "name, args",
    [
        ("text", {"strip": False}),
        ("int", {}),
        ("json", {}),
        ("json", {"unquoted_keys": True, "string_delims": [["<|\"|>", "<|\"|>"]], "allow_non_json": True}),
        ("xml-inline", {"tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>", "merge_duplicates": True}),
        ("kv-lines", {"kv_sep": "="}),
        ("python-call-list", {}),
    ],
)
def test_well_formed_content_args_are_prepared_once_not_per_region(name, args):
    """make_parser falls back to the per-call path only for arguments the interpreter would choke
    on; a factory that fails on good arguments (a missing import did, once) would silently make
    every region pay for recompiling its patterns."""
    from rtcompile.runtime.content_parsers import FACTORIES

    FACTORIES[name](args)  # must not raise


def test_unread_text_is_what_no_event_has_reported_yet():
    template = {"start_anchor": "@", "fields": {"content": {"close": "<end>"}}}
    parser = rtcompile.ResponseParser(template, "")
    events = parser.feed("hello <en")
    assert "".join(e.get("text", "") for e in events) == "hello "
    assert parser.unread_text == "<en"
    parser.feed("d> after")
    assert parser.unread_text == ""
    flood = rtcompile.ResponseParser(rtcompile.template_for("qwen3"), "")
    flood.feed("answer")
    for _ in range(3):
        flood.feed("  \n")  # a run of lead characters is held (as pieces) until it ends
    assert flood.unread_text == "  \n" * 3


def test_report_closers_gives_each_close_event_what_its_closer_matched():
    """report_closers=True: a region_close event also carries the text its close delimiter
    matched, the same however the output is chunked ("" for a region closed by another region's
    open or by the end, and for one that failed to parse, what closed it); otherwise the events
    are exactly those without the option."""
    module = rtcompile.load(rtcompile.template_for("qwen3_5"))
    call = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>  \n</tool_call>"
    output = "<think>r</think>ok\n" + call + "x <|im_end|>tail"
    expected = [
        ("reasoning_content", "</think>"),
        ("content", ""),  # closed by the call's open
        ("tool_calls", "\n</function>  \n</tool_call>"),
        ("content", " <|im_end|>"),
        ("content", ""),  # the text after the message, closed by the end
    ]
    for size in (1, 2, 3, 7, len(output)):
        chunks = [output[i : i + size] for i in range(0, len(output), size)]
        reported = module.ResponseParser("", errors="keep", report_closers=True)
        plain = module.ResponseParser("", errors="keep")
        got, events = [], []
        for chunk in chunks:
            got += reported.feed(chunk)
            events += plain.feed(chunk)
        got += reported.finalize()[1]
        events += plain.finalize()[1]
        closes = [(e["field"], e.pop("closer")) for e in got if e["type"] == "region_close"]
        assert closes == expected, size
        assert got == events  # (the closers taken out)
        assert all("closer" not in e for e in events)
    # the same through the public constructor
    public = rtcompile.ResponseParser(rtcompile.template_for("qwen3_5"), "", report_closers=True)
    events = public.feed(output) + public.finalize()[1]
    assert [(e["field"], e["closer"]) for e in events if e["type"] == "region_close"] == expected
    # a call cut off by the end: nothing closed it
    cut = module.ResponseParser("", errors="keep", report_closers=True)
    events = cut.feed("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</func")
    events += cut.finalize()[1]
    assert [e["closer"] for e in events if e["type"] == "region_close"] == [""]
    # a call whose arguments fail to parse: its error event has its closer too
    broken = rtcompile.load(rtcompile.template_for("qwen3")).ResponseParser(
        "", errors="keep", report_closers=True
    )
    events = broken.feed("<tool_call>\n{not json}\n</tool_call>") + broken.finalize()[1]
    failed = [e for e in events if e["type"] == "region_close" and "error" in e]
    assert [e["closer"] for e in failed] == ["</tool_call>"]


def test_feed_text_reads_only_what_one_region_chunk_would_report():
    """The servers' fast path: plain text of the open region is read and named; a whitespace run at
    its end (it may start qwen3's `\\s*<|im_end|>`) is held and comes out with the next text; a
    chunk that may start a delimiter is left unread for feed."""
    module = rtcompile.load(rtcompile.template_for("qwen3"))
    parser = module.ResponseParser("<|im_start|>assistant\n")
    assert parser.feed_text("<think>") is None  # a delimiter: nothing read
    assert parser.unread_text == ""
    assert parser.feed("<think>") == [{"type": "region_open", "field": "reasoning_content"}]
    assert parser.feed_text("a plan") == ("reasoning_content", "a plan")
    parser.feed("</think>")
    parser.feed("Sure")  # (the implicit field opens with its first text, through feed)
    assert parser.feed_text(", it is ") == ("content", ", it is")
    assert parser.feed_text("   ") == ("content", "")
    assert parser.unread_text == "    "
    assert parser.feed_text("sunny") == ("content", "    sunny")
    assert parser.feed_text("<|im_end|>") is None
    message, _ = parser.finalize()
    assert message["reasoning_content"] == "a plan" and message["content"] == "Sure, it is    sunny"
    assert parser.feed_text("more") is None  # finalized: feed raises, feed_text reads nothing


def test_held_text_the_next_chunk_shows_starts_no_delimiter_is_read_with_it():
    """A chunk that ends in '<' leaves it held (it may start `</think>`) and its text before it read;
    when the next chunk shows it does not, feed_text reads both, and feed gives the one
    region_chunk the interpreter gives. Where the two together may still start a delimiter, or end
    in a lead run, that part stays held; where a delimiter may match, nothing is read."""
    template = rtcompile.template_for("qwen3_5")
    module = rtcompile.load(template)
    prefix = "<|im_start|>assistant\n<think>\n"
    chunks = ["so x <", " 3 and <", "/b> </", "th", "ink>\n\n<tool_call>\n<function=f>\n<", "p",
              "arameter=a>\n1\n<", "/parameter>\n", "</function>\n</tool_call>"]
    reference = interpreter.ResponseParser(template, prefix=prefix)
    parser = module.ResponseParser(prefix)
    assert [parser.feed(c) for c in chunks] == [reference.feed(c) for c in chunks]
    assert parser.finalize() == reference.finalize()

    parser = module.ResponseParser(prefix)
    assert parser.feed_text("so x <") == ("reasoning_content", "so x ")  # ("<" may start </think>)
    assert parser.unread_text == "<"
    assert parser.feed_text(" 3 and") == ("reasoning_content", "< 3 and")
    assert parser.feed_text(" </") == ("reasoning_content", " ")
    assert parser.feed_text("b> ") == ("reasoning_content", "</b> ")
    assert parser.feed_text("<") == ("reasoning_content", "")
    assert parser.feed_text("/th") == ("reasoning_content", "")  # ("</th" may still start </think>)
    assert parser.unread_text == "</th"
    assert parser.feed_text("ink>") is None  # (a delimiter: for feed)
    assert parser.unread_text == "</th"
    parser.feed_declined("ink>")
    parser.feed("\n\n<tool_call>\n<function=f>\n<")
    assert parser.unread_text == "\n<"
    assert parser.feed_text("p") == ("tool_calls", "\n<p")
    assert parser.feed_text("arameter=a>\n1") == ("tool_calls", "arameter=a>\n1")
    assert parser.feed("\n<") == []
    assert parser.feed_text("/parameter>") == ("tool_calls", "\n</parameter>")
    assert parser.feed_text("\n<") == ("tool_calls", "")  # (`\s*</function>` may start there)
    # (the close matches to the end of the text: held, as the interpreter holds a pattern's match
    # there, until more text or the end shows it cannot grow)
    assert parser.feed_text("/function>\n</tool_call>") == ("tool_calls", "")
    assert parser.unread_text == "\n</function>\n</tool_call>"
    message, _ = parser.finalize()
    assert message["reasoning_content"] == "so x < 3 and </b>"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": {"a": "1"}}


def test_a_first_character_that_starts_no_delimiter_keeps_the_fast_path():
    """`x < y` in reasoning, `<parameter=` in qwen3.5's call: the '<' starts neither `</think>` nor
    `</function>`, so feed_text reads the chunk; a '<' that may still start one stays unread, and
    the text before it is read as feed would give it."""
    module = rtcompile.load(rtcompile.template_for("qwen3_5"))
    parser = module.ResponseParser("<|im_start|>assistant\n<think>\n")
    assert parser.feed_text("so x < 3") == ("reasoning_content", "so x < 3")
    assert parser.feed_text(" and </b>") == ("reasoning_content", " and </b>")
    assert parser.feed(" </th") == [
        {"type": "region_chunk", "field": "reasoning_content", "text": " ", "dirty": False}
    ]
    parser.feed("ink>\n\n<tool_call>\n<function=f>\n")
    assert parser.current_field == "tool_calls"
    # (with the newline held after the opener: it might have started `\s*</function>`)
    assert parser.feed_text("<parameter=a>\n1") == ("tool_calls", "\n<parameter=a>\n1")
    assert parser.feed_text("\n</parameter>\n</fun") == ("tool_calls", "\n</parameter>")
    assert parser.unread_text == "\n</fun"  # (may start `\s*</function>`)
    parser.feed("ction>\n</tool_call>")
    message, _ = parser.finalize()
    assert message["reasoning_content"] == "so x < 3 and </b>"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": {"a": "1"}}


# ---- xml-inline value_parser_by -------------------------------------------------------------------

TYPED_TAGS = {
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<call name=(?P<name>\w+)>",
            "close": "</call>",
            "repeats": True,
            "content": "xml-inline",
            "content_args": {
                "tag_pattern": r'<arg name="(?P<key>\w+)"(?: type="(?P<type>\w+)")?>(?P<value>.*?)</arg>',
                "value_parser": {"name": "text"},
                "value_parser_by": {"group": "type", "parsers": {"int": {"name": "int"}, "json": {"name": "json"}}},
            },
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close": "<|end|>"},
    },
}
TYPED_CALL = (
    '<call name=f><arg name="a" type="int">7</arg><arg name="b" type="json">[1, "x"]</arg>'
    '<arg name="c">7</arg><arg name="d" type="other">7</arg></call>'
)
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {
    "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "integer"}, "d": {"type": "integer"}}}}}]


def test_value_parser_by_picks_each_values_parser_and_turns_schema_casts_off():
    """The `type` capture picks the parser (int, json); a tag without it, or with a capture that has no
    entry, falls back to value_parser. The tool schema casts none of them: the model's own output said
    how to read each value, even where the schema disagrees."""
    steps = assert_same(TYPED_TAGS, "", [TYPED_CALL[:30], TYPED_CALL[30:]], tools=TOOLS)
    (call,) = message_of(steps)["tool_calls"]
    assert call["function"]["arguments"] == {"a": 7, "b": [1, "x"], "c": "7", "d": "7"}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"group": "kind", "parsers": {}}, ValueError),  # a group the pattern lacks
        ({"group": "type"}, ValueError),  # no parsers
        ({"group": 1, "parsers": {}}, ValueError),
        (["type"], AttributeError),  # not a dict: the interpreter calls its .get
    ],
)
def test_a_malformed_value_parser_by_fails_when_the_region_closes(spec, error):
    template = copy.deepcopy(TYPED_TAGS)
    template["fields"]["tool_calls"]["content_args"]["value_parser_by"] = spec
    steps = assert_same(template, "", [TYPED_CALL])
    assert steps[-1] == ("raised", error)
    # rtcompile --check says so before any output is parsed
    from rtcompile.frontend import lint, lower

    assert any("value_parser_by" in str(w) for w in lint.lint(lower(template)))


def test_value_parser_by_none_only_turns_the_casts_off():
    template = copy.deepcopy(TYPED_TAGS)
    template["fields"]["tool_calls"]["content_args"]["value_parser_by"] = None
    steps = assert_same(template, "", [TYPED_CALL], tools=TOOLS)
    (call,) = message_of(steps)["tool_calls"]
    assert call["function"]["arguments"] == {"a": "7", "b": '[1, "x"]', "c": "7", "d": "7"}
