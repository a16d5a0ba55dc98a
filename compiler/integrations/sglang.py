"""SGLang integration: rtcompile's compiled parsers as SGLang reasoning and tool-call detectors.

    pip install rtcompile sglang
    sglang serve --model-path MODEL --reasoning-parser rtcompile --tool-call-parser rtcompile

Installing rtcompile registers `register` below as an `sglang.srt.plugins` entry point
(pyproject.toml): SGLang runs its general plugins in every process at startup, before it builds its
argument parser, so the name `rtcompile` is a valid `--reasoning-parser` and `--tool-call-parser`
choice with nothing patched by hand. In code, `import rtcompile.integrations.sglang` (or SGLang's
`sglang.srt.plugins.load_plugins()`) registers them, then `ReasoningParser("rtcompile", ...)` and
`FunctionCallParser(tools, "rtcompile", tokenizer=..., prefix=...)` select them.

The template, first found wins: the `response_template=` argument; the tokenizer's
`response_template`; rtcompile's bundled template for the model's `model_type` (`config.json` beside
the tokenizer); the environment variable `RTCOMPILE_SGLANG_TEMPLATE` (a bundled template's name or
`model_type`, or a path to a template JSON, a `tokenizer_config.json` or a tokenizer directory).
Reasoning may be named `reasoning_content` (transformers' templates) or `thinking` (SGLang's).

The detectors subclass SGLang's `ResponseTemplateReasoningDetector` / `ResponseTemplateToolDetector`,
so everything SGLang does for response-template parsers (prefix, tools, the think-end token,
message-start checks, constraint validation) reaches them; what they parse, they parse with
rtcompile. Results, accumulated, equal SGLang's own detectors wherever those accept the template,
except by design:
- a tool call's name goes out as soon as it is known and its arguments as JSON fragments while they
  are written (SGLang sends the arguments whole when the call closes);
- a malformed call, or one cut off by the end of the output, loses nothing: a call already announced
  is closed with the arguments complete so far and stays in `incomplete_tool_call_indices`, and the
  region's text goes out as normal text (SGLang drops it); a call cut off after its arguments were
  complete is a call;
- templates SGLang's own classes refuse are served: a content parser SGLang's vendored interpreter
  lacks (python-call-list), and a reasoning or content field that repeats with `join` (gpt-oss's
  harmony channels) or has another content parser or a transform (its text goes out as the model
  wrote it, the `join` separator between two regions). SGLang's auxiliary methods (think tokens,
  message starts, constraints) read a copy of the template with those fields as plain text, their
  delimiters unchanged (`_sglang_view`).
The tool detector follows the whole template, whatever reasoning parser is or is not configured: a
call written inside reasoning (or inside a content field that opens with a delimiter) is that
field's text, not a call. SGLang's chat serving hands it the reasoning parser's normal text when the
server runs one (`--reasoning-parser`), and the whole output otherwise; the detector reads the same
setting. Without a reasoning parser, reasoning goes out as normal text with its delimiters, as the
model wrote it; behind one, reasoning the prompt left open is over where the text it gets starts.
Calls to a function not in the request's tools are dropped, as SGLang drops them (unless
`SGLANG_FORWARD_UNKNOWN_TOOLS`). Constrained decoding modes (`grammar_start`, `constrained`) are
passed to SGLang's methods that build constraints; parsing itself treats the output as unconstrained.

Tool guarantees: SGLang asks the tool detector for the constraint of a request with
`tool_choice="required"`, a named tool, strict tools or `parallel_tool_calls=False`
(`validate_structure_constraint_request`), and for the same constraint from the message start
(`get_structural_tag(message_start=True)`, which it applies from the first token when the prompt
ends at the start anchor). The detector answers with rtcompile's structural tag (text delimiters:
SGLang's parsers read text): from the message start, or past a reasoning region where SGLang's
reasoning gate applies it after the reasoning. SGLang builds it before the prompt is known, so a
template with reasoning is constrained only behind a reasoning parser (otherwise refused: the
prompt may open the reasoning). Arguments are written by rtcompile's own JSON writer, which keeps
a call's closer out of strings under SGLang's xgrammar (0.2.7) too; a request whose tool schemas
use keywords that writer leaves to xgrammar's json_schema format is refused under 0.2.7, which
ignores that format's `excludes` (a string could then hold the closer).

The generation runs on rtcompile's serving core (`rtcompile.integrations.serving`): the reasoning
detector renders its operations as SGLang's reasoning results (`_ReasoningResults`), the tool
detector as tool-call items with SGLang's serving bookkeeping (`_ToolResults`).
"""

