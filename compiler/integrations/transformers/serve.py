"""transformers serve on compiled parsers.

    import rtcompile.integrations.transformers.serve
    # before (or after) the server starts:
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()

    python -m rtcompile serve [ARGS ...]                # `transformers serve ARGS`, accelerated

Supported releases: the transformers releases in `SUPPORTED_TRANSFORMERS_RELEASES` (5.25.0), the
ones whose serving code this module is tested against. With any other release installed,
`accelerate_transformers_serve()` raises `UnsupportedTransformersError` (naming the installed and
the supported releases) before changing anything, and `python -m rtcompile serve` exits with
status 2 and a one-line `rtcompile: error: ...`: a server is never left half patched.

How transformers serve 5.25.0 parses model output, all in `transformers/cli/serving/utils.py`:

- streaming requests: `build_response_parser` resolves the template (the tokenizer's
  `response_template`, else a fallback by `model_type`) and builds
  `ResponseParser(template, prefix=<prompt ids>, tools=tools, tokenizer=tokenizer)`, a parser fed
  token ids; the API server's `Detokenizer` feeds it one generated id at a time (`feed([id])`) and
  turns its events into queue items with `response_events_to_chunks`, which the chat-completions
  and Responses handlers turn into SSE chunks;
- whole responses: `parse_assistant_message` calls `tokenizer.parse_response(generated_ids,
  template, prefix=<prompt ids>, tools=tools)`;
- with `--api-server-count N` (N > 1), `Serve.run_api_servers` starts each API server in a new
  process with multiprocessing's `spawn` start method, target `run_until_parent_exits` (imported
  from that module when it runs), so nothing patched in the parent process reaches them.

`accelerate_transformers_serve()` replaces three names of that module, keeping every function of
transformers' serving path as it is:

- `ResponseParser` becomes `compiled_response_parser`, a factory with the interpreter's signature
  returning the compiled parser (`rtcompile.ResponseParser`, fed the same token ids). A template
  the compiler does not take (an already-loaded `ResponseTemplate` object, a string, a dict it
  rejects) gets the interpreter's own parser, which parses or fails exactly as transformers serve
  does. transformers' own `build_response_parser`, `Detokenizer` and `response_events_to_chunks`
  run around it, so the same queue items and SSE chunks come out;
- `parse_assistant_message` becomes `parse_assistant_message_accelerated`, which accelerates the
  processor's tokenizer (`rtcompile.accelerate`, whose `parse_response` mirrors transformers',
  token ids included; not for a template the compiler does not take), then runs transformers'
  own function;
- both fail with the interpreter's own exception where a region fails to parse (the cause of
  rtcompile's `RegionError`, whose message adds the field's name and the region's text): the
  server sends that message to the client, in a stream's error chunk or a 400's detail;
- `run_until_parent_exits` becomes `run_until_parent_exits_accelerated`, a module-level function
  (so `spawn` pickles it by name) that accelerates transformers serve in the new process, then
  runs transformers' own `run_until_parent_exits`. Every process the server spawns with it runs
  accelerated: the API servers, and the model's process (which parses nothing).

The modules that import these names from `utils` when they load (the chat-completions and
Responses handlers, the model manager) are updated too when they are already loaded; those loaded
later pick up the replacements themselves. Results are identical to transformers' own
(tests/integrations/test_serve.py). `deaccelerate_transformers_serve()` puts the originals back
(tokenizers it accelerated stay accelerated: `rtcompile.deaccelerate` undoes one).
"""

from __future__ import annotations

import sys
from typing import Any

from rtcompile.releases import SERVE_RELEASES, UnsupportedTransformersError, require_transformers
from rtcompile.runtime import RegionError

__all__ = [
    "SUPPORTED_TRANSFORMERS_RELEASES",
    "UnsupportedTransformersError",
    "accelerate_transformers_serve",
    "check_transformers_release",
    "compiled_response_parser",
    "deaccelerate_transformers_serve",
    "is_transformers_serve_accelerated",
    "main",
    "parse_assistant_message_accelerated",
    "run_until_parent_exits_accelerated",
]

