"""Differential property tests: rtcompile must behave exactly like transformers' interpreter.

Every generated case is a template and one to three runs (prefix, chunked generation, tools); for
each run both implementations go side by side and must agree, step by step, on:

* construction: `initial_events`, or the exception class;
* every `feed`: the events it returns (chunk boundaries and `dirty` flags included), or the class;
* `finalize`: the message and the final events, or the class;
* a `feed`/`finalize` after `finalize` (RuntimeError), when the case asks for one;
* one-shot `parse_response` on the whole generation (a separate property: the interpreter is not
  chunk-invariant, so streamed and one-shot results are not compared with each other).

Each finished message is then vandalized (every list and dict mutated): the next run of the same
template must not see it, which is what copying `defaults` per parser guarantees.

rtcompile may raise a subclass of the interpreter's exception class (e.g. its `TemplateError` is a
`ValueError`). Values are compared strictly: types (1 vs 1.0 vs True), float spelling (nan, -0.0)
and dict key order all count, because a drop-in replacement is observed through all of them.

The interpreter loops forever when an open and a close delimiter both match the empty string at one
position. The interpreter side runs instrumented (`LoopGuardedInterpreter`) so such a loop is
detected exactly instead of by a clock; for those steps rtcompile only has to raise some error.
Both sides also run under a wall-clock limit, so a hang fails the test instead of the run.

Set RTCOMPILE_DIFF_SELF=1 to run the interpreter against itself: the failures then can only be
harness bugs, and `--hypothesis-show-statistics` shows what the strategies generate.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from transformers.utils.chat_parsing import response_parser as interpreter_module

from parity import InterpreterLoop, LoopGuardedInterpreter
from strategies import (
    Case,
    Run,
    cases,
    get_weather,
    known_format_cases,
    template_plans,
    tool_call_cases,
)

SELF_MODE = os.environ.get("RTCOMPILE_DIFF_SELF") == "1"
# Generous: a healthy run of one case takes milliseconds; compiling a template well under a second.
STEP_TIME_LIMIT_SECONDS = float(os.environ.get("RTCOMPILE_DIFF_TIMEOUT", "10"))
# "feed_text": a loaded module whose chunks go to feed_text first (then feed_declined), as the
# servers' hot paths send them; a chunk it takes stands for the one event that feed would have
# returned.
ENTRY_POINTS = ("api", "module", "feed_text")


@pytest.fixture(autouse=True, scope="module")
def private_compile_cache(tmp_path_factory):
    """Each example compiles a new template: keep those thousands of modules out of the user's
    cache directory, and never run a module another checkout's compiler left there."""
    previous = os.environ.get("RTCOMPILE_CACHE_DIR")
    os.environ["RTCOMPILE_CACHE_DIR"] = str(tmp_path_factory.mktemp("rtcompile-cache"))
    yield
    if previous is None:
        del os.environ["RTCOMPILE_CACHE_DIR"]
    else:
        os.environ["RTCOMPILE_CACHE_DIR"] = previous


def interpreter_one_shot(
    text: str, template: Any, prefix: Optional[str], tools: Optional[list]
) -> dict:
    """`parse_response`, after checking with the guarded class that it would terminate."""
    probe = LoopGuardedInterpreter(template, prefix, tools=tools)
    probe.feed(text)
    probe.finalize()
    # Deterministic: the real function takes the same path, so it returns (or raises) too.
    return interpreter_module.parse_response(text, template, prefix=prefix, tools=tools)


# --------------------------------------------------------------------------------------------------
# The candidate
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Implementation:
    name: str
    construct: Callable[[Any, Optional[str], Optional[list]], Any]
    one_shot: Callable[[str, Any, Optional[str], Optional[list]], dict]


INTERPRETER = Implementation(
    "interpreter",
    lambda template, prefix, tools: LoopGuardedInterpreter(template, prefix, tools=tools),
    interpreter_one_shot,
)


