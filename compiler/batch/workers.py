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


def _init_worker(parser: RowParser) -> None:
    global _WORKER
    _WORKER = parser
    parser.module  # load (from the cache the parent filled) before the first batch


def _in_worker(function, task):
    return function(_WORKER, task)


def ordered(parser: RowParser, function, tasks, jobs: int) -> Iterator:
    """function(parser, task) for each task, in order; on `jobs` worker processes when jobs > 1,
    with at most two tasks per worker in flight (so memory does not grow with the input)."""
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


def zip_tasks(tasks, parser, function, jobs):
    """(task, result) pairs in order, computing on workers while the tasks are still read."""
    pending = collections.deque()

    def remembered():
        for task in tasks:
            pending.append(task)
            yield task

    for result in ordered(parser, function, remembered(), jobs):
        yield pending.popleft(), result


def zip_pairs(pairs, parser, function, jobs):
    """Like zip_tasks for (kept, task) pairs: the parent keeps the first, workers get the second."""
    kept = collections.deque()

    def tasks():
        for keep, task in pairs:
            kept.append(keep)
            yield task

    for result in ordered(parser, function, tasks(), jobs):
        yield kept.popleft(), result
