"""What every host builds the same way around a generation: the whole output of a one-shot parse
(`WholeOutput`), the request's tools as dicts (`tool_dicts`), and a host's result types built on its
hot path without validation (`unvalidated_builder`).

Standard library only: servers import it at run time.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .generation import Renderer

__all__ = ["WholeCall", "WholeOutput", "same_as_validated", "tool_dicts", "unvalidated_builder"]


# ---- the whole output ---------------------------------------------------------------------------


@dataclass
class WholeCall:
    """One tool call of a whole output: its index in the generation, its name, its id as the
    generation gave it (a template's id; None: the host's id policy decides), and its arguments'
    JSON fragments, joined."""

    index: int
    name: str
    id: str | None = None
    fragments: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)


class WholeOutput(Renderer):
    """A renderer that keeps every operation of a generation instead of giving results per chunk:
    the text of each key, concatenated, and the calls in the order they were announced (prompt
    included). For a one-shot parse (`parse`, `detect_and_parse`) and for a client rebuilding a
    message from a stream; `take()` gives nothing, the whole is read at the end (`joined`,
    `calls`)."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}
        self.calls: list[WholeCall] = []
        self._by_index: dict[int, WholeCall] = {}

    def text(self, key: str, text: str) -> None:
        self.texts.setdefault(key, []).append(text)

    def call(self, index: int) -> WholeCall | None:
        """The call announced with `index` (None when none was)."""
        return self._by_index.get(index)

    def call_started(self, index: int, name: str, template_id: str | None) -> None:
        call = WholeCall(index, name, template_id)
        self._by_index[index] = call
        self.calls.append(call)

    def arguments(self, index: int, text: str) -> None:
        call = self._by_index.get(index)
        if call is not None:  # (fragments of a call never announced have no call to go to)
            call.fragments.append(text)

    def take(self) -> None:
        return None

    def joined(self, key: str) -> str:
        """Everything sent under `key`, in order ("" when nothing was)."""
        return "".join(self.texts.get(key, ()))

    def keys(self) -> list[str]:
        """The keys text was sent under, in the order each was first sent."""
        return list(self.texts)


# ---- the request's tools --------------------------------------------------------------------------


def tool_dicts(tools: Sequence[Any] | None, *, parsing_only: bool = False) -> list[dict]:
    """A request's tools as dicts, in order: dicts as they are, a pydantic tool as its dump
    (`model_dump(exclude_none=True)`); anything else is left out. `parsing_only`: a tool object
    with a `function.name` is read as only what the parser reads of it, its function's name and
    parameters (a tool's `model_dump` copies the whole tool: 25 us for four tools, once per
    request)."""
    result = []
    for tool in tools or ():
        if not isinstance(tool, dict):
            function = getattr(tool, "function", None)
            if parsing_only and isinstance(getattr(function, "name", None), str):
                tool = {
                    "type": "function",
                    "function": {"name": function.name, "parameters": getattr(function, "parameters", None)},
                }
            elif hasattr(tool, "model_dump"):
                tool = tool.model_dump(exclude_none=True)
        if isinstance(tool, dict):
            result.append(tool)
    return result


# ---- a host's result types without validation -------------------------------------------------------


def pydantic_slot_setters(model: type) -> tuple[Any, Any, Any, Any] | None:
    """The setters of a pydantic model's instance state and slots (`__dict__`, fields set, extra,
    private), to build an instance on a server's hot path without validation: through their
    descriptors, a lookup less each than `object.__setattr__`. None when the installed pydantic
    lays instances out otherwise."""
    state = next(
        (
            vars(klass)["__dict__"]
            for klass in model.__mro__
            if isinstance(vars(klass).get("__dict__"), types.GetSetDescriptorType)
        ),
        None,
    )
    if state is None:
        return None
    try:
        return (
            state.__set__,
            model.__pydantic_fields_set__.__set__,
            model.__pydantic_extra__.__set__,
            model.__pydantic_private__.__set__,
        )
    except AttributeError:
        return None