# The transformers releases whose serving code (transformers/cli/serve.py and cli/serving/) this
# module is written and tested against. Another release may build parsers, feed them or spawn
# its API servers differently, so it is refused rather than patched.
SUPPORTED_TRANSFORMERS_RELEASES = SERVE_RELEASES

_SERVING_UTILS = "transformers.cli.serving.utils"
# For each name replaced in the serving utils module: the modules that bind it with
# `from .utils import NAME` when they are imported (cli/serve.py imports run_until_parent_exits at
# call time, so it always sees the module's current one).
_BOUND_BY = {
    "ResponseParser": (),
    "parse_assistant_message": (
        "transformers.cli.serving.chat_completion",
        "transformers.cli.serving.response",
    ),
    "run_until_parent_exits": ("transformers.cli.serving.model_manager",),
}
# transformers' own objects behind the replacements, by name (filled when accelerating).
_originals: dict[str, Any] = {}


def check_transformers_release() -> str:
    """The installed transformers release, if this integration supports it; otherwise raise
    `UnsupportedTransformersError` (rtcompile.releases) with a one-line message naming both."""
    return require_transformers(
        "rtcompile's transformers serve integration",
        SUPPORTED_TRANSFORMERS_RELEASES,
        ", or run `transformers serve` without rtcompile",
    )


# ---- the replacements ---------------------------------------------------------------------------


def _interpreter_exception(error: RegionError) -> BaseException:
    """The interpreter's own exception behind a compiled parser's `RegionError` (its cause): the
    same class and the same message. transformers serve sends the message to the client (a
    stream's error chunk, a 400's detail), where rtcompile's own, which adds the field's name and
    the region's text, would make the answer differ."""
    return error.__cause__ if error.__cause__ is not None else error


class _ServingParser:
    """A compiled streaming parser as transformers serve uses it (`initial_events`, `feed`,
    `finalize`), failing with the interpreter's own exceptions (see `_interpreter_exception`)."""

    __slots__ = ("_parser", "_feed")

    def __init__(self, parser: Any):
        self._parser = parser
        self._feed = parser.feed

    def feed(self, chunk: Any) -> list:
        try:
            return self._feed(chunk)
        except RegionError as error:
            raise _interpreter_exception(error) from None

    def finalize(self) -> tuple:
        try:
            return self._parser.finalize()
        except RegionError as error:
            raise _interpreter_exception(error) from None

    def __getattr__(self, name: str) -> Any:  # initial_events, defused, ...
        return getattr(self._parser, name)


def _compiler_takes(template: Any) -> bool:
    """Whether rtcompile parses with this template: a template dict the compiler validates (and
    compiles, once: `rtcompile.load` keeps it). Anything else goes to the interpreter, which then
    parses exactly as transformers serve does or fails with its own error: transformers' loaded
    `ResponseTemplate` objects, a string, a template the compiler rejects."""
    from rtcompile import TemplateError, api

    if not isinstance(template, dict):
        return False
    try:
        api.load(template)
    except TemplateError:
        return False
    return True


def compiled_response_parser(response_template, prefix=None, *, tools=None, tokenizer=None):
    """transformers' `ResponseParser(response_template, prefix, tools=, tokenizer=)`, compiled by
    rtcompile: with a `tokenizer`, `prefix` and `feed` take token ids, as in transformers 5.25.0. A
    template the compiler does not take (`_compiler_takes`) gets the interpreter's own parser."""
    from rtcompile import api

    if not _compiler_takes(response_template):
        interpreter = _originals["ResponseParser"]
        return interpreter(response_template, prefix, tools=tools, tokenizer=tokenizer)
    return _ServingParser(
        api.ResponseParser(response_template, prefix, tools=tools, tokenizer=tokenizer)
    )


