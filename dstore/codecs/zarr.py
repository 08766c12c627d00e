"""zarr v3 groups (blosc), and reading any zarr v2/v3 group, array or zip store.

Written layout: one group per split, one array per field, chunked along the
record axis (about ``chunk_mb`` per chunk), blosc zstd level 3 with byte
shuffle by default; the dstore schema sits in the root group's attributes.
Arrays are created at their final shape up front and filled chunk-aligned,
batch by batch. Reading walks groups: arrays in the root form the default
split (label-maker names like ``x_train`` map to splits), each sub-group is a
split.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import zipfile
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCname, BloscCodec, BloscShuffle, Crc32cCodec, ZstdCodec
from zarr.core.dtype import VariableLengthBytes, VariableLengthUTF8

from .. import fs, links
from ..errors import CodecIOError, DstoreError, SchemaError, UnsupportedDtypeError
from ..model import (
    Bytes,
    Column,
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    Tensor,
    VarColumn,
    kind_from_json,
    names,
)
from ..model.attrs import encode, fill_value, for_zarr, group_attrs, is_missing, target_notes
from ..model.schema import (
    DEFAULT_SPLIT,
    Batch,
    FieldSpec,
    Schema,
    check_dtype,
    split_key,
    stored_paths,
)
from ..output import fmt_bytes
from ..parallel import default_workers, ordered_map
from ._chunked import (
    AlignedAppender,
    ArrayTreeReader,
    chunk_rows,
    max_chunk_bytes,
    max_fill_bytes,
)
from ._imagecodec import LOSSY_FORMATS, LossyImage, check_quality, image_fields
from ._zarr_imagecodec import lossy_of, zarr_codec  # registers the image codecs with zarr
from .base import Codec, Reader, Writer, is_regular_file

__all__ = ["ZarrCodec"]

_ATTR = "dstore_schema"


@dataclass(frozen=True)
class ZarrOptions:
    cname: str = field(
        default="zstd", metadata={"help": "blosc compressor: zstd, lz4, lz4hc, blosclz, zlib"}
    )
    clevel: int = field(default=3, metadata={"help": "blosc level 0..9"})
    shuffle: str = field(
        default="shuffle", metadata={"help": "blosc filter: shuffle, bitshuffle, noshuffle"}
    )
    chunk_mb: float = field(default=1.0, metadata={"help": "target chunk size in MiB"})
    shard_chunks: int = field(
        default=0,
        metadata={"help": "chunks per shard file (0 = no sharding): many small chunks, few files"},
    )
    image_codec: str = field(
        default="none",
        metadata={
            "help": "image fields as none (blosc, lossless), jpeg, webp or jxl (imagecodecs, "
            "one chunk per image; zarr users open them with imagecodecs, see docs/formats/zarr.md)"
        },
    )
    quality: int = field(default=90, metadata={"help": "quality 1..100 of image_codec"})

    def validate(self) -> None:
        if self.cname not in ("zstd", "lz4", "lz4hc", "blosclz", "zlib"):
            raise ValueError(f"zarr: unknown blosc cname {self.cname!r}")
        if not 0 <= self.clevel <= 9:
            raise ValueError(f"zarr: clevel must be 0..9. Got {self.clevel} instead.")
        if self.shuffle not in ("shuffle", "bitshuffle", "noshuffle"):
            raise ValueError(
                f"zarr: shuffle must be shuffle, bitshuffle or noshuffle. Got {self.shuffle!r}."
            )
        if self.chunk_mb <= 0:
            raise ValueError("zarr: chunk_mb must be > 0")
        if self.image_codec not in ("none", *LOSSY_FORMATS):
            raise ValueError(
                f"zarr: image_codec must be none, {', '.join(LOSSY_FORMATS)}. "
                f"Got {self.image_codec!r} instead."
            )
        check_quality(self.quality, "zarr")

    def lossy(self) -> LossyImage | None:
        return None if self.image_codec == "none" else LossyImage(self.image_codec, self.quality)


def lossy_fields(schema: Schema, options: ZarrOptions) -> dict[tuple[str, str], LossyImage]:
    """The image fields ``image_codec`` applies to, each checked it can take it (one line
    naming the field otherwise, before anything is written)."""
    lossy = options.lossy()
    out: dict[tuple[str, str], LossyImage] = {}
    if lossy is None:
        return out
    for split in schema.splits.values():
        for spec in split.fields.values():
            kind = spec.kind
            if isinstance(kind, Image) and kind.encoding == "raw" and not spec.dense:
                raise UnsupportedDtypeError(
                    f"zarr: split {split.name!r}, field {spec.name!r} holds images of varying "
                    f"size: image_codec={lossy.format} needs one chunk per image of one size; "
                    f"use TFRecord with -o image_codec={lossy.format}"
                )
    for split_name, spec in image_fields(schema):
        lossy.check_field(spec, f"zarr: split {split_name!r}", lossless="none", images_option=False)
        out[(split_name, spec.name)] = lossy
    return out


def _codecs_json(metadata: Any) -> str:
    """An array's codec chain as the JSON zarr stores in its metadata, not Python reprs."""
    if metadata.zarr_format >= 3:
        chain = [c.to_dict() for c in metadata.codecs]
    else:
        chain = [f.get_config() for f in metadata.filters or ()]
        if metadata.compressor is not None:
            chain.append(metadata.compressor.get_config())
    return json.dumps(chain, default=str)


_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}

#: Every array dstore writes ends its codec chain in zarr v3's ``crc32c`` codec: each
#: chunk file carries the CRC32C of its bytes, which zarr checks on every read, so a
#: range read of a damaged chunk fails instead of decoding garbage (blosc returns
#: its declared size even from a truncated buffer). Stores written before it read as ever.
_CRC = Crc32cCodec()
#: zarr's default compressor of variable-length and offset arrays, then the CRC
_CHECKED_ZSTD = (ZstdCodec(level=0, checksum=False), _CRC)


def _with_crc(data: bytes) -> bytes:
    """``data`` followed by its CRC32C (little-endian), as zarr's ``crc32c`` codec writes it."""
    import google_crc32c  # zarr's own dependency for this codec

    return data + int(google_crc32c.value(data)).to_bytes(4, "little")


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype


