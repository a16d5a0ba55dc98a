"""Which transformers release each feature of rtcompile needs; the one-line refusal of any other.

Compiling templates, parsing text and the generated modules need no transformers at all, and
`rtcompile.for_tokenizer` reads a tokenizer's `response_template` and nothing else of it. The rest
build on transformers itself, each on what one release range is known to do:

- token ids with a tokenizer (`parse_response(ids, tokenizer=)`, `ResponseParser(..., tokenizer=)`,
  the vLLM plugin's token-id mode): the tokenizer's control tokens as transformers computes them
  (`_get_control_tokens`, the same method from 5.20 to 5.25; 5.19 has none). The runtime checks
  the release when it first reads a tokenizer (`rtcompile.runtime.token_ids.TOKEN_ID_RELEASES`);
- `rtcompile.accelerate`: 5.25.0, whose `parse_response` and `get_response_parser` it mirrors
  argument for argument (5.24.0's decode ids before parsing them and take no `token_ids=`);
- `transformers serve` on compiled parsers: 5.25.0, whose serving code it patches;
- `verify` and `infer`: 5.25.0, whose chat-template sandbox renders (a private function of it) and
  whose interpreter and validator they check templates with.

Each is checked where the feature starts, before it changes anything, and an unsupported release
raises `UnsupportedTransformersError` with one line naming the installed and the supported
releases; the command line prints it as its one `rtcompile: error: ...` line.
"""

from __future__ import annotations

from rtcompile.runtime.token_ids import TOKEN_ID_RELEASES, UnsupportedTransformersError

__all__ = [
    "ACCELERATE_RELEASES",
    "AUTHORING_RELEASES",
    "SERVE_RELEASES",
    "TOKEN_ID_RELEASES",
    "UnsupportedTransformersError",
    "installed_transformers_release",
    "require_transformers",
]

ACCELERATE_RELEASES = ("5.25.0",)
SERVE_RELEASES = ("5.25.0",)
AUTHORING_RELEASES = ("5.25.0",)


def installed_transformers_release() -> str | None:
    """The version of the transformers that `import transformers` loads, or None without one."""
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def require_transformers(feature: str, releases: tuple[str, ...], advice: str = "") -> str:
    """The installed transformers release, if it is one of `releases`; otherwise raise
    `UnsupportedTransformersError`: "{feature} supports transformers {releases} only, but ...:
    install transformers=={the last}{advice}", one line."""
    installed = installed_transformers_release()
    if installed in releases:
        return installed
    found = (
        "transformers is not installed"
        if installed is None
        else f"transformers {installed} is installed"
    )
    raise UnsupportedTransformersError(
        f"{feature} supports transformers {', '.join(releases)} only, but {found}: install "
        f"transformers=={releases[-1]}{advice}"
    )
