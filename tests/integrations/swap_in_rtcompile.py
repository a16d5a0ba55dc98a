"""A pytest plugin that runs vLLM's own response-template tests on rtcompile's classes.

vLLM's `tests/parser/test_response_template.py` (from the vllm source of the release installed)
imports `ResponseTemplateParser` and friends from `vllm.parser.response_template` and selects them
by the name `response_template`; loaded before it, this plugin puts rtcompile's classes in both
places (and vLLM's module logger in rtcompile's, so that a test counting vLLM's warnings counts
rtcompile's). In the vLLM environment .ci/vllm.sh builds, with rtcompile installed beside it:

    PYTHONPATH=<rtcompile site>:tests/integrations $VLLM_PYTHON -m pytest -p swap_in_rtcompile \\
        --noconftest -q <vllm source>/tests/parser/test_response_template.py

Never part of rtcompile's own suite (it is no test module): what vLLM's tests still catch, and what
they catch by rtcompile's documented design, is recorded in compiler/integrations/README.md.
"""

from __future__ import annotations


def pytest_configure(config) -> None:  # noqa: ARG001 (pytest's hook signature)
    import vllm.parser.response_template as vllm_module
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    from rtcompile.integrations.vllm import parser as rtcompile_module

    vllm_module.ResponseTemplateParser = rtcompile_module.RtcompileParser
    vllm_module.ResponseTemplateReasoningParser = rtcompile_module.RtcompileReasoningParser
    vllm_module.ResponseTemplateToolParser = rtcompile_module.RtcompileToolParser
    rtcompile_module.logger = vllm_module.logger
    ReasoningParserManager.register_module(
        "response_template", force=True, module=rtcompile_module.RtcompileReasoningParser
    )
    ToolParserManager.register_module(
        "response_template", force=True, module=rtcompile_module.RtcompileToolParser
    )
