"""Untrusted templates cannot run code: adversarial strings in every string position of a template.

Response templates come from model repositories anyone can publish, and rtcompile turns them into
Python that gets imported. Each generated template here is valid in shape, with adversarial text
in some of its string positions: field names, literal delimiters and literal lists, patterns (the
text escaped with `regex.escape`, or raw), start anchors, defaults keys and values, transform keys
and values, content_args (tag_pattern, string_delims, line_sep, kv_sep, value_parser names), join.
The text: quotes and triple quotes, backslashes, newlines, `\\r`, `\\u2028`/`\\u2029`, NUL, lone
surrogates, `{placeholder}` text, jinja2 syntax, very long strings, and Python that would create a
sentinel file if it ever ran.

Each template must be rejected exactly when the interpreter rejects it (same exception class; a
`rtcompile.TemplateError` naming the problem's JSON path where the interpreter raises ValueError),
or compile to a module whose source holds the template text only as string constants, that
imports, runs no injected code (the sentinel never appears) and parses outputs made from the
template's own delimiters exactly like the interpreter.

Two tiers, because black formatting costs far more than everything else together:
* every example: the generator's output (`codegen.render`, what black then formats) is checked,
  executed and compared with the interpreter;
* fewer examples: the full public pipeline, `rtcompile.load` and `compile_template` written to a
  file and imported, both compared with the interpreter.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import os
import tempfile
import tokenize
from pathlib import Path

import pytest
import regex
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from transformers.utils import chat_parsing as interpreter
from transformers.utils.chat_parsing.response_templates import load_response_template

import rtcompile
from parity import builtin_class, run_stream
from rtcompile import api, codegen, frontend

try:  # Python 3.11+
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef]

# ---- what an attack would leave behind ------------------------------------------------------------

SENTINEL_DIR = Path(tempfile.mkdtemp(prefix="rtcompile-sentinel-"))
SENTINEL = SENTINEL_DIR / "INJECTED"
MARK = "INJECTED"  # in every payload (it is the sentinel's name): never outside a string literal
S = str(SENTINEL)
CREATE = f"open({S!r}, 'w').close()"

PAYLOADS = [
    f'"); {CREATE} #',
    f"'); {CREATE} #",
    f'"""); {CREATE} #',
    f"'''+__import__('os').system('touch {S}')+'''",
    f'"""+__import__("os").system("touch {S}")+"""',
    f"\n{CREATE}\n",
    f"\\\n{CREATE} #",
    f"\r{CREATE}",
    f"\r\n{CREATE}\r\n",
    f"\u2028{CREATE}\u2029",
    f"\x00{CREATE}",
    f"\x0c{CREATE}",
    f"\\N{{QUOTATION MARK}}); {CREATE} #",
    f"{{{{ cycler.__init__.__globals__.os.system('touch {S}') }}}}",
    f"{{% set x = cycler.__init__.__globals__.os.system('touch {S}') %}}",
    f"{{# #}}{{{{ lipsum.__globals__['os'].popen('touch {S}') }}}}",
    f"#}}{{%raw%}}{CREATE}{{%endraw%}}{{#",
    f"{{__import__('os').system('touch {S}')}}",
    f"+ACc- if __import__(\"os\").system(\"touch {S}\") else +ACc-",
    f"# -*- coding: utf-7 -*-\n+ACcAKQ-{CREATE}",
]
QUOTES = ['"', "'", '"""', "'''", "\\", "\\'", '\\"', "\\\\", "\\n", "\\x00", "\\u2028", 'r"', "b'", "f'{x}'"]
CONTROL = ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x00", "\x0b", "\x0c", "\x1b", "\x85", "\ufeff", "\t", " "]
SURROGATES = ["\ud800", "\udfff", "\udc80x", "a\ud83d", "\ud83d\ude00", "\ud83d<"]
PLACEHOLDERS = ["{content}", "{name}", "{content.name}", "x{content}", "{__class__}", "{0}", "{}", "{ content }"]
JINJA = ["{{ 7 * 7 }}", "{% if true %}yes{% endif %}", "{# hidden #}", "{%- raw %}", "{{", "}}", "{%", "%}", "{#", "#}", "{{ self }}"]
# Very long strings: in names, defaults, transforms and content_args (cheap for both sides). In
# delimiters and patterns they would make the interpreter's partial regex search crawl (it rescans
# its whole buffer on every chunk), so those get the medium-long ones.
LONG = ["x" * 20000, "<|a'\"\\\n" * 1500, "\ud800\"" * 3000]
MEDIUM = ["x" * 300, "<|a'\"\\\n" * 40, "{{ x }}" * 40]
ATOMS = PAYLOADS + QUOTES + CONTROL + SURROGATES + PLACEHOLDERS + JINJA + ["", "<a>", "</a>", "__import__", "os.system"]
SHORT_ATOMS = [a for a in ATOMS if len(a) < 200]

