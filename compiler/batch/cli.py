"""`python -m rtcompile parse`: the command line of the batch job (`parse_file`, `parse_with_ray`).

    python -m rtcompile parse rollouts.jsonl -o parsed.jsonl --template qwen3
    python -m rtcompile parse evals.parquet -o parsed.parquet --template path/to/tokenizer_dir --jobs 8

`rtcompile.__main__` hands it the arguments after `parse`. An error is one line on stderr,
`rtcompile: error: ...`, with exit status 2; a finished job prints how many rows it wrote and how
many of them carry an error, by kind (`out.jsonl: 6000 rows, 4 with an error (parse 3, missing 1)`).
"""

from __future__ import annotations

import sys

from .. import frontend
from ..arguments import ArgumentParser, UsageError, fail, read_template_argument
from .files import FORMATS
from .rows import DEFAULT_PREFIX_COLUMN, DEFAULT_TEXT_COLUMN, DEFAULT_TOOLS_COLUMN, ERRORS_MODES, BatchError, Columns, RowError

def main(argv: list[str]) -> int:
    """Run `parse` with the arguments that follow it; the exit status."""
    try:
        return _run(argv)
    except UsageError as e:
        return fail(str(e))


def _argument_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m rtcompile parse",
        description="Parse a dataset of finished generations (JSONL, Parquet, or a datasets "
        "save_to_disk folder) into messages. The output keeps every input column and row, in "
        "order, and adds a message column (a JSON object in JSONL, a JSON string in Parquet) and "
        "an error column (null, or a record of what went wrong on that row).",
    )
    parser.add_argument("input", metavar="INPUT", help="a .jsonl, .parquet file or a datasets folder")
    parser.add_argument("-o", "--output", metavar="OUTPUT", required=True, help="where to write (format from the name: .jsonl, .parquet, else a datasets folder)")
    parser.add_argument("--template", required=True, metavar="NAME|FILE|TOKENIZER_DIR", help="the response template")
    parser.add_argument("--text-column", default=DEFAULT_TEXT_COLUMN, help="the generation (default: %(default)s)")
    parser.add_argument("--prefix-column", default=DEFAULT_PREFIX_COLUMN, help="the prompt the generation continues (default: %(default)s)")
    parser.add_argument("--no-prefix", action="store_true", help="no prompt column: each generation holds the whole message")
    parser.add_argument("--tools-column", default=DEFAULT_TOOLS_COLUMN, help="the tools: a list, or a JSON string of one; optional (default: %(default)s)")
    parser.add_argument("--message-column", default="message", help="the added message column (default: %(default)s)")
    parser.add_argument("--error-column", default="error", help="the added error column (default: %(default)s)")
    parser.add_argument("--errors", choices=ERRORS_MODES, default="default", help="default: the interpreter's message, and where it raises the error plus what keep mode recovers; keep: keep semantics throughout; strict: stop at the first bad row")
    parser.add_argument("--input-format", choices=FORMATS, help="instead of guessing from the name")
    parser.add_argument("--output-format", choices=FORMATS, help="instead of guessing from the name")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="processes that parse, this one included (default: every core); with --engine ray, the parse tasks running at once")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="bound each delimiter regex search")
    parser.add_argument("--engine", choices=("local", "ray"), default="local", help="local processes, or Ray Data (RAY_ADDRESS picks the cluster)")
    return parser


def _run(argv: list[str]) -> int:
    args = _argument_parser().parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    template = read_template_argument(args.template)
    columns = Columns(
        text=args.text_column,
        prefix=None if args.no_prefix else args.prefix_column,
        tools=args.tools_column,
        message=args.message_column,
        error=args.error_column,
    )
    options = dict(columns=columns, errors=args.errors, input_format=args.input_format, output_format=args.output_format, timeout=args.timeout)
    try:
        if args.engine == "ray":
            from .ray import parse_with_ray

            summary = parse_with_ray(args.input, args.output, template, concurrency=args.jobs, **options)
        else:
            from .job import parse_file

            summary = parse_file(args.input, args.output, template, jobs=args.jobs, **options)
    except BatchError as e:
        raise UsageError(f"{args.input}: {e}" if isinstance(e, RowError) else str(e)) from None
    except (frontend.TemplateError, TypeError) as e:
        raise UsageError(f"{args.template}: {e}") from None
    print(f"{args.output}: {summary}", file=sys.stderr)
    return 0