from __future__ import annotations

import inspect
import json
import logging
import weakref
from typing import Any, Sequence

import regex

from sglang.srt.environ import envs
from sglang.srt.function_call.core_types import StreamingParseResult as ToolStreamingParseResult
from sglang.srt.function_call.core_types import ToolCallItem
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser
from sglang.srt.parser.reasoning_parser import StreamingParseResult as ReasoningStreamingParseResult
from sglang.srt.parser.response_template import (
    ResponseTemplateReasoningDetector,
    ResponseTemplateToolDetector,
    validate_response_template_for_serving,
)
from sglang.srt.runtime_context import get_context

import rtcompile
from rtcompile.frontend import variants

from .serving import OPENER_GROUP, Generation, Renderer, Route, ServingPlan, WholeOutput, tool_dicts, unvalidated_builder
from .serving.host import (
    CONTENT_FIELD,
    REASONING_FIELDS,
    TOOL_FIELD,
    plan_for,
    reasoning_field_of,
    resolve_template,
    served_plan,
    thinking_named,
)

logger = logging.getLogger(__name__)

__all__ = [
    "PARSER_NAME",
    "TEMPLATE_ENVIRONMENT_VARIABLE",
    "RtcompileReasoningDetector",
    "RtcompileToolDetector",
    "register",
]

PARSER_NAME = "rtcompile"
TEMPLATE_ENVIRONMENT_VARIABLE = "RTCOMPILE_SGLANG_TEMPLATE"
_NORMAL = "normal"  # the routing key (and, for the tool parser, the field) of normal text
_REASONING = "reasoning"


def register() -> None:
    """The `sglang.srt.plugins` entry point (also run by importing this module): add `rtcompile` to
    SGLang's reasoning-parser and tool-call-parser registries and to the name lists its argument
    parser offers. Safe to call repeatedly."""
    from sglang.srt.function_call import parser_names
    from sglang.srt.parser import reasoning_parser_names

    ReasoningParser.DetectorMap[PARSER_NAME] = RtcompileReasoningDetector
    FunctionCallParser.ToolCallParserEnum[PARSER_NAME] = RtcompileToolDetector
    for names in (
        reasoning_parser_names.REASONING_PARSER_NAMES,
        parser_names.TOOL_CALL_PARSER_NAMES,
    ):
        if PARSER_NAME not in names:
            names.append(PARSER_NAME)


# ---- templates ----------------------------------------------------------------------------------

# What SGLang's own classes cannot read in a field (which a copy then reads as plain text, its
# delimiters kept: what their methods read, think tokens, message starts, constraints).
_SGLANG_REFUSES = ("unknown content parser", "uses semantics that cannot be streamed")


def _sglang_view(template: dict) -> dict:
    """The template as SGLang's own classes read it, for the methods inherited from them: reasoning
    named `thinking`, and a field SGLang cannot parse or stream (a content parser its vendored
    interpreter lacks; a reasoning or content field with another content parser than text, a
    transform, or `join`) read as plain text, its delimiters unchanged. Raises ValueError for
    anything else SGLang refuses."""
    view = thinking_named(template)
    names = variants.field_names(view)
    for _ in range(len(names) + 1):
        try:
            validate_response_template_for_serving(view)
            return view
        except ValueError as error:
            message = str(error)
            broken = next(
                (
                    name
                    for name in names
                    if any(reason in message for reason in _SGLANG_REFUSES)
                    and (f"Field {name!r}:" in message or f"field {name!r}" in message)
                ),
                None,
            )
            if broken is None:
                raise
            view = variants.plain_text_field(view, broken)
    raise ValueError("response_template: no copy SGLang can read")  # pragma: no cover


