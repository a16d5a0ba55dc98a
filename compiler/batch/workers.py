"""Worker processes: each batch's task run on a pool of spawned processes, the results handed back
in input order, with a bounded number of batches in flight.

The job's own process parses too: `jobs` processes are this one and `jobs - 1` workers, which are
spawned only when the input has more than one batch. A worker receives the `RowParser` (its
template and options: plain data) once, when it starts, and loads the compiled parser from the
cache the parent filled; no code object is ever pickled.
"""

from __future__ import annotations

import collections
import itertools
from typing import Iterator

from .rows import RowParser

# Rows per batch handed to a worker, and the most text one batch may hold: what bounds memory,
# together with the number of batches in flight (two per worker).
BATCH_ROWS = 512
BATCH_TEXT_BYTES = 16 << 20

_WORKER: RowParser | None = None


def check_jobs(jobs: int | None, name: str = "jobs") -> None:
    """Refuse a number of worker processes below one (None: the caller's default)."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"{name} must be at least 1, not {jobs}")


def _init_worker(parser: RowParser) -> None:
    global _WORKER
    _WORKER = parser
    parser.module  # load (from the cache the parent filled) before the first batch


def _in_worker(function, task):
    return function(_WORKER, task)


def run_in_order(parser: RowParser, function, pairs, jobs: int) -> Iterator[tuple]:
    """For each `(kept, task)` pair, `(kept, function(parser, task))`, in the pairs' order: the
    caller keeps the first item (what it needs to write the result), the task goes to a worker.

    `jobs` processes parse: this one and `jobs - 1` spawned workers, which start only once a
    second task exists (an input of one batch never pays a worker's start-up). The tasks are
    handed out while the pairs are still being read, at most two per process in flight, so memory
    does not grow with the input."""
    kept = collections.deque()

    def tasks():
        for keep, task in pairs:
            kept.append(keep)
            yield task

    for result in _results_in_order(parser, function, tasks(), jobs):
        yield kept.popleft(), result


class _InThisProcess:
    """A task this process runs itself, when its result is next in order (the workers meanwhile
    run the tasks queued behind it)."""

    def __init__(self, function, parser: RowParser, task) -> None:
        self.function, self.parser, self.task = function, parser, task

    def get(self):
        return self.function(self.parser, self.task)


def _results_in_order(parser: RowParser, function, tasks, jobs: int) -> Iterator:
    tasks = iter(tasks)
    first = next(tasks, _NO_TASK)
    second = next(tasks, _NO_TASK) if first is not _NO_TASK else _NO_TASK
    queued = [task for task in (first, second) if task is not _NO_TASK]
    if jobs <= 1 or second is _NO_TASK:
        for task in itertools.chain(queued, tasks):
            yield function(parser, task)
        return
    import multiprocessing

    # spawn: workers start clean and load the parser from its template, on every platform alike.
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(jobs - 1, initializer=_init_worker, initargs=(parser,))
    try:
        pending = collections.deque()
        for index, task in enumerate(itertools.chain(queued, tasks)):
            # Every jobs-th task is this process's own, the first among them: it is parsed here
            # while the workers start.
            if index % jobs == 0:
                pending.append(_InThisProcess(function, parser, task))
            else:
                pending.append(pool.apply_async(_in_worker, (function, task)))
            if len(pending) >= 2 * jobs:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


_NO_TASK = object()
