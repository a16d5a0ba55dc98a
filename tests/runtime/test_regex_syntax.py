"""The regex tree reader (runtime/regex_syntax.py): node shapes, names, widths and sources.

The properties draw patterns from the delimiter strategy and from a richer grammar of this file's
own (sets with odd members, back references, conditionals, possessive and atomic forms, scoped and
global flags, repeated group names) and check the tree against the engines themselves: the source
written back from it matches exactly as the pattern does under `regex`, its widths are sre's, and
it reads back into the same tree.
"""

from __future__ import annotations

import re
import warnings

import regex
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rtcompile.runtime.regex_syntax import (
    REGEX_WHITESPACE,
    Alternation,
    Anchor,
    AnyChar,
    Atomic,
    Backref,
    Category,
    Char,
    CharSet,
    Conditional,
    Group,
    Look,
    NotChar,
    Range,
    Repeat,
    Seq,
    children,
    literal_prefix,
    literal_suffix,
    parse,
    to_source,
    walk,
)

from examples import scaled
from strategies import pattern_delimiters

try:  # Python 3.11+
    from re import _parser as sre_parse
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef]


def chars(text: str) -> tuple[Char, ...]:
    return tuple(Char(c) for c in text)


SPACE = CharSet((Category("space"),))


# ---- the trees of bundled delimiter patterns ----------------------------------------------------


def test_a_run_of_whitespace_then_a_literal():
    syntax = parse(r"\s*<tool_call>")
    assert syntax.root == Seq((Repeat(0, None, "greedy", Seq((SPACE,))), *chars("<tool_call>")))
    assert (syntax.groups, syntax.group_names, syntax.flags) == (0, {}, re.UNICODE)


def test_gemma4s_call_opener():
    syntax = parse(r"<\|tool_call>call:(?P<name>[^{<\s]+)", re.DOTALL)
    name = Repeat(1, None, "greedy", Seq((CharSet((Char("{"), Char("<"), Category("space")), negated=True),)))
    assert syntax.root == Seq((*chars("<|tool_call>call:"), Group(1, "name", Seq((name,)))))
    assert (syntax.groups, syntax.group_names, syntax.flags) == (1, {1: "name"}, re.DOTALL | re.UNICODE)


def test_qwens_close_of_alternatives():
    # sre factors what the branches share out of them: both start with "<|".
    root = parse(r"\s*(?:<\|im_end\|>|<\|endoftext\|>)").root
    assert root == Seq((
        Repeat(0, None, "greedy", Seq((SPACE,))),
        *chars("<|"),
        Alternation((Seq(chars("im_end|>")), Seq(chars("endoftext|>")))),
    ))


def test_an_xml_parameter_tag():
    root = parse(r"<parameter=(?P<key>[^>\n]+)>\n?(?P<value>.*?)\n?</parameter>", re.DOTALL).root
    optional_newline = Repeat(0, 1, "greedy", Seq((Char("\n"),)))
    assert root == Seq((
        *chars("<parameter="),
        Group(1, "key", Seq((Repeat(1, None, "greedy", Seq((CharSet((Char(">"), Char("\n")), negated=True),))),))),
        Char(">"),
        optional_newline,
        Group(2, "value", Seq((Repeat(0, None, "lazy", Seq((AnyChar(),))),))),
        optional_newline,
        *chars("</parameter>"),
    ))


def test_the_other_nodes():
    root = parse(r"(?i:a)[^b]\b(?<!c)(?>d)e++(x)(?(1)y|z)\1$").root
    assert root == Seq((
        Group(None, None, Seq((Char("a"),)), add_flags=re.IGNORECASE),
        NotChar("b"),
        Anchor("boundary"),
        Look(behind=True, negated=True, body=Seq((Char("c"),))),
        Atomic(Seq((Char("d"),))),
        Repeat(1, None, "possessive", Seq((Char("e"),))),
        Group(1, None, Seq((Char("x"),))),
        Conditional(1, Seq((Char("y"),)), Seq((Char("z"),))),
        Backref(1),
        Anchor("end"),
    ))
    assert parse(r"[a-c\d]").root == Seq((CharSet((Range("a", "c"), Category("digit"))),))
    assert parse(r"^\A\Z\B").root == Seq(tuple(map(Anchor, ["start", "start_string", "end_string", "not_boundary"])))


def test_nodes_are_hashable_values():
    assert len({parse(r"(a)|b*").root, parse(r"(a)|b*").root}) == 1


# ---- what is not read ---------------------------------------------------------------------------


def test_regex_only_syntax_and_warnings_are_not_read():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the reader keeps re's warnings to itself)
        for source in [r"\G<a>", r"\p{L}", r"(?|(a)|(b))", r"[[:alpha:]]", r"[a&&b]", r"[a--b]", r"(", r"(?P<1>x)",
                       r"(?P<a>x)(?(a)y)", r"a{2,1}"]:
            assert parse(source) is None, source