def _passed_through_fields(plan: ServingPlan) -> list[str]:
    """The fields whose regions the tool detector passes on as normal text, delimiters included:
    reasoning, and content where it opens with a delimiter of its own. A call's text inside one of
    them is that field's text, as the template reads it, not a call."""
    fields = plan.fields
    return [name for name in (*REASONING_FIELDS, CONTENT_FIELD) if name in fields and fields[name].has_opener]


def _tool_detector_template(plan: ServingPlan) -> dict:
    """What the tool detector parses: the whole template, its calls parsed, everything else normal
    text as the model wrote it. Reasoning and a content field with an opener stay regions (passed
    on verbatim), so a call written inside them is not a call; text outside every region (content
    without an opener among it) is normal text."""
    return variants.regions_view(
        plan.template, sink=_NORMAL, verbatim=_passed_through_fields(plan), parsed=TOOL_FIELD, capture=OPENER_GROUP
    )


class _Plans:
    """What the two detectors parse with, made once per template (hung off its serving plan):
    the reasoning detector's plan (reasoning apart, tool calls verbatim, the rest normal text), the
    tool detector's (calls, and the rest verbatim), and the copy SGLang's own classes read."""

    def __init__(self, base: ServingPlan) -> None:
        self.base = base
        self.reasoning_field = reasoning_field_of(base)
        self.reasoning = served_plan(base, tool_calls="verbatim")
        self.tools: ServingPlan | None = None
        self.passed_through: list[str] = []
        if TOOL_FIELD in base.fields:
            self.tools = base.derived(
                "sglang.tool_detector", lambda plan: plan_for(_tool_detector_template(plan))
            )
            self.passed_through = _passed_through_fields(base)

    @classmethod
    def of(cls, template: dict) -> "_Plans":
        return plan_for(template).derived("sglang.plans", cls)

    @property
    def sglang_view(self) -> dict:
        """The copy SGLang's own classes read, made once (a deep copy per detector was most of
        what building one cost); raises ValueError if SGLang cannot read the template."""
        return self.base.derived("sglang.view", lambda plan: _sglang_view(plan.template))


