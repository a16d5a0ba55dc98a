"""Parse datasets of finished generations: JSONL, Parquet and `datasets` folders, on every core.

    python -m rtcompile parse rollouts.jsonl -o parsed.jsonl --template qwen3
    python -m rtcompile parse evals.parquet -o parsed.parquet --template path/to/tokenizer_dir

    table = parse_table(table, "qwen3")                      # a pyarrow Table
    dataset = parse_dataset(dataset, "qwen3", num_proc=8)    # a datasets.Dataset (Dataset.map)

Each row's generation (`text_column`), prompt (`prefix_column`) and tools (`tools_column`: a
list, or a JSON string of one) go through the compiled parser; the output keeps every input
column, in the input's order of rows, and adds `message` (the parsed message: a JSON object in
JSONL, a JSON string in Arrow formats) and `error` (null, or a record of what went wrong:
`{"kind", "column", "exception", "detail"}`). A bad row never stops the job (except under
`errors="strict"`) and never disappears: it gets an error record on its own row.

Errors modes:
* "default": the message is exactly the interpreter's strict `parse_response` wherever that
  succeeds; where it raises, the row carries the error and what `errors="keep"` recovers.
* "keep": keep semantics throughout (a field written twice is joined, which the interpreter
  does not do); rows whose regions failed carry a "region" error pointing at
  `message.rtcompile_parse_errors`.
* "strict": the first error stops the job, naming its row (`RowError`).

Error kinds: `parse` (the parser raised; `exception` names the class), `region` (keep mode: a
region failed), `missing` (the column is missing or null), `type` (not a string; tools not a
list), `tools_json` (tools that are not valid JSON), `invalid_line` (a JSONL line that is not an
object, kept whole in the record's `line`), and `prefix_without_anchor`. The last is a note, not a
failure to parse: a prompt without the template's start anchor is parsed as the interpreter
parses it (the whole prompt as the assistant's text, followed by the generation), the row carries
that message, and its error record says the anchor was missing; where that parse fails, the row
carries the parse's own record (`parse`, or `region` in keep mode) with the same note at the end
of its detail. Both count as rows with an error, and stop the job under "strict". This holds in
every format and engine alike (it is decided per row, by `RowParser`).

A text column that no row has at all is a mistake in the options, not a dataset of bad rows: the
job stops with one line naming the column, and writes nothing (Arrow inputs are checked against
their schema before anything is parsed; a JSONL input when it has been read through, before its
output would be renamed into place). A row without the column, among rows that have it, gets a
`missing` error record.

Input is read and output written in batches, so memory does not grow with the input, and the
output is written to a temporary file (or folder) beside it and renamed into place only when
the job has finished: an error never leaves a half-written output. Worker processes receive the
response template (plain data) and compile or load the parser from the cache themselves; no code
object is ever pickled. This package depends on the compiler's public API and the runtime, never
the other way round; pyarrow (Parquet, datasets folders, tables) and tqdm (the progress bar) are
optional: `pip install 'rtcompile[batch]'`, and imported only by the functions that need them (a
JSONL job imports neither, unless it draws a progress bar; the package's names below are
imported on first use).

The modules, one per concern:

* `rows`: one row's inputs (`Columns`), its parsing (`RowParser`, the same in every engine) and
  its error record; `BatchError` and `RowError`.
* `workers`: the job's processes (this one, and spawned workers from a second batch on), results
  in input order, batch sizes.
* `jsonl`: JSONL input read in batches of lines, and the writer of JSON lines.
* `arrow`: Arrow record batches parsed and given their two columns; `parse_table`, `parse_dataset`.
* `parquet`: Parquet files read in batches and written in row groups.
* `datasets_folder`: `save_to_disk` folders read and written without the datasets library.
* `files`: formats from names, new files with the user's mode, the output renamed into place.
* `job`: `parse_file`, the `parse` command's job on files, and its `Summary`.
* `ray`: `parse_with_ray`, the same job on Ray Data, writing what the local engine writes.
* `ray_io`: what Ray reads and writes for it (JSONL as its lines; files on object storage).
* `cli`: `python -m rtcompile parse`, its arguments and one-line errors.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public names by module, imported on first use: a worker process (which imports `workers`) and a
# JSONL job load only the modules they run, never the Arrow, Parquet or Ray code.
_EXPORTS = {
    "parse_dataset": "arrow",
    "parse_table": "arrow",
    "FORMATS": "files",
    "Summary": "job",
    "parse_file": "job",
    "parse_with_ray": "ray",
    "DEFAULT_PREFIX_COLUMN": "rows",
    "DEFAULT_TEXT_COLUMN": "rows",
    "DEFAULT_TOOLS_COLUMN": "rows",
    "ERROR_FIELDS": "rows",
    "ERRORS_MODES": "rows",
    "KEEP_ERRORS_KEY": "rows",
    "BatchError": "rows",
    "Columns": "rows",
    "RowError": "rows",
    "RowParser": "rows",
    "BATCH_ROWS": "workers",
    "BATCH_TEXT_BYTES": "workers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
