"""Incremental readers of a tool call's arguments, one per content parser, and the JSON writer of
what is sent.

A call region's text arrives chunk by chunk; each reader here is fed those chunks and reports the
call's parts as soon as they can no longer change, to the region that owns it (`calls.ToolRegion`):

- `JsonScanner` (`json` content): one pass over the region, string/escape/depth state plus the
  template's `string_delims` / `unquoted_keys` dialect; each top-level member of the arguments
  object is reported when its value is complete (`member`), a call's name or id when its string
  closes (`leaf`), a `transform_each` list item when it starts (`element`).
- `TagArguments` (`xml-inline`): each `tag_pattern` match, once final (`pair`).
- `LineArguments` (`kv-lines`): each line, once its separator arrives (`pair`).
- `CallListArguments` (`python-call-list`): each call's name at its "(" (`element`, `named`), each
  keyword argument at the "," or ")" after it (`keyword_argument`), read by the content parser's own
  reader.

Cost, linear in the output: a JSON region is scanned once (a regex jumps to the next structural
character; a chunk that ends inside a custom string delimiter is re-read by at most the delimiter's
length) and each value is parsed once, when complete. An xml-inline region is searched only when a
chunk completes the tag pattern's literal suffix (e.g. `</parameter>`), over the text after the last
match; kv-lines splits only on a new separator.

Standard library, `regex` and rtcompile's runtime only: servers import this at run time.
"""

from __future__ import annotations

import functools
import json
import re
import string
import weakref
from typing import Any, Callable

import regex

from rtcompile.runtime import regex_syntax
from rtcompile.runtime.content_parsers import CallListReader, put_value, sub_parse
from rtcompile.runtime.twin import stdlib_twin

_WORD = regex.compile(r"\w+")


# ---- what is sent: JSON as json.dumps(value, ensure_ascii=False) writes it -----------------------

