"""The import rules of the layout: the pipeline's stages and the homes of its users depend one way.

    integrations, batch, authoring  ->  public API (api, cache, library, bundled)  ->  stages
    (frontend -> codegen order: codegen reads the IR, never the other way)  ->  runtime

Every `import` and `from ... import` in every module is read from the source (module-level and
inside functions alike: a lazy import is still a dependency), resolved to rtcompile's own module
names, and checked against the rules below; and the graph of all of them must have no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import rtcompile
import rtcompile.generated
import rtcompile.runtime
import rtcompile.templates

PACKAGE_DIR = Path(rtcompile.__file__).parent
# The packages that live in top-level folders of their own (pyproject.toml's package-dir).
ROOTS = {
    Path(package.__file__).parent: package.__name__.split(".")
    for package in (rtcompile.runtime, rtcompile.generated, rtcompile.templates)
}


def _module_name(path: Path) -> str:
    root, prefix = next(((r, p) for r, p in ROOTS.items() if path.is_relative_to(r)), (PACKAGE_DIR, ["rtcompile"]))
    parts = [*prefix, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = [path for root in [PACKAGE_DIR, *ROOTS] for path in root.rglob("*.py")]
    return {_module_name(path): path for path in files if "__pycache__" not in path.parts}


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """rtcompile modules that `name` imports, resolved to the longest known module name."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from package import module` depends on the module; `from module import name` on the module
            targets = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in MODULES else origin for alias in node.names
            ]
        for target in targets:
            if not target.startswith("rtcompile"):
                continue
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _home(name: str) -> str:
    """The part of the house a module lives in."""
    parts = name.split(".")
    if len(parts) == 1:
        return "facade"
    if parts[1] in ("runtime", "frontend", "codegen", "integrations", "batch", "authoring", "generated", "templates"):
        return parts[1]
    if parts[1] == "__main__":
        return "cli"
    if parts[1] == "version":
        return "version"
    return "core"  # api, cache, library, regenerate


# What each home may import (besides itself). The facade (`rtcompile/__init__.py`) and the CLI are
# the front door: they may reach everything.
ALLOWED = {
    "version": set(),
    "runtime": set(),
    "generated": {"runtime"},
    "templates": set(),
    "frontend": {"version"},
    "codegen": {"frontend", "runtime", "version"},
    "core": {"frontend", "codegen", "runtime", "version", "generated", "templates"},
    "integrations": {"facade", "core", "frontend", "runtime", "version"},
    "batch": {"facade", "core", "frontend", "runtime", "version"},
    "authoring": {"facade", "core", "frontend", "runtime", "version"},
}
# Single modules of another home that a home may import (not the rest of that home): the front end
# analyses delimiter patterns on the runtime's regex tree, which the runtime needs itself, and
# checks transforms with the runtime's placeholder syntax.
ALLOWED_MODULES = {"frontend": {"rtcompile.runtime.regex_syntax", "rtcompile.runtime.transforms"}}


def test_the_layout_is_what_the_rules_describe():
    homes = {_home(name) for name in MODULES}
    assert homes == set(ALLOWED) | {"facade", "cli"}
    # every integration has a home of its own inside integrations/
    for host in ("vllm", "sglang", "transformers", "openai_stream", "serving_common"):
        assert any(name.startswith(f"rtcompile.integrations.{host}") for name in MODULES), host


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _home(n) not in ("facade", "cli")))
def test_imports_point_one_way(name):
    home = _home(name)
    forbidden = sorted(
        target
        for target in GRAPH[name]
        if _home(target) != home and _home(target) not in ALLOWED[home] and target not in ALLOWED_MODULES.get(home, ())
    )
    assert forbidden == [], f"{name} ({home}) imports {forbidden}"


def test_integrations_do_not_import_each_other():
    hosts = {"vllm", "sglang", "transformers"}
    for name, targets in GRAPH.items():
        parts = name.split(".")
        if len(parts) < 3 or parts[1] != "integrations" or parts[2] not in hosts:
            continue
        others = sorted(t for t in targets if t.split(".")[1:2] == ["integrations"] and t.split(".")[2] in hosts - {parts[2]})
        assert others == [], f"{name} imports another host's integration: {others}"


def test_the_cache_stores_and_verifies_without_calling_back_into_the_api():
    assert GRAPH["rtcompile.cache"] <= {"rtcompile.runtime", "rtcompile.version"}


# Python's private regex modules, by any spelling: `import re._parser`, `from re import _parser`,
# `re._parser.parse(...)`, `import sre_parse`, `importlib.import_module("re._constants")`.
PRIVATE_REGEX_MODULES = re.compile(
    r"\b(?:sre_parse|sre_constants|sre_compile)\b|\bre\._[a-z]|\bfrom\s+re\s+import\s+[^\n]*\b_[a-z]"
)
REGEX_TREE_READER = "rtcompile.runtime.regex_syntax"


def _private_regex_uses(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if PRIVATE_REGEX_MODULES.search(line)]


def test_only_the_regex_tree_reader_reads_pythons_private_regex_modules():
    """Every module asks runtime/regex_syntax.py what a pattern is made of; none reads `re`'s parser."""
    assert _private_regex_uses(MODULES[REGEX_TREE_READER]), "the reader itself was not recognised"
    readers = {name: _private_regex_uses(path) for name, path in MODULES.items() if name != REGEX_TREE_READER}
    readers = {name: uses for name, uses in readers.items() if uses}
    assert readers == {}, f"only {REGEX_TREE_READER} may use re's private modules: {readers}"


@pytest.mark.parametrize(
    "line",
    [
        "import re._parser as p",
        "from re import _constants as sre",
        "from re import DOTALL, _parser",
        "x = re._parser.parse(s)",
        "import sre_parse",
        "import sre_constants as sre",
        "importlib.import_module('re._compiler')",
    ],
)
def test_the_private_regex_check_sees_every_spelling(line):
    assert PRIVATE_REGEX_MODULES.search(line), line


@pytest.mark.parametrize("line", ["import re", "from re import DOTALL", "re.compile(p)", "regex.escape(x)"])
def test_the_private_regex_check_passes_the_public_module(line):
    assert not PRIVATE_REGEX_MODULES.search(line), line


def test_the_front_end_does_not_know_the_code_generator():
    assert not any(t.startswith("rtcompile.codegen") for n in MODULES if _home(n) == "frontend" for t in GRAPH[n])


def _cycle() -> list[str] | None:
    """One import cycle among rtcompile's modules (package facades excluded: they only re-export,
    lazily), or None."""
    graph = {n: {t for t in targets if t != "rtcompile"} for n, targets in GRAPH.items() if n != "rtcompile"}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    assert _cycle() is None, " -> ".join(_cycle())


def test_the_checker_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    """The rules are only as good as the import reader: a relative import inside a function counts."""
    source = "def f():\n    from ..api import load\n    from . import ir\n"
    path = PACKAGE_DIR / "frontend" / "validate.py"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    assert _imports("rtcompile.frontend.validate", path) == {"rtcompile.api", "rtcompile.frontend.ir"}
