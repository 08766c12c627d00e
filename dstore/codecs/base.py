"""The interface every storage backend implements.

Contract:

* A :class:`Codec` is configured once with keyword options (strings from the
  command line are parsed by :meth:`Codec.parse_options`); ``get_config()`` is
  JSON and ``from_config(get_config())`` rebuilds an equal codec.
* ``open_reader(path)`` returns a :class:`Reader`: ``.schema`` plus
  ``iter_batches(split, ...)`` yielding dicts of arrays in record order
  (a reader implements ``_iter`` over an already validated record range). Reading
  never needs a file written by dstore: foreign files are read by inspection.
* ``open_writer(path, schema)`` returns a :class:`Writer`. Splits are written one
  after another in schema order, each as batches in record order, then
  ``close()`` finalises. The writer writes exactly at ``path``, which the
  caller (``dstore.api``) makes a temporary name and renames on success, so a
  codec never has to handle atomicity itself; ``abort()`` only releases handles.
* ``owns(path)`` answers whether an existing ``path`` is recognisably an
  output of this format (checked by structure, never by name alone): only
  then does ``overwrite=True`` replace it (``dstore.output``). The default
  answers False, so a codec that does not declare it never has anything
  deleted on its behalf. A folder format also lists in ``foreign_files(path)``
  the files it did not write there: those are deleted only with
  ``overwrite="foreign"``.
* A codec whose output is a set of independent files (TFRecord shards) also
  implements ``plan_shards`` and ``shard_writer``: the conversion is then
  planned as :class:`Shard` record ranges that any process can write on its
  own, committed by ``ShardWriter.commit`` writing the manifest last
  (``dstore.sharding.run`` runs them locally, resumes them, or sends them to Dask).
  The folder, its shard names, ``.part`` commits, manifest and resume journal
  are the sharded-directory container's (``dstore.sharding``); a
  sharded codec only encodes records.

Why two write protocols remain (for now): a :class:`Writer` is *pushed* one
batch at a time by the engine, while a :class:`ShardWriter` *pulls* the records
of one planned shard, which is what lets a shard be rewritten alone on resume
or on a Dask worker. A sharded codec's ``open_writer`` would have to turn the
push into pulls (a thread per shard, or buffering a whole shard of up to
``shard_mb`` of records) just to serve callers the engine already routes
through ``plan_shards``; so such a codec's ``open_writer`` refuses with
:class:`NotImplementedError`, and :func:`dstore.api.convert.write_dataset` picks
the protocol from ``plan_shards`` returning a plan or None.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import fs
from ..errors import CodecIOError, OptionError, SchemaError, UnsupportedDtypeError
from ..integrity import FieldHasher, stored_checksums
from ..model import Column, Kind, Ragged, Tensor, concat_columns
from ..model.attrs import schema_only_notes
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec, batch_rows_for
from ..options import options_json, parse_bool, parse_options  # parse_bool: re-exported

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "RANGE_BYTES",
    "Codec",
    "Reader",
    "Shard",
    "ShardWriter",
    "WrappingReader",
    "Writer",
    "even_ranges",
    "is_regular_file",
    "parse_bool",
    "read_at",
]

#: Decoded bytes a record range of :meth:`Reader.record_ranges` aims at: big
#: enough to amortise opening a shard or chunk, small enough to shuffle and
#: to balance between training workers.
RANGE_BYTES = 8 * 1024 * 1024


def even_ranges(start: int, stop: int, rows: int) -> list[tuple[int, int]]:
    """``start:stop`` cut into consecutive ranges of ``rows`` records (the last may be shorter)."""
    return [(a, min(a + rows, stop)) for a in range(start, stop, max(1, rows))]


def is_regular_file(path: str) -> bool:
    """A regular file (after symlinks) or an object: never a FIFO or device, whose
    opening could block or have effects."""
    if fs.is_url(path):
        return fs.exists(path) and not fs.isdir(path)
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_at(path: str, offset: int, n: int) -> bytes:
    """Up to ``n`` bytes of a regular file from ``offset``; b"" when it cannot be read."""
    if not is_regular_file(path):
        return b""
    try:
        with fs.open_binary(path) as f:
            f.seek(offset)
            return f.read(n)
    except OSError:
        return b""


def _concat(parts: list[Column], spec: FieldSpec) -> Column:
    """One column from batches, keeping the field's dtype (numpy would make it native-endian)."""
    return concat_columns(spec.kind, parts)


