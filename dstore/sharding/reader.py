"""Reading a sharded directory: one reader for every format written as shards.

:class:`ShardedDirectoryReader` owns everything about a folder of shards that
does not depend on how a record is encoded:

- the manifest (``dstore.json``): schema, shard list, counts, compression,
  checked once when opened (:func:`~dstore.sharding.manifest.load_manifest`);
- one shard named inside such a folder (read as its own split, typed by the manifest);
- files dstore did not write: a folder, a glob or one file, grouped into splits by
  name, ``-i-of-N`` sets checked for completeness;
- reading records ``start:stop`` across shard boundaries, or at any positions
  (:mod:`~dstore.sharding.records`), record ranges for training workers, integrity
  checks against the manifest.

A format subclasses it and answers three questions only:

- :meth:`~ShardedDirectoryReader.read_shard`: records ``lo:hi`` of one shard, decoded,
  as batches (the default pulls :meth:`~ShardedDirectoryReader.shard_records` and decodes
  groups with :meth:`~ShardedDirectoryReader.decode_records` on the worker threads);
- :meth:`~ShardedDirectoryReader.load_manifest_head`: its own manifest keys;
- :meth:`~ShardedDirectoryReader.scan_split`: the fields of files it did not write.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from abc import abstractmethod
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

import numpy as np

from .. import fs
from ..abc import RANGE_BYTES, Reader, even_ranges
from ..errors import CodecIOError
from ..model import column_len, concat_columns
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import (
    DEFAULT_SPLIT,
    KNOWN_SPLITS,
    Batch,
    FieldSpec,
    Schema,
    SerializedBatch,
    SplitSpec,
    slice_batch,
)
from ..parallel import default_workers
from .cache import ShardCache
from .index import INDEX_SUFFIX, read_index
from .manifest import MANIFEST, check_compression, check_encodings, check_shards, load_manifest
from .records import IndexedReads

__all__ = ["ShardFile", "ShardedDirectoryReader", "check_complete", "group_ranges"]

#: records per group handed to a decoding thread
DECODE_GROUP = 16

_OF_RE = re.compile(r"-(\d+)-of-(\d+)")
_OURS_RE = re.compile(r"^(?P<split>.+?)-\d+-of-\d+")


@dataclass(frozen=True)
class ShardFile:
    """One shard: where it is, how many records it holds, how it is compressed."""

    path: str
    records: int
    #: ``"gzip"``/``"zlib"`` when the whole shard is one compressed stream
    compression: str | None = None
    #: its record index (``<shard>.idx``, :mod:`dstore.sharding.index`), if it has one
    index: str | None = None
    #: its size and sha256 as the manifest lists them (None: no manifest)
    size: int | None = None
    sha256: str | None = None


def check_complete(split: str, paths: Sequence[str]) -> None:
    """Shards named ``-i-of-N`` must all be there: a partial set must not look complete."""
    numbered = [
        (int(m.group(1)), int(m.group(2)))
        for p in paths
        if (m := _OF_RE.search(os.path.basename(p)))
    ]
    if not numbered:
        return
    totals = {n for _, n in numbered}
    have = {i for i, _ in numbered}
    total = max(totals)
    missing = [i for i in range(total) if i not in have]
    if len(totals) > 1 or missing:
        shown = ", ".join(f"{i:05d}" for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CodecIOError(
            f"{os.path.dirname(paths[0]) or '.'}: split {split!r} is incomplete: "
            f"{len(have)} of {total} shards present" + (f" (missing {shown})" if missing else "")
        )


def _parent(path: str) -> str:
    return (path.rsplit("/", 1)[0] if fs.is_url(path) else os.path.dirname(path)) or "."


_BRACE_RE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def brace_files(path: str) -> list[str] | None:
    """The files a ``{000000..000009}`` brace pattern names (the shard URLs of WebDataset
    and tf.data), each of which must exist; None for a path without one."""
    if not _BRACE_RE.search(path):
        return None
    pieces = _BRACE_RE.split(path)  # text, lo, hi, text, lo, hi, ..., text
    ranges = [
        [f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        for lo, hi in zip(pieces[1::3], pieces[2::3], strict=True)
    ]
    files = []
    for combo in itertools.product(*ranges):
        parts = [pieces[0]]
        for value, text in zip(combo, pieces[3::3], strict=True):
            parts += [value, text]
        files.append("".join(parts))
    missing = [f for f in files if not fs.exists(f)]
    if missing or not files:
        raise CodecIOError(f"{path}: {missing[0] if missing else 'no file'} does not exist")
    return files


class ShardedDirectoryReader(IndexedReads, Reader):
    """A dataset stored as shard files, with or without dstore's manifest.

    Subclasses set :attr:`format_id` (the manifest's ``format``),
    :attr:`codec_name` and :attr:`file_pattern`, and implement
    :meth:`read_shard` (or :meth:`shard_records` + :meth:`decode_records`),
    :meth:`load_manifest_head` and :meth:`scan_split`."""

    #: the manifest's ``format`` value this reader reads (``dstore-tfrecord``)
    format_id: ClassVar[str]
    #: the codec's name, which starts messages
    codec_name: ClassVar[str] = "sharded"
    #: regex on a file name: the files of this format in a folder dstore did not write
    file_pattern: ClassVar[str] = r"$^"
    #: regex of the extension a shard's name carries (``\.tfrecords?``), when named as dstore
    #: (``train-00000-of-00004<ext>``) or TFDS (``mnist-train<ext>-00000-of-00004``) do;
    #: a trailing ``.gz`` may follow either
    shard_extension: ClassVar[str | None] = None
    #: the manifest's ``compression`` values this format reads (whole-shard streams)
    compressions: ClassVar[tuple[str | None, ...]] = (None,)

    def __init__(self, path: str, workers: int = 0) -> None:
        self.path = path
        self.workers = workers or default_workers()
        #: the manifest when dstore wrote the folder, else None (read by inspection)
        self.manifest: dict[str, Any] | None = None
        self.root = path  # the folder shard names in a manifest are relative to
        self.shards: dict[str, list[ShardFile]] = {}
        self._offsets: dict[str, np.ndarray] = {}
        #: local copies of remote shards (``to_torch(url, cache_dir=...)``), if set
        self.shard_cache: ShardCache | None = None
        manifest_path = fs.join(path, MANIFEST)
        if fs.isdir(path) and fs.exists(manifest_path):
            self._open_manifest(manifest_path)
        elif not self._open_listed_shard(path):
            files = self.find_files(path)
            # one file named by the user is what they asked for, not an incomplete set
            self._inspect(files, whole_sets=files != [path])
        if self.sequential_reason and self.indexed():
            self.sequential_reason = None  # every record is one seek away
        elif self.sequential_reason and not any(
            s.compression for v in self.shards.values() for s in v
        ):
            self.sequential_reason += " until 'dstore index' writes their record indexes"

    # ------------------------------------------------------------ format hooks

    #: a field's stored encoding, read by :meth:`load_manifest_head` with its
    #: ``from_json`` from each entry of the manifest's ``fields`` (None: the format reads them)
    field_encoding: ClassVar[Any] = None

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        """Read the format's own manifest keys (field encodings, options) after
        ``self.schema`` is set; raise :class:`CodecIOError` naming ``where`` if they
        disagree with the schema. The default reads ``fields`` into ``self.encodings``
        (split -> field -> :attr:`field_encoding`), one per field of the schema."""
        try:
            self.encodings = {
                split: {name: self.field_encoding.from_json(e) for name, e in fields.items()}
                for split, fields in manifest["fields"].items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CodecIOError(f"{where}: unreadable manifest: {e}") from None
        for split, spec in self.schema.splits.items():
            if set(self.encodings.get(split, {})) != set(spec.fields):
                raise CodecIOError(f"{where}: split {split!r}: fields disagree with the schema")

    def written_encodings(self, spec: FieldSpec) -> Collection[str] | None:
        """Every encoding this format's writer stores a field of ``spec``'s kind as,
        whatever its options (checked against the manifest); None: the format does not say."""
        return None

    @abstractmethod
    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        """The fields of a split of files dstore did not write (by inspection) and
        its shards with their record counts."""

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
        """Records ``lo:hi`` of ``shard`` decoded, in batches of at most ``rows``.

        The default pulls the stored records with :meth:`shard_records` and decodes
        groups of :data:`DECODE_GROUP` on ``pool`` with :meth:`decode_records`."""
        records = self.shard_records(shard, lo, hi)
        pos = lo
        while pos < hi:
            n = min(rows, hi - pos)
            group = list(islice(records, n))
            if len(group) < n:
                raise CodecIOError(
                    f"{shard.path}: ended after {pos + len(group)} records, expected {shard.records}"
                )
            parts = list(
                pool.map(
                    lambda g: self.decode_records(spec, names, g),
                    [group[i : i + DECODE_GROUP] for i in range(0, n, DECODE_GROUP)],
                )
            )
            yield {
                name: concat_columns(spec.fields[name].kind, [p[name] for p in parts])
                for name in names
            }
            pos += n
        for _ in records:  # drain: the format checks the shard's tail there
            pass

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[Any]:
        """The stored records ``lo:hi`` of ``shard``, one item each (bytes, a tar
        sample...), checked as they are read (CRCs, lengths)."""
        raise NotImplementedError(f"{self.codec_name}: implement shard_records or read_shard")

    def decode_records(self, spec: SplitSpec, names: list[str], records: list[Any]) -> Batch:
        """Fields ``names`` of stored records, as a batch (runs on a worker thread)."""
        raise NotImplementedError(f"{self.codec_name}: implement decode_records or read_shard")

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """How many record ranges ``shard`` may be cut into for training workers: 1
        unless entering it mid-way is cheap (override where it is)."""
        return 1

    def split_of(self, filename: str) -> str:
        """The split a file dstore did not write belongs to, from its name:
        ``train-00000-of-00004.x`` -> ``train``, ``test.x`` -> ``test``, else the
        default split."""
        ext = self.shard_extension
        if ext is None:
            m = _OURS_RE.match(filename)
            if m and re.fullmatch(r"[A-Za-z0-9_]+", m.group("split")):
                return m.group("split")
            stem = filename.split(".", 1)[0]
            return stem if stem in KNOWN_SPLITS else DEFAULT_SPLIT
        split = r"(?P<split>[A-Za-z0-9_]+)"
        for rx in (
            rf"^{split}-\d+-of-\d+{ext}(?:\.gz)?$",
            rf"^(?:.*-)?{split}{ext}-\d+-of-\d+(?:\.gz)?$",
        ):
            if m := re.match(rx, filename):
                return m.group("split")
        stem = re.sub(rf"{ext}(\.gz)?$", "", filename)
        return stem if stem in KNOWN_SPLITS else DEFAULT_SPLIT

    # ------------------------------------------------------------ opening

    def _open_manifest(self, manifest_path: str) -> None:
        m = load_manifest(manifest_path)
        comp = check_compression(m, self.compressions, self.codec_name, manifest_path)
        try:
            self.schema = Schema.from_json(m["schema"])
            self.shards = {
                split: [
                    ShardFile(
                        fs.join(self.root, s["file"]),
                        int(s["records"]),
                        comp,
                        fs.join(self.root, s["index"]["file"]) if "index" in s else None,
                        s.get("bytes"),
                        s.get("sha256"),
                    )
                    for s in info["shards"]
                ]
                for split, info in m["splits"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CodecIOError(f"{manifest_path}: unreadable manifest: {e}") from None
        if set(self.shards) != set(self.schema.splits):
            raise CodecIOError(
                f"{manifest_path}: splits of the schema, fields and shards disagree (corrupt manifest)"
            )
        for split, spec in self.schema.splits.items():
            if sum(s.records for s in self.shards[split]) != spec.count:
                raise CodecIOError(f"{manifest_path}: split {split!r}: shard counts do not add up")
        self.load_manifest_head(m, manifest_path)
        table = getattr(self, "encodings", {})
        check_encodings(self.schema, table, self.written_encodings, self.codec_name, manifest_path)
        self.manifest = m

    def _open_listed_shard(self, path: str) -> bool:
        """One shard named inside a dstore folder: that file's records, typed by the manifest.

        False (read it by inspection) when the folder has no manifest listing it."""
        root = _parent(path)
        manifest_path = fs.join(root, MANIFEST)
        if fs.isdir(path) or not fs.exists(path) or not fs.exists(manifest_path):
            return False
        name = os.path.basename(path)
        try:
            m = load_manifest(manifest_path)
        except CodecIOError:
            return False  # not a manifest this file can be read by: inspect the file itself
        listed = {
            entry["file"]: (split, entry)
            for split, info in m["splits"].items()
            for entry in info["shards"]
        }
        if name not in listed:
            return False
        self.root = root
        self._open_manifest(manifest_path)
        split, entry = listed[name]
        records = int(entry["records"])
        # stored field checksums cover the whole split, not this shard
        attrs = {k: v for k, v in self.schema.attrs.items() if k != CHECKSUM_ATTR}
        self.schema = Schema(
            {split: SplitSpec(split, records, self.schema.splits[split].fields)}, attrs
        )
        index = fs.join(root, entry["index"]["file"]) if "index" in entry else None
        sums = (entry.get("bytes"), entry.get("sha256"))
        self.shards = {split: [ShardFile(path, records, m.get("compression"), index, *sums)]}
        assert self.manifest is not None
        self.manifest = {**self.manifest, "splits": {split: {"count": records, "shards": [entry]}}}
        return True

    def find_files(self, path: str) -> list[str]:
        """The files of a folder (those :attr:`file_pattern` matches), a glob, or one file."""
        return self.find_files_at(path)

    @classmethod
    def find_files_at(cls, path: str) -> list[str]:
        """:meth:`find_files` without a reader (``dstore index`` lists files with it)."""
        if fs.isdir(path):
            files = sorted(
                fs.join(path, f) for f in fs.listdir(path) if re.search(cls.file_pattern, f)
            )
        elif any(c in path for c in "*?["):
            files = sorted(fs.glob(path))
        else:
            files = [path] if fs.exists(path) else []
        if not files:
            raise CodecIOError(f"{path}: no {cls.codec_name} files found")
        return files

    def _inspect(self, files: list[str], whole_sets: bool = True) -> None:
        by_split: dict[str, list[str]] = {}
        for f in files:
            by_split.setdefault(self.split_of(os.path.basename(f)), []).append(f)
        if whole_sets:
            for split, paths in by_split.items():
                check_complete(split, paths)
        splits = {}
        for split, paths in by_split.items():
            fields, shards = self.scan_split(split, paths)
            self.shards[split] = [_with_sidecar(s) for s in shards]
            splits[split] = SplitSpec(split, sum(s.records for s in self.shards[split]), fields)
        self.schema = Schema(splits)

    # ------------------------------------------------------------ record indexes

    def indexed(self) -> bool:
        """True when every shard has a record index (each record one seek away)."""
        return all(
            s.index is not None and s.compression is None
            for shards in self.shards.values()
            for s in shards
        )

    def frame_offsets(self, shard: ShardFile) -> np.ndarray | None:
        """Where each record of ``shard`` starts (and, last, where the shard ends), from
        its record index, checked against the shard; None without an index."""
        if shard.index is None or shard.compression is not None:
            return None
        offsets = self._offsets.get(shard.path)
        if offsets is None:
            offsets = self._offsets[shard.path] = read_index(shard.index, shard.path, shard.records)
        return offsets

    # ------------------------------------------------------------ reading

    def shard_slices(self, split: str, start: int, stop: int) -> list[tuple[ShardFile, int, int]]:
        """The shards holding records ``start:stop`` of ``split``, each with the
        range ``lo:hi`` of its own records."""
        out = []
        first = 0
        for shard in self.shards[split]:
            last = first + shard.records
            if last > start and first < stop:
                out.append((shard, max(start, first) - first, min(stop, last) - first))
            first = last
        return out

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        slices: Iterable[tuple[ShardFile, int, int]] = self.shard_slices(spec.name, start, stop)
        if self.shard_cache is not None:
            slices = self.shard_cache.local_slices(self.shard_slices(spec.name, start, stop))
        with ThreadPoolExecutor(self.workers, thread_name_prefix="dstore-decode") as pool:
            per_shard = (
                batch
                for shard, lo, hi in slices
                for batch in self.read_shard(spec, names, shard, lo, hi, rows, pool)
            )
            if not names:
                yield from per_shard
            else:
                yield from _rebatch(per_shard, spec, names, rows)

    def close(self) -> None:
        if self.shard_cache is not None:
            self.shard_cache.close()
        self.close_kept()
        super().close()

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Shards, each cut into :meth:`shard_pieces` ranges of about ``target_bytes``."""
        self.split(split)
        ranges: list[tuple[int, int]] = []
        first = 0
        for shard in self.shards[split]:
            pieces = max(1, min(shard.records, self.shard_pieces(shard, target_bytes)))
            ranges.extend(even_ranges(first, first + shard.records, -(-shard.records // pieces)))
            first += shard.records
        return ranges

    def stored_record_bytes(self, split: str) -> int:
        """Bytes of the split's local shard files per record (their sizes only)."""
        shards = self.shards.get(split, [])
        records = sum(s.records for s in shards)
        if not records or any(fs.is_url(s.path) for s in shards):
            return 0
        try:
            return sum(os.path.getsize(s.path) for s in shards) // records
        except OSError:
            return 0

    def lossy_fields(self, split: str) -> dict[str, Any]:
        """Fields of ``split`` stored in a lossy image encoding, from the format's field
        encodings (``self.encodings[split][field].lossy``, where a format keeps them)."""
        encodings = getattr(self, "encodings", None) or {}
        return {
            name: lossy
            for name, enc in encodings.get(split, {}).items()
            if (lossy := getattr(enc, "lossy", None)) is not None
        }

    def check_integrity(self) -> list[tuple[bool, str]]:
        """Every shard the manifest lists: present, of its size, with its sha256."""
        if self.manifest is None:
            return [
                (True, f"no dstore manifest: {self.codec_name} records decoded and checked only")
            ]
        return check_shards(self.root, self.manifest)

    def check_count(self, shard: ShardFile, count: int, what: str = "records") -> None:
        """Refuse a shard holding another number of records than its listing says."""
        if count != shard.records:
            raise CodecIOError(f"{shard.path}: holds {count} {what}, expected {shard.records}")

    def pieces_by_size(self, shard: ShardFile, target_bytes: int) -> int:
        """Pieces of about ``target_bytes`` of stored bytes (for formats entered cheaply)."""
        return -(-fs.getsize(shard.path) // max(1, target_bytes))


def _join(spec: SplitSpec, names: list[str], parts: list[Batch]) -> Batch:
    """One batch from consecutive ones, keeping serialized records a writer may copy."""
    if len(parts) == 1:
        return parts[0]
    cols = {n: concat_columns(spec.fields[n].kind, [p[n] for p in parts]) for n in names}
    first = parts[0]
    if isinstance(first, SerializedBatch) and all(
        isinstance(p, SerializedBatch) and p.signature == first.signature for p in parts
    ):
        records = [r for p in parts for r in p.records]  # type: ignore[attr-defined]
        return SerializedBatch(cols, records, first.signature)
    return cols


def _rebatch(
    batches: Iterator[Batch], spec: SplitSpec, names: list[str], rows: int
) -> Iterator[Batch]:
    """Batches of exactly ``rows`` records (the last may be shorter) from per-shard ones.

    Readers promise batches of ``rows`` across shard boundaries (``verify`` walks
    two readers side by side); a batch inside one shard passes through uncopied."""
    pending: list[Batch] = []
    have = 0
    for batch in batches:
        n = column_len(batch[names[0]])
        off = 0
        while off < n:
            if not pending and n - off >= rows:
                yield batch if (off, n) == (0, rows) else slice_batch(batch, off, off + rows)
                off += rows
                continue
            take = min(rows - have, n - off)
            pending.append(batch if (off, take) == (0, n) else slice_batch(batch, off, off + take))
            have += take
            off += take
            if have == rows:
                yield _join(spec, names, pending)
                pending, have = [], 0
    if pending:
        yield _join(spec, names, pending)


def group_ranges(
    shards_groups: Iterable[Iterable[tuple[int, int]]], target_bytes: int
) -> list[tuple[int, int]]:
    """Record ranges of a split whose shards are read a group at a time (Parquet row
    groups): whole groups, ``(records, bytes)`` each, gathered to about ``target_bytes``."""
    ranges: list[tuple[int, int]] = []
    first = 0
    for groups in shards_groups:
        start, size = first, 0
        for records, nbytes in groups:
            first += records
            size += nbytes
            if size >= target_bytes:
                ranges.append((start, first))
                start, size = first, 0
        if first > start:
            ranges.append((start, first))
    return ranges


def _with_sidecar(shard: ShardFile) -> ShardFile:
    """A shard dstore did not write, with the ``<shard>.idx`` beside it if there is one
    (``dstore index`` writes them; DALI's ``tfrecord2idx`` too)."""
    sidecar = shard.path + INDEX_SUFFIX
    if shard.index is None and not fs.is_url(shard.path) and os.path.isfile(sidecar):
        return dataclasses.replace(shard, index=sidecar)
    return shard