class _KeptSignature:
    """SGLang's `ReasoningParser` and `FunctionCallParser` read their detector class's signature
    on every request (`inspect.signature`, up to three times: 30-40 us each for these classes);
    each class keeps its own, computed once, where `inspect.signature` looks first."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = None  # (not the parent's: inspect computes this class's own)
        cls.__signature__ = inspect.signature(cls)


# ---- reasoning ----------------------------------------------------------------------------------


class _ReasoningResults(Renderer):
    """The serving core's operations as SGLang reasoning results: reasoning and normal text (content,
    and tool calls with their delimiters for the tool detector) as they are written. Without
    `stream_reasoning`, reasoning waits for its region's close; with `force_nonempty_content`,
    reasoning the output leaves open comes back as normal text at the end."""

    def __init__(self, reasoning_field: str | None, stream_reasoning: bool, force_nonempty: bool) -> None:
        self.reasoning_field = reasoning_field
        self.stream_reasoning = stream_reasoning
        self.force_nonempty = force_nonempty
        self.plain = stream_reasoning and not force_nonempty  # (results straight from the text)
        self.reasoning: list[str] = []
        self.normal: list[str] = []
        self.closed = False  # a reasoning region closed in this chunk
        self.at_end = False
        self.pending_reasoning = ""  # stream_reasoning=False: sent when the region closes
        self.open_reasoning = ""  # force_nonempty_content: reasoning left open is content

    def text(self, key: str, text: str) -> None:
        (self.reasoning if key == _REASONING else self.normal).append(text)

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        pass  # (no tool calls here: the tool detector reads them from the normal text)

    def arguments(self, index: int, text: str) -> None:
        pass

    def region_closed(self, field: str) -> None:
        if field == self.reasoning_field:
            self.closed = True

    def take(self) -> ReasoningStreamingParseResult:
        reasoning, normal = "".join(self.reasoning), "".join(self.normal)
        self.reasoning, self.normal = [], []
        closed, self.closed = self.closed, False
        if self.plain:
            return _reasoning_pair(normal, reasoning)
        if self.force_nonempty:
            self.open_reasoning += reasoning
        if not self.stream_reasoning:
            self.pending_reasoning += reasoning
            reasoning = ""
            if closed:
                reasoning, self.pending_reasoning = self.pending_reasoning, ""
        if self.force_nonempty and closed:
            unclosed, self.open_reasoning = self.open_reasoning, ""
            if self.at_end:  # reasoning the output left open is returned as content, too
                normal += unclosed
                reasoning = ""
        return _reasoning_pair(normal, reasoning)

    def text_maker(self, key: str) -> Any:
        if not self.plain:
            return None
        return _reasoning_result if key == _REASONING else _normal_result

    def nothing(self) -> ReasoningStreamingParseResult:
        return _normal_result("")


class RtcompileReasoningDetector(_KeptSignature, ResponseTemplateReasoningDetector):
    """`--reasoning-parser rtcompile`: reasoning apart from the normal text (content, and tool calls
    with their delimiters, for the tool detector), parsed by rtcompile."""

    def __init__(
        self,
        stream_reasoning: bool = True,
        tokenizer: Any = None,
        response_template: Any = None,
        prefix: str = "",
        force_nonempty_content: bool = False,
        grammar_start: str | None = None,
        tools: Sequence[Any] | None = None,
        constrained: bool = False,
        **kwargs: Any,
    ) -> None:
        template, self.template_origin = resolve_template(
            tokenizer, response_template, environment_variable=TEMPLATE_ENVIRONMENT_VARIABLE
        )
        self.plans = _Plans.of(template)  # validates and compiles now
        super().__init__(
            stream_reasoning=stream_reasoning,
            response_template=self.plans.sglang_view,
            prefix=prefix,
            force_nonempty_content=force_nonempty_content,
            grammar_start=grammar_start,
            tools=tools,
            constrained=constrained,
            **kwargs,
        )
        self.response_template = template
        self._rtc_prefix = prefix
        self._results = _ReasoningResults(
            self.plans.reasoning_field, self.stream_reasoning, self._force_nonempty_content
        )
        self._generation = self._new_generation(self._results)
        # SGLang calls parse_streaming_increment(new_text) once per chunk: the generation's feed is
        # that method itself (its fast path with no call in between; the generation reads text).
        self.parse_streaming_increment = self._generation.feed

    def _new_generation(self, renderer: Renderer) -> Generation:
        plans = self.plans
        routes = {CONTENT_FIELD: Route.raw(_NORMAL), TOOL_FIELD: Route.verbatim(_NORMAL)}
        if plans.reasoning_field is not None:
            routes[plans.reasoning_field] = Route.raw(_REASONING)
        return Generation(plans.reasoning, renderer, routes, prefix=self._rtc_prefix)

    def detect_and_parse(self, text: str) -> ReasoningStreamingParseResult:
        texts = WholeOutput()
        generation = self._new_generation(texts)
        generation.feed(text)
        generation.finish()
        reasoning, normal = texts.joined(_REASONING), texts.joined(_NORMAL)
        if self._force_nonempty_content and not normal:
            normal, reasoning = reasoning, ""
        return ReasoningStreamingParseResult(normal_text=normal, reasoning_text=reasoning)

    def parse_streaming_increment(self, new_text: str) -> ReasoningStreamingParseResult:
        """More output's reasoning and normal text (the instance's own is the generation's feed)."""
        return self._generation.feed(new_text)

    def finish(self) -> ReasoningStreamingParseResult:
        self._results.at_end = True
        return self._generation.finish()


