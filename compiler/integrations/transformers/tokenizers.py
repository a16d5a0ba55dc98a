"""transformers integration: a compiled parser for a tokenizer, and tokenizers that parse with it.

    module = rtcompile.for_tokenizer(tokenizer)           # the tokenizer's response_template, compiled
    module = rtcompile.for_tokenizer(tokenizer, "qwen3")  # or a bundled name / model_type / template dict

    rtcompile.accelerate(tokenizer)            # tokenizer.parse_response / get_response_parser now compiled
    rtcompile.accelerate(tokenizer, "qwen3")   # ... and given a bundled template it did not ship with
    rtcompile.deaccelerate(tokenizer)          # back to the interpreter (and the original template)

`accelerate` patches the one tokenizer instance, never its class. The patched methods mirror
transformers 5.25.0's `PreTrainedTokenizerBase.parse_response` / `get_response_parser` argument for
argument: the `schema=` / `response_template=` override, the tokenizer's own `response_template`
read at call time, single texts and batches (lists of strings, token ids, nested lists and arrays),
one prefix broadcast to a batch or one per item, and the same exceptions in the same order. Token
ids are parsed as token ids by fast tokenizers (control tokens act as delimiters only where the
model generated them as ids: rtcompile.runtime.token_parser) and decoded with the tokenizer's own
`decode` by slow ones; `get_response_parser(token_ids=True)` returns a parser fed with ids. A
template the compiler cannot take as JSON (transformers' already-loaded `ResponseTemplate` object)
is handed to the interpreter unchanged.

transformers is never imported here at module level; this module only touches the tokenizer object
it is given (and imports transformers lazily for the interpreter fallback).
"""

from __future__ import annotations

import os
import types
from typing import Any

from rtcompile import api, frontend
from rtcompile.releases import ACCELERATE_RELEASES, require_transformers

__all__ = ["accelerate", "deaccelerate", "for_tokenizer", "is_accelerated", "resolve_template"]

# The attribute of a tokenizer instance holding its acceleration state (see `_Acceleration`).
_STATE_ATTRIBUTE = "_rtcompile_acceleration"
_PATCHED_METHODS = ("parse_response", "get_response_parser")

# The interpreter's messages, kept word for word: callers may match on them.
_NO_TEMPLATE_FOR_PARSE = (
    "This tokenizer does not have a `response_template` for parsing chat responses!"
)
_NO_TEMPLATE_FOR_STREAM = (
    "This tokenizer does not have a `response_template` set; cannot create a response event stream."
)
_PREFIX_REQUIRED = (
    "`parse_response` requires `prefix=` (the prompt that came before generation), because chat "
    "templates often pre-write part of the assistant message (e.g. an opening `<think>` tag) that the "
    "parser must see to parse correctly. If you're sure you don't need the prefix, you can pass an "
    "empty string or list."
)
_STREAM_PREFIX_NOT_SINGLE = (
    "`prefix=` must be a single sequence (str, list[int], or 1D tensor) for `get_response_parser`."
)


# ---- resolving a template -----------------------------------------------------------------------


def _underlying_tokenizer(tokenizer_or_processor: Any) -> Any:
    """A processor carries its tokenizer in `.tokenizer` (as transformers' serving code assumes)."""
    return getattr(tokenizer_or_processor, "tokenizer", tokenizer_or_processor)


def resolve_template(template: Any) -> dict:
    """A response template dict from a dict (returned as is), a bundled template's name or
    `model_type` (a str), or a path to a template JSON / tokenizer_config.json / tokenizer directory
    (an `os.PathLike`)."""
    if isinstance(template, dict):
        return template
    if isinstance(template, str):
        from rtcompile.library import template_for

        return template_for(template)
    if isinstance(template, os.PathLike):
        return api.read_template(template)
    raise TypeError(
        "a template must be a response-template dict, a bundled template's name or model_type, or a "
        f"path; got {type(template).__name__}"
    )


def for_tokenizer(tokenizer: Any, template: Any = None) -> types.ModuleType:
    """The compiled parser module for `tokenizer` (or a processor holding one).

    Without `template`, the tokenizer's own `response_template` is compiled. `template` overrides or
    supplies it, like transformers' serving fallback does for tokenizers that ship without one: a
    bundled name or `model_type` (``"qwen3"``, ``"qwen3_moe"``), a template dict, or a path.
    The tokenizer is not modified.
    """
    if template is not None:
        return api.load(resolve_template(template))
    own = getattr(_underlying_tokenizer(tokenizer), "response_template", None)
    if own is None:
        raise AttributeError(
            "This tokenizer does not have a `response_template`; pass template= (a bundled "
            "template's name or model_type, e.g. 'qwen3', or a response template dict)"
        )
    if not isinstance(own, dict):  # never read a tokenizer's template as a name or a path
        frontend.lower(own)  # raises the TemplateError the interpreter's ValueError corresponds to
    return api.load(own)


