"""Reading a sharded directory: one reader for every format written as shards.

:class:`ShardedDirectoryReader` owns everything about a folder of shards that
does not depend on how a record is encoded:

- the manifest (``dstore.json``): schema, shard list, counts, compression,
  checked once when opened (:func:`~dstore.sharding.manifest.load_manifest`);
- one shard named inside such a folder (read as its own split, typed by the
  manifest);
- files dstore did not write: a folder, a glob or one file, grouped into
  splits by name, ``-i-of-N`` sets checked for completeness;
- reading records ``start:stop`` across shard boundaries, or at any positions
  (:mod:`~dstore.sharding.records`), record ranges for training workers, integrity
  checks against the manifest (:class:`~dstore.sharding.checked.CheckedShards`:
  sizes, sha256 of shards read whole, record indexes walked against the frames), no file linked in from
  outside its folder (:mod:`~dstore.sharding.files`).

A format subclasses it and answers three questions only:

- :meth:`~ShardedDirectoryReader.read_shard`: records ``lo:hi`` of one shard, decoded,
  as batches (the default pulls :meth:`~ShardedDirectoryReader.shard_records` and decodes
  groups with :meth:`~ShardedDirectoryReader.decode_records` on the worker threads);
- :meth:`~ShardedDirectoryReader.load_manifest_head`: its own manifest keys;
- :meth:`~ShardedDirectoryReader.scan_split`: the fields of files it did not write.
"""

from __future__ import annotations

import dataclasses
import os
import re
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

import numpy as np

from .. import fs, links
from ..abc import RANGE_BYTES, Reader, even_ranges
from ..errors import CodecIOError, VersionError
from ..model.checksums import CHECKSUM_ATTR
from ..model.samples import BatchRows
from ..model.schema import (
    DEFAULT_SPLIT,
    KNOWN_SPLITS,
    Batch,
    FieldSpec,
    Schema,
    SplitSpec,
)
from ..parallel import default_workers
from .batches import group_ranges, group_slices, rebatch
from .cache import ShardCache
from .checked import CheckedShards
from .files import brace_files, check_complete, check_listed, list_files, with_sidecar
from .manifest import (
    MANIFEST,
    check_compression,
    check_encodings,
    load_manifest,
    manifest_schema,
)
from .records import IndexedReads
from .versions import latest_version, locate, version_manifest

__all__ = [
    "ShardFile",
    "ShardedDirectoryReader",
    "brace_files",
    "check_complete",
    "group_ranges",
    "group_slices",
]


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
    #: its size and sha256 as the manifest lists them (None for files dstore did not write)
    size: int | None = None
    sha256: str | None = None


def _parent(path: str) -> str:
    return (path.rsplit("/", 1)[0] if fs.is_url(path) else os.path.dirname(path)) or "."


def _shard_file(
    where: Callable[[str], str], entry: dict[str, Any], compression: str | None
) -> ShardFile:
    """A shard as a manifest entry lists it (``where``: a listed name's path)."""
    index = where(entry["index"]["file"]) if "index" in entry else None
    path = where(entry["file"])
    return ShardFile(
        path, int(entry["records"]), compression, index, entry["bytes"], entry["sha256"]
    )


