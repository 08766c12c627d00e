"""One split of one dataset, read range by range in any process (no framework imported).

A :class:`SplitSource` is what a training reader pickles to its workers: the
path and the choices, never an open file. Each process opens its own reader on
first use (an HDF5 or zip handle must not cross a fork), and reads whole
record ranges (:meth:`dstore.abc.Reader.record_ranges`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CodecIOError, SchemaError
from ..fs import is_url
from ..model.schema import Batch, SplitSpec
from ..registry import infer_codec
from ..sharding.cache import parse_cache_limit
from ..sources import listing
from ..sources.versions import version_of
from .plan import BLOCK_RANGES, WINDOW_UNITS, GlobalLayout
from .state import dataset_identity

__all__ = ["ON_ERROR", "SplitSource"]

ON_ERROR = ("raise", "skip")
_log = logging.getLogger("dstore")
#: skipped-record messages kept for inspection (the count has no bound)
_KEEP_ERRORS = 100

if TYPE_CHECKING:
    from ..sharding.cache import ShardCache
    from .random_access import RandomAccessCopy


class SplitSource:
    """Records of ``split`` of the dataset at ``path``, fields ``fields`` (all if None)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str,
        fields: Sequence[str] | None = None,
        *,
        format: str | None = None,
        on_error: str = "raise",
        range_bytes: int | None = None,
        follow_links: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | float | str | None = None,
        version: int | None = None,
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}; got {on_error!r}")
        self.path = os.fspath(path)
        # a folder of one format's shards without a manifest reads as dstore.open reads it
        self.format = (
            format or listing.folder_format(self.path, follow_links) or infer_codec(self.path)
        )
        self.on_error = on_error
        #: pickled to the workers with the path: each process opens the source as allowed
        self.follow_links = follow_links
        #: where remote shards are kept between epochs (None: read remotely each time)
        # "~/.cache/x" is the user's home, as everywhere else (not a folder named "~" here)
        self.cache_dir = None if cache_dir is None else os.path.expanduser(os.fspath(cache_dir))
        self.cache_limit = parse_cache_limit(cache_limit)
        if self.cache_limit is not None and self.cache_dir is None:
            raise ValueError("cache_limit= bounds the shard cache: give cache_dir= with it")
        self._cache: ShardCache | None = None
        #: what is opened: ``path``, or the random-access copy of it this source owns
        self._read_path, self._range_bytes = self.path, range_bytes
        self._copy: RandomAccessCopy | None = None
        self._reader: Any = None
        self._pid = -1
        self._home = os.getpid()  # the process that made this source (DataLoader workers differ)
        #: the version of the dataset read: pinned when opened (None: the latest then), so
        #: every worker, now or after an append, reads the same records
        self.version = version
        reader = self.reader()
        self.version = version_of(reader)
        self.spec: SplitSpec = reader.split(split)  # one line naming the splits there are
        self.split = split
        #: what a reader state names this split by (:func:`~dstore.readers.state.dataset_identity`)
        self.identity = dataset_identity(reader, split)
        if fields is not None:
            if isinstance(fields, str):
                fields = [fields]
            unknown = [f for f in fields if f not in self.spec.fields]
            if unknown:
                raise SchemaError(
                    f"{self.path}: split {split!r} has no field(s) {', '.join(map(repr, unknown))}; "
                    f"fields: {', '.join(self.spec.fields)}"
                )
        self.fields = list(fields) if fields is not None else list(self.spec.fields)
        self.ranges: list[tuple[int, int]] = (
            reader.record_ranges(split)
            if range_bytes is None
            else reader.record_ranges(split, range_bytes)
        )
        #: False for storage that only streams (deflated npz members)
        self.random_access: bool = bool(reader.random_access)
        #: why single records are not read at random (None when they are)
        self.sequential_reason: str | None = reader.sequential_reason
        self.skipped = 0
        self.errors: list[str] = []

    def require_random_access(self, what: str, instead: str = "") -> None:
        """Refuse ``what`` (a mode that reads single records at random) in one line
        when this storage only streams, naming ``instead`` and the conversions (the
        registered formats, from their codecs' ``random_access_when``) that make it
        random-access."""
        if (self.sequential_reason or not self.random_access) and not self._random_copy(what):
            from ..registry import codecs_with, get_codec_class

            why = self.sequential_reason or "a deflated npz only streams"
            forms = []
            for name in codecs_with(lambda c: not c.stores_text):  # text: slow, large
                when = get_codec_class(name).random_access_when
                forms.append(f"{name} ({when})" if when else name)
            raise SchemaError(
                f"{self.path}: {what} needs random access and {why}; {instead}convert it "
                f"to a random-access form ({', '.join(forms)})"
            )

    def at_version(self, version: int) -> SplitSource:
        """This split of the same dataset at another version (a reader state's)."""
        if version == self.version:
            return self
        return SplitSource(
            self.path,
            self.split,
            self.fields,
            format=self.format,
            on_error=self.on_error,
            range_bytes=self._range_bytes,
            follow_links=self.follow_links,
            cache_dir=self.cache_dir,
            cache_limit=self.cache_limit,
            version=version,
        )

    def _random_copy(self, what: str) -> bool:
        """Read from here on a copy of the dataset that reads any record, when its format
        makes one (a deflated npz: its members stored): True if it did."""
        from .random_access import RandomAccessCopy

        copy = RandomAccessCopy(self.path, self.format, what)
        if copy.path is None:
            return False
        self.close()
        self._read_path, self._copy = copy.path, copy
        reader = self.reader()
        args = () if self._range_bytes is None else (self._range_bytes,)
        self.ranges = reader.record_ranges(self.split, *args)
        self.random_access, self.sequential_reason = True, None
        return True

    def layout(self, shuffle: str) -> GlobalLayout:
        """How ``shuffle`` ("global" or "block") orders and deals an epoch of this split:
        "global" over the units a read fetches whole (each record alone where it is
        read alone: a uniform permutation), "block" over the record ranges."""
        if shuffle == "block":
            units = np.array([0, *(b for _, b in self.ranges)], np.int64)
            return GlobalLayout.of(self.count, units, self.spec.record_bytes, BLOCK_RANGES)
        units = self.reader().record_units(self.split)
        return GlobalLayout.of(self.count, units, self.spec.record_bytes, WINDOW_UNITS)

    def kinds(self) -> dict[str, Any]:
        """The kind of each field read, by name (what a record of it is)."""
        return {name: self.spec.fields[name].kind for name in self.fields}

    @property
    def count(self) -> int:
        return self.spec.count

    def reader(self) -> Any:
        """This process's reader, opened on first use. In a DataLoader worker (a process
        other than the one that made this source) a format that decodes on a pool of
        threads gets one thread: the workers are the parallelism, and N workers each
        with a pool of all cores' threads only contend (measured on Parquet: 6.7 s an
        epoch with pools, 5.5 s with one thread each)."""
        if self._reader is None or self._pid != os.getpid():
            from ..registry import get_codec_class
            from ..sources.opening import open_reader

            options: dict[str, Any] = {"follow_links": self.follow_links}
            if self.version is not None:
                options["version"] = self.version
            cls = get_codec_class(self.format)
            has_workers = dataclasses.is_dataclass(cls.Options) and any(
                f.name == "workers" for f in dataclasses.fields(cls.Options)
            )
            if os.getpid() != self._home and has_workers:
                options["workers"] = 1
            self._reader = open_reader(self._read_path, format=self.format, **options)
            self._pid = os.getpid()
            if self.cache_dir is not None:
                self._reader.shard_cache = self._cache = self._shard_cache(self._reader)
        return self._reader

    def _shard_cache(self, reader: Any) -> ShardCache:
        from ..sharding import ShardedDirectoryReader
        from ..sharding.cache import ShardCache, check_apart

        if not is_url(self.path):
            raise ValueError(
                f"cache_dir= keeps local copies of shards read from object storage; "
                f"{self.path} is on this machine already"
            )
        if not isinstance(reader, ShardedDirectoryReader):
            from ..registry import codecs_with

            sharded = ", ".join(codecs_with(lambda c: c.sharded))
            raise ValueError(
                f"cache_dir= caches the shard files of a sharded format ({sharded}); "
                f"{self.path} is {self.format}"
            )
        assert self.cache_dir is not None
        shards = [s.path for shards in reader.shards.values() for s in shards]
        check_apart(self.cache_dir, [self.path, *shards])
        return ShardCache(self.cache_dir, self.cache_limit)

    def close(self) -> None:
        if self._reader is not None and self._pid == os.getpid():
            self._reader.close()
            if self._cache is not None:
                self._cache.close()
        self._reader = self._cache = None

    def remove_copy(self) -> None:
        """Remove the random-access copy this source made, if any (reads stop there)."""
        if self._copy is not None:
            self.close()
            self._copy.close()
            self._read_path, self._copy = self.path, None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"], state["_pid"], state["_cache"] = None, -1, None
        state["_copy"] = None  # the process that made the copy removes it, not its workers
        return state

    def batches(self, start: int, stop: int, rows: int | None = None) -> Iterator[Batch]:
        """Records ``start:stop`` as batches; with ``on_error="skip"`` a record that
        does not read is counted in ``skipped``, logged, and left out."""
        rows = rows or max(1, stop - start)
        pos = start
        while pos < stop:
            try:
                for batch in self._read(pos, stop, rows):
                    pos += len(next(iter(batch.values())))
                    yield batch
                return
            except CodecIOError as e:
                if self.on_error == "raise":
                    raise
                if not self.random_access:
                    # A deflated npz member is checked as a whole (one CRC-32 at its end):
                    # the records already handed out are as suspect as the rest, and
                    # leaving out "the" bad one would pass the others on silently.
                    raise CodecIOError(
                        f"{e}; on_error='skip' cannot leave out single records of a member "
                        "that only streams"
                    ) from None
            # Somewhere in the batch that failed: isolate the bad record one
            # record at a time, then go back to whole batches after it.
            while pos < stop:
                try:
                    single = list(self._read(pos, pos + 1, 1))
                except CodecIOError as e:
                    self._skip(pos, e)
                    pos += 1
                    break
                pos += 1
                yield from single

    def read_records(self, indexes: np.ndarray) -> tuple[Batch, np.ndarray]:
        """The records at positions ``indexes`` (in that order) and the positions they
        are of: all of ``indexes``, or with ``on_error="skip"`` those that read (each
        record that does not is counted in ``skipped``, logged, and left out)."""
        reader = self.reader()
        try:
            return reader.read_records(self.split, indexes, self.fields), indexes
        except CodecIOError:
            if self.on_error == "raise":
                raise
        kept, parts = [], []
        for p in np.unique(indexes).tolist():  # isolate the bad records, one at a time
            try:
                parts.append(reader.read_records(self.split, [p], self.fields))
            except CodecIOError as e:
                self._skip(p, e)
                continue
            kept.append(p)
        return _positions(reader, self.split, self.fields, parts, kept, indexes)

    def _read(self, start: int, stop: int, rows: int) -> Iterator[Batch]:
        return self.reader().iter_batches(
            self.split, fields=self.fields, start=start, stop=stop, batch_rows=rows
        )

    def _skip(self, record: int, error: Exception) -> None:
        self.skipped += 1
        message = f"skipped record {record} of split {self.split!r}: {error}"
        if len(self.errors) < _KEEP_ERRORS:
            self.errors.append(message)
        _log.warning("%s", message)


def _positions(
    reader: Any, split: str, fields: list[str], parts: list[Batch], kept: list[int], asked: Any
) -> tuple[Batch, np.ndarray]:
    """Single records read at sorted positions ``kept``, as the kept ones of ``asked``
    in the order asked."""
    from ..abc import take_records
    from ..model import concat_columns, empty_column

    spec = reader.split(split)
    wanted = np.asarray(kept, np.int64)
    asked = np.asarray(asked, np.int64)
    order = asked[np.isin(asked, wanted)]
    if not parts:
        return {n: empty_column(spec.fields[n].kind) for n in fields}, order
    cols = {n: concat_columns(spec.fields[n].kind, [p[n] for p in parts]) for n in fields}
    return take_records(cols, wanted, order), order
