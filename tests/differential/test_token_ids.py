"""Differential property tests of token-id parsing against transformers 5.25.0's interpreter.

Each case draws a template, a tokenizer built locally whose added tokens (special and not, control
tokens or not) include the template's delimiters, and generations as token ids that write those
tokens both as their ids and spelled out with ordinary tokens (tests/token_strategies.py). Both
sides parse the same ids: transformers' `ResponseParser(template, prefix, tools=, tokenizer=tok)`
(instrumented against its zero-width loop, as in test_differential.py) and rtcompile's, compared
step by step: initial events, every feed's events (chunk boundaries included), finalize's message
and events, exception classes, and `parse_response(ids, ..., tokenizer=tok)` one-shot.

rtcompile's own options are checked in token mode too: errors="keep" never lets a marker reach
any event or record, and eager=True gives the interpreter's events never later.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from parity import InterpreterLoop, LoopGuardedInterpreter
from test_differential import (
    Implementation,
    _covers,
    _fail,
    _stream_after_each_step,
    compare,
    guarded_run,
    run_one_shot,
    run_streaming,
)
from token_strategies import TokenCase, token_cases
from transformers.utils.chat_parsing import response_parser as interpreter_module

import rtcompile
from rtcompile.runtime.token_ids import MARKER, TokenIdDecoder, TokenIdError, profile_for
from rtcompile.runtime.token_parser import token_parser_class

ENTRY_POINTS = ("api", "module", "feed_text")


@pytest.fixture(autouse=True, scope="module")
def private_compile_cache(tmp_path_factory):
    import os

    previous = os.environ.get("RTCOMPILE_CACHE_DIR")
    os.environ["RTCOMPILE_CACHE_DIR"] = str(tmp_path_factory.mktemp("rtcompile-cache"))
    yield
    if previous is None:
        del os.environ["RTCOMPILE_CACHE_DIR"]
    else:
        os.environ["RTCOMPILE_CACHE_DIR"] = previous


def interpreter_for(tokenizer) -> Implementation:
    def one_shot(ids, template, prefix, tools):
        probe = LoopGuardedInterpreter(template, prefix, tools=tools, tokenizer=tokenizer)
        probe.feed(ids)
        probe.finalize()
        return interpreter_module.parse_response(ids, template, prefix=prefix, tools=tools, tokenizer=tokenizer)

    return Implementation(
        "interpreter",
        lambda template, prefix, tools: LoopGuardedInterpreter(template, prefix, tools=tools, tokenizer=tokenizer),
        one_shot,
    )


def candidate_for(tokenizer, entry_point: str, **options) -> Implementation:
    if entry_point == "api":
        return Implementation(
            f"rtcompile.ResponseParser(tokenizer=){options or ''}",
            lambda template, prefix, tools: rtcompile.ResponseParser(
                template, prefix, tools=tools, tokenizer=tokenizer, **options
            ),
            lambda ids, template, prefix, tools: rtcompile.parse_response(
                ids, template, prefix=prefix, tools=tools, tokenizer=tokenizer
            ),
        )
    if entry_point == "feed_text":
        return Implementation(
            f"rtcompile.load(template), feed_text first{options or ''}",
            lambda template, prefix, tools: token_feed_text_first(rtcompile.load(template))(
                prefix, tools=tools, tokenizer=tokenizer, **options
            ),
            lambda ids, template, prefix, tools: rtcompile.load(template).parse_response(
                ids, prefix=prefix, tools=tools, tokenizer=tokenizer
            ),
        )
    return Implementation(
        f"rtcompile.load(template).ResponseParser(tokenizer=){options or ''}",
        lambda template, prefix, tools: rtcompile.load(template).ResponseParser(
            prefix, tools=tools, tokenizer=tokenizer, **options
        ),
        lambda ids, template, prefix, tools: rtcompile.load(template).parse_response(
            ids, prefix=prefix, tools=tools, tokenizer=tokenizer
        ),
    )


def token_feed_text_first(module) -> type:
    """The module's token-id parser class, with feed() trying feed_text() first, as the servers'
    hot paths do: a chunk it takes stands for the one region_chunk event feed would have given
    (none if it read no text); a chunk it declines goes to feed_declined."""

    class FeedTextFirst(token_parser_class(module.ResponseParser)):
        def feed(self, ids):
            taken = self.feed_text(ids)
            if taken is None:
                return self.feed_declined(ids)
            field, read = taken
            if not read:
                return []
            event = self.chunk_event(read)
            assert event["field"] == field, (event, field)
            return [event]

    return FeedTextFirst


def record_statistics(case: TokenCase, tokenizer) -> None:
    """What the case exercises (pytest --hypothesis-show-statistics): the decoding path, whether a
    spelled-out control token was defused, and whether control tokens came as ids."""
    profile = profile_for(tokenizer)
    event(f"decoder: {'byte level table' if profile.byte_level else 'DecodeStream'}")
    event(f"control tokens: {min(len(profile.control_tokens), 3)}{'+' if len(profile.control_tokens) > 3 else ''}")
    for run in case.runs:
        ids = [i for chunk in run.id_chunks for i in chunk]
        decoder = TokenIdDecoder(profile)
        try:
            decoder.feed(ids)
            decoder.flush()
        except TypeError:
            event("run: bad id")
            continue
        event(f"run: {'defused a spelling' if decoder.defused else 'nothing defused'}")
        event(f"run: {'control ids' if any(i in profile.control_ids for i in ids) else 'no control id'}")


def check_token_streaming(case: TokenCase, entry_point: str, *, statistics: bool = True) -> None:
    tokenizer = case.tokenizer()
    if statistics:
        record_statistics(case, tokenizer)
    interpreter = interpreter_for(tokenizer)
    implementation = candidate_for(tokenizer, entry_point)
    for run in case.runs:
        expected = guarded_run("interpreter", lambda: run_streaming(interpreter, case.template, run))
        actual = guarded_run(implementation.name, lambda: run_streaming(implementation, case.template, run))
        compare(expected, actual, case.template, run, f"{implementation.name}; {case.recipe!r}")


def check_token_one_shot(case: TokenCase, entry_point: str) -> None:
    tokenizer = case.tokenizer()
    interpreter = interpreter_for(tokenizer)
    implementation = candidate_for(tokenizer, entry_point)
    for run in case.runs:
        expected = guarded_run("interpreter", lambda: run_one_shot(interpreter, case.template, run))
        actual = guarded_run(implementation.name, lambda: run_one_shot(implementation, case.template, run))
        compare(expected, actual, case.template, run, f"{implementation.name}; {case.recipe!r}")


@given(case=token_cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_token_streaming_matches_interpreter(case: TokenCase, entry_point: str) -> None:
    check_token_streaming(case, entry_point)


@given(case=token_cases(), entry_point=st.sampled_from(("api", "module")))
def test_token_one_shot_matches_interpreter(case: TokenCase, entry_point: str) -> None:
    check_token_one_shot(case, entry_point)


@given(case=token_cases(known_only=True), entry_point=st.sampled_from(ENTRY_POINTS))
def test_token_streaming_of_known_formats_matches_interpreter(case: TokenCase, entry_point: str) -> None:
    check_token_streaming(case, entry_point)


# ---- rtcompile's own options in token mode ------------------------------------------------------


def _markers_anywhere(value) -> bool:
    if isinstance(value, str):
        return MARKER in value
    if isinstance(value, dict):
        return any(_markers_anywhere(k) or _markers_anywhere(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_markers_anywhere(item) for item in value)
    return False


def _chunks(steps) -> list:
    """Every region_chunk event of a run, in order (initial events, feeds, finalize)."""
    found = []
    for step in steps:
        if step.error is not None:
            break
        events = step.result[1] if step.name.startswith("finalize") else step.result
        found += [e for e in events if isinstance(e, dict) and e.get("type") == "region_chunk"]
    return found


@given(case=token_cases())
def test_keep_mode_never_lets_a_marker_out(case: TokenCase) -> None:
    """errors="keep": nothing reported (events, values, error records with their raw text and
    captures, closers) carries a marker, and the text streamed is the interpreter's."""
    tokenizer = case.tokenizer()
    interpreter = interpreter_for(tokenizer)
    keep = Implementation(
        "keep",
        lambda template, prefix, tools: rtcompile.ResponseParser(
            template, prefix, tools=tools, tokenizer=tokenizer, errors="keep", report_closers=True
        ),
        lambda ids, template, prefix, tools: rtcompile.parse_response(
            ids, template, prefix=prefix, tools=tools, tokenizer=tokenizer, errors="keep"
        ),
    )
    for run in case.runs:
        steps = guarded_run("keep", lambda: run_streaming(keep, case.template, run))
        one_shot = guarded_run("keep", lambda: run_one_shot(keep, case.template, run))
        for step in steps + one_shot:
            if step.error is None:
                assert not _markers_anywhere(step.result), (step.name, step.result, case)
        expected = guarded_run("interpreter", lambda: run_streaming(interpreter, case.template, run))
        if all(step.error is None for step in expected + steps):
            assert _chunks(steps) == _chunks(expected), case


