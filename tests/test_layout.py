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
    for host in ("vllm", "sglang", "transformers", "openai_stream", "serving"):
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


# The keys of a response template and of its fields (transformers' schema): a module that reads
# one of them off a dict is walking a template's JSON.
TEMPLATE_KEYS = {"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"}
FIELD_KEYS = {
    "open", "open_pattern", "close", "close_pattern", "content", "content_args",
    "repeats", "join", "optional", "transform", "transform_each",
}


def _template_key_reads(source: str) -> list[str]:
    """Where `source` reads a template or field key off a mapping: `x["key"]` (not an assignment),
    `x.get("key")` (`pop`, `setdefault`), `"key" in x`; or a field's raw entry (`.spec`)."""
    reads = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
        ):
            key = node.left.value
        elif isinstance(node, ast.Attribute) and node.attr == "spec":
            key = "spec"
        if key in TEMPLATE_KEYS | FIELD_KEYS | {"spec"}:
            reads.append(f"line {node.lineno}: {ast.unparse(node)}")
    return reads


def test_the_integrations_read_template_facts_never_a_templates_json():
    """The serving layer and the hosts read what the compiler computed from the validated IR (a
    module's FIELD_FACTS and TEMPLATE_FACTS, through the serving plan); a served variant of a
    template is made by the front end (frontend/variants.py). None of them reads a template's keys."""
    readers = {
        name: reads
        for name, path in MODULES.items()
        if _home(name) == "integrations" and (reads := _template_key_reads(path.read_text(encoding="utf-8")))
    }
    assert readers == {}, f"integrations reading a template's JSON: {readers}"


@pytest.mark.parametrize(
    "line",
    [
        'spec.get("repeats")',
        'x = plan.template["fields"]',
        '"open_pattern" in spec',
        'tool.pop("transform", None)',
        "closer = self.spec",
        'anchor = template.get("start_anchor", "")',
    ],
)
def test_the_template_json_check_sees_every_read(line):
    assert _template_key_reads(line), line


@pytest.mark.parametrize("line", ['fields["content"] = text', 'event.get("text")', "facts.repeats", 'delta["role"]'])
def test_the_template_json_check_passes_other_mappings(line):
    assert not _template_key_reads(line), line


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


# ---- integrations use the runtime's public interface only -------------------------------------------
# The runtime documents what servers may use of a parser (runtime/TOKEN_IDS.md, "The servers'
# interface"); a private name read from outside is a contract nobody declared, which a change inside
# the runtime breaks silently. The rule, read from the AST of every integration module:
#
# 1. `obj._name` (one leading underscore; `obj` anything but the bare names `self` and `cls`, an
#    integration's own object) only where the integrations define `_name` themselves (assigned as an
#    attribute, a def or class, a module-level or class-level name, a slot) and no runtime or
#    generated module does, or where it is a host's own name (HOST_PRIVATE_NAMES).
#    `getattr(obj, "_name")` and its kin count as `obj._name`.
# 2. No read of a property's parts (`.fget`, `.fset`, `.fdel`) and no `super()` with arguments:
#    both reach past the method a parser's own class gives (the token-id subclass's, say).
# 3. No instance method or property read off a runtime class (`Machine.feed_text(parser, text)`,
#    `Machine.unread_text`): the same bypass, through the class.
# 4. No private name imported from the runtime.

RUNTIME_HOMES = ("runtime", "generated")
# Private names of the hosts' own objects that an integration reads, and whose they are.
HOST_PRIVATE_NAMES = {
    "_reasoning_parser": "vLLM: vllm.parser.abstract_parser's parser keeps the reasoning parser it built",
}
PROPERTY_PARTS = frozenset({"fget", "fset", "fdel"})
NAME_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _trees(homes: tuple[str, ...]) -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text(encoding="utf-8")) for name, path in MODULES.items() if _home(name) in homes
    }


