"""Shared helpers for tests that compare rtcompile with the transformers interpreter."""

from __future__ import annotations

from typing import Any, Callable

from transformers.utils import chat_parsing as interpreter

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