any_characters = st.text(st.characters(exclude_categories=()), max_size=12)  # lone surrogates too
adversarial = st.one_of(
    st.sampled_from(ATOMS),
    st.lists(st.sampled_from(ATOMS), min_size=2, max_size=4).map("".join),
    st.sampled_from(MEDIUM),
    any_characters,
)
adversarial_data = st.one_of(adversarial, st.sampled_from(LONG))


def maybe(benign, strategy=adversarial):
    """The benign value or an adversarial one, about half and half."""
    return st.one_of(st.just(benign), strategy)


def maybe_long(benign):
    return maybe(benign, adversarial_data)


# ---- templates ------------------------------------------------------------------------------------


def may_match_empty(pattern: str) -> bool:
    """Conservatively: whether `pattern` can match the empty string (unknown counts as yes)."""
    try:
        return sre_parse.parse(pattern).getwidth()[0] == 0
    except Exception:  # regex-only syntax, or invalid: both sides reject or we do not know
        return True


@st.composite
def delimiter(draw, key: str, benign: str) -> tuple[dict, list[str]]:
    """One of a field's (or the template's) delimiters: its template entry and texts that match it
    (or, for a raw pattern, the pattern text itself, which may or may not match)."""
    pattern_key = "start_anchor_pattern" if key == "start_anchor" else f"{key}_pattern"
    form = draw(st.sampled_from(["literal", "list", "escaped", "raw"]))
    if form == "literal":
        text = draw(maybe(benign))
        return {key: text}, [text]
    if form == "list":
        texts = draw(st.lists(maybe(benign), min_size=1, max_size=3))
        return {key: texts}, texts
    if form == "escaped":
        text = draw(maybe(benign))
        return {pattern_key: regex.escape(text)}, [text]
    # Raw: short atoms only, so no pattern backtracks for long on the interpreter's side.
    raw = draw(st.sampled_from(SHORT_ATOMS))
    return {pattern_key: raw}, [raw]


@st.composite
def content_spec(draw) -> tuple[str, dict, st.SearchStrategy]:
    """A content parser, its content_args (adversarial where they are strings) and region bodies."""
    parser = draw(st.sampled_from(["text", "int", "float", "bool", "json", "xml-inline", "kv-lines"]))
    args: dict = {}
    if draw(st.booleans()):
        args[draw(maybe_long("strip"))] = draw(st.booleans())  # an unknown key is ignored
    if parser == "text":
        bodies = maybe_long("hello")
    elif parser in ("int", "float", "bool"):
        bodies = maybe({"int": " 42 ", "float": "2.5", "bool": "true"}[parser])
    elif parser == "json":
        if draw(st.booleans()):
            open_d, close_d = draw(maybe("'")), draw(maybe("'"))
            args["string_delims"] = [[open_d, close_d]]
            bodies = adversarial.map(lambda t, o=open_d, c=close_d: '{"k": ' + o + t + c + "}")
        else:
            bodies = st.builds(
                lambda n, k, v: json.dumps({"name": n, "arguments": {k: v}}), adversarial, adversarial, adversarial
            )
        if draw(st.booleans()):
            args["allow_non_json"] = True
        bodies = st.one_of(bodies, adversarial)
    elif parser == "xml-inline":
        form = draw(st.sampled_from(["benign", "escaped prefix", "raw"]))
        if form == "benign":
            args["tag_pattern"] = r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>"
            bodies = adversarial.map(lambda t: f"<k>{t}</k><n>1</n>")
        elif form == "escaped prefix":
            lead = draw(adversarial)
            args["tag_pattern"] = regex.escape(lead) + r"(?P<key>\w+)=(?P<value>\w*)"
            bodies = adversarial.map(lambda t, lead=lead: f"{lead}key=v{t}")
        else:
            args["tag_pattern"] = draw(st.sampled_from(SHORT_ATOMS))
            bodies = adversarial
        if draw(st.booleans()):
            args["value_parser"] = {"name": draw(maybe_long("int")), "args": {}}
        args["merge_duplicates"] = draw(st.booleans())
    else:  # kv-lines
        line_sep, kv_sep = draw(maybe_long("\n")), draw(maybe_long(":"))
        args["line_sep"], args["kv_sep"] = line_sep, kv_sep
        if draw(st.booleans()):
            args["value_parser"] = {"name": draw(maybe_long("text")), "args": {}}
        bodies = st.builds(
            lambda k, v, ls=line_sep, ks=kv_sep: f"a{ks}1{ls}{k}{ks}{v}{ls}b{ks}2", adversarial, adversarial
        )
    return parser, args, bodies