def _reasoning_result_factories() -> tuple[Any, Any]:
    """The reasoning detector's results for more reasoning, and for more normal text: SGLang's
    plain result class, its two attributes set without calling its __init__ (about 70 of the 620
    ns a reasoning chunk took through SGLang's reasoning parser). Used only if they equal what
    its constructor builds (checked here, once, against the SGLang installed); otherwise the
    constructor."""
    new_instance = object.__new__
    result_class = ReasoningStreamingParseResult

    def reasoning_result(text: str) -> ReasoningStreamingParseResult:
        result = new_instance(result_class)
        result.normal_text = ""
        result.reasoning_text = text
        return result

    def normal_result(text: str) -> ReasoningStreamingParseResult:
        result = new_instance(result_class)
        result.normal_text = text
        result.reasoning_text = ""
        return result

    def validated(text: str, reasoning: bool) -> dict:
        return vars(result_class(None, text) if reasoning else result_class(text, None))

    try:
        if all(
            vars(reasoning_result(text)) == validated(text, True)
            and vars(normal_result(text)) == validated(text, False)
            for text in ("", "x<y")
        ):
            return reasoning_result, normal_result
    except Exception:  # a result class that takes no plain attributes
        pass
    return (lambda text: result_class(None, text)), (lambda text: result_class(text, None))


_reasoning_result, _normal_result = _reasoning_result_factories()


def _reasoning_pair(normal: str, reasoning: str) -> ReasoningStreamingParseResult:
    """A result with both texts (SGLang's constructor; not the hot path)."""
    return ReasoningStreamingParseResult(normal_text=normal, reasoning_text=reasoning)


# ---- tool calls ---------------------------------------------------------------------------------


# ToolStreamingParseResult(normal_text=text), the tool detector's answer to most chunks (about 2 us a
# chunk through pydantic's validation, more than the parse), and ToolCallItem(tool_index, name,
# parameters) and ToolStreamingParseResult(normal_text, calls), as _emit builds them for every chunk
# that announces a call or sends some of its arguments: built without validation where the pydantic
# installed builds the same instances both ways (checked once, here).
_text_result = unvalidated_builder(ToolStreamingParseResult, ("normal_text",), [("",), ("x<y",)])
_call_item = unvalidated_builder(
    ToolCallItem, tuple(ToolCallItem.model_fields), [(0, "get_weather", '{"a": 1}'), (3, None, "")]
)
_calls_result = unvalidated_builder(
    ToolStreamingParseResult,
    tuple(ToolStreamingParseResult.model_fields),
    [("x<y", [_call_item(0, "f", "{}")]), ("", [])],
)


class _ToolResults(Renderer):
    """The serving core's operations as SGLang tool-call results, keeping SGLang's serving
    bookkeeping on the detector (`prev_tool_call_arr`, `streamed_args_for_tool`,
    `incomplete_tool_call_indices`, `current_tool_id`, `current_tool_name_sent`), so that its
    serving finds nothing left to send at the end. A call to a function not in the request's tools
    is dropped, with its arguments, as SGLang drops it (unless SGLANG_FORWARD_UNKNOWN_TOOLS)."""

    def __init__(self, detector: "RtcompileToolDetector", tool_indices: Any) -> None:
        self.detector = weakref.proxy(detector)  # (the detector holds the generation, which holds this)
        self.tool_indices = tool_indices
        self.normal: list[str] = []
        self.items: list[ToolCallItem] = []
        self.calls = False  # a call operation came: the result carries calls
        self.slots: dict[int, int | None] = {}  # the core's call index -> tool_index (None: dropped)

    def text(self, key: str, text: str) -> None:
        self.normal.append(text)

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        self.calls = True
        detector = self.detector
        if name not in self.tool_indices and not envs.SGLANG_FORWARD_UNKNOWN_TOOLS.get():
            logger.warning("Model attempted to call undefined function: %s", name)
            self.slots[index] = None
            return
        slot = self.slots[index] = len(detector.prev_tool_call_arr)
        detector.prev_tool_call_arr.append({"name": name, "arguments": ""})
        detector.streamed_args_for_tool.append("")
        detector.incomplete_tool_call_indices.add(slot)
        detector.current_tool_id = slot
        detector.current_tool_name_sent = True
        self.items.append(_call_item(slot, name, ""))

    def arguments(self, index: int, text: str) -> None:
        slot = self.slots.get(index)
        if slot is None:
            return
        self.calls = True
        self.detector.streamed_args_for_tool[slot] += text
        items = self.items
        if items and items[-1].tool_index == slot:
            items[-1].parameters += text
        else:
            items.append(_call_item(slot, None, text))

    def call_done(self, index: int) -> None:
        """Its arguments as SGLang's serving reads them at the end of the stream (it sends whatever
        of `json.dumps(arguments)` was not streamed yet)."""
        slot = self.slots.get(index)
        if slot is None:
            return
        detector = self.detector
        try:
            detector.prev_tool_call_arr[slot]["arguments"] = json.loads(detector.streamed_args_for_tool[slot])
        except ValueError:
            return
        detector.incomplete_tool_call_indices.discard(slot)

    def region_failed(self, field: str, raw: str, error: str, key: str, calls: list[int]) -> None:
        self.calls = True  # (announced, then its region failed: those calls stay incomplete)

    def region_closed(self, field: str) -> None:
        if field == TOOL_FIELD:
            self.calls = True
            detector = self.detector
            detector.current_tool_id = len(detector.prev_tool_call_arr)
            detector.current_tool_name_sent = False

    def take(self) -> ToolStreamingParseResult:
        normal = "".join(self.normal) if self.normal else ""
        self.normal = []
        if not self.calls:  # text, or nothing
            return _text_result(normal)
        items, self.items, self.calls = self.items, [], False
        return _calls_result(normal, items)

    def text_maker(self, key: str) -> Any:
        return _text_result

    def nothing(self) -> ToolStreamingParseResult:
        return _text_result("")


