"""The canonical form of a template: its identity for hashing, caching and embedding.

Kept apart from the front end so that a cache hit needs neither validation nor lowering: a template
whose canonical JSON was compiled before was valid then, and is the same template now.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class TemplateError(ValueError):
    """An invalid response template. `path` is the JSON path of the problem."""

    def __init__(self, path: str, detail: str):
        super().__init__(f"{path}: {detail}" if path else detail)
        self.path = path
        self.detail = detail


class TemplateTypeError(TemplateError, TypeError):
    """An invalid template where the interpreter raises TypeError (e.g. a non-string pattern)."""


JSON_SCALARS = (str, int, float, bool, type(None))


def _check_json_data(value: Any) -> None:
    # json.dumps would quietly turn tuples into lists (the interpreter rejects a tuple where it
    # wants a list), and dict keys that are numbers into strings: refuse both.
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TemplateError("", f"response_template keys must be strings, got {type(key).__name__} {key!r}")
            _check_json_data(item)
    elif isinstance(value, list):
        for item in value:
            _check_json_data(item)
    elif not isinstance(value, JSON_SCALARS):
        raise TemplateError(
            "",
            "response_template must be JSON data (dicts, lists, strings, numbers, booleans, null); "
            f"got {type(value).__name__}",
        )


def canonical_json(template: Any) -> str:
    """The template as canonical JSON text: key order kept (it is meaningful), ASCII only."""
    _check_json_data(template)
    return json.dumps(template, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def sha256_of(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()