json_data = st.recursive(
    adversarial_data | st.none() | st.booleans() | st.integers() | st.floats(),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(adversarial_data, inner, max_size=2),
    max_leaves=4,
)


@st.composite
def transform(draw, captures: tuple[str, ...]):
    """A transform: adversarial keys, and values that are placeholders, adversarial literals (a
    string mixing a placeholder with text is invalid for both sides) or nested containers."""
    leaves = [st.just("{content}"), adversarial_data, json_data]
    leaves += [st.just("{" + name + "}") for name in captures]
    leaf = st.one_of(*leaves)
    return draw(st.dictionaries(maybe_long("type"), st.one_of(leaf, st.lists(leaf, max_size=2)), min_size=1, max_size=3))


@st.composite
def adversarial_templates(draw) -> tuple[dict, dict]:
    """A template and, per field name, (open texts, close texts, body strategy); plus anchor texts."""
    count = draw(st.integers(1, 3))
    names = [draw(maybe_long(f"field_{i}")) for i in range(count)]
    assume(len(set(names)) == count)
    implicit = draw(st.one_of(st.none(), st.integers(0, count - 1)))
    fields, plans = {}, {}
    for i, name in enumerate(names):
        spec: dict = {}
        opens: list[str] = []
        closes: list[str] = []
        if i != implicit:
            entry, opens = draw(delimiter("open", f"<{i}>"))
            spec.update(entry)
        if draw(st.integers(0, 4)) > 0:
            entry, closes = draw(delimiter("close", f"</{i}>"))
            spec.update(entry)
        # The interpreter loops forever when open and close can both match the empty string at
        # one position: never build that (rtcompile's answer to it is tested elsewhere).
        patterns = [spec.get("open_pattern"), spec.get("close_pattern")]
        if all(p is not None and may_match_empty(p) for p in patterns):
            del spec["close_pattern"]
            spec["close"], closes = f"</{i}>", [f"</{i}>"]
        parser, args, bodies = draw(content_spec())
        spec["content"] = parser
        if args or draw(st.booleans()):
            spec["content_args"] = args
        if draw(st.integers(0, 3)) == 0:
            spec["repeats"] = True
            if draw(st.booleans()):
                spec["join"] = draw(maybe_long(", "))
        if draw(st.integers(0, 2)) == 0:
            captures = ()
            if "open_pattern" in spec and draw(st.booleans()):
                spec["open_pattern"] = r"<c (?P<name>\w+)>" + spec["open_pattern"]
                opens = [f"<c fn>{t}" for t in opens]
                captures = ("name",)
            spec["transform"] = draw(transform(captures))
        fields[name] = spec
        plans[name] = (opens, closes, bodies)
    template: dict = {}
    if draw(st.booleans()):
        template["defaults"] = draw(st.dictionaries(maybe_long("role"), json_data, max_size=2))
    anchor, anchor_texts = draw(delimiter("start_anchor", "<|assistant|>"))
    template.update(anchor)
    template["fields"] = fields
    return template, {"fields": plans, "anchor": anchor_texts}


