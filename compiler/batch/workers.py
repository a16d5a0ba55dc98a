"""Worker processes: each batch's task run on a pool of spawned processes, the results handed back
in input order, with a bounded number of batches in flight.

A worker receives the `RowParser` (its template and options: plain data) once, when it starts, and
loads the compiled parser from the cache the parent filled; no code object is ever pickled.
"""

from __future__ import annotations

import collections
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
    parent keeps the first item (what it needs to write the result), a worker gets the second.

    With jobs > 1, the tasks run on `jobs` spawned worker processes while the pairs are still being
    read, with at most two tasks per worker in flight, so memory does not grow with the input;
    with jobs == 1, in this process."""
    kept = collections.deque()

    def tasks():
        for keep, task in pairs:
            kept.append(keep)
            yield task

    for result in _results_in_order(parser, function, tasks(), jobs):
        yield kept.popleft(), result


def _results_in_order(parser: RowParser, function, tasks, jobs: int) -> Iterator:
    if jobs <= 1:
        for task in tasks:
            yield function(parser, task)
        return
    import multiprocessing

    # spawn: workers start clean and load the parser from its template, on every platform alike.
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(jobs, initializer=_init_worker, initargs=(parser,))
    try:
        pending = collections.deque()
        for task in tasks:
            pending.append(pool.apply_async(_in_worker, (function, task)))
            if len(pending) >= 2 * jobs:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()