@given(case=token_cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_eager_token_parsers_give_the_interpreters_events_never_later(case: TokenCase, entry_point: str) -> None:
    tokenizer = case.tokenizer()
    interpreter = interpreter_for(tokenizer)
    implementation = candidate_for(tokenizer, entry_point, eager=True)
    for run in case.runs:
        expected = guarded_run("interpreter", lambda: run_streaming(interpreter, case.template, run))
        if any(isinstance(step.error, InterpreterLoop) for step in expected):
            continue
        actual = guarded_run(implementation.name, lambda: run_streaming(implementation, case.template, run))
        report = [f"template: {case.template!r}", f"run: {run!r}", f"recipe: {case.recipe!r}"]
        want_error = next((s for s in expected if s.error is not None), None)
        got_error = next((s for s in actual if s.error is not None), None)
        if (want_error is None) != (got_error is None) or (
            want_error is not None and not isinstance(got_error.error, type(want_error.error))
        ):
            report.append("the outcome (an exception and its class) differs")
            _fail(report, expected, actual)
        wanted, got = _stream_after_each_step(expected), _stream_after_each_step(actual)
        for index, (interpreter_seen, eager_seen) in enumerate(zip(wanted, got)):
            if not _covers(eager_seen, interpreter_seen):
                report.append(f"after step {expected[index].name}, the eager parser was behind or different")
                _fail(report, expected, actual)
        if want_error is None and wanted[-1] != got[-1]:
            report.append("the events differ once merged")
            _fail(report, expected, actual)


def _decode_stream_failed(error: BaseException | None) -> bool:
    return type(error) is Exception and str(error).startswith("Invalid prefix encountered while decoding stream")


@given(case=token_cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_recovering_token_parsers_match_the_interpreter_until_decode_stream_fails(
    case: TokenCase, entry_point: str
) -> None:
    """recover_decode_errors=True changes nothing where the interpreter does not fail; where
    tokenizers' DecodeStream fails on byte-fallback ids (the interpreter raises), the recovering
    parser gives the interpreter's steps before it and goes on to a message."""
    tokenizer = case.tokenizer()
    interpreter = interpreter_for(tokenizer)
    implementation = candidate_for(tokenizer, entry_point, recover_decode_errors=True)
    for run in case.runs:
        expected = guarded_run("interpreter", lambda: run_streaming(interpreter, case.template, run))
        actual = guarded_run(implementation.name, lambda: run_streaming(implementation, case.template, run))
        failed = next((index for index, step in enumerate(expected) if _decode_stream_failed(step.error)), None)
        if failed is None:
            compare(expected, actual, case.template, run, f"{implementation.name}; {case.recipe!r}")
            continue
        event("DecodeStream failed: recovered")
        compare(expected[:failed], actual[:failed], case.template, run, f"{implementation.name}; {case.recipe!r}")
        assert not any(_decode_stream_failed(step.error) for step in actual), (case, actual)


# ---- hand-picked cases: the easy-to-get-wrong corners of decoding -------------------------------

from strategies import one_in  # noqa: E402
from token_strategies import Recipe, TokenRun  # noqa: E402
from tokenizer_pool import AddedSpec, ordinary_ids  # noqa: E402

TAGS = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json", "repeats": True},
        "content": {"close": "<|im_end|>"},
    },
}
TAG_TOKENS = Recipe(
    "bpe",
    (
        AddedSpec("<|im_start|>", "special"),
        AddedSpec("<|im_end|>", "special"),
        AddedSpec("<think>", "template"),
        AddedSpec("</think>", "template"),
        AddedSpec("<tool_call>", "template"),
        AddedSpec("</tool_call>", "template"),
    ),
)


