"""The public API: compile a template, load it as a module, and the interpreter's drop-ins.

`compile_template` returns the source text; `load` executes exactly that text (never live objects
handed over in a globals dict), so an imported file, a cached file and an in-memory module can
never disagree.
"""

from __future__ import annotations

import copy
import os
import threading
import types
from typing import Any

from .frontend import canonical
from .runtime.options import ParseOptions
from .library import named_template, read_template  # noqa: F401 (read_template is part of this API)


def compile_template(template: Any, *, origin: str | None = None) -> str:
    """Validate `template` and return the source of its generated parser module."""
    from . import codegen, frontend  # (imported here: a cache hit needs neither)

    return codegen.generate(frontend.lower(template), origin=origin)


def module_from_source(source: str, sha256: str) -> types.ModuleType:
    """Execute generated source as a fresh module (registered in linecache, so tracebacks and pdb
    show the generated lines)."""
    from .cache import compile_in_memory

    return module_from_code(compile_in_memory(source, sha256), sha256)


def module_from_code(code: types.CodeType, sha256: str) -> types.ModuleType:
    """Execute the compiled code of generated source as a fresh module."""
    module = types.ModuleType(f"rtcompile_generated_{sha256[:16]}")
    module.__file__ = code.co_filename
    exec(code, module.__dict__)
    return module


# ---- in-process memo ----------------------------------------------------------------------------


class _Memo:
    """Compiled modules by template hash, with a fast path for the same template object reused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_hash: dict[str, types.ModuleType] = {}
        self._last: tuple[Any, Any, types.ModuleType] | None = None  # (object, snapshot, module)

    def get(self, template: Any) -> types.ModuleType:
        """The module for a template dict, or for a path or bundled name (read on every call: the
        file may change)."""
        if isinstance(template, (str, os.PathLike)):
            template = named_template(template)
        last = self._last
        if last is not None and last[0] is template and last[1] == template:
            return last[2]
        key = canonical.sha256_of(canonical.canonical_text(template))
        module = self._by_hash.get(key)
        if module is None:
            from .cache import default_cache

            module = default_cache().load(key, lambda: compile_template(template), lambda code: module_from_code(code, key))
            with self._lock:
                module = self._by_hash.setdefault(key, module)
        self._last = (template, copy.deepcopy(template), module)
        return module


_MEMO = _Memo()


def load(template_or_path: Any) -> types.ModuleType:
    """The generated parser module for a template dict, a template JSON file, a tokenizer_config.json
    with a `response_template`, or the name of a bundled template."""
    return _MEMO.get(template_or_path)


def parse_response(
    text: Any,
    template: Any,
    *,
    prefix: Any = None,
    tools: list | None = None,
    tokenizer: Any = None,
    options: ParseOptions | None = None,
    **option_keywords: Any,
) -> dict:
    """Drop-in for transformers.utils.chat_parsing.parse_response, through the compiled parser.

    With a fast transformers `tokenizer`, `text` and `prefix` are token ids (lists, numpy arrays,
    torch tensors; a str prefix is encoded first): control tokens act as delimiters only where the
    model generated them as ids, as in transformers 5.25.0. `options`: a ParseOptions, or the same
    options as keywords laid over it: `errors="keep"` records regions that fail to parse instead
    of raising; `timeout` bounds each delimiter regex search (seconds); by token ids,
    `refuse_unknown_ids=True` makes an id that names no token a TokenIdError (the interpreter
    decodes it to nothing) and `recover_decode_errors=True` goes on where tokenizers'
    DecodeStream fails on byte-fallback ids (runtime/TOKEN_IDS.md). The defaults are the
    interpreter's behaviour."""
    options = ParseOptions.of(options, option_keywords)
    return _MEMO.get(template).parse_response(text, prefix=prefix, tools=tools, tokenizer=tokenizer, options=options)


def ResponseParser(  # noqa: N802 (a drop-in for the interpreter's class)
    template: Any,
    prefix: Any = None,
    *,
    tools: list | None = None,
    tokenizer: Any = None,
    options: ParseOptions | None = None,
    **option_keywords: Any,
):
    """Drop-in for transformers.utils.chat_parsing.ResponseParser: a compiled streaming parser
    (`.initial_events`, `.feed(text)`, `.finalize()`) for `template`. `options` (or its options
    as keywords), beside parse_response's: `report_closers=True`, each region_close event also
    carries `closer`, the text its close delimiter matched; `eager=True`, a delimiter match that
    ends where the text so far ends, and that no more text could change, is committed in that
    feed (the interpreter waits for the next). With a fast transformers `tokenizer`, `prefix` and
    `feed` take token ids, and the parser's `defused` tells whether the model has spelled out a
    control token with ordinary tokens (which then stayed text)."""
    options = ParseOptions.of(options, option_keywords)
    return _MEMO.get(template).ResponseParser(prefix, tools=tools, tokenizer=tokenizer, options=options)
