"""Tool guarantees as structured outputs: a request that asks for one gets rtcompile's structural
tag (`rtcompile.structural_tag`), set where vLLM's own parsers set theirs
(`vllm.parser.abstract_parser.Parser._apply_structural_tag`): `request.structured_outputs`, with
`response_format` (Chat Completions) or `text` (Responses) cleared.

Which requests: `tool_choice="required"`, a named function tool, and "auto" with a `strict` tool,
`parallel_tool_calls=False` or `--tool-strict-level function|parameter`, whenever tool calls are
parsed (a tool parser, tools, tool_choice other than "none"). The tag is the whole output as the
template's parser reads it after the prompt (`prefix=`, the prompt's ids: vLLM hands them over
before it adjusts the request), so vLLM is told to constrain from the first generated token, the
reasoning included (`request._grammar_from_parser`, as vLLM's own grammar-deriving parsers set it):
otherwise vLLM's structured-output engine would start the grammar only where the reasoning parser
says reasoning ended, and a model that writes its calls without closing reasoning first would go
unconstrained. Arguments follow each tool's schema, `strict` or not (the parser must read them).
`VLLM_ENFORCE_STRICT_TOOL_CALLING=0` switches structural tags off for "auto" requests (strict and
`parallel_tool_calls=False` then go unenforced, as with vLLM's own parsers); forced choices keep
theirs (the parser would otherwise find no call).

The parser reads token ids or text (`RtcompileParser.reads_token_ids`, and text for a request with
`stop` strings); the tag matches: with the model's tokenizer, a delimiter that is a control token
is that token's id; in text mode every delimiter is text. The grammar never writes a stop token,
it ends there: the stop ids are those vLLM's xgrammar matcher allows (`SamplingParams
.all_stop_token_ids`: the tokenizer's end-of-sequence id, the generation config's `eos_token_id`,
the request's `stop_token_ids`).

A request that carries its own structured output (`structured_outputs`, `response_format`, or the
Responses API's `text.format`), by vLLM's own policy:
- a forced tool choice ("required", named): the tool grammar wins; the request's own constraint is
  dropped, with vLLM's warning (once);
- "auto" with strict tools (or a strict level): `or(calls, the request's format)`: at least one
  call as the template writes it, or an output in the request's format. That tag is applied where
  vLLM applies the request's own format, after the reasoning (the prompt's reasoning state decides,
  as vLLM's engine decides it), so its call branch is the template's output from there;
- "auto" with only `parallel_tool_calls=False`, or with a format xgrammar cannot take (or a
  reasoning field whose delimiters are patterns): the request's own format applies, tool calls are
  not constrained (vLLM's warning).

What the template cannot express (and a request the grammar refuses) is a `VLLMValidationError`
with one line from `rtcompile.GrammarError`, `parameter` naming the request field at fault or, for
the template, the one that asked for the guarantee."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import vllm.envs as envs
from openai.types.responses import ToolChoiceCustom, ToolChoiceFunction
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionNamedToolChoiceParam
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.exceptions import VLLMValidationError
from vllm.logger import init_logger
from vllm.parser.abstract_parser import _xgrammar_supports, structured_outputs_to_format
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

import rtcompile
from rtcompile.integrations.serving import tool_dicts

logger = init_logger(__name__)

# What vLLM's `_apply_structural_tag` says in the same cases.
FORCED_WINS = "structured outputs are ignored because tool_choice forces tool call."
OWN_FORMAT_WINS = (
    "Tool calls are not constrained for tool_choice=auto with structured outputs because "
    "structural tags are unavailable; the structured output constraint applies."
)
UNSUPPORTED_FORMAT_WINS = (
    "Tool calls are not constrained for tool_choice=auto with structured outputs because "
    "xgrammar does not support the structured output constraint; the structured output "
    "constraint applies."
)
XGRAMMAR_CACHE = (
    "rtcompile's token-id grammars want VLLM_XGRAMMAR_CACHE_MB=0: with its compiler cache on, "
    "xgrammar (0.2.7, 0.2.8) reuses what it compiled for an earlier structural tag for one that "
    "differs from it in token ids, and vLLM ends a request whose grammar then rejects a token it "
    "offered with an error."
)
_REQUEST_FIELDS = ("tool_choice", "tools", "parallel_tool_calls")


@dataclass(frozen=True)
class Guarantee:
    """A tool guarantee a request asks for: `what` (for messages), the request field that asked
    for it, the tool choice the grammar writes (rtcompile's spelling) and whether a call is
    forced."""

    what: str
    parameter: str
    tool_choice: Any
    forced: bool


def tool_guarantee(request: Any, strict_level: ToolStrictLevel | None) -> Guarantee | None:
    """The guarantee a request with tools asks for, None when parsing alone serves it ("auto")."""
    choice = request.tool_choice
    if isinstance(choice, ToolChoiceCustom):
        raise VLLMValidationError(
            "rtcompile cannot force a call of a custom tool: its grammar writes function calls",
            parameter="tool_choice",
        )
    named = _named_function(choice)
    if named is not None:
        return Guarantee(
            "named tool choice",
            "tool_choice",
            {"type": "function", "function": {"name": named}},
            True,
        )
    if choice == "required":
        return Guarantee("required tool choice", "tool_choice", "required", True)
    if not envs.VLLM_ENFORCE_STRICT_TOOL_CALLING:
        return None
    if any(_is_strict(tool) for tool in request.tools or ()):
        return Guarantee("strict tools", "tools", "auto", False)
    if (strict_level or ToolStrictLevel.AUTO) >= ToolStrictLevel.FUNCTION:
        return Guarantee("the tool strict level", "tools", "auto", False)
    if getattr(request, "parallel_tool_calls", True) is False:
        return Guarantee("parallel_tool_calls=False", "parallel_tool_calls", "auto", False)
    return None


def constrain(parser: Any, request: Any, guarantee: Guarantee, tools: list[dict]) -> None:
    """Set the request's structured outputs to the tag that keeps `guarantee` (module docstring),
    for the request's function `tools` (as dicts). `parser` is the request's `RtcompileParser`."""
    own = request.extract_structured_outputs()
    if own is not None and not guarantee.forced:
        _or_with_own_format(parser, request, guarantee, tools, own)
        return
    if own is not None:
        logger.warning_once(FORCED_WINS, scope="local")
    tag = _tag(parser, request, guarantee, tools, guarantee.tool_choice, _prompt(parser, request))
    _set(request, tag, from_first_token=True)


def _or_with_own_format(
    parser: Any, request: Any, guarantee: Guarantee, tools: list[dict], own: Any
) -> None:
    if guarantee.what == "parallel_tool_calls=False":
        logger.warning_once(OWN_FORMAT_WINS, scope="local")
        return
    if not _xgrammar_supports(own):
        logger.warning_once(UNSUPPORTED_FORMAT_WINS, scope="local")
        return
    prefix = _prompt(parser, request)
    if _grammar_waits_for_reasoning(parser, request):
        prefix = _past_reasoning(parser, request, prefix)
        if prefix is None:
            logger.warning_once(OWN_FORMAT_WINS, scope="local")
            return
    calls = _tag(parser, request, guarantee, tools, "required", prefix)
    output = structured_outputs_to_format(own).model_dump()
    tag = {
        "type": "structural_tag",
        "format": {"type": "or", "elements": [calls["format"], output]},
    }
    _set(request, tag, from_first_token=False)


def _tag(
    parser: Any,
    request: Any,
    guarantee: Guarantee,
    tools: list[dict],
    tool_choice: Any,
    prefix: Any,
) -> dict:
    reads_ids = parser._reads_ids(request)
    tokenizer = parser.model_tokenizer if reads_ids else None
    if reads_ids and envs.VLLM_XGRAMMAR_CACHE_MB != 0:
        logger.warning_once(XGRAMMAR_CACHE)
    try:
        return rtcompile.structural_tag(
            parser.response_template,
            tools,
            tool_choice=tool_choice,
            parallel_tool_calls=getattr(request, "parallel_tool_calls", True) is not False,
            prefix=prefix,
            tokenizer=tokenizer,
            stop_tokens=_stop_tokens(parser, request, reads_ids),
        )
    except rtcompile.GrammarError as error:
        field = error.where.split(".")[0].split("[")[0]
        raise VLLMValidationError(
            f"rtcompile cannot constrain the tool calls ({guarantee.what}) for this response "
            f"template: {error}",
            parameter=field if field in _REQUEST_FIELDS else guarantee.parameter,
        ) from None


def _set(request: Any, tag: dict, *, from_first_token: bool) -> None:
    request.structured_outputs = StructuredOutputsParams(structural_tag=json.dumps(tag))
    if isinstance(request, ResponsesRequest):
        request.text = None
    else:
        request.response_format = None
    if from_first_token:
        # The tag covers the reasoning: vLLM's engine then constrains from the first token
        # instead of waiting for the reasoning parser's end of reasoning.
        request._grammar_from_parser = True


# ---- the prompt, and where the grammar starts ----------------------------------------------------


def _prompt(parser: Any, request: Any) -> Any:
    """The prompt as the parser reads it (ids, or their text), which the grammar starts after."""
    if parser._prompt_token_ids is None:
        raise VLLMValidationError(
            "rtcompile cannot constrain the tool calls without the prompt's token ids (a prompt "
            "given as embeddings): what the output means depends on where the prompt leaves off",
            parameter="tool_choice",
        )
    return list(parser._prompt_token_ids) if parser._reads_ids(request) else parser._prefix


def _grammar_waits_for_reasoning(parser: Any, request: Any) -> bool:
    """Whether vLLM applies a request's own structured output only once reasoning ended (its
    reasoning parser says the prompt leaves reasoning to the output; `resolve_reasoning_ended`)."""
    if parser._reasoning_parser is None:
        return False
    if not isinstance(request, ResponsesRequest) and not request.include_reasoning:
        return False
    return not parser.is_reasoning_end(parser._prompt_token_ids)


def _past_reasoning(parser: Any, request: Any, prefix: Any) -> Any:
    """The prompt followed by the end of a reasoning region (its opener too, where the prompt
    does not leave one open): where the parser is when vLLM's grammar starts. None when the
    reasoning field's delimiters are not literal."""
    field = parser._reasoning_field
    closers = parser._plan.literals(field, "close")
    if not closers:
        return None
    text = closers[0]
    if parser._plan.parser_class(parser._prefix, errors="keep").current_field != field:
        openers = parser._plan.literals(field, "open")
        if not openers:
            return None
        text = openers[0] + text
    if isinstance(prefix, str):
        return prefix + text
    return prefix + list(parser.model_tokenizer.encode(text, add_special_tokens=False))


