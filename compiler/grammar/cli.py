"""`python -m rtcompile grammar TEMPLATE --tools FILE [...]`: print the structural tag.

    python -m rtcompile grammar qwen3 --tools tools.json --tool-choice required
    python -m rtcompile grammar qwen3 --tools tools.json --tool-choice get_weather --no-parallel \\
        --prefix prompt.txt --tokenizer path/to/tokenizer_dir
    python -m rtcompile grammar minimax_m2 --tools tools.json --stop '[e~['

TOOLS is a JSON file holding a list of OpenAI-style tools (or an object with a "tools" list).
Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rtcompile.arguments import ArgumentParser, UsageError, read_template_argument

from .errors import GrammarError


def parser() -> ArgumentParser:
    out = ArgumentParser(
        prog="python -m rtcompile grammar",
        description="Print the xgrammar structural tag (JSON) under which a model writes tool calls "
        "the template's parser reads, for the given tools and tool choice.",
    )
    out.add_argument("template", metavar="TEMPLATE")
    out.add_argument("--tools", metavar="FILE", required=True, help="a JSON list of OpenAI-style tools")
    out.add_argument("--tool-choice", default="auto", metavar="CHOICE", help="auto, required, none, or a tool's name (default: auto)")
    out.add_argument("--no-parallel", action="store_true", help="at most one call (parallel_tool_calls=false)")
    out.add_argument("--prefix", metavar="FILE", help="the prompt, as text: the grammar starts where the parser is after it")
    out.add_argument("--tokenizer", metavar="DIR", help="a tokenizer directory: control tokens are matched by id")
    out.add_argument(
        "--stop", action="append", metavar="TOKEN",
        help="a token that ends generation, as spelled (repeatable; default: the tokenizer's end of sequence)",
    )
    out.add_argument("--indent", type=int, default=None, metavar="N", help="indent the JSON output")
    return out


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    template = read_template_argument(args.template)
    tools = _read_tools(args.tools)
    choice: object = args.tool_choice
    if choice not in ("auto", "required", "none"):
        choice = {"type": "function", "function": {"name": args.tool_choice}}
    prefix = _read_text(args.prefix) if args.prefix else None
    tokenizer = _load_tokenizer(args.tokenizer) if args.tokenizer else None
    if tokenizer is not None and prefix is not None:
        prefix = tokenizer.encode(prefix, add_special_tokens=False)
    from . import structural_tag

    try:
        tag = structural_tag(
            template, tools, tool_choice=choice, parallel_tool_calls=not args.no_parallel, prefix=prefix, tokenizer=tokenizer,
            stop_tokens=args.stop,
        )
    except GrammarError as e:
        raise UsageError(f"{args.template}: {e}") from None
    sys.stdout.write(json.dumps(tag, indent=args.indent, ensure_ascii=False) + "\n")
    return 0


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}") from None


def _read_tools(path: str) -> list:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON: {e}") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a list of tools")
    return data


def _load_tokenizer(path: str):
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise UsageError(f"--tokenizer needs transformers (pip install 'rtcompile[transformers]'): {e}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot load a tokenizer: {str(e).splitlines()[0]}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"{path}: a fast tokenizer is needed to match control tokens by id")
    return tokenizer
