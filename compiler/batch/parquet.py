"""Parquet files: read in record batches of BATCH_ROWS rows, written in row groups that each gather
many batches."""

from __future__ import annotations

from pathlib import Path

from .arrow import pyarrow
from .files import open_new
from .workers import BATCH_ROWS


def read_parquet(path: Path):
    """The file's schema, and its rows as an iterator of record batches."""
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(path)
    return reader.schema_arrow, reader.iter_batches(batch_size=BATCH_ROWS)


def count_rows(path: Path) -> int:
    """The number of rows, from the file's footer."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


class ParquetWriter:
    """Batches gathered into row groups of up to ROW_GROUP_ROWS rows or ROW_GROUP_BYTES bytes
    (one row group per small batch would make the file slow to read)."""

    ROW_GROUP_ROWS = 65_536
    ROW_GROUP_BYTES = 64 << 20

    def __init__(self, path: Path, schema):
        import pyarrow.parquet as pq

        self.schema = schema
        self._sink = open_new(path)
        self._writer = pq.ParquetWriter(self._sink, schema)
        self._pending, self._rows, self._bytes = [], 0, 0

    def write(self, batch) -> None:
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self.ROW_GROUP_ROWS or self._bytes >= self.ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            pa = pyarrow()
            self._writer.write_table(pa.Table.from_batches(self._pending, schema=self.schema), row_group_size=self._rows)
        self._pending, self._rows, self._bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._sink.close()
