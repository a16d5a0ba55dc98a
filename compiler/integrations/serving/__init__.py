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
    results.py     what every host builds alike: the whole output of a one-shot parse
                   (WholeOutput), the request's tools as dicts, its result types built without
                   validation on the hot path
    reasoning.py   what a host asks of the reasoning outside a generation: whether it ended in a
                   prompt, how many of an output's tokens are reasoning
    host.py        what the inference-server hosts do before a generation: find the template,
                   check its fields reach a client, the template a server parses with, its plans

Standard library, `regex` and rtcompile's runtime only: servers import it at run time, and nothing of
the compiler loads with it (except `host`, which compiles a template on first use, and is imported
by its own name, not from here).
"""

from .calls import ToolCallPlan, call_parts
from .generation import OPENER_GROUP, Generation, Renderer, Route, as_id_list, last_boundary, text_of, written_ids
from .plan import FieldFacts, ServingPlan, message_tool_calls
from .reasoning import Reasoning, ReasoningTokenCounter
from .results import WholeCall, WholeOutput, same_as_validated, tool_dicts, unvalidated_builder

__all__ = [
    "FieldFacts",
    "OPENER_GROUP",
    "Generation",
    "Reasoning",
    "ReasoningTokenCounter",
    "Renderer",
    "Route",
    "ServingPlan",
    "ToolCallPlan",
    "WholeCall",
    "WholeOutput",
    "as_id_list",
    "call_parts",
    "last_boundary",
    "message_tool_calls",
    "same_as_validated",
    "text_of",
    "tool_dicts",
    "unvalidated_builder",
    "written_ids",
]