def candidate(entry_point: str, **options: Any) -> Implementation:
    """rtcompile through its public API ("api") or through a loaded generated module ("module").
    Resolved before anything runs, so a missing API fails the test as such, not as a divergence.
    `options`: parser options (eager=True) given to every streaming parser it builds."""
    if SELF_MODE:
        return INTERPRETER
    import rtcompile

    shown = "".join(f", {key}={value!r}" for key, value in options.items())
    if entry_point == "api":
        parser_class, parse = rtcompile.ResponseParser, rtcompile.parse_response
        return Implementation(
            f"rtcompile.ResponseParser{shown}",
            lambda template, prefix, tools: parser_class(template, prefix, tools=tools, **options),
            lambda text, template, prefix, tools: parse(text, template, prefix=prefix, tools=tools),
        )
    load = rtcompile.load
    if entry_point == "feed_text":
        return Implementation(
            f"rtcompile.load(template), feed_text first{shown}",
            lambda template, prefix, tools: feed_text_first(load(template))(
                prefix, tools=tools, **options
            ),
            lambda text, template, prefix, tools: load(template).parse_response(
                text, prefix=prefix, tools=tools
            ),
        )
    return Implementation(
        f"rtcompile.load(template){shown}",
        lambda template, prefix, tools: load(template).ResponseParser(prefix, tools=tools, **options),
        lambda text, template, prefix, tools: load(template).parse_response(
            text, prefix=prefix, tools=tools
        ),
    )


def feed_text_first(module: Any) -> type:
    """The module's parser class, with feed() trying feed_text() first: where feed_text takes a
    chunk, the one region_chunk it stands for (none if it read no text) is the chunk's events;
    a chunk it declines goes to feed_declined, as the servers send it."""

    class FeedTextFirst(module.ResponseParser):
        def feed(self, text):
            taken = self.feed_text(text)
            if taken is None:
                return self.feed_declined(text)
            field, read = taken
            if not read:
                return []
            event = self.chunk_event(read)
            assert event["field"] == field, (event, field)
            return [event]

    return FeedTextFirst


# --------------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------------


class StepTimeout(BaseException):
    """Raised by the wall-clock guard. A BaseException so the step runner does not record it as an
    ordinary outcome."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def on_alarm(signum, frame):
        raise StepTimeout(f"no result after {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def canonical(value: Any) -> Any:
    """A comparable form that keeps what `==` would blur: exact types, float spelling, key order."""
    kind = type(value)
    if kind is dict:
        return ("dict", tuple((canonical(k), canonical(v)) for k, v in value.items()))
    if kind is list:
        return ("list", tuple(canonical(v) for v in value))
    if kind is tuple:
        return ("tuple", tuple(canonical(v) for v in value))
    if kind is float:
        return ("float", repr(value))
    if value is None or kind in (bool, int, str):
        return (kind.__name__, value)
    return ("object", f"{kind.__module__}.{kind.__qualname__}", repr(value))


@dataclass
class Step:
    name: str
    result: Any = None  # the raw events/message, for the report
    error: Optional[BaseException] = None
    # Taken when the step returns, so later mutation of returned objects cannot blur the comparison.
    snapshot: Any = None

    def describe(self) -> str:
        if self.error is not None:
            kind = type(self.error)
            return f"{self.name}: raised {kind.__module__}.{kind.__qualname__}: {self.error}"
        return f"{self.name}: {self.result!r}"


def run_streaming(implementation: Implementation, template: Any, run: Run) -> list[Step]:
    """Drive one parser through the run; stop at the first exception."""
    steps: list[Step] = []

    def attempt(name: str, action: Callable[[], Any]) -> bool:
        try:
            result = action()
        except Exception as error:  # noqa: BLE001 - every exception class is part of the behaviour
            steps.append(Step(name, error=error))
            return False
        # A copy for the report, since a finished result gets vandalized below.
        steps.append(Step(name, copy.deepcopy(result), snapshot=canonical(result)))
        return True

    holder: dict = {}

    def construct():
        holder["parser"] = implementation.construct(template, run.prefix, run.tools)
        return holder["parser"].initial_events

    if not attempt("construct", construct):
        return steps
    parser = holder["parser"]
    for index, chunk in enumerate(run.chunks):
        if not attempt(f"feed[{index}]({chunk!r})", lambda: parser.feed(chunk)):
            return steps

    def finalize():
        holder["finalized"] = parser.finalize()
        return holder["finalized"]

    if not attempt("finalize", finalize):
        return steps
    vandalize(holder["finalized"])
    if run.after_finalize == "feed":
        attempt("feed after finalize", lambda: parser.feed("x"))
    elif run.after_finalize == "finalize":
        attempt("finalize after finalize", lambda: parser.finalize())
    return steps


def run_one_shot(implementation: Implementation, template: Any, run: Run) -> list[Step]:
    try:
        message = implementation.one_shot(run.text, template, run.prefix, run.tools)
    except Exception as error:  # noqa: BLE001
        return [Step("parse_response", error=error)]
    step = Step("parse_response", copy.deepcopy(message), snapshot=canonical(message))
    vandalize(message)
    return [step]


def vandalize(value: Any, seen: Optional[set] = None) -> None:
    """Mutate every container of a finished result, as a careless caller might. Defaults are copied
    per parser, so no later parser of the same template may see this."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, dict):
        for item in list(value.values()):
            vandalize(item, seen)
        value["vandalized"] = True
    elif isinstance(value, list):
        for item in list(value):
            vandalize(item, seen)
        value.append("vandalized")
    elif isinstance(value, tuple):
        for item in value:
            vandalize(item, seen)


