"""rtcompile: compile response templates into specialized Python parser modules.

The pipeline, one folder per stage: `frontend/` (a template in, a validated IR out), `codegen/`
(the IR in, a module's source out), then `cache` (compiled modules on disk, verified) and `api`
(the public entry points, which orchestrate them). `grammar/` is the second backend: the same IR
in, a constrained-decoding grammar (an xgrammar structural tag) out. Generated modules run on `rtcompile.runtime`
alone. The users of the public API have homes of their own: `integrations/` (vLLM, SGLang,
transformers, OpenAI deltas), `batch/` (datasets) and `authoring/` (verify, infer).

The public names below are imported on first use, so that `import rtcompile.runtime` (what every
generated module does) loads none of the compiler, jinja2 or black.
"""

import importlib as _importlib

from .version import __version__

_EXPORTS = {
    "ResponseParser": "api",
    "compile_template": "api",
    "load": "api",
    "parse_response": "api",
    "ParseOptions": "runtime.options",
    "TemplateError": "frontend.canonical",
    "structural_tag": "grammar",
    "GrammarError": "grammar",
    "template_for": "library",
    "read_template": "library",
    "list_templates": "library",
    "UnknownTemplateError": "library",
    "for_tokenizer": "integrations.transformers.tokenizers",
    "accelerate": "integrations.transformers.tokenizers",
    "deaccelerate": "integrations.transformers.tokenizers",
    "is_accelerated": "integrations.transformers.tokenizers",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rtcompile' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    """The public names, and the subpackages already imported (never this module's own helpers)."""
    loaded = [name for name, value in globals().items() if getattr(value, "__package__", None) and not name.startswith("_")]
    return sorted({*__all__, *loaded})