def _reasoning_parser_in_front() -> bool:
    """Whether the SGLang server of this process runs a reasoning parser (`--reasoning-parser`),
    which its chat serving then runs before the tool parser: the tool parser gets the reasoning
    parser's normal text instead of the whole output. Read where SGLang's serving reads it (the
    configuration it publishes in its serving process); without one (no server here), False."""
    try:
        return bool(get_context().config_leaf("reasoning_parser"))
    except ValueError:  # no configuration published: not a server's process
        return False


def _prefix_past_reasoning(plans: _Plans, prefix: str) -> str:
    """The prompt as the tool detector reads it behind a reasoning parser. That parser took the
    output's reasoning out, closer included, so reasoning the prompt leaves open (prefilled
    `<think>`) is over where the text handed on starts: its first literal closer is appended (a
    closer that is only a pattern: the prompt is cut where that reasoning opened)."""
    field = plans.reasoning_field
    parser_class = plans.tools.parser_class
    if field is None or field not in plans.tools.fields:
        return prefix
    if parser_class(prefix, errors="keep").current_field != field:
        return prefix
    closers = plans.base.literals(field, "close")
    if closers:
        return prefix + closers[0]
    opener = regex.compile(plans.base.fields[field].open_regex, regex.DOTALL)
    for match in reversed(list(opener.finditer(prefix))):
        if parser_class(prefix[: match.start()], errors="keep").current_field != field:
            return prefix[: match.start()]
    return ""  # (unreachable for a region the prompt opened: some opener match opened it)


