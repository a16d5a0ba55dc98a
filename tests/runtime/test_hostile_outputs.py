"""Hostile and broken model outputs: malformed regions, cut-off generations, slow patterns, loops.

* Strict mode (the default): a region that fails to parse raises the interpreter's exception class,
  at the same step of the stream, with a message naming the field and showing the offending text;
  the parser then refuses further `feed`/`finalize` with ParserFailedError.
* `errors="keep"`: no exception mid-stream; the failed region's raw text is recorded under
  `rtcompile.runtime.ERRORS_KEY` with its field and error, its `region_close` event says so
  (`"error"`, value None), later regions parse normally, and nothing the model wrote is lost.
* Cut-off generations (mid-delimiter, mid-JSON) behave like the interpreter in strict mode and lose
  nothing in keep mode.
* A slow delimiter or tag pattern is bounded by the parser's `timeout` (MatchTimeoutError).
* A template whose open and close both match the empty string at one position raises
  ParserLoopError instead of looping (checked in a subprocess with a deadline: the interpreter, and
  a regressed rtcompile, would spin forever), and `python -m rtcompile --check` warns about it and
  about nested unbounded quantifiers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from transformers.utils import chat_parsing as interpreter

import rtcompile
from parity import both
from rtcompile.__main__ import main as cli_main
from rtcompile.runtime import ERRORS_KEY, ParserFailedError

QWEN3 = rtcompile.template_for("qwen3")
GPT_OSS = rtcompile.template_for("gpt_oss")

# Fields whose regions fail in each of the ways a content parser or a transform can.
SCALARS = {
    "start_anchor": "<|assistant|>",
    "defaults": {"role": "assistant"},
    "fields": {
        "count": {"open": "<count>", "close": "</count>", "content": "int"},
        "ratio": {"open": "<ratio>", "close": "</ratio>", "content": "float"},
        "call": {
            "open_pattern": r"<call id=(?P<call_id>\w+)>",
            "close": "</call>",
            "content": "json",
            "transform": {"id": "{call_id}", "name": "{content.name}"},
        },
        "lookup": {"open": "<lookup>", "close": "</lookup>", "content": "json", "transform": {"value": "{missing}"}},
        "content": {"close": "<|end|>"},
    },
}


@pytest.fixture(autouse=True, scope="module")
def private_compile_cache(tmp_path_factory):
    """Compile into a private cache directory: never the user's, never another checkout's."""
    previous = os.environ.get("RTCOMPILE_CACHE_DIR")
    os.environ["RTCOMPILE_CACHE_DIR"] = str(tmp_path_factory.mktemp("rtcompile-cache"))
    yield
    if previous is None:
        del os.environ["RTCOMPILE_CACHE_DIR"]
    else:
        os.environ["RTCOMPILE_CACHE_DIR"] = previous


# ---- strict mode: the interpreter's class, a useful message, then a refusing parser ---------------

# (id, template, broken region as the model wrote it, a valid region of the same field,
#  the field, the offending text the message must show)
FAILURES = [
    (
        "malformed JSON",
        QWEN3,
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris",}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "tool_calls",
        '{"city": "Paris",}',
    ),
    (
        "malformed JSON in a regex-opened region",
        GPT_OSS,
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Paris}<|call|>",
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        "tool_calls",
        "{city: Paris}",
    ),
    ("failed int", SCALARS, "<count> twelve </count>", "<count>12</count>", "count", "twelve"),
    ("failed float", SCALARS, "<ratio>1,5</ratio>", "<ratio>1.5</ratio>", "ratio", "1,5"),
    (
        "placeholder that is never defined",
        SCALARS,
        '<lookup>{"key": "k1"}</lookup>',
        None,  # every region of this field fails
        "lookup",
        '{"key": "k1"}',
    ),
    (
        "dotted placeholder into a missing key",
        SCALARS,
        '<call id=c7>{"arguments": {}}</call>',
        '<call id=c8>{"name": "f"}</call>',
        "call",
        '{"arguments": {}}',
    ),
]
FAILURE_IDS = [case[0] for case in FAILURES]


def one_char_chunks(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("chunking", ["whole", "1-char"])
@pytest.mark.parametrize("case", FAILURES, ids=FAILURE_IDS)
def test_strict_mode_raises_the_interpreters_class_at_the_same_step(case, chunking):
    _, template, broken, _, _, _ = case
    text = "Before. " + broken + " After."
    chunks = [text] if chunking == "whole" else one_char_chunks(text)
    expected, actual = both(template, "", chunks)
    assert expected[-1][0] == "raised", "the interpreter should fail on this region"
    assert actual == expected


@pytest.mark.parametrize("case", FAILURES, ids=FAILURE_IDS)
def test_strict_error_names_the_field_and_shows_the_offending_text(case):
    _, template, broken, _, field, offending = case
    parser = rtcompile.ResponseParser(template, "")
    with pytest.raises(Exception) as info:
        parser.feed("Before. " + broken)
        parser.finalize()
    message = str(info.value)
    assert field in message, f"the message does not name the field {field!r}: {message!r}"
    assert offending in message, f"the message does not show the offending text {offending!r}: {message!r}"


@pytest.mark.parametrize("case", FAILURES, ids=FAILURE_IDS)
def test_a_failed_parser_refuses_to_go_on(case):
    _, template, broken, valid, _, _ = case
    parser = rtcompile.ResponseParser(template, "")
    with pytest.raises(Exception) as info:
        parser.feed(broken)
    for attempt in (lambda: parser.feed(valid or "more text"), lambda: parser.feed(""), parser.finalize):
        with pytest.raises(ParserFailedError) as refused:
            attempt()
        assert refused.value.cause is info.value
        assert type(info.value).__name__ in str(refused.value)


# ---- keep mode: record, go on, lose nothing --------------------------------------------------------


def region_texts(events: list[dict]) -> list[tuple[str, str]]:
    """(field, raw text) of every closed region, from the chunk events."""
    out, current = [], None
    for event in events:
        if event["type"] == "region_open":
            current = [event["field"], ""]
        elif event["type"] == "region_chunk":
            current[1] += event["text"]
        elif event["type"] == "region_close":
            out.append((current[0], current[1]))
            current = None
    return out


def test_keep_mode_records_what_the_open_delimiter_captured():
    """A failed gpt-oss call keeps its function name; regions opened by plain literals record none."""
    for template, broken, expected in [(FAILURES[1][1], FAILURES[1][2], {"name": "get_weather"}), (QWEN3, FAILURES[0][2], None)]:
        message = rtcompile.parse_response(broken, template, prefix="", errors="keep")
        (record,) = message[ERRORS_KEY]
        assert record.get("captures") == expected


def stream(parser, chunks: list[str]) -> tuple[dict, list[dict]]:
    events = list(parser.initial_events)
    for chunk in chunks:
        events += parser.feed(chunk)
    message, final = parser.finalize()
    return message, events + final


@pytest.mark.parametrize("chunking", ["whole", "1-char"])
@pytest.mark.parametrize("case", FAILURES, ids=FAILURE_IDS)
def test_keep_mode_records_the_failed_region_and_goes_on(case, chunking):
    _, template, broken, valid, field, offending = case
    text = "Before. " + broken + (valid or "") + " After."
    chunks = [text] if chunking == "whole" else one_char_chunks(text)
    message, events = stream(rtcompile.ResponseParser(template, "", errors="keep"), chunks)

    closes = [e for e in events if e["type"] == "region_close"]
    failed = [(close, raw) for close, (_, raw) in zip(closes, region_texts(events)) if "error" in close]
    assert len(failed) == 1
    ((close, raw),) = failed
    assert close["field"] == field and close["value"] is None
    ((record,),) = [message[ERRORS_KEY]]
    assert {key: value for key, value in record.items() if key != "captures"} == {
        "field": field,
        "raw": raw,
        "error": close["error"],
    }
    assert offending in raw and raw in broken
    # The recorded error carries the interpreter's explanation of the failure.
    assert str(interpreter_failure(template, broken)) in close["error"]
    # Later regions parse normally, and the text on both sides is kept: where the interpreter
    # would let the second content region overwrite the first, keep mode joins them.
    if valid is not None:
        assert message[field] == interpreter.parse_response(valid, template, prefix="")[field]
    has_implicit_content = any("open" not in f and "open_pattern" not in f for f in template["fields"].values())
    # (without an implicit field, text outside every region has nowhere to go, by the template)
    assert message.get("content") == ("Before.\n\nAfter." if has_implicit_content else None)


def interpreter_failure(template: dict, broken: str) -> BaseException:
    try:
        interpreter.parse_response(broken, template, prefix="")
    except Exception as e:  # noqa: BLE001 - the error itself is the result
        return e
    raise AssertionError("the interpreter should fail on this region")


# ---- keep mode on generated qwen3 outputs: cut anywhere, chunked anywhere -------------------------

QWEN3_DELIMITERS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>")
TEXT_ALPHABET = "ab xy\n\t.<>/|{}\":,é😀"
TOOL_NAMES = ("get_weather", "search", "f")


def no_delimiter(text: str) -> bool:
    return not any(d in text for d in QWEN3_DELIMITERS)


free_text = st.text(TEXT_ALPHABET, max_size=24).filter(no_delimiter)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-99, 99) | st.text("abc <>\"\\é", max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("abk", max_size=3), inner, max_size=3),
    max_leaves=6,
)
valid_calls = st.builds(
    lambda name, arguments, pad: pad + json.dumps({"name": name, "arguments": arguments}) + pad,
    st.sampled_from(TOOL_NAMES),
    st.dictionaries(st.text("abcd", min_size=1, max_size=4), json_values, max_size=3),
    st.sampled_from(["", "\n", " "]),
)


@st.composite
def broken_calls(draw) -> str:
    """Tool-call bodies that are not JSON: cut short, a stray character, single quotes, or empty."""
    valid = draw(valid_calls)
    how = draw(st.sampled_from(["cut", "stray", "quotes", "empty", "prose"]))
    if how == "cut":
        body = valid[: draw(st.integers(1, max(1, len(valid.strip()) - 1)))]
    elif how == "stray":
        at = draw(st.integers(0, len(valid)))
        body = valid[:at] + draw(st.sampled_from([",", "}", "{", "'", "x"])) + valid[at:]
    elif how == "quotes":
        body = valid.replace('"', "'")
    elif how == "empty":
        body = draw(st.sampled_from(["", " ", "\n"]))
    else:
        body = draw(free_text)
    return body


@st.composite
def qwen3_outputs(draw) -> list[tuple[str, str]]:
    """A qwen3 generation as (kind, text) pieces: kind is "delimiter" or a region name. Reasoning
    comes first if at all (qwen3 writes one think block); then content and tool calls in any order,
    some calls broken; then maybe the end-of-turn token."""
    pieces: list[tuple[str, str]] = []
    if draw(st.booleans()):
        pieces += [("delimiter", "<think>"), ("reasoning_content", draw(free_text)), ("delimiter", "</think>")]
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["content", "call", "broken call"]))
        if kind == "content":
            pieces.append(("content", draw(free_text)))
        else:
            body = draw(valid_calls if kind == "call" else broken_calls())
            if not no_delimiter(body):
                continue
            # `\s*<tool_call>`: whitespace before the tag is part of the delimiter, after it the body's.
            opening = draw(st.sampled_from(["<tool_call>", "\n<tool_call>", "\n\n<tool_call>"]))
            lead = draw(st.sampled_from(["", "\n"]))
            pieces += [("delimiter", opening), ("tool_calls", lead + body), ("delimiter", "</tool_call>")]
    if draw(st.booleans()):
        pieces.append(("delimiter", draw(st.sampled_from(["<|im_end|>", "\n<|im_end|>"]))))
    return pieces


@st.composite
def cut_and_chunked(draw) -> tuple[list[tuple[str, str]], int, list[str]]:
    """Pieces, a cut point (the generation stops there: anywhere, or nowhere) and the chunks."""
    pieces = draw(qwen3_outputs())
    text = "".join(t for _, t in pieces)
    cut = draw(st.one_of(st.just(len(text)), st.integers(0, len(text))))
    text = text[:cut]
    mode = draw(st.sampled_from(["whole", "1-char", "random"]))
    if mode == "whole":
        chunks = [text]
    elif mode == "1-char":
        chunks = list(text)
    else:
        points = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
        chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    return pieces, cut, chunks


def written_regions(pieces: list[tuple[str, str]], cut: int) -> list[tuple[str, str]]:
    """What the model wrote outside delimiters, region by region, for the output cut at `cut`.

    qwen3's content is the implicit region: text outside think and tool-call blocks. A delimiter cut
    short is not a delimiter: its characters belong to the region they were written in."""
    regions = [["content", ""]]
    at = 0
    for kind, text in pieces:
        kept = text[: max(0, cut - at)]
        at += len(text)
        if kind != "delimiter" or kept != text:
            regions[-1][1] += kept
        elif text == "<think>":
            regions.append(["reasoning_content", ""])
        elif text.endswith("<tool_call>"):
            regions.append(["tool_calls", ""])
        else:  # a close: back to the implicit content
            regions.append(["content", ""])
        if at >= cut:
            break
    return [(name, text) for name, text in regions]


def as_tool_call(body: str):
    """qwen3's transform of a tool-call region, or None when the body is not JSON."""
    try:
        return {"type": "function", "function": json.loads(body)}
    except ValueError:
        return None


