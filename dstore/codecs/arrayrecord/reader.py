"""Reading ArrayRecord shards of ``tf.train.Example``: dstore's folders and anyone's files.

The container (:class:`~dstore.sharding.ShardedDirectoryReader`) owns the
manifest, shard lists, ``-of-N`` completeness and reads across shards; this
reader answers with ``ArrayRecordReader.read(lo, hi)`` for any record range
(random access: ``ds[i]`` reads one record), decodes with TFRecord's Example
field encodings, and infers the fields of files dstore did not write with
TFRecord's inference (:class:`~dstore.codecs.example.infer.ExampleInference`).

The library checks Riegeli's block and chunk hashes as it reads (a damaged
shard is an error naming the file and records); dstore's manifest adds a
sha256 per shard and per-field checksums for its own folders.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any

from ...errors import CodecIOError
from ...model.schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile
from ...sharding.native import ForkGuard
from ..example.fields import FieldEncoding, read_examples
from ..example.infer import ExampleShards
from .writer import FORMAT_ID

__all__ = ["ArrayRecordDatasetReader"]

#: records asked of the library at once: bounds memory, amortises the call
_BLOCK = 256
#: random access (what ArrayRecordDataSource opens with): no 16 MiB readahead per read
_READ_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
#: array_record's reader in a process forked after its parent used it: one clear error
_FORK_GUARD = ForkGuard("array_record")


class ArrayRecordDatasetReader(ExampleShards, ShardedDirectoryReader):
    """ArrayRecord shards: dstore's folders (manifest, field encodings) and files of
    ``tf.train.Example`` written by TFDS, Grain or anyone (fields by inspection)."""

    format_id = FORMAT_ID
    codec_name = "arrayrecord"
    sequential_reason = None  # any record is read alone
    file_pattern = r"\.array_?record(-\d+-of-\d+)?$"
    shard_extension = r"\.array_?record"

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        self._files: dict[str, Any] = {}  # open library readers by path
        self._counted: set[str] = set()  # shards whose record count was checked
        self._lock = threading.Lock()
        super().__init__(path, workers, follow_links)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        counts = {p: self._open(p).num_records() for p in paths}
        fields = self.infer_fields(split, paths, lambda p: self._records(p, 0, counts[p]))
        return fields, [ShardFile(p, n) for p, n in counts.items()]

    def _open(self, path: str) -> Any:
        """The library's reader of ``path``, opened once; an unreadable file is one line."""
        from array_record.python.array_record_module import ArrayRecordReader

        _FORK_GUARD.check(path)
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

    def _read_each(self, reader: Any, positions: Iterable[int]) -> list[bytes]:
        """The records at ``positions``, asked of the library one at a time: its read of a
        list of positions costs more CPU per record than a read of each, its read of a
        range less (``benchmarks/bench_arrayrecord_calls.py``)."""
        with self._lock:
            return [reader.read([p])[0] for p in positions]

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
        self.check_count(shard, self._open(shard.path).num_records())
        raw = self._records(shard.path, lo, hi)
        yield from read_examples(spec, self.encodings[spec.name], names, raw, hi - lo, rows, pool)

    def shard_raw_records(
        self, shard: ShardFile, positions: Any, names: Sequence[str] = ()
    ) -> list[tuple[bytes, str]]:
        """Serialized Examples at ``positions`` of one shard: one call of the library."""
        reader = self._open(shard.path)
        if shard.path not in self._counted:
            self.check_count(shard, reader.num_records())
            self._counted.add(shard.path)
        pos = positions.tolist()
        try:
            block = self._read_each(reader, pos)
        except (IndexError, RuntimeError, ValueError) as e:
            raise CodecIOError(f"{shard.path}: records {pos[0]}..{pos[-1]}: {e}") from None
        return [(rec, f"{shard.path}: record {i}") for i, rec in zip(pos, block, strict=True)]

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """Any record is entered directly: a shard is cut by its size."""
        return self.pieces_by_size(shard, target_bytes)

    def shards_note(self, split: str) -> str:
        shards = self.shards[split]
        return f" ({self._open(shards[0].path).writer_options_string() if shards else ''})"

    def source_lines(self, paths: list[str]) -> list[str]:
        return [
            "from array_record.python.array_record_data_source import ArrayRecordDataSource",
            f"source = ArrayRecordDataSource({paths!r})",
            "example = decode(source[0])",
        ]

    def close(self) -> None:
        with self._lock:
            for reader in self._files.values():
                reader.close()
            self._files.clear()
