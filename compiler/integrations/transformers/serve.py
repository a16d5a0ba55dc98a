"""transformers serve on compiled parsers.

    import rtcompile.integrations.transformers.serve
    rtcompile.integrations.transformers.serve.accelerate_transformers_serve()     # before (or after) the server starts

    python -m rtcompile serve [ARGS ...]                # `transformers serve ARGS`, accelerated

`transformers serve` parses model output in `transformers/cli/serving/utils.py`: streaming
requests build `transformers.utils.chat_parsing.ResponseParser` there (`build_response_parser`;
`DirectStreamer` / `CBStreamer` turn its events into chunks with `response_events_to_chunks`), and
whole responses go through `tokenizer.parse_response` (`parse_assistant_message`). Neither reaches
a tokenizer accelerated by `rtcompile.accelerate` before the server loads it, so this patches the
serving module itself, in two places, keeping every function of transformers' serving path as it
is:

- the module's `ResponseParser` becomes a factory returning the compiled parser for the template
  (the interpreter's class for a template the compiler does not take as JSON): transformers' own
  `build_response_parser` resolves the template and the prefix and calls it; the streamers and
  `response_events_to_chunks` see the same events, so the same chunks;
- `parse_assistant_message` accelerates the processor's tokenizer (`rtcompile.accelerate`, whose
  `parse_response` is the interpreter's argument for argument) and then runs transformers' own
  function, in the serving module and in the handlers that imported it by name.

Results are identical to transformers' (tests/test_serve.py drives these functions with a locally
built tokenizer); `deaccelerate_transformers_serve()` puts the originals back.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = [
    "accelerate_transformers_serve",
    "deaccelerate_transformers_serve",
    "is_transformers_serve_accelerated",
    "main",
]

_SERVING_UTILS = "transformers.cli.serving.utils"
# Handlers that bind `parse_assistant_message` by name when they are imported.
_HANDLER_MODULES = ("transformers.cli.serving.chat_completion", "transformers.cli.serving.response")
_MARK = "_rtcompile_original"


def _compiled_response_parser(original: type) -> Any:
    from rtcompile import api
    from .tokenizers import _compilable

    def ResponseParser(template: Any, prefix: Any = None, tools: Any = None):  # noqa: N802
        if not _compilable(template):
            return original(template, prefix=prefix, tools=tools)
        return api.ResponseParser(template, prefix, tools=tools)

    ResponseParser.__doc__ = "transformers' ResponseParser, compiled by rtcompile (see rtcompile.integrations.transformers.serve)."
    setattr(ResponseParser, _MARK, original)
    return ResponseParser


def _accelerated_parse_assistant_message(original: Any) -> Any:
    from .tokenizers import accelerate, is_accelerated

    def parse_assistant_message(processor, model, *args: Any, **kwargs: Any):
        tokenizer = getattr(processor, "tokenizer", processor)
        if not is_accelerated(tokenizer):
            accelerate(tokenizer)
        return original(processor, model, *args, **kwargs)

    parse_assistant_message.__doc__ = original.__doc__
    setattr(parse_assistant_message, _MARK, original)
    return parse_assistant_message


def accelerate_transformers_serve() -> None:
    """Make `transformers serve` parse with compiled parsers (see the module docstring). Idempotent;
    works whether or not the server's modules are already imported."""
    import importlib

    utils = importlib.import_module(_SERVING_UTILS)
    if getattr(utils.ResponseParser, _MARK, None) is None:
        utils.ResponseParser = _compiled_response_parser(utils.ResponseParser)
    if getattr(utils.parse_assistant_message, _MARK, None) is None:
        utils.parse_assistant_message = _accelerated_parse_assistant_message(
            utils.parse_assistant_message
        )
    for name in _HANDLER_MODULES:  # imported later, they pick up the patched function themselves
        handler = sys.modules.get(name)
        if handler is not None and hasattr(handler, "parse_assistant_message"):
            handler.parse_assistant_message = utils.parse_assistant_message


def deaccelerate_transformers_serve() -> None:
    """Undo `accelerate_transformers_serve` (tokenizers it accelerated stay accelerated; their
    results are the interpreter's anyway: `rtcompile.deaccelerate` undoes one)."""
    utils = sys.modules.get(_SERVING_UTILS)
    if utils is None:
        return
    for attribute in ("ResponseParser", "parse_assistant_message"):
        original = getattr(getattr(utils, attribute), _MARK, None)
        if original is not None:
            setattr(utils, attribute, original)
    for name in _HANDLER_MODULES:
        handler = sys.modules.get(name)
        if handler is not None and hasattr(handler, "parse_assistant_message"):
            handler.parse_assistant_message = utils.parse_assistant_message


def is_transformers_serve_accelerated() -> bool:
    utils = sys.modules.get(_SERVING_UTILS)
    return utils is not None and getattr(utils.ResponseParser, _MARK, None) is not None


def main(argv: list[str]) -> int:
    """`python -m rtcompile serve ARGS`: `transformers serve ARGS` with compiled parsers."""
    accelerate_transformers_serve()
    from transformers.cli.transformers import app

    try:
        app(["serve", *argv], prog_name="python -m rtcompile")
    except SystemExit as exit:  # typer ends with SystemExit; its code is the status
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    return 0
