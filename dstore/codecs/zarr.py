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

import json
import os
import zipfile
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCname, BloscCodec, BloscShuffle
from zarr.core.dtype import VariableLengthBytes, VariableLengthUTF8

from .. import fs, links, names
from ..attrs import encode, fill_value, for_zarr, group_attrs, is_missing, target_notes
from ..errors import CodecIOError, DstoreError, SchemaError, UnsupportedDtypeError
from ..integrity import CHECKSUM_ATTR
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
)
from ..parallel import default_workers, ordered_map
from ..schema import DEFAULT_SPLIT, Batch, FieldSpec, Schema, check_dtype, split_key
from ._chunked import AlignedAppender, ArrayTreeReader, chunk_rows
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
                    f"use TFRecord with -o image_format={lossy.format}"
                )
    for split_name, spec in image_fields(schema):
        lossy.check_field(spec, f"zarr: split {split_name!r}", "image_codec")
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
    def create(cls, group: Any, count: int, spec: FieldSpec, compressor: Any) -> _VarArrays:
        name = names.escape(spec.name)
        chunks = (max(1, min(count, _VAR_CHUNK)),)
        kind = spec.kind
        if isinstance(kind, String):
            out = cls(
                text=group.create_array(
                    name, shape=(count,), dtype=VariableLengthUTF8(), chunks=chunks
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
                    _VALUES, shape=(0,), dtype=VariableLengthUTF8(), chunks=(_VAR_CHUNK,)
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
                )
            out = cls(values=values, splits=splits, shapes=shapes)
            if isinstance(kind, StringList) and not kind.text:
                out.value_splits = sub.create_array(
                    _VALUE_SPLITS, shape=(1,), dtype="<i8", chunks=(1 << 17,), fill_value=0
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
        # the names were checked by ZarrOptions.validate; zarr's enums type them
        compressor = BloscCodec(
            cname=BloscCname(options.cname),
            clevel=options.clevel,
            shuffle=BloscShuffle(options.shuffle),
        )
        self._root_attrs, split_attrs = group_attrs(schema.attrs)
        self._fills: dict[tuple[str, str], Any] = {}
        self._lossy = lossy_fields(schema, options)
        for split in schema.splits.values():
            # require: a nested split (a/b) may have created this group (a) already
            group = self.root.require_group("/".join(names.split_parts(split.name)))
            group.attrs.update(_json_attrs(split_attrs.get(split.name, {})))
            for spec in split.fields.values():
                if not spec.dense:
                    self._var[(split.name, spec.name)] = _VarArrays.create(
                        group, split.count, spec, compressor
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
                    names.escape(spec.name),
                    shape=(split.count, *spec.shape),
                    dtype=_native(spec.dtype),
                    chunks=(rows, *(max(1, d) for d in spec.shape)),
                    shards=shards,
                    serializer=serializer,
                    compressors=compressor if lossy is None else None,
                    fill_value=self._fills[(split.name, spec.name)],
                    attributes=_json_attrs(spec.attrs.get("user", {})),
                )
                direct = options.shard_chunks == 0 and "://" not in path and all(spec.shape)
                store = (
                    self._direct_fn(arr, split.name, spec.name, rows, serializer)
                    if direct
                    else self._store_fn(arr)
                )
                self._appenders[(split.name, spec.name)] = AlignedAppender(
                    rows * (options.shard_chunks or 1), store
                )

    def _direct_fn(self, arr: Any, split: str, name: str, rows: int, serializer: Any) -> Any:
        """Encode whole chunks on all cores and write their files ourselves.

        For a local, unsharded array the chunk file is exactly numcodecs'
        Blosc encoding of the (zero-padded) chunk -- byte-identical to what
        zarr writes (tested) -- so zarr's per-chunk machinery can be skipped.
        A lossy image array's chunk is the image codec's encoding of its one
        image, which is what zarr's codec wrapper writes too.
        """
        blosc: Any = (
            numcodecs.Blosc(
                cname=self.options.cname,
                clevel=self.options.clevel,
                shuffle=_BLOSC_SHUFFLE[self.options.shuffle],
                blocksize=0,
            )
            if serializer == "auto"
            else serializer._codec
        )
        parts = names.field_path(split, name)
        zeros = (0,) * (arr.ndim - 1)
        fill = self._fills[(split, name)]

        def encode_and_write(item: tuple[int, np.ndarray]) -> None:
            index, chunk = item
            if (
                len(chunk) < rows
            ):  # zarr stores edge chunks at full size, padded with the fill value
                pad = np.full((rows - len(chunk), *chunk.shape[1:]), fill, chunk.dtype)
                chunk = np.concatenate([chunk, pad])
            key = arr.metadata.encode_chunk_key((index, *zeros))
            target = names.safe_join(self.path, *parts, *key.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(blosc.encode(np.ascontiguousarray(chunk)))

        def store(pos: int, data: np.ndarray) -> None:
            items = (
                (pos // rows + i, data[i * rows : (i + 1) * rows])
                for i in range(-(-len(data) // rows))
            )
            for _ in ordered_map(encode_and_write, items, self._pool, 2 * self._workers):
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
        sums = schema.attrs.get(CHECKSUM_ATTR)
        if self._lossy and isinstance(sums, dict):
            # the checksums hash the values written; a lossy field reads back other values
            sums = {
                split: {n: d for n, d in fields.items() if (split, n) not in self._lossy}
                for split, fields in sums.items()
            }
            schema = Schema(schema.splits, {**schema.attrs, CHECKSUM_ATTR: sums})
        self.root.attrs.update({**_json_attrs(self._root_attrs), _ATTR: schema.to_json()})

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class ZarrReader(ArrayTreeReader):
    def __init__(self, path: str, follow_links: bool = False) -> None:
        self.path = path
        self._store: Any = None
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
        if isinstance(_zdtype(arr), (VariableLengthUTF8, VariableLengthBytes)):
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
        if isinstance(_zdtype(arr), VariableLengthUTF8):
            return String()
        if isinstance(_zdtype(arr), VariableLengthBytes):
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

    def _read_column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        if spec.dense:
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


_METADATA = ("zarr.json", ".zgroup", ".zarray")
_META_MAX = 64 << 20  # more is not metadata zarr wrote


def _is_zarr_metadata(text: bytes) -> bool:
    try:
        meta = json.loads(text)
    except ValueError:
        return False
    return isinstance(meta, dict) and meta.get("zarr_format") in (2, 3)


class ZarrCodec(Codec):
    """zarr v3 groups with blosc compression; reads zarr v2 and v3."""

    name = "zarr"
    extensions = (".zarr", ".zarr.zip")
    supports_urls = True
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

    def open_reader(self, path: str) -> Reader:
        return ZarrReader(path, self.follow_links)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        lossy_fields(schema, self.options)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)  # before any byte: a raw h5py/zarr error otherwise
        return ZarrWriter(path, schema, self.options)

    def attribute_notes(self, schema: Schema) -> list[str]:
        return target_notes(schema, self.name, for_zarr)
