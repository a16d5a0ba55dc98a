"""What a request asks of the tool calls: its tools, `tool_choice` and `parallel_tool_calls`,
normalized and checked (OpenAI Chat Completions conventions)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import GrammarError

AUTO, REQUIRED, NONE, NAMED = "auto", "required", "none", "named"


@dataclass(frozen=True)
class Tool:
    name: str
    # The JSON schema of the arguments (an object schema; {} when the tool gives none).
    parameters: Any
    strict: bool


@dataclass(frozen=True)
class Request:
    tools: tuple[Tool, ...]
    choice: str  # AUTO, REQUIRED, NONE or NAMED
    parallel: bool

    @property
    def callable(self) -> tuple[Tool, ...]:
        """The tools a call may name."""
        if self.choice == NONE:
            return ()
        return self.tools

    @property
    def forced(self) -> bool:
        """Whether the output must hold at least one call."""
        return self.choice in (REQUIRED, NAMED)

    def key(self) -> str:
        """A canonical text of the request (a cache key)."""
        tools = [[t.name, t.parameters, t.strict] for t in self.tools]
        return json.dumps([tools, self.choice, self.parallel], sort_keys=True, separators=(",", ":"))


def normalize(tools: Any, tool_choice: Any, parallel_tool_calls: Any) -> Request:
    """The request, or GrammarError (one line) for a malformed one."""
    if not isinstance(parallel_tool_calls, bool):
        raise GrammarError("parallel_tool_calls", "must be true or false")
    normalized = _tools(tools)
    choice, name = _choice(tool_choice)
    if choice in (REQUIRED, NAMED) and not normalized:
        raise GrammarError("tool_choice", f"{tool_choice!r} needs at least one tool")
    if choice == NAMED:
        chosen = [tool for tool in normalized if tool.name == name]
        if not chosen:
            raise GrammarError("tool_choice", f"names {name!r}, which is not one of the tools")
        normalized = tuple(chosen[:1])
    return Request(tools=normalized, choice=choice, parallel=parallel_tool_calls)


def _tools(tools: Any) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, (list, tuple)):
        raise GrammarError("tools", f"must be a list of tools, got {type(tools).__name__}")
    out: list[Tool] = []
    for index, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(tool, dict) and tool.get("type", "function") != "function":
            raise GrammarError(f"tools[{index}]", f"type {tool.get('type')!r} is not a function tool")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise GrammarError(f"tools[{index}]", "needs a function with a name")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise GrammarError(f"tools[{index}].function.parameters", "must be a JSON schema object")
        strict = function.get("strict", tool.get("strict", False) if isinstance(tool, dict) else False)
        if any(existing.name == function["name"] for existing in out):
            raise GrammarError(f"tools[{index}]", f"names {function['name']!r} twice")
        out.append(Tool(function["name"], parameters, strict is True))
    return tuple(out)


def _choice(tool_choice: Any) -> tuple[str, str | None]:
    if tool_choice is None:
        return AUTO, None
    if tool_choice in (AUTO, REQUIRED, NONE):
        return tool_choice, None
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if tool_choice.get("type") == "function" and isinstance(function, dict) and isinstance(function.get("name"), str):
            return NAMED, function["name"]
    raise GrammarError(
        "tool_choice",
        f"must be 'auto', 'required', 'none' or {{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}",
    )
