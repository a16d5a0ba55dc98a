"""`RtcompileParser`: vLLM's unified `Parser` over rtcompile's compiled response-template parsers.

vLLM constructs it wherever it constructs `vllm.parser.response_template.ResponseTemplateParser`
(the same constructor arguments; `parse`, `parse_delta`, `set_prompt_token_ids`, `adjust_request`,
`is_reasoning_end`, `count_reasoning_tokens`), selected by `--reasoning-parser rtcompile` and
`--tool-call-parser rtcompile` (with `--enable-auto-tool-choice`) through the plugin in
`rtcompile.integrations.vllm`.

The template, first found wins:
1. the `response_template=` constructor argument (vLLM's own override);
2. the tokenizer's `response_template` (attribute, else `init_kwargs`), as vLLM reads it;
3. rtcompile's bundled template for the model's `model_type` (`rtcompile.template_for`), read from
   vLLM's model config, else from the `config.json` beside the tokenizer;
4. the environment variable `RTCOMPILE_VLLM_TEMPLATE`: a bundled template's name or `model_type`,
   or a path to a template JSON, a `tokenizer_config.json` or a tokenizer directory.
A template may name its reasoning field `reasoning_content` (transformers' templates) or `thinking`
(vLLM's); other field names are refused, as vLLM refuses them, since their text would reach no
client.

Streaming (`parse_delta`): reasoning and content deltas as the model writes them; a tool call's
name (with its id, by vLLM's id policy for the request) as soon as the parser knows it, and its
arguments as JSON fragments while the model writes them: `rtcompile.integrations.openai_stream`'s
`OpenAIStream` contract (the fragments of one call concatenate to JSON that loads to that call's
arguments), sent as vLLM's own `DeltaMessage` / `DeltaToolCall`. `parse` gives the same results as
the stream, accumulated.

Where this differs from vLLM's class by design (README, "vLLM"):
- vLLM sends each call whole when its region closes; here the name and the arguments go out
  incrementally.
- A malformed or truncated call: vLLM drops it (with a warning); here nothing the model wrote is
  lost: a call already announced is closed with the arguments complete so far, and the region's
  raw text is sent as content.
- Content and reasoning fields with another content parser than `text`, a transform or `join`
  (vLLM refuses those templates) are served, as the model wrote them (reasoning and content are
  always the regions' text, unstripped, exactly as vLLM's class sends them).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from openai.types.responses import ToolChoiceCustom, ToolChoiceFunction
from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionNamedToolChoiceParam
from vllm.exceptions import VLLMValidationError
from vllm.parser.abstract_parser import Parser
from vllm.parser.response_template import (
    ResponseTemplateReasoningParser,
    ResponseTemplateToolParser,
)
from vllm.reasoning.abs_reasoning_parsers import ReasoningParser
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.tool_parsers.utils import iter_response_function_tool_dicts

import rtcompile
from rtcompile.integrations.openai_stream import OpenAIStream
from rtcompile.integrations.serving_common import (
    CONTENT_FIELD,
    OPENER_GROUP,
    TOOL_FIELD,
    RecordingParser,
    closers_ending_in_anchor,
    has_opener,
    last_boundary,
    literals,
    pydantic_slot_setters,
    same_as_validated,
    served_fields,
    verbatim_tool_field,
)
from rtcompile.integrations.serving_common import resolve_template as shared_resolve_template

if TYPE_CHECKING:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

logger = logging.getLogger(__name__)

__all__ = [
    "RtcompileParser",
    "RtcompileReasoningParser",
    "RtcompileToolParser",
    "TEMPLATE_ENVIRONMENT_VARIABLE",
    "resolve_template",
]

TEMPLATE_ENVIRONMENT_VARIABLE = "RTCOMPILE_VLLM_TEMPLATE"


# ---- the template ---------------------------------------------------------------------------------


def resolve_template(
    tokenizer: Any, template: Any = None, model_config: Any = None
) -> tuple[dict, str]:
    """(the response template, where it came from), in the order the module docstring gives
    (serving_common.resolve_template, with the model type vLLM's model config names, if any).
    Raises `ValueError` naming every place looked at when there is none."""
    model_type = getattr(getattr(model_config, "hf_config", None), "model_type", None)
    return shared_resolve_template(
        tokenizer,
        template,
        model_type=model_type if isinstance(model_type, str) else None,
        environment_variable=TEMPLATE_ENVIRONMENT_VARIABLE,
    )


class _Plan:
    """What one template (and one tool-parsing mode) needs at parse time: the compiled module of
    the template as served, and the names of its fields. Built once per template and mode."""

    def __init__(self, template: dict, parse_tools: bool):
        self.reasoning_field = served_fields(template)
        self.has_tools = TOOL_FIELD in template["fields"]
        self.served = _served_template(template, parse_tools)
        # tool parsing off: the tool-call field's text goes out as content, with its delimiters:
        # (opener, closer) where literal, "" where a pattern (see _Generation._pass_through)
        self.passthrough: tuple[str, str] | None = None
        if not parse_tools and TOOL_FIELD in self.served["fields"]:
            spec = self.served["fields"][TOOL_FIELD]
            self.passthrough = tuple(  # type: ignore[assignment]
                spec[key] if isinstance(spec.get(key), str) else "" for key in ("open", "close")
            )
        self.module = rtcompile.load(self.served)
        fields = self.served["fields"]
        self.reasoning_spec = fields.get(self.reasoning_field) if self.reasoning_field else None
        self.open_fields = {name for name, spec in fields.items() if has_opener(spec)}
        # (vLLM completes such closers the same way)
        self.closers_ending_in_anchor = closers_ending_in_anchor(self.served)


def _served_template(template: dict, parse_tools: bool) -> dict:
    """The template as a server parses it: with tool parsing off, the tool-call field as plain
    text (`verbatim_tool_field`); every field optional (a response need not write any field); a
    content field for the text outside every region when all fields have openers, as vLLM adds it.
    The template itself when nothing changes, so bundled templates keep their checked-in parsers."""
    fields = template["fields"]
    plain_tools = not parse_tools and TOOL_FIELD in fields
    add_content = CONTENT_FIELD not in fields and all(has_opener(f) for f in fields.values() if isinstance(f, dict))
    required = [name for name, f in fields.items() if isinstance(f, dict) and f.get("optional") is False]
    if not (plain_tools or add_content or required):
        return template
    served = copy.deepcopy(template)
    if plain_tools:
        served["fields"][TOOL_FIELD] = verbatim_tool_field(served["fields"][TOOL_FIELD])
    if add_content:
        served["fields"][CONTENT_FIELD] = {}
    for name in required:
        if name in served["fields"]:
            served["fields"][name]["optional"] = True
    return served


_PLANS: dict[tuple[str, bool], _Plan] = {}


def _plan_for(template: dict, parse_tools: bool) -> _Plan:
    key = (json.dumps(template, sort_keys=True, ensure_ascii=False, default=repr), parse_tools)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.setdefault(key, _Plan(template, parse_tools))
    return plan


# ---- requests -------------------------------------------------------------------------------------


def _tool_dict(tool: Any) -> dict:
    if hasattr(tool, "model_dump"):
        tool = tool.model_dump(exclude_none=True)
    return tool if isinstance(tool, dict) else {}


def _as_tool_dicts(tools: Sequence[Any] | None) -> list[dict]:
    """Chat tools as dicts, plus Responses function tools (namespaces flattened by vLLM)."""
    tools = list(tools or ())
    result = iter_response_function_tool_dicts(tools)
    result.extend(d for d in map(_tool_dict, tools) if isinstance(d.get("function"), dict))
    return result


def _tool_is_strict(tool: Any) -> bool:
    tool = _tool_dict(tool)
    function = tool.get("function")
    return bool(tool.get("strict") or (isinstance(function, dict) and function.get("strict")))


def _is_named_tool_choice(request: Any) -> bool:
    return isinstance(
        request.tool_choice,
        (ToolChoiceFunction, ToolChoiceCustom, ChatCompletionNamedToolChoiceParam),
    )


def _tool_parsing_enabled(request: Any, *, enable_auto_tools: bool) -> bool:
    if request.tool_choice == "none":
        return False
    if request.tool_choice == "required" or _is_named_tool_choice(request):
        return True
    return enable_auto_tools and request.tool_choice in (None, "auto")


def _unsupported_tool_guarantee(request: Any) -> tuple[str, str] | None:
    """The first tool guarantee the request asks for that parsing alone cannot enforce (a grammar
    would be needed), with the request parameter that asked for it: what vLLM's class refuses."""
    if any(_tool_is_strict(tool) for tool in request.tools or ()):
        return "strict tools", "tools"
    if request.tool_choice == "required":
        return "required tool choice", "tool_choice"
    if _is_named_tool_choice(request):
        return "named tool choice", "tool_choice"
    if getattr(request, "parallel_tool_calls", True) is False:
        return "parallel_tool_calls=False", "parallel_tool_calls"
    return None


def _decode(tokenizer: Any, token_ids: Sequence[int]) -> str:
    try:
        return tokenizer.decode(
            token_ids,
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
            spaces_between_special_tokens=False,
        )
    except TypeError:
        return tokenizer.decode(token_ids, skip_special_tokens=False)


# ---- one generation -------------------------------------------------------------------------------


class _Generation:
    """One generation: rtcompile's parser (errors="keep": nothing raises mid-stream, nothing is
    lost), turned into vLLM `DeltaMessage`s.

    Reasoning and content go out as the model wrote them (the regions' text, unstripped, as vLLM's
    class sends it); tool calls come from an `OpenAIStream` over the same parser: the name first,
    then the arguments as fragments. A tool-call region that fails to parse (malformed, or cut off
    by the end of the output) has its text sent as content, after what was announced of it."""

    def __init__(
        self,
        plan: _Plan,
        *,
        prefix: str,
        tools: list[dict],
        parse_reasoning: bool,
        include_reasoning: bool,
        new_tool_call_id: Any,
    ) -> None:
        self.plan = plan
        self.new_tool_call_id = new_tool_call_id
        self.parser = plan.module.ResponseParser(
            prefix,
            tools=tools or None,
            errors="keep",
            report_closers=plan.passthrough is not None,  # (what a closer pattern matched)
            eager=True,  # (a delimiter complete at a chunk's end commits in that chunk)
        )
        self.recorder = RecordingParser(self.parser)
        # Text fields are routed here (raw); the stream only builds the calls.
        self.stream = OpenAIStream(
            self.recorder,
            plan.served,
            content_field=None,
            reasoning_field="",
            call_id=_no_id,  # ids follow vLLM's policy: set where a call is announced
        )
        reasoning = plan.reasoning_field
        # Where each field's text goes: without a reasoning parser vLLM sends reasoning as content.
        self.text_keys: dict[str, str | None] = {CONTENT_FIELD: "content"}
        if reasoning is not None:
            self.text_keys[reasoning] = (
                ("reasoning" if include_reasoning else None) if parse_reasoning else "content"
            )
        self.tool_text: list[str] = []  # the open tool-call region's text so far
        self.opener_sent = False  # tool parsing off: the open region's opener went out as content
        self.wrote = False
        self.finished = False
        self.tail = ""  # the output's last characters, for a closer cut at the anchor
        self._tail_length = max(
            (len(closer) for pairs in plan.closers_ending_in_anchor.values() for closer, _ in pairs),
            default=0,
        )
        # feed's common case applies: the output wrote something (so `wrote` is already set), is
        # not finished, and no tail of it is kept (set by _feed)
        self.fast = False
        self.feed_text = self.parser.feed_text
        # What a common chunk (one that feed_text takes) of a sent text field becomes; the chunks
        # of other fields go through the stream (stream_chunk), those of unsent ones nowhere.
        self.chunk_delta: dict[str, Any] = {}
        for field, key in self.text_keys.items():
            self.chunk_delta[field] = _send_nothing if key is None else _TEXT_DELTAS[key]

    def feed(self, text: str, finished: bool) -> DeltaMessage | None:
        if self.fast and not finished:
            taken = self.feed_text(text)
            if taken is not None:
                field, read = taken
                if not read:  # (a whitespace run held back: it may start a delimiter)
                    return None
                make = self.chunk_delta.get(field)
                return make(read) if make is not None else self.stream_chunk(field, read)
            if text:
                return self.feed_more(text)
        return self._feed(text, finished)

    def feed_more(self, text: str) -> DeltaMessage | None:
        """More output (not the end of it) that feed_text did not take: through the parser."""
        events = self.parser.feed_declined(text)
        if not events:
            return None
        if len(events) == 1:
            event = events[0]
            if event["type"] == "region_chunk":
                make = self.chunk_delta.get(event["field"])
                if make is not None:  # (a text field's: the stream reads only a call's)
                    chunk = event["text"]
                    return make(chunk) if chunk else None
        return self.through_stream(text, events)

    def stream_chunk(self, field: str, read: str) -> DeltaMessage | None:
        """Text feed_text read in a field the stream reads (a tool call's): its one event."""
        deltas = self.stream.read(field, read)
        if not deltas and field == TOOL_FIELD and self.plan.passthrough is None:
            self.tool_text.append(read)  # (what _message does with it; most of a call's chunks)
            return None
        return self._message([self.parser.chunk_event(read)], deltas)

    def through_stream(self, text: str, events: list[dict]) -> DeltaMessage | None:
        """The parser's events for `text`, through the tool-call stream, as one message."""
        self.recorder.pending = events
        return self._message(events, self.stream.feed(text))

    def _feed(self, text: str, finished: bool) -> DeltaMessage | None:
        if self.finished:
            return None
        if text:
            self.wrote = True
            self.fast = not self._tail_length
            if self._tail_length:
                self.tail = (self.tail + text)[-self._tail_length :]
            events = self.parser.feed(text)
            self.recorder.pending = events
            calls = self.stream.feed(text)
        else:
            calls, events = [], []
        if finished:
            self.finished = True
            self.fast = False
            # vLLM finalizes only an output that wrote something; so does this.
            if self.wrote:
                recorder = self.recorder
                rest = self._closer_rest()
                if rest:
                    calls = calls + self.stream.feed(rest)
                    events = events + recorder.events
                calls = calls + self.stream.finish()
                events = events + recorder.events
                for note in self.stream.divergences:
                    logger.debug("rtcompile: %s", note)
        return self._message(events, calls)

    def _closer_rest(self) -> str:
        """The rest of a closer the output stopped in, when only the next message's start anchor
        is missing (the generation ends before the next message starts)."""
        if not self._tail_length:
            return ""
        for closer, anchor in self.plan.closers_ending_in_anchor.get(
            self.recorder.current_field, ()
        ):
            for cut in range(len(closer) - 1, len(closer) - len(anchor) - 1, -1):
                if self.tail.endswith(closer[:cut]):
                    return closer[cut:]
        return ""

    def _message(self, events: list[dict], deltas: list[dict]) -> DeltaMessage | None:
        text: dict[str, list[str]] = {"content": [], "reasoning": []}
        text_keys = self.text_keys
        passthrough = self.plan.passthrough
        last = last_boundary(events)  # (a region opened there is open now: see _pass_through)
        for position, event in enumerate(events):
            field = event["field"]
            kind = event["type"]
            if passthrough is not None and field == TOOL_FIELD:
                self._pass_through(event, text["content"], live=position == last)
            elif field == TOOL_FIELD:
                if kind == "region_chunk":
                    self.tool_text.append(event["text"])
                elif kind == "region_open":
                    self.tool_text = []
                elif "error" in event:  # nothing the model wrote is dropped
                    text["content"].append("".join(self.tool_text))
            elif kind == "region_chunk":
                key = text_keys.get(field)
                if key is not None:
                    text[key].append(event["text"])
        calls: list[dict] = []
        for delta in deltas:
            for entry in delta.get("tool_calls", ()):  # (content: the failed regions, above)
                self._add_call_entry(calls, entry)
        fields: dict[str, Any] = {}
        for key, pieces in text.items():
            joined = "".join(pieces)
            if joined:
                fields[key] = joined
        if calls:
            fields["tool_calls"] = [_delta_tool_call(call) for call in calls]
        return DeltaMessage(**fields) if fields else None

    def _pass_through(self, event: dict, content: list[str], live: bool) -> None:
        """Tool parsing off: a tool-call region goes out as content, delimiters included. What an
        opener pattern matched is read from the parser's captures while the region is open (`live`:
        no other region opened or closed after it in this feed), else from the region's value at
        its close; until it is known, the region's text waits."""
        opener, closer = self.plan.passthrough
        kind = event["type"]
        if kind == "region_open":
            self.tool_text = []
            self.opener_sent = bool(opener)
            if opener:
                content.append(opener)
            elif live and self.parser.current_field == TOOL_FIELD:
                matched = self.parser.region_captures.get(OPENER_GROUP)
                if isinstance(matched, str):
                    content.append(matched)
                    self.opener_sent = True
        elif kind == "region_chunk":
            if self.opener_sent:
                content.append(event["text"])
            else:
                self.tool_text.append(event["text"])
        else:
            if not self.opener_sent:
                value = event.get("value")
                matched = value.get(OPENER_GROUP) if isinstance(value, dict) else None
                content.append((matched or "") + "".join(self.tool_text))
            self.opener_sent = False
            # a literal closer as it is; what a pattern matched, reported with the close ("" if
            # the end closed the region)
            content.append(closer or event.get("closer", ""))

    def _add_call_entry(self, calls: list[dict], entry: dict) -> None:
        function = entry.get("function") or {}
        arguments = function.get("arguments") or ""
        if "id" in entry:  # a call's first entry: its name, and its id by vLLM's policy
            name = function.get("name") or ""
            calls.append(
                {
                    "index": entry["index"],
                    "id": self.new_tool_call_id(name),
                    "type": "function",
                    "name": name,
                    "arguments": [arguments],
                }
            )
        elif calls and calls[-1]["index"] == entry["index"]:
            calls[-1]["arguments"].append(arguments)
        else:
            calls.append({"index": entry["index"], "arguments": [arguments]})


def _delta_tool_call(call: dict) -> DeltaToolCall:
    """Only the keys this entry carries are set: vLLM serializes chunks with exclude_unset, so an
    argument fragment goes out as `{"index", "function": {"arguments"}}`, without null ids."""
    arguments = "".join(call["arguments"])
    if "id" not in call:
        return DeltaToolCall(index=call["index"], function=DeltaFunctionCall(arguments=arguments))
    return DeltaToolCall(
        index=call["index"],
        id=call["id"],
        type="function",
        function=DeltaFunctionCall(name=call["name"], arguments=arguments),
    )


def _send_nothing(text: str) -> None:
    return None


_VALIDATED_TEXT_DELTAS = {
    "content": lambda text: DeltaMessage(content=text),
    "reasoning": lambda text: DeltaMessage(reasoning=text),
}


def _text_delta_makers() -> dict[str, Any]:
    """Per text key ("content", "reasoning"), what makes the `DeltaMessage` of one text chunk for
    the common chunk: without pydantic's validation (which costs several times the parse of the
    chunk), the instance state pydantic itself builds for `DeltaMessage(content=text)`. Used only
    if, built both ways, the two are equal and serialize alike (checked here, once, against the
    pydantic installed); otherwise the validated constructor."""
    validated = _VALIDATED_TEXT_DELTAS
    new_instance = object.__new__
    setters = pydantic_slot_setters(DeltaMessage)
    if setters is None:
        return validated
    set_state, set_fields_set, set_extra, set_private = setters

    def content_delta(text: str) -> DeltaMessage:
        message = new_instance(DeltaMessage)
        set_state(message, {"role": None, "content": text, "reasoning": None, "tool_calls": []})
        set_fields_set(message, {"content"})
        set_extra(message, {})
        set_private(message, None)
        return message

    def reasoning_delta(text: str) -> DeltaMessage:
        message = new_instance(DeltaMessage)
        set_state(message, {"role": None, "content": None, "reasoning": text, "tool_calls": []})
        set_fields_set(message, {"reasoning"})
        set_extra(message, {})
        set_private(message, None)
        return message

    fast = {"content": content_delta, "reasoning": reasoning_delta}
    try:
        for key, make in fast.items():
            if not same_as_validated(make("x<y"), validated[key]("x<y")):
                return validated
    except Exception:  # a pydantic whose instances are laid out otherwise
        return validated
    return fast


_TEXT_DELTAS = _text_delta_makers()


def _no_id(index: int) -> str:
    return ""


class _ReasoningTokenCounter:
    """Counts the reasoning tokens of one growing generation, feeding each token's text once: a
    token counts when text of it comes out as reasoning (or it holds a whole empty reasoning
    region); text held back inside a reasoning region (it may start the closer) counts its token
    until the closer arrives. That is vLLM's count wherever the reasoning delimiters are whole
    tokens (special tokens, as in the models these templates serve).

    Held text is the end of what was fed (`unread_text`), and comes out in order: `runs` follows it
    token by token as [characters still held, counted already], so that the reasoning a later feed
    writes is credited to the tokens whose text it is."""

    def __init__(self, plan: _Plan, prefix: str, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.field = plan.reasoning_field
        self.parser = plan.module.ResponseParser(prefix, errors="keep")
        self.token_ids: list[int] = []
        self.confirmed = 0
        self.runs: list[list] = []  # the held text inside reasoning, by token: [chars, counted]
        self.written = 0  # reasoning text the last feed wrote
        self.open = False
        self.body_started = False  # the open reasoning region has text (or held text) already
        self._events(self.parser.initial_events)
        prompt_held = len(self.parser.unread_text) if self.open else 0
        if prompt_held:  # (the prompt's text is no token of the output)
            self.runs.append([prompt_held, True])

    def continues(self, token_ids: Sequence[int]) -> bool:
        return list(token_ids[: len(self.token_ids)]) == self.token_ids

    def count(self, token_ids: Sequence[int]) -> int:
        new_ids = list(token_ids[len(self.token_ids) :])
        self.token_ids.extend(new_ids)
        for token_id in new_ids:
            text = _decode(self.tokenizer, [token_id])
            if not text:  # an empty token counts where it sits inside reasoning text
                if self.open and self.body_started:
                    self.runs.append([0, False])
                continue
            self._feed(text)
        return self.confirmed + sum(not counted for _, counted in self.runs)

    def _feed(self, text: str) -> None:
        opened, _, closed = self._events(self.parser.feed(text))
        # The reasoning written comes first from the held runs, in order, then from this token.
        left = self.written
        runs = self.runs
        while runs and left:
            run = runs[0]
            if not run[1]:
                self.confirmed += 1  # text of it (or text after an empty token) is reasoning
                run[1] = True
            taken = min(run[0], left)
            run[0] -= taken
            left -= taken
            if not run[0]:
                runs.pop(0)
        own = left > 0 or (opened and closed)  # (an empty region inside the token counts it too)
        if closed:
            runs.clear()  # what was still held was the closer
        held = len(self.parser.unread_text) if self.open else 0
        mine = held - sum(chars for chars, _ in runs)  # this token's own held text
        if mine > 0:
            runs.append([mine, own])
            self.body_started = True
        if own:
            self.confirmed += 1

    def _events(self, events: list[dict]) -> tuple[bool, bool, bool]:
        opened = wrote = closed = False
        self.written = 0
        for event in events:
            if event["field"] != self.field:
                continue
            kind = event["type"]
            if kind == "region_open":
                self.open = opened = True
                self.body_started = False
            elif kind == "region_chunk":
                if event["text"]:
                    wrote = self.body_started = True
                    self.written += len(event["text"])
            else:
                self.open = False
                closed = True
        return opened, wrote, closed


# ---- the classes vLLM selects ---------------------------------------------------------------------


class RtcompileReasoningParser(ResponseTemplateReasoningParser):
    """Selected by `--reasoning-parser rtcompile`: stands for `RtcompileParser` in vLLM's parser
    manager, and tells vLLM's structured-output engine where reasoning ends."""

    @classmethod
    def unified_parser_cls(cls) -> type[RtcompileParser]:
        return RtcompileParser

    def __init__(
        self,
        tokenizer: Any,
        *args: Any,
        response_template: Any = None,
        model_config: Any = None,
        **kwargs: Any,
    ) -> None:
        # Not ResponseTemplateReasoningParser.__init__: that one validates vLLM's field names.
        ReasoningParser.__init__(self, tokenizer, *args, model_config=model_config, **kwargs)
        template, _ = resolve_template(tokenizer, response_template, model_config)
        self.plan = _plan_for(template, parse_tools=True)
        chat_template_kwargs = kwargs.get("chat_template_kwargs") or {}
        self._thinking_disabled = not chat_template_kwargs.get("enable_thinking", True)
        self._reasoning_end_ids = self._closer_ids()

    def _field_literals(self, key: str) -> list[str]:
        spec = self.plan.reasoning_spec
        return literals(spec.get(key)) if spec else []

    @property
    def reasoning_start_str(self) -> str | None:
        openers = self._field_literals("open")
        return openers[0] if openers else None

    @property
    def reasoning_end_str(self) -> str | None:
        closers = self._field_literals("close")
        return closers[0] if closers else None

    def _closer_ids(self) -> list[list[int]] | None:
        """Token ids of each literal closer of reasoning, or None when they are not all literal."""
        spec = self.plan.reasoning_spec
        if spec is None or spec.get("repeats") or "close" not in spec:
            return None
        closers = self._field_literals("close")
        if not closers:
            return None
        vocab = self.vocab
        ids = [
            [vocab[closer]]
            if closer in vocab
            else self.model_tokenizer.encode(closer, add_special_tokens=False)
            for closer in closers
        ]
        return ids if all(ids) else None

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Whether a generation after this prompt starts past the reasoning (vLLM's rule: the
        prompt closed the reasoning region, or opened content or a tool call, or thinking is off)."""
        plan = self.plan
        field = plan.reasoning_field
        if field is None:
            return True
        if plan.reasoning_spec.get("repeats"):
            return False
        try:
            parser = plan.module.ResponseParser(_decode(self.model_tokenizer, input_ids), errors="keep")
        except Exception:
            return False
        active = None
        closed = False
        for event in parser.initial_events:
            if event["type"] == "region_open":
                active = event["field"]
            elif event["type"] == "region_close":
                closed |= event["field"] == field
                active = None
        if closed or active in (CONTENT_FIELD, TOOL_FIELD):
            return True
        # Resolve delimiters held back at the prompt's end: a NUL cannot occur in the model's
        # output, so text containing it only probes what the prompt left open.
        for event in parser.feed("\0"):
            kind = event["type"]
            if (
                kind == "region_open"
                and event["field"] in (CONTENT_FIELD, TOOL_FIELD)
                and event["field"] in plan.open_fields
            ):
                return True
            if event["field"] == field:
                if kind == "region_open":
                    return False
                if kind == "region_close":
                    return True
        if active == field:
            return False
        return self._thinking_disabled

    def is_reasoning_end_streaming(self, input_ids: Sequence[int], delta_ids: Any) -> bool:
        if self._reasoning_end_ids is None:
            return self.is_reasoning_end(input_ids)
        new = len(list(delta_ids))
        for end_ids in self._reasoning_end_ids:
            window = list(input_ids[max(0, len(input_ids) - new - len(end_ids) + 1) :])
            if any(
                window[k : k + len(end_ids)] == end_ids
                for k in range(len(window) - len(end_ids) + 1)
            ):
                return True
        return False


class RtcompileToolParser(ResponseTemplateToolParser):
    """Selected by `--tool-call-parser rtcompile`: stands for `RtcompileParser` in vLLM's parser
    manager, which extracts the calls."""

    @classmethod
    def unified_parser_cls(cls) -> type[RtcompileParser]:
        return RtcompileParser


class RtcompileParser(Parser):
    """Reasoning, content and tool calls through rtcompile's compiled parser for the template
    (see the module docstring). A drop-in for vLLM's `ResponseTemplateParser`."""

    reasoning_parser_cls = RtcompileReasoningParser
    tool_parser_cls = RtcompileToolParser
    always_adjust_request = True
    _enable_auto_tools = False

    def __init__(
        self,
        tokenizer: Any,
        tools: list | None = None,
        *,
        response_template: Any = None,
        enable_auto_tools: bool | None = None,
        **kwargs: Any,
    ) -> None:
        template, self.template_origin = resolve_template(
            tokenizer, response_template, kwargs.get("model_config")
        )
        self.response_template = template
        self._plan = _plan_for(template, parse_tools=True)  # validates and compiles now
        super().__init__(tokenizer, tools, response_template=template, **kwargs)
        if enable_auto_tools is not None:
            self._enable_auto_tools = enable_auto_tools
        self._tools = _as_tool_dicts(tools)
        self._prompt_token_ids: list[int] | None = None
        self._prefix = ""
        self._generation: _Generation | None = None
        self._reasoning_counter: _ReasoningTokenCounter | None = None

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        prompt_token_ids = list(prompt_token_ids)
        if prompt_token_ids == self._prompt_token_ids:
            return
        self._prompt_token_ids = prompt_token_ids
        self._prefix = _decode(self.model_tokenizer, prompt_token_ids)
        self._generation = None
        self._reasoning_counter = None

    def adjust_request(self, request: Any) -> Any:
        if getattr(request, "chat_template", None) is not None:
            logger.warning(
                "A request chat template is set; rtcompile still parses the checkpoint's "
                "output format."
            )
        # Delimiters are special tokens: the parser must see them.
        request.skip_special_tokens = False
        if hasattr(request, "spaces_between_special_tokens"):
            request.spaces_between_special_tokens = False
        if (
            self._tool_parser is not None
            and request.tools
            and request.tool_choice != "none"
            and (unsupported := _unsupported_tool_guarantee(request)) is not None
        ):
            guarantee, parameter = unsupported
            raise VLLMValidationError(
                f"rtcompile response_template parsing cannot guarantee {guarantee} "
                "without a format-compatible structural grammar",
                parameter=parameter,
            )
        return request

    def is_reasoning_end(self, input_ids: list[int]) -> bool:
        return self._reasoning_parser is None or self._reasoning_parser.is_reasoning_end(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """The generated tokens whose text the template parses as reasoning (reasoning the prompt
        left open included)."""
        if self._reasoning_parser is None or self._plan.reasoning_field is None:
            return 0
        counter = self._reasoning_counter
        if counter is None or not counter.continues(token_ids):
            counter = self._reasoning_counter = _ReasoningTokenCounter(
                self._plan, self._prefix, self.model_tokenizer
            )
        return counter.count(token_ids)

    def parse(
        self,
        model_output: str,
        request: Any,
        enable_auto_tools: bool = False,
        model_output_token_ids: Sequence[int] = (),
    ) -> tuple[str | None, str | None, list[FunctionCall] | None]:
        self._initialize_history_tool_call_cnt(request)
        generation = self._new_generation(
            request, enable_auto_tools=enable_auto_tools, include_reasoning=True
        )
        delta = generation.feed(model_output, True)
        if delta is None:
            return None, None, None
        calls = [
            FunctionCall(
                id=call.id,
                name=call.function.name or "",
                arguments=call.function.arguments or "{}",
            )
            for call in _whole_calls(delta.tool_calls)
        ]
        return delta.reasoning, delta.content, calls or None

    def parse_delta(
        self,
        delta_text: str,
        delta_token_ids: list[int],
        request: Any,
        prompt_token_ids: list[int] | None = None,
        *,
        finished: bool,
    ) -> DeltaMessage | None:
        generation = self._generation
        if generation is not None and generation.fast and not finished:
            # The hot path of a server, `_Generation.feed` inlined (one call less per token): more
            # text of one region (feed_text takes it), of which the stream needs only a call's.
            taken = generation.feed_text(delta_text)
            if taken is not None:
                field, read = taken
                if not read:  # (a whitespace run held back: it may start a delimiter)
                    return None
                make = generation.chunk_delta.get(field)
                return make(read) if make is not None else generation.stream_chunk(field, read)
            if delta_text:
                return generation.feed_more(delta_text)
        if generation is None:
            self._initialize_history_tool_call_cnt(request)
            if self._prompt_token_ids is None and prompt_token_ids is not None:
                self.set_prompt_token_ids(prompt_token_ids)
            generation = self._generation = self._new_generation(
                request,
                enable_auto_tools=self._enable_auto_tools,
                include_reasoning=request.include_reasoning,
            )
        return generation.feed(delta_text, finished)

    def _new_generation(
        self, request: Any, *, enable_auto_tools: bool, include_reasoning: bool
    ) -> _Generation:
        parse_tools = self._tool_parser is not None and _tool_parsing_enabled(
            request, enable_auto_tools=enable_auto_tools
        )
        plan = self._plan if parse_tools else _plan_for(self.response_template, parse_tools=False)
        return _Generation(
            plan,
            prefix=self._prefix,
            tools=self._tools,
            parse_reasoning=self._reasoning_parser is not None,
            include_reasoning=include_reasoning,
            new_tool_call_id=self._new_tool_call_id,
        )

    def _new_tool_call_id(self, name: str) -> str:
        state = self._stream_state
        tool_call_id = make_tool_call_id(
            id_type=state.tool_call_id_type,
            func_name=name,
            idx=state.history_tool_call_cnt,
        )
        state.history_tool_call_cnt += 1
        return tool_call_id


def _whole_calls(entries: list[DeltaToolCall]) -> list[DeltaToolCall]:
    """The calls of one whole-output delta, each call's entries merged into one."""
    calls: dict[int, DeltaToolCall] = {}
    for entry in entries:
        call = calls.get(entry.index)
        if call is None:
            calls[entry.index] = entry
        elif entry.function is not None:
            call.function.arguments = (call.function.arguments or "") + (
                entry.function.arguments or ""
            )
    return list(calls.values())
