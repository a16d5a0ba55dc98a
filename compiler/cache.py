"""The on-disk cache of generated modules, one file per template.

Key: sha256 over the canonical template, the rtcompile version, the runtime ABI and the Python
version (everything that can change what the loaded module does; black's version only changes
formatting, so it is left out, which keeps a cache hit free of importing black). The key and a
checksum of the source are written on the file's first line and checked before anything is
executed: a file this cache did not write for that key, a half-written one, or one edited by hand is
never imported; it is rebuilt.

Beside each entry sits its compiled code (`.code`: marshalled, as in a .pyc), so that a hit in a new
process does not compile the source again. Its first line names the entry's key, a checksum of the
source it was compiled from, the bytecode format and a checksum of the code; unless all match (and
the code names the entry's path), the verified source is compiled instead and the file replaced.
Like the entry's own header this guards against damage and mix-ups; against someone who can write
to the private directory there is no defence, nor need of one: they could write a valid entry.

Writes are atomic (temporary file in the same directory, fsync, os.replace), so processes racing on
one entry all succeed and leave one valid file. The directory is created private (0700) and must
belong to the current user: the cache holds Python that gets executed. When the cache cannot be
used (read-only or full disk, foreign directory), modules are compiled in memory and a warning is
given once.

All file access goes through `FileSystem`, a seam tests replace to simulate faults.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import sys
import threading
import types
import warnings
from pathlib import Path
from typing import Callable, TypeVar

from .runtime import RUNTIME_ABI
from .version import INTERPRETER_RELEASE, __version__

HEADER_PREFIX = "# rtcompile-cache "
# Cache.path_for's names, and the temporary names write_atomic gives them while writing.
ENTRY_NAME = re.compile(r"tmpl_[0-9a-f]{32}\.py")
# Beside each entry, its compiled code (as a .pyc holds it), so that a hit does not compile again.
CODE_NAME = re.compile(r"tmpl_[0-9a-f]{32}\.code")
CODE_HEADER_PREFIX = b"# rtcompile-code "
TEMPORARY_NAME = re.compile(r"tmpl_[0-9a-f]{32}\.[^.]+\.tmp")


T = TypeVar("T")


class CacheWarning(UserWarning):
    """The cache directory is unusable; rtcompile compiles in memory instead."""


def cache_key(template_sha256: str) -> str:
    material = "\n".join(
        [
            template_sha256,
            __version__,
            INTERPRETER_RELEASE,
            str(RUNTIME_ABI),
            "%d.%d" % sys.version_info[:2],
            generator_fingerprint(),
        ]
    )
    return hashlib.sha256(material.encode("ascii")).hexdigest()


# The files whose content decides what the generator emits: a change to any of them (even without
# a version bump, as during development) must never reuse old output. Every file of the two stages
# counts (the front end and the code generator with its jinja2 templates), plus the version.
GENERATOR_STAGES = ("frontend", "codegen")


def generator_files() -> list[str]:
    """The generator's files, relative to the package, in a fixed order."""
    here = Path(__file__).parent
    files = [
        path.relative_to(here).as_posix()
        for stage in GENERATOR_STAGES
        for path in (here / stage).iterdir()
        if path.suffix in (".py", ".jinja")
    ]
    return sorted(files) + ["version.py"]


@functools.lru_cache(maxsize=None)
def generator_fingerprint() -> str:
    """Read once per process, when the cache is first used: the generator's files as loaded."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in generator_files():
        digest.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return digest.hexdigest()


CONTENT_FACTS = re.compile(
    r'^(TEMPLATE_SHA256|__rtcompile_version__|IMPLEMENTS_TRANSFORMERS) = "([^"\\]*)"$', re.MULTILINE
)


def describes(source: str, template_sha256: str) -> bool:
    """Whether generated source declares this template's hash, this compiler's version and the
    interpreter release it implements (read from its text, before anything in it runs)."""
    facts = dict(CONTENT_FACTS.findall(source))
    return (
        facts.get("TEMPLATE_SHA256") == template_sha256
        and facts.get("__rtcompile_version__") == __version__
        and facts.get("IMPLEMENTS_TRANSFORMERS") == INTERPRETER_RELEASE
    )


def default_directory() -> Path:
    """RTCOMPILE_CACHE_DIR, else the platform's user cache directory."""
    configured = os.environ.get("RTCOMPILE_CACHE_DIR")
    if configured:
        return Path(configured)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "rtcompile" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "rtcompile"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rtcompile"