#: a field whose records vary and is not text: a group of these arrays (TensorFlow's RaggedTensor names)
_VALUES, _ROW_SPLITS, _SHAPES = "values", "row_splits", "shapes"
#: a list of byte strings per record: strings + 1 offsets of each string into the uint8 values
_VALUE_SPLITS = "value_splits"
_KIND_ATTR = "dstore_kind"
#: records per chunk of a variable-length string/bytes array
_VAR_CHUNK = 4096


class _VarArrays:
    """Where a field whose records vary is written.

    Strings are one array of zarr's variable-length ``string`` data type:
    ``zarr.open`` users get one ``str`` per record. Everything else -- ragged
    values, bytes, encoded images, raw images of varying size -- is a group
    holding ``values`` (every record's values, appended), ``row_splits``
    (records + 1 int64 offsets into them) and for raw images ``shapes``; the
    group's ``dstore_kind`` attribute says what they are. (zarr-python's
    variable-length ``bytes`` type has no zarr v3 specification yet and warns
    that other zarr libraries may not read it; plain uint8 values can.)

    A list of strings per record is a group too: ``values`` is a ``string``
    array of every record's strings in order and ``row_splits`` counts strings
    (record ``i``'s list is ``values[row_splits[i]:row_splits[i+1]]``). For a
    list of byte strings ``values`` is uint8 and ``value_splits`` (strings + 1
    offsets into it) cuts the strings."""

    def __init__(
        self, text: Any = None, values: Any = None, splits: Any = None, shapes: Any = None
    ) -> None:
        self.text, self.values, self.splits, self.shapes = text, values, splits, shapes
        self.value_splits: Any = None
        self.pos = 0
        self.kind: Kind | None = None

    @classmethod
    def create(
        cls, group: Any, count: int, spec: FieldSpec, compressor: Any, name: str | None = None
    ) -> _VarArrays:
        name = names.escape(spec.name) if name is None else name
        chunks = (max(1, min(count, _VAR_CHUNK)),)
        kind = spec.kind
        if isinstance(kind, String):
            out = cls(
                text=group.create_array(
                    name,
                    shape=(count,),
                    dtype=VariableLengthUTF8(),
                    chunks=chunks,
                    compressors=_CHECKED_ZSTD,
                )
            )
        else:
            sub = group.create_group(name, attributes={_KIND_ATTR: kind.to_json()})
            inner = spec.shape if isinstance(kind, Ragged) else ()
            rows = max(
                1, (1 << 20) // max(1, int(np.prod(inner, dtype=np.int64)) * spec.dtype.itemsize)
            )
            if isinstance(kind, StringList) and kind.text:
                values = sub.create_array(
                    _VALUES,
                    shape=(0,),
                    dtype=VariableLengthUTF8(),
                    chunks=(_VAR_CHUNK,),
                    compressors=_CHECKED_ZSTD,
                )
            else:
                values = sub.create_array(
                    _VALUES,
                    shape=(0, *inner),
                    dtype=_native(spec.dtype),
                    chunks=(rows, *(max(1, d) for d in inner)),
                    compressors=compressor,
                    fill_value=0,
                )
            splits = sub.create_array(
                _ROW_SPLITS,
                shape=(count + 1,),
                dtype="<i8",
                chunks=(max(1, min(count + 1, 1 << 17)),),
                compressors=_CHECKED_ZSTD,
            )
            splits[0:1] = np.zeros(1, np.int64)
            shapes = None
            if isinstance(kind, Image) and kind.encoding == "raw":
                ndim = 2 if kind.channels == 0 else 3
                shapes = sub.create_array(
                    _SHAPES,
                    shape=(count, ndim),
                    dtype="<i8",
                    chunks=(max(1, min(count, 1 << 16)), ndim),
                    compressors=_CHECKED_ZSTD,
                )
            out = cls(values=values, splits=splits, shapes=shapes)
            if isinstance(kind, StringList) and not kind.text:
                out.value_splits = sub.create_array(
                    _VALUE_SPLITS,
                    shape=(1,),
                    dtype="<i8",
                    chunks=(1 << 17,),
                    fill_value=0,
                    compressors=_CHECKED_ZSTD,
                )
        out.kind = kind
        return out

    def write(self, col: VarColumn) -> None:
        n = len(col)
        if n == 0:
            return
        if self.text is not None:
            self.text[self.pos : self.pos + n] = np.array(col.to_str_list(), dtype=object)
        elif isinstance(col.values, VarColumn):
            strings = col.values
            base = (
                self.values.shape[0]
                if self.value_splits is None
                else self.value_splits.shape[0] - 1
            )
            if self.value_splits is None:
                if len(strings):
                    self.values.append(np.array(strings.to_str_list(), dtype=object))
            elif len(strings):
                self.value_splits.append(strings.offsets[1:] + self.values.shape[0])
                self.values.append(strings.values)
            self.splits[self.pos + 1 : self.pos + n + 1] = col.offsets[1:] + base
        else:
            base = self.values.shape[0]
            if len(col.values):
                self.values.append(col.values.astype(_native(col.values.dtype), copy=False))
            self.splits[self.pos + 1 : self.pos + n + 1] = col.offsets[1:] + base
            if self.shapes is not None and col.shapes is not None:
                self.shapes[self.pos : self.pos + n] = col.shapes
        self.pos += n


def _zdtype(arr: Any) -> Any:
    """zarr's data type object of an array (v3 metadata: ``data_type``; v2: ``dtype``)."""
    meta = arr.metadata
    return getattr(meta, "data_type", None) or getattr(meta, "dtype", None)


def _fixed_text(arr: Any) -> str:
    """``"U"`` or ``"S"`` for a fixed-width text or bytes array (numpy ``<U``/``S``), else "".

    Read as strings and bytes, as npz and HDF5 read them: numpy's rule drops the
    trailing NULs that pad each value to the width."""
    kind = np.dtype(arr.dtype).kind
    return kind if kind in "US" else ""


