"""Reading any zarr v2/v3 group, array or zip store: the walk of groups into splits,
chunk checks before decoding (sizes, blosc frames, CRCs), and record ranges."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr
from zarr.core.dtype import VariableLengthBytes, VariableLengthUTF8

from ... import fs, links
from ...errors import CodecIOError, DstoreError, SchemaError, UnsupportedDtypeError
from ...images.imagecodec import LossyImage
from ...model import (
    Bytes,
    Column,
    Kind,
    Ragged,
    String,
    StringList,
    VarColumn,
    kind_from_json,
)
from ...model.attrs import encode
from ...model.keys import split_key
from ...model.schema import DEFAULT_SPLIT, FieldSpec, SplitSpec, check_dtype
from ..arraytree.chunked import ArrayTreeReader, max_chunk_bytes
from .arrays import _KIND_ATTR, _fixed_text, _is_ragged_layout, _native, _RaggedGroup, _zdtype
from .chunks import _check_chunks, _check_frame, _plain_blosc, _quiet_zarr_loop, _settle_failed_read
from .consolidated import open_store
from .direct import DirectChunks
from .imagecodec import lossy_of  # registers the image codecs with zarr
from .options import _ATTR, GROWING, _codecs_json

__all__ = ["ZarrReader"]


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
        #: per array: its chunk files read directly at positions (None: through zarr)
        self._direct: dict[str, DirectChunks | None] = {}
        _quiet_zarr_loop()
        if not fs.is_url(path) and os.path.isdir(path):
            # zarr opens whatever a chunk file or array folder links to: a link out of
            # the store is refused before any of it is read (a URL has no links, a
            # zip store's members are no files)
            links.check_store(path, follow_links)
        try:
            # every node's own metadata, never a consolidated listing of it: the arrays
            # as they are (the card beside them left out of listings, .consolidated)
            zipped = None
            if path.endswith(".zip") and os.path.isfile(path):
                zipped = self._store = zarr.storage.ZipStore(path, mode="r")
            store = open_store(path, read_only=True, inner=zipped)
            node = zarr.open(store, mode="r", use_consolidated=False)
        except FileNotFoundError:
            raise CodecIOError(f"{path}: no zarr group or array here") from None
        except Exception as e:  # noqa: BLE001 - zarr raises many types for bad metadata
            raise CodecIOError(f"{path}: not a readable zarr store: {e}") from None
        self.arrays: dict[tuple[str, str], Any] = {}
        self.by_path: dict[str, Any] = {}
        self.groups: dict[str, Any] = {}
        self.notes: list[str] = []
        self._node = node
        #: an append is writing the store (or a killed one wrote it): arrays may hold
        #: records after the committed counts, which are what is read
        self.growing = not isinstance(node, zarr.Array) and GROWING in node.attrs
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
                ragged = _RaggedGroup(member, f"{self.path}: field {key!r}", self.growing)
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
        if self.growing and arr.shape[0] > count:  # records of an append not committed
            return (
                self._stores_grown(arr, spec)
                if spec.dense
                else isinstance(arr, _RaggedGroup) or arr.ndim == 1
            )
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

    def _stores_grown(self, arr: Any, spec: FieldSpec) -> bool:
        return (
            not isinstance(arr, _RaggedGroup)
            and tuple(arr.shape[1:]) == spec.shape
            and self._dtype_matches(spec.dtype, np.dtype(arr.dtype))
        )

    def _check_once(self, arr: Any) -> None:
        if arr.path not in self._checked:
            _check_chunks(arr, f"{self.path}: array {arr.path!r}")
            self._checked.add(arr.path)

    def _records(self, arr: Any, start: int, stop: int) -> np.ndarray:
        """Records ``start:stop`` of an array, each chunk decoded once per sequential pass:
        runs of whole chunks are read as one slice, a chunk the range only partly covers
        is kept until the next range asks for its other records."""
        self._check_once(arr)
        direct = self._direct_of(arr)
        if direct is None:
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
                pieces.append(self._slice(arr, direct, pos, whole_end))
                pos = whole_end
                continue
            last = self._last_chunk.get(arr.path)
            if last is None or last[0] != index:
                last = (index, self._slice(arr, direct, lo, hi))
                self._last_chunk[arr.path] = last
            end = min(stop, hi)
            pieces.append(last[1][pos - lo : end - lo].copy())  # the kept chunk stays intact
            pos = end
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def _field_at(
        self, spec: SplitSpec, name: str, wanted: np.ndarray, runs: list[tuple[int, int]]
    ) -> Column:
        """Records at positions of a dense field whose chunk files are bare blosc frames:
        each chunk file read once, only the blocks holding them decoded (:mod:`.direct`)."""
        arr = self.arrays[(spec.name, name)]
        field = spec.fields[name]
        dense = field.dense and isinstance(arr, zarr.Array) and len(wanted)
        direct = self._direct_of(arr) if dense else None
        if direct is None:
            return super()._field_at(spec, name, wanted, runs)

        def read() -> Column:
            self._check_once(arr)
            return direct.read(wanted).astype(field.dtype, copy=False)

        return self._named_read(spec, name, int(wanted[0]), int(wanted[-1]) + 1, read)

    def _direct_of(self, arr: Any) -> DirectChunks | None:
        """The direct reader of ``arr``'s chunk files, or None where zarr reads them."""
        if arr.path not in self._direct:
            self._direct[arr.path] = DirectChunks.of(self.path, arr, self._store is not None)
        return self._direct[arr.path]

    @staticmethod
    def _slice(arr: Any, direct: DirectChunks | None, start: int, stop: int) -> np.ndarray:
        if direct is None:
            return np.asarray(arr[start:stop])
        return direct.read(np.arange(start, stop, dtype=np.int64))

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
        from ..arraytree.chunked import error_reason

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
        return self._attr_notes(self._node.attrs, f"{self.path}: root group", skip=(_ATTR, GROWING))

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