def user_file_mode(directory: bool = False) -> int:
    """The mode a new file (or directory) of this user gets: 0666 (0777) less the umask."""
    umask = None
    try:  # Linux reports it without changing it (os.umask can only read it by setting it)
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next((int(line.split()[1], 8) for line in f if line.startswith("Umask:")), None)
    except OSError:
        pass
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


class FileSystem:
    """The cache's only access to the disk."""

    def ensure_private_dir(self, path: Path) -> None:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise PermissionError(f"{path} belongs to another user")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise PermissionError(f"{path} is writable by other users")

    def read_bytes(self, path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_text(self, path: Path) -> str | None:
        try:
            # A file cut inside a multi-byte character is not valid UTF-8: decode it anyway (it can
            # then only fail the checksum and be rebuilt) rather than raise UnicodeDecodeError.
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: Path, text: str | bytes, mode: int | None = None) -> None:
        """Write through a temporary file in the same directory. The file keeps the temporary
        file's private 0600 unless `mode` is given (the CLI's outputs: `user_file_mode()`)."""
        import tempfile  # (here, not at the top: a cache hit never writes)

        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
        try:
            if mode is not None:
                os.chmod(tmp, mode)
            with os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def entries(self, directory: Path) -> list[Path]:
        """The cache files in `directory`: only names this cache writes, so pointing
        RTCOMPILE_CACHE_DIR at a directory of other Python files never lists (or clears) them."""
        return self._matching(directory, ENTRY_NAME)

    def code_files(self, directory: Path) -> list[Path]:
        """The compiled code kept beside the entries."""
        return self._matching(directory, CODE_NAME)

    def leftovers(self, directory: Path) -> list[Path]:
        """Temporary files of writes that never finished (a killed process; write_atomic removes
        its own on any error it sees)."""
        return self._matching(directory, TEMPORARY_NAME)

    @staticmethod
    def _matching(directory: Path, pattern: re.Pattern) -> list[Path]:
        try:
            return sorted(p for p in directory.iterdir() if pattern.fullmatch(p.name))
        except FileNotFoundError:
            return []

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)


def with_header(key: str, source: str) -> str:
    checksum = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return f"{HEADER_PREFIX}key={key} source-sha256={checksum}\n{source}"


def verified_source(key: str, text: str) -> bool:
    """Whether `text` is a complete cache file written for `key`."""
    header, sep, source = text.partition("\n")
    if not sep or not header.startswith(HEADER_PREFIX):
        return False
    fields = dict(part.split("=", 1) for part in header[len(HEADER_PREFIX) :].split() if "=" in part)
    checksum = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return fields.get("key") == key and fields.get("source-sha256") == checksum


def code_header(key: str, source: str, payload: bytes) -> bytes:
    """The first line of a code file: the entry's key and source it was compiled from, the
    bytecode format (importlib's magic number) and a checksum of the marshalled code."""
    from importlib.util import MAGIC_NUMBER

    fields = {
        "key": key,
        "source-sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
        "python": MAGIC_NUMBER.hex(),
        "code-sha256": hashlib.sha256(payload).hexdigest(),
    }
    return CODE_HEADER_PREFIX + " ".join(f"{k}={v}" for k, v in fields.items()).encode("ascii") + b"\n"


def verified_code(key: str, source: str, data: bytes, filename: str) -> types.CodeType | None:
    """The code in a code file, if it was written for this key and this exact source, by this
    Python, is complete, and names `filename`; else None (the source is compiled instead)."""
    import marshal

    header, sep, payload = data.partition(b"\n")
    if not sep or code_header(key, source, payload) != header + b"\n":
        return None
    try:
        code = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(code, types.CodeType) or code.co_filename != filename:
        return None
    return code


def compile_in_memory(source: str, sha256: str) -> types.CodeType:
    """Compile source that has no file: it is registered in linecache under a unique pseudo-filename,
    so tracebacks and pdb show the generated lines."""
    import linecache

    filename = f"<rtcompile generated {sha256[:16]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