# A generation cut inside a tool call's JSON, and one cut inside the closing tag.
CUT_PIECES = [
    ("delimiter", "<think>"), ("reasoning_content", "plan"), ("delimiter", "</think>"),
    ("content", "Calling."), ("delimiter", "\n<tool_call>"), ("tool_calls", '\n{"name": "f", "arguments": {"a": 1}}\n'),
    ("delimiter", "</tool_call>"),
]
CUT_TEXT = "".join(text for _, text in CUT_PIECES)
MID_JSON = CUT_TEXT.index('"arguments"') + 5
MID_CLOSE = CUT_TEXT.index("</tool_call>") + 6
cut_examples = [
    example(case=(CUT_PIECES, MID_JSON, [CUT_TEXT[:MID_JSON]])),
    example(case=(CUT_PIECES, MID_JSON, list(CUT_TEXT[:MID_JSON]))),
    example(case=(CUT_PIECES, MID_CLOSE, [CUT_TEXT[:MID_CLOSE]])),
    example(case=(CUT_PIECES, MID_CLOSE, list(CUT_TEXT[:MID_CLOSE]))),
]


def with_cut_examples(test):
    for add in cut_examples:
        test = add(test)
    return test


@with_cut_examples
@given(cut_and_chunked())
def test_keep_mode_never_raises_and_reports_each_failed_region(case):
    pieces, cut, chunks = case
    message, events = stream(rtcompile.ResponseParser(QWEN3, "", errors="keep"), chunks)

    closes = [e for e in events if e["type"] == "region_close"]
    failed = [(close, raw) for close, (_, raw) in zip(closes, region_texts(events)) if "error" in close]
    assert all(close["value"] is None and close["field"] == "tool_calls" for close, _ in failed)
    records = message.get(ERRORS_KEY, [])
    assert records == [{"field": close["field"], "raw": raw, "error": close["error"]} for close, raw in failed]

    # Every tool-call region is either parsed, in order, or recorded with its raw text.
    bodies = [text for name, text in written_regions(pieces, cut) if name == "tool_calls"]
    assert message.get("tool_calls", []) == [call for call in map(as_tool_call, bodies) if call is not None]
    assert [record["raw"] for record in records] == [body for body in bodies if as_tool_call(body) is None]
    # Nothing failed and no single-valued field was written twice (where the interpreter keeps only
    # the last value, and keep mode may keep more): keep mode is the interpreter.
    closed = [close["field"] for close in closes]
    if not records and all(closed.count(name) <= 1 for name in ("content", "reasoning_content")):
        assert message == interpreter.parse_response("".join(chunks), QWEN3, prefix="")