def _is_ragged_layout(group: Any) -> bool:
    """Is a group without dstore's kind attribute the ragged layout made by hand: arrays
    ``values`` and ``row_splits`` (1-d integers) and perhaps ``shapes``, nothing else?
    Any other group with such names is walked as a group (its arrays are fields): none
    is dropped and none is reinterpreted."""
    members = dict(group.members())
    if not {_VALUES, _ROW_SPLITS} <= members.keys() <= {_VALUES, _ROW_SPLITS, _SHAPES}:
        return False
    if not all(isinstance(m, zarr.Array) for m in members.values()):
        return False
    splits = members[_ROW_SPLITS]
    return splits.ndim == 1 and splits.shape[0] >= 1 and np.dtype(splits.dtype).kind in "iu"


class _RaggedGroup:
    """A ragged field's group read back: sliceable like an array of records."""

    def __init__(self, group: Any, where: str) -> None:
        self.group = group
        self.values = group[_VALUES]
        self.splits = group[_ROW_SPLITS]
        self.shapes = group.get(_SHAPES)
        self.name = self.path = group.path
        if (
            self.splits.ndim != 1
            or self.splits.shape[0] < 1
            or np.dtype(self.splits.dtype).kind not in "iu"
        ):
            raise CodecIOError(
                f"{where}: {_ROW_SPLITS!r} must be a 1-d integer array of records + 1 offsets"
            )
        self.shape = (self.splits.shape[0] - 1,)
        self.dtype = self.values.dtype
        self.ndim = 1
        self.attrs = group.attrs
        # the two ends, read now (two elements), so that info refuses what convert would
        count = (
            group[_VALUE_SPLITS].shape[0] - 1 if _VALUE_SPLITS in group else self.values.shape[0]
        )
        first, last = int(self.splits[0]), int(self.splits[-1])
        if first != 0 or last != count:
            raise CodecIOError(
                f"{where}: row splits run from {first} to {last}, not from 0 to {count} "
                "(the number of values)"
            )

    def read(self, start: int, stop: int, inner: tuple[int, ...], where: str) -> VarColumn:
        offsets = np.asarray(self.splits[start : stop + 1], dtype=np.int64)
        lo, hi = int(offsets[0]), int(offsets[-1])
        # a list of bytes counts its strings by value_splits: its values are the bytes
        count = (
            self.group[_VALUE_SPLITS].shape[0] - 1
            if _VALUE_SPLITS in self.group
            else self.values.shape[0]
        )
        # the first record starts at 0 and the last ends at the last value: values
        # before or after them would be dropped unread (found by a hostile-input pass)
        ends = (start == 0 and lo != 0) or (stop == self.shape[0] and hi != count)
        if lo < 0 or hi > count or ends or (np.diff(offsets) < 0).any():
            bad = (
                int(np.argmax(np.diff(offsets) < 0)) + start
                if (np.diff(offsets) < 0).any()
                else (start if lo != 0 or stop != self.shape[0] else stop - 1)
            )
            raise CodecIOError(
                f"{where}, record {bad}: row splits do not describe the {count} values"
            )
        if _VALUE_SPLITS in self.group or isinstance(_zdtype(self.values), VariableLengthUTF8):
            return VarColumn(self._strings(lo, hi, where), offsets - lo)
        values = np.asarray(self.values[lo:hi])
        shapes = (
            None if self.shapes is None else np.asarray(self.shapes[start:stop], dtype=np.int64)
        )
        col = VarColumn(values, offsets - lo, shapes)
        col.check(where)
        return col

    def _strings(self, lo: int, hi: int, where: str) -> VarColumn:
        """Strings ``lo:hi`` of a list-of-strings group, as a column of strings."""
        if _VALUE_SPLITS not in self.group:
            return VarColumn.from_strings(str(x) for x in np.asarray(self.values[lo:hi]).tolist())
        cuts = np.asarray(self.group[_VALUE_SPLITS][lo : hi + 1], dtype=np.int64)
        if len(cuts) != hi - lo + 1 or cuts[-1] > self.values.shape[0] or (np.diff(cuts) < 0).any():
            raise CodecIOError(f"{where}: {_VALUE_SPLITS!r} do not describe the values")
        strings = VarColumn(np.asarray(self.values[int(cuts[0]) : int(cuts[-1])]), cuts)
        strings.check(where)
        return strings


def _json_attrs(encoded: dict[str, Any]) -> dict[str, Any]:
    """User attributes as zarr holds them (JSON); the others are named by attribute_notes."""
    out = {}
    for name, enc in encoded.items():
        value, _ = for_zarr(enc)
        if not is_missing(value) and name != _ATTR:
            out[name] = value
    return out