# ---- stop tokens ---------------------------------------------------------------------------------

_GENERATION_EOS: dict[int, tuple[Any, frozenset[int]]] = {}


def _stop_tokens(parser: Any, request: Any, reads_ids: bool) -> list:
    """The ids vLLM's xgrammar matcher takes as stops (`all_stop_token_ids`), or their text."""
    tokenizer = parser.model_tokenizer
    ids = set(_generation_eos(parser._model_config))
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    ids.update(i for i in getattr(request, "stop_token_ids", None) or () if isinstance(i, int))
    if reads_ids:
        return sorted(ids)
    return sorted({text for text in (parser.text_of([i]) for i in ids) if text})


def _generation_eos(model_config: Any) -> frozenset[int]:
    """The generation config's `eos_token_id`s (read once per model config)."""
    if model_config is None or not hasattr(model_config, "try_get_generation_config"):
        return frozenset()
    kept = _GENERATION_EOS.get(id(model_config))
    if kept is not None and kept[0] is model_config:
        return kept[1]
    try:
        value = model_config.try_get_generation_config().get("eos_token_id")
    except Exception:  # (no generation config where vLLM would find none either)
        value = None
    values = (
        [value] if isinstance(value, int) else value if isinstance(value, (list, tuple)) else []
    )
    ids = frozenset(v for v in values if isinstance(v, int))
    _GENERATION_EOS[id(model_config)] = (
        model_config,
        ids,
    )  # (the config kept: its id stays its own)
    return ids


# ---- reading the request -------------------------------------------------------------------------


def _named_function(choice: Any) -> str | None:
    if isinstance(choice, ChatCompletionNamedToolChoiceParam):
        return choice.function.name
    if isinstance(choice, ToolChoiceFunction):
        return choice.name
    return None


def _is_strict(tool: Any) -> bool:
    dumped = tool_dicts([tool])  # (the serving core's normalizer: a dict, or a model's dump)
    if not dumped:
        return False
    tool = dumped[0]
    function = tool.get("function")
    return tool.get("strict") is True or (
        isinstance(function, dict) and function.get("strict") is True
    )