def guarded_run(side: str, runner: Callable[[], list[Step]]) -> list[Step]:
    try:
        with time_limit(STEP_TIME_LIMIT_SECONDS):
            return runner()
    except StepTimeout:
        if side == "interpreter":
            # The loop guard should make this impossible: a harness problem, not a divergence.
            pytest.fail(
                "the interpreter side exceeded the time limit; the loop guard missed a case"
            )
        pytest.fail(
            f"{side} did not finish within {STEP_TIME_LIMIT_SECONDS}s (the interpreter did)"
        )


def compare(
    expected: list[Step], actual: list[Step], template: Any, run: Run, candidate_name: str
) -> None:
    report = [f"template: {template!r}", f"run: {run!r}", f"candidate: {candidate_name}"]
    for index, want in enumerate(expected):
        got = actual[index] if index < len(actual) else None
        if got is None:
            report.append(f"step {want.name}: the candidate stopped early (its last step raised)")
            _fail(report, expected, actual)
        if want.error is not None:
            if got.error is None:
                report.append(f"step {want.name}: the interpreter raised, the candidate did not")
                _fail(report, expected, actual)
            if isinstance(want.error, InterpreterLoop):
                return  # any clear error is acceptable where the interpreter never returns
            if not isinstance(got.error, type(want.error)):
                report.append(
                    f"step {want.name}: the candidate raised {type(got.error).__qualname__}, "
                    f"not (a subclass of) {type(want.error).__qualname__}"
                )
                _fail(report, expected, actual)
            return
        if got.error is not None:
            report.append(f"step {want.name}: the candidate raised, the interpreter did not")
            _fail(report, expected, actual)
        if got.snapshot != want.snapshot:
            same_but_order = _unordered(got.snapshot) == _unordered(want.snapshot)
            report.append(
                f"step {want.name}: results differ"
                + (" (only in dict key order)" if same_but_order else "")
            )
            _fail(report, expected, actual)
    if len(actual) > len(expected):
        report.append(f"the candidate ran past the interpreter's last step ({expected[-1].name})")
        _fail(report, expected, actual)


def _unordered(form: Any) -> Any:
    if isinstance(form, tuple) and form and form[0] == "dict":
        return ("dict", frozenset((_unordered(k), _unordered(v)) for k, v in form[1]))
    if isinstance(form, tuple):
        return tuple(_unordered(item) for item in form)
    return form


def _fail(report: list[str], expected: list[Step], actual: list[Step]) -> None:
    lines = report + ["", "interpreter:"] + ["  " + s.describe() for s in expected]
    lines += ["candidate:"] + ["  " + s.describe() for s in actual]
    pytest.fail("\n".join(lines), pytrace=False)


# --------------------------------------------------------------------------------------------------
# Statistics (pytest --hypothesis-show-statistics)
# --------------------------------------------------------------------------------------------------


