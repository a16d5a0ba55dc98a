"""rtcompile: compile response templates into specialized Python parser modules.

The pipeline, one module per stage: `frontend` (validate, lower to the IR in `ir`), `codegen`
(render the module from the jinja2 templates in `codegen/`), `cache` (compiled modules on disk),
`api` (public entry points). Generated modules run on `rtcompile.runtime` alone.

The public names below are imported on first use, so that `import rtcompile.runtime` (what every
generated module does) loads none of the compiler, jinja2 or black.
"""

from __future__ import annotations

import importlib
from typing import Any

from .version import __version__

_EXPORTS = {
    "ResponseParser": "api",
    "compile_template": "api",
    "load": "api",
    "parse_response": "api",
    "TemplateError": "frontend.canonical",
    "template_for": "library",
    "list_templates": "library",
    "UnknownTemplateError": "library",
    "for_tokenizer": "integrations.transformers.tokenizers",
    "accelerate": "integrations.transformers.tokenizers",
    "deaccelerate": "integrations.transformers.tokenizers",
    "is_accelerated": "integrations.transformers.tokenizers",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rtcompile' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