def _ids(text: str) -> list[int]:
    from token_strategies import tokenizer_for

    return tokenizer_for(TAG_TOKENS).encode(text, add_special_tokens=False)


def _spelled(text: str, byte_wise: bool = False) -> list[int]:
    return ordinary_ids("bpe", text, [1, 3], byte_wise=byte_wise)


def _both_ways(ids: list[int]) -> list[TokenRun]:
    """The same ids whole, one at a time, and with an empty feed, streamed and as numpy."""
    return [
        TokenRun(prefix=[], id_chunks=[ids]),
        TokenRun(prefix=_ids("<|im_start|>assistant\n"), id_chunks=[[i] for i in ids] + [[]]),
        TokenRun(prefix="<|im_start|>assistant\n<think>", id_chunks=[ids[:2], [], ids[2:]], as_numpy=True),
    ]


@pytest.mark.parametrize(
    "ids",
    [
        # a spelled-out closer inside reasoning stays text; the id closes
        _ids("<think>a") + _spelled("</think>") + _ids("b</think>c<|im_end|>"),
        # a spelling whose first characters end one feed and whose rest starts the next
        _spelled("x</thi") + _spelled("nk>y"),
        # U+FDD2 written by the model is stripped (the interpreter strips every marker)
        _ids("<think>") + _spelled("a\ufdd2b", byte_wise=True) + _ids("</think>\ufdd2<|im_end|>"),
        # an incomplete multi-byte character before a control token, and at the very end
        _spelled("é中", byte_wise=True)[:-1] + _ids("<|im_end|>") + _spelled("😀", byte_wise=True)[:2],
        # the output ends with what could still become a control token: flushed at finalize
        _ids("<tool_call>") + _spelled('{"name": "f", "arguments": {"x": "</tool_call>"}}') + _ids("</tool_call>") + _spelled("<|im_e"),
        # U+FFFD generated as a character (DecodeStream holds text that ends with it)
        _spelled("a\ufffd", byte_wise=True) + _ids("<think>") + _spelled("\ufffd", byte_wise=True),
    ],
    ids=["spelled-closer", "spelling-across-feeds", "model-writes-marker", "split-characters", "ends-in-a-prefix", "replacement-character"],
)
def test_decoding_corners_match_the_interpreter(ids):
    case = TokenCase(TAGS, TAG_TOKENS, _both_ways(ids))
    for entry_point in ENTRY_POINTS:
        check_token_streaming(case, entry_point, statistics=False)
    for entry_point in ("api", "module"):
        check_token_one_shot(case, entry_point)