class RtcompileToolDetector(_KeptSignature, ResponseTemplateToolDetector):
    """`--tool-call-parser rtcompile`: tool calls out of the normal text, parsed by rtcompile; a
    call's name as soon as it is known, its arguments as they are written.

    It follows the whole template: a call written inside reasoning (or inside a content region
    that has an opener) is that field's text. What it reads depends on the server: behind a
    reasoning parser, that parser's normal text (the reasoning taken out, so reasoning the prompt
    left open is over); without one, the whole output, reasoning and its delimiters passed on as
    normal text. `after_reasoning_parser` says which; None (SGLang builds it so) reads the server's
    `--reasoning-parser` (`_reasoning_parser_in_front`)."""

    def __init__(
        self,
        tokenizer: Any = None,
        response_template: Any = None,
        prefix: str = "",
        tools: list | None = None,
        constrained: bool = False,
        *,
        after_reasoning_parser: bool | None = None,
    ) -> None:
        template, self.template_origin = resolve_template(
            tokenizer, response_template, environment_variable=TEMPLATE_ENVIRONMENT_VARIABLE
        )
        self.plans = _Plans.of(template)
        if self.plans.tools is None:
            raise ValueError(f"response_template has no {TOOL_FIELD!r} field")
        super().__init__(
            response_template=self.plans.sglang_view,
            prefix=prefix,
            tools=tools,
            constrained=constrained,
        )
        self.response_template = template
        eos = getattr(tokenizer, "eos_token", None)
        self._stop_spellings = [eos] if isinstance(eos, str) and eos else []
        if after_reasoning_parser is None:
            after_reasoning_parser = _reasoning_parser_in_front()
        self.after_reasoning_parser = after_reasoning_parser
        if after_reasoning_parser:
            prefix = _prefix_past_reasoning(self.plans, prefix)
        self._rtc_prefix = prefix
        self._generation: Generation | None = None
        self.prev_tool_call_arr = []
        self.streamed_args_for_tool = []

    def _new_generation(self, tools: Sequence[Any] | None, renderer: Renderer) -> Generation:
        return Generation(
            self.plans.tools,
            renderer,
            {
                _NORMAL: Route.raw(_NORMAL),
                **dict.fromkeys(self.plans.passed_through, Route.verbatim(_NORMAL)),
                TOOL_FIELD: Route.calls(_NORMAL),  # (a call that fails to parse: normal text)
            },
            prefix=self._rtc_prefix,
            tools=tool_dicts(tools, parsing_only=True),
        )

    def has_tool_call(self, text: str) -> bool:
        """Whether the prompt and `text` open a tool-call region (the serving core's
        `Generation.has_tool_call`)."""
        generation = self._new_generation(None, WholeOutput())
        generation.feed(text)
        generation.finish()
        return generation.has_tool_call

    def detect_and_parse(self, text: str, tools: list) -> ToolStreamingParseResult:
        """The normal text and the whole calls of `text` (the detector's bookkeeping untouched): a
        call to a function not in `tools` is dropped, as SGLang drops it."""
        whole = WholeOutput()
        generation = self._new_generation(tools, whole)
        generation.feed(text)
        generation.finish()
        accepted = self._accepted_names(tools)
        calls: list[ToolCallItem] = []
        for call in whole.calls:
            if accepted(call.name):
                calls.append(ToolCallItem(tool_index=len(calls), name=call.name, parameters=call.arguments))
        return ToolStreamingParseResult(normal_text=whole.joined(_NORMAL), calls=calls)

    def _start(self, tools: list) -> Generation:
        """The generation, made on the first chunk (or at the end, if none came), with the tools
        SGLang passes then."""
        self._tool_indices = self._get_tool_indices(tools)
        generation = self._generation = self._new_generation(tools, _ToolResults(self, self._tool_indices))
        # From the next chunk on, SGLang's parse_streaming_increment(new_text, tools) is the
        # generation's feed itself: feed(text, token_ids) reads the text (this generation parses
        # text: SGLang hands its detectors no ids), and SGLang's tools, in the token ids' place,
        # are not read.
        self.parse_streaming_increment = generation.feed
        return generation

    def parse_streaming_increment(self, new_text: str, tools: list) -> ToolStreamingParseResult:
        if self._generation is None:
            generation = self._start(tools)
            return _joined(generation.initial, generation.feed(new_text))
        return self._generation.feed(new_text)

    def finish(self, tools: list) -> ToolStreamingParseResult:
        if self._generation is None:  # nothing was streamed: the prefix alone, then the end
            generation = self._start(tools)
            return _joined(generation.initial, generation.finish())
        return self._generation.finish()

    # ---- constrained decoding: rtcompile's structural tag (module docstring)

    def supports_structural_tag(self) -> bool:
        """SGLang parses forced calls with this detector: they are written under rtcompile's tag
        (requests it cannot express are refused with the reason, never handed to SGLang's JSON
        array, whose calls this template would not read)."""
        return True

    def validate_structure_constraint_request(
        self,
        tool_choice: Any,
        parallel_tool_calls: bool,
        strict_requested: bool,
        *,
        tools: list,
        thinking_mode: bool = False,
    ) -> Any:
        """The tag for a request that asks for a guarantee (required, named, strict, one call),
        None for plain "auto"; raises ValueError for what cannot be constrained."""
        if tool_choice == "auto" and parallel_tool_calls and not strict_requested:
            return None
        return self.get_structural_tag(
            tools=tools,
            tool_choice=tool_choice,
            thinking_mode=thinking_mode,
            parallel_tool_calls=parallel_tool_calls,
        )

    def get_structural_tag(
        self,
        tools: list | None = None,
        tool_choice: Any = "auto",
        thinking_mode: bool = False,
        parallel_tool_calls: bool = True,
        message_start: bool = False,
    ) -> Any:
        """rtcompile's structural tag for these tools and choice (text delimiters: SGLang's parsers
        read text), from the message start (`message_start`: SGLang applies it from the first
        token, the reasoning included) or from where SGLang's reasoning gate opens it (past the
        reasoning). Raises ValueError where the tag cannot be kept here."""
        name = getattr(getattr(tool_choice, "function", None), "name", None)
        choice = {"type": "function", "function": {"name": name}} if isinstance(name, str) else tool_choice
        try:
            tag = rtcompile.structural_tag(
                self.response_template,
                tool_dicts(tools, parsing_only=True),
                tool_choice=choice,
                parallel_tool_calls=parallel_tool_calls,
                prefix=self._grammar_start(message_start),
                stop_tokens=self._stop_spellings,
            )
        except rtcompile.GrammarError as error:
            raise ValueError(
                f"rtcompile cannot constrain the tool calls for this response template: {error}"
            ) from None
        if _json_excludes_in(tag) and not _excludes_kept():
            raise ValueError(
                "rtcompile cannot constrain these tool calls under the installed xgrammar: their "
                "schemas use keywords its grammar leaves to json_schema formats, whose `excludes` "
                "(the call's closer kept out of strings) this xgrammar ignores"
            )
        from xgrammar import StructuralTag

        return StructuralTag.model_validate(tag)

    def _grammar_start(self, message_start: bool) -> str:
        """Where the tag starts, as a prompt: the message start, or past a reasoning region.
        SGLang builds the tag before the prompt is known and starts it past the reasoning only
        behind a reasoning parser (its reasoning gate): without one, a template that reasons
        cannot be constrained (the prompt may open the reasoning, which changes what the output
        means)."""
        anchors = self.plans.base.start_anchor
        anchor = anchors[0] if anchors else ""
        field = self.plans.reasoning_field
        if message_start or field is None:
            return anchor
        if not self.after_reasoning_parser:
            raise ValueError(
                "rtcompile constrains the tool calls of a template with reasoning only behind "
                "--reasoning-parser rtcompile: without it, SGLang builds the grammar before the "
                "prompt is known, and a prompt that opens the reasoning changes what the output means"
            )
        openers, closers = self.plans.base.literals(field, "open"), self.plans.base.literals(field, "close")
        if not openers or not closers:
            raise ValueError(
                "rtcompile cannot start the tool-call grammar past this template's reasoning: its "
                "delimiters are patterns"
            )
        return anchor + openers[0] + closers[0]

    def _accepted_names(self, tools: list):
        indices = self._get_tool_indices(tools)
        forward = envs.SGLANG_FORWARD_UNKNOWN_TOOLS.get()

        def accepted(name: str) -> bool:
            if name in indices or forward:
                return True
            logger.warning("Model attempted to call undefined function: %s", name)
            return False

        return accepted


def _excludes_kept() -> bool:
    """Whether the installed xgrammar keeps `excludes` on json_schema formats (0.2.8 does; 0.2.7,
    SGLang 0.5.23's, has no such field and ignores them: a string could then hold the closer,
    which the parser reads as the call's end)."""
    from xgrammar.structural_tag import JSONSchemaFormat

    return "excludes" in JSONSchemaFormat.model_fields


def _json_excludes_in(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("type") == "json_schema" and node.get("excludes"):
            return True
        return any(_json_excludes_in(value) for value in node.values())
    if isinstance(node, list):
        return any(_json_excludes_in(value) for value in node)
    return False


def _joined(first: ToolStreamingParseResult, second: ToolStreamingParseResult) -> ToolStreamingParseResult:
    """What the prompt gave (a call it left open) and the first chunk's result, as one."""
    if not first.calls and not first.normal_text:
        return second
    return ToolStreamingParseResult(
        normal_text=first.normal_text + second.normal_text, calls=first.calls + second.calls
    )


register()