class ShardedDirectoryReader(IndexedReads, CheckedShards, Reader):
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

    def __init__(self, path: str, workers: int = 0, follow_links: bool = False) -> None:
        self.path = path
        self.workers = workers or default_workers()
        #: read shards and indexes linked in from outside their folder (else refused)
        self.follow_links = follow_links
        #: local shards whose size and sha256 matched the manifest, by path: the file's
        #: identity and times then (any rewrite or replacement changes them)
        self._checked_files: dict[str, tuple[int, ...]] = {}
        self._hashing: dict[str, Any] = {}
        self._hasher: ThreadPoolExecutor | None = None
        self._hasher_pid = 0
        #: the manifest when dstore wrote the folder, else None (read by inspection)
        self.manifest: dict[str, Any] | None = None
        self.root = path  # the folder shard names in a manifest are relative to
        self.shards: dict[str, list[ShardFile]] = {}
        self._offsets: dict[str, np.ndarray] = {}
        #: local copies of remote shards (``to_torch(url, cache_dir=...)``), if set
        self.shard_cache: ShardCache | None = None
        #: the version of the dataset read (:mod:`dstore.sharding.versions`): the latest
        #: when opened, another with :meth:`select_version`; 1 without a manifest
        self.version = 1
        #: where each file the manifest lists lies (the root, or a versions folder)
        self.located: dict[str, str] = {}
        if fs.isdir(path) and fs.exists(fs.join(path, MANIFEST)):
            self.version, manifest_path = latest_version(path)
            self._open_manifest(manifest_path)
            self.shards = check_listed(manifest_path, self.root, self.shards)
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
        groups of :data:`~dstore.parallel.DECODE_GROUP` on ``pool`` with
        :meth:`decode_records`, into one batch."""
        records = self.shard_records(shard, lo, hi)
        pos = lo
        while pos < hi:
            n = min(rows, hi - pos)
            group = list(islice(records, n))
            if len(group) < n:
                raise CodecIOError(
                    f"{shard.path}: ended after {pos + len(group)} records, expected {shard.records}"
                )
            yield self.decode_stored(spec, names, group, pool)
            pos += n
        for _ in records:  # drain: the format checks the shard's tail there
            pass

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[Any]:
        """The stored records ``lo:hi`` of ``shard``, one item each (bytes, a tar
        sample...), checked as they are read (CRCs, lengths)."""
        raise NotImplementedError(f"{self.codec_name}: implement shard_records or read_shard")

    def decode_records(
        self, spec: SplitSpec, names: list[str], records: list[Any], rows: BatchRows, first: int
    ) -> None:
        """Fields ``names`` of stored ``records`` decoded into rows ``first...`` of
        ``rows`` (:meth:`~dstore.model.samples.BatchRows.fill`; runs on a worker thread)."""
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

    def select_version(self, number: int | None) -> None:
        """Read version ``number`` of the dataset (None: the latest, as it is now)."""
        if self.manifest is None or self.root != self.path:
            if number not in (None, 1):
                raise VersionError(f"{self.path}: a dataset without versions: only version 1")
            return
        self.version, manifest_path = version_manifest(self.path, number)
        self._offsets = {}
        self._open_manifest(manifest_path)
        self.shards = check_listed(manifest_path, self.root, self.shards)

    def _open_manifest(self, manifest_path: str) -> None:
        m = load_manifest(manifest_path)
        present = set(fs.listdir(self.root))
        self.located = {}

        def where(rel: str) -> str:
            found = self.located[rel] = locate(self.root, rel, m, present)
            return found

        comp = check_compression(m, self.compressions, self.codec_name, manifest_path)
        self.schema = manifest_schema(m, manifest_path)
        try:
            self.shards = {
                split: [_shard_file(where, s, comp) for s in info["shards"]]
                for split, info in m["splits"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CodecIOError(f"{manifest_path}: unreadable manifest: {e}") from None
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
        shard = dataclasses.replace(
            _shard_file(lambda rel: fs.join(root, rel), entry, m.get("compression")), path=path
        )
        if shard.index is not None and not fs.is_url(root):
            # the index is read because of the folder, not named by the user: its rule
            links.check_inside(root, [shard.index], self.follow_links)
        self.shards = check_listed(manifest_path, root, {split: [shard]})
        assert self.manifest is not None
        self.manifest = {**self.manifest, "splits": {split: {"count": records, "shards": [entry]}}}
        return True

    def find_files(self, path: str) -> list[str]:
        """The files of a folder (those :attr:`file_pattern` matches), a glob, a brace
        pattern or one file; none linked in from outside unless :attr:`follow_links`."""
        return self.find_files_at(path, self.follow_links)

    @classmethod
    def find_files_at(cls, path: str, follow_links: bool = False) -> list[str]:
        """:meth:`find_files` without a reader (``dstore index`` lists files with it)."""
        return list_files(path, cls.file_pattern, cls.codec_name, follow_links)

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
            self.shards[split] = [with_sidecar(s, self.follow_links) for s in shards]
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
        listed = self.shard_slices(spec.name, start, stop)
        slices: Iterable[tuple[ShardFile, int, int]] = listed
        if self.shard_cache is not None:
            # copies the cache verified against the manifest as it fetched them
            slices = (
                (dataclasses.replace(shard, size=None, sha256=None), lo, hi)
                for shard, lo, hi in self.shard_cache.local_slices(listed)
            )
        else:  # each shard read whole is hashed while the one before it is read
            slices = self._hashed_ahead(listed)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="dstore-decode") as pool:
            per_shard = (
                batch
                for shard, lo, hi in slices
                for batch in self._read_checked(spec, names, shard, lo, hi, rows, pool)
            )
            if not names:
                yield from per_shard
            else:
                yield from rebatch(per_shard, spec, names, rows)

    def _read_checked(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        """:meth:`read_shard`, once the shard agrees with its manifest entry (its sha256
        when it is read whole)."""
        self.check_shard(shard, whole=lo == 0 and hi == shard.records)
        yield from self.read_shard(spec, names, shard, lo, hi, rows, pool)

    def _hashed_ahead(
        self, slices: list[tuple[ShardFile, int, int]]
    ) -> Iterator[tuple[ShardFile, int, int]]:
        """The slices, the next one's shard hashed ahead when it is to be read whole."""
        for i, (shard, lo, hi) in enumerate(slices):
            if i + 1 < len(slices):
                after, a, b = slices[i + 1]
                if a == 0 and b == after.records:
                    self.hash_ahead(after)
            yield shard, lo, hi

    def close(self) -> None:
        self.close_checks()
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

    def check_count(self, shard: ShardFile, count: int, what: str = "records") -> None:
        """Refuse a shard holding another number of records than its listing says."""
        if count != shard.records:
            raise CodecIOError(f"{shard.path}: holds {count} {what}, expected {shard.records}")

    def pieces_by_size(self, shard: ShardFile, target_bytes: int) -> int:
        """Pieces of about ``target_bytes`` of stored bytes (for formats entered cheaply)."""
        return -(-fs.getsize(shard.path) // max(1, target_bytes))
