"""The canonical form of a template (its identity for hashing and caching) and the literal
emitter through which template data reaches generated code.

Kept apart from the front end so that a cache hit needs neither validation nor lowering: a template
whose canonical JSON was compiled before was valid then, and is the same template now.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any


class TemplateError(ValueError):
    """An invalid response template. `path` is the JSON path of the problem."""

    def __init__(self, path: str, detail: str):
        super().__init__(f"{path}: {detail}" if path else detail)
        self.path = path
        self.detail = detail


class TemplateTypeError(TemplateError, TypeError):
    """An invalid template where the interpreter raises TypeError (e.g. a non-string pattern)."""


def py_literal(value: Any) -> str:
    """A Python expression that evaluates to `value`: the only way template data reaches
    generated code, and, for a whole template, its canonical text.

    Only these types have a repr that is a faithful literal (as in jinja2's has_safe_repr); any
    other raises TypeError. NaN and the infinities have no literal form, so they are spelled as
    float(...) calls. Everything is built from reprs, so quotes, newlines, NUL, lone surrogates
    and the like come out escaped."""
    # The base types' own methods are called (str.__repr__, dict.items, ...): a subclass could
    # otherwise choose what gets written into the generated source.
    if value is None or isinstance(value, bool):
        return "True" if value is True else "False" if value is False else "None"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return float.__repr__(value)
    if isinstance(value, str):
        return str.__repr__(value)
    if isinstance(value, (list, tuple)):
        items = ", ".join(py_literal(v) for v in (list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)))
        if isinstance(value, tuple):
            return f"({items},)" if tuple.__len__(value) == 1 else f"({items})"
        return f"[{items}]"
    if isinstance(value, (set, frozenset)):
        return "frozenset({%s})" % ", ".join(py_literal(v) for v in sorted(value)) if value else "frozenset()"
    if isinstance(value, dict):
        return "{%s}" % ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in dict.items(value))
    raise TypeError(f"cannot emit a literal of type {type(value).__name__}")


def canonical_text(template: Any) -> str:
    """The template's canonical text: its Python literal (key order kept, as it is meaningful;
    lists and tuples, 1 and True and 1.0 all told apart, as the interpreter tells them apart)."""
    try:
        return py_literal(template)
    except (TypeError, RecursionError) as e:
        raise TemplateError(
            "",
            "response_template must be data (dicts, lists, tuples, strings, numbers, booleans, "
            f"None): {e}",
        ) from e


def sha256_of(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
