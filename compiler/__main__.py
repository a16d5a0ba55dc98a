"""Command line: python -m rtcompile TEMPLATE [-o FILE] [--check [--strict]], and subcommands.

    python -m rtcompile templates/qwen3.json -o parser.py   # a template JSON file
    python -m rtcompile path/to/tokenizer_config.json        # its "response_template"
    python -m rtcompile path/to/tokenizer_dir -o parser.py   # the directory's tokenizer_config.json
    python -m rtcompile qwen3 -o parser.py                   # a bundled template, by name or model_type
    python -m rtcompile TEMPLATE --check [--strict]          # validate and lint, write nothing
    python -m rtcompile list                                 # the bundled templates
    python -m rtcompile regenerate [--check]                 # rewrite (or verify) generated/
    python -m rtcompile cache [clear]                        # the on-disk cache
    python -m rtcompile parse INPUT -o OUTPUT --template T   # parse a dataset of generations
    python -m rtcompile serve [ARGS ...]                     # transformers serve, compiled parsers
    python -m rtcompile verify TEMPLATE --chat-template CT   # prove a template by round trip
    python -m rtcompile infer CHAT_TEMPLATE -o template.json # derive a template, then verify it
    python -m rtcompile grammar TEMPLATE --tools FILE        # the constrained-decoding grammar

Errors are one line on stderr naming the file and the JSON path, with exit status 2; the output
file is written atomically and only on success.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import frontend
from .arguments import EXIT_USAGE, ArgumentParser, UsageError, fail, read_template_argument
from .version import __version__

SUBCOMMANDS = ("list", "regenerate", "cache", "verify", "infer", "parse", "serve", "grammar")
EXIT_BROKEN_PIPE = 1  # (the Python docs' choice for a reader that closed the pipe early)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ("verify", "infer"):
            status = _round_trip_command(argv[0], argv[1:])
        elif argv and argv[0] == "serve":  # `transformers serve`, on compiled parsers
            from .integrations.transformers import serve

            status = serve.main(argv[1:])
        elif argv and argv[0] == "grammar":  # rtcompile.grammar: the structural tag of a request
            from .grammar import cli as grammar_cli

            status = grammar_cli.main(argv[1:])
        elif argv and argv[0] == "parse":  # rtcompile.batch: datasets of finished generations
            from .batch import cli

            status = cli.main(argv[1:])
        elif argv and argv[0] in SUBCOMMANDS:
            status = {"list": _list, "regenerate": _regenerate, "cache": _cache}[argv[0]](argv[1:])
        else:
            status = _compile(argv)
        sys.stdout.flush()  # (inside the try: a closed pipe shows up here at the latest)
        return status
    except UsageError as e:
        return fail(str(e))
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as the Python docs advise, pointing
        # stdout at devnull so the interpreter's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _compile_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m rtcompile",
        description="Compile a response template into a Python parser module (a drop-in for "
        "transformers' chat_parsing). Subcommands: list, regenerate, cache, parse, verify, infer, "
        "serve, grammar (python -m rtcompile SUBCOMMAND --help).",
        epilog="TEMPLATE is a response-template JSON file, a tokenizer_config.json (or tokenizer "
        "directory) with a response_template, or the name / model_type of a bundled template. "
        "A file whose name is a subcommand must be given as ./NAME.",
    )
    parser.add_argument("template", metavar="TEMPLATE")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the module here (default: stdout)")
    parser.add_argument("--check", action="store_true", help="validate and print warnings; write nothing")
    parser.add_argument("--strict", action="store_true", help="treat lint warnings as errors (with or without --check)")
    parser.add_argument("--version", action="version", version=f"rtcompile {__version__}")
    return parser


def _compile(argv: list[str]) -> int:
    args = _compile_parser().parse_args(argv)
    label, template = _read(args.template)
    try:
        lowered = frontend.lower(template)
    except (frontend.TemplateError, TypeError) as e:
        raise UsageError(f"{label}: {e}") from None
    # Warnings go to stderr whenever a template is compiled: what they name fails while parsing.
    from .frontend import lint  # (imported here: the other commands, and batch workers, need none of it)

    warnings = lint.lint(lowered)
    for warning in warnings:
        print(f"rtcompile: warning: {label}: {warning}", file=sys.stderr)
    if warnings and args.strict:
        print(f"rtcompile: error: {label}: {len(warnings)} warning(s) under --strict", file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        from . import codegen

        print(f"{label}: ok ({len(lowered.fields)} fields, {len(warnings)} warning(s))")
        fallback = codegen.one_shot_fallback(lowered)
        if fallback is None:
            print(f"{label}: parse_response reads whole messages with the one-shot reader")
        else:
            print(f"{label}: parse_response reads whole messages with the streaming machine ({fallback})")
        return 0
    from . import codegen

    source = codegen.generate(lowered, origin=label)
    if args.output is None:
        sys.stdout.write(source)
        return 0
    _write(Path(args.output), source)
    return 0


def _read(spec: str) -> tuple[str, object]:
    return spec, read_template_argument(spec)


def _write(path: Path, text: str) -> None:
    from .cache import FileSystem, user_file_mode

    if not path.parent.is_dir():  # (else the error would name the temporary file beside it)
        raise UsageError(f"{path}: cannot write: no such directory: {path.parent}")
    try:  # (the mode of any new file of the user: another user or a container may import it)
        FileSystem().write_atomic(path, text, mode=user_file_mode())
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None


def _round_trip_command(name: str, argv: list[str]) -> int:
    """verify / infer (compiler/authoring/): they render chat templates, so they need transformers,
    imported only here."""
    from .authoring import infer, verify
    from .releases import UnsupportedTransformersError

    try:
        return (verify.cli if name == "verify" else infer.cli)(argv)
    except ImportError as e:
        raise UsageError(f"{name} needs transformers (pip install 'rtcompile[verify]'): {e}") from None
    except UnsupportedTransformersError as e:
        raise UsageError(str(e)) from None


def _list(argv: list[str]) -> int:
    ArgumentParser(prog="python -m rtcompile list", description="List the bundled templates.").parse_args(argv)
    from .library import list_templates

    entries = list_templates()
    width = max(len(e["name"]) for e in entries + [{"name": "TEMPLATE"}])
    print(f"{'TEMPLATE':<{width}}  MODEL TYPES")
    for entry in entries:
        print(f"{entry['name']:<{width}}  {', '.join(entry.get('model_types', [])) or '(by name)'}")
    return 0


def _regenerate(argv: list[str]) -> int:
    parser = ArgumentParser(
        prog="python -m rtcompile regenerate",
        description="Regenerate generated/ from templates/ (the checked-in parsers).",
    )
    parser.add_argument("--check", action="store_true", help="only report modules that differ; exit 1 if any")
    args = parser.parse_args(argv)
    from .regenerate import regenerate

    stale = regenerate(write=not args.check)
    for name in stale:
        print(f"{'stale' if args.check else 'regenerated'}: generated/{name}.py")
    if args.check and stale:
        print("run: python -m rtcompile regenerate", file=sys.stderr)
        return 1
    return 0


def _cache(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m rtcompile cache", description="Show or clear the on-disk cache.")
    parser.add_argument("action", nargs="?", choices=["show", "clear"], default="show")
    args = parser.parse_args(argv)
    from .cache import default_cache

    cache = default_cache()
    if args.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.directory}")
        return 0
    entries, size = cache.stats()
    print(f"cache directory: {cache.directory}")
    print(f"entries: {len(entries)}, {size} bytes")
    for path in entries:
        print(f"  {path.name}  {_describe_template(cache.entry_template(path))}")
    return 0


def _describe_template(template: object) -> str:
    """Which template a cache entry holds: a bundled template's name, else its fields and anchor."""
    from .frontend.canonical import canonical_text
    from .library import list_templates, template_for

    if not isinstance(template, dict):
        return "(no readable template)"
    text = canonical_text(template)
    for entry in list_templates():
        if canonical_text(template_for(entry["name"])) == text:
            return f"bundled {entry['name']!r}"
    fields = template.get("fields")
    names = ", ".join(map(repr, fields)) if isinstance(fields, dict) else "?"
    anchor = template.get("start_anchor", template.get("start_anchor_pattern"))
    return f"fields {names}; start anchor {anchor!r}"


if __name__ == "__main__":
    sys.exit(main())
