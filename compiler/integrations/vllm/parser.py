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

Token ids (the default): the parser reads the ids the model generated (`delta_token_ids`, the
prompt's ids from `set_prompt_token_ids`), as transformers 5.25.0 parses token ids: a control token
(a special token, or an added token the chat template writes) is a delimiter only where the model
generated its id; a `</think>` or `<tool_call>` the model spells out with ordinary tokens is text.
vLLM's own class parses the decoded text, where such a spelling is a delimiter. Text mode instead:
`RtcompileParser(..., token_ids=False)` or the environment variable `RTCOMPILE_VLLM_TOKEN_IDS=0`.
Text is parsed anyway for a tokenizer that is not a fast transformers tokenizer (warned once), and
for a request with `stop` strings (vLLM cuts its text inside a token there, and holds text back
that the ids already show). The stop token vLLM leaves out of the text (the end-of-sequence token,
`stop_token_ids`) is left out of the ids read too, so both modes see the same output.

Streaming (`parse_delta`): reasoning and content deltas as the model writes them; a tool call's
name (with its id, by vLLM's id policy for the request) as soon as the parser knows it, and its
arguments as JSON fragments while the model writes them (the fragments of one call concatenate to
JSON that loads to that call's arguments), sent as vLLM's own `DeltaMessage` / `DeltaToolCall`.
The generation runs on rtcompile's serving core (`rtcompile.integrations.serving`); `_DeltaMessages`
renders its operations. `parse` gives the same results as the stream, accumulated.

Tool guarantees (`adjust_request`): `tool_choice="required"`, a named tool, strict tools and
`parallel_tool_calls=False` are kept by rtcompile's structural tag for the template, the request and
the prompt, set as the request's structured outputs (`constraint.py`, which also says what wins
over a request's own structured output); vLLM's class refuses those requests. What the template
cannot express is refused with a `VLLMValidationError` giving the reason in one line.

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

import functools
import os
from collections.abc import Sequence
from typing import Any

from openai.types.responses import ToolChoiceCustom, ToolChoiceFunction
from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionNamedToolChoiceParam
from vllm.exceptions import VLLMValidationError
from vllm.logger import init_logger
from vllm.parser.abstract_parser import Parser
from vllm.parser.response_template import (
    ResponseTemplateReasoningParser,
    ResponseTemplateToolParser,
)
from vllm.reasoning.abs_reasoning_parsers import ReasoningParser
from vllm.renderers.chat_utils import make_tool_call_id
from vllm.tool_parsers.utils import iter_response_function_tool_dicts

from rtcompile.integrations.serving import (
    Generation,
    Reasoning,
    ReasoningTokenCounter,
    Renderer,
    Route,
    ServingPlan,
    WholeOutput,
    as_id_list,
    tool_dicts,
    unvalidated_builder,
    written_ids,
)
from rtcompile.integrations.serving.host import (
    CONTENT_FIELD,
    TOOL_FIELD,
    plan_for,
    reasoning_field_of,
    served_plan,
)
from rtcompile.integrations.serving.host import resolve_template as shared_resolve_template
from rtcompile.integrations.vllm import constraint
from rtcompile.runtime.token_ids import TokenizerProfile, profile_for

# vLLM's logger: `warning_once` is what vLLM's own response-template parser warns with.
logger = init_logger(__name__)

__all__ = [
    "RtcompileParser",
    "RtcompileReasoningParser",
    "RtcompileToolParser",
    "TEMPLATE_ENVIRONMENT_VARIABLE",
    "TOKEN_IDS_ENVIRONMENT_VARIABLE",
    "resolve_template",
]

TEMPLATE_ENVIRONMENT_VARIABLE = "RTCOMPILE_VLLM_TEMPLATE"
# "0" (or "false", "no", "off"): parse text, not token ids (see the module docstring).
TOKEN_IDS_ENVIRONMENT_VARIABLE = "RTCOMPILE_VLLM_TOKEN_IDS"


# ---- the template ---------------------------------------------------------------------------------


def resolve_template(
    tokenizer: Any, template: Any = None, model_config: Any = None
) -> tuple[dict, str]:
    """(the response template, where it came from), in the order the module docstring gives
    (serving.host.resolve_template, with the model type vLLM's model config names, if any).
    Raises `ValueError` naming every place looked at when there is none."""
    model_type = getattr(getattr(model_config, "hf_config", None), "model_type", None)
    return shared_resolve_template(
        tokenizer,
        template,
        model_type=model_type if isinstance(model_type, str) else None,
        environment_variable=TEMPLATE_ENVIRONMENT_VARIABLE,
    )


def _plan_for(template: dict, parse_tools: bool) -> ServingPlan:
    """The serving plan of `template` as vLLM's chat serving parses with it: tool calls parsed, or
    (tool parsing off) passed on as content with their delimiters. Checks the fields once."""
    base = plan_for(template)
    reasoning_field_of(base)  # (fields no client would see are refused)
    return served_plan(base, tool_calls="parse" if parse_tools else "verbatim")


def _reasoning_of(plan: ServingPlan) -> Reasoning:
    """The core's reasoning operations for a served plan (its reasoning field checked once)."""
    return Reasoning.of(plan, reasoning_field_of(plan))


# ---- requests -------------------------------------------------------------------------------------


def _as_tool_dicts(tools: Sequence[Any] | None) -> list[dict]:
    """Chat tools as dicts, plus Responses function tools (namespaces flattened by vLLM)."""
    tools = list(tools or ())
    result = iter_response_function_tool_dicts(tools)
    result.extend(tool for tool in tool_dicts(tools) if isinstance(tool.get("function"), dict))
    return result


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


def _token_ids_default() -> bool:
    value = os.environ.get(TOKEN_IDS_ENVIRONMENT_VARIABLE, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def _decodes_token_ids(tokenizer: Any) -> TokenizerProfile | None:
    """The token-id profile of a fast transformers tokenizer (control tokens, decoding tables;
    cached on the tokenizer), or None for a tokenizer that cannot decode ids as transformers does
    (a slow or custom one)."""
    try:
        return profile_for(tokenizer)
    except Exception:  # (AttributeError and whatever a custom tokenizer raises)
        return None


def _decode(tokenizer: Any, token_ids: Sequence[int]) -> str:
    token_ids = as_id_list(token_ids)
    try:
        return tokenizer.decode(
            token_ids,
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
            spaces_between_special_tokens=False,
        )
    except TypeError:
        return tokenizer.decode(token_ids, skip_special_tokens=False)


# ---- one generation, rendered as DeltaMessages --------------------------------------------------


class _DeltaMessages(Renderer):
    """The serving core's operations as vLLM `DeltaMessage`s: per chunk, the text of each key
    ("content", "reasoning") concatenated, and the tool-call entries (a call's first with its id,
    by vLLM's policy for the request, and name; then its argument fragments, merged per call).
    The common text chunk's message is built without pydantic's validation (`_TEXT_DELTAS`)."""

    def __init__(self, state: Any) -> None:
        self.state = state  # vLLM's stream state: the id policy and the history's call count
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict] = []

    def text(self, key: str, text: str) -> None:
        (self.content if key == "content" else self.reasoning).append(text)

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        call_id = _next_call_id(self.state, name)
        self.calls.append(
            {"index": index, "id": call_id, "type": "function", "name": name, "arguments": []}
        )

    def arguments(self, index: int, text: str) -> None:
        calls = self.calls
        if calls and calls[-1]["index"] == index:
            calls[-1]["arguments"].append(text)
        else:
            calls.append({"index": index, "arguments": [text]})

    def take(self) -> DeltaMessage | None:
        fields: dict[str, Any] = {}
        if self.content:
            fields["content"] = "".join(self.content)
            self.content = []
        if self.reasoning:
            fields["reasoning"] = "".join(self.reasoning)
            self.reasoning = []
        if self.calls:
            fields["tool_calls"] = [_delta_tool_call(call) for call in self.calls]
            self.calls = []
        return DeltaMessage(**fields) if fields else None

    def nothing(self) -> None:
        return None

    def text_maker(self, key: str) -> Any:
        return _TEXT_DELTAS[key]


def _next_call_id(state: Any, name: str) -> str:
    """The next call's id by vLLM's policy for the request (its stream state counts the calls of
    the conversation so far)."""
    call_id = make_tool_call_id(
        id_type=state.tool_call_id_type, func_name=name, idx=state.history_tool_call_cnt
    )
    state.history_tool_call_cnt += 1
    return call_id


def _merged(first: DeltaMessage | None, second: DeltaMessage | None) -> DeltaMessage | None:
    """Two messages as one (what the prompt gave, a call it left open, with the first chunk's)."""
    if first is None or second is None:
        return first if second is None else second
    fields: dict[str, Any] = {}
    for key in ("content", "reasoning"):
        text = (getattr(first, key) or "") + (getattr(second, key) or "")
        if text:
            fields[key] = text
    calls = [*first.tool_calls, *second.tool_calls]
    if calls:
        fields["tool_calls"] = calls
    return DeltaMessage(**fields)


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


# Per text key, what makes the `DeltaMessage` of one text chunk for the common chunk: without
# pydantic's validation (which costs several times the parse of the chunk) where the pydantic
# installed builds the same message both ways (checked once, here); otherwise `DeltaMessage(key=text)`.
_TEXT_DELTAS = {
    key: unvalidated_builder(DeltaMessage, (key,), [("x<y",)]) for key in ("content", "reasoning")
}


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
        self.reasoning = _reasoning_of(_plan_for(template, parse_tools=True))
        chat_template_kwargs = kwargs.get("chat_template_kwargs") or {}
        self._thinking_disabled = not chat_template_kwargs.get("enable_thinking", True)
        self._reasoning_end_ids = self._closer_ids()

    def _field_literals(self, key: str) -> list[str]:
        return list(self.reasoning.plan.literals(self.reasoning.field, key))

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
        facts = self.reasoning.facts
        if facts is None or facts.repeats:
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
        prompt closed the reasoning region, or opened content or a tool call, or thinking is off;
        the serving core's `Reasoning.ended_after`)."""
        return self.reasoning.ended_after(
            lambda: _decode(self.model_tokenizer, input_ids), thinking_disabled=self._thinking_disabled
        )

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
        token_ids: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_config = kwargs.get("model_config")
        template, self.template_origin = resolve_template(tokenizer, response_template, self._model_config)
        self.response_template = template
        self._plan = _plan_for(template, parse_tools=True)  # validates and compiles now
        self._reasoning_field = reasoning_field_of(self._plan)
        super().__init__(tokenizer, tools, response_template=template, **kwargs)
        if enable_auto_tools is not None:
            self._enable_auto_tools = enable_auto_tools
        self._tools = _as_tool_dicts(tools)
        # Token ids or text (module docstring): the tokenizer's token-id profile, None for text.
        self._profile: TokenizerProfile | None = None
        if token_ids if token_ids is not None else _token_ids_default():
            self._profile = _decodes_token_ids(tokenizer)
            if self._profile is None:
                logger.warning_once(
                    "rtcompile parses text, not token ids: the tokenizer is not a fast transformers "
                    "tokenizer (a control token spelled out by the model acts as a delimiter)."
                )
        self._prompt_token_ids: list[int] | None = None
        self._prefix_text: str | None = ""
        self._generation: Generation | None = None
        self._reasoning_counter: ReasoningTokenCounter | None = None

    @property
    def reads_token_ids(self) -> bool:
        """Whether this parser reads the generated token ids (else their text)."""
        return self._profile is not None

    def _reads_ids(self, request: Any) -> bool:
        """Token ids for this request, unless it has `stop` strings (module docstring)."""
        return self._profile is not None and not getattr(request, "stop", None)

    @property
    def _prefix(self) -> str:
        """The prompt's text (for a parser reading ids, decoded once asked for: a generation reading
        ids reads the ids)."""
        if self._prefix_text is None:
            self._prefix_text = _decode(self.model_tokenizer, self._prompt_token_ids or [])
        return self._prefix_text

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        prompt_token_ids = list(as_id_list(prompt_token_ids))
        if prompt_token_ids == self._prompt_token_ids:
            return
        self._prompt_token_ids = prompt_token_ids
        # (decoded now for a parser reading text, when asked for by one reading ids)
        self._prefix_text = None if self._profile is not None else _decode(self.model_tokenizer, prompt_token_ids)
        self._generation = None
        self.__dict__.pop("parse_delta", None)  # (the last generation's feed)
        self._reasoning_counter = None

    def adjust_request(self, request: Any) -> Any:
        if getattr(request, "chat_template", None) is not None:
            # (once per process, as vLLM's own class warns)
            logger.warning_once(
                "A request chat template is set; rtcompile still parses the checkpoint's output "
                "format with its response template, which may no longer match."
            )
        # Delimiters are special tokens: the parser must see them.
        request.skip_special_tokens = False
        if hasattr(request, "spaces_between_special_tokens"):
            request.spaces_between_special_tokens = False
        if self._tool_parser is not None and request.tools and request.tool_choice != "none":
            # Required, named, strict, one call: rtcompile's structural tag (constraint.py).
            guarantee = constraint.tool_guarantee(request, self.tool_strict_level)
            if guarantee is not None:
                constraint.constrain(self, request, guarantee, _as_tool_dicts(request.tools))
        return request

    def text_of(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, decoded as vLLM decodes the output (special tokens kept)."""
        return _decode(self.model_tokenizer, token_ids)

    def is_reasoning_end(self, input_ids: list[int]) -> bool:
        return self._reasoning_parser is None or self._reasoning_parser.is_reasoning_end(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """The generated tokens whose text the template parses as reasoning (reasoning the prompt
        left open included)."""
        if self._reasoning_parser is None or self._reasoning_field is None:
            return 0
        counter = self._reasoning_counter
        if counter is None or not counter.continues(token_ids):
            counter = self._reasoning_counter = Reasoning.of(self._plan, self._reasoning_field).token_counter(
                self._prefix, functools.partial(_decode, self.model_tokenizer)
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
        # Token ids, where vLLM gives them (a caller with the text alone gets it parsed)
        reads_ids = self._reads_ids(request) and len(model_output_token_ids) > 0
        token_ids = as_id_list(model_output_token_ids)
        if reads_ids:
            written = bool(written_ids(model_output, token_ids, self._profile.control_ids))
        else:
            written = bool(model_output)
        if not written:
            return None, None, None  # (vLLM finalizes only an output that wrote something)
        whole = WholeOutput()
        generation = self._new_generation(
            request, enable_auto_tools=enable_auto_tools, include_reasoning=True, reads_ids=reads_ids, renderer=whole
        )
        generation.finish(model_output, token_ids)
        state = self._stream_state
        calls = [
            FunctionCall(id=_next_call_id(state, call.name), name=call.name, arguments=call.arguments or "{}")
            for call in whole.calls
        ]
        return whole.joined("reasoning") or None, whole.joined("content") or None, calls or None

    def parse_delta(
        self,
        delta_text: str,
        delta_token_ids: list[int],
        request: Any,
        prompt_token_ids: list[int] | None = None,
        *,
        finished: bool,
    ) -> DeltaMessage | None:
        """The first chunk that writes something starts the generation; from the next one on, this
        parser's `parse_delta` is the generation's `feed` itself (same signature: vLLM's per-chunk
        call reaches the serving core's fast path directly)."""
        generation = self._generation
        if generation is not None:  # (a chunk after the instance's own parse_delta was dropped)
            return generation.feed(delta_text, delta_token_ids, finished=finished)
        self._initialize_history_tool_call_cnt(request)
        if self._prompt_token_ids is None and prompt_token_ids is not None:
            self.set_prompt_token_ids(prompt_token_ids)
        reads_ids = self._reads_ids(request)
        if reads_ids:
            ids = as_id_list(delta_token_ids)
            written = bool(written_ids(delta_text, ids, self._profile.control_ids) if finished else ids)
        else:
            written = bool(delta_text)
        if not written:
            return None  # nothing written yet (vLLM finalizes only an output that wrote something)
        generation = self._generation = self._new_generation(
            request,
            enable_auto_tools=self._enable_auto_tools,
            include_reasoning=request.include_reasoning,
            reads_ids=reads_ids,
        )
        self.parse_delta = generation.feed  # (the instance's own, for the rest of the stream)
        return _merged(generation.initial, generation.feed(delta_text, delta_token_ids, finished=finished))

    def _new_generation(
        self,
        request: Any,
        *,
        enable_auto_tools: bool,
        include_reasoning: bool,
        reads_ids: bool,
        renderer: Renderer | None = None,
    ) -> Generation:
        """A generation rendered as DeltaMessages: reasoning and content as the model wrote them
        (without a reasoning parser vLLM sends reasoning as content); tool calls parsed, or with
        tool parsing off (tool_choice="none", or no tool parser) passed on as content, delimiters
        included, as they are written; a call region that fails to parse goes out as content. It
        reads the token ids (`reads_ids`) or their text. `renderer`: the host's (default: one
        DeltaMessage a chunk)."""
        parse_tools = self._tool_parser is not None and _tool_parsing_enabled(
            request, enable_auto_tools=enable_auto_tools
        )
        plan = self._plan if parse_tools else _plan_for(self.response_template, parse_tools=False)
        routes = {CONTENT_FIELD: Route.raw("content")}
        reasoning = self._reasoning_field
        if reasoning is not None:
            if self._reasoning_parser is None:
                routes[reasoning] = Route.raw("content")
            else:
                routes[reasoning] = Route.raw("reasoning") if include_reasoning else Route.dropped()
        # tool calls parsed (a region that fails to parse: its text is content), or passed on as content
        routes[TOOL_FIELD] = Route.calls("content") if parse_tools else Route.verbatim("content")
        prompt: dict[str, Any] = {"prefix": self._prefix} if not reads_ids else {
            "tokenizer": self.model_tokenizer,
            "prompt_token_ids": self._prompt_token_ids or [],
        }
        return Generation(
            plan,
            renderer or _DeltaMessages(self._stream_state),
            routes,
            **prompt,
            tools=self._tools,
            text_omits_stop_token=True,
        )
