"""Rendering chat templates: untrusted Jinja, run only in transformers' sandbox and under a deadline.

A chat template is code from a model repository. It is rendered only by transformers'
`render_jinja_template` (an immutable sandboxed Jinja environment: attribute walks to `__class__`,
`__globals__` and the like raise `SecurityError`, ranges are capped), and never in this process:
each render runs in a worker process with bounds of its own, and every bound that trips ends the
render with one clear line instead of hanging or crashing the caller:

- time: the worker is killed when a render overruns its deadline (`RenderTimeout`);
- memory: the worker's address space may grow only `memory_limit` bytes past what it holds once
  transformers is loaded (`resource.RLIMIT_AS`, where the platform has it), so a template that
  multiplies strings or renders gigabytes gets a `MemoryError` in the worker, not the machine;
- output: a render is stopped in the worker as soon as its output passes `max_output`
  characters, so it never crosses the pipe into this process;
- recursion: a macro that recurses without end raises `RecursionError` in the worker; a worker
  that dies outright (a signal, an exhausted C stack) is reported with its exit status.

The last three raise `RenderLimitExceeded`; it and `RenderTimeout` are `RenderAborted`, which
callers treat as "this chat template cannot be rendered here", unlike `RenderError` (the template
refused one conversation). After a bound trips the worker is replaced; it is started once per
`ChatRenderer` (forked where the platform allows, so it starts in milliseconds).

A `ChatRenderer` can also be told what a chat template needs that a bare conversation lacks (see
`verify.accommodate`): variables a tokenizer or a serving stack would pass, a system message in
front of every conversation, the tools spelled as bare function schemas, or with a description
for every parameter.

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

from rtcompile.releases import AUTHORING_RELEASES, require_transformers

DEFAULT_TIMEOUT = 10.0  # seconds per render; the first render also compiles the template
DEFAULT_MEMORY_LIMIT = 1 << 30  # bytes a render may add to the worker's address space
DEFAULT_MAX_OUTPUT = 4 << 20  # characters; real chat templates render kilobytes


class ChatTemplateError(ValueError):
    """The chat template could not be loaded (missing, malformed, or not a template)."""


class RenderError(Exception):
    """The chat template raised while rendering (its own `raise_exception`, an undefined name...)."""


class RenderAborted(Exception):
    """A bound stopped the render (time, memory, output size, recursion, or the worker died). Not
    a RenderError: a template that exhausts a bound is not one that refuses a conversation, and
    callers stop at once instead of running into the bound again for every probe."""


class RenderTimeout(RenderAborted):
    """The render did not finish within its time bound; the worker was killed."""


class RenderLimitExceeded(RenderAborted):
    """The render exhausted the worker's memory, output or recursion bound, or killed the worker."""


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


def _address_space() -> int | None:
    """The worker's current virtual memory size in bytes (Linux), else None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _bound_memory(limit: int | None) -> None:
    """Let the worker's address space grow at most `limit` bytes from here (RLIMIT_AS), so an
    allocation past it raises MemoryError in the worker. A platform without `resource` or
    /proc (Windows, macOS) keeps only the time and output bounds."""
    if not limit:
        return
    try:
        import resource
    except ImportError:
        return
    current = _address_space()
    if current is None:
        return
    bound = current + limit
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            bound = min(bound, hard)
        resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    except (ValueError, OSError):
        pass


FATAL = "fatal"  # the worker stops after this reply: a bound tripped and its state is not to be trusted


class _OutputBound(Exception):
    """Raised in the worker as soon as a render's output passes `max_output` characters."""

    def __init__(self, length: int):
        super().__init__(length)
        self.length = length


def _bound_output(source: str, max_output: int | None) -> None:
    """Make the template's environment join its output pieces under the bound, so a render that
    writes gigabytes stops at the bound instead of running into the time or memory bound first.
    (`Template.render` joins the generated pieces with `environment.concat`; transformers compiles
    each template, once, in an environment of its own.)"""
    if max_output is None:
        return
    from transformers.utils.chat_template_utils import _compile_jinja_template

    def bounded_concat(pieces) -> str:
        collected, length = [], 0
        for piece in pieces:
            length += len(piece)
            if length > max_output:
                raise _OutputBound(length)
            collected.append(piece)
        return "".join(collected)

    _compile_jinja_template(source).environment.concat = bounded_concat


def _render_reply(source: str, request: dict, max_output: int | None) -> tuple[str, str]:
    """One render as a (status, payload) reply: "ok" and the text, "error" and the template's own
    failure, or FATAL and the bound that tripped."""
    try:
        _bound_output(source, max_output)
        text = _render_in_sandbox(source, request)
    except MemoryError:
        return FATAL, "memory"
    except RecursionError:
        return FATAL, "recursion"
    except _OutputBound as e:
        return FATAL, f"output:{e.length}"
    except Exception as e:  # the template's own failures, reported to the caller
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if max_output is not None and len(text) > max_output:  # (macros join their own output)
        return FATAL, f"output:{len(text)}"
    return "ok", text