def test_negated_sets_of_a_class_and_its_complement_are_not_read():
    """`re` matches nothing with them, `regex` every character: no reading is right for both."""
    for source in [r"[^\s\S]", r"[^\S\sa]", r"[^\d\D]", r"[^\w\W\n]"]:
        assert re.findall(source, "a 1") == [] and regex.findall(source, "a 1") == ["a", " ", "1"]
        assert parse(source) is None, source
    assert parse(r"[\s\S]") is not None and parse(r"[^\s\D]") is not None


def test_names_are_kept_per_group_and_may_repeat():
    assert parse(r"(?P<a>x)|(?P<a>y)").group_names == {1: "a", 2: "a"}
    syntax = parse(r"[(?P<a>]\(?P<b>(?P<c>z)")  # (a set, an escaped parenthesis, then a group)
    assert (syntax.groups, syntax.group_names) == (1, {1: "c"})
    assert syntax.root.items[-1] == Group(1, "c", Seq((Char("z"),)))
    syntax = parse(r"(?P<a>x)(?P=a)")  # (a reference by name: read with the pattern's own names)
    assert syntax.group_names == {1: "a"} and syntax.root.items[-1] == Backref(1)
    assert parse(r"(?P<a>x)(?P=a)(?P<a>y)") is None
    # a name the pattern spells like the reader's placeholders stays the pattern's own
    assert parse(r"(?P<rtcompile_group_0>x)(?P<b>y)").group_names == {1: "rtcompile_group_0", 2: "b"}


# ---- walking --------------------------------------------------------------------------------------


def test_walk_visits_parents_before_children_in_order():
    root = parse(r"a(b|c*)(?=d)").root
    kinds = [type(node).__name__ for node in walk(root)]
    assert kinds == ["Seq", "Char", "Group", "Seq", "Alternation", "Seq", "Char", "Seq", "Repeat", "Seq", "Char",
                     "Look", "Seq", "Char"]
    assert children(Conditional(1, Seq(), None)) == (Seq(),)
    assert children(CharSet((Char("a"),))) == ()


def test_literal_prefix_and_suffix():
    assert literal_prefix(parse(r"<a>.*</a>").root) == "<a>"
    assert literal_suffix(parse(r"<a>.*</a>").root) == "</a>"
    assert literal_prefix(parse(r"(<a>)b").root) == ""  # (a group ends the sequence's own run)
    assert literal_suffix(parse(r"x[ab]").root) == ""
    assert literal_prefix(parse("abc").root) == literal_suffix(parse("abc").root) == "abc"
    assert literal_prefix(Char("x")) == "x"


# ---- widths ---------------------------------------------------------------------------------------


def test_widths():
    assert parse(r"a(?=bc)d*").root.width() == (1, None)
    assert parse(r"(ab)\1?").root.width() == (2, 4)
    assert parse(r"(x)(?(1)yy)|abc").root.width() == (1, 3)
    assert parse(r"(?<=ab)c{2,5}").root.items[0].width() == (0, 0)
    assert parse(r"(?:a{0}b*)").root.width() == (0, None)
    assert Repeat(2, 3, "lazy", Seq(chars("ab"))).width() == (4, 6)


# ---- back to a source -----------------------------------------------------------------------------


def test_sources():
    assert to_source(parse(r"(?:a|b)c+?(?P<n>\x3c)").root) == "[ab]c+?(?P<n><)"
    assert to_source(parse(r"(?s)a.").root) == "a."
    assert to_source(parse(r"(?s)a.")) == "(?s)a."
    assert to_source(parse(r"(?x) a \  b # comment")) == "a b"  # (the tree keeps no verbose spacing)
    assert to_source(parse(r"[\]\-^&~|[]")) == r"[\]\-\^\&\~\|\[]"
    assert to_source(parse("\\.\\*\\{\n\x00\u2028é")) == "\\.\\*\\{\\n\\x00\\u2028é"
    assert to_source(parse(r"(a)(?:\1)2")) == r"(a)(?:\1)2"  # (not \12)
    assert to_source(parse(r"(?:ab|cd)*x|y")) == r"(?:ab|cd)*x|y"
    assert to_source(parse(r"(a)(?(1)b|(?:cc|d))")) == r"(a)(?(1)b|(?:cc|d))"
    assert to_source(parse(r"a{2}b{2,}c{0,3}?d{1,2}+")) == r"a{2}b{2,}c{0,3}?d{1,2}+"
    assert to_source(parse(r"(?i:a)(?-i:b)(?x:c)")) == r"(?i:a)(?-i:b)(?:c)"


