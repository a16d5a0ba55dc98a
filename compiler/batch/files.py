"""Files and folders of a job: the format a name stands for, new files with the user's mode, and the
output written beside its place and renamed into it only when the job has finished.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable

from .rows import BatchError

FORMATS = ("jsonl", "parquet", "datasets")


def detect_format(path: Path, explicit: str | None = None, *, must_exist: bool) -> str:
    """The format of an input (`must_exist`) or an output: `explicit` when given, else what the
    name says (a suffix, or a folder holding state.json; an output without a suffix is a datasets
    folder)."""
    if explicit is not None:
        if explicit not in FORMATS:
            raise BatchError(f"unknown format {explicit!r} (one of {', '.join(FORMATS)})")
        return explicit
    name = path.name.lower()
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if path.is_dir() and (path / "state.json").exists():
        return "datasets"
    if must_exist and not path.exists():
        raise BatchError(f"{path}: no such file or directory")
    if path.is_dir() and (path / "dataset_dict.json").exists():
        raise BatchError(f"{path}: a DatasetDict folder; give one split's folder (e.g. {path / 'train'})")
    if not must_exist and "." not in path.name:
        return "datasets"
    raise BatchError(f"{path}: cannot tell the format from the name; use --{'input' if must_exist else 'output'}-format")


def open_new(path: Path, text: bool = False):
    """A new file with the mode any new file of the user gets (0666 less the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    return os.fdopen(fd, "w", encoding="utf-8") if text else os.fdopen(fd, "wb")


class atomic_output:
    """A temporary file (or folder) beside `path`, renamed to it on success and removed on any
    failure, so an interrupted or failed job never leaves a half-written output.

    The temporary's name is an internal detail: an error in creating, writing or renaming it is
    a BatchError naming the output's directory and the output's name instead."""

    def __init__(self, path: Path, directory: bool, replaceable: Callable[[Path], bool] | None = None):
        self.path, self.directory = path, directory
        self.replaceable = replaceable or (lambda folder: (folder / "state.json").exists())

    def __enter__(self) -> Path:
        import secrets

        parent = self.path.parent
        if not parent.is_dir():
            raise BatchError(f"{parent}: {'not a directory' if parent.exists() else 'no such directory'}")
        self.temporary = parent / f".{self.path.name}.{secrets.token_hex(6)}.tmp"
        if self.directory:
            if self.path.exists() and not (self.path.is_dir() and self.replaceable(self.path)):
                raise BatchError(f"{self.path}: exists and is not a folder this job writes; not replacing it")
            from rtcompile.cache import user_file_mode

            try:
                self.temporary.mkdir()
                os.chmod(self.temporary, user_file_mode(directory=True))
            except OSError as e:
                self._remove()
                raise self._output_error(e) from None
        return self.temporary

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                self._commit()
                return
            except BaseException as e:
                self._remove()
                if isinstance(e, OSError):
                    raise self._output_error(e) from None
                raise
        self._remove()
        if isinstance(value, OSError) and self._is_about_the_output(value):
            raise self._output_error(value) from None

    def _is_about_the_output(self, error: OSError) -> bool:
        """Whether an error names the output or its temporary, or is a full disk (an error that
        only writing gives, and which names no file)."""
        names = [Path(name) for name in (error.filename, error.filename2) if isinstance(name, (str, os.PathLike))]
        if not names:
            return error.errno in _FULL_DISK
        return any(name in (self.path, self.temporary) or self.temporary in name.parents for name in names)

    def _output_error(self, error: OSError) -> BatchError:
        directory = self.path.parent if str(self.path.parent) != "." else Path.cwd()
        return BatchError(f"{directory}: cannot write {self.path.name} there: {error.strerror or error}")

    def _commit(self) -> None:
        if self.directory and self.path.exists():
            import shutil

            old = self.path.parent / f".{self.path.name}.old.tmp"
            os.replace(self.path, old)
            os.replace(self.temporary, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.temporary, self.path)

    def _remove(self) -> None:
        import shutil

        if self.temporary.is_dir():
            shutil.rmtree(self.temporary, ignore_errors=True)
        else:
            try:
                os.unlink(self.temporary)
            except OSError:
                pass


_FULL_DISK = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}
