"""What the inference-server integrations (vLLM's, SGLang's) share before a generation starts.

An inference server parses a generation with a response template in steps that do not depend on
the server:

1. find the template: an explicit one, else the tokenizer's `response_template`, else rtcompile's
   bundled template for the model's `model_type`, else one named by an environment variable
   (`resolve_template`);
2. check that every field reaches a client (`served_fields`: `content`, `tool_calls`, and reasoning
   named `reasoning_content`, as transformers' templates say, or `thinking`, as SGLang and vLLM say),
   and derive the template a server parses with (`server_view`; `thinking_named` for the
   server's own classes), both made by the front end (`rtcompile.frontend.variants`) from the
   validated template: nothing here reads a template's JSON;
3. find the template's serving plan (`plan_for`, and `served_plan` for a server's variant of it):
   compiled once, kept on the compiled module (`rtcompile.integrations.serving.ServingPlan`).

The generation itself runs on the serving core (`rtcompile.integrations.serving.Generation`), which
each server renders into its own types. Nothing here imports a server, and the runtime never imports
this module.
"""

from __future__ import annotations

import json
import os
from typing import Any

import rtcompile
from rtcompile.frontend import variants

from .generation import OPENER_GROUP
from .plan import ServingPlan

__all__ = [
    "CONTENT_FIELD",
    "REASONING_FIELDS",
    "TOOL_FIELD",
    "model_type_of",
    "plan_for",
    "reasoning_field_of",
    "resolve_template",
    "served_fields",
    "served_plan",
    "server_view",
    "thinking_named",
    "tokenizer_template",
]

CONTENT_FIELD = "content"
TOOL_FIELD = "tool_calls"
REASONING_FIELDS = ("reasoning_content", "thinking")
SERVED_FIELDS = frozenset({CONTENT_FIELD, TOOL_FIELD, *REASONING_FIELDS})


# ---- the template -------------------------------------------------------------------------------


def tokenizer_template(tokenizer: Any) -> Any:
    """The tokenizer's own `response_template` (attribute, else `init_kwargs`), as the servers read
    it; None when it has none."""
    if tokenizer is None:
        return None
    template = getattr(tokenizer, "response_template", None)
    if template is None:
        template = (getattr(tokenizer, "init_kwargs", None) or {}).get("response_template")
    return template


def model_type_of(tokenizer: Any) -> str | None:
    """The model's `model_type`, read from the `config.json` beside the tokenizer (a local
    directory, or the hub cache the server downloaded it to; never the network)."""
    source = getattr(tokenizer, "name_or_path", None)
    if not isinstance(source, str) or not source:
        return None
    path = os.path.join(source, "config.json")
    if not os.path.isfile(path):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(source, "config.json")
        except Exception:  # not a repository id, or no hub client: no model type to go on
            return None
        if not isinstance(cached, str):
            return None
        path = cached
    try:
        with open(path, encoding="utf-8") as file:
            model_type = json.load(file).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return model_type if isinstance(model_type, str) else None


def resolve_template(
    tokenizer: Any,
    template: Any = None,
    *,
    model_type: str | None = None,
    environment_variable: str,
) -> tuple[dict, str]:
    """(the response template, where it came from): `template` if given (a dict, a bundled name or
    model_type, or a path), else the tokenizer's `response_template`, else the bundled template for
    `model_type` (by default read beside the tokenizer), else the one `environment_variable` names.
    Raises `ValueError` naming every place looked at when there is none."""
    if template is not None:
        return as_template(template), "the response_template argument"
    own = tokenizer_template(tokenizer)
    if own is not None:
        if not isinstance(own, dict):
            raise ValueError(
                f"the tokenizer's response_template is a {type(own).__name__}, not a JSON object"
            )
        return own, "the tokenizer's response_template"
    if model_type is None:
        model_type = model_type_of(tokenizer)
    if model_type is not None:
        try:
            return rtcompile.template_for(model_type), f"rtcompile's template for {model_type!r}"
        except rtcompile.UnknownTemplateError:
            pass
    named = os.environ.get(environment_variable)
    if named:
        return as_template(named), f"{environment_variable}={named}"
    raise ValueError(
        "no response template: the tokenizer has no `response_template`, rtcompile bundles none "
        f"for model_type {model_type!r}, and {environment_variable} is not set (a bundled "
        "template's name, e.g. 'qwen3', or a path to a template JSON)"
    )


def as_template(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, (str, os.PathLike)):
        from rtcompile import api

        return api.read_template(value)  # a bundled name or model_type, or a path
    raise ValueError(
        f"a response template must be a dict, a name or a path, not {type(value).__name__}"
    )


def served_fields(plan: ServingPlan) -> str | None:
    """Check that a server can send every field of the plan's template to a client; return the name
    of its reasoning field (None when it has none). Raises `ValueError` otherwise."""
    fields = plan.fields
    unsupported = sorted(
        (set(fields) - SERVED_FIELDS)
        # a default reaches no client either: a stream carries only what the model wrote
        | {f"defaults.{name}" for name in set(plan.defaults) - {"role"}}
    )
    if unsupported:
        raise ValueError(
            f"response_template contains fields rtcompile cannot serve: {unsupported}; "
            f"supported fields are {sorted(SERVED_FIELDS)}"
        )
    reasoning = [name for name in REASONING_FIELDS if name in fields]
    if len(reasoning) > 1:
        raise ValueError(
            "response_template has both `reasoning_content` and `thinking` fields; "
            "name one reasoning field"
        )
    return reasoning[0] if reasoning else None


def thinking_named(template: dict) -> dict:
    """A copy of the template whose reasoning field is named `thinking` (the only name SGLang's and
    vLLM's own classes serve); the template itself when it already is."""
    return variants.renamed_field(template, "reasoning_content", "thinking")


def server_view(template: dict, *, tool_calls: str = "parse") -> dict:
    """The template as a server parses a generation with it (`rtcompile.frontend.variants.
    server_view`): no field required (a response need not write any field); a `content` field for
    the text outside every region when all fields have openers, as the servers add one; with
    `tool_calls="verbatim"`, the tool-call field as plain text with its delimiters (tool parsing
    off, or a reasoning parser that hands calls on to the tool parser; an opener that is no single
    literal is captured in `OPENER_GROUP`). The template itself when nothing changes, so that
    bundled templates keep their checked-in parsers."""
    verbatim = TOOL_FIELD if tool_calls == "verbatim" else None
    return variants.server_view(template, sink=CONTENT_FIELD, verbatim=verbatim, capture=OPENER_GROUP)


# ---- the plans ----------------------------------------------------------------------------------


def plan_for(template: dict) -> ServingPlan:
    """The serving plan of `template` as given (compiled on first use; rtcompile.load's memo finds
    the module again, the plan is kept on it)."""
    return ServingPlan.of(rtcompile.load(template))


def served_plan(plan: ServingPlan, *, tool_calls: str = "parse") -> ServingPlan:
    """The plan of `server_view(plan.template, tool_calls=...)`, made once per plan."""
    return plan.derived(
        f"server_view:{tool_calls}",
        lambda base: plan_for(server_view(base.template, tool_calls=tool_calls)),
    )


def reasoning_field_of(plan: ServingPlan) -> str | None:
    """`served_fields` of the plan, checked once per plan: the reasoning field's name."""
    return plan.derived("served_fields", served_fields)