@with_cut_examples
@given(cut_and_chunked())
def test_strict_mode_on_cut_generations_is_the_interpreter(case):
    _, _, chunks = case
    expected, actual = both(QWEN3, "", chunks)
    assert actual == expected


CALL = '{"name": "f", "arguments": {}}'


@with_cut_examples
@example(
    case=(
        [("content", "a"), ("delimiter", "<tool_call>"), ("tool_calls", CALL), ("delimiter", "</tool_call>"), ("content", "b")],
        len("a<tool_call>" + CALL + "</tool_call>b"),
        ["a<tool_call>" + CALL + "</tool_call>b"],
    )
)
@given(cut_and_chunked())
def test_keep_mode_loses_nothing_the_model_wrote(case):
    """Every character outside delimiters ends up in a field's value (text fields are stripped, as
    the interpreter does) or in an error record."""
    pieces, cut, chunks = case
    message, _ = stream(rtcompile.ResponseParser(QWEN3, "", errors="keep"), chunks)
    raws = [record["raw"] for record in message.get(ERRORS_KEY, [])]
    for name, text in written_regions(pieces, cut):
        if not text.strip():
            continue
        if name == "tool_calls":
            call = as_tool_call(text)
            assert call in message.get("tool_calls", []) if call is not None else text in raws
        else:
            assert text.strip() in message.get(name, ""), (
                f"{text.strip()!r}, written in {name}, is nowhere in the message: {message!r}"
            )


