"""The serving core: one generation through a compiled parser, as operations a host renders.

Every streaming integration runs on it: OpenAI deltas (`rtcompile.integrations.openai_stream`),
vLLM's `DeltaMessage`s (`rtcompile.integrations.vllm`) and SGLang's detector results
(`rtcompile.integrations.sglang`) are renderers of the same operations. One module per concern:

    plan.py        ServingPlan: what a template's generations read off it, kept on its compiled
                   module (one cache, keyed by the module); served variants hang off it
    generation.py  Generation: the parser fed (text, or the token ids the model generated), its
                   events routed per field (raw text, message text, verbatim calls, tool calls), the
                   fast path for the common chunk, the prompt's held-back text cut, closers
                   completed at the end; Renderer: the operations
    calls.py       a tool-call field's regions as call operations (announce, fragments, done,
                   failed), reconciled with each region's parsed value at its close
    arguments.py   the incremental argument readers per content parser, and the JSON writer

Standard library, `regex` and rtcompile's runtime only: servers import it at run time, and nothing of
the compiler loads with it.
"""

from .calls import ToolCallPlan, call_parts, message_tool_calls
from .generation import OPENER_GROUP, Generation, Renderer, as_id_list, last_boundary, text_of, written_ids
from .plan import ServingPlan, closers_ending_in_anchor, literals

__all__ = [
    "OPENER_GROUP",
    "Generation",
    "Renderer",
    "ServingPlan",
    "ToolCallPlan",
    "as_id_list",
    "call_parts",
    "closers_ending_in_anchor",
    "last_boundary",
    "literals",
    "message_tool_calls",
    "text_of",
    "written_ids",
]