@st.composite
def outputs(draw, plan: dict) -> list[tuple[str, list[str]]]:
    """A few (prefix, chunks) runs built from the template's own delimiters, bodies and noise."""
    runs = []
    for _ in range(draw(st.integers(1, 3))):
        pieces = []
        for _ in range(draw(st.integers(1, 4))):
            name = draw(st.sampled_from(sorted(plan["fields"])))
            opens, closes, bodies = plan["fields"][name]
            if opens:
                pieces.append(draw(st.sampled_from(opens)))
            pieces.append(draw(bodies))
            if closes and draw(st.integers(0, 4)) > 0:
                pieces.append(draw(st.sampled_from(closes)))
            if draw(st.booleans()):
                pieces.append(draw(adversarial))
        text = "".join(pieces)
        prefix = draw(st.sampled_from(["", "@"]))
        if plan["anchor"] and draw(st.booleans()):
            prefix = "history " + draw(st.sampled_from(plan["anchor"]))
            if draw(st.booleans()):  # the prompt opened a region already
                text, prefix = text[len(text) // 3 :], prefix + text[: len(text) // 3]
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        runs.append((prefix, chunks))
    return runs


@st.composite
def adversarial_cases(draw) -> tuple[dict, list]:
    template, plan = draw(adversarial_templates())
    return template, draw(outputs(plan))


# ---- checks ---------------------------------------------------------------------------------------

# Names and attributes that injected code would need; generated modules never use them.
FORBIDDEN_NAMES = {
    "open", "__import__", "eval", "exec", "compile", "getattr", "globals", "__builtins__",
    "breakpoint", "os", "subprocess", "cycler", "lipsum",
}
FORBIDDEN_ATTRIBUTES = {"system", "popen", "__globals__", "__subclasses__", "__import__", "__builtins__", "__class__"}


@pytest.fixture(autouse=True, scope="module")
def private_compile_cache(tmp_path_factory):
    """Compile into a private cache directory: never the user's, never another checkout's."""
    previous = os.environ.get("RTCOMPILE_CACHE_DIR")
    os.environ["RTCOMPILE_CACHE_DIR"] = str(tmp_path_factory.mktemp("rtcompile-cache"))
    yield
    if previous is None:
        del os.environ["RTCOMPILE_CACHE_DIR"]
    else:
        os.environ["RTCOMPILE_CACHE_DIR"] = previous


def assert_no_sentinel() -> None:
    created = SENTINEL.exists()
    SENTINEL.unlink(missing_ok=True)  # so that one failure does not fail every later test
    assert not created, "injected code ran: the sentinel file was created"


def template_strings(value) -> list[str]:
    """Every string in a template: keys and values, at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in template_strings(k) + template_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in template_strings(v)]
    return []


def assert_template_text_is_only_data(source: str, template: dict) -> None:
    """Template text reaches the source only inside string literals: no code token and no comment
    carries the payload marker, no injected name is used, and every string of the template is a
    constant of the module (TEMPLATE holds them all, parsed back as data)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING:
            assert MARK not in token.string, f"template text outside a string literal: {token!r}"
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id not in FORBIDDEN_NAMES, node.id
        elif isinstance(node, ast.Attribute):
            assert node.attr not in FORBIDDEN_ATTRIBUTES, node.attr
    constants = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    missing = [s for s in template_strings(template) if s not in constants]
    assert not missing, f"template strings that are not constants of the module: {missing[:3]!r}"


def comparable(value) -> str:
    """Values compared by repr: exact types, key order and float spelling (NaN equals NaN)."""
    return repr(value)


def interpreter_verdict(template: dict) -> BaseException | None:
    try:
        load_response_template(template)
    except Exception as error:  # noqa: BLE001 - the class is compared
        return error
    return None


def assert_rejected_alike(template: dict, expected: BaseException, compile_entry) -> None:
    """rtcompile rejects a template the interpreter rejects: same class, a clear TemplateError."""
    with pytest.raises(Exception) as info:
        compile_entry(template)
    error = info.value
    assert builtin_class(error) is builtin_class(expected), (error, expected)
    if isinstance(expected, ValueError):
        assert isinstance(error, rtcompile.TemplateError), repr(error)
        assert str(error) and (error.path == "" or error.path in str(error))
    assert_no_sentinel()


def assert_parses_like_the_interpreter(make_parser, template: dict, runs: list) -> None:
    for prefix, chunks in runs:
        expected = run_stream(lambda: interpreter.ResponseParser(template, prefix=prefix), chunks)
        actual = run_stream(lambda: make_parser(prefix), chunks)
        assert comparable(actual) == comparable(expected), f"prefix={prefix!r}, chunks={chunks!r}"
        assert_no_sentinel()


# ---- the properties ---------------------------------------------------------------------------------


@given(case=adversarial_cases())
def test_generated_code_holds_template_text_only_as_data(case):
    """Every example: the generator's output, before black formats it."""
    template, runs = case
    expected = interpreter_verdict(template)
    event("rejected" if expected is not None else "accepted")
    if expected is not None:
        assert_rejected_alike(template, expected, frontend.lower)
        return
    lowered = frontend.lower(template)
    source = codegen.render(lowered)
    assert_template_text_is_only_data(source, template)
    module = api.module_from_source(source, lowered.sha256)
    assert_no_sentinel()
    assert comparable(module.TEMPLATE) == comparable(template)
    assert_parses_like_the_interpreter(lambda prefix: module.ResponseParser(prefix), template, runs)


FULL_PIPELINE_EXAMPLES = max(10, settings().max_examples // 10)


@pytest.fixture(scope="module")
def import_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generated-imports")


def import_file(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=FULL_PIPELINE_EXAMPLES)
@given(case=adversarial_cases())
def test_full_pipeline_load_and_imported_file(case, import_dir):
    """Fewer examples: black, the cache, `rtcompile.load`, and a `compile_template` file imported."""
    template, runs = case
    expected = interpreter_verdict(template)
    event("rejected" if expected is not None else "accepted")
    if expected is not None:
        assert_rejected_alike(template, expected, rtcompile.compile_template)
        assert_rejected_alike(template, expected, rtcompile.load)
        return
    loaded = rtcompile.load(template)
    source = rtcompile.compile_template(template)
    assert_template_text_is_only_data(source, template)
    path = import_dir / f"adversarial_{loaded.TEMPLATE_SHA256[:16]}.py"
    path.write_text(source, encoding="utf-8")
    imported = import_file(path)
    assert_no_sentinel()
    for module in (loaded, imported):
        assert comparable(module.TEMPLATE) == comparable(template)
        assert_parses_like_the_interpreter(lambda prefix, m=module: m.ResponseParser(prefix), template, runs)


# ---- the code generator's jinja2 environment ----------------------------------------------------------

JINJA_ATTACKS = [
    "{{ 7 * 7 }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}",
    "{# a comment #}",
    "{% raw %}{{ x }}{% endraw %}",
    f"{{{{ cycler.__init__.__globals__.os.system('touch {S}') }}}}",
    f"{{{{ self.__init__.__globals__.__builtins__.open('{S}', 'w') }}}}",
    f"{{% set _ = lipsum.__globals__['os'].popen('touch {S}').read() %}}",
    "{{ fields|py }}",
    "{{ '' ~ value }}",
    "{%- if true -%}\nimport os\n{%- endif -%}",
]


def jinja_template(attack: str) -> tuple[dict, list[str]]:
    """A template with `attack` (made unique per position) in every string position, and outputs
    that use its delimiters."""
    mark = lambda where: f"{attack}<{where}>"  # noqa: E731 - a tiny local helper
    template = {
        "start_anchor": [mark("anchor"), "<|a|>"],
        "defaults": {mark("defaults key"): mark("defaults value"), "nested": [mark("list item"), {mark("k"): 1}]},
        "fields": {
            mark("reasoning"): {"open": mark("think"), "close": [mark("/think"), "</t>"], "content": "text"},
            mark("calls"): {
                "open_pattern": regex.escape(mark("call")) + r"(?P<name>\w+)>",
                "close_pattern": regex.escape(mark("/call")),
                "content": "json",
                "content_args": {"string_delims": [[mark("q"), mark("/q")]], mark("unknown"): mark("ignored")},
                "repeats": True,
                "transform": {mark("type"): "{name}", "args": "{content}", mark("lit"): [mark("x"), 2.5]},
            },
            mark("kv"): {
                "open": mark("kv"),
                "close": mark("/kv"),
                "content": "kv-lines",
                "content_args": {"line_sep": mark(";"), "kv_sep": mark("="), "value_parser": {"name": "text", "args": {}}},
            },
            mark("xml"): {
                "open": mark("xml"),
                "close": mark("/xml"),
                "content": "xml-inline",
                "content_args": {"tag_pattern": regex.escape(mark("tag")) + r"(?P<key>\w+)=(?P<value>\w+);"},
                "repeats": True,
            },
            mark("notes"): {"open": mark("note"), "close": mark("/note"), "repeats": True, "join": mark("join")},
            "content": {"close": mark("end")},
        },
    }
    output = (
        mark("think") + "reasoning " + attack + mark("/think")
        + "answer " + attack
        + mark("call") + "get_weather>" + '{"city": ' + mark("q") + attack + mark("/q") + "}" + mark("/call")
        + mark("kv") + "a" + mark("=") + "1" + mark(";") + "b" + mark("=") + attack + mark("/kv")
        + mark("xml") + mark("tag") + "k=v;" + mark("/xml")
        + mark("xml") + mark("tag") + "k=w;" + mark("/xml")
        + mark("note") + "one" + mark("/note") + mark("note") + attack + mark("/note")
        + " tail " + mark("end")
    )
    return template, [output, list(output)]


@pytest.mark.parametrize("attack", JINJA_ATTACKS)
def test_jinja_syntax_in_every_position_stays_data(attack, tmp_path):
    template, outputs = jinja_template(attack)
    assert interpreter_verdict(template) is None  # the interpreter accepts it: all of it must work
    lowered = frontend.lower(template)
    for source in (codegen.render(lowered), rtcompile.compile_template(template)):
        assert_template_text_is_only_data(source, template)
    path = tmp_path / "jinja_attack.py"
    path.write_text(rtcompile.compile_template(template), encoding="utf-8")
    imported = import_file(path)
    assert_no_sentinel()
    assert comparable(imported.TEMPLATE) == comparable(template)
    runs = [("", [outputs[0]]), ("", outputs[1]), ("history <|a|>", [outputs[0]])]
    assert_parses_like_the_interpreter(lambda prefix: imported.ResponseParser(prefix), template, runs)
    message = imported.parse_response(outputs[0], prefix="")
    assert message[f"{attack}<reasoning>"] == "reasoning " + attack  # the text really went through


@pytest.mark.parametrize("origin", ["{{ 7 * 7 }}\nimport os", f"x\r{CREATE}", f"x\u2028{CREATE}", f"'''\n{CREATE}"])
def test_origin_text_stays_inside_its_comment(origin):
    template, _ = jinja_template("plain")
    source = rtcompile.compile_template(template, origin=origin)
    lines = source.splitlines()
    (where,) = [i for i, line in enumerate(lines) if repr(origin) in line]
    assert lines[where].startswith("# ")
    assert where >= 2, "the first two lines may carry an encoding declaration: no template text there"
    assert lines[0] == "# -*- coding: utf-8 -*-" and lines[1].startswith("# ")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.STRING, tokenize.COMMENT):
            assert "import os" not in token.string and MARK not in token.string
    api.module_from_source(source, "0" * 64)
    assert_no_sentinel()


printable_or_not = st.text(st.characters(exclude_categories=()), max_size=40)


@given(printable_or_not)
def test_a_literal_is_one_string_token_on_one_line(text):
    """What the `py` filter emits for a string cannot end early: one STRING token, no line break
    Python would honour, and it evaluates (with no builtins at all) to the same text."""
    literal = codegen.py_literal(text)
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(literal).readline) if t.type not in (tokenize.NEWLINE, tokenize.ENDMARKER)]
    assert [t.type for t in tokens] == [tokenize.STRING]
    assert "\n" not in literal and "\r" not in literal and "\x0c" not in literal
    assert eval(literal, {"__builtins__": {}}) == text