# ---- the accelerated methods --------------------------------------------------------------------


def _compilable(template: Any) -> bool:
    """Whether the compiler should handle this template: any JSON-like value (it validates and
    rejects exactly like the interpreter), but not transformers' loaded `ResponseTemplate` objects,
    which only the interpreter understands."""
    if isinstance(template, dict):  # the common case, decided without importing anything
        return True
    try:
        from transformers.utils.chat_parsing.response_templates import ResponseTemplate
    except ImportError:  # no transformers, so no such objects can exist either
        return True
    return not isinstance(template, ResponseTemplate)


def _as_given(template: Any) -> Any:
    """The template to hand to the API, which reads a str or path as a bundled name or a file: the
    interpreter takes only the template itself, so those raise its error (TemplateError, a
    ValueError) instead."""
    if isinstance(template, (str, os.PathLike)):
        frontend.lower(template)  # raises: a template must be a dict
    return template


def _token_items(tokenizer: Any, ids: Any, parse_ids: bool) -> tuple[list[Any], bool]:
    """(items, batched) for token ids, as transformers reads them (`to_py_obj` first): a list of
    lists (or a 2D array / tensor) is a batch. Items stay ids where they are parsed as ids (fast
    tokenizers), and are decoded by the tokenizer's own `decode` otherwise."""
    from transformers.utils.generic import to_py_obj  # (the tokenizer's own library, loaded)

    ids = to_py_obj(ids)
    batched = bool(ids) and isinstance(ids[0], list)
    items = ids if batched else [ids]
    return (items if parse_ids else [tokenizer.decode(item) for item in items]), batched


def _responses_and_prefixes(tokenizer: Any, response: Any, prefix: Any) -> tuple[list, list, bool, Any]:
    """(responses, one prefix per response, batched, the tokenizer that parses ids or None), read as
    transformers' parse_response reads them: a str is one text, a list/tuple that is empty or
    starts with a str is a batch of texts; anything else is token ids, which a fast tokenizer parses
    as ids (prefixes that are ids stay ids then) and a slow one decodes. One prefix is broadcast to
    every response; an empty list/tuple means "no prompt context" (like "")."""
    id_parser = None
    if isinstance(response, str):
        responses, batched = [response], False
    elif isinstance(response, (list, tuple)) and (not response or isinstance(response[0], str)):
        responses, batched = list(response), True
    else:
        id_parser = tokenizer if getattr(tokenizer, "is_fast", False) else None
        responses, batched = _token_items(tokenizer, response, id_parser is not None)
    if isinstance(prefix, str):
        prefixes, prefix_batched = [prefix], False
    elif isinstance(prefix, (list, tuple)) and not prefix:
        prefixes, prefix_batched = [""], False
    elif isinstance(prefix, (list, tuple)) and isinstance(prefix[0], str):
        prefixes, prefix_batched = list(prefix), True
    else:
        prefixes, prefix_batched = _token_items(tokenizer, prefix, id_parser is not None)
    if not prefix_batched:
        prefixes = prefixes * len(responses)
    elif len(prefixes) != len(responses):
        raise ValueError(
            f"Got {len(responses)} response(s) but {len(prefixes)} prefix(es); `prefix` must be "
            "a single sequence (broadcast to every response), or one prefix per response."
        )
    return responses, prefixes, batched, id_parser