def test_defused_reports_a_spelled_out_control_token():
    from token_strategies import tokenizer_for

    tokenizer = tokenizer_for(TAG_TOKENS)
    parser = rtcompile.ResponseParser(TAGS, [], tokenizer=tokenizer)
    parser.feed(_ids("<think>plan</think>ok"))
    assert not parser.defused
    parser.feed(_spelled("<|im_end|>"))
    assert parser.defused and parser.current_field == "content"
    message, _ = parser.finalize()
    assert message == {"reasoning_content": "plan", "content": "ok<|im_end|>"}


def test_a_checked_in_parser_parses_token_ids_like_the_interpreter():
    from token_strategies import tokenizer_for

    from rtcompile.generated import qwen3

    tokenizer = tokenizer_for(TAG_TOKENS)
    prompt = _ids("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    output = _ids("<think>\nplan\n</think>\n\nSay ") + _spelled("</think>") + _ids("!<|im_end|>")
    expected = interpreter_module.parse_response(output, qwen3.TEMPLATE, prefix=prompt, tokenizer=tokenizer)
    assert qwen3.parse_response(output, prefix=prompt, tokenizer=tokenizer) == expected
    assert expected["content"] == "Say </think>!"
    parser = qwen3.ResponseParser(prompt, tokenizer=tokenizer)
    assert isinstance(parser, qwen3.ResponseParser)
    streamed = [parser.feed([token_id]) for token_id in output]
    reference = interpreter_module.ResponseParser(qwen3.TEMPLATE, prompt, tokenizer=tokenizer)
    assert streamed == [reference.feed([token_id]) for token_id in output]
    assert parser.finalize() == reference.finalize()


def test_timeout_bounds_a_slow_pattern_in_token_mode():
    from token_strategies import tokenizer_for

    from rtcompile.runtime import MatchTimeoutError

    template = {"start_anchor": "@", "fields": {"x": {"open_pattern": r"(a|aa)+b", "close": "!"}}}
    parser = rtcompile.ResponseParser(template, [], timeout=0.05, tokenizer=tokenizer_for(TAG_TOKENS))
    with pytest.raises(MatchTimeoutError, match="timeout=0.05"):
        parser.feed(_spelled("a" * 40 + "c"))


# ---- a prompt's ids decoded from its last start anchor on ----------------------------------------

ANCHOR_PIECES = (
    "<|im_start|>assistant\n",
    "<|im_start|>user\nhé 😀 中\n<|im_end|>\n",
    "<|im_start|>",
    "<|im_start|>assistan",
    "assistant\n",
    "<think>\nx</think>",
    "text <|im_end",
    "<|im_end|>\n",
)


@st.composite
def anchored_prompts(draw, base: str) -> list:
    """A prompt of chat-like pieces, their control tokens written as ids or spelled out, some
    characters byte by byte (and one cut short), and now and then an id the decoder refuses."""
    from token_strategies import tokenizer_for

    tokenizer = tokenizer_for(Recipe(base, TAG_TOKENS.added))
    ids: list = []
    for piece in draw(st.lists(st.sampled_from(ANCHOR_PIECES), max_size=14)):
        how = draw(st.sampled_from(["ids", "ids", "spelled", "bytes"]))
        if how == "ids":
            ids += tokenizer.encode(piece, add_special_tokens=False)
        else:
            ids += ordinary_ids(base, piece, [1, 3], byte_wise=how == "bytes")
        if draw(one_in(8)):  # a character cut short: its first bytes only
            ids += ordinary_ids(base, "中", [], byte_wise=True)[:2]
    if ids and draw(one_in(10)):
        ids.insert(draw(st.integers(0, len(ids))), draw(st.sampled_from([-1, 2**32, 1.5])))
    return ids


@given(data=st.data(), base=st.sampled_from(["bytes", "bpe", "bpe_words"]), entry_point=st.sampled_from(("api", "module")))
def test_a_prompt_cut_at_its_last_anchor_matches_the_interpreter(data, base, entry_point):
    """parse_response decodes a prompt of ids from the last control token its start anchor can
    begin at (the anchor's last occurrence, where the parser cuts the prompt anyway): the same
    message or exception as the interpreter, which decodes the whole prompt, however the anchors
    and look-alikes are written (as ids, spelled out, byte by byte, cut short, with bad ids)."""
    from token_strategies import tokenizer_for

    prompt = data.draw(anchored_prompts(base))
    encode = tokenizer_for(Recipe(base, TAG_TOKENS.added)).encode
    output = data.draw(st.sampled_from([
        encode("<think>\nplan\n</think>\n\nok<|im_end|>", add_special_tokens=False),
        encode("ok", add_special_tokens=False) + ordinary_ids(base, TAGS["start_anchor"], [2], byte_wise=False),
        encode('<tool_call>{"name": "f", "arguments": {}}</tool_call>', add_special_tokens=False),
    ]))
    recipe = Recipe(base, TAG_TOKENS.added)
    case = TokenCase(TAGS, recipe, [TokenRun(prefix=prompt, id_chunks=[output])])
    check_token_one_shot(case, entry_point)


def test_a_prompt_is_decoded_from_its_last_anchor_only_where_that_is_safe():
    from token_strategies import tokenizer_for

    from rtcompile.runtime.token_parser import _decode_from_anchor

    tokenizer = tokenizer_for(TAG_TOKENS)
    anchor = TAGS["start_anchor"]
    turn = "<|im_start|>user\nhé\n<|im_end|>\n" + anchor + "<think>\nx</think>\n\nyes<|im_end|>\n"
    prompt = _ids(turn * 3 + "<|im_start|>user\nagain<|im_end|>\n") + _ids(anchor)
    text = _decode_from_anchor(TokenIdDecoder(profile_for(tokenizer)), prompt, anchor)
    assert text == anchor  # (the last anchor is the prompt's end)
    # a spelled-out anchor after the last real one is text: the real one still cuts
    spelled_after = _ids(turn + anchor + "a ") + _spelled(anchor) + _ids("b")
    text = _decode_from_anchor(TokenIdDecoder(profile_for(tokenizer)), spelled_after, anchor)
    assert text is not None and text.startswith(anchor + "a <") and MARKER in text
    # a control token that overlaps the anchor's first token: never taken
    overlapping = Recipe("bpe", TAG_TOKENS.added + (AddedSpec("|>x", "special"),))
    profile = profile_for(tokenizer_for(overlapping))
    assert profile.anchor_head(anchor) is None
    assert profile_for(tokenizer).anchor_head(anchor) == tokenizer.convert_tokens_to_ids("<|im_start|>")


# A byte-fallback tokenizer and ids on which tokenizers' DecodeStream fails when they come one at a
# time: `;` (<0x3B>) is given out, then <0x80> makes the byte group invalid, and ByteFallback
# decodes every byte of an invalid group to U+FFFD, `;` included, so the next id's text no longer
# starts with what was given out.
BYTE_FALLBACK = Recipe(
    "sentencepiece",
    (
        AddedSpec("<|im_start|>", "special"),
        AddedSpec("<|im_end|>", "special"),
        AddedSpec("<think>", "special"),
        AddedSpec("</think>", "special"),
    ),
)
THINK = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "content": {"close": "<|im_end|>"},
    },
}