@given(json_data)
def test_data_literals_are_only_literal_syntax(value):
    """Nested data becomes displays of constants: nothing in it can call or name anything, except
    the float("nan") / float("inf") spellings, which call exactly `float`."""
    tree = ast.parse(codegen.py_literal(value), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name) and node.func.id == "float"
            assert [type(a) for a in node.args] == [ast.Constant] and node.args[0].value in ("nan", "inf", "-inf")
        else:
            assert isinstance(
                node, (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Load, ast.Name, ast.UnaryOp, ast.USub)
            ), ast.dump(node)
            if isinstance(node, ast.Name):
                assert node.id == "float"


# ---- bugs found here, each with a minimal reproduction ------------------------------------------------


def test_a_coding_cookie_in_the_origin_cannot_change_how_the_file_is_read(tmp_path):
    """The origin (the CLI passes the template's path) is written on the module's first line, where
    Python honours a `coding:` declaration when importing a file. With `utf-7`, text that is inert in
    UTF-8 decodes into quotes and code: a template string becomes a call that runs at import."""
    payload = f'+ACc- if __import__("os").system("touch {S}") else +ACc-'
    template = {"start_anchor_pattern": "@", "defaults": {"role": payload}, "fields": {"content": {"close_pattern": "<end>"}}}
    path = tmp_path / "from_a_cookie_path.py"
    path.write_text(rtcompile.compile_template(template, origin="models/x coding:utf-7/tokenizer_config.json"), encoding="utf-8")
    try:
        module = import_file(path)
    except SyntaxError:
        module = None  # refusing to import is safe, though the module should just work
    assert_no_sentinel()
    assert module is not None and module.parse_response("hi", prefix="")["role"] == payload


