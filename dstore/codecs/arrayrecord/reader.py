"""Reading ArrayRecord shards of ``tf.train.Example``: dstore's folders and anyone's files.

The container (:class:`~dstore.sharding.ShardedDirectoryReader`) owns the
manifest, shard lists, ``-of-N`` completeness and reads across shards; this
reader answers with ``ArrayRecordReader.read(lo, hi)`` for any record range
(random access: ``ds[i]`` reads one record), decodes with TFRecord's Example
field encodings, and infers the fields of files dstore did not write with
TFRecord's inference (:class:`~dstore.codecs._example_infer.ExampleInference`).

The library checks Riegeli's block and chunk hashes as it reads (a damaged
shard is an error naming the file and records); dstore's manifest adds a
sha256 per shard and per-field checksums for its own folders.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

from ...errors import CodecIOError
from ...schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile
from .._example_fields import FieldEncoding, check_manifest_fields, read_examples
from .._example_infer import ExampleInference
from .._example_tf import parse_snippet
from .writer import FORMAT_ID

__all__ = ["ArrayRecordDatasetReader"]

#: records asked of the library at once: bounds memory, amortises the call
_BLOCK = 256
#: random access (what ArrayRecordDataSource opens with): no 16 MiB readahead per read
#: the process that first used array_record's reader (its thread pool lives there)
_LIBRARY_PID: int | None = None
_READ_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


class ArrayRecordDatasetReader(ShardedDirectoryReader):
    """ArrayRecord shards: dstore's folders (manifest, field encodings) and files of
    ``tf.train.Example`` written by TFDS, Grain or anyone (fields by inspection)."""

    format_id = FORMAT_ID
    codec_name = "arrayrecord"
    sequential_reason = None  # any record is read alone
    file_pattern = r"\.array_?record(-\d+-of-\d+)?$"
    shard_extension = r"\.array_?record"

    def __init__(self, path: str, workers: int = 0) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        self._files: dict[str, Any] = {}  # open library readers by path
        self._lock = threading.Lock()
        super().__init__(path, workers)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = check_manifest_fields(manifest, self.schema, where)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        inference = ExampleInference(paths[0])
        shards = []
        for p in paths:
            n = self._open(p).num_records()
            for i, (rec, where) in enumerate(self._records(p, 0, n)):
                inference.add(rec, p, i, where)
            shards.append(ShardFile(p, n))
        fields, self.encodings[split] = inference.result()
        self.notes = [*self.notes, *inference.notes]
        return fields, shards

    def _open(self, path: str) -> Any:
        """The library's reader of ``path``, opened once; an unreadable file is one line."""
        from array_record.python.array_record_module import ArrayRecordReader

        global _LIBRARY_PID  # noqa: PLW0603 - one value per process, read after a fork
        if _LIBRARY_PID is not None and os.getpid() != _LIBRARY_PID:
            raise CodecIOError(
                f"{path}: this process was forked after array_record was used in its parent "
                "(a DataLoader worker started with 'fork'); array_record's C++ thread pool does "
                "not survive fork and would crash or hang here: pass "
                "multiprocessing_context='spawn' (or 'forkserver') to the DataLoader"
            )
        _LIBRARY_PID = os.getpid()
        with self._lock:
            if path not in self._files:
                if not os.path.isfile(path):
                    raise CodecIOError(f"{path}: not a file")
                reader = ArrayRecordReader(path, _READ_OPTIONS)
                if not reader.ok():
                    raise CodecIOError(f"{path}: not an ArrayRecord file (or truncated)")
                self._files[path] = reader
            return self._files[path]

    def _records(self, path: str, lo: int, hi: int) -> Iterator[tuple[bytes, str]]:
        """Records ``lo:hi`` of one file with where each was read, ``_BLOCK`` at a time."""
        reader = self._open(path)
        for a in range(lo, hi, _BLOCK):
            b = min(hi, a + _BLOCK)
            try:
                with self._lock:
                    block = reader.read(a, b)
            except (IndexError, RuntimeError, ValueError) as e:
                raise CodecIOError(f"{path}: records {a}:{b}: {e}") from None
            for i, rec in enumerate(block, a):
                yield rec, f"{path}: record {i}"

    def read_shard(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        if (n := self._open(shard.path).num_records()) != shard.records:
            raise CodecIOError(
                f"{shard.path}: split {spec.name!r}: holds {n} records, expected {shard.records}"
            )
        raw = self._records(shard.path, lo, hi)
        yield from read_examples(spec, self.encodings[spec.name], names, raw, hi - lo, rows, pool)

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """Any record is entered directly: a shard is cut by its size."""
        return self.pieces_by_size(shard, target_bytes)

    def describe(self) -> list[str]:
        lines = []
        for split, shards in self.shards.items():
            opts = self._open(shards[0].path).writer_options_string() if shards else ""
            lines.append(f"split {split}: {len(shards)} shard(s) ({opts})")
            for name, enc in self.encodings[split].items():
                how = enc.encoding + (f" quality {enc.quality}" if enc.lossy else "")
                lines.append(f"  {name}: feature {enc.feature!r} as {how}")
        for split, spec in self.schema.splits.items():
            if spec.fields and self.shards[split]:
                lines.append(f"TensorFlow ({split} split):")
                lines.extend(self.tensorflow_snippet(split))
                break
        return lines

    def tensorflow_snippet(self, split: str) -> list[str]:
        """Python that reads ``split`` with ArrayRecordDataSource and parses each record
        with TensorFlow; every line runs as is."""
        paths = [s.path for s in self.shards[split]]
        return [
            *parse_snippet(self.schema.splits[split], self.encodings[split]),
            "from array_record.python.array_record_data_source import ArrayRecordDataSource",
            f"source = ArrayRecordDataSource({paths!r})",
            "example = decode(source[0])",
        ]

    def close(self) -> None:
        with self._lock:
            for reader in self._files.values():
                reader.close()
            self._files.clear()
