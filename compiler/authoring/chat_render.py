"""Rendering chat templates: untrusted Jinja, run only in transformers' sandbox and under a deadline.

A chat template is code from a model repository. It is rendered only by transformers'
`render_jinja_template` (an immutable sandboxed Jinja environment), and never in this process:
each render runs in a worker process that is killed when it overruns its time bound, so a template
that loops forever yields `RenderTimeout` instead of hanging the caller. The worker is started once
per `ChatRenderer` (forked where the platform allows, so it starts in milliseconds) and restarted
after a timeout or a crash.

`load_chat_template` reads a chat template from a `.jinja` file, a `tokenizer_config.json` (or
`chat_template.json`) with a `chat_template`, or a tokenizer directory; the special tokens a
template may refer to (`bos_token`, `eos_token`) come from the same tokenizer_config.json.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT = 10.0  # seconds per render; the first render also compiles the template


class ChatTemplateError(ValueError):
    """The chat template could not be loaded (missing, malformed, or not a template)."""


class RenderError(Exception):
    """The chat template raised while rendering (its own `raise_exception`, an undefined name...)."""


class RenderTimeout(Exception):
    """The render did not finish within its time bound; the worker was killed. Not a RenderError:
    a template that hangs is not one that refuses a conversation, and callers stop at once
    instead of waiting out the bound again for every probe."""


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    origin: str
    # Variables the tokenizer would pass to the template (bos_token, eos_token, ...).
    variables: dict = field(default_factory=dict)


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]  # an AddedToken serialized as a dict
    return None


def _special_tokens(config: dict) -> dict:
    tokens = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        text = _token_text(config.get(name))
        if text is not None:
            tokens[name] = text
    return tokens


def _pick_named(templates: list, name: str | None, origin: str) -> str:
    """tokenizer_config.json may hold a list of {"name", "template"}: take `name`, else "default"."""
    by_name = {}
    for entry in templates:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)):
            raise ChatTemplateError(f"{origin}: chat_template list entries need 'name' and 'template'")
        if not isinstance(entry.get("template"), str):
            raise ChatTemplateError(f"{origin}: chat_template {entry['name']!r} is not a string")
        by_name[entry["name"]] = entry["template"]
    wanted = name or "default"
    if wanted not in by_name:
        raise ChatTemplateError(f"{origin}: no chat template named {wanted!r} (has: {sorted(by_name)})")
    return by_name[wanted]


def _from_json(path: Path, name: str | None) -> ChatTemplate:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ChatTemplateError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(config, dict) or "chat_template" not in config:
        raise ChatTemplateError(f"{path}: has no 'chat_template'")
    raw = config["chat_template"]
    if isinstance(raw, list):
        source = _pick_named(raw, name, str(path))
    elif isinstance(raw, str):
        source = raw
    else:
        raise ChatTemplateError(f"{path}: chat_template must be a string or a list, got {type(raw).__name__}")
    return ChatTemplate(source=source, origin=str(path), variables=_special_tokens(config))


def load_chat_template(path: str | os.PathLike, name: str | None = None) -> ChatTemplate:
    """Read a chat template from a .jinja file, a JSON config holding `chat_template`, or a
    tokenizer directory (its chat_template.jinja, else its tokenizer_config.json's template)."""
    path = Path(path)
    if path.is_dir():
        config_path = path / "tokenizer_config.json"
        variables = {}
        if config_path.is_file():
            try:
                variables = _special_tokens(json.loads(config_path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, AttributeError):
                raise ChatTemplateError(f"{config_path}: not a valid tokenizer_config.json") from None
        jinja_path = path / "chat_template.jinja"
        if jinja_path.is_file() and name is None:
            source = jinja_path.read_text(encoding="utf-8")
            return ChatTemplate(source=source, origin=str(jinja_path), variables=variables)
        for candidate in (config_path, path / "chat_template.json"):
            if candidate.is_file() and "chat_template" in candidate.read_text(encoding="utf-8"):
                template = _from_json(candidate, name)
                return ChatTemplate(template.source, template.origin, {**variables, **template.variables})
        raise ChatTemplateError(f"{path}: tokenizer directory without a chat template")
    if not path.is_file():
        raise ChatTemplateError(f"{path}: no such chat template file or tokenizer directory")
    if path.suffix == ".json":
        return _from_json(path, name)
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ChatTemplateError(f"{path}: not UTF-8 text") from None
    if not source.strip():
        raise ChatTemplateError(f"{path}: empty chat template")
    return ChatTemplate(source=source, origin=str(path))


# ---- the render worker ---------------------------------------------------------------------------


def _render_in_sandbox(source: str, request: dict) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    (text,), _ = render_jinja_template(
        conversations=[request["messages"]],
        tools=request.get("tools"),
        chat_template=source,
        add_generation_prompt=request["add_generation_prompt"],
        **request.get("variables", {}),
    )
    return text


def _worker(connection, source: str) -> None:
    """Render requests one at a time until the pipe closes. Runs in the child process."""
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", _render_in_sandbox(source, request))
        except Exception as e:  # the template's own failures, reported to the caller
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            connection.send(reply)
        except (OSError, ValueError):
            return


def _context():
    """Fork where it is safe (no other thread alive: a forked child could inherit a lock some
    thread held), so a worker starts in milliseconds with transformers already loaded; spawn
    otherwise."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        import transformers.utils.chat_template_utils  # noqa: F401  (loaded once, before forking)

        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _stop(process, connection) -> None:
    try:
        connection.close()
    finally:
        if process.is_alive():
            process.kill()
        process.join(timeout=5)


class ChatRenderer:
    """Renders one chat template, each render in a worker process with a deadline.

    `render(messages, tools=..., add_generation_prompt=...)` returns the text or raises
    `RenderError` (the template raised) / `RenderTimeout` (it overran `timeout` seconds)."""

    def __init__(self, template: ChatTemplate, variables: dict | None = None, *, timeout: float = DEFAULT_TIMEOUT):
        self.template = template
        self.variables = {**template.variables, **(variables or {})}
        self.timeout = timeout
        self._process = None
        self._connection = None
        self._finalizer = None
        self._memo: dict[str, str] = {}

    def _start(self) -> None:
        if self._process is None:
            context = _context()
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(child, self.template.source), daemon=True)
            process.start()
            child.close()
            self._process, self._connection = process, parent
            self._finalizer = weakref.finalize(self, _stop, process, parent)

    def _kill(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._connection = self._finalizer = None

    def render(self, messages: list[dict], *, tools: list | None = None, add_generation_prompt: bool) -> str:
        request = {
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "variables": self.variables,
        }
        key = json.dumps(request, sort_keys=True, ensure_ascii=False, default=repr)
        if key in self._memo:
            outcome = self._memo[key]
            if isinstance(outcome, Exception):
                raise outcome  # renders are deterministic: a template that failed fails again
            return outcome
        self._start()
        try:
            self._connection.send(request)
            if not self._connection.poll(self.timeout):
                self._kill()
                self._memo[key] = RenderTimeout(f"render timed out after {self.timeout:g} s")
                raise self._memo[key]
            status, payload = self._connection.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._kill()
            raise RenderError("the render worker died (the template exhausted memory or crashed it)") from None
        if status != "ok":
            self._memo[key] = RenderError(payload)
            raise self._memo[key]
        self._memo[key] = payload
        return payload

    def close(self) -> None:
        self._kill()

    def __enter__(self) -> "ChatRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