def _worker(connection, source: str, memory_limit: int | None = None, max_output: int | None = None) -> None:
    """Render requests one at a time until the pipe closes or a bound trips. Runs in the child
    process, under its memory bound once transformers is loaded."""
    try:
        import transformers.utils.chat_template_utils  # noqa: F401  (loaded before the bound is measured)
    except ImportError as e:
        connection.send(("error", f"ImportError: {e}"))
        return
    _bound_memory(memory_limit)
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError, MemoryError):
            return
        reply = _render_reply(source, request, max_output)
        try:
            connection.send(reply)
        except (OSError, ValueError, MemoryError):
            return
        if reply[0] == FATAL:
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


def _described(tool: Any) -> Any:
    """`tool` with a description for each parameter that lacks one (templates that print them)."""
    if not isinstance(tool, dict):
        return tool
    function = tool.get("function", tool)
    properties = (function.get("parameters") or {}).get("properties") if isinstance(function, dict) else None
    if not isinstance(properties, dict):
        return tool
    described = {name: {"description": f"The {name} argument.", **schema} if isinstance(schema, dict) else schema
                 for name, schema in properties.items()}
    function = {**function, "parameters": {**function["parameters"], "properties": described}}
    return {**tool, "function": function} if "function" in tool else function


class ChatRenderer:
    """Renders one chat template, each render in a worker process under time, memory and output
    bounds (module doc).

    `render(messages, tools=..., add_generation_prompt=...)` returns the text or raises
    `RenderError` (the template raised), `RenderTimeout` (it overran `timeout` seconds) or
    `RenderLimitExceeded` (it exhausted `memory_limit` bytes, `max_output` characters or the
    recursion limit, or killed the worker).

    What a chat template needs beyond the conversation is applied to every render:
    `variables` (bos_token, a date string...), `system_message` (put in front of a conversation
    that does not start with one), `bare_tools` (tools passed as their function schemas, for
    templates that read `tool.name`) and `described_tools` (a description for every parameter,
    for templates that print them)."""

    def __init__(
        self,
        template: ChatTemplate,
        variables: dict | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
        max_output: int | None = DEFAULT_MAX_OUTPUT,
    ):
        # transformers 5.25.0's sandbox renders, and its interpreter checks what verify and infer
        # derive: another release is refused here, before anything renders (one line)
        require_transformers("rtcompile's template authoring (verify, infer)", AUTHORING_RELEASES)
        self.template = template
        self.variables = {**template.variables, **(variables or {})}
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.max_output = max_output
        self.system_message: str | None = None
        self.bare_tools = False
        self.described_tools = False
        self.accommodations: list[str] = []  # report lines for the above, kept by `verify.accommodate`
        self._process = None
        self._connection = None
        self._finalizer = None
        self._memo: dict[str, str] = {}

    def _start(self) -> None:
        if self._process is None:
            context = _context()
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker, args=(child, self.template.source, self.memory_limit, self.max_output), daemon=True
            )
            process.start()
            child.close()
            self._process, self._connection = process, parent
            self._finalizer = weakref.finalize(self, _stop, process, parent)

    def _kill(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._connection = self._finalizer = None

    def _request(self, messages: list[dict], tools: list | None, add_generation_prompt: bool) -> dict:
        """The render request with this renderer's accommodations applied."""
        if self.system_message is not None and not (messages and messages[0].get("role") == "system"):
            messages = [{"role": "system", "content": self.system_message}, *messages]
        if tools and self.described_tools:
            tools = [_described(tool) for tool in tools]
        if tools and self.bare_tools:
            tools = [tool.get("function", tool) if isinstance(tool, dict) else tool for tool in tools]
        return {
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "variables": self.variables,
        }

    def _limit_message(self, payload: str) -> str:
        if payload == "memory":
            bound = f" ({self.memory_limit >> 20} MiB)" if self.memory_limit else ""
            return f"the render exhausted its memory bound{bound}"
        if payload == "recursion":
            return "the render exceeded the recursion limit (a macro that recurses without end, or markup nested deep)"
        length = payload.partition(":")[2]
        return f"the render's output passed its bound of {self.max_output} characters ({length} and more)"

    def render(self, messages: list[dict], *, tools: list | None = None, add_generation_prompt: bool) -> str:
        request = self._request(messages, tools, add_generation_prompt)
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
            process = self._process
            if process is not None:
                process.join(timeout=5)
            code = process.exitcode if process is not None else None
            self._kill()
            how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            self._memo[key] = RenderLimitExceeded(f"the render worker died ({how}): the template crashed it")
            raise self._memo[key] from None
        if status == FATAL:
            self._kill()  # its state is not to be trusted after a bound tripped; the next render starts afresh
            self._memo[key] = RenderLimitExceeded(self._limit_message(payload))
            raise self._memo[key]
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