def record_statistics(template: Any, run: Run, steps: list[Step]) -> None:
    fields = template.get("fields") if isinstance(template, dict) else None
    if isinstance(fields, dict):
        for spec in fields.values():
            if isinstance(spec, dict):
                event(f"content parser: {spec.get('content', 'text')!s}")
                for key in ("open", "open_pattern", "close", "close_pattern"):
                    if key in spec:
                        kind = "list" if isinstance(spec[key], list) else "str"
                        event(f"delimiter: {key} ({kind})")
                if "open" not in spec and "open_pattern" not in spec:
                    event(
                        "implicit field"
                        + (" with close" if ("close" in spec or "close_pattern" in spec) else "")
                    )
    last = steps[-1]
    if last.error is not None:
        step_kind = last.name.split("[")[0].split("(")[0]
        event(f"interpreter raised at {step_kind}: {type(last.error).__name__}")
    else:
        event("interpreter completed")
    closes = sum(
        1
        for step in steps
        if step.error is None and step.name != "finalize"
        for e in (step.result or [])
        if isinstance(e, dict) and e.get("type") == "region_close"
    )
    final = next((s for s in steps if s.name == "finalize" and s.error is None), None)
    if final is not None:
        closes += sum(1 for e in final.result[1] if e.get("type") == "region_close")
    event("region closes: " + ("0" if closes == 0 else "1-2" if closes <= 2 else "3+"))
    event(
        "prefix: "
        + ("None" if run.prefix is None else "empty" if run.prefix == "" else "non-empty")
    )


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------

QWEN3 = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)"},
    },
}


def check_streaming(case: Case, entry_point: str, *, statistics: bool = True) -> None:
    implementation = candidate(entry_point)
    for run in case.runs:
        expected = guarded_run(
            "interpreter", lambda: run_streaming(INTERPRETER, case.template, run)
        )
        if statistics:
            record_statistics(case.template, run, expected)
        actual = guarded_run(
            implementation.name, lambda: run_streaming(implementation, case.template, run)
        )
        compare(expected, actual, case.template, run, implementation.name)


