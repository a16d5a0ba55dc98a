"""The on-disk cache of compiled parsers (rtcompile.cache).

Every test works in its own directory (tmp_path, and RTCOMPILE_CACHE_DIR pointing there when the
public API is used), with a fresh in-process memo, so nothing is shared with the user's cache or
between tests. Faults that cannot be produced for real here (a full disk; a read-only directory when
running as root) go through the cache's `FileSystem` seam.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import rtcompile
from rtcompile import api, cache, codegen, frontend
from rtcompile.cache import Cache, CacheWarning, FileSystem
from rtcompile.version import INTERPRETER_RELEASE

# Small templates keep each compilation short; each test compiles a few at most.
ANGLE = {
    "start_anchor": "<a>",
    "fields": {
        "reasoning_content": {"open": "<t>", "close": "</t>", "content": "text"},
        "content": {"content": "text"},
    },
}
SQUARE = {"start_anchor": "[a]", "fields": {"content": {"content": "text"}}}
# Non-ASCII delimiters put multi-byte characters into the generated source.
FULLWIDTH = {
    "start_anchor": "<｜Assistant｜>",
    "fields": {"content": {"close": "<｜end｜>", "content": "text"}},
}


def load_module(store: Cache, template: dict):
    """The parser module for `template` through `store`, as rtcompile.load builds it on a miss."""
    sha256 = frontend.lower(template).sha256
    build = lambda: codegen.generate(frontend.lower(template))  # noqa: E731
    return store.load(sha256, build, lambda code: api.module_from_code(code, sha256))


def check_angle_parser(module) -> None:
    assert module.parse_response("<t>why</t>so", prefix="") == {
        "reasoning_content": "why",
        "content": "so",
    }


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """A private RTCOMPILE_CACHE_DIR, and no module compiled by another test reused in memory."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("RTCOMPILE_CACHE_DIR", str(directory))
    monkeypatch.setattr(api, "_MEMO", api._Memo())
    monkeypatch.setattr(cache, "_caches", {})
    return directory


@pytest.fixture
def no_generator(monkeypatch):
    """Call to forbid compiling from here on: the next loads must come from the cache."""

    def forbid():
        def generate(*args, **kwargs):
            raise AssertionError("the generator was called")

        monkeypatch.setattr(codegen, "generate", generate)

    return forbid


@pytest.fixture
def count_generator(monkeypatch):
    calls = []
    real = codegen.generate

    def counting(lowered, **kwargs):
        calls.append(lowered.sha256)
        return real(lowered, **kwargs)

    monkeypatch.setattr(codegen, "generate", counting)
    return calls


def entry_path(directory: Path, template: dict) -> Path:
    return Cache(directory).path_for(cache.cache_key(frontend.lower(template).sha256))


def cache_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, CacheWarning)]


def assert_valid_entry(directory: Path, template: dict) -> str:
    path = entry_path(directory, template)
    text = path.read_text(encoding="utf-8")
    assert cache.verified_source(cache.cache_key(frontend.lower(template).sha256), text)
    return text


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ---- hits and misses ----------------------------------------------------------------------------


def test_a_miss_writes_one_verified_file_and_a_hit_never_calls_the_generator(
    isolated, no_generator
):
    first = load_module(Cache(isolated), ANGLE)
    check_angle_parser(first)
    entry = entry_path(isolated, ANGLE)
    assert files_in(isolated) == sorted([entry.name, code_path(isolated, ANGLE).name])
    text = assert_valid_entry(isolated, ANGLE)
    code = code_path(isolated, ANGLE).read_bytes()
    no_generator()
    second = load_module(Cache(isolated), ANGLE)
    check_angle_parser(second)
    assert second is not first and second.__file__ == str(entry)
    assert entry.read_text(encoding="utf-8") == text  # untouched by the hit
    assert code_path(isolated, ANGLE).read_bytes() == code