class Reader(ABC):
    """Reads one dataset; a context manager."""

    schema: Schema
    path: str
    #: True when any record range can be read without reading what precedes it
    #: (False for compressed npz members, which only stream).
    random_access: bool = True
    #: Why one record cannot be read without reading those before it in its shard,
    #: or None when it can: a map-style training dataset (``ds[i]``) needs it.
    sequential_reason: str | None = None
    #: what the reader could not carry (attributes of unsupported types), for the summary
    notes: Sequence[str] = ()

    def iter_batches(
        self,
        split: str,
        *,
        fields: Sequence[str] | None = None,
        start: int = 0,
        stop: int | None = None,
        batch_rows: int | None = None,
        verify: bool = True,
    ) -> Iterator[Batch]:
        """Yield batches of records ``start:stop`` of ``split`` in order.

        A read of whole fields is checked against the sha256 dstore stored
        when it wrote them (``dstore.integrity``): damage that decodes without
        error (a blosc chunk has no checksum) raises at the end of the read,
        as a zip member's CRC does."""
        spec, start, stop = self._range(split, start, stop)
        names = list(fields) if fields is not None else list(spec.fields)
        batches = self._iter(spec, names, start, stop, self._rows(spec, batch_rows))
        expected = stored_checksums(self.schema)
        if verify and expected is not None and start == 0 and stop == spec.count:
            return self._verified(batches, spec, names, expected.get(split, {}))
        return batches

    def _verified(
        self,
        batches: Iterator[Batch],
        spec: SplitSpec,
        names: list[str],
        expected: Mapping[str, Any],
    ) -> Iterator[Batch]:
        hasher = FieldHasher(Schema({spec.name: spec}))
        for batch in batches:
            hasher.update(spec.name, batch)
            yield batch
        got = hasher.hexdigests()[spec.name]
        for name in names:
            if name in expected and expected[name] != got[name]:
                raise CodecIOError(
                    f"{self.path}: split {spec.name!r}, field {name!r}: the values differ from the "
                    "sha256 stored when they were written (corrupt data)"
                )

    @abstractmethod
    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        """Batches of at most ``rows`` records of fields ``names``, records ``start:stop``."""

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Contiguous record ranges covering ``split`` in order, each cheap to read alone.

        Training readers (``dstore.readers``) hand whole ranges to workers, so
        a range follows the storage's own units (a TFRecord shard, whole
        zarr/HDF5 chunks) and holds about ``target_bytes`` of decoded records.
        The default cuts equal blocks (npz members are plain row ranges)."""
        spec = self.split(split)
        return even_ranges(0, spec.count, max(1, target_bytes // max(1, spec.record_bytes)))

    def check_ranges(self, split: str) -> None:
        """Check what reads of record ranges of ``split`` do not (an npz member's CRC-32
        covers the whole member), raising the error a whole read would. For a
        conversion whose shards are written by processes that each read a range."""
        return None  # most formats check each range as they read it

    def read(self, split: str, fields: Sequence[str] | None = None) -> dict[str, Column]:
        """Whole split in memory (convenience for small data and tests): an ndarray per
        dense field, values + offsets (:class:`~dstore.model.VarColumn`) per other field."""
        spec = self.split(split)
        names = list(fields) if fields is not None else list(spec.fields)
        parts: dict[str, list[Column]] = {n: [] for n in names}
        for batch in self.iter_batches(split, fields=names):
            for n in names:
                parts[n].append(batch[n])
        return {n: _concat(p, spec.fields[n]) for n, p in parts.items()}

    def split(self, name: str) -> SplitSpec:
        try:
            return self.schema.splits[name]
        except KeyError:
            raise SchemaError(
                f"{self.path}: no split {name!r}; splits: {', '.join(self.schema.splits)}"
            ) from None

    def describe(self) -> list[str]:
        """Codec-specific lines for ``dstore info`` (storage details)."""
        return []

    def stored_record_bytes(self, split: str) -> int:
        """Average stored bytes per record of ``split`` when the reader knows it cheaply
        (0 otherwise): batches of large varying records (80 MiB byte strings) are then
        sized by it, not by a nominal size that would put thousands in one batch. A
        wrapping reader (``inner``: decoded images, dtype views, dropped fields) answers
        for what it wraps."""
        inner = getattr(self, "inner", None) or getattr(self, "_inner", None)
        if isinstance(inner, Reader) and split in inner.schema.splits:
            return inner.stored_record_bytes(split)
        return 0

    def lossy_fields(self, split: str) -> Mapping[str, Any]:
        """Fields of ``split`` stored in a lossy image encoding, each with its
        :class:`~dstore.codecs._imagecodec.LossyImage`: ``verify`` measures their error
        against the bound it declares instead of comparing bits."""
        return {}

    def check_integrity(self) -> list[tuple[bool, str]]:
        """Checks of the stored bytes beyond decoding (checksums in a manifest): (ok, what)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook: readers without handles keep it
        """Release file handles."""

    def _range(self, split: str, start: int, stop: int | None) -> tuple[SplitSpec, int, int]:
        spec = self.split(split)
        stop = spec.count if stop is None else min(stop, spec.count)
        if start < 0 or start > stop:
            raise ValueError(f"bad record range {start}:{stop} for split {split!r}")
        return spec, start, stop

    @staticmethod
    def _rows(spec: SplitSpec, batch_rows: int | None) -> int:
        return batch_rows if batch_rows else batch_rows_for(spec)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WrappingReader(Reader):
    """A reader over another (``inner``): its records, some fields changed or left out
    (decoded images, lossy-stored values, dropped fields, metered sizes). The storage
    facts (path, random access, record ranges, integrity) and anything codec-specific
    (``encodings``, ``shards``...) are ``inner``'s; a subclass sets ``schema`` and
    implements ``_iter``."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner
        self.path = inner.path
        self.random_access = inner.random_access
        self.sequential_reason = inner.sequential_reason

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        return self.inner.record_ranges(split, target_bytes)

    def check_integrity(self) -> list[tuple[bool, str]]:
        return self.inner.check_integrity()

    def check_ranges(self, split: str) -> None:
        self.inner.check_ranges(split)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # codec-specific extras (encodings, shards, ...)
        return getattr(self.__dict__["inner"], name)


class Writer(ABC):
    """Writes one dataset at a path chosen by the caller."""

    def __init__(self, path: str, schema: Schema) -> None:
        self.path = path
        self.schema = schema

    @abstractmethod
    def write(self, split: str, batch: Batch) -> None:
        """Append a batch of records to ``split`` (splits arrive in schema order)."""

    @abstractmethod
    def close(self) -> None:
        """Flush everything and finalise metadata; after this the output is complete."""

    def abort(self) -> None:  # noqa: B027 - optional hook: writers without handles keep it
        """Release handles after a failure; the caller deletes the output."""

    def write_regions(self, submit: Callable[..., None]) -> None:
        """Hand the writing of whole chunks to ``submit(function, *args)`` -- e.g. one
        Dask task each -- instead of writing them here (codecs with ``region_writes``)."""
        raise NotImplementedError(f"{type(self).__name__}: writes in one process")


@dataclasses.dataclass(frozen=True)
class Shard:
    """One independently writable output file: records ``start:stop`` of ``split``."""

    split: str
    index: int
    start: int
    stop: int
    file: str  # name relative to the output root

    @property
    def records(self) -> int:
        return self.stop - self.start


class ShardWriter(ABC):
    """Writes shards of a planned output; picklable, so a Dask worker can run it."""

    #: threads a shard's encoding uses (the format's ``workers`` option; 0: one per core)
    workers: int = 0

    def gil_bound(self, split: str) -> bool:
        """True when encoding ``split``'s records holds the GIL most of the time (fpng's
        binding does), so that its shards write faster each in a worker process of its
        own than on threads sharing one interpreter."""
        return False

    @abstractmethod
    def write_shard(
        self,
        root: str,
        shard: Shard,
        batches: Iterator[Batch],
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Write one shard from its records; return its manifest entry
        (``file``, ``records``, ``bytes``, ``sha256``). ``root`` is a local
        folder or an fsspec URL. ``progress(n)`` is called as records are written."""

    @abstractmethod
    def commit(
        self, root: str, shards: list[dict[str, Any]], run: Mapping[str, Any] | None = None
    ) -> None:
        """Write the manifest for all shards (in plan order): the output is then complete.
        ``run`` (the source's fingerprint and a digest of all that fixed the bytes) is
        stored with it, so a later ``--resume`` can recognise this command's output."""

    def fingerprint(self) -> dict[str, str]:
        """Libraries (with versions) whose output the shard bytes depend on, beyond dstore's."""
        return {}


