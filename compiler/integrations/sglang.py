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
- templates SGLang's vendored interpreter cannot parse (the python-call-list content parser) are
  served; SGLang's auxiliary methods read a copy whose calls are plain text (same delimiters).
Calls to a function not in the request's tools are dropped, as SGLang drops them (unless
`SGLANG_FORWARD_UNKNOWN_TOOLS`). Constrained decoding modes (`grammar_start`, `constrained`) are
passed to SGLang's methods that build constraints; parsing itself treats the output as unconstrained.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from typing import Any, Sequence

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

import rtcompile

from .serving_common import (
    CONTENT_FIELD,
    TOOL_FIELD,
    Routed,
    TemplateStream,
    every_field_optional,
    pydantic_slot_setters,
    resolve_template,
    same_as_validated,
    served_fields,
    thinking_named,
    verbatim_tool_field,
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


def _sglang_view(template: dict) -> dict:
    """The template as SGLang's own classes read it, for the methods inherited from them (think
    tokens, message starts, constraints): reasoning named `thinking`, and a field whose content
    parser SGLang's vendored interpreter lacks read as plain text (its delimiters are unchanged)."""
    view = thinking_named(template)
    for _ in range(len(view["fields"]) + 1):
        try:
            validate_response_template_for_serving(view)
            return view
        except ValueError as error:
            broken = next(
                (
                    name
                    for name in view["fields"]
                    if f"Field {name!r}: unknown content parser" in str(error)
                ),
                None,
            )
            if broken is None:
                raise
            view = copy.deepcopy(view)
            spec = view["fields"][broken]
            for key in ("content", "content_args", "transform", "transform_each", "value_parser"):
                spec.pop(key, None)
    raise ValueError("response_template: no copy SGLang can read")  # pragma: no cover


def _key(template: dict) -> str:
    return json.dumps(template, sort_keys=True, ensure_ascii=False, default=repr)


class _Plans:
    """The templates each detector parses with, compiled once per template."""

    def __init__(self, template: dict) -> None:
        self.reasoning_field = served_fields(template)
        fields = template["fields"]
        anchors = {
            key: template[key]
            for key in ("start_anchor", "start_anchor_pattern")
            if key in template
        }
        # The reasoning detector: reasoning apart, the rest normal text, tool calls verbatim (the
        # tool detector reads them from the normal text).
        reasoning = every_field_optional(template, implicit_content=CONTENT_FIELD)
        if TOOL_FIELD in fields:
            reasoning["fields"][TOOL_FIELD] = verbatim_tool_field(fields[TOOL_FIELD])
        self.reasoning = reasoning
        self.reasoning_module = rtcompile.load(reasoning)
        # The tool detector: calls, and everything else normal text.
        self.tools = None
        self.tools_module = None
        if TOOL_FIELD in fields:
            tool = {**copy.deepcopy(fields[TOOL_FIELD]), "optional": True}
            self.tools = {**anchors, "fields": {_NORMAL: {}, TOOL_FIELD: tool}}
            self.tools_module = rtcompile.load(self.tools)
        self._template = copy.deepcopy(template)  # (the caller's may change later)
        self._sglang_view: dict | None = None

    @property
    def sglang_view(self) -> dict:
        """The copy SGLang's own classes read, made once (a deep copy per detector was most of
        what building one cost); raises ValueError if SGLang cannot read the template."""
        if self._sglang_view is None:
            self._sglang_view = _sglang_view(self._template)
        return self._sglang_view


_PLANS: dict[str, _Plans] = {}
# The template objects seen last (id -> (the object, a copy as it was, its plans)): SGLang builds
# two detectors per request from the tokenizer's one template, and serializing it to find its
# plans took longer than the rest of building a detector. The copy catches a template changed
# in place; holding the object keeps its id from being reused.
_RECENT: dict[int, tuple[dict, dict, _Plans]] = {}
_RECENT_LIMIT = 16


def _plans_for(template: dict) -> _Plans:
    recent = _RECENT.get(id(template))
    if recent is not None and recent[0] is template and recent[1] == template:
        return recent[2]
    key = _key(template)
    plans = _PLANS.get(key)
    if plans is None:
        plans = _PLANS.setdefault(key, _Plans(template))
    if len(_RECENT) >= _RECENT_LIMIT:
        _RECENT.clear()
    _RECENT[id(template)] = (template, copy.deepcopy(template), plans)
    return plans


def _tool_dicts(tools: Sequence[Any] | None) -> list[dict]:
    """What the parser reads of the request's tools (it casts arguments by their schemas): each
    function's name and parameters. Read off SGLang's `Tool` objects, whose `model_dump` copies
    the whole tool (25 us for four tools, once per request); dicts are taken as they are."""
    result = []
    for tool in tools or ():
        function = getattr(tool, "function", None)
        if not isinstance(tool, dict) and isinstance(getattr(function, "name", None), str):
            tool = {
                "type": "function",
                "function": {"name": function.name, "parameters": getattr(function, "parameters", None)},
            }
        elif hasattr(tool, "model_dump"):
            tool = tool.model_dump(exclude_none=True)
        if isinstance(tool, dict):
            result.append(tool)
    return result


class _KeptSignature:
    """SGLang's `ReasoningParser` and `FunctionCallParser` read their detector class's signature
    on every request (`inspect.signature`, up to three times: 30-40 us each for these classes);
    each class keeps its own, computed once, where `inspect.signature` looks first."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = None  # (not the parent's: inspect computes this class's own)
        cls.__signature__ = inspect.signature(cls)


# ---- reasoning ----------------------------------------------------------------------------------


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
        self.plans = _plans_for(template)  # validates and compiles now
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
        self._stream = self._new_stream()
        self._read_text = self._stream.read_text
        self._pending_reasoning = ""  # stream_reasoning=False: sent when the region closes
        self._open_reasoning = ""  # force_nonempty_content: reasoning left open is content
        self._plain = self.stream_reasoning and not self._force_nonempty_content
        # The common chunk, more text of the reasoning or the content, as it is written: its
        # result straight from what the parser read (field -> the result for that text).
        self._text_results: dict[str, Any] = {}
        if self._plain:
            self._text_results[CONTENT_FIELD] = _normal_result
            if self.plans.reasoning_field is not None:
                self._text_results[self.plans.reasoning_field] = _reasoning_result

    def _new_stream(self) -> TemplateStream:
        plans = self.plans
        keys = {CONTENT_FIELD: _NORMAL}
        if plans.reasoning_field is not None:
            keys[plans.reasoning_field] = _REASONING
        return TemplateStream(
            plans.reasoning,
            prefix=self._rtc_prefix,
            text_keys=keys,
            verbatim_keys=(
                {TOOL_FIELD: _NORMAL} if TOOL_FIELD in plans.reasoning["fields"] else None
            ),
            module=plans.reasoning_module,
        )

    def detect_and_parse(self, text: str) -> ReasoningStreamingParseResult:
        stream = self._new_stream()
        routed = [stream.from_prefix(), stream.feed(text), stream.finish()]
        reasoning = "".join(r.text.get(_REASONING, "") for r in routed)
        normal = "".join(r.text.get(_NORMAL, "") for r in routed)
        if self._force_nonempty_content and not normal:
            normal, reasoning = reasoning, ""
        return ReasoningStreamingParseResult(normal_text=normal, reasoning_text=reasoning)

    def parse_streaming_increment(self, new_text: str) -> ReasoningStreamingParseResult:
        stream = self._stream  # (TemplateStream.feed_text, its first step taken here)
        taken = self._read_text(new_text) if stream.reads_text_first else None
        if taken is None:
            routed = stream.feed_unread(new_text)
        else:
            result = self._text_results.get(taken[0])
            if result is not None:
                return result(taken[1])
            routed = stream.after_read(new_text, taken)
        if type(routed) is tuple:  # more text of one field
            if self._plain:  # the common case: text as it is written
                key, text = routed
                if key == _REASONING:
                    return _reasoning_result(text)
                return _normal_result(text if key == _NORMAL else "")
            routed = Routed({routed[0]: routed[1]}) if routed[1] else Routed()
        if self._plain and not routed.closed:
            text = routed.text
            return ReasoningStreamingParseResult(text.get(_NORMAL), text.get(_REASONING))
        return self._result(routed, at_end=False)

    def finish(self) -> ReasoningStreamingParseResult:
        return self._result(self._stream.finish(), at_end=True)

    def _result(self, routed, *, at_end: bool) -> ReasoningStreamingParseResult:
        reasoning = routed.text.get(_REASONING, "")
        field = self.plans.reasoning_field
        closed = field is not None and field in routed.closed
        if self._force_nonempty_content:
            self._open_reasoning += reasoning
        if not self.stream_reasoning:
            self._pending_reasoning += reasoning
            reasoning = ""
            if closed:
                reasoning, self._pending_reasoning = self._pending_reasoning, ""
        normal = routed.text.get(_NORMAL, "")
        if self._force_nonempty_content and closed:
            unclosed, self._open_reasoning = self._open_reasoning, ""
            if at_end:  # reasoning the output left open is returned as content, too
                normal += unclosed
                reasoning = ""
        return ReasoningStreamingParseResult(normal_text=normal, reasoning_text=reasoning)


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


# ---- tool calls ---------------------------------------------------------------------------------


def _validated_text_result(text: str) -> ToolStreamingParseResult:
    return ToolStreamingParseResult(normal_text=text)


def _text_result_factory() -> Any:
    """`ToolStreamingParseResult(normal_text=text)`, the tool detector's answer to most chunks,
    made without pydantic's validation (about 2 us a chunk, more than the parse): the instance
    state pydantic itself builds. Used only if, built both ways, the two are the same (checked
    here, once, against the pydantic installed); otherwise the validated constructor."""
    new_instance = object.__new__
    setters = pydantic_slot_setters(ToolStreamingParseResult)
    if setters is None:
        return _validated_text_result
    set_state, set_fields_set, set_extra, set_private = setters

    def text_result(text: str) -> ToolStreamingParseResult:
        result = new_instance(ToolStreamingParseResult)
        set_state(result, {"normal_text": text, "calls": []})
        set_fields_set(result, {"normal_text"})
        set_extra(result, None)
        set_private(result, None)
        return result

    try:
        for text in ("", "x<y"):
            if not same_as_validated(text_result(text), ToolStreamingParseResult(normal_text=text)):
                return _validated_text_result
    except Exception:  # a pydantic whose instances are laid out otherwise
        return _validated_text_result
    return text_result


_text_result = _text_result_factory()


def _unvalidated_builder(model: type, samples: Sequence[tuple]) -> Any:
    """`model(*values)` for every field of `model` given, in its declared order (as the tool
    detector builds its call items and results), without pydantic's validation: the instance
    state pydantic itself builds for them. Used only if, for each of `samples`, the two are the
    same (checked here, once, against the pydantic installed); otherwise the validated
    constructor. The values must be what validation would keep as they are (ours are)."""
    names = tuple(model.model_fields)

    def validated(*values: Any) -> Any:
        return model(**dict(zip(names, values)))

    setters = pydantic_slot_setters(model)
    if setters is None:
        return validated
    set_state, set_fields_set, set_extra, set_private = setters
    new_instance = object.__new__
    every_field = frozenset(names)

    def build(*values: Any) -> Any:
        result = new_instance(model)
        set_state(result, dict(zip(names, values)))
        set_fields_set(result, set(every_field))
        set_extra(result, None)
        set_private(result, None)
        return result

    try:
        for values in samples:
            if len(values) != len(names) or not same_as_validated(build(*values), validated(*values)):
                return validated
    except Exception:  # a pydantic whose instances are laid out otherwise
        return validated
    return build


# ToolCallItem(tool_index, name, parameters) and ToolStreamingParseResult(normal_text, calls), as
# _emit builds them for every chunk that announces a call or sends some of its arguments.
_call_item = _unvalidated_builder(ToolCallItem, [(0, "get_weather", '{"a": 1}'), (3, None, "")])
_calls_result = _unvalidated_builder(
    ToolStreamingParseResult, [("x<y", [_call_item(0, "f", "{}")]), ("", [])]
)


class RtcompileToolDetector(_KeptSignature, ResponseTemplateToolDetector):
    """`--tool-call-parser rtcompile`: tool calls out of the normal text, parsed by rtcompile; a
    call's name as soon as it is known, its arguments as they are written."""

    def __init__(
        self,
        tokenizer: Any = None,
        response_template: Any = None,
        prefix: str = "",
        tools: list | None = None,
        constrained: bool = False,
    ) -> None:
        template, self.template_origin = resolve_template(
            tokenizer, response_template, environment_variable=TEMPLATE_ENVIRONMENT_VARIABLE
        )
        self.plans = _plans_for(template)
        if self.plans.tools is None:
            raise ValueError(f"response_template has no {TOOL_FIELD!r} field")
        super().__init__(
            response_template=self.plans.sglang_view,
            prefix=prefix,
            tools=tools,
            constrained=constrained,
        )
        self.response_template = template
        self._rtc_prefix = prefix
        self._stream: TemplateStream | None = None
        self._call_slots: dict[int, int | None] = {}  # rtcompile's call index -> tool_index
        self._failed_slots: set[int | None] = set()  # announced calls whose region failed
        self.prev_tool_call_arr = []
        self.streamed_args_for_tool = []

    def _new_stream(self, tools: Sequence[Any] | None) -> TemplateStream:
        return TemplateStream(
            self.plans.tools,
            prefix=self._rtc_prefix,
            tools=_tool_dicts(tools),
            text_keys={_NORMAL: _NORMAL},
            tool_field=TOOL_FIELD,
            failed_key=_NORMAL,
            module=self.plans.tools_module,
        )

    def has_tool_call(self, text: str) -> bool:
        parser = self.plans.tools_module.ResponseParser(self._rtc_prefix, errors="keep")
        events = parser.initial_events + parser.feed(text) + parser.finalize()[1]
        return any(e["type"] == "region_open" and e["field"] == TOOL_FIELD for e in events)

    def detect_and_parse(self, text: str, tools: list) -> ToolStreamingParseResult:
        stream = self._new_stream(tools)
        accepted = self._accepted_names(tools)
        calls: dict[int, ToolCallItem] = {}
        slots: dict[int, int | None] = {}
        normal = []
        for routed in (stream.from_prefix(), stream.feed(text), stream.finish()):
            normal.append(routed.text.get(_NORMAL, ""))
            for entry in routed.calls:
                if "name" in entry:
                    keep = accepted(entry["name"])
                    slots[entry["index"]] = len(calls) if keep else None
                    if keep:
                        calls[len(calls)] = ToolCallItem(
                            tool_index=len(calls), name=entry["name"], parameters=""
                        )
                slot = slots.get(entry["index"])
                if slot is not None:
                    calls[slot].parameters += entry["arguments"]
        return ToolStreamingParseResult(normal_text="".join(normal), calls=list(calls.values()))

    def _start(self, tools: list, routed_first: Any) -> ToolStreamingParseResult:
        """The stream, made on the first chunk (or at the end, if none came), with the tools
        SGLang passes then; what the prefix gave, then `routed_first(stream)`."""
        self._stream = self._new_stream(tools)
        self._read_text = self._stream.read_text
        self._tool_indices = self._get_tool_indices(tools)
        initial = self._stream.from_prefix()
        if not initial.calls:  # (the usual prefix: it left no call open)
            return self._emit(routed_first(self._stream))
        first = self._emit(initial)
        rest = self._emit(routed_first(self._stream))
        return ToolStreamingParseResult(
            normal_text=first.normal_text + rest.normal_text, calls=first.calls + rest.calls
        )

    def parse_streaming_increment(self, new_text: str, tools: list) -> ToolStreamingParseResult:
        if self._stream is None:
            return self._start(tools, lambda stream: stream.feed(new_text))
        stream = self._stream  # (TemplateStream.feed_text, its first step taken here)
        taken = self._read_text(new_text) if stream.reads_text_first else None
        if taken is None:
            routed = stream.feed_unread(new_text)
        elif taken[0] == _NORMAL:  # more normal text (the tools plan's field is named so)
            return _text_result(taken[1])
        else:
            routed = stream.after_read(new_text, taken)
        if type(routed) is tuple:  # more text of one field: normal text, or nothing to send
            key, text = routed
            return _text_result(text if key == _NORMAL else "")
        return self._emit(routed)

    def finish(self, tools: list) -> ToolStreamingParseResult:
        if self._stream is None:  # nothing was streamed: the prefix alone, then the end
            return self._start(tools, TemplateStream.finish)
        return self._emit(self._stream.finish())

    def _accepted_names(self, tools: list):
        indices = self._get_tool_indices(tools)
        forward = envs.SGLANG_FORWARD_UNKNOWN_TOOLS.get()

        def accepted(name: str) -> bool:
            if name in indices or forward:
                return True
            logger.warning("Model attempted to call undefined function: %s", name)
            return False

        return accepted

    def _emit(self, routed) -> ToolStreamingParseResult:
        if not routed.calls and not routed.failed and not routed.closed:  # text, or nothing
            return _text_result(routed.text.get(_NORMAL, ""))
        items: list[ToolCallItem] = []
        slots = self._call_slots
        for entry in routed.calls:
            index = entry["index"]
            if "name" in entry:
                name = entry["name"]
                if name in self._tool_indices or envs.SGLANG_FORWARD_UNKNOWN_TOOLS.get():
                    slot = slots[index] = len(self.prev_tool_call_arr)
                    self.prev_tool_call_arr.append({"name": name, "arguments": ""})
                    self.streamed_args_for_tool.append(entry["arguments"])
                    self.incomplete_tool_call_indices.add(slot)
                    self.current_tool_id = slot
                    self.current_tool_name_sent = True
                    items.append(_call_item(slot, name, entry["arguments"]))
                else:
                    logger.warning("Model attempted to call undefined function: %s", name)
                    slots[index] = None
                continue
            slot = slots.get(index)
            if slot is None:
                continue
            self.streamed_args_for_tool[slot] += entry["arguments"]
            if items and items[-1].tool_index == slot:
                items[-1].parameters += entry["arguments"]
            else:
                items.append(_call_item(slot, None, entry["arguments"]))
        if routed.failed:
            self._failed_slots.update(slots.get(index) for index in routed.failed)
        if TOOL_FIELD in routed.closed:
            self._complete_calls()
        return _calls_result(routed.text.get(_NORMAL, ""), items)

    def _complete_calls(self) -> None:
        """Calls whose region closed: their arguments as SGLang's serving reads them at the end of
        the stream (it sends whatever of `json.dumps(arguments)` was not streamed yet)."""
        for slot in list(self.incomplete_tool_call_indices):
            if slot in self._failed_slots:
                continue  # announced, then its region failed: it stays incomplete
            try:
                self.prev_tool_call_arr[slot]["arguments"] = json.loads(
                    self.streamed_args_for_tool[slot]
                )
            except ValueError:
                continue
            self.incomplete_tool_call_indices.discard(slot)
        self.current_tool_id = len(self.prev_tool_call_arr)
        self.current_tool_name_sent = False


register()