def test_a_hit_runs_the_kept_code_without_compiling(isolated, monkeypatch):
    load_module(Cache(isolated), ANGLE)

    def refuse(*args, **kwargs):
        raise AssertionError("the cached source was compiled again")

    monkeypatch.setattr(cache, "compile", refuse, raising=False)  # the builtin, as cache.py sees it
    check_angle_parser(load_module(Cache(isolated), ANGLE))


def code_path(directory: Path, template: dict) -> Path:
    return Cache(directory).code_path_for(cache.cache_key(frontend.lower(template).sha256))


def compiled_from(source: str, filename: str) -> bytes:
    import marshal

    return marshal.dumps(compile(source, filename, "exec"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda data, header, payload, other: data[: len(data) // 2],
        lambda data, header, payload, other: b"",
        lambda data, header, payload, other: payload,  # no header
        lambda data, header, payload, other: header.replace(b"code-sha256=", b"code-sha256=0") + payload,
        lambda data, header, payload, other: header.replace(b"python=", b"python=00") + payload,
        lambda data, header, payload, other: header.replace(b"source-sha256=", b"source-sha256=f") + payload,
        lambda data, header, payload, other: other,  # another template's code file
    ],
    ids=["half_written", "empty", "no_header", "bad_checksum", "other_python", "other_source", "other_entry"],
)
def test_damaged_or_foreign_code_files_are_never_run_and_are_replaced(isolated, damage):
    load_module(Cache(isolated), ANGLE)
    load_module(Cache(isolated), SQUARE)
    path = code_path(isolated, ANGLE)
    good = path.read_bytes()
    header, _, payload = good.partition(b"\n")
    path.write_bytes(damage(good, header + b"\n", payload, code_path(isolated, SQUARE).read_bytes()))
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert path.read_bytes() == good


def test_code_that_is_not_the_entrys_own_is_never_run(isolated, tmp_path):
    """Well-formed code files (their own checksum right) compiled from other source, or from this
    source under another file name (a moved cache directory), are not run: the verified source is
    compiled again. (Like the entry's own header, this guards against damage and mix-ups, not
    against someone who can write to the private directory: they could write a valid entry.)"""
    load_module(Cache(isolated), ANGLE)
    entry, path = entry_path(isolated, ANGLE), code_path(isolated, ANGLE)
    text = entry.read_text(encoding="utf-8")
    key = cache.cache_key(frontend.lower(ANGLE).sha256)
    sentinel = tmp_path / "sentinel"
    foreign = compiled_from(sentinel_code(sentinel), str(entry))
    path.write_bytes(cache.code_header(key, sentinel_code(sentinel), foreign) + foreign)
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert not sentinel.exists(), "code compiled from other source was run"
    moved = compiled_from(text, str(tmp_path / "elsewhere.py"))
    path.write_bytes(cache.code_header(key, text, moved) + moved)
    module = load_module(Cache(isolated), ANGLE)
    check_angle_parser(module)
    assert module.__file__ == str(entry)
    header = path.read_bytes().partition(b"\n")[0] + b"\n"
    assert header != cache.code_header(key, text, moved)  # replaced by this entry's own code


def test_templates_get_separate_entries(isolated, count_generator):
    load_module(Cache(isolated), ANGLE)
    load_module(Cache(isolated), SQUARE)
    load_module(Cache(isolated), ANGLE)
    assert len(count_generator) == 2
    assert entry_path(isolated, ANGLE) != entry_path(isolated, SQUARE)
    assert files_in(isolated) == sorted(
        path(isolated, template).name for template in (ANGLE, SQUARE) for path in (entry_path, code_path)
    )


# ---- the key ------------------------------------------------------------------------------------


def test_key_depends_on_the_template_not_on_the_object():
    angle = frontend.lower(ANGLE).sha256
    assert cache.cache_key(angle) == cache.cache_key(
        frontend.lower(json.loads(json.dumps(ANGLE))).sha256
    )
    assert cache.cache_key(angle) != cache.cache_key(frontend.lower(SQUARE).sha256)
    # Key order can be observed (the order of defaults is the order of the message's keys; field
    # order is the order of "required fields missing" errors), so the key keeps it.
    swapped_fields = {**ANGLE, "fields": dict(reversed(list(ANGLE["fields"].items())))}
    assert cache.cache_key(frontend.lower(swapped_fields).sha256) != cache.cache_key(angle)
    one_order = {**SQUARE, "defaults": {"b": 1, "a": 2}}
    other_order = {**SQUARE, "defaults": {"a": 2, "b": 1}}
    assert frontend.lower(one_order).sha256 != frontend.lower(other_order).sha256


@pytest.mark.parametrize(
    "attribute, value",
    [("__version__", "999.0.0"), ("RUNTIME_ABI", -1), ("generator_fingerprint", lambda: "0" * 64)],
)
def test_key_changes_with_the_compiler(monkeypatch, attribute, value):
    sha = frontend.lower(ANGLE).sha256
    before = cache.cache_key(sha)
    monkeypatch.setattr(cache, attribute, value)
    assert cache.cache_key(sha) != before


def test_key_changes_with_the_python_version(monkeypatch):
    sha = frontend.lower(ANGLE).sha256
    before = cache.cache_key(sha)
    monkeypatch.setattr(cache.sys, "version_info", (3, 99, 0, "final", 0))
    assert cache.cache_key(sha) != before


def test_a_new_compiler_version_never_reuses_old_output(isolated, count_generator, monkeypatch):
    load_module(Cache(isolated), ANGLE)
    old = entry_path(isolated, ANGLE)
    monkeypatch.setattr(cache, "__version__", "999.0.0")
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert len(count_generator) == 2
    new = entry_path(isolated, ANGLE)
    assert new != old and new.exists() and old.exists()
    assert (
        f"key={cache.cache_key(frontend.lower(ANGLE).sha256)}"
        in new.read_text(encoding="utf-8").splitlines()[0]
    )


def test_the_generator_fingerprint_covers_the_generator_files():
    here = Path(cache.__file__).parent
    for name in cache.generator_files():
        assert (here / name).is_file(), name
    # a module template added to the generator is part of what it emits
    templates = {f"codegen/{path.name}" for path in (here / "codegen").glob("*.jinja")}
    assert templates and templates <= set(cache.generator_files())
    assert len(cache.generator_fingerprint()) == 64


# ---- entries that must not be trusted -----------------------------------------------------------


def sentinel_code(sentinel: Path) -> str:
    return f"open({str(sentinel)!r}, 'w').write('executed')\n"


def assert_rebuilt(directory: Path, template: dict, sentinel: Path | None = None) -> None:
    module = load_module(Cache(directory), template)
    if template is ANGLE:
        check_angle_parser(module)
    assert_valid_entry(directory, template)
    assert not [p for p in directory.iterdir() if p.suffix == ".tmp"]
    if sentinel is not None:
        assert not sentinel.exists(), "a cache file that failed verification was executed"


def test_a_hand_edited_entry_is_never_executed(isolated, tmp_path, count_generator):
    load_module(Cache(isolated), ANGLE)
    path = entry_path(isolated, ANGLE)
    header, body = path.read_text(encoding="utf-8").split("\n", 1)
    sentinel = tmp_path / "sentinel"
    path.write_text(f"{header}\n{sentinel_code(sentinel)}{body}", encoding="utf-8")
    assert_rebuilt(isolated, ANGLE, sentinel)
    assert len(count_generator) == 2
    assert "sentinel" not in path.read_text(encoding="utf-8")


def test_an_entry_written_for_another_key_is_never_executed(isolated, tmp_path):
    """A well-formed file (a correct checksum of its own source) under the wrong key: e.g. another
    template's or another compiler version's output moved into place."""
    sentinel = tmp_path / "sentinel"
    path = entry_path(isolated, ANGLE)
    isolated.mkdir(mode=0o700)
    other_key = cache.cache_key(frontend.lower(SQUARE).sha256)
    path.write_text(cache.with_header(other_key, sentinel_code(sentinel)), encoding="utf-8")
    assert_rebuilt(isolated, ANGLE, sentinel)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda text: text[: len(text) // 2],
        lambda text: text[: text.index("\n")],  # the header alone, without its newline
        lambda text: text.split("\n", 1)[1],  # no header
        lambda text: "",
        lambda text: text.replace("source-sha256=", "source-sha256=0"),
        lambda text: text.replace("key=", "key=f"),
        lambda text: text + "\n",
    ],
    ids=[
        "half_written",
        "header_only",
        "no_header",
        "empty",
        "bad_checksum",
        "bad_key",
        "appended",
    ],
)
def test_damaged_entries_are_rebuilt(isolated, corrupt, count_generator):
    load_module(Cache(isolated), ANGLE)
    path = entry_path(isolated, ANGLE)
    good = path.read_text(encoding="utf-8")
    path.write_text(corrupt(good), encoding="utf-8")
    assert_rebuilt(isolated, ANGLE)
    assert path.read_text(encoding="utf-8") == good
    assert len(count_generator) == 2


