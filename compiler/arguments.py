"""What every command of `python -m rtcompile` shares: one way to fail, one way to name a template.

A bad argument, template or input ends a command with one line on stderr, `rtcompile: error: ...`,
and exit status 2, whether argparse finds it (`ArgumentParser`) or the command does (`UsageError`,
which `rtcompile.__main__` prints). Commands name a response template the same way everywhere
(`read_template_argument`): a template JSON file, a tokenizer_config.json or tokenizer directory,
or a bundled template's name or model_type.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad argument, template or input, or a failed job: one line, exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the command line's one-line errors (`rtcompile: error: parse: ...`) in place of
    a usage block and `python -m rtcompile parse: error: ...`; --help prints the usage as usual."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split()[-1]
        where = "" if command == "rtcompile" else f"{command}: "
        self.exit(EXIT_USAGE, f"rtcompile: error: {where}{message} (see {self.prog} --help)\n")


def read_template_argument(spec: str) -> dict:
    """The response template `spec` names, or a UsageError that says why not."""
    from .frontend.canonical import TemplateError
    from .library import read_template

    try:
        return read_template(spec)
    except FileNotFoundError:
        raise UsageError(f"{spec}: no such file, tokenizer directory or bundled template") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{spec}: not valid JSON: {e}") from None
    except (TemplateError, KeyError, ValueError, OSError) as e:
        raise UsageError(f"{spec}: {e}") from None


def fail(message: str) -> int:
    """Print a command's one-line error; the exit status to return."""
    print(f"rtcompile: error: {message}", file=sys.stderr)
    return EXIT_USAGE