# Regressions and hand-picked seeds; paste a printed falsifying Case here to pin it.
@example(
    case=Case(
        QWEN3,
        [
            Run(
                prefix="<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n",
                chunks=[
                    "plan",
                    "</thi",
                    "nk>\n\nok\n\n<tool_",
                    'call>\n{"name": "get_weather", "arguments": {"a": "3"}}\n</tool_call>',
                    "<|im_end|>",
                ],
                tools=[get_weather],
            )
        ],
    ),
    entry_point="api",
)
@example(  # zero-width open and close at one position: the interpreter loops in the first feed
    case=Case(
        {
            "start_anchor": "<a>",
            "fields": {"a": {"open_pattern": "(?=<)", "close_pattern": "(?=<)"}},
        },
        [Run(prefix="", chunks=["x<y"])],
    ),
    entry_point="api",
)
@example(  # a literal list where "<a" is a prefix of "<ab": a complete "<a" at the end must wait
    case=Case(
        {"start_anchor": "|", "fields": {"b": {"open": ["<ab", "<a"], "close": ">"}, "c": {}}},
        [Run(prefix="", chunks=["x<a", "b1>", "<a", "2>"], after_finalize="feed")],
    ),
    entry_point="module",
)
@given(case=cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_streaming_matches_interpreter(case: Case, entry_point: str) -> None:
    check_streaming(case, entry_point)


@given(case=tool_call_cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_tool_call_coercion_matches_interpreter(case: Case, entry_point: str) -> None:
    # For the statistics: how often the tools actually change what the interpreter produces.
    for run in case.runs:
        without_tools = Run(run.prefix, run.chunks, None, run.after_finalize)
        with_tools = guarded_run(
            "interpreter", lambda: run_streaming(INTERPRETER, case.template, run)
        )
        plain = guarded_run(
            "interpreter", lambda: run_streaming(INTERPRETER, case.template, without_tools)
        )
        same = len(plain) == len(with_tools) and all(
            a.error is None and b.error is None and a.snapshot == b.snapshot
            for a, b in zip(plain, with_tools)
        )
        event("tools changed nothing" if same else "tools changed the interpreter's result")
    check_streaming(case, entry_point)


@given(case=known_format_cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_known_formats_match_interpreter(case: Case, entry_point: str) -> None:
    check_streaming(case, entry_point)


def one_shot_path(template: Any, action: Callable[[], list[Step]]) -> tuple[list[Step], str]:
    """Run `action` (a parse_response through rtcompile) and say which way the generated module
    read the message: its one-shot reader, the reader handing the message back to the machine's
    pass (an empty delimiter match where the machine stops), or the machine's pass alone (a
    template the one-shot reader cannot take; the reason's kind is given)."""
    if SELF_MODE:
        return action(), "the interpreter itself"
    import rtcompile

    try:
        module = rtcompile.load(template)
    except rtcompile.TemplateError:  # (an invalid template: both sides raise, no path to tell)
        return action(), "no module (invalid template)"
    if not module.ONE_SHOT:
        return action(), "the machine's pass: " + module.ONE_SHOT_FALLBACK.split(": ", 1)[1]
    handed_back: list[bool] = []
    original = module.parse_whole

    def machine_pass(*args: Any, **kwargs: Any) -> dict:
        handed_back.append(True)
        return original(*args, **kwargs)

    module.parse_whole = machine_pass
    try:
        steps = action()
    finally:
        module.parse_whole = original
    return steps, "the one-shot reader" + (", handed back to the machine's pass" if handed_back else "")


@example(
    case=Case(QWEN3, [Run(prefix="", chunks=["<think>a</think>b<|im_end|>"])]), entry_point="api"
)
@example(  # an empty match at the very end of the text: the interpreter never commits one there
    case=Case(
        {
            "fields": {
                "content": {"close": "<a>"},
                "reasoning_content": {"open_pattern": "(?<=<a>)", "close": "<a>", "repeats": True},
            },
            "start_anchor": "S",
        },
        [Run(prefix="", chunks=["<a>"])],
    ),
    entry_point="module",
)
@given(case=cases(), entry_point=st.sampled_from(ENTRY_POINTS))
def test_one_shot_matches_interpreter(case: Case, entry_point: str) -> None:
    implementation = candidate(entry_point)
    for run in case.runs:
        expected = guarded_run("interpreter", lambda: run_one_shot(INTERPRETER, case.template, run))
        outcome = (
            "completed"
            if expected[0].error is None
            else f"raised {type(expected[0].error).__name__}"
        )
        event(f"interpreter: {outcome}")
        actual, path = guarded_run(
            implementation.name,
            lambda: one_shot_path(
                case.template, lambda: run_one_shot(implementation, case.template, run)
            ),
        )
        event(f"parse_response read by {path}")
        compare(expected, actual, case.template, run, implementation.name)


@pytest.mark.parametrize(
    "template",
    [
        # A tuple is a literal to the interpreter's transform walk (only lists are walked).
        {
            "start_anchor": "S",
            "fields": {"c": {"open": "<", "close": ">", "transform": ("{content}", 1)}},
        },
        # deepcopy keeps a tuple default and a non-string default key as they are.
        {"start_anchor": "S", "defaults": {"t": (1, 2), 7: "seven"}, "fields": {"c": {}}},
    ],
    ids=["tuple-in-transform", "tuple-and-int-key-in-defaults"],
)
def test_python_only_template_values_match_interpreter(template) -> None:
    """The interpreter takes any Python dict, not only JSON data; a drop-in must too (or this test
    records the deliberate exception)."""
    check_streaming(Case(template, [Run(prefix="", chunks=["a<b", ">c"])]), "api", statistics=False)


# --------------------------------------------------------------------------------------------------
# The one-shot reader against the streaming machine's pass, rtcompile's own options included
# --------------------------------------------------------------------------------------------------


def _whole_outcome(action: Callable[[], dict]) -> tuple:
    """A parse's result in comparable form: the message, or the exception's class and text."""
    try:
        message = action()
    except Exception as error:  # noqa: BLE001 - every exception class is part of the behaviour
        return ("raised", type(error), str(error))
    return ("message", canonical(message))


@example(  # a failed region is recorded, the text around it kept
    case=Case(
        QWEN3,
        [
            Run(
                prefix="<|im_start|>assistant\n<think>",
                chunks=["r</think>a\n<tool_call>{bad</tool_call>b<|im_end|>"],
                tools=[get_weather],
            )
        ],
    )
)
@given(case=cases())
def test_one_shot_reader_gives_the_machines_message_with_every_option(case: Case) -> None:
    """errors="keep" and timeout= are rtcompile's own options: the reference is the streaming
    machine's pass (parse_whole, which the streaming properties tie to the interpreter). The one-shot
    reader must give its message, or raise its exception with the same text, in both error modes;
    with timeout= parse_response is that pass."""
    if SELF_MODE:
        return
    import rtcompile
    from rtcompile.runtime import ParseOptions, parse_whole

    try:
        module = rtcompile.load(case.template)
    except rtcompile.TemplateError:  # (invalid templates are test_differential_rejects' business)
        return
    for run in case.runs:
        for options in ({"errors": "strict"}, {"errors": "keep"}, {"errors": "keep", "timeout": 30.0}):
            expected = guarded_run(
                "rtcompile's machine",
                lambda: _whole_outcome(
                    lambda: parse_whole(module.ResponseParser, run.text, run.prefix, run.tools, ParseOptions(**options))
                ),
            )
            actual, path = guarded_run(
                "rtcompile's parse_response",
                lambda: one_shot_path(
                    case.template,
                    lambda: _whole_outcome(
                        lambda: module.parse_response(run.text, prefix=run.prefix, tools=run.tools, **options)
                    ),
                ),
            )
            event(f"errors={options['errors']!r}: " + ("the machine's pass" if "timeout" in options else path))
            assert actual == expected, (
                f"template: {case.template!r}\nrun: {run!r}\noptions: {options}\n"
                f"machine's pass: {expected}\nparse_response: {actual}"
            )


# What makes a generated template keep the machine's pass: `\G` (it matches where a search starts),
# and inline flags a pattern cannot keep as one alternative of its state's search.
_ONE_SHOT_REFUSES = ("\\G", "(?i)", "(?m)")


@given(plan=template_plans(valid_only=True))
def test_generated_templates_take_the_one_shot_reader(plan) -> None:
    """Every generated template gets the one-shot reader, but for the forms it refuses by design
    (`\\G`, inline flags among several delimiters of a state), whatever the collisions, prefixes,
    lead runs, literal lists and captures the strategies build; the statistics say how often."""
    from rtcompile import codegen, frontend

    try:
        lowered = frontend.lower(plan.template)
    except frontend.TemplateError:  # (the strategies' rare invalid one: no module, so no reader)
        event("refused by the front end")
        return
    reason = codegen.one_shot_fallback(lowered)
    event("one-shot reader" if reason is None else "machine's pass: " + reason.split(": ", 1)[1])
    patterns = [
        d.value for f in plan.fields for d in (f.open, f.close) if d is not None and d.is_pattern
    ]
    if not any(form in pattern for pattern in patterns for form in _ONE_SHOT_REFUSES):
        assert reason is None, (plan.template, reason)


# --------------------------------------------------------------------------------------------------
# eager=True: the interpreter's events, never later
# --------------------------------------------------------------------------------------------------


def _stream_after_each_step(steps: list[Step]) -> list[list[tuple]]:
    """The events given up to each step (initial events, feeds, finalize's), adjacent chunks of one
    region merged and empty ones dropped: what a consumer has seen, whatever the feeds' borders."""
    seen: list[tuple] = []
    after: list[list[tuple]] = []
    for step in steps:
        if step.error is not None:
            break
        events = step.result[1] if step.name.startswith("finalize") else step.result
        for event_ in events if isinstance(events, list) else ():
            if event_["type"] == "region_chunk":
                if not event_["text"]:
                    continue
                if (
                    seen
                    and seen[-1][:2] == ("region_chunk", event_["field"])
                    and seen[-1][3] == event_.get("dirty")
                ):
                    seen[-1] = (*seen[-1][:2], seen[-1][2] + event_["text"], seen[-1][3])
                    continue
                seen.append(("region_chunk", event_["field"], event_["text"], event_.get("dirty")))
            else:
                seen.append((event_["type"], event_["field"], canonical(event_)))
        after.append(list(seen))
    return after


def _covers(later: list[tuple], earlier: list[tuple]) -> bool:
    """Whether `later` starts with everything `earlier` holds (its last chunk may have grown)."""
    if len(later) < len(earlier):
        return False
    if earlier[:-1] != later[: len(earlier) - 1]:
        return False
    if not earlier:
        return True
    last, other = earlier[-1], later[len(earlier) - 1]
    if last[0] == "region_chunk":
        return other[:2] == last[:2] and other[3] == last[3] and other[2].startswith(last[2])
    return other == last


def check_eager(case: Case, entry_point: str) -> None:
    implementation = candidate(entry_point, eager=True)
    for run in case.runs:
        expected = guarded_run(
            "interpreter", lambda: run_streaming(INTERPRETER, case.template, run)
        )
        if any(isinstance(step.error, InterpreterLoop) for step in expected):
            continue  # (no result to compare with: see test_streaming_matches_interpreter)
        actual = guarded_run(
            implementation.name, lambda: run_streaming(implementation, case.template, run)
        )
        report = [
            f"template: {case.template!r}",
            f"run: {run!r}",
            f"candidate: {implementation.name}",
        ]
        want_error = next((s for s in expected if s.error is not None), None)
        got_error = next((s for s in actual if s.error is not None), None)
        if (want_error is None) != (got_error is None) or (
            want_error is not None and not isinstance(got_error.error, type(want_error.error))
        ):
            report.append("the outcome (an exception and its class) differs")
            _fail(report, expected, actual)
        if want_error is not None and actual.index(got_error) > expected.index(want_error):
            report.append("the candidate raised at a later step than the interpreter")
            _fail(report, expected, actual)
        wanted, got = _stream_after_each_step(expected), _stream_after_each_step(actual)
        for index, (interpreter_seen, eager_seen) in enumerate(zip(wanted, got)):
            if not _covers(eager_seen, interpreter_seen):
                report.append(
                    f"after step {expected[index].name}, the candidate had not given "
                    "everything the interpreter had, or gave something else"
                )
                _fail(report, expected, actual)
        if want_error is None:
            event("eager: completed")
            if wanted[-1] != got[-1]:
                report.append("the events differ once merged")
                _fail(report, expected, actual)
            messages = [
                [canonical(s.result[0]) for s in steps if s.name == "finalize"]
                for steps in (expected, actual)
            ]
            if messages[0] != messages[1]:
                report.append("the final message differs")
                _fail(report, expected, actual)
            ahead = any(len(b) > len(a) or b != a for a, b in zip(wanted, got))
            event("eager: something came a feed earlier" if ahead else "eager: same timing")


@example(  # the qwen3.5 call opener completed by a chunk: the region opens in that feed
    case=Case(
        {
            "start_anchor": "S",
            "fields": {
                "calls": {
                    "open_pattern": r"\s*<tool_call>\s*<function=(?P<name>[^>\n]+)>",
                    "close_pattern": r"\s*</function>\s*</tool_call>",
                    "transform": {"name": "{name}", "arguments": "{content}"},
                },
                "content": {},
            },
        },
        [
            Run(
                prefix="",
                chunks=["hi", "<tool_call>\n<function=f>", "\nx", "</function></tool_call>", "!"],
            )
        ],
    ),
    entry_point="module",
)
@given(case=st.one_of(cases(), known_format_cases()), entry_point=st.sampled_from(ENTRY_POINTS))
def test_eager_parsers_give_the_interpreters_events_never_later(
    case: Case, entry_point: str
) -> None:
    """eager=True commits a delimiter match that ends at the text's end where no more text could
    change it: the same events, exceptions and message as the interpreter, merged across feeds;
    after every step at least what the interpreter had given, in the same order."""
    check_eager(case, entry_point)