def test_split_surrogate_pairs_do_not_share_a_parser_with_the_character():
    """A high and a low surrogate as two code points (possible in a Python str, not from JSON text)
    and the astral character they would encode are different templates: the interpreter matches
    one and not the other. Their canonical JSON (ensure_ascii) is the same, so they share a hash."""
    astral = {"start_anchor": "@", "fields": {"e": {"open": "\U0001f600", "close": "!"}, "content": {}}}
    split = {"start_anchor": "@", "fields": {"e": {"open": "\ud83d\ude00", "close": "!"}, "content": {}}}
    rtcompile.load(astral)
    text = "\ud83d\ude00hi!"
    assert rtcompile.parse_response(text, split, prefix="") == interpreter.parse_response(text, split, prefix="")


def test_split_surrogate_pairs_in_defaults_are_kept():
    template = {"start_anchor": "@", "defaults": {"role": "\ud83d\ude00"}, "fields": {"content": {}}}
    assert rtcompile.parse_response("x", template, prefix="") == interpreter.parse_response("x", template, prefix="")


def test_no_test_here_ever_created_the_sentinel():
    assert_no_sentinel()


class ReprLies(str):
    """A str subclass whose repr is code: reachable only through the Python API (JSON text always
    decodes to plain str), but `py_literal` promises faithful literals for every value it accepts."""

    def __repr__(self) -> str:
        return f"__import__('os').system('touch {S}')"

    def __str__(self) -> str:
        return self


def test_a_str_subclass_cannot_choose_its_own_literal():
    literal = codegen.py_literal({"role": ReprLies("assistant")})
    assert MARK not in literal
    assert eval(literal, {"__builtins__": {}}) == {"role": "assistant"}


def test_a_template_of_str_subclasses_compiles_to_plain_literals():
    template = {"start_anchor": "@", "defaults": {"role": ReprLies("assistant")}, "fields": {"content": {}}}
    source = rtcompile.compile_template(template)
    assert MARK not in source
    module = api.module_from_source(source, "0" * 64)
    assert_no_sentinel()
    assert module.parse_response("hi", prefix="") == {"role": "assistant", "content": "hi"}
