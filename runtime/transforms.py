"""Transform support for generated code.

The code generator turns a field's `transform` into a direct construction of the output (dict and
list displays with the values in place); what remains at parse time is resolving a placeholder that
may fail, with the interpreter's exceptions and messages: KeyError for an unknown name, ValueError
for a dotted path that cannot be followed.
"""

from __future__ import annotations

from typing import Any, Iterator

from .scanning import LazyRegex

# A whole-string transform placeholder: `{name}` or `{name.key.key}`, with the interpreter's syntax
# (and its engine: `\w` is the regex module's; compiled when first used, not at import).
PLACEHOLDER = LazyRegex(r"\{(\w+(?:\.\w+)*)\}")


def resolve(scope: dict, path: str, root: str, keys: tuple[str, ...] = ()) -> Any:
    """The value of the placeholder `{path}` (= `root.key1.key2...`) in `scope`."""
    if root not in scope:
        raise KeyError(f"transform placeholder '{{{path}}}' is not defined. Available: {sorted(scope)}")
    value = scope[root]
    for key in keys:
        if not isinstance(value, dict):
            raise ValueError(f"transform placeholder '{{{path}}}' cannot index into {type(value).__name__} at '{key}'")
        if key not in value:
            raise ValueError(f"transform placeholder '{{{path}}}' is missing key '{key}'. Available: {sorted(value)}")
        value = value[key]
    return value


def each_scope(field: str, content: Any, captures: dict) -> Iterator[dict]:
    """The scopes of a `transform_each` field: one per element of its parsed list."""
    if not isinstance(content, list):
        raise ValueError(
            f"Field '{field}': transform_each requires the parsed content to be a list, got {type(content).__name__}."
        )
    for item in content:
        if not isinstance(item, dict):
            raise ValueError(
                f"Field '{field}': transform_each requires each list element to be a dict, got {type(item).__name__}."
            )
        yield {**captures, **item}