# ---- slow patterns and endless loops: always run where a hang cannot take the suite down ----------

CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("generated_parser", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def attempt(chunks, options):
        parser = module.ResponseParser("", **options)
        try:
            for chunk in chunks:
                parser.feed(chunk)
            return {"outcome": "returned", "message": parser.finalize()[0]}
        except Exception as error:
            after = []
            for again in (lambda: parser.feed("more"), parser.finalize):
                try:
                    again()
                    after.append("returned")
                except Exception as refusal:
                    after.append(type(refusal).__name__)
                    cause = getattr(refusal, "cause", None)
                    after.append("cause: " + ("the error raised" if cause is error else repr(cause)))
            return {
                "outcome": type(error).__name__,
                "bases": [c.__name__ for c in type(error).__mro__],
                "text": str(error),
                "field": getattr(error, "field", None),
                "after": after,
            }

    runs = json.loads(sys.argv[2])
    print(json.dumps([attempt(chunks, options) for chunks, options in runs]))
    """
)


def run_isolated(template: dict, runs: list, tmp_path: Path, deadline: float) -> list[dict]:
    """Compile here, then parse in a child process that is killed after `deadline` seconds."""
    module = tmp_path / "generated_parser.py"
    module.write_text(rtcompile.compile_template(template), encoding="utf-8")
    try:
        completed = subprocess.run(
            [sys.executable, "-c", CHILD, str(module), json.dumps(runs)],
            capture_output=True,
            text=True,
            timeout=deadline,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the parser was still running after {deadline}s (killed): it hangs", pytrace=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.splitlines()[-1])


BACKTRACKING = r"(a|aa)+b"  # exponential in the regex module: fib(n) ways to split n a's


def test_a_backtracking_delimiter_times_out_with_a_clear_error(tmp_path):
    template = {
        "start_anchor": "@",
        "fields": {
            "x": {"open_pattern": BACKTRACKING, "close": "!"},
            "y": {"open": "<y>", "close_pattern": BACKTRACKING},
            "content": {},
        },
    }
    hostile = "a" * 48 + "c"
    runs = [
        [[hostile], {"timeout": 0.05}],  # an open pattern, in the implicit region
        [list(hostile), {"timeout": 0.05}],  # the same, streamed
        [["<y>", hostile], {"timeout": 0.05}],  # a close pattern, inside a region
        [["<y>" + hostile], {"timeout": 0.05, "errors": "keep"}],  # keep mode does not swallow it
        [["aaaaaaaaaab! <y>ab"], {"timeout": 0.05}],  # the same pattern on benign text: no timeout
    ]
    results = run_isolated(template, runs, tmp_path, deadline=60)
    for result in results[:4]:
        assert result["outcome"] == "MatchTimeoutError", result
        assert "TimeoutError" in result["bases"]
        assert "timeout=0.05" in result["text"]
        assert result["after"][0::2] == ["ParserFailedError"] * 2
    assert results[0]["field"] == "content" and results[2]["field"] == "y"
    benign = runs[4][0][0]
    assert results[4] == {"outcome": "returned", "message": interpreter.parse_response(benign, template, prefix="")}


def test_the_refusal_after_a_timeout_carries_the_timeout_the_caller_saw(tmp_path):
    template = {"start_anchor": "@", "fields": {"x": {"open_pattern": BACKTRACKING, "close": "!"}}}
    (result,) = run_isolated(template, [[["a" * 48 + "c"], {"timeout": 0.05}]], tmp_path, deadline=60)
    assert result["outcome"] == "MatchTimeoutError"
    # ParserFailedError.cause is documented as the error that stopped the parser: the one raised.
    assert result["after"] == ["ParserFailedError", "cause: the error raised"] * 2


def test_a_backtracking_tag_pattern_times_out_too(tmp_path):
    """The parser's timeout bounds tag_pattern matching (xml-inline) as well as delimiters."""
    template = {
        "start_anchor": "@",
        "fields": {
            "args": {
                "open": "<args>",
                "close": "</args>",
                "content": "xml-inline",
                "content_args": {"tag_pattern": r"<(?P<key>\w+)>(?P<value>(?:a|aa)+)b</(?P=key)>"},
            },
        },
    }
    hostile = "<args><k>" + "a" * 48 + "c</k></args>"
    (result,) = run_isolated(template, [[[hostile], {"timeout": 0.05}]], tmp_path, deadline=10)
    assert result["outcome"] == "MatchTimeoutError", result
    assert result["after"][0::2] == ["ParserFailedError"] * 2



# (open_pattern, close_pattern, an output that reaches the position where both match empty)
EMPTY_LOOPS = [
    ("(?=Q)", "(?=Q)", "abQ"),
    ("", "", "x"),
    ("a*", "b*", "xyz"),
    (r"\b", r"\b", "word"),
    ("(?!z)", "(?=x)", "x"),
    ("(?=Q)", "(?:)", "aQ"),
    ("^", "^", "ab"),
]
LOOP_IDS = [f"{o or 'empty'} / {c or 'empty'}" for o, c, _ in EMPTY_LOOPS]


def looping_template(open_pattern: str, close_pattern: str) -> dict:
    return {
        "start_anchor": "@",
        "fields": {"content": {}, "z": {"open_pattern": open_pattern, "close_pattern": close_pattern}},
    }


@pytest.mark.parametrize("open_pattern, close_pattern, output", EMPTY_LOOPS, ids=LOOP_IDS)
def test_open_and_close_matching_empty_raise_a_loop_error_instead_of_hanging(open_pattern, close_pattern, output, tmp_path):
    # The interpreter is never run on these: it loops forever.
    runs = [[[output], {}], [list(output), {}], [[output], {"errors": "keep"}]]
    results = run_isolated(looping_template(open_pattern, close_pattern), runs, tmp_path, deadline=30)
    for result in results:
        assert result["outcome"] == "ParserLoopError", result
        assert result["field"] == "z"
        assert result["after"][0::2] == ["ParserFailedError"] * 2


def check(template: dict, tmp_path: Path, capsys) -> str:
    """`python -m rtcompile TEMPLATE --check` (in process): its warnings."""
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template), encoding="utf-8")
    assert cli_main([str(path), "--check"]) == 0
    return capsys.readouterr().err