def test_whitespace_spelled_out_matches_regexs_whitespace_under_re():
    everything = "".join(map(chr, range(0x3100))) + "\ufeff"
    for source in [r"\s", r"\S", r"[\s]", r"[^\s]", r"[\S]", r"[^\S]", r"[\sa]", r"[^\sa]", r"[\Sa]", r"[^\Sa]",
                   r"[\S\s]", r"[\S\d]", r"[^\S\d]", r"[^\S\n]", r"[\S\n]"]:
        spelled = to_source(parse(source).root, spell_space=REGEX_WHITESPACE)
        assert re.findall(spelled, everything) == regex.findall(source, everything), (source, spelled)
        assert re.findall(f"{spelled}+", everything) == regex.findall(f"{source}+", everything), (source, spelled)


# ---- properties against the engines ---------------------------------------------------------------

_ATOMS = ["a", "b", "<", ">", "/", " ", r"\n", r"\t", r"\.", r"\*", r"\[", r"\]", r"\-", r"\\", r"\^", r"\$",
          r"\{", r"\|", r"\(", "-", "&", "~", "#", r"\x00", "é", "😀", r"\u2028", r"\x1c", "=", ".", r"\s", r"\S",
          r"\d", r"\D", r"\w", r"\W", "^", "$", r"\A", r"\Z", r"\b", r"\B", r"\1", r"\2", "(?P=g0)", "{", "}",
          "a{1,", "]", r"\0", r"\101"]
_SET_MEMBERS = ["a", "b", "<", "a-c", r"\s", r"\S", r"\d", r"\w", "-", r"\]", r"\-", r"\\", "^", r"\x00-\x1f", " ",
                r"\n", "é", "😀", "&", "~"]
_QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{1,3}", "{,2}", "{2,}", "{0}", "{0,1}"]
_OPENERS = ["(", "(?:", "(?P<G>", "(?=", "(?!", "(?<=", "(?<!", "(?>", "(?i:", "(?-i:", "(?s:", "(?m:", "(?x:", "(?a:"]
_GLOBAL_FLAGS = ["", "", "", "(?i)", "(?m)", "(?s)", "(?x)", "(?a)", "(?u)"]
TEXT_ALPHABET = "ab<>/ \n\t\x00é😀-]^_1AB=&~#*.\\\u2028\x1c{}|(c"


@st.composite
def _sets(draw) -> str:
    first = draw(st.sampled_from(["", "", "]", "^", "-"]))
    members = draw(st.lists(st.sampled_from(_SET_MEMBERS), min_size=1, max_size=3))
    return "[" + "^" * draw(st.booleans()) + first + "".join(members) + "]"