class _AcceleratedMethod:
    """A method stored on one tokenizer instance. A plain object holding its tokenizer (rather than
    a bound method) so an accelerated tokenizer survives pickling and deepcopy with the patch
    intact: a bound method would pickle as a lookup on the half-restored tokenizer."""

    def __init__(self, tokenizer: Any, name: str):
        self.tokenizer = tokenizer
        self.name = self.__name__ = name
        self.__doc__ = f"{name}, through the compiled rtcompile parser (see rtcompile.accelerate)."

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        implementation = _parse_response if self.name == "parse_response" else _get_response_parser
        return implementation(self.tokenizer, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<rtcompile-accelerated {self.name} of {type(self.tokenizer).__name__}>"


def _interpreter_method(tokenizer: Any, name: str) -> Any:
    """The tokenizer's own method (its class's), bypassing the patch on the instance."""
    return getattr(type(tokenizer), name).__get__(tokenizer, type(tokenizer))


def _parse_response(tokenizer, response, schema=None, *, prefix=None, tools=None):
    if schema is None:
        schema = getattr(tokenizer, "response_template", None)
        if schema is None:
            raise AttributeError(_NO_TEMPLATE_FOR_PARSE)
    if not _compilable(schema):
        return _interpreter_method(tokenizer, "parse_response")(
            response, schema, prefix=prefix, tools=tools
        )
    if prefix is None:
        raise ValueError(_PREFIX_REQUIRED)
    responses, prefixes, batched, id_parser = _responses_and_prefixes(tokenizer, response, prefix)
    # The template is compiled at the first item, not before: the interpreter validates it per
    # item, so an empty batch returns [] even for an invalid template.
    # A string schema is rejected as the interpreter rejects it (_as_given), never read as a name.
    parsed = [
        api.parse_response(item, _as_given(schema), prefix=p, tools=tools, tokenizer=id_parser)
        for item, p in zip(responses, prefixes)
    ]
    return parsed if batched else parsed[0]


def _get_response_parser(
    tokenizer, response_template=None, *, prefix=None, tools=None, token_ids=False
):
    template = (
        response_template
        if response_template is not None
        else getattr(tokenizer, "response_template", None)
    )
    if template is None:
        raise AttributeError(_NO_TEMPLATE_FOR_STREAM)
    if not _compilable(template):
        return _interpreter_method(tokenizer, "get_response_parser")(
            template, prefix=prefix, tools=tools, token_ids=token_ids
        )
    if token_ids:  # (a slow tokenizer fails there, as in transformers: it has no backend)
        return api.ResponseParser(_as_given(template), prefix, tools=tools, tokenizer=tokenizer)
    if prefix is not None and not isinstance(prefix, str):
        prefix = tokenizer.decode(prefix)
        if not isinstance(prefix, str):
            raise ValueError(_STREAM_PREFIX_NOT_SINGLE)
    # api.ResponseParser validates the template before checking the prefix, as the interpreter does.
    return api.ResponseParser(_as_given(template), prefix, tools=tools)


# ---- patching one tokenizer ---------------------------------------------------------------------


class _Acceleration:
    """What `deaccelerate` needs to put back: instance attributes the patch replaced (usually
    none: the methods come from the class) and the template, if `accelerate` supplied one.
    Plain data (no sentinel objects), so it survives pickling along with the tokenizer."""

    def __init__(self, tokenizer: Any):
        self.saved_methods = {
            name: vars(tokenizer)[name] for name in _PATCHED_METHODS if name in vars(tokenizer)
        }
        self.replaced_template = False
        self.saved_template: Any = None


def is_accelerated(tokenizer: Any) -> bool:
    """Whether `accelerate` patched this tokenizer (or the processor's tokenizer)."""
    return _STATE_ATTRIBUTE in vars(_underlying_tokenizer(tokenizer))


def accelerate(tokenizer: Any, template: Any = None) -> Any:
    """Make this tokenizer's `parse_response` and `get_response_parser` run on compiled parsers,
    with behaviour identical to transformers' own methods. Returns the tokenizer.

    `template` (a bundled name or `model_type`, a template dict, or a path) becomes the tokenizer's
    `response_template` (which is what `save_pretrained` writes, too); without it the tokenizer's
    own template is used, read at every call as transformers does. A template present now is
    compiled now, so an invalid one raises `TemplateError` here rather than at the first parse.

    Only this instance is patched, never its class. Calling it again is harmless (a new `template`
    replaces the previous one); `deaccelerate` undoes everything, including the template.
    A processor is accepted too: its `.tokenizer` is patched.

    The methods mirrored are transformers 5.25.0's: with another release installed this raises
    `UnsupportedTransformersError` (rtcompile.releases), one line, and patches nothing.
    """
    require_transformers(
        "rtcompile.accelerate", ACCELERATE_RELEASES, ", or use the tokenizer's own parse_response"
    )
    tokenizer = _underlying_tokenizer(tokenizer)
    resolved = None if template is None else resolve_template(template)
    current = resolved if resolved is not None else getattr(tokenizer, "response_template", None)
    if isinstance(current, dict):
        api.load(current)  # compile (or fetch from the cache) before patching anything
    state = vars(tokenizer).get(_STATE_ATTRIBUTE)
    if state is None:
        state = _Acceleration(tokenizer)
        for name in _PATCHED_METHODS:
            setattr(tokenizer, name, _AcceleratedMethod(tokenizer, name))
        setattr(tokenizer, _STATE_ATTRIBUTE, state)
    if resolved is not None:
        if not state.replaced_template:
            state.saved_template = getattr(tokenizer, "response_template", None)
            state.replaced_template = True
        tokenizer.response_template = resolved
    return tokenizer


def deaccelerate(tokenizer: Any) -> Any:
    """Undo `accelerate`: the interpreter's methods, and the template the tokenizer had before.
    A tokenizer that is not accelerated is left as it is. Returns the tokenizer."""
    tokenizer = _underlying_tokenizer(tokenizer)
    state = vars(tokenizer).pop(_STATE_ATTRIBUTE, None)
    if state is None:
        return tokenizer
    for name in _PATCHED_METHODS:
        if name in state.saved_methods:
            setattr(tokenizer, name, state.saved_methods[name])
        else:
            vars(tokenizer).pop(name, None)
    if state.replaced_template:
        tokenizer.response_template = state.saved_template
    return tokenizer