@pytest.mark.parametrize("open_pattern, close_pattern, output", EMPTY_LOOPS, ids=LOOP_IDS)
def test_check_warns_about_open_and_close_matching_empty(open_pattern, close_pattern, output, tmp_path, capsys):
    warnings = check(looping_template(open_pattern, close_pattern), tmp_path, capsys)
    assert "fields.z" in warnings and "empty string" in warnings, warnings


NESTED_QUANTIFIERS = [
    r"(a+)+b",
    r"<(?:\w+\s?)*>",
    r"(?:a*){2,}",
    r"((a+))+b",
    r"(?:(?:a)+)+b",
    r"(?:x(?:a+))+",
    r"<(?:(?:\s*\w)+)*>",
]


@pytest.mark.parametrize("pattern", NESTED_QUANTIFIERS)
def test_check_warns_about_nested_unbounded_quantifiers(pattern, tmp_path, capsys):
    template = {"start_anchor": "@", "fields": {"x": {"open": "<x>", "close_pattern": pattern}}}
    warnings = check(template, tmp_path, capsys)
    assert "fields.x.close_pattern" in warnings and "nested" in warnings, warnings


@pytest.mark.parametrize("pattern", [r"(ab)+", r"a+b+", r"(a+)?", r"\(a+\)+", r"[(a+)]+", r"<tool_call>"])
def test_check_is_quiet_about_patterns_without_nested_quantifiers(pattern, tmp_path, capsys):
    template = {"start_anchor": "@", "fields": {"x": {"open": "<x>", "close_pattern": pattern}}}
    assert "nested" not in check(template, tmp_path, capsys)


def test_the_real_command_line_warns(tmp_path):
    template = looping_template(r"\b", r"\b")
    template["fields"]["w"] = {"open": "<w>", "close_pattern": r"(a+)+</w>"}
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(template), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "rtcompile", str(path), "--check"], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert "fields.z" in completed.stderr and "empty string" in completed.stderr
    assert "fields.w.close_pattern" in completed.stderr and "nested" in completed.stderr
    strict = subprocess.run(
        [sys.executable, "-m", "rtcompile", str(path), "--check", "--strict"], capture_output=True, text=True, timeout=120
    )
    assert strict.returncode != 0