def _quantified(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    mode = st.sampled_from(["", "", "?", "+"])
    return st.tuples(inner, st.sampled_from(_QUANTIFIERS), mode).map(lambda t: t[0] + t[1] + (t[2] if t[1] else ""))


def _grouped(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    alternatives = st.lists(inner, min_size=1, max_size=3).map("|".join)
    group = st.tuples(st.sampled_from(_OPENERS), alternatives).map(lambda t: t[0] + t[1] + ")")
    condition = st.tuples(st.sampled_from(["1", "2"]), inner, st.sampled_from(["", "|b", "|"]))
    return st.one_of(group, condition.map(lambda t: f"(?({t[0]}){t[1]}{t[2]})"))


def _sequences(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(_quantified(inner), min_size=1, max_size=4).map("".join)


def _named(source: str) -> str:
    """Each `(?P<G>` named g0, g1, g2, g0...: some names repeat."""
    count = 0
    while "(?P<G>" in source:
        source = source.replace("(?P<G>", f"(?P<g{count % 3}>", 1)
        count += 1
    return source


_atoms = st.one_of(st.sampled_from(_ATOMS), _sets())
_grammar = st.recursive(
    _sequences(_atoms),
    lambda inner: st.lists(_sequences(st.one_of(_atoms, _grouped(inner))), min_size=1, max_size=2).map("|".join),
    max_leaves=8,
)
patterns = st.one_of(
    st.tuples(st.sampled_from(_GLOBAL_FLAGS), _grammar).map("".join).map(_named),
    pattern_delimiters().map(lambda delimiter: delimiter.value),
)


def _outcome(match) -> tuple | None:
    return None if match is None else match.regs


def _read(source: str):
    """The pattern compiled by `regex` and read into a tree; None when either refuses it."""
    try:
        compiled = regex.compile(source, regex.DOTALL)
    except regex.error:
        event("regex refuses the pattern")
        return None
    syntax = parse(source, re.DOTALL)
    event("read" if syntax is not None else "not read")
    return None if syntax is None else (compiled, syntax)


@settings(max_examples=scaled(3000), deadline=None)
@given(patterns, st.text(TEXT_ALPHABET, max_size=10))
def test_the_written_source_matches_exactly_as_the_pattern(source, text):
    read = _read(source)
    if read is None:
        return
    compiled, syntax = read
    written = regex.compile(to_source(syntax), regex.DOTALL)
    case = (source, written.pattern, text)
    assert (written.groups, written.groupindex) == (compiled.groups, compiled.groupindex), case
    for pos in range(len(text) + 1):
        assert _outcome(written.search(text, pos)) == _outcome(compiled.search(text, pos)), (case, pos)
        assert _outcome(written.match(text, pos)) == _outcome(compiled.match(text, pos)), (case, pos)
    # (the root's source, compiled with DOTALL, is the same)
    if not syntax.flags & ~int(re.DOTALL | re.UNICODE):
        assert to_source(syntax) == "(?s)" + to_source(syntax.root)


@settings(max_examples=scaled(3000), deadline=None)
@given(patterns)
def test_the_written_source_reads_back_into_the_same_tree(source):
    syntax = parse(source, re.DOTALL)
    if syntax is None:
        return
    # (a group whose only flag is VERBOSE or UNICODE is written as a plain group, which sre opens up)
    if any(isinstance(node, Group) and node.index is None and not _written_flags(node) for node in walk(syntax.root)):
        return
    again = parse(to_source(syntax), re.DOTALL)
    assert again is not None, (source, to_source(syntax))
    assert (again.root, again.group_names, again.groups) == (syntax.root, syntax.group_names, syntax.groups), source
    assert again.flags & ~int(re.VERBOSE) == syntax.flags & ~int(re.VERBOSE)


def _written_flags(group: Group) -> int:
    return (group.add_flags | group.del_flags) & ~int(re.VERBOSE | re.UNICODE)


def _sre_width(pattern) -> tuple[int, int | None]:
    low, high = pattern.getwidth()
    return low, None if high >= sre_parse.MAXREPEAT else high


@settings(max_examples=scaled(3000), deadline=None)
@given(patterns)
def test_widths_are_sres(source):
    """The root's width, each tail of it (what the delimiter analysis asks) and each lookaround's,
    against sre's getwidth on sre's own reading (patterns whose names repeat are left to the
    other properties: sre does not read them)."""
    syntax = parse(source, re.DOTALL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (what re warns about is not read: see above)
            parsed = sre_parse.parse(source, re.DOTALL)
    except Exception:
        return
    if syntax is None:  # (sre reads it: only `[^\\s\\S]` and its kin are left unread)
        assert any(_complements_negated(members) for members in _sre_items(parsed, {sre_parse.IN})), source
        return
    assert syntax.root.width() == _sre_width(parsed), source
    for start in range(1, len(parsed)):
        tail = sre_parse.SubPattern(parsed.state, list(parsed)[start:])
        assert Seq(syntax.root.items[start:]).width() == _sre_width(tail), (source, start)
    looks = [node.body for node in walk(syntax.root) if isinstance(node, Look)]
    sre_looks = [av[1] for av in _sre_items(parsed, {sre_parse.ASSERT, sre_parse.ASSERT_NOT})]
    assert [body.width() for body in looks] == [_sre_width(body) for body in sre_looks], source


def _complements_negated(members) -> bool:
    categories = {av for op, av in members if op is sre_parse.CATEGORY}
    pairs = [
        (sre_parse.CATEGORY_SPACE, sre_parse.CATEGORY_NOT_SPACE),
        (sre_parse.CATEGORY_DIGIT, sre_parse.CATEGORY_NOT_DIGIT),
        (sre_parse.CATEGORY_WORD, sre_parse.CATEGORY_NOT_WORD),
    ]
    return members[0][0] is sre_parse.NEGATE and any(set(pair) <= categories for pair in pairs)


def _sre_items(items, ops) -> list:
    """The arguments of sre items with one of `ops`, in the tree's pre-order."""
    found = []
    for op, av in items:
        if op in ops:
            found.append(av)
        found.extend(_sre_items_inside(op, av, ops))
    return found


def _sre_items_inside(op, av, ops) -> list:
    if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, getattr(sre_parse, "POSSESSIVE_REPEAT", None)):
        return _sre_items(av[2], ops)
    if op is sre_parse.SUBPATTERN:
        return _sre_items(av[3], ops)
    if op is sre_parse.BRANCH:
        return [found for branch in av[1] for found in _sre_items(branch, ops)]
    if op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
        return _sre_items(av[1], ops)
    if op is sre_parse.GROUPREF_EXISTS:
        return [found for body in av[1:] if body is not None for found in _sre_items(body, ops)]
    if op is getattr(sre_parse, "ATOMIC_GROUP", None):
        return _sre_items(av, ops)
    return []