def test_a_file_cut_inside_a_multibyte_character_is_rebuilt(isolated):
    load_module(Cache(isolated), FULLWIDTH)
    path = entry_path(isolated, FULLWIDTH)
    data = path.read_bytes()
    lead_byte = next(i for i, byte in enumerate(data) if byte >= 0xC0)
    path.write_bytes(data[: lead_byte + 1])  # not valid UTF-8 any more
    module = load_module(Cache(isolated), FULLWIDTH)
    assert module.parse_response("hi<｜end｜>", prefix="") == {"content": "hi"}
    assert path.read_bytes() == data


def test_an_entry_declaring_another_template_is_never_run(isolated, tmp_path):
    """A right header (key and checksum) over source generated for a different template."""
    sentinel = tmp_path / "sentinel"
    key = cache.cache_key(frontend.lower(ANGLE).sha256)
    isolated.mkdir(mode=0o700)
    other = rtcompile.compile_template(SQUARE)
    entry_path(isolated, ANGLE).write_text(cache.with_header(key, sentinel_code(sentinel) + other), encoding="utf-8")
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert not sentinel.exists()
    assert_valid_entry(isolated, ANGLE)


def test_a_verified_entry_that_fails_to_run_is_rebuilt(isolated, tmp_path):
    """E.g. a runtime changed under a cached module: the file is intact but raises on import."""
    sentinel = tmp_path / "sentinel"
    key = cache.cache_key(frontend.lower(ANGLE).sha256)
    isolated.mkdir(mode=0o700)
    facts = (
        f'TEMPLATE_SHA256 = "{frontend.lower(ANGLE).sha256}"\n__rtcompile_version__ = "{rtcompile.__version__}"\n'
        f'IMPLEMENTS_TRANSFORMERS = "{INTERPRETER_RELEASE}"\n'
    )
    entry_path(isolated, ANGLE).write_text(
        cache.with_header(
            key, f"{facts}{sentinel_code(sentinel)}raise ImportError('built for another runtime')\n"
        ),
        encoding="utf-8",
    )
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert sentinel.exists()  # it was trusted (header and declared facts are right) and ran, then replaced
    assert "another runtime" not in assert_valid_entry(isolated, ANGLE)