def _byte_fallback_ids() -> tuple[object, list[int]]:
    from token_strategies import tokenizer_for

    tokenizer = tokenizer_for(BYTE_FALLBACK)
    byte = tokenizer.convert_tokens_to_ids
    ids = (
        tokenizer.encode("<think>plan a", add_special_tokens=False)
        + [byte("<0x3B>"), byte("<0x80>")]
        + tokenizer.encode("b</think>ok<|im_end|>", add_special_tokens=False)
    )
    return tokenizer, ids


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_a_decode_stream_failure_is_the_interpreters_unless_recovered(entry_point):
    tokenizer, ids = _byte_fallback_ids()
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    interpreter = interpreter_module.ResponseParser(THINK, prompt, tokenizer=tokenizer)
    with pytest.raises(Exception) as expected:
        for position, token_id in enumerate(ids):
            interpreter.feed([token_id])
    assert _decode_stream_failed(expected.value)
    failed_at = position

    parser = candidate_for(tokenizer, entry_point).construct(THINK, prompt, None)
    for token_id in ids[:failed_at]:
        parser.feed([token_id])
    with pytest.raises(Exception) as actual:
        parser.feed([ids[failed_at]])
    assert type(actual.value) is Exception and str(actual.value) == str(expected.value)

    # One feed of them all decodes in one step: no failure, in both
    whole = interpreter_module.parse_response(ids, THINK, prefix=prompt, tokenizer=tokenizer)
    assert rtcompile.parse_response(ids, THINK, prefix=prompt, tokenizer=tokenizer) == whole
    assert whole["reasoning_content"] == "plan a\ufffd\ufffd b"  # (ByteFallback: the whole group invalid)

    # Recovering: the `;` given out stands, the invalid byte is U+FFFD, the rest is decoded (the
    # space Metaspace writes as `▁b` kept)
    recovering = candidate_for(tokenizer, entry_point, recover_decode_errors=True).construct(THINK, prompt, None)
    streamed = [recovering.feed([token_id]) for token_id in ids]
    message, _ = recovering.finalize()
    assert message == {"reasoning_content": "plan a;\ufffd b", "content": "ok"}
    chunks = [e["text"] for events in streamed for e in events if e["type"] == "region_chunk"]
    assert "".join(chunks) == "plan a;\ufffd bok"


