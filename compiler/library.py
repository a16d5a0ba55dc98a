"""The library of bundled response templates: `templates/*.json`, described by `templates/index.json`.

Each bundled template is plain response-template JSON (the same dict `transformers` accepts as a
`response_template`); everything about it that is not part of the template (the model families and
`model_type` values it serves, where its delimiters are documented, its known limitations) lives in
the index, so the template files stay loadable by the interpreter unchanged.

    >>> template_for("qwen3")["start_anchor"]
    '<|im_start|>assistant\\n'
    >>> template_for("qwen3_moe") == template_for("qwen3")   # a model_type finds its template too
    True

`read_template` (and `template_for`, given a path) also reads templates that are not bundled: a
template JSON file, a `tokenizer_config.json` holding a `response_template`, or a tokenizer directory.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; the annotation is all we need from it
    from importlib.resources.abc import Traversable

__all__ = [
    "UnknownTemplateError",
    "list_templates",
    "named_template",
    "read_template",
    "template_for",
    "template_names",
    "template_path",
]

_PACKAGE = "rtcompile.templates"
_INDEX_FILE = "index.json"


class UnknownTemplateError(KeyError, ValueError):
    """No bundled template has this name or serves this `model_type`.

    It is both a `KeyError` (a failed lookup) and a `ValueError` (a bad argument), so callers can
    catch whichever they expect. Unlike a plain `KeyError`, its message prints without quotes.
    """

    def __init__(self, requested: str, message: str):
        super().__init__(message)
        self.requested = requested
        self.message = message

    def __str__(self) -> str:
        return self.message


@functools.lru_cache(maxsize=None)
def _index() -> tuple[dict[str, Any], ...]:
    """The index entries, read once. Callers get deep copies, never these objects."""
    raw = json.loads(_resource(_INDEX_FILE).read_text(encoding="utf-8"))
    return tuple(raw["templates"])


@functools.lru_cache(maxsize=None)
def _entries_by_key() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    by_name = {entry["name"]: entry for entry in _index()}
    by_model_type = {
        model_type: entry for entry in _index() for model_type in entry.get("model_types", [])
    }
    return by_name, by_model_type


@functools.lru_cache(maxsize=None)
def _load_template_file(file_name: str) -> dict[str, Any]:
    return json.loads(_resource(file_name).read_text(encoding="utf-8"))


def _resource(file_name: str) -> Traversable:
    return resources.files(_PACKAGE) / file_name


def _entry(name_or_model_type: str) -> dict[str, Any]:
    if not isinstance(name_or_model_type, str):
        raise TypeError(
            "expected a bundled template name or a model_type string, "
            f"got {type(name_or_model_type).__name__}"
        )
    by_name, by_model_type = _entries_by_key()
    # A name wins over a model_type, so every template stays reachable by its own name.
    entry = by_name.get(name_or_model_type) or by_model_type.get(name_or_model_type)
    if entry is None:
        raise UnknownTemplateError(
            name_or_model_type,
            f"no bundled response template is named or serves model_type {name_or_model_type!r}. "
            f"Template names: {', '.join(sorted(by_name))}. "
            f"Model types: {', '.join(sorted(by_model_type))}.",
        )
    return entry


def template_names() -> list[str]:
    """The names of all bundled templates, sorted."""
    return sorted(entry["name"] for entry in _index())


def list_templates() -> list[dict[str, Any]]:
    """The index entries (name, file, families, model_types, documented_by, status, notes,
    limitations), in index order. The list and its dicts are copies the caller may change."""
    return copy.deepcopy(list(_index()))


def template_for(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """The bundled response template with this name, or the one serving this HF `model_type`
    (`config.model_type`, e.g. ``"qwen3_moe"``); or, for an existing template file or tokenizer
    directory (or any `os.PathLike`), the template it holds (see `read_template`). Returns a fresh
    copy on every call.

    Raises `UnknownTemplateError` (a `KeyError` and a `ValueError`) listing the known names and
    model types when nothing matches.
    """
    if isinstance(name_or_path, os.PathLike) or (isinstance(name_or_path, str) and _names_a_template_file(name_or_path)):
        return read_template(name_or_path)
    return _bundled(name_or_path)


def named_template(spec: str | os.PathLike) -> dict:
    """What the drop-ins (`parse_response`, `ResponseParser`, `load`) read for a template given as a
    string: an existing template file or tokenizer directory, or a bundled template's name or
    model_type. Any other string is rejected as the interpreter rejects a template that is not a
    dict, with a TemplateError saying what was looked for."""
    from .frontend.canonical import TemplateError

    if isinstance(spec, os.PathLike) or _names_a_template_file(spec):
        return read_template(spec)
    by_name, by_model_type = _entries_by_key()
    if spec in by_name or spec in by_model_type:
        return _bundled(spec)
    raise TemplateError(
        "",
        f"response_template must be a dict, got str ({spec!r} names no template file, tokenizer "
        "directory or bundled template)",
    )


def _names_a_template_file(text: str) -> bool:
    """An existing file, or a tokenizer directory (one with a tokenizer_config.json)."""
    path = Path(text)
    try:
        return path.is_file() or (path / "tokenizer_config.json").is_file()
    except (OSError, ValueError):  # (a name no filesystem takes: NUL, too long)
        return False


def _bundled(name_or_model_type: str) -> dict[str, Any]:
    entry = _entry(name_or_model_type)
    return copy.deepcopy(_load_template_file(entry["file"]))


def read_template(source: str | os.PathLike) -> dict:
    """A response template from a JSON file (a template, or a tokenizer_config.json holding one), a
    tokenizer directory, or a bundled template's name or model_type (a name that is no file)."""
    from .frontend.canonical import TemplateError

    path = Path(source)
    if path.is_dir():
        path = path / "tokenizer_config.json"
    if not path.exists() and isinstance(source, str) and os.sep not in source and not source.endswith(".json"):
        return _bundled(source)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict) and "fields" not in data:
        if "response_template" in data:
            data = data["response_template"]
        elif path.name == "tokenizer_config.json":
            data = None
        if data is None:
            raise TemplateError("response_template", f"{path} has no response template")
    return data


def template_path(name_or_model_type: str) -> Traversable:
    """Where the bundled template's JSON file lives (a `pathlib.Path` for ordinary installs;
    an `importlib.resources` Traversable in general)."""
    return _resource(_entry(name_or_model_type)["file"])