class Cache:
    def __init__(self, directory: Path | None = None, fs: FileSystem | None = None):
        self.directory = Path(directory) if directory is not None else default_directory()
        self.fs = fs or FileSystem()
        self._warned = False
        self._lock = threading.Lock()

    def path_for(self, key: str) -> Path:
        return self.directory / f"tmpl_{key[:32]}.py"

    def code_path_for(self, key: str) -> Path:
        return self.directory / f"tmpl_{key[:32]}.code"

    def load(self, sha256: str, build: Callable[[], str], run: Callable[[types.CodeType], T]) -> T:
        """`run(code)` for the compiled code of the module of the template whose canonical hash is
        `sha256`: from a verified cache entry, else from `build()` (the module's source; it raises for
        an invalid template), stored for the next process. A hit never calls `build`, so it needs
        neither validation nor the generator; an entry whose code fails to run is rebuilt."""
        key = cache_key(sha256)
        path = self.path_for(key)
        try:
            self.fs.ensure_private_dir(self.directory)
            text = self.fs.read_text(path)
        except OSError as e:
            source = build()  # an invalid template raises its TemplateError before any warning
            self._warn(f"cannot use the cache directory {self.directory}: {e}")
            return run(compile_in_memory(source, sha256))
        if text is not None:
            if verified_source(key, text) and describes(text, sha256):
                try:
                    return run(self._code(key, text, path))
                except Exception as e:  # a stale or broken entry: rebuild it, keep going
                    _log_warning("rtcompile: cached parser %s failed to load (%s); rebuilding", path, e)
            else:
                _log_warning("rtcompile: cache entry %s is not a file written for this key; rebuilding", path)
        text = with_header(key, build())
        try:
            self.fs.write_atomic(path, text)
        except OSError as e:
            self._warn(f"cannot write to the cache directory {self.directory}: {e}")
            return run(compile_in_memory(text, sha256))
        return run(self._code(key, text, path))

    def _code(self, key: str, text: str, path: Path) -> types.CodeType:
        """A verified entry's code: its cached code if that is valid for it, else the compiled
        source (then kept beside it for the next process; no harm done if that cannot be written)."""
        filename = str(path)
        code_path = self.code_path_for(key)
        data = self.fs.read_bytes(code_path)
        code = None if data is None else verified_code(key, text, data, filename)
        if code is None:
            import marshal

            code = compile(text, filename, "exec")
            payload = marshal.dumps(code)
            try:
                self.fs.write_atomic(code_path, code_header(key, text, payload) + payload)
            except OSError:
                pass
        return code

    def stats(self) -> tuple[list[Path], int]:
        """The entries, and the bytes they take with their compiled code."""
        entries = self.fs.entries(self.directory)
        return entries, sum(p.stat().st_size for p in entries + self.fs.code_files(self.directory))

    def entry_template(self, path: Path) -> dict | None:
        """The response template an entry was generated from, read from its `TEMPLATE` literal
        (parsed, never executed), or None for a file that holds none."""
        import ast

        text = self.fs.read_text(path)
        try:
            tree = ast.parse(text or "")
        except SyntaxError:
            return None
        for node in tree.body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["TEMPLATE"]:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:  # (NaN and infinities are emitted as float(...) calls)
                    return None
                return value if isinstance(value, dict) else None
        return None

    def clear(self) -> int:
        """Remove every entry, its compiled code and temporary files left by interrupted writes;
        the entry count."""
        entries = self.fs.entries(self.directory)
        for path in entries + self.fs.code_files(self.directory) + self.fs.leftovers(self.directory):
            self.fs.remove(path)
        return len(entries)

    def _warn(self, message: str) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(f"{message}; compiling parsers in memory instead", CacheWarning, stacklevel=4)


def _log_warning(message: str, *args) -> None:
    import logging  # (here, not at the top: importing logging costs milliseconds, and a hit never logs)

    logging.getLogger("rtcompile").warning(message, *args)


_caches: dict[Path, Cache] = {}


def default_cache() -> Cache:
    """The cache for the current RTCOMPILE_CACHE_DIR (one object per directory, so warnings are
    given once per directory)."""
    directory = default_directory()
    cache = _caches.get(directory)
    if cache is None:
        cache = _caches.setdefault(directory, Cache(directory))
    return cache
