"""The front end: a response template (plain JSON data) in, a validated IR out.

    validate.py   check the template as the interpreter does and lower it to the IR (`lower`)
    ir.py         the IR: frozen dataclasses, the only thing the code generator reads
    patterns.py   static facts about delimiter patterns (what a scanner may skip, when a match is final)
    canonical.py  a template's identity (canonical JSON, sha256), `TemplateError`, the literal emitter
    lint.py       warnings about templates the interpreter accepts but trips over while parsing

`lower`, `json_path` and `TemplateError` are importable from here. They are loaded on first use, so
that reading a template's identity (`rtcompile.frontend.canonical`, which a cache hit needs) costs no
validation code.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"lower": "validate", "json_path": "validate", "TemplateError": "canonical"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
