"""Writing a sharded directory: shard names, the size plan, atomic shard files, the manifest.

A sharded output is a folder::

    train-00000-of-00017.<suffix>   one file per planned Shard (records start:stop of a split)
    ...
    dstore.json                     the manifest: written last, so its presence means complete

What is here is the same for any record format, so a format only says how
records become bytes:

- :func:`shard_name`: ``<split>-<index:05d>-of-<total:05d><suffix>``;
- :func:`plan_by_size`: shards of about a target size, from encoded sample records;
- :func:`open_for_write`: a file that exists under its name only once complete
  (``.part`` then fsync and rename; one PUT on an object store);
  :func:`open_path_for_write` the same for a library that writes a path itself;
- :class:`ShardedDirectoryWriter`: ``write_shard`` (hashes, counts, optional gzip)
  and ``commit`` (the manifest); a format implements ``encode_shard`` (records
  -> bytes) or, when a library writes the file itself (pyarrow's ParquetWriter),
  ``write_records`` (records -> a file object), or ``write_shard_file`` when its
  library writes by path (``writes_paths``: a C++ writer, :mod:`~dstore.sharding.native`), and
  ``manifest_head``;
- record indexes (``record_index``): each frame's length noted as it is
  written, a ``.dstore-index/<shard>.idx`` (:mod:`dstore.sharding.index`): never
  in the folder's root, where a ``<split>-*`` glob would take it for a shard.

The reading half is :mod:`dstore.sharding.reader`, the manifest
:mod:`dstore.sharding.manifest`, the resume journal :mod:`dstore.engine.journal`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
from abc import abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, ClassVar, TypeVar

import numpy as np

from .. import fs
from ..abc import Shard, ShardWriter
from ..errors import CodecIOError, DstoreError
from ..fs import is_url
from ..model import names
from ..model.schema import Batch, Schema, SplitSpec, slice_batch
from ..options import options_json
from ..parallel import default_workers, ordered_map
from .hashing import _HashingFile
from .index import write_index
from .manifest import ENTRY_KEYS, MANIFEST, manifest_base

__all__ = [
    "ShardedDirectoryWriter",
    "cut_groups",
    "manifest_base",
    "open_for_write",
    "open_path_for_write",
    "plan_by_size",
    "shard_name",
]


def shard_name(split: str, index: int, total: int, suffix: str) -> str:
    """The file of a shard: the split escaped to one plain name (``a/b`` -> ``a%2Fb``)."""
    return f"{names.escape(split)}-{index:05d}-of-{total:05d}{suffix}"


def plan_by_size(
    schema: Schema,
    sample: Callable[[str, int], Batch],
    encoded_sizes: Callable[[str, Batch], list[int]],
    *,
    target_bytes: float,
    sample_records: int,
    suffix: str,
) -> list[Shard]:
    """Shards of about ``target_bytes`` each, sized from the encoded first records.

    Encoding a sample (not guessing from raw sizes) makes compressed shards land
    near the target; the sample is the split's first records, so the plan is the
    same on every run over the same data and options. Empty splits get no shard."""
    names.check_case_distinct(
        ((s.name, shard_name(s.name, 0, 1, suffix)) for s in schema.splits.values() if s.count),
        f"{suffix.lstrip('.')}: splits",
        "macOS and Windows file systems: one split's shards would replace the other's",
    )
    plan: list[Shard] = []
    for split in schema.splits.values():
        if split.count == 0:
            continue
        if _fits_one_shard(split, target_bytes):  # an append's few records: none encoded twice
            plan.append(Shard(split.name, 0, 0, split.count, shard_name(split.name, 0, 1, suffix)))
            continue
        sizes = encoded_sizes(split.name, sample(split.name, min(split.count, sample_records)))
        per_shard = max(1, int(target_bytes // max(1.0, sum(sizes) / len(sizes))))
        total = -(-split.count // per_shard)
        for i in range(total):
            start = i * per_shard
            stop = min(split.count, start + per_shard)
            plan.append(Shard(split.name, i, start, stop, shard_name(split.name, i, total, suffix)))
    return plan


def planning_records(schema: Schema, target_bytes: float, sample_records: int) -> int:
    """Records :func:`plan_by_size` encodes to size the shards of ``schema``."""
    return sum(
        min(s.count, sample_records)
        for s in schema.splits.values()
        if s.count and not _fits_one_shard(s, target_bytes)
    )


def _fits_one_shard(split: SplitSpec, target_bytes: float) -> bool:
    """Whether ``split`` is one shard whatever its encoding: its decoded size known, and
    twice that plus 1 KiB a record (no encoder grows data more) within the target."""
    if split.varying:
        return False
    return split.count > 0 and 2 * split.nbytes + 1024 * split.count <= target_bytes


#: records per task handed to an encoding thread
ENCODE_CHUNK = 16
R = TypeVar("R")


def encode_chunks(
    batches: Iterable[Batch],
    encode: Callable[[int, Batch], R],
    workers: int,
    thread_name: str,
    ahead: int = 4,
    chunk: int = ENCODE_CHUNK,
) -> Iterator[R]:
    """``encode(offset, chunk)`` over slices of ``chunk`` records of ``batches``
    (``offset``: the chunk's first record, from 0), in order, on ``workers`` threads
    (0: one per core; image encoders release the GIL), at most ``ahead`` chunks per
    thread in flight, so memory stays bounded whatever the shard's size."""
    workers = workers or default_workers()

    def cut() -> Iterator[tuple[int, Batch]]:
        pos = 0
        for batch in batches:
            n = len(next(iter(batch.values())))
            for i in range(0, n, chunk):
                yield pos + i, slice_batch(batch, i, min(i + chunk, n))
            pos += n

    with ThreadPoolExecutor(workers, thread_name_prefix=thread_name) as pool:
        yield from ordered_map(lambda c: encode(*c), cut(), pool, ahead * workers)


def cut_groups(
    chunks: Iterable[tuple[R, Any]], max_records: int, max_bytes: float
) -> Iterator[list[tuple[R, int, int]]]:
    """Groups of consecutive records (Parquet row groups) from encoded ``(chunk, sizes)``,
    as ``(chunk, offset, count)`` pieces: a group ends after ``max_records`` records or
    once its sizes reach ``max_bytes``, decided record by record, so the cut depends on
    the records only, never on how they were chunked (a resumed or Dask run is the same)."""
    group: list[tuple[R, int, int]] = []
    records, size = 0, 0
    for chunk, sizes in chunks:
        pos = 0
        while pos < len(sizes):
            # the records of this chunk that still fit the current group
            ends = size + np.cumsum(sizes[pos : pos + max_records - records])
            take = min(len(ends), int(np.searchsorted(ends, max_bytes, side="left")) + 1)
            group.append((chunk, pos, take))
            records, size, pos = records + take, int(ends[take - 1]), pos + take
            if records == max_records or size >= max_bytes:
                yield group
                group, records, size = [], 0, 0
    if group:
        yield group


@contextlib.contextmanager
def open_for_write(root: str, name: str) -> Iterator[IO[bytes]]:
    """A file under ``root`` that exists under ``name`` only once complete.

    Locally: written as ``name.part``, fsynced, renamed. On an object store a
    PUT is atomic: the object appears only if the upload succeeded, and a
    failed upload raises here (never reported as success)."""
    target = names.safe_join(root, name)  # whatever made ``name``, never outside ``root``
    if is_url(root):
        url = target
        try:
            with fs.open_binary(url, "wb") as f:
                yield f
        except DstoreError:
            raise
        except Exception as e:  # noqa: BLE001 - botocore/aiohttp errors, re-raised as ours
            raise CodecIOError(f"{url}: upload failed: {type(e).__name__}: {e}") from None
        return
    final = target
    part = final + ".part"
    try:
        with open(part, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)
        raise


@contextlib.contextmanager
def open_path_for_write(root: str, name: str) -> Iterator[str]:
    """A local path under ``root`` for a library that writes a file by path: the file
    exists under ``name`` only once complete (written as ``name.part``, fsynced, renamed).

    ``root`` is a local folder: such a library cannot write to an object store."""
    final = names.safe_join(root, name)
    part = final + ".part"
    try:
        yield part
        fd = os.open(part, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)
        raise


def _file_digest(path: str) -> tuple[int, str]:
    """Size and sha256 of a written file, read back in blocks."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


class ShardedDirectoryWriter(ShardWriter):
    """Writes the shard files and the manifest of a sharded directory.

    A format subclasses it with :meth:`encode_shard` (records -> bytes, in
    groups) and :meth:`manifest_head` (what its reader needs: schema, field
    encodings, options); this class does the rest the same way for every
    format. It holds no handles or threads, so it pickles to Dask workers.
    """

    #: the codec's name, which starts every error message
    codec_name: ClassVar[str] = "sharded"
    #: True when each encoded record is one frame a reader can seek to: an
    #: uncompressed shard then gets a ``.dstore-index/<shard>.idx`` record index
    record_index: ClassVar[bool] = False
    #: True when the format's library writes a shard itself, given a path (a C++ writer):
    #: ``write_shard`` then calls :meth:`write_shard_file` on the ``.part`` path and
    #: hashes the file once the library has closed it (local folders only)
    writes_paths: ClassVar[bool] = False

    def __init__(self, schema: Schema, plan: Sequence[Shard], compression: str | None) -> None:
        self.schema = schema
        #: ``"gzip"`` wraps each whole shard in one gzip stream (TensorFlow's GZIP)
        self.compression = compression
        self.split_of = {s.file: s.split for s in plan}
        #: libraries (with versions) the shard bytes depend on, as planned
        self.libraries = self.current_libraries()

    def current_libraries(self) -> dict[str, str]:
        """The libraries (with versions) this process would encode with; a worker whose
        differ would write other bytes. A format with none need not override it."""
        return {}

    def fingerprint(self) -> dict[str, str]:
        return dict(self.libraries)

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        """The shard's records encoded, in record order, in groups (one item per record).

        A format implements this or :meth:`write_records`."""
        raise NotImplementedError(f"{self.codec_name}: implement encode_shard or write_records")
        yield []  # pragma: no cover - makes this a generator, as overrides are

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        """Write the shard's records into ``out`` (a binary file object with ``write``,
        ``flush`` and ``tell``, hashed and counted on the way); yield how many records
        each step wrote.

        The default writes what :meth:`encode_shard` yields. A format whose
        library writes a whole file itself (a Parquet footer, a tar index) overrides
        this instead, writing into ``out``; it must not close it."""
        with contextlib.closing(self.encode_shard(shard, batches)) as encoded_groups:
            for encoded in encoded_groups:
                # one write and hash per group: the GIL is let go less often
                if isinstance(out, _HashingFile):
                    out.write(b"".join(encoded))
                else:
                    for rec in encoded:
                        out.write(rec)
                yield len(encoded)

    def _indexed_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any, lengths: list[int]
    ) -> Generator[int, None, None]:
        """:meth:`write_records` for frames, noting each record's length for its index."""
        with contextlib.closing(self.encode_shard(shard, batches)) as encoded_groups:
            for encoded in encoded_groups:
                out.write(b"".join(encoded))  # one write and hash per group
                lengths.extend(len(rec) for rec in encoded)
                yield len(encoded)

    def standard_head(
        self,
        format_id: str,
        options: Any,
        fields: Mapping[str, Any],
        skip: Iterable[str] = ("workers",),
        **extra: Any,
    ) -> dict[str, Any]:
        """The manifest keys formats write, in this order: format and versions, the options
        that shape the bytes (``skip`` those that do not), ``extra``, libraries, schema,
        and the field encodings its reader needs."""
        skipped = set(skip)
        return {
            **manifest_base(format_id, self.compression),
            "options": {k: v for k, v in options_json(options).items() if k not in skipped},
            **extra,
            "libraries": self.libraries,
            "schema": self.schema.to_json(),
            "fields": dict(fields),
        }

    @abstractmethod
    def manifest_head(self) -> dict[str, Any]:
        """The manifest's format-specific keys, in the order they are written
        (``splits`` and ``run`` follow them)."""

    def write_shard_file(self, path: str, groups: Iterator[list[bytes]]) -> None:
        """Write the encoded records (from :meth:`encode_shard`, in groups) to the new
        local file ``path`` with the format's library, and close it (``writes_paths``)."""
        raise NotImplementedError(f"{self.codec_name}: writes_paths needs write_shard_file")

    def write_shard(
        self,
        root: str,
        shard: Shard,
        batches: Iterator[Batch],
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        if (here := self.current_libraries()) != self.libraries:
            # e.g. a Dask worker with another imagecodecs: its shard would not match the others
            raise CodecIOError(
                f"{self.codec_name}: shard {shard.file}: this process encodes with "
                f"{here}, the run was planned with {self.libraries}; install the same versions "
                "everywhere"
            )
        if self.writes_paths:
            return self._write_shard_path(root, shard, batches, progress)
        records = 0
        lengths: list[int] | None = [] if self.record_index and not self.compression else None
        with open_for_write(root, shard.file) as raw, _HashingFile(raw) as hashed:
            out: Any = hashed
            if self.compression == "gzip":
                out = gzip.GzipFile(fileobj=hashed, mode="wb", mtime=0, filename="")
            steps = (
                self.write_records(shard, batches, out)
                if lengths is None
                else self._indexed_records(shard, batches, out, lengths)
            )
            with contextlib.closing(steps):
                for n in steps:
                    records += n
                    if progress is not None:
                        progress(n)
            if out is not hashed:
                out.close()
            sha = hashed.sha.hexdigest()
        entry: dict[str, Any] = {
            "file": shard.file,
            "records": records,
            "bytes": hashed.size,
            "sha256": sha,
        }
        if lengths is not None:
            entry["index"] = write_index(root, shard.file, lengths, open_for_write)
        return entry

    def _write_shard_path(
        self,
        root: str,
        shard: Shard,
        batches: Iterator[Batch],
        progress: Callable[[int], None] | None,
    ) -> dict[str, Any]:
        """``write_shard`` for a library that writes by path: the same entry, the file
        hashed after it is closed (the bytes are on disk then, not passing through us)."""
        if is_url(root):
            raise CodecIOError(
                f"{root}: {self.codec_name} writes local folders only (its library writes files "
                "by path); write locally, then copy the folder"
            )
        assert self.compression is None, "a path-writing library compresses by itself"
        records = 0

        def counted(groups: Iterator[list[bytes]]) -> Iterator[list[bytes]]:
            nonlocal records
            for group in groups:
                yield group
                records += len(group)
                if progress is not None:
                    progress(len(group))

        with (
            open_path_for_write(root, shard.file) as part,
            contextlib.closing(self.encode_shard(shard, batches)) as encoded_groups,
        ):
            self.write_shard_file(part, counted(encoded_groups))
            size, sha = _file_digest(part)
        return {"file": shard.file, "records": records, "bytes": size, "sha256": sha}

    def manifest(
        self, shards: list[dict[str, Any]], run: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The manifest of ``shards`` (entries, in order; each split's are those of its
        files in the plan): the format's head, ``splits``, then ``run``."""
        splits_json: dict[str, Any] = {}
        for split, spec in self.schema.splits.items():
            mine = [_entry(s) for s in shards if self.split_of[s["file"]] == split]
            splits_json[split] = {"count": spec.count, "shards": mine}
        manifest = {**self.manifest_head(), "splits": splits_json}
        if run:
            manifest["run"] = dict(run)
        return manifest

    def commit(
        self, root: str, shards: list[dict[str, Any]], run: Mapping[str, Any] | None = None
    ) -> None:
        manifest = self.manifest(shards, run)
        with open_for_write(root, MANIFEST) as f:
            f.write((json.dumps(manifest, indent=1) + "\n").encode())


def _entry(shard: Mapping[str, Any]) -> dict[str, Any]:
    """A shard's manifest entry with its keys in one order, however it was stored in
    between (the journal sorts keys): a resumed run writes the same manifest bytes."""
    entry = {k: shard[k] for k in ENTRY_KEYS}
    if "index" in shard:
        entry["index"] = {k: shard["index"][k] for k in ("file", "bytes", "sha256")}
    return entry
