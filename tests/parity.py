"""Shared helpers for tests that compare rtcompile with the transformers interpreter."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from transformers.utils import chat_parsing as interpreter
from transformers.utils.chat_parsing import response_parser as interpreter_module

import rtcompile


def builtin_class(error: BaseException) -> type:
    """The most derived built-in exception class of `error` (rtcompile raises subclasses)."""
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def run_stream(make: Callable[[], Any], chunks: list[str]) -> list:
    """Every observable step of a streaming parse: events per step, the message, or where it raised."""
    steps: list = []
    try:
        parser = make()
        steps.append(("init", parser.initial_events))
        for chunk in chunks:
            steps.append(("feed", parser.feed(chunk)))
        steps.append(("final", parser.finalize()))
    except Exception as e:  # the class is compared, at the step it happened
        steps.append(("raised", builtin_class(e)))
    return steps


def both(template: dict, prefix: str | None, chunks: list[str], **kwargs: Any) -> tuple[list, list]:
    expected = run_stream(lambda: interpreter.ResponseParser(template, prefix=prefix, **kwargs), chunks)
    actual = run_stream(lambda: rtcompile.ResponseParser(template, prefix, **kwargs), chunks)
    return expected, actual


def assert_same(template: dict, prefix: str | None, chunks: list[str], **kwargs: Any) -> list:
    expected, actual = both(template, prefix, chunks, **kwargs)
    assert actual == expected
    return actual


# ---- the interpreter, instrumented to detect its no-progress loop ------------------------------


class InterpreterLoop(Exception):
    """The interpreter kept re-matching zero-width delimiters at one position: it never returns
    (and its event list grows until memory runs out)."""


# A healthy `_process` revisits one buffer position a handful of times at most (a zero-width open,
# then its close, then the implicit close); anything far beyond that is the endless cycle.
_MAX_SCANS_AT_ONE_POSITION = 64


class LoopGuardedInterpreter(interpreter_module.ResponseParser):
    """transformers' ResponseParser, unchanged except that it raises InterpreterLoop instead of
    spinning. Counting scans per buffer position detects the loop exactly and costs nothing."""

    def _process(self, events: list, eos: bool) -> None:
        self._loop_guard_position = -1
        self._loop_guard_scans = 0
        super()._process(events, eos)

    def _scan(self, watch, eos):
        if self._pos == self._loop_guard_position:
            self._loop_guard_scans += 1
            if self._loop_guard_scans > _MAX_SCANS_AT_ONE_POSITION:
                raise InterpreterLoop(f"no progress at buffer position {self._pos}")
        else:
            self._loop_guard_position, self._loop_guard_scans = self._pos, 0
        return super()._scan(watch, eos)


@contextlib.contextmanager
def loop_guarded_interpreter() -> Iterator[None]:
    """Within it, the interpreter's own entry points that build their parser inside transformers
    (`parse_response`, and so a tokenizer's `parse_response`) build a LoopGuardedInterpreter: a
    generated template on which the interpreter would spin raises InterpreterLoop instead."""
    original = interpreter_module.ResponseParser
    interpreter_module.ResponseParser = LoopGuardedInterpreter
    try:
        yield
    finally:
        interpreter_module.ResponseParser = original