# ---- an unusable cache falls back to memory, with one warning -----------------------------------


class FullDisk(FileSystem):
    def write_atomic(self, path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


class ReadOnlyFileSystem(FileSystem):
    def write_atomic(self, path, text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))


class NoPermission(FileSystem):
    def ensure_private_dir(self, path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


@pytest.mark.parametrize("filesystem", [FullDisk, ReadOnlyFileSystem, NoPermission])
def test_faults_fall_back_to_memory_with_exactly_one_warning(isolated, filesystem):
    store = Cache(isolated, fs=filesystem())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        check_angle_parser(load_module(store, ANGLE))
        square = load_module(store, SQUARE)
        check_angle_parser(load_module(store, ANGLE))
    assert square.parse_response("x", prefix="") == {"content": "x"}
    found = cache_warnings(record)
    assert len(found) == 1, [str(w.message) for w in record]
    assert str(isolated) in str(found[0].message) and "in memory" in str(found[0].message)
    assert not isolated.exists() or not any(isolated.iterdir())


def test_a_real_write_failure_leaves_no_temporary_file(isolated, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache.os, "fsync", disk_full)
    with pytest.warns(CacheWarning, match="No space left"):
        check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert list(isolated.iterdir()) == []


def test_a_path_that_cannot_be_a_directory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RTCOMPILE_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(CacheWarning, match="cannot use the cache directory"):
        check_angle_parser(rtcompile.load(ANGLE))
    assert blocker.read_text() == "not a directory"


def test_one_warning_per_directory_through_the_public_api(tmp_path, monkeypatch):
    directories = []
    for name in ("first", "second"):
        blocker = tmp_path / name
        blocker.write_text("")
        directories.append(blocker / "cache")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for directory in directories:
            monkeypatch.setenv("RTCOMPILE_CACHE_DIR", str(directory))
            check_angle_parser(rtcompile.load(ANGLE))
            assert rtcompile.parse_response("x", SQUARE, prefix="") == {"content": "x"}
            monkeypatch.setattr(api, "_MEMO", api._Memo())  # make the next directory compile again
    found = cache_warnings(record)
    assert len(found) == 2, [str(w.message) for w in found]
    for warning, directory in zip(found, directories):
        assert str(directory) in str(warning.message)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory(isolated):
    isolated.mkdir(mode=0o500)
    try:
        with pytest.warns(CacheWarning):
            check_angle_parser(load_module(Cache(isolated), ANGLE))
        assert list(isolated.iterdir()) == []
    finally:
        isolated.chmod(0o700)


# ---- the directory's owner and mode -------------------------------------------------------------


def test_the_created_directory_is_private(tmp_path, monkeypatch):
    directory = tmp_path / "nested" / "deeper" / "cache"
    monkeypatch.setenv("RTCOMPILE_CACHE_DIR", str(directory))
    previous = os.umask(0)  # even a umask that lets everybody write must not open the cache
    try:
        rtcompile.load(ANGLE)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert_valid_entry(directory, ANGLE)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_refused(isolated, mode):
    isolated.mkdir()
    isolated.chmod(mode)
    with pytest.warns(CacheWarning, match="writable by other users"):
        check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert list(isolated.iterdir()) == []
    assert stat.S_IMODE(isolated.stat().st_mode) == mode  # refused, not silently "fixed"


def test_an_existing_directory_only_others_can_read_is_accepted(isolated):
    isolated.mkdir()
    isolated.chmod(0o755)
    check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert_valid_entry(isolated, ANGLE)


def test_a_directory_owned_by_someone_else_is_refused(isolated, monkeypatch):
    isolated.mkdir(mode=0o700)
    real_uid = os.getuid()
    monkeypatch.setattr(cache.os, "getuid", lambda: real_uid + 1)
    with pytest.warns(CacheWarning, match="belongs to another user"):
        check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert list(isolated.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory away")
def test_a_directory_really_owned_by_nobody_is_refused(isolated):
    isolated.mkdir(mode=0o700)
    os.chown(isolated, 65534, 65534)
    with pytest.warns(CacheWarning, match="belongs to another user"):
        check_angle_parser(load_module(Cache(isolated), ANGLE))
    assert list(isolated.iterdir()) == []


# ---- concurrent writers -------------------------------------------------------------------------

RACER = r"""
import json, os, sys, time
from pathlib import Path
import rtcompile.codegen as codegen
from rtcompile import api, frontend
from rtcompile.cache import Cache

directory, index, count, template = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
real_generate = codegen.generate

def generate_then_wait(lowered, **kwargs):
    # Every racer compiles before any of them writes: all of them miss, all of them write.
    source = real_generate(lowered, **kwargs)
    (directory.parent / f"ready-{index}").touch()
    deadline = time.monotonic() + 90
    while len(list(directory.parent.glob("ready-*"))) < count:
        if time.monotonic() > deadline:
            sys.exit("the other racers never arrived")
        time.sleep(0.005)
    return source

codegen.generate = generate_then_wait
sha256 = frontend.lower(template).sha256
build = lambda: codegen.generate(frontend.lower(template))
module = Cache(directory).load(sha256, build, lambda code: api.module_from_code(code, sha256))
print(json.dumps(module.parse_response("<t>r</t>c", prefix="")))
"""


def test_processes_racing_on_one_entry_all_succeed_and_leave_one_file(tmp_path):
    directory = tmp_path / "cache"
    count = 3
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(directory), str(i), str(count), json.dumps(ANGLE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    results = [racer.communicate(timeout=180) for racer in racers]
    for racer, (out, err) in zip(racers, results):
        assert racer.returncode == 0, err
        assert json.loads(out) == {"reasoning_content": "r", "content": "c"}
    assert len(list(tmp_path.glob("ready-*"))) == count  # every racer really compiled
    # one entry and its code, no temporaries
    assert files_in(directory) == sorted([entry_path(directory, ANGLE).name, code_path(directory, ANGLE).name])
    assert_valid_entry(directory, ANGLE)


# ---- python -m rtcompile cache ------------------------------------------------------------------


def run_cli(*args: str, directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtcompile", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RTCOMPILE_CACHE_DIR": str(directory)},
    )


def test_cli_shows_and_clears_the_cache(isolated):
    load_module(Cache(isolated), ANGLE)
    load_module(Cache(isolated), SQUARE)
    names = sorted([entry_path(isolated, ANGLE).name, entry_path(isolated, SQUARE).name])
    codes = [code_path(isolated, ANGLE).name, code_path(isolated, SQUARE).name]
    size = sum((isolated / name).stat().st_size for name in names + codes)
    unrelated = isolated / "notes.py"
    unrelated.write_text("# not a cache entry\n")
    leftover = isolated / (entry_path(isolated, ANGLE).stem + ".x1y2z3.tmp")
    leftover.write_text("half of an interrupted write")

    shown = run_cli("cache", directory=isolated)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"cache directory: {isolated}"
    assert lines[1] == f"entries: 2, {size} bytes"
    assert [line.strip().split("  ")[0] for line in lines[2:]] == names
    described = sorted(line.strip().split("  ", 1)[1] for line in lines[2:])  # which template each holds
    assert described == ["fields 'content'; start anchor '[a]'", "fields 'reasoning_content', 'content'; start anchor '<a>'"]
    assert run_cli("cache", "show", directory=isolated).stdout == shown.stdout

    cleared = run_cli("cache", "clear", directory=isolated)
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.strip() == f"removed 2 entries from {isolated}"
    assert sorted(p.name for p in isolated.iterdir()) == [
        "notes.py"
    ]  # only the cache's own files go

    empty = run_cli("cache", directory=isolated)
    assert empty.stdout.splitlines()[1] == "entries: 0, 0 bytes"


def test_cli_cache_on_a_directory_that_does_not_exist_yet(tmp_path):
    missing = tmp_path / "never-created"
    shown = run_cli("cache", directory=missing)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [f"cache directory: {missing}", "entries: 0, 0 bytes"]
    cleared = run_cli("cache", "clear", directory=missing)
    assert cleared.returncode == 0 and "removed 0 entries" in cleared.stdout
    assert not missing.exists()


def test_cli_cache_rejects_unknown_actions(isolated):
    result = run_cli("cache", "explode", directory=isolated)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
