"""What Ray Data reads and writes for the parse job (`rtcompile.batch.ray`): JSONL input as its lines,
as written (`JsonLinesDatasource`), and, on object storage, files written by Ray's write tasks with
the local engine's bytes (`JsonLinesFiles`, `ParquetFiles`), each task counting what it wrote.

Imported only by a job on Ray (this module imports Ray).
"""

from __future__ import annotations

import json
import posixpath

import pyarrow as pa
from ray.data.block import BlockAccessor
from ray.data.datasource import BlockBasedFileDatasink, FileBasedDatasource

from .rows import error_kinds
from .workers import BATCH_ROWS, BATCH_TEXT_BYTES

# The input lines of a JSONL file: a 1-based line number, and the line's bytes as written.
INPUT_LINES = pa.schema([("line_number", pa.int64()), ("line", pa.binary())])
# The parsed lines: the output line, its error's kind (null: none), whether its row has the text
# column, the keys of the batch's first object (on that row only; null elsewhere), and why the job
# must stop (a line that already has an added column; the batch is then that one row).
OUTPUT_LINES = pa.schema(
    [("line", pa.binary()), ("kind", pa.string()), ("has_text", pa.bool_()), ("first_keys", pa.string()), ("refusal", pa.string())]
)

_READ_BYTES = 1 << 20


class JsonLinesDatasource(FileBasedDatasource):
    """Each file's non-blank lines with their numbers, in blocks of BATCH_ROWS lines or
    BATCH_TEXT_BYTES bytes: what the local engine reads (`jsonl.jsonl_batches`), so that both
    engines parse and write the same lines, a line that is not JSON included."""

    def _read_stream(self, f, path: str):
        numbers, lines, size = [], [], 0
        for number, line in _numbered_lines(f):
            if not line.strip():
                continue
            numbers.append(number)
            lines.append(line)
            size += len(line)
            if len(lines) >= BATCH_ROWS or size >= BATCH_TEXT_BYTES:
                yield pa.Table.from_arrays([pa.array(numbers, pa.int64()), pa.array(lines, pa.binary())], schema=INPUT_LINES)
                numbers, lines, size = [], [], 0
        if lines:
            yield pa.Table.from_arrays([pa.array(numbers, pa.int64()), pa.array(lines, pa.binary())], schema=INPUT_LINES)


def _numbered_lines(f):
    """(number, line) for each line of a binary stream, its b"\\n" kept, as iterating over a file
    opened in binary mode gives them."""
    rest, number = b"", 0
    while True:
        chunk = f.read(_READ_BYTES)
        if not chunk:
            break
        pieces = (rest + chunk).split(b"\n")
        rest = pieces.pop()
        for piece in pieces:
            number += 1
            yield number, piece + b"\n"
    if rest:
        yield number + 1, rest


def tally_lines(table) -> dict:
    """What a table of OUTPUT_LINES adds to the job's counts."""
    keys = _first_value(table.column("first_keys"))
    kinds: dict = {}
    for kind in table.column("kind").to_pylist():
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "rows": table.num_rows,
        "kinds": kinds,
        "with_text": sum(table.column("has_text").to_pylist()),
        "first_keys": None if keys is None else json.loads(keys),
        "refusal": _first_value(table.column("refusal")),
    }


def _first_value(column):
    return next((value for value in column.to_pylist() if value is not None), None)


def tally_parsed(table, error_column: str) -> dict:
    """What a parsed Arrow table (the input's columns and the two added ones) adds to the counts."""
    kinds = error_kinds(table.column(error_column).to_pylist())
    return {"rows": table.num_rows, "kinds": kinds, "with_text": table.num_rows, "first_keys": None, "refusal": None}


class _CountingFiles(BlockBasedFileDatasink):
    """One file per write task, named `{dataset_uuid}_{write_uuid}_{task}.{format}`; each task
    returns its counts, which `on_write_complete` (on the driver) gathers in task order."""

    def __init__(self, path: str, dataset_uuid: str, file_format: str) -> None:
        super().__init__(path, dataset_uuid=dataset_uuid, file_format=file_format)
        self.tallies: list = []

    def write(self, blocks, ctx):
        blocks = list(blocks)
        super().write(blocks, ctx)
        return ctx.task_idx, [self.tally(BlockAccessor.for_block(block).to_arrow()) for block in blocks]

    def on_write_complete(self, write_result) -> None:
        super().on_write_complete(write_result)
        returns = sorted((value for value in write_result.write_returns if value is not None), key=lambda value: value[0])
        self.tallies = [tally for _, tallies in returns for tally in tallies]

    def remove_written(self) -> None:
        """Remove what this job wrote (it failed after writing): its files, and the folder if the
        job created it."""
        from pyarrow.fs import FileSelector

        for info in self.filesystem.get_file_info(FileSelector(self.path, allow_not_found=True)):
            if posixpath.basename(info.path).startswith(f"{self.dataset_uuid}_"):
                self.filesystem.delete_file(info.path)
        if self.has_created_dir:
            self.filesystem.delete_dir(self.path)


class JsonLinesFiles(_CountingFiles):
    """JSON lines files of OUTPUT_LINES blocks: the lines, as the local engine writes them."""

    def __init__(self, path: str, dataset_uuid: str) -> None:
        super().__init__(path, dataset_uuid, "jsonl")

    def write_block_to_file(self, block, file) -> None:
        file.write(b"".join(block.to_arrow().column("line").to_pylist()))

    def tally(self, table) -> dict:
        return tally_lines(table)


class ParquetFiles(_CountingFiles):
    """Parquet files of parsed blocks, in the output schema the local engine writes."""

    def __init__(self, path: str, dataset_uuid: str, schema, error_column: str) -> None:
        super().__init__(path, dataset_uuid, "parquet")
        self.schema, self.error_column = schema, error_column

    def write_block_to_file(self, block, file) -> None:
        import pyarrow.parquet as pq

        pq.write_table(block.to_arrow().cast(self.schema), file)

    def tally(self, table) -> dict:
        return tally_parsed(table, self.error_column)
