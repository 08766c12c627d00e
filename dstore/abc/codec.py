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
  (``dstore.engine.run`` runs them locally, resumes them, or sends them to Dask).
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
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import CodecIOError, OptionError, UnsupportedDtypeError
from ..model import Kind, Ragged, Tensor
from ..model.attrs import schema_only_notes
from ..model.schema import Schema
from ..options import options_json, parse_bool, parse_options
from .reader import Reader
from .writer import Shard, ShardWriter, Writer

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Codec"]


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
    #: For a format that is not ``fork_safe``: the module whose use starts that thread
    #: pool. A process that has not imported it has no pool to lose, so its DataLoader
    #: workers may be forked (a spawned worker costs seconds before its first batch).
    #: None: always 'spawn'.
    fork_unsafe_module: ClassVar[str | None] = None
    #: When this format's files read single records at random (``ds[i]``): "" always,
    #: else the condition ("uncompressed"); messages that suggest a random-access form
    #: list the formats from these.
    random_access_when: ClassVar[str] = ""
    #: True when this format's records are frames that ``dstore index`` (:meth:`frame_files`,
    #: :meth:`frame_lengths`) indexes in files others wrote: ``index --from`` offers these.
    frame_indexes: ClassVar[bool] = False
    #: True when records can be added to an existing dataset of this format without
    #: rewriting what it holds (:meth:`open_appender`: zarr grows its arrays, only the
    #: last partial chunk of each rewritten, atomically). Sharded formats append through
    #: their container (new shards, a new version); every other format appends by
    #: writing the whole dataset again beside it and renaming it over.
    appends_in_place: ClassVar[bool] = False
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
    def random_access_copy(cls, path: str, folder: str) -> str | None:
        """A copy of the dataset at ``path`` that reads single records at random, written
        in ``folder`` (the caller's: it removes it), for a file of this format that only
        streams; None when the format has none (:attr:`random_access_when` says what does)."""
        return None

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
    def card_inside(cls, path: str, *, make_room: bool = False) -> bool:
        """True when a Croissant card (``croissant.json``) may sit in the root of the
        folder dataset at ``path`` without this format's readers (its own library's
        included) taking it for data or warning of it; else the card goes beside the
        folder (``PATH.croissant.json``). ``make_room``: the format may first make it so in
        a dataset dstore wrote (zarr writes the listing its readers take instead of the
        folder's), without changing a value it holds."""
        return True

    @classmethod
    def trailing_lines(cls, path: str) -> int:
        """Lines at the end of the data file at ``path`` that hold no record though a
        reader of its lines as records (pandas, mlcroissant) takes them for one; a card
        says so. 0 for a format whose files are no lines of records."""
        return 0

    @classmethod
    def frame_files(cls, path: str, follow_links: bool = False) -> list[str]:
        """The files of this format at ``path`` (a file, a folder, a glob) that
        :meth:`frame_lengths` indexes, none linked in from outside the folder unless
        ``follow_links``; formats without framed records refuse."""
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

    def planning_records(self, schema: Schema) -> int:
        """Records :meth:`plan_shards` encodes (once more than the write does) to size the
        shards of ``schema``; 0 when nothing is encoded twice. ``dstore bench`` counts
        them when it extrapolates a small sample's write time to the whole data."""
        return 0

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        raise NotImplementedError(f"{self.name}: not a sharded format")

    def shard_file(self, split: str, index: int, total: int) -> str:
        """The file name of shard ``index`` of ``total`` of ``split`` (sharded formats)."""
        raise NotImplementedError(f"{self.name}: not a sharded format")

    def open_appender(self, path: str, schema: Schema, after: Schema) -> Writer:
        """A :class:`Writer` adding records of ``schema`` (as stored) to the dataset at
        ``path`` in place (``appends_in_place``); its ``close`` commits ``after``, the
        dataset's schema once they are in, and until then readers see the dataset as it was."""
        raise NotImplementedError(f"{self.name}: appends by rewriting, not in place")

    @abstractmethod
    def open_reader(self, path: str) -> Reader: ...

    @abstractmethod
    def open_writer(self, path: str, schema: Schema) -> Writer: ...