@dataclass(frozen=True)
class _Region:
    """One dense array of a store being written: where it is and how its chunks are
    encoded -- all a process (a Dask worker) needs to write chunk-aligned blocks of it
    with the bytes the writer itself would write."""

    store: str
    parts: tuple[str, ...]
    rows: int  # records per chunk
    fill: Any
    #: a local, unsharded array of records with no empty axis: chunk files written here
    direct: bool
    options: ZarrOptions
    lossy: LossyImage | None

    def open(self) -> Any:
        return zarr.open_array(self.store, path="/".join(self.parts), mode="r+", zarr_format=3)

    def chunk_writer(self) -> Callable[[int, np.ndarray], None]:
        """``write(start, records)``: one chunk's records, its file written directly.

        For a local, unsharded array the chunk file is exactly numcodecs' Blosc
        encoding of the (zero-padded) chunk and its CRC32C -- byte-identical to what
        zarr writes (tested) -- so zarr's per-chunk machinery can be skipped. A lossy image
        array's chunk is the image codec's encoding of its one image, which is what
        zarr's codec wrapper writes too."""
        arr = self.open()
        encoder: Any = (
            numcodecs.Blosc(
                cname=self.options.cname,
                clevel=self.options.clevel,
                shuffle=_BLOSC_SHUFFLE[self.options.shuffle],
                blocksize=0,
            )
            if self.lossy is None
            else zarr_codec(self.lossy)._codec
        )
        zeros = (0,) * (arr.ndim - 1)
        # The array's folder is resolved (symlinks followed) once; a chunk key only adds
        # plain components ("c" and indices, checked) below it. Resolving every chunk's
        # path took a dozen lstat calls under the GIL per chunk file.
        folder = names.safe_join(self.store, *self.parts)
        made: set[str] = set()

        def write(start: int, chunk: np.ndarray) -> None:
            if len(chunk) < self.rows:  # zarr stores edge chunks at full size, padded
                pad = np.full((self.rows - len(chunk), *chunk.shape[1:]), self.fill, chunk.dtype)
                chunk = np.concatenate([chunk, pad])
            key = arr.metadata.encode_chunk_key((start // self.rows, *zeros))
            names.check_relative(folder, key)
            target = os.path.join(folder, *key.split("/"))
            where = os.path.dirname(target)
            if where not in made:
                os.makedirs(where, exist_ok=True)
                made.add(where)
            with open(target, "wb") as f:
                f.write(_with_crc(encoder.encode(np.ascontiguousarray(chunk))))

        return write


def write_region(region: _Region, start: int, block: np.ndarray) -> None:
    """Write records ``start:start+len(block)`` of one array, a whole number of its
    chunks (or shards) from a chunk boundary; runs on a Dask worker."""
    if not region.direct:
        region.open()[start : start + len(block)] = block
        return
    write = region.chunk_writer()
    for i in range(0, len(block), region.rows):
        write(start + i, block[i : i + region.rows])


class ZarrWriter(Writer):
    def __init__(self, path: str, schema: Schema, options: ZarrOptions) -> None:
        super().__init__(path, schema)
        self.options = options
        self.root = zarr.open_group(path, mode="w-", zarr_format=3)
        self._workers = default_workers()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="dstore-zarr")
        self._pending: list[Future[None]] = []
        self._appenders: dict[tuple[str, str], AlignedAppender] = {}
        self._var: dict[tuple[str, str], _VarArrays] = {}
        self._regions: dict[tuple[str, str], _Region] = {}
        # the names were checked by ZarrOptions.validate; zarr's enums type them
        compressor = (
            BloscCodec(
                cname=BloscCname(options.cname),
                clevel=options.clevel,
                shuffle=BloscShuffle(options.shuffle),
            ),
            _CRC,
        )
        self._root_attrs, split_attrs = group_attrs(schema.attrs)
        self._fills: dict[tuple[str, str], Any] = {}
        self._lossy = lossy_fields(schema, options)
        # a split read from a store's root is written there again (stored_paths)
        self._paths = stored_paths(schema)
        for split in schema.splits.values():
            at_root = bool(split.fields) and all(
                "/" not in self._paths[(split.name, f)] for f in split.fields
            )
            # require: a nested split (a/b) may have created this group (a) already
            group = (
                self.root
                if at_root
                else self.root.require_group("/".join(names.split_parts(split.name)))
            )
            group.attrs.update(_json_attrs(split_attrs.get(split.name, {})))
            for spec in split.fields.values():
                at_name = self._paths[(split.name, spec.name)].rpartition("/")[2]
                if not spec.dense:
                    self._var[(split.name, spec.name)] = _VarArrays.create(
                        group, split.count, spec, compressor, at_name
                    )
                    continue
                fill = fill_value(spec.attrs, _native(spec.dtype))
                self._fills[(split.name, spec.name)] = 0 if fill is None else fill
                rows = chunk_rows(spec, split.count, int(options.chunk_mb * 1024 * 1024))
                lossy = self._lossy.get((split.name, spec.name))
                serializer: Any = "auto"
                if lossy is not None:  # one image per chunk, encoded by imagecodecs
                    rows, serializer = 1, zarr_codec(lossy)
                shards = None
                if options.shard_chunks > 0:
                    shards = (rows * options.shard_chunks, *(max(1, d) for d in spec.shape))
                arr = group.create_array(
                    at_name,
                    shape=(split.count, *spec.shape),
                    dtype=_native(spec.dtype),
                    chunks=(rows, *(max(1, d) for d in spec.shape)),
                    shards=shards,
                    # chunk files side by side (c.0.0.0), not a folder per index (c/0/0/0):
                    # with a chunk per image, three folders per chunk made creating them
                    # cost as much system time as writing them (issue #24)
                    chunk_key_encoding={"name": "default", "separator": "."},
                    serializer=serializer,
                    compressors=compressor if lossy is None else (_CRC,),
                    fill_value=self._fills[(split.name, spec.name)],
                    attributes=_json_attrs(spec.attrs.get("user", {})),
                    # every chunk is stored, even one of fill values: a chunk missing
                    # from a dstore store is damage, not data (see _check_allocated)
                    config={"write_empty_chunks": True},
                )
                region = _Region(
                    path,
                    tuple(self._paths[(split.name, spec.name)].split("/")),
                    rows,
                    self._fills[(split.name, spec.name)],
                    options.shard_chunks == 0 and "://" not in path and all(spec.shape),
                    options,
                    lossy,
                )
                self._regions[(split.name, spec.name)] = region
                store = self._direct_fn(region) if region.direct else self._store_fn(arr)
                self._appenders[(split.name, spec.name)] = AlignedAppender(
                    rows * (options.shard_chunks or 1), store
                )

    def _direct_fn(self, region: _Region) -> Any:
        """Encode whole chunks on all cores and write their files ourselves
        (:meth:`_Region.write_chunks`)."""

        write = region.chunk_writer()

        def store(pos: int, data: np.ndarray) -> None:
            blocks = (
                (pos + i * region.rows, data[i * region.rows : (i + 1) * region.rows])
                for i in range(-(-len(data) // region.rows))
            )
            for _ in ordered_map(lambda b: write(*b), blocks, self._pool, 2 * self._workers):
                pass

        return store

    def _store_fn(self, arr: Any) -> Any:
        def store(pos: int, data: np.ndarray) -> None:
            # Chunk-aligned slices never share a chunk, so writes can overlap:
            # the next batch is read and queued while zarr encodes this one.
            self._pending.append(
                self._pool.submit(arr.__setitem__, slice(pos, pos + len(data)), data)
            )
            while len(self._pending) > 1:
                self._pending.pop(0).result()

        return store

    def write_regions(self, submit: Callable[..., None]) -> None:
        """Every dense field's chunk-aligned blocks (whole chunks, or whole shards with
        ``shard_chunks``) go to ``submit(write_region, region, start, block)``: each can be
        written by another process, as this one would. The fields whose records vary stay
        here: where their values go depends on every record before."""
        for key, appender in self._appenders.items():
            region = self._regions[key]
            appender.store = functools.partial(submit, write_region, region)

    def write(self, split: str, batch: Batch) -> None:
        for name, data in batch.items():
            if isinstance(data, VarColumn):
                self._var[(split, name)].write(data)
                continue
            native = _native(data.dtype)
            self._appenders[(split, name)].append(data.astype(native, copy=False))

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.flush()
        for fut in self._pending:
            fut.result()
        self._pool.shutdown()
        schema = self.schema
        sums = schema.checksums
        if self._lossy and sums:
            # the checksums hash the values written; a lossy field reads back other values
            sums = {
                split: {n: d for n, d in fields.items() if (split, n) not in self._lossy}
                for split, fields in sums.items()
            }
            schema = Schema(schema.splits, schema.attrs, sums)
        self.root.attrs.update({**_json_attrs(self._root_attrs), _ATTR: schema.to_json()})

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _ignore_orphaned_tasks(loop: Any, context: dict[str, Any]) -> None:
    """zarr reads a slice as one asyncio task per chunk: when one fails, the error
    reaches dstore (one line) and the others -- failed too, or still pending when the
    process exits -- would each print a traceback ("Task exception was never
    retrieved", "Task was destroyed but it is pending!"). They are the same failed read."""
    message = str(context.get("message", ""))
    if message.startswith(("Task exception was never retrieved", "Task was destroyed")):
        return
    loop.default_exception_handler(context)


def _quiet_zarr_loop() -> None:
    from zarr.core.sync import _get_loop

    loop = _get_loop()
    if loop.get_exception_handler() is None:
        loop.set_exception_handler(_ignore_orphaned_tasks)


def _settle_failed_read() -> None:
    """Wait for the chunk reads still running after one of them failed (zarr's gather
    returns at the first error and leaves the others running): left alone they end
    after the error line as tracebacks, or as "Event loop is closed" when the process
    exits. Waiting (not cancelling) leaves another thread's reads on zarr's loop intact."""
    import asyncio

    from zarr.core.sync import sync

    async def settle() -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)

    with contextlib.suppress(Exception):  # only tidying after the error already raised
        sync(settle())


_ARRAY_METADATA = frozenset({"zarr.json", ".zarray", ".zattrs"})


def _stored_objects(arr: Any) -> int:
    """Chunk (or shard) objects the store holds for ``arr``: its keys, metadata aside."""
    from zarr.core.sync import sync

    store, path = arr.store_path.store, arr.store_path.path
    prefix = f"{path}/" if path else ""

    async def count() -> int:
        n = 0
        async for key in store.list_prefix(prefix):
            if key.rsplit("/", 1)[-1] not in _ARRAY_METADATA:
                n += 1
        return n

    return int(sync(count()))


def _check_chunks(arr: Any, where: str) -> None:
    """Refuse what the array's metadata declares beyond what reading it may cost: one
    chunk decoding to more than the per-chunk limit, or more than the fill limit of
    records in chunks it declares but does not store (zarr reads them as the fill value
    for as long as the declared shape says)."""
    itemsize = np.dtype(arr.dtype).itemsize
    chunk = int(np.prod(arr.chunks, dtype=object)) * itemsize
    limit = max_chunk_bytes()
    if chunk > limit:
        raise CodecIOError(
            f"{where}: one chunk {tuple(arr.chunks)} decodes to {fmt_bytes(chunk)}, more than "
            f"the per-chunk limit of {fmt_bytes(limit)} (a decompression bomb?); raise it with "
            f"the environment variable DSTORE_MAX_CHUNK_BYTES"
        )
    declared = int(np.prod(arr.shape, dtype=object)) * itemsize
    limit = max_fill_bytes()
    if declared <= limit:
        return  # however much of it is missing, reading it is cheap
    unit = tuple(arr.shards or arr.chunks)  # what the store holds one object per
    grid = int(
        np.prod(
            [-(-int(n) // max(1, int(c))) for n, c in zip(arr.shape, unit, strict=True)],
            dtype=object,
        )
    )
    missing = grid - min(grid, _stored_objects(arr))
    unstored = missing * int(np.prod(unit, dtype=object)) * itemsize
    if unstored > limit:
        raise CodecIOError(
            f"{where}: declares {fmt_bytes(declared)} in {grid:,} chunks but stores "
            f"{grid - missing:,} of them: {fmt_bytes(min(unstored, declared))} would be read as the "
            f"fill value, more than the limit of {fmt_bytes(limit)} (a size bomb?); raise it "
            f"with the environment variable DSTORE_MAX_FILL_BYTES"
        )


def _plain_blosc(arr: Any, root: str) -> bool:
    """Is ``arr`` a local, unsharded array whose chunks are bare blosc frames?"""
    if fs.is_url(root):
        return False
    meta = arr.metadata
    if getattr(meta, "zarr_format", 3) == 2:
        compressor = getattr(meta, "compressor", None)
        return getattr(compressor, "codec_id", None) == "blosc" and not meta.filters
    names = [c.to_dict()["name"] for c in meta.codecs]
    return bool(names) and names[-1] == "blosc"  # not crc32c, not sharding_indexed


def _check_frame(root: str, arr: Any, key: str, first: int, rows: int) -> None:
    path = os.path.join(root, *arr.path.split("/"), *key.split("/"))
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return  # not stored: read as the fill value (bounded by max_fill_bytes)
    with open(path, "rb") as f:
        header = f.read(16)
    declared = int.from_bytes(header[12:16], "little") if len(header) == 16 else -1
    if declared != size:
        last = min(int(arr.shape[0]), first + rows) - 1
        raise CodecIOError(
            f"{root}: array {arr.path!r}, chunk {key!r} (records {first}..{last}): "
            f"unreadable: its blosc frame declares {declared} bytes, the file holds {size} "
            "(truncated or damaged)"
        )


class ZarrReader(ArrayTreeReader):
    def __init__(self, path: str, follow_links: bool = False) -> None:
        self.path = path
        self._store: Any = None
        #: arrays checked against the chunk and fill limits, by path
        self._checked: set[str] = set()
        #: the last partly read chunk of each array (path -> (chunk index, records)): a
        #: chunk larger than a batch is decoded once per pass, not once per batch
        self._last_chunk: dict[str, tuple[int, np.ndarray]] = {}
        #: per array: the record-axis chunks whose blosc frames were checked (None: no
        #: check applies -- a CRC32C in the chain, another codec, sharding, a URL)
        self._framed: dict[str, set[int] | None] = {}
        _quiet_zarr_loop()
        if not fs.is_url(path) and os.path.isdir(path):
            # zarr opens whatever a chunk file or array folder links to: a link out of
            # the store is refused before any of it is read (a URL has no links, a
            # zip store's members are no files)
            links.check_store(path, follow_links)
        try:
            if path.endswith(".zip") and os.path.isfile(path):
                self._store = zarr.storage.ZipStore(path, mode="r")
                node = zarr.open(self._store, mode="r")
            else:
                node = zarr.open(path, mode="r")
        except FileNotFoundError:
            raise CodecIOError(f"{path}: no zarr group or array here") from None
        except Exception as e:  # noqa: BLE001 - zarr raises many types for bad metadata
            raise CodecIOError(f"{path}: not a readable zarr store: {e}") from None
        self.arrays: dict[tuple[str, str], Any] = {}
        self.by_path: dict[str, Any] = {}
        self.groups: dict[str, Any] = {}
        self.notes: list[str] = []
        self._node = node
        if isinstance(node, zarr.Array):
            name = os.path.basename(os.path.normpath(path)).removesuffix(".zarr") or "data"
            self._add(DEFAULT_SPLIT, name, node, name)
            self.schema = self._build_schema(None)
            return
        try:
            self._walk(node, "")
        except DstoreError:
            raise
        except Exception as e:  # noqa: BLE001 - member metadata is parsed here, same error zoo
            raise CodecIOError(
                f"{path}: unreadable zarr metadata: {type(e).__name__}: {e}"
            ) from None
        stored = node.attrs.get(_ATTR)
        if stored is not None and not isinstance(stored, Mapping):
            raise CodecIOError(
                f"{path}: dstore's stored schema is unreadable (corrupt?): not a JSON object"
            )
        self.schema = self._build_schema(stored)

    def _add(self, split: str, name: str, arr: Any, key: str) -> None:
        if arr.ndim == 0:
            raise SchemaError(f"{self.path}: array {key!r} is 0-d; every field needs a record axis")
        if isinstance(_zdtype(arr), (VariableLengthUTF8, VariableLengthBytes)) or _fixed_text(arr):
            if arr.ndim != 1:
                raise UnsupportedDtypeError(
                    f"{self.path}: array {key!r}: strings need exactly one (record) axis"
                )
        else:
            check_dtype(arr.dtype, f"{self.path}: array {key!r}")
        self.arrays[(split, name)] = arr
        self.by_path[key] = arr

    def _walk(self, group: Any, prefix: str) -> None:
        for name, member in sorted(group.members(), key=lambda kv: kv[0]):
            key = f"{prefix}{name}"
            split, field = split_key(key) if not prefix else (prefix.rstrip("/"), name)
            if isinstance(member, zarr.Array):
                self._add(split, field, member, key)
                if prefix:
                    self.groups[split] = group
            elif _KIND_ATTR in member.attrs or _is_ragged_layout(member):
                # a ragged field stored as a group (dstore's, or the same layout by hand)
                ragged = _RaggedGroup(member, f"{self.path}: field {key!r}")
                self.arrays[(split, field)] = ragged
                self.by_path[key] = ragged
                if prefix:
                    self.groups[split] = group
            else:
                self._walk(member, f"{key}/")

    def _kind_of(self, arr: Any) -> Kind:
        where = f"{self.path}: array {arr.name!r}"
        if isinstance(arr, _RaggedGroup):
            stored = arr.attrs.get(_KIND_ATTR)
            if stored is not None:
                return kind_from_json(stored, where)
            if isinstance(_zdtype(arr.values), VariableLengthUTF8):
                return StringList()
            inner = tuple(int(n) for n in arr.values.shape[1:])
            return Ragged(check_dtype(np.dtype(arr.values.dtype), where), inner)
        if isinstance(_zdtype(arr), VariableLengthUTF8) or _fixed_text(arr) == "U":
            return String()
        if isinstance(_zdtype(arr), VariableLengthBytes) or _fixed_text(arr) == "S":
            return Bytes()
        return super()._kind_of(arr)

    def _stores(self, arr: Any, spec: FieldSpec, count: int) -> bool:
        if spec.dense:
            return not isinstance(arr, _RaggedGroup) and super()._stores(arr, spec, count)
        if tuple(arr.shape) != (count,):
            return False
        kind = self._kind_of(arr)
        if (
            isinstance(arr, _RaggedGroup) and arr.attrs.get(_KIND_ATTR) is None
        ):  # same layout by hand
            return (
                isinstance(kind, Ragged)
                and kind.dtype == spec.dtype
                and kind.inner_shape == spec.shape
            )
        return kind == spec.kind

    def _check_once(self, arr: Any) -> None:
        if arr.path not in self._checked:
            _check_chunks(arr, f"{self.path}: array {arr.path!r}")
            self._checked.add(arr.path)

    def _records(self, arr: Any, start: int, stop: int) -> np.ndarray:
        """Records ``start:stop`` of an array, each chunk decoded once per sequential pass:
        runs of whole chunks are read as one slice, a chunk the range only partly covers
        is kept until the next range asks for its other records."""
        self._check_once(arr)
        self._check_blosc_frames(arr, start, stop)
        count = int(arr.shape[0])
        rows = max(1, int(arr.chunks[0]))
        block_bytes = (
            rows * int(np.prod(arr.shape[1:], dtype=object)) * np.dtype(arr.dtype).itemsize
        )
        if arr.ndim == 0 or stop <= start or block_bytes > max_chunk_bytes():
            return np.asarray(arr[start:stop])  # nothing worth keeping (or too big to keep)
        pieces = []
        pos = start
        whole_end = stop if stop == count else (stop // rows) * rows
        while pos < stop:
            index = pos // rows
            lo, hi = index * rows, min(count, (index + 1) * rows)
            if pos == lo and whole_end >= hi:
                pieces.append(np.asarray(arr[pos:whole_end]))
                pos = whole_end
                continue
            last = self._last_chunk.get(arr.path)
            if last is None or last[0] != index:
                last = (index, np.asarray(arr[lo:hi]))
                self._last_chunk[arr.path] = last
            end = min(stop, hi)
            pieces.append(last[1][pos - lo : end - lo].copy())  # the kept chunk stays intact
            pos = end
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _check_blosc_frames(self, arr: Any, start: int, stop: int) -> None:
        """A store written without ``crc32c`` (by others, or by dstore before it) whose
        chunks are blosc frames: each chunk file covering ``start:stop`` must hold exactly
        the compressed size its frame header declares. blosc decodes a truncated frame
        to the declared size without an error, so a chunk cut short would read as wrong
        records; the header (16 bytes) is read once per chunk and pass."""
        checked = self._framed.get(arr.path, set())
        if arr.path not in self._framed:
            checked = self._framed[arr.path] = set() if _plain_blosc(arr, self.path) else None
        if checked is None or stop <= start:
            return
        rows = max(1, int(arr.chunks[0]))
        for index in range(start // rows, (stop - 1) // rows + 1):
            if index in checked:
                continue
            for rest in itertools.product(*(range(n) for n in arr.cdata_shape[1:])):
                key = arr.metadata.encode_chunk_key((index, *rest))
                _check_frame(self.path, arr, key, index * rows, rows)
            checked.add(index)

    def _read_column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        try:
            return self._column(spec, arr, start, stop)
        except DstoreError:
            raise
        except Exception as e:
            _settle_failed_read()
            if spec.dense and isinstance(arr, zarr.Array):
                self._name_bad_chunk(arr, start, stop, e)
            raise

    def _name_bad_chunk(self, arr: Any, start: int, stop: int, error: Exception) -> None:
        """Raise the error of the first chunk of ``start:stop`` that does not read, naming it."""
        from ._chunked import error_reason

        rows = max(1, int(arr.chunks[0]))
        for index in range(start // rows, (stop - 1) // rows + 1):
            lo, hi = index * rows, min(int(arr.shape[0]), (index + 1) * rows)
            try:
                arr[lo:hi]
            except Exception as e:  # noqa: BLE001 - the library's error, named below
                _settle_failed_read()
                error = e
            else:
                continue
            reason = error_reason(error)
            if "checksum do not match" in reason:
                reason = "its CRC32C does not match its bytes (damaged or truncated)"
            key = arr.metadata.encode_chunk_key((index, *(0,) * (arr.ndim - 1)))
            raise CodecIOError(
                f"{self.path}: array {arr.path!r}, chunk {key!r} (records {lo}..{hi - 1}): "
                f"unreadable: {reason}"
            ) from None

    def _column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        if spec.dense:
            if isinstance(arr, zarr.Array):
                return self._records(arr, start, stop).astype(spec.dtype, copy=False)
            return super()._read_column(spec, arr, start, stop)
        where = f"{self.path}: array {arr.name!r}"  # _chunked names the split and field
        if isinstance(arr, _RaggedGroup):
            inner = spec.shape if isinstance(spec.kind, Ragged) else ()
            col = arr.read(start, stop, inner, where)
            if isinstance(spec.kind, StringList):
                if not isinstance(col.values, VarColumn):
                    raise CodecIOError(f"{where}: the group holds no strings")
                if spec.kind.text:
                    col.check_utf8(where)
                return col
            out = VarColumn(col.flat_values.astype(spec.dtype, copy=False), col.offsets, col.shapes)
            if isinstance(spec.kind, String):  # text in a values group (written by hand)
                out.check_utf8(where)
            return out
        self._check_once(arr)
        items = arr[start:stop]
        if isinstance(spec.kind, String):
            col = VarColumn.from_strings(str(x) for x in items.tolist())
        else:
            col = VarColumn.from_bytes(bytes(x) for x in items.tolist())
        return col

    def _field_attrs(self, arr: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        skip = (_KIND_ATTR,) if isinstance(arr, _RaggedGroup) else ()  # dstore's own marker
        user = self._attr_notes(arr.attrs, f"{self.path}: array {arr.path!r}", skip=skip)
        if user:
            out["user"] = user
        fill = getattr(arr, "fill_value", None)
        if fill is not None:
            value = np.asarray(fill, arr.dtype)
            if value.tobytes() != bytes(value.nbytes):  # zarr's default, zero, is no information
                out["fill_value"] = encode(value[()])
        return out

    def _root_attrs(self) -> dict[str, Any]:
        if isinstance(self._node, zarr.Array):
            return {}
        return self._attr_notes(self._node.attrs, f"{self.path}: root group", skip=(_ATTR,))

    def _dtype_matches(self, spec: np.dtype, stored: np.dtype) -> bool:
        return _native(spec) == stored  # big-endian fields are stored native-endian

    def lossy_fields(self, split: str) -> dict[str, LossyImage]:
        """Fields whose array is encoded by imagecodecs' JPEG, WebP or JPEG XL codec."""
        out = {}
        for (s, name), arr in self.arrays.items():
            if s == split and isinstance(arr, zarr.Array):
                lossy = lossy_of(arr)
                if lossy is not None:
                    out[name] = lossy
        return out

    def describe(self) -> list[str]:
        lines = []
        for (split, name), arr in self.arrays.items():
            if isinstance(arr, _RaggedGroup):
                lines.append(
                    f"{split}/{name}: group {arr.name!r} of values, row_splits"
                    + (", shapes" if arr.shapes is not None else "")
                )
                continue
            lines.append(
                f"{split}/{name}: zarr v{arr.metadata.zarr_format}, chunks {arr.chunks}, "
                f"codecs {_codecs_json(arr.metadata)}"
            )
        return lines

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _case_insensitive(path: str) -> bool:
    """Does the file system that will hold ``path`` fold case (macOS, Windows)? A probe
    folder beside it answers (object stores and unknown places: no)."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(path))
    if fs.is_url(path) or not os.path.isdir(parent):
        return False
    probe = tempfile.mkdtemp(prefix=".dstore-case-probe-", dir=parent)
    try:
        head, tail = os.path.split(probe)
        return os.path.exists(os.path.join(head, tail.upper()))
    finally:
        os.rmdir(probe)


def _check_case_collisions(schema: Schema, path: str) -> None:
    """Refuse two names that differ only in case (fields ``x`` and ``X`` of one split)
    on a case-insensitive file system: each is a folder of the store, and there the
    second would be written into the first's folder -- one field lost without an
    error. Elsewhere they are two folders, as written before."""
    seen: dict[str, str] = {}
    clashes: list[tuple[str, str]] = []
    for split in schema.splits.values():
        stored = [names.split_parts(split.name)]
        stored += [names.field_path(split.name, f) for f in split.fields]
        for parts in stored:
            for n in range(1, len(parts) + 1):
                stored_at = "/".join(parts[:n])
                other = seen.setdefault(stored_at.casefold(), stored_at)
                if other != stored_at:
                    clashes.append((other, stored_at))
    if clashes and _case_insensitive(path):
        other, stored_at = clashes[0]
        raise SchemaError(
            f"zarr: {other!r} and {stored_at!r} differ only in case: as folders of one store "
            f"they collide on this case-insensitive file system; rename one"
        )


_METADATA = ("zarr.json", ".zgroup", ".zarray")
_META_MAX = 64 << 20  # more is not metadata zarr wrote


def _is_zarr_metadata(text: bytes) -> bool:
    try:
        meta = json.loads(text)
    except ValueError:
        return False
    return isinstance(meta, dict) and meta.get("zarr_format") in (2, 3)


#: the other metadata files zarr v2 writes (v3 keeps everything in zarr.json)
_OTHER_METADATA = (".zattrs", ".zmetadata")
#: a chunk's key below its array's folder: v3 ``c/0/1`` or ``c.0.1`` (``c`` for a 0-d
#: array), v2 ``0.1`` or ``0/1``
_CHUNK_KEY = re.compile(r"c(?:[/.]\d+)*|\d+(?:[/.]\d+)*")


def _is_array_node(folder: str) -> bool | None:
    """True for a zarr array's folder, False for a group's, None for no zarr node."""
    if os.path.isfile(os.path.join(folder, ".zarray")):
        return True
    if os.path.isfile(os.path.join(folder, ".zgroup")):
        return False
    meta = os.path.join(folder, "zarr.json")
    if not os.path.isfile(meta):
        return None
    try:
        with open(meta, "rb") as f:
            node = json.loads(f.read(_META_MAX))
    except (OSError, ValueError):
        return None
    return isinstance(node, dict) and node.get("node_type") == "array"


def _store_foreign_files(store: str) -> list[str]:
    """Files of a store folder that are neither zarr metadata nor the chunk key of an
    array (relative to ``store``)."""
    found = []
    nodes: dict[str, bool | None] = {}
    for root, dirs, files in os.walk(store):
        dirs.sort()
        # a linked folder is not walked into (never followed): it is listed itself
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in sorted(files + links):
            rel = os.path.relpath(os.path.join(root, name), store)
            if name in _METADATA or name in _OTHER_METADATA:
                continue
            # the nearest folder above that is a zarr node: the file is a chunk of it or not
            folder = root
            while True:
                if folder not in nodes:
                    nodes[folder] = _is_array_node(folder)
                if nodes[folder] is not None or os.path.samefile(folder, store):
                    break
                folder = os.path.dirname(folder)
            key = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if not (nodes[folder] and _CHUNK_KEY.fullmatch(key)):
                found.append(rel)
    return found


class ZarrCodec(Codec):
    """zarr v3 groups with blosc compression; reads zarr v2 and v3."""

    name = "zarr"
    media_type = "https://zarr-specs.readthedocs.io/en/latest/v3/core/index.html"
    # zarr-python warns of every file in a store that is not a zarr node (each listing of
    # the group): the Croissant card goes beside the store, written by `dstore card`
    card_beside = True
    extensions = (".zarr", ".zarr.zip")
    supports_urls = True
    region_writes = True
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    bfloat16_as = "uint16"  # zarr 3.1's dtype registry has no bfloat16
    Options = ZarrOptions

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biufc"

    @classmethod
    def owns(cls, path: str) -> bool:
        """A zarr group or array: a folder (or zip store) with zarr v3 ``zarr.json``
        or v2 ``.zgroup``/``.zarray`` metadata at its root."""
        if fs.isdir(path):
            for name in _METADATA:
                meta = fs.join(path, name)
                if is_regular_file(meta):
                    try:
                        with fs.open_binary(meta) as f:
                            return _is_zarr_metadata(f.read(_META_MAX))
                    except OSError:
                        return False
            return False
        if not is_regular_file(path):
            return False
        try:
            with fs.open_binary(path) as f, zipfile.ZipFile(f) as z:
                member_name = next((n for n in _METADATA if n in z.namelist()), None)
                if member_name is None:
                    return False
                with z.open(member_name) as member:
                    return _is_zarr_metadata(member.read(_META_MAX))
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
            return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files of a store folder that are neither zarr metadata nor chunk keys."""
        if fs.is_url(path) or not os.path.isdir(path):
            return []
        return _store_foreign_files(path)

    def open_reader(self, path: str) -> Reader:
        return ZarrReader(path, self.follow_links)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        lossy_fields(schema, self.options)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)  # before any byte: a raw h5py/zarr error otherwise
        _check_case_collisions(schema, path)
        return ZarrWriter(path, schema, self.options)

    def attribute_notes(self, schema: Schema) -> list[str]:
        return target_notes(schema, self.name, for_zarr)
