"""vLLM integration: rtcompile's compiled parsers behind vLLM's unified parser interface.

    pip install rtcompile vllm
    vllm serve MODEL --reasoning-parser rtcompile --enable-auto-tool-choice --tool-call-parser rtcompile

Installing rtcompile registers `register` below as a `vllm.general_plugins` entry point
(pyproject.toml), which vLLM runs in each of its processes at startup. It adds the names
`rtcompile` to vLLM's reasoning-parser and tool-parser registries, lazily: the classes (in
`rtcompile.integrations.vllm.parser`) are imported only when a server selects them, so vLLM processes that never
parse (workers) import nothing of rtcompile beyond this module.

`RtcompileParser` is a drop-in for `vllm.parser.response_template.ResponseTemplateParser` (same
constructor arguments and methods); `rtcompile.integrations.vllm.parser`'s docstring says how it chooses the
template and where it differs from vLLM's class by design.

Nothing in `rtcompile.runtime` imports vLLM: this package depends on the runtime, never the other
way round.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RtcompileParser", "RtcompileReasoningParser", "RtcompileToolParser", "register"]

PARSER_NAME = "rtcompile"
_PARSER_MODULE = "rtcompile.integrations.vllm.parser"


def register() -> None:
    """The `vllm.general_plugins` entry point: make `--reasoning-parser rtcompile` and
    `--tool-call-parser rtcompile` select `RtcompileParser`. Safe to call repeatedly (vLLM loads
    plugins once per process, and in several processes)."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    ReasoningParserManager.register_lazy_module(
        PARSER_NAME, _PARSER_MODULE, "RtcompileReasoningParser"
    )
    ToolParserManager.register_lazy_module(PARSER_NAME, _PARSER_MODULE, "RtcompileToolParser")
    _allow_rtcompile_templates()


def _allow_rtcompile_templates() -> None:
    """vLLM checks the tokenizer's `response_template` at startup against what its own class can
    serve (only the field names `thinking`, `content`, `tool_calls`; a template must be in the
    tokenizer). That check runs for every parser that stands for a response-template parser, ours
    included, before vLLM constructs the parser it selected with the tokenizer, which is where
    rtcompile validates the template it resolves. So the check is skipped when the selected parsers
    are rtcompile's, and runs unchanged for every other parser."""
    import vllm.parser.response_template as response_template

    original = response_template.validate_tokenizer_response_template
    if getattr(original, "_rtcompile_wrapped", None) is not None:
        return

    def validate_tokenizer_response_template(
        tokenizer: Any, *, reasoning_parser: str | None, tool_parser: str | None
    ) -> None:
        if _selects_rtcompile(reasoning_parser, tool_parser):
            return  # RtcompileParser(tokenizer), which vLLM calls next, validates
        original(tokenizer, reasoning_parser=reasoning_parser, tool_parser=tool_parser)

    validate_tokenizer_response_template._rtcompile_wrapped = original  # type: ignore[attr-defined]
    response_template.validate_tokenizer_response_template = validate_tokenizer_response_template


def _selects_rtcompile(reasoning_parser: str | None, tool_parser: str | None) -> bool:
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    from .parser import RtcompileReasoningParser, RtcompileToolParser

    for name, manager, cls in (
        (reasoning_parser, ReasoningParserManager.get_reasoning_parser, RtcompileReasoningParser),
        (tool_parser, ToolParserManager.get_tool_parser, RtcompileToolParser),
    ):
        if name:
            try:
                if issubclass(manager(name), cls):
                    return True
            except Exception:  # an unknown name: vLLM reports it its own way
                continue
    return False


def __getattr__(name: str) -> Any:
    if name in ("RtcompileParser", "RtcompileReasoningParser", "RtcompileToolParser"):
        from . import parser

        return getattr(parser, name)
    raise AttributeError(f"module 'rtcompile.integrations.vllm' has no attribute {name!r}")