def test_the_token_options_need_a_tokenizer():
    module = rtcompile.load(THINK)
    for option in ("refuse_unknown_ids", "recover_decode_errors"):
        message = f"{option}=True applies to token ids: give tokenizer= too"
        for call in (
            lambda: rtcompile.parse_response("ok<|im_end|>", THINK, prefix="", **{option: True}),
            lambda: rtcompile.ResponseParser(THINK, "", **{option: True}),
            lambda: module.parse_response("ok<|im_end|>", prefix="", **{option: True}),
            lambda: module.ResponseParser("", **{option: True}),
        ):
            with pytest.raises(TypeError, match=re.escape(message)):
                call()


@pytest.mark.parametrize("option", ["refuse_unknown_ids", "recover_decode_errors"])
def test_the_token_options_reach_the_decoder_from_every_entry_point(option):
    tokenizer, ids = _byte_fallback_ids()
    module = rtcompile.load(THINK)
    for parser in (
        rtcompile.ResponseParser(THINK, [], tokenizer=tokenizer, **{option: True}),
        module.ResponseParser([], tokenizer=tokenizer, **{option: True}),
    ):
        assert getattr(parser.token_decoder, option) is True
    unknown = len(tokenizer) + 3
    for parse in (rtcompile.parse_response, lambda i, p, **o: module.parse_response(i, **o)):
        arguments = dict(prefix=[], tokenizer=tokenizer, **{option: True})
        if option == "refuse_unknown_ids":
            with pytest.raises(TokenIdError, match=f"token id {unknown} at position 0"):
                parse([unknown, *ids], THINK, **arguments)
        else:
            assert parse(ids, THINK, **arguments) == rtcompile.parse_response(ids, THINK, prefix=[], tokenizer=tokenizer)