class Codec(ABC):
    """A storage format: a name, the extensions it claims, reader and writer."""

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]] = ()
    #: True when paths may be fsspec URLs (s3://, memory://).
    supports_urls: ClassVar[bool] = False
    #: True when the output is cut into shards any process writes alone
    #: (:meth:`plan_shards`): resumable, distributable on Dask.
    sharded: ClassVar[bool] = False
    #: True when the writer creates every array at its final shape and can hand its
    #: chunk-aligned blocks to other processes (:meth:`Writer.write_regions`): a Dask
    #: client writes them as tasks. A single-file format (one writer) leaves it False.
    region_writes: ClassVar[bool] = False
    #: True when one dataset of this format is a folder of its files (TFRecord shards),
    #: so ``--from`` it on a folder of them reads one dataset, not many sources.
    reads_folders: ClassVar[bool] = False
    #: Field kinds this format stores (the shared suite tests each one).
    kinds: ClassVar[tuple[type[Kind], ...]] = (Tensor,)
    #: True when encoded images (PNG/JPEG bytes) are stored as they came; a conversion
    #: to any other format decodes them to pixels unless asked to keep them encoded
    keeps_encoded_images: ClassVar[bool] = False
    #: False when a ragged record is stored as its values only (HDF5 vlen, a TFRecord
    #: feature), which cannot say how many rows of an empty inner shape it had
    keeps_empty_rows: ClassVar[bool] = True
    #: The dtype bfloat16 values are stored as ("uint16": their bits; "float32": widened,
    #: exact), the schema recording them as bfloat16; None refuses ``--dtype bfloat16``.
    bfloat16_as: ClassVar[str | None] = None
    #: True when TensorFlow reads this format's files itself (``tf.data.TFRecordDataset``):
    #: ``to_tf_dataset`` then builds a native pipeline instead of a Python generator.
    tensorflow_native: ClassVar[bool] = False
    #: False when the format's library cannot be used in a process forked after it was
    #: used (a C++ thread pool, :mod:`dstore.sharding.native`): DataLoader workers then
    #: need 'spawn'.
    fork_safe: ClassVar[bool] = True
    #: When this format's files read single records at random (``ds[i]``): "" always,
    #: else the condition ("uncompressed"); messages that suggest a random-access form
    #: list the formats from these.
    random_access_when: ClassVar[str] = ""
    #: True when values are stored as text (JSON): large arrays are slow and big there,
    #: so the demo's image tiles skip it.
    stores_text: ClassVar[bool] = False
    #: The media type of this format's data files, as Croissant's ``encodingFormat``
    #: gives it (a MIME type, or for a format without one the URL of its description);
    #: Croissant readers (mlcroissant) choose how to read a file by it.
    media_type: ClassVar[str | None] = None
    #: True when an output folder is one the Hugging Face Hub and ``datasets`` read as it
    #: is (Parquet in the Hub's layout): it gets the Hub's ``README.md`` card (dstore.card).
    hub_card: ClassVar[bool] = False
    #: True when the format's readers take every file in an output folder for part of
    #: the data (zarr warns of each): its Croissant card goes beside it
    #: (``PATH.croissant.json``, ``dstore card``), never inside, and not with the conversion.
    card_beside: ClassVar[bool] = False
    #: Option dataclass; its fields are the ``-o KEY=VALUE`` options.
    Options: ClassVar[type] = type("Options", (), {})

    def __init__(self, **options: Any) -> None:
        # A choice of the reading, valid for every format, not one codec's ``-o``
        # option: it travels with the source's options (``src_options``, a Dask
        # worker's SourceRef, ``dstore.open(..., follow_links=True)``) and is kept out
        # of ``get_config``, so manifests and resume fingerprints do not change.
        follow = options.pop("follow_links", False)
        try:
            #: read what links lead to outside the input (HDF5 external links and
            #: virtual datasets, zarr symlinks, folder links in a glob); default: refuse
            self.follow_links = parse_bool(follow)
        except ValueError as e:
            raise OptionError(f"{self.name}: option follow_links={follow!r}: {e}") from None
        self.options = self.parse_options(options)

    @classmethod
    def path_options(cls, path: str) -> dict[str, Any]:
        """Options a path's name implies (``x.tfrecords.gz``: gzip); explicit options win."""
        return {}

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> Any:
        """Option strings (``-o KEY=VALUE``) or typed values -> the codec's frozen
        option dataclass, read by each field's type (:mod:`dstore.options`).

        Raises :class:`~dstore.errors.OptionError` naming the codec, key and value."""
        if not dataclasses.is_dataclass(cls.Options):
            if options:
                raise OptionError(f"{cls.name}: takes no options, got {sorted(options)}")
            return cls.Options()
        return parse_options(cls.Options, options, cls.name)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"name": self.name}
        if dataclasses.is_dataclass(self.options):
            # each value as the text that reads back as it: JSON, and from_config-able
            config.update(options_json(self.options))
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        options = {k: v for k, v in config.items() if k != "name"}
        return cls(**options)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.get_config()})"

    @classmethod
    def owns(cls, path: str) -> bool:
        """True when ``path`` (which exists) is recognisably a dataset of this
        format, so that ``overwrite=True`` may replace it. Decided from the
        content (magic bytes, metadata files), never from the name; must not
        follow the path into anything it would not read as this format."""
        return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files inside the dataset at ``path`` (which :meth:`owns`) that this format
        did not write there, relative to ``path`` (a user's notes in an output
        folder): ``overwrite=True`` refuses to delete them, ``overwrite="foreign"``
        deletes them too. A single-file format has none."""
        return []

    @classmethod
    def frame_files(cls, path: str) -> list[str]:
        """The files of this format at ``path`` (a file, a folder, a glob) that
        :meth:`frame_lengths` indexes; formats without framed records refuse."""
        raise CodecIOError(f"{path}: {cls.name} files have no record index to write")

    @classmethod
    def frame_lengths(cls, path: str) -> list[int]:
        """The byte length of each record's frame in the file at ``path``, in order
        (what a ``<file>.idx`` lists); refuses a file that cannot be entered mid-way."""
        raise CodecIOError(f"{path}: {cls.name} files have no record index to write")

    def check_schema(self, schema: Schema) -> None:
        """Raise UnsupportedDtypeError before any byte is written."""
        for split in schema.splits.values():
            for spec in split.fields.values():
                where = f"{self.name}: split {split.name!r}, field {spec.name!r}"
                if not isinstance(spec.kind, self.kinds):
                    raise UnsupportedDtypeError(
                        f"{where}: {spec.kind.describe()} fields are not supported by this format "
                        f"(it stores {', '.join(k.tag for k in self.kinds)})"
                    )
                if not self.supports(spec.dtype):
                    raise UnsupportedDtypeError(f"{where}: cannot store dtype {spec.dtype}")
                kind = spec.kind
                if isinstance(kind, Ragged) and 0 in kind.inner_shape and not self.keeps_empty_rows:
                    # Records (2, 0) and (3, 0) were written, and could not be read
                    # back (found by a hostile-input pass): refuse before any byte.
                    raise UnsupportedDtypeError(
                        f"{where}: ragged records of inner shape {kind.inner_shape} hold no "
                        f"values, and {self.name} stores a record as its values only, so how "
                        "many rows each has would be lost; write zarr or npz"
                    )

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biufc"

    def attribute_notes(self, schema: Schema) -> list[str]:
        """What this format does with the schema's attributes and fill values, for the
        summary. The default is a format with neither (dstore's schema keeps them)."""
        return schema_only_notes(schema, self.name)

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard] | None:
        """Record ranges of the output's files, or None for single-writer formats.

        ``sample(split, n)`` returns the first ``n`` records of a split as they
        will be written; the plan must depend only on the data and options, so
        that every run (local, resumed, distributed) cuts the same shards."""
        return None

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        raise NotImplementedError(f"{self.name}: not a sharded format")

    @abstractmethod
    def open_reader(self, path: str) -> Reader: ...

    @abstractmethod
    def open_writer(self, path: str, schema: Schema) -> Writer: ...