def _private_names_defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: attributes it assigns (on any object), defs and
    classes, names it binds (at any level, imports included), the strings of a `__slots__`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            found.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.add(node.id)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
            strings = (c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
            found.update(value for value in strings if isinstance(value, str))
    return {name for name in found if _is_private(name)}


def _instance_members(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Runtime class name -> its instance methods and properties (its runtime bases' included):
    every def in the class body but static and class methods."""
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [base.id for base in node.bases if isinstance(base, ast.Name)]
                own[node.name] = {
                    item.name
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not item.name.startswith("__")
                    and not any(getattr(d, "id", None) in ("staticmethod", "classmethod") for d in item.decorator_list)
                }

    def members(name: str, seen: frozenset = frozenset()) -> set[str]:
        found = set(own.get(name, ()))
        for base in bases.get(name, ()):
            if base in own and base not in seen:
                found |= members(base, seen | {name})
        return found

    return {name: members(name) for name in own}


RUNTIME_TREES = _trees(RUNTIME_HOMES)
RUNTIME_PRIVATE = set().union(*map(_private_names_defined, RUNTIME_TREES.values()))
RUNTIME_CLASS_MEMBERS = _instance_members(RUNTIME_TREES)
INTEGRATION_TREES = _trees(("integrations",))
INTEGRATION_PRIVATE = set().union(*map(_private_names_defined, INTEGRATION_TREES.values()))


def _is_runtime_module(module: str) -> bool:
    return module.startswith(("rtcompile.runtime", "rtcompile.generated"))


def _runtime_class_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> runtime class, for the runtime classes a module imports."""
    return {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and _is_runtime_module(node.module or "")
        for alias in node.names
        if alias.name in RUNTIME_CLASS_MEMBERS
    }


def _private_read_allowed(name: str) -> bool:
    return name in HOST_PRIVATE_NAMES or (name in INTEGRATION_PRIVATE and name not in RUNTIME_PRIVATE)


def _is_own(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _runtime_reaches(tree: ast.AST) -> list[str]:
    """Every place in `tree` that breaks the rule above, as `line: code`."""
    classes = _runtime_class_names(tree)
    found = []
    for node in ast.walk(tree):
        bad = False
        if isinstance(node, ast.Attribute):
            owner = classes.get(node.value.id) if isinstance(node.value, ast.Name) else None
            bad = (
                (_is_private(node.attr) and not _is_own(node.value) and not _private_read_allowed(node.attr))
                or node.attr in PROPERTY_PARTS
                or node.attr in RUNTIME_CLASS_MEMBERS.get(owner, ())
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "super":
                bad = bool(node.args or node.keywords)
            elif node.func.id in NAME_FUNCTIONS and len(node.args) >= 2 and not _is_own(node.args[0]):
                name = node.args[1]
                bad = isinstance(name, ast.Constant) and isinstance(name.value, str) and _is_private(name.value)
                bad = bad and not _private_read_allowed(name.value)
        elif isinstance(node, ast.ImportFrom) and _is_runtime_module(node.module or ""):
            bad = any(_is_private(alias.name) for alias in node.names)
        if bad:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("name", sorted(INTEGRATION_TREES))
def test_integrations_use_only_the_runtimes_public_interface(name):
    reaches = _runtime_reaches(INTEGRATION_TREES[name])
    assert reaches == [], f"{name} reaches past the runtime's public interface: {reaches}"


def _reaches_in(source: str) -> list[str]:
    return _runtime_reaches(ast.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        "if self._decoder._idle: pass",
        "unread = Machine.unread_text.fget(parser)",
        "from rtcompile.runtime.machine import Machine\nunread = Machine.unread_text",
        "from rtcompile.runtime.machine import Machine as M\nM.feed_text(parser, text)",
        "from rtcompile.runtime.token_parser import TokenIds\nTokenIds.feed(parser, ids)",
        "read = super(TokenIds, parser).feed_text",
        "held = parser._buf[parser._pos:]",
        "self.parser._markers = True",
        "tail = getattr(parser, '_declined', None)",
        "from rtcompile.runtime.token_ids import _lookup",
        "decoder = parser.token_decoder\ndecoder._profile.clean",
        "ids = profile.backend._learn(1, 0)",
    ],
)
def test_the_runtime_interface_check_sees_every_reach(source):
    assert _reaches_in(source), source


@pytest.mark.parametrize(
    "source",
    [
        "self._feed_text = parser.feed_text",
        "cls._plans = {}",
        "unread = parser.unread_decoded_text",
        "ids = parser.token_decoder.profile.encode(rest)",
        "super().__init__(key, renderer)",
        "from rtcompile.runtime.token_parser import TokenIds\nok = isinstance(parser, TokenIds)",
        "from rtcompile.runtime.token_ids import TokenIdDecoder\nd = TokenIdDecoder(profile)",
        "plan = parser._plan",  # (the vLLM integration's own parser)
        "if parser._reasoning_parser is None: pass",  # (vLLM's, HOST_PRIVATE_NAMES)
    ],
)
def test_the_runtime_interface_check_passes_the_public_interface(source):
    assert _reaches_in(source) == [], source
