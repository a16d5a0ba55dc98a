"""The serving plan of a compiled template: everything a generation reads off its template, made once
and kept on the compiled module itself.

A server builds a generation (and often several parsers) for every request, all from one template:
what does not depend on the request is read here once. There is one cache and one key: the compiled
module (a template's module is its template's, so the module is the key), in whose namespace the
plan is stored (`PLAN_ATTRIBUTE`). Whatever else is derived from the template, by the core or by a
host (a served variant of the template and its own plan, the copy a host's own classes read), hangs
off the plan through `derived(name, make)`: made once, found again by name.

Reaches a module through the generated parser class as well as the module object (the functions'
namespace is the module's), so `OpenAIStream(parser)` finds the same plan as a server that loaded
the module. Standard library and rtcompile's runtime only.
"""

from __future__ import annotations

import threading
import types
from typing import Any, Callable

from .calls import ToolCallPlan

__all__ = ["PLAN_ATTRIBUTE", "ServingPlan", "closers_ending_in_anchor", "literals"]

PLAN_ATTRIBUTE = "__rtcompile_serving_plan__"
_LOCK = threading.Lock()


def literals(value: Any) -> list[str]:
    """The literal strings of a delimiter (`open`/`close`: a string or a list of strings)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


def closers_ending_in_anchor(template: dict) -> dict[str, list[tuple[str, str]]]:
    """Per field, (closer, anchor) pairs of literal closers that end with the next message's start
    anchor: a generation stops before the next message starts, so its last region may miss exactly
    the anchor (a server completes such a closer at the end of the output, as vLLM does)."""
    anchors = literals(template.get("start_anchor"))
    return {
        name: pairs
        for name, spec in template["fields"].items()
        if isinstance(spec, dict)
        and (
            pairs := [
                (closer, anchor)
                for closer in literals(spec.get("close"))
                for anchor in anchors
                if anchor and closer.endswith(anchor) and closer != anchor
            ]
        )
    }


class ServingPlan:
    """What every generation of one compiled template reads off it (`of(module)` finds or makes it;
a plan made directly, for a parser that is no compiled module's, is the caller's to keep).

    `template`, `fields`: the template the module was compiled from; `parser_class`: its
    `ResponseParser`; `implicit_field`: the field text outside every region goes to (None: such
    text is dropped); `pattern_closed`: fields closed by a pattern (what it matched comes with the
    close event of a parser built with report_closers); `closers`: per field, literal closers that
    end in the next message's start anchor (see `closers_ending_in_anchor`); `tool_call_plan(field)`:
    where a call's parts come from."""

    def __init__(self, template: dict, parser_class: type | None):
        self.template = template
        self.fields: dict = template["fields"]
        self.parser_class = parser_class
        names = getattr(self.parser_class, "FIELD_NAMES", ())
        implicit = getattr(self.parser_class, "IMPLICIT", None)
        self.implicit_field: str | None = names[implicit] if implicit is not None else None
        self.pattern_closed = frozenset(
            name for name, spec in self.fields.items() if isinstance(spec, dict) and "close_pattern" in spec
        )
        self.closers = closers_ending_in_anchor(self.template)
        self._tool_call_plans: dict[str, ToolCallPlan] = {}
        self._derived: dict[str, Any] = {}

    @classmethod
    def of(cls, module: types.ModuleType | dict) -> "ServingPlan":
        """The plan of a compiled module (or of its namespace), made on first use."""
        namespace = module if isinstance(module, dict) else vars(module)
        plan = namespace.get(PLAN_ATTRIBUTE)
        if plan is None:
            with _LOCK:
                plan = namespace.get(PLAN_ATTRIBUTE)
                if plan is None:
                    plan = namespace[PLAN_ATTRIBUTE] = cls(namespace["TEMPLATE"], namespace["ResponseParser"])
        return plan

    def tool_call_plan(self, field: str) -> ToolCallPlan:
        plan = self._tool_call_plans.get(field)
        if plan is None:
            plan = self._tool_call_plans.setdefault(field, ToolCallPlan(self.fields[field]))
        return plan

    def derived(self, name: str, make: Callable[["ServingPlan"], Any]) -> Any:
        """`make(self)`, made once per plan and name: a served variant of the template, what a host
        reads off it."""
        value = self._derived.get(name, _ABSENT)
        if value is _ABSENT:
            with _LOCK:
                value = self._derived.get(name, _ABSENT)
            if value is _ABSENT:
                value = make(self)  # (outside the lock: it may compile, and ask for other plans)
                with _LOCK:
                    value = self._derived.setdefault(name, value)
        return value


_ABSENT = object()
