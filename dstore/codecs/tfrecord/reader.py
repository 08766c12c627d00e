"""Reading TFRecord shards: frames walked or found by their index, Examples decoded, the ``tf.data`` parse spec a user can paste."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from glob import escape as glob_escape
from typing import Any

from ... import fs
from ...abc import runs_of
from ...errors import CodecIOError
from ...fs import is_url
from ...model.schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile
from ...sharding.records import pread_spans
from ..example.fields import (
    ExampleRecords,
    FieldEncoding,
    check_manifest_fields,
    read_examples,
    written_encodings,
)
from ..example.infer import ExampleInference
from ..example.tf import parse_snippet
from . import io as rio

_OF_RE = re.compile(r"-(\d+)-of-(\d+)")


class TFRecordReader(ExampleRecords, ShardedDirectoryReader):
    """TFRecord shards: dstore's folders (manifest and field encodings) and files
    written by TensorFlow, TFDS or anyone (fields by inspection of every record)."""

    format_id = "dstore-tfrecord"
    codec_name = "tfrecord"
    sequential_reason = "TFRecord shards are read in order"
    file_pattern = r"\.tfrecords?(-\d+-of-\d+)?(\.gz)?$"
    shard_extension = r"\.tfrecords?"
    compressions = (None, "gzip")  # what the writer's compression option writes

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        super().__init__(path, workers, follow_links)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = check_manifest_fields(manifest, self.schema, where)

    def written_encodings(self, spec: FieldSpec) -> set[str]:
        return written_encodings(spec)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        fields, self.encodings[split], shards = self._scan_split(paths)
        return fields, shards

    def _scan_split(
        self, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], dict[str, FieldEncoding], list[ShardFile]]:
        """Fields inferred from every record of the split (:class:`ExampleInference`)."""
        inference = ExampleInference(paths[0])
        shards = []
        for p in paths:
            with rio.RecordFile(p) as rf:
                while True:
                    index, offset = rf.index, rf.offset
                    rec = rf.next_record()
                    if rec is None:
                        break
                    inference.add(rec, p, index, f"{p}: record {index} at byte {offset}")
                    del rec  # before the next record is read: one large record in memory
                shards.append(ShardFile(p, rf.index, rf.compression))
        fields, encs = inference.result()
        self.notes = [*self.notes, *inference.notes]
        return fields, encs, shards

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[tuple[bytes, str]]:
        """Raw records lo:hi of one shard with their location, CRCs checked."""
        offsets = self.frame_offsets(shard) if lo else None
        with rio.RecordFile(shard.path, shard.compression) as rf:
            if offsets is not None:  # one seek, not a walk over lo frames
                rf.seek_record(lo, offsets, shard.index or "")
            else:
                rf.skip(lo)
            for _ in range(lo, hi):
                where = f"{shard.path}: record {rf.index} at byte {rf.offset}"
                rec = rf.next_record()
                if rec is None:
                    raise CodecIOError(
                        f"{shard.path}: ended after {rf.index} records, expected {shard.records}"
                    )
                yield rec, where
            if hi == shard.records and rf.next_record() is not None:
                raise CodecIOError(f"{shard.path}: more records than the {shard.records} expected")

    def shard_raw_records(
        self, shard: ShardFile, positions: Any, names: Sequence[str] = ()
    ) -> list[tuple[bytes, str]]:
        """Serialized Examples at sorted distinct ``positions`` of one shard, each with
        where it was read: an indexed local shard's frames read where its index puts
        them (close ones in one read, from a file kept open), each checked against its
        entry; a shard without an index (or remote) is walked, run by run."""
        ends = None if fs.is_url(shard.path) else self.frame_offsets(shard)
        if ends is None:
            return [rec for a, b in runs_of(positions) for rec in self.shard_records(shard, a, b)]
        index, pos = shard.index or "", positions.tolist()
        spans = [(int(ends[p]), int(ends[p + 1])) for p in pos]
        frames = pread_spans(self.open_files().fd(shard.path), shard.path, spans)
        return [
            (
                rio.checked_frame(buf, shard.path, p, a, index),
                f"{shard.path}: record {p} at byte {a}",
            )
            for p, (a, _), buf in zip(pos, spans, frames, strict=True)
        ]

    def walk_frames(self, shard: ShardFile) -> list[int]:
        return rio.frame_ends(shard.path)

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """A plain shard is entered mid-way by seeking over record headers (cheap); a
        GZIP or ZLIB shard would have to be decompressed up to there, so it stays whole."""
        if (shard.compression or rio.detect_compression(shard.path)) is None:
            return self.pieces_by_size(shard, target_bytes)
        return 1

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
        raw = self.shard_records(shard, lo, hi)
        yield from read_examples(spec, self.encodings[spec.name], names, raw, hi - lo, rows, pool)
        for _ in raw:  # drain: checks the tail of the shard
            pass

    def tf_compression_types(self, split: str) -> list[str]:
        """TensorFlow's ``compression_type`` of each shard of ``split``: "", "GZIP" or "ZLIB"."""
        shown = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}
        if self.manifest is not None:
            return [shown[self.manifest.get("compression")]] * len(self.shards[split])
        return [shown[s.compression] for s in self.shards[split]]

    def feature_description(self, split: str) -> list[str]:
        """A Python snippet a TensorFlow user pastes to read this split: every line runs as is.

        It defines ``feature_description``, ``decode(record)`` (a dict of the
        split's fields) and ``dataset``, with the compression the files have."""
        lines = parse_snippet(self.schema.splits[split], self.encodings[split])
        paths = [s.path for s in self.shards[split]]
        types = self.tf_compression_types(split)
        if len(set(types)) <= 1:
            lines.append(f"files = {_files_expression(paths)}")
            ctype = types[0] if types else ""
            lines.append(
                f"dataset = tf.data.TFRecordDataset(files, compression_type={ctype!r}).map(decode)"
            )
        else:  # one TFRecordDataset reads one compression: chain one per file, in order
            lines.append(f"files = {paths!r}")
            lines.append(f"compression_types = {types!r}")
            lines.append(
                "dataset = tf.data.TFRecordDataset(files[0], compression_type=compression_types[0])"
            )
            lines.append("for f, c in zip(files[1:], compression_types[1:]):")
            lines.append(
                "    dataset = dataset.concatenate(tf.data.TFRecordDataset(f, compression_type=c))"
            )
            lines.append("dataset = dataset.map(decode)")
        return lines

    def describe(self) -> list[str]:
        lines = []
        for split, shards in self.shards.items():
            comp = "+".join(sorted({t.lower() for t in self.tf_compression_types(split)} - {""}))
            lines.append(f"split {split}: {len(shards)} shard(s)" + (f", {comp}" if comp else ""))
            for name, enc in self.encodings[split].items():
                how = enc.encoding + (f" quality {enc.quality}" if enc.lossy else "")
                lines.append(f"  {name}: feature {enc.feature!r} as {how}")
        first = next((s for s, spec in self.schema.splits.items() if spec.fields), None)
        if first is not None:
            lines.append(f"TensorFlow ({first} split):")
            lines.extend(self.feature_description(first))
        return lines


def _files_expression(paths: list[str]) -> str:
    """``paths`` as Python: a list when short, else a sorted glob that matches exactly them."""
    if len(paths) <= 4 or is_url(paths[0]):
        return repr(paths)
    folder = os.path.dirname(paths[0])
    names = {os.path.basename(p) for p in paths}
    first = os.path.basename(paths[0])
    m = _OF_RE.search(first)
    if m and all(os.path.dirname(p) == folder for p in paths):
        star = "-" + "[0-9]" * len(m.group(1)) + f"-of-{m.group(2)}"
        pattern = glob_escape(first[: m.start()]) + star + glob_escape(first[m.end() :])
        if {f for f in os.listdir(folder or ".") if fnmatch.fnmatchcase(f, pattern)} == names:
            return f"sorted(tf.io.gfile.glob({os.path.join(folder, pattern)!r}))"
    return repr(paths)