def _json_encoder() -> Callable[[Any], str]:
    """json.dumps(value, ensure_ascii=False), called per argument member sent and per call closed:
    json.dumps builds an encoder per call for any non-default option, and even a kept
    JSONEncoder's encode builds its C encoder anew for every value that is not a string (about
    1 us of a member's 1.3). Here the C encoder is built once, without the circular-reference
    check (parsed values hold no cycles; a value that did would raise RecursionError instead of
    ValueError), and used if it writes what JSONEncoder writes (checked once); otherwise
    JSONEncoder."""
    plain = json.JSONEncoder(ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # (a Python without json's C speedups)
        return plain.encode
    encode_any = make(
        None, plain.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True
    )
    encode_string = json.encoder.encode_basestring

    def to_json(value: Any) -> str:
        if type(value) is str:
            return encode_string(value)
        return "".join(encode_any(value, 0))

    samples = ["x", 'é"\n\u2028', 0, -1.5, 1e300, float("nan"), True, None, [1, ["a"]],
               {"a": {"b": [1.0, False]}, "c": None}, {1: 2, 2.5: 3, False: 4, None: 5}]
    try:
        if all(to_json(value) == plain.encode(value) for value in samples):
            return to_json
    except Exception:  # an encoder that takes other arguments
        pass
    return plain.encode


to_json = _json_encoder()


# ---- json ---------------------------------------------------------------------------------------


class _Capture:
    """Raw text from a start position on, collected across chunks (identity-compared)."""

    __slots__ = ("parts", "start")

    def __init__(self, start: int):
        self.parts: list[str] = []
        self.start = start


# What a member's value is, as far as the scanner has seen (it completes at its closing quote or
# bracket; a number or literal only at the following "," or "}").
_V_NONE, _V_STRING, _V_CONTAINER, _V_DONE, _V_DELIMITED = 0, 1, 2, 3, 4


class _Frame:
    __slots__ = (
        "kind",
        "rel",
        "slot",
        "role",
        "expect_key",
        "key",
        "index",
        "cap",
        "vcap",
        "vwhich",
        "vstate",
    )

    def __init__(self, kind: str, rel: tuple | None, slot: int, role: int):
        self.kind = kind  # "{" or "["
        self.rel = rel  # path relative to the call object (None: the transform_each list itself)
        self.slot = slot
        self.role = role
        self.expect_key = True
        self.key: str | None = None
        self.index = 0
        self.cap: _Capture | None = None  # the member (args frames) or the key (tracked frames)
        self.vcap: _Capture | None = None  # a name/id value
        self.vwhich = ""
        self.vstate = _V_NONE


_OPAQUE, _TRACK, _ARGS = 0, 1, 2


class JsonScanner:
    """One pass over a JSON region, chunk by chunk: reports the members of the arguments object and
    the name/id values of each call as soon as they are complete (their raw text; the caller parses
    it with the template's own JSON parser). Subtrees that hold nothing of interest are only counted.
    """

    def __init__(
        self, sink: Any, plan: Any, delims: list[tuple[str, str]], unquoted: bool
    ):
        self.sink = weakref.proxy(sink)  # (a back reference: no cycle to wait for the collector)
        self.each = plan.each
        paths = {}
        for which, source in (("name", plan.name), ("id", plan.id), ("args", plan.arguments)):
            if source.kind == "path":
                paths[which] = source.value
        args = paths.get("args")
        # arguments that contain the name or id cannot stream member by member
        if args is not None and any(
            p[: len(args)] == args for w, p in paths.items() if w != "args"
        ):
            args = None
        self.args_rel = args
        self.leaves = {p: w for w, p in paths.items() if w != "args"}
        self.prefixes = {
            p[:i]
            for w, p in paths.items()
            if w != "args" or args is not None
            for i in range(len(p))
        }
        self.delims = delims
        self.unquoted = unquoted
        firsts = "".join(sorted({o[0] for o, _ in delims}))
        self.opener_firsts = firsts
        self.structural = re.compile("[" + re.escape('{}[],:"' + firsts) + "]")
        self.string_stop = re.compile("[" + re.escape('"\\' + firsts) + "]")
        self.stack: list[_Frame] = []
        self.opaque = 0
        self.in_string = False
        self.delim_close: str | None = None
        self.carry = ""  # the text held back for the next chunk
        self.active: list[_Capture] = []
        self.root_seen = False

    # -- captures
    def _start(self, pos: int) -> _Capture:
        capture = _Capture(pos)
        self.active.append(capture)
        return capture

    def _end(self, capture: _Capture, text: str, pos: int) -> str:
        capture.parts.append(text[capture.start : pos])
        self.active.remove(capture)
        return "".join(capture.parts)

    # -- the dialect's custom string delimiters
    def _opener_at(self, text: str, j: int) -> tuple[str, str] | None | bool:
        """The delimiter pair opening at j, None if none does, False if the text ends too soon."""
        undecided = False
        rest = len(text) - j
        for opener, closer in self.delims:
            if text.startswith(opener, j):
                return opener, closer
            if rest < len(opener) and opener.startswith(text[j:]):
                undecided = True
        return False if undecided else None

    def _open_delimited(self, text: str, j: int) -> int | None:
        """At a first character of a string_delims opener (inside a JSON string or between values):
        where the delimited string's text starts (its closer now awaited; a member's value that it
        is starts there), -1 while the opener is undecided at the text's end, None if none starts
        at j."""
        pair = self._opener_at(text, j)
        if pair is None:
            return None
        if pair is False:
            return -1
        self.delim_close = pair[1]
        if not self.in_string:
            self._value_starts(_V_DELIMITED)
        return j + len(pair[0])

    def _close_delimited(self, text: str, end: int) -> None:
        """A custom-delimited string's closer ended at `end`: a member's value it was ends too."""
        self.delim_close = None
        stack = self.stack
        if not self.in_string and not self.opaque and stack and stack[-1].vstate == _V_DELIMITED:
            self._complete(stack[-1], text, end)

    def feed(self, chunk: str) -> None:
        # One loop, a regex jumping to the next structural character (in a string: quote or
        # backslash). Only rare steps are methods: at a few characters a chunk, a method call
        # per state would make the scan a tenth slower.
        text = self.carry + chunk if self.carry else chunk
        n = len(text)
        i = 0
        end = n  # where the text held for the next chunk starts (n: none is)
        firsts = self.opener_firsts
        in_string = self.in_string
        while i < n:
            if self.delim_close is not None:  # inside a custom-delimited string: no escapes
                closer = self.delim_close
                j = text.find(closer, i)
                if j < 0:
                    end = max(i, n - len(closer) + 1)  # the closer may straddle the boundary
                    break
                i = j + len(closer)
                self._close_delimited(text, i)
                continue
            m = (self.string_stop if in_string else self.structural).search(text, i)
            if m is None:
                break
            j = m.start()
            c = text[j]
            i = j + 1
            if firsts and c in firsts:
                resume = self._open_delimited(text, j)
                if resume is not None:
                    if resume < 0:
                        end = j
                        break
                    i = resume
                    continue
            if in_string:
                if c == "\\":
                    if i >= n:  # (the escaped character is in the next chunk)
                        end = j
                        break
                    i += 1
                elif c == '"':
                    self.in_string = in_string = False
                    if not self.opaque and self.stack and self.stack[-1].vstate == _V_STRING:
                        self._complete(self.stack[-1], text, i)
            elif c == '"':
                self.in_string = in_string = True
                self._value_starts(_V_STRING)
            elif self.opaque:  # a subtree of no interest: only its depth is counted
                if c == "{" or c == "[":
                    self.opaque += 1
                elif c == "}" or c == "]":
                    self.opaque -= 1
                    if not self.opaque and self.stack and self.stack[-1].vstate == _V_CONTAINER:
                        self._complete(self.stack[-1], text, i)
            elif c in "{}[],:":
                self._structural(c, text, j)
        for capture in self.active:
            capture.parts.append(text[capture.start : end])
            capture.start = 0
        self.carry = text[end:] if end < n else ""

    def _value_starts(self, state: int) -> None:
        if not self.opaque and self.stack:
            frame = self.stack[-1]
            if frame.vstate == _V_NONE and not frame.expect_key and frame.kind == "{":
                frame.vstate = state

    def _complete(self, frame: _Frame, text: str, pos: int) -> None:
        """A member's value ended at `pos` (a string or a container): report it now."""
        frame.vstate = _V_DONE
        if frame.role == _ARGS and frame.cap is not None:
            raw = self._end(frame.cap, text, pos)
            frame.cap = None
            self.sink.member(frame.slot, raw)
        if frame.vcap is not None:
            raw = self._end(frame.vcap, text, pos)
            frame.vcap = None
            self.sink.leaf(frame.slot, frame.vwhich, raw)

    def _role(self, rel: tuple) -> int:
        if rel == self.args_rel:
            return _ARGS
        return _TRACK if rel in self.prefixes else _OPAQUE

    def _push_object(self, rel: tuple, slot: int, role: int, j: int) -> None:
        frame = _Frame("{", rel, slot, role)
        frame.cap = self._start(j + 1)
        self.stack.append(frame)

    def _member_end(self, frame: _Frame, text: str, j: int) -> None:
        if frame.cap is not None:
            raw = self._end(frame.cap, text, j)
            frame.cap = None
            if frame.role == _ARGS and raw.strip() and frame.vstate == _V_NONE:
                self.sink.member(frame.slot, raw)
        if frame.vcap is not None:
            raw = self._end(frame.vcap, text, j)
            frame.vcap = None
            self.sink.leaf(frame.slot, frame.vwhich, raw)
        frame.expect_key = True
        frame.key = None
        frame.vstate = _V_NONE

    def _root_opens(self, c: str, j: int) -> None:
        """The region's value opens with `c` at j: the transform_each list, the call object, or
        (any other value, or extra data after the value, which the region will fail to parse) a
        subtree of no interest."""
        if self.root_seen:
            self.opaque = 1
            return
        self.root_seen = True
        if self.each:
            if c == "[":
                self.stack.append(_Frame("[", None, 0, _TRACK))
            else:
                self.opaque = 1
        elif c == "{" and self._role(()) != _OPAQUE:
            self._push_object((), 0, self._role(()), j)
        else:
            self.opaque = 1

    def _structural(self, c: str, text: str, j: int) -> None:
        """A structural character outside strings and outside subtrees of no interest."""
        stack = self.stack
        if not stack:
            if c == "{" or c == "[":
                self._root_opens(c, j)
            return
        frame = stack[-1]
        if c == "{" or c == "[":
            if frame.kind == "[":  # an item of the transform_each list
                if c == "{":
                    self.sink.element(frame.index)
                    self._push_object((), frame.index, self._role(()), j)
                else:
                    self.opaque = 1
                return
            if frame.vstate == _V_NONE and not frame.expect_key:
                frame.vstate = _V_CONTAINER
            if frame.expect_key or frame.role == _ARGS or frame.key is None:
                self.opaque = 1
                return
            rel = frame.rel + (frame.key,)
            role = self._role(rel)
            if c == "{" and role != _OPAQUE:
                self._push_object(rel, frame.slot, role, j)
            else:
                self.opaque = 1
            return
        if c == ",":
            if frame.kind == "[":
                frame.index += 1
            else:
                self._member_end(frame, text, j)
                frame.cap = self._start(j + 1)
            return
        if c == ":":
            if frame.kind == "{" and frame.expect_key:
                frame.expect_key = False
                if frame.role == _TRACK and frame.cap is not None:
                    raw = self._end(frame.cap, text, j)
                    frame.cap = None
                    frame.key = key = self._decode_key(raw)
                    if key is not None:
                        which = self.leaves.get(frame.rel + (key,))
                        if which is not None:
                            frame.vcap = self._start(j + 1)
                            frame.vwhich = which
            return
        # "}" or "]"
        if frame.kind == "{":
            self._member_end(frame, text, j)
        stack.pop()
        if stack and stack[-1].vstate == _V_CONTAINER:
            self._complete(stack[-1], text, j + 1)

    def _decode_key(self, raw: str) -> str | None:
        key = raw.strip()
        if key.startswith('"'):
            try:
                value = json.loads(key)
            except ValueError:
                return None
            return value if isinstance(value, str) else None
        for opener, closer in self.delims:
            if (
                key.startswith(opener)
                and key.endswith(closer)
                and len(key) >= len(opener) + len(closer)
            ):
                return key[len(opener) : len(key) - len(closer)]
        if self.unquoted and _WORD.fullmatch(key):
            return key
        return None



def delimiter_pairs(value: Any) -> list[tuple[str, str]] | None:
    """`string_delims` as (opener, closer) pairs; None when malformed (no incremental scan)."""
    if not isinstance(value, list):
        return None
    pairs = []
    for pair in value:
        if not (
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and all(isinstance(s, str) and s for s in pair)
        ):
            return None
        pairs.append((pair[0], pair[1]))
    return pairs


# ---- xml-inline -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # (read once per pattern, not once per call region)
def _literal_suffix(pattern: str) -> str:
    """The literal text every match of `pattern` ends with ("" if unknown)."""
    return _literal_edge(pattern, last=True)


@functools.lru_cache(maxsize=256)
def _literal_prefix(pattern: str) -> str:
    """The literal text every match of `pattern` starts with ("" if unknown)."""
    return _literal_edge(pattern, last=False)


def _literal_edge(pattern: str, last: bool) -> str:
    syntax = regex_syntax.parse(pattern)
    if syntax is None or syntax.flags & (re.IGNORECASE | re.VERBOSE):
        return ""  # (regex-module syntax the stdlib parser does not read; case folded or verbose)
    return regex_syntax.literal_suffix(syntax.root) if last else regex_syntax.literal_prefix(syntax.root)


@functools.lru_cache(maxsize=256)  # (regex.compile's own cache lookup costs a few µs, once per call)
def _tag_regex(pattern: str) -> Any:
    return regex.compile(pattern, regex.DOTALL)


class TagArguments:
    """xml-inline: each `tag_pattern` match becomes one argument when it can no longer change.

    The region text after the last match is kept; a search runs only when a new chunk completes an
    occurrence of the pattern's literal suffix (every match ends with it). A match is final when no
    earlier start is still a partial match and appending the suffix again does not move its end (a
    greedy pattern would). Duplicate keys follow `merge_duplicates`, like the final parse."""

    def __init__(self, region: Any, args: dict):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        tag_pattern = args.get("tag_pattern")
        self.dead = not isinstance(tag_pattern, str)
        self.suffix = "" if self.dead else _literal_suffix(tag_pattern)
        if not self.suffix:
            self.dead = True
            return
        try:
            self.pattern = _tag_regex(tag_pattern)
        except Exception:
            self.dead = True
            return
        # Complete matches (the search below wants one; the probe is one) by the pattern's stdlib
        # twin where it has one: the faster engine, and about 15 us a tag less on a long value.
        self.complete = stdlib_twin(tag_pattern)
        self.first = _literal_prefix(tag_pattern)[:1]  # every match starts with it ("" if unknown)
        self.value_parser = args.get("value_parser")
        self.merge = args.get("merge_duplicates", False)
        self.parts: list[str] = []
        self.edge = ""  # the last len(suffix) - 1 characters seen
        self.values: dict = {}
        self.merged: set = set()  # keys whose values merge_duplicates turned into a list

    def feed(self, text: str) -> None:
        if self.dead:
            return
        self.parts.append(text)
        suffix = self.suffix
        window = self.edge + text
        if suffix not in window:
            self.edge = window[max(0, len(window) - len(suffix) + 1) :]
            return
        tail = "".join(self.parts)
        pos = 0
        pattern = self.pattern
        complete = self.complete
        while True:
            # A partial search reports the leftmost complete match wherever there is one (else a
            # partial one, which ends the loop): a complete search finds the same.
            if complete is not None:
                m = complete.search(tail, pos)
                if m is None:
                    break
            else:
                m = pattern.search(tail, pos, partial=True)
                if m is None or m.partial:
                    break
            start, end = m.span()
            if start == end:
                self.dead = True
                return
            if start > pos and (not self.first or self.first in tail[pos:start]):
                earlier = pattern.search(tail, pos, start, partial=True)
                if earlier is not None and earlier.start() < start:
                    break
            probe = (complete or pattern).match(tail + suffix, start)
            if probe is None or probe.end() != end:
                break
            if not self._emit(m):
                return
            pos = end
        tail = tail[pos:]
        self.parts = [tail]
        self.edge = tail[max(0, len(tail) - len(suffix) + 1) :]

    def _emit(self, m: Any) -> bool:
        groups = m.groupdict()
        key = groups.get("key")
        try:
            if key is None:
                raise ValueError("no key")
            value = sub_parse(groups.get("value", ""), self.value_parser)
        except Exception:  # the final parse fails the same way: leave it to the region's close
            self.dead = True
            return False
        values = self.values
        put_value(values, self.merged, key, value, self.merge)  # (as the final parse merges)
        self.region.pair(0, key, values[key])
        return True


# ---- kv-lines ---------------------------------------------------------------------------------------


class LineArguments:
    """kv-lines: each line becomes one argument once its separator arrives (the last line at close)."""

    def __init__(self, region: Any, args: dict):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        self.line_sep = args.get("line_sep", "\n")
        self.kv_sep = args.get("kv_sep", ":")
        self.dead = not (
            isinstance(self.line_sep, str)
            and self.line_sep
            and isinstance(self.kv_sep, str)
            and self.kv_sep
        )
        self.strip = args.get("strip", True)
        self.value_parser = args.get("value_parser")
        self.parts: list[str] = []
        self.edge = ""

    def feed(self, text: str) -> None:
        if self.dead:
            return
        sep = self.line_sep
        self.parts.append(text)
        window = self.edge + text
        if sep not in window:
            self.edge = window[max(0, len(window) - len(sep) + 1) :]
            return
        *lines, rest = "".join(self.parts).split(sep)
        for line in lines:
            if not self._line(line):
                return
        self.parts = [rest]
        self.edge = rest[max(0, len(rest) - len(sep) + 1) :]

    def _line(self, line: str) -> bool:
        strip = self.strip
        if strip:
            line = line.strip()
        if not line or self.kv_sep not in line:
            return True
        key, value = line.split(self.kv_sep, 1)
        if strip:
            key, value = key.strip(), value.strip()
        try:
            value = sub_parse(value, self.value_parser)
        except Exception:
            self.dead = True
            return False
        self.region.pair(0, key, value)
        return True




# ---- python-call-list ---------------------------------------------------------------------------------


# python-call-list: where the scanner stands in `[name(key=value, ...), ...]`.
_CL_BEFORE, _CL_BETWEEN, _CL_NAME, _CL_ARGUMENTS, _CL_DONE = range(5)
_CL_SPACE = " \t\n\r"
_CL_NAME_START = frozenset(string.ascii_letters + "_")
# What can end or nest an argument's value, outside strings.
_CL_ARGUMENT_STOP = re.compile(r"[\[\]{}()'\",]")
_CL_STRING_STOP = {"'": re.compile(r"['\\]"), '"': re.compile(r'["\\]')}


class CallListArguments:
    """python-call-list: each call is announced once its name is complete (at its "("), and each
    keyword argument is sent once its value is (at the "," or ")" after it), read by the content
    parser's own reader, so that it is exactly the value the region's final parse gives.

    The region is scanned once: outside strings a regex jumps to the next bracket, quote or comma;
    inside one, to its quote or a backslash (an escape split across chunks is remembered). Only the
    current name or argument is kept. Text the grammar refuses stops the scan: the final parse then
    fails too, and the region's close reports it."""

    def __init__(self, region: Any):
        self.region = weakref.proxy(region)  # (a back reference: no cycle to wait for the collector)
        self.state = _CL_BEFORE
        self.slot = 0  # the call being read
        self.piece: list[str] = []  # its name, or its current argument, so far
        self.depth = 0  # lists and dicts open in the current argument
        self.quote = ""  # the quote of the string the scan is in, if any
        self.escaped = False  # the last chunk ended in a string's backslash

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            state = self.state
            if state == _CL_ARGUMENTS:
                i = self._arguments(text, i, n)
            elif state == _CL_NAME:
                j = text.find("(", i)
                if j < 0:
                    self.piece.append(text[i:])
                    return
                self.piece.append(text[i:j])
                self._name()
                i = j + 1
            elif state == _CL_DONE:
                return
            else:  # before the list, or between calls
                c = text[i]
                if c in _CL_SPACE:
                    i += 1
                elif state == _CL_BEFORE:
                    self.state = _CL_BETWEEN if c == "[" else _CL_DONE
                    i += 1
                elif c == ",":
                    i += 1
                elif c in _CL_NAME_START:
                    self.state = _CL_NAME
                    self.piece = []
                else:  # "]" ends the list; anything else fails the final parse
                    self.state = _CL_DONE

    def _name(self) -> None:
        name = "".join(self.piece).rstrip(_CL_SPACE)
        self.piece = []
        reader = CallListReader(name)  # (the grammar's own name rule)
        try:
            reader.read_name("a function name")
            whole = reader.at_end()
        except ValueError:
            whole = False
        if not whole:
            self.state = _CL_DONE
            return
        self.region.element(self.slot)
        self.region.named(self.slot, name)
        self.state = _CL_ARGUMENTS
        self.depth = 0

    def _arguments(self, text: str, i: int, n: int) -> int:
        """Scan arguments from text[i:]; return where the scan stopped (n: the chunk is used up)."""
        piece = self.piece
        while i < n:
            if self.quote:
                if self.escaped:  # the character after a backslash at the last chunk's end
                    self.escaped = False
                    piece.append(text[i])
                    i += 1
                    continue
                m = _CL_STRING_STOP[self.quote].search(text, i)
                if m is None:
                    piece.append(text[i:])
                    return n
                j = m.start()
                if text[j] == "\\":
                    if j + 1 == n:
                        self.escaped = True
                        piece.append(text[i:])
                        return n
                    piece.append(text[i : j + 2])
                    i = j + 2
                else:
                    self.quote = ""
                    piece.append(text[i : j + 1])
                    i = j + 1
                continue
            m = _CL_ARGUMENT_STOP.search(text, i)
            if m is None:
                piece.append(text[i:])
                return n
            j = m.start()
            c = text[j]
            if c == "'" or c == '"':
                self.quote = c
            elif c == "[" or c == "{" or c == "(":
                self.depth += 1
            elif self.depth and (c == "]" or c == "}" or c == ")"):
                self.depth -= 1
            elif c == "," or c == ")":
                if self.depth == 0:
                    piece.append(text[i:j])
                    self._argument(last=c == ")")
                    return j + 1
            else:  # a "]" or "}" closing nothing: the final parse fails
                self.state = _CL_DONE
                return n
            piece.append(text[i : j + 1])
            i = j + 1
        return n

    def _argument(self, last: bool) -> None:
        raw = "".join(self.piece)
        self.piece = []
        slot = self.slot
        if last:  # the call's ")": the next call comes
            self.state = _CL_BETWEEN
            self.slot += 1
            if not raw.strip(_CL_SPACE):
                return  # `f()`, or the end after a trailing comma (which the final parse refuses)
        self.region.keyword_argument(slot, raw)
