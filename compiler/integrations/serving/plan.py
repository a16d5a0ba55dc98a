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
the module. Standard library and rtcompile's runtime only (the compiler is imported only to
compile a template a host hands over without its module).
"""

from __future__ import annotations

import threading
import types
from typing import Any, Callable

from .calls import ToolCallPlan

__all__ = ["PLAN_ATTRIBUTE", "ServingPlan", "literals"]

PLAN_ATTRIBUTE = "__rtcompile_serving_plan__"
_LOCK = threading.Lock()


def literals(value: Any) -> list[str]:
    """The literal strings of a delimiter (`open`/`close`: a string or a list of strings), for a
    host that builds a served variant of a template's JSON (the facts of a compiled template are
    the plan's: `ServingPlan.literals`)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, str)]
    return []


class ServingPlan:
    """What every generation of one compiled template reads off its module (`of(module)` finds or
    makes it; `for_template(template)` compiles a template first).

    `template`, `fields`: the template the module was compiled from; `parser_class`: its
    `ResponseParser`; `implicit_field`: the field text outside every region goes to (None: such
    text is dropped); `pattern_closed`: fields closed by a pattern (what it matched comes with the
    close event of a parser built with report_closers); `closers`: per field, literal closers that
    end in the next message's start anchor; `literals(field, "open"|"close")`: a field's literal
    delimiters; `tool_call_plan(field)`: where a call's parts come from. The facts are the ones
    the compiler wrote into the module (FIELD_FACTS, CLOSERS_ENDING_IN_ANCHOR), computed from the
    template's validated IR: the plan reads no template JSON of its own."""

    def __init__(self, namespace: dict):
        """`namespace`: a generated module's (its TEMPLATE, ResponseParser and facts)."""
        self.template: dict = namespace["TEMPLATE"]
        self.fields: dict = self.template["fields"]
        self.parser_class: type = namespace["ResponseParser"]
        self.facts: dict[str, dict] = namespace["FIELD_FACTS"]
        names = self.parser_class.FIELD_NAMES
        implicit = self.parser_class.IMPLICIT
        self.implicit_field: str | None = names[implicit] if implicit is not None else None
        self.pattern_closed = frozenset(name for name, fact in self.facts.items() if fact["pattern_closed"])
        self.closers: dict[str, tuple[tuple[str, str], ...]] = namespace["CLOSERS_ENDING_IN_ANCHOR"]
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
                    plan = namespace[PLAN_ATTRIBUTE] = cls(namespace)
        return plan

    @classmethod
    def for_template(cls, template: Any) -> "ServingPlan":
        """The plan of a template (compiled, or found in the cache, on first use)."""
        import rtcompile  # (the compiler, only where a host hands over a template of its own)

        return cls.of(rtcompile.load(template))

    def literals(self, field: str | None, key: str) -> tuple[str, ...]:
        """The literal strings of `field`'s `key` delimiter ("open" or "close"): none for a
        pattern, a field without that delimiter, or no field."""
        fact = self.facts.get(field) if field is not None else None
        return fact[key] if fact is not None else ()

    def tool_call_plan(self, field: str) -> ToolCallPlan:
        plan = self._tool_call_plans.get(field)
        if plan is None:
            plan = self._tool_call_plans.setdefault(field, ToolCallPlan(self.fields[field], self.facts[field]["call"]))
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