def same_as_validated(fast: Any, validated: Any) -> bool:
    """Whether a pydantic model instance built without validation (its instance state set
    directly, for a server's hot path) is one its validated constructor would have built: equal,
    with the same state, fields set, extras and private state, serializing alike."""
    return (
        type(fast) is type(validated)
        and fast == validated
        and vars(fast) == vars(validated)
        and fast.model_fields_set == validated.model_fields_set
        and fast.__pydantic_extra__ == validated.__pydantic_extra__
        and fast.__pydantic_private__ == validated.__pydantic_private__
        and fast.model_dump_json(exclude_unset=True) == validated.model_dump_json(exclude_unset=True)
        and fast.model_dump_json() == validated.model_dump_json()
    )


def unvalidated_builder(model: type, names: Sequence[str], samples: Sequence[tuple]) -> Callable[..., Any]:
    """`model(**dict(zip(names, values)))` as a function of the values, built without pydantic's
    validation (which costs a host several times the parse of a chunk): the instance state pydantic
    itself builds, the fields not given at their defaults (an empty list made anew each time). Used
    only if, for each of `samples`, the two are the same (checked here, once, against the pydantic
    installed); otherwise the validated constructor. The values must be what validation keeps as
    they are (a host's strings and lists of its own results)."""
    names = tuple(names)

    def validated(*values: Any) -> Any:
        return model(**dict(zip(names, values)))

    setters = pydantic_slot_setters(model)
    if setters is None or not samples:
        return validated
    try:
        build = _builder(model, names, validated(*samples[0]), setters)
        if build is None or not all(
            len(values) == len(names) and same_as_validated(build(*values), validated(*values)) for values in samples
        ):
            return validated
    except Exception:  # a pydantic whose instances are laid out otherwise
        return validated
    return build


def _builder(model: type, names: tuple, sample: Any, setters: tuple) -> Callable[..., Any] | None:
    """The unvalidated builder, its defaults read off `sample` (None when one is mutable and not an
    empty list: it could not be shared, and is not made anew here). One value and at most one
    default list, a host's text result, has a builder of its own, with no loop (the general one
    costs half as much again per result)."""
    state = dict(vars(sample))  # (in the model's field order, as pydantic builds it)
    new_lists = tuple(name for name, value in state.items() if name not in names and value == [] and type(value) is list)
    if any(
        isinstance(value, (list, dict, set, bytearray)) for name, value in state.items() if name not in names and name not in new_lists
    ):
        return None
    extra = sample.__pydantic_extra__
    if extra:
        return None
    if len(names) == 1 and len(new_lists) <= 1:
        return _one_value_builder(model, names[0], new_lists, state, extra is not None, setters)
    return _values_builder(model, names, new_lists, state, extra is not None, setters)


def _one_value_builder(model: type, key: str, new_lists: tuple, state: dict, extra_dict: bool, setters: tuple) -> Callable[[Any], Any]:
    set_state, set_fields_set, set_extra, set_private = setters
    new_instance = object.__new__
    copy = state.copy  # (a copy and item assignments: faster than a dict display, even a literal one)
    list_key = new_lists[0] if new_lists else None

    def build(value: Any) -> Any:
        result = new_instance(model)
        own = copy()
        own[key] = value
        if list_key is not None:
            own[list_key] = []
        set_state(result, own)
        set_fields_set(result, {key})
        set_extra(result, {} if extra_dict else None)
        set_private(result, None)
        return result

    return build


def _values_builder(model: type, names: tuple, new_lists: tuple, state: dict, extra_dict: bool, setters: tuple) -> Callable[..., Any]:
    set_state, set_fields_set, set_extra, set_private = setters
    new_instance = object.__new__
    given = frozenset(names)
    if given == set(state) and not extra_dict:  # every field given (a host's call items)

        def build(*values: Any) -> Any:
            result = new_instance(model)
            set_state(result, dict(zip(names, values)))
            set_fields_set(result, set(given))
            set_extra(result, None)
            set_private(result, None)
            return result

        return build

    def build(*values: Any) -> Any:
        result = new_instance(model)
        own = {**state, **dict(zip(names, values))}
        for name in new_lists:
            own[name] = []
        set_state(result, own)
        set_fields_set(result, set(given))
        set_extra(result, {} if extra_dict else None)
        set_private(result, None)
        return result

    return build