def parse_assistant_message_accelerated(
    processor, config, generated_ids, input_ids, cleaned_content="", tools=None
):
    """transformers' `parse_assistant_message`, run after accelerating the processor's tokenizer, so
    that its `tokenizer.parse_response(generated_ids, ...)` runs on the compiled parser (failing
    with the interpreter's own exceptions, see `_interpreter_exception`). The tokenizer is left as
    it is when the compiler does not take the template transformers resolves for it (its own, or
    the fallback for the model type: `_compiler_takes`)."""
    from transformers.cli.serving.utils import get_response_template

    from .tokenizers import accelerate, is_accelerated

    tokenizer = getattr(processor, "tokenizer", processor)
    if not is_accelerated(tokenizer) and _compiler_takes(get_response_template(processor, config)):
        accelerate(tokenizer)
    original = _originals["parse_assistant_message"]
    try:
        return original(processor, config, generated_ids, input_ids, cleaned_content, tools)
    except RegionError as error:
        raise _interpreter_exception(error) from None


def run_until_parent_exits_accelerated(target, *args):
    """The target of the processes transformers serve spawns (its API servers with
    `--api-server-count N`, its model's process), in place of transformers'
    `run_until_parent_exits`. A `spawn` child starts a new interpreter, where nothing of the
    parent's patching exists: this accelerates transformers serve there, then runs transformers' own
    `run_until_parent_exits(target, *args)`. Module-level, so `spawn` pickles it by name."""
    accelerate_transformers_serve()
    return _originals["run_until_parent_exits"](target, *args)


_REPLACEMENTS = {
    "ResponseParser": compiled_response_parser,
    "parse_assistant_message": parse_assistant_message_accelerated,
    "run_until_parent_exits": run_until_parent_exits_accelerated,
}


# ---- patching -----------------------------------------------------------------------------------


def accelerate_transformers_serve() -> None:
    """Make transformers serve parse with compiled parsers, in this process and in the processes it
    spawns (see the module docstring). Idempotent; works whether or not the server's modules are
    already imported. Raises `UnsupportedTransformersError`, changing nothing, unless the installed
    transformers is one of `SUPPORTED_TRANSFORMERS_RELEASES`."""
    check_transformers_release()
    import importlib

    utils = importlib.import_module(_SERVING_UTILS)
    for name, replacement in _REPLACEMENTS.items():
        current = getattr(utils, name)
        if current is not replacement:
            _originals[name] = current
            setattr(utils, name, replacement)
        for module_name in _BOUND_BY[name]:
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, name, None) is _originals[name]:
                setattr(module, name, replacement)


def deaccelerate_transformers_serve() -> None:
    """Undo `accelerate_transformers_serve` in this process. Tokenizers it accelerated stay
    accelerated (with the interpreter's results anyway; `rtcompile.deaccelerate` undoes one)."""
    utils = sys.modules.get(_SERVING_UTILS)
    if utils is None:
        return
    for name, replacement in _REPLACEMENTS.items():
        original = _originals.get(name)
        if original is None:
            continue
        if getattr(utils, name) is replacement:
            setattr(utils, name, original)
        for module_name in _BOUND_BY[name]:
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, name, None) is replacement:
                setattr(module, name, original)


def is_transformers_serve_accelerated() -> bool:
    """Whether transformers serve builds compiled parsers in this process."""
    utils = sys.modules.get(_SERVING_UTILS)
    return utils is not None and utils.ResponseParser is compiled_response_parser


def main(argv: list[str]) -> int:
    """`python -m rtcompile serve ARGS`: `transformers serve ARGS` with compiled parsers. An
    unsupported transformers release is refused before anything starts, with a `UsageError` (the
    command line prints it as one `rtcompile: error: ...` line, exit status 2)."""
    from rtcompile.arguments import UsageError

    try:
        accelerate_transformers_serve()
    except UnsupportedTransformersError as error:
        raise UsageError(str(error)) from None
    from transformers.cli.transformers import app

    try:
        app(["serve", *argv], prog_name="python -m rtcompile")
    except SystemExit as exit:  # typer ends with SystemExit; its code is the status
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    return 0
