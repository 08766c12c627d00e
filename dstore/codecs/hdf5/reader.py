"""Reading any HDF5 file: groups into splits, datasets into fields (by inspection
when dstore did not write it), external links and virtual datasets refused
unless allowed, record ranges along the chunks."""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from ... import fs
from ...bounded_json import JsonLimitError, load_json
from ...errors import CodecIOError, DstoreError, UnsafeInputError
from ...model import Bytes, Column, Image, Kind, Ragged, String, StringList, Tensor, VarColumn
from ...model.attrs import encode
from ...model.keys import split_key
from ...model.schema import FieldSpec, check_dtype
from ...model.strings import fixed_to_column
from ..arraytree.chunked import ArrayTreeReader, max_chunk_bytes, max_fill_bytes
from .checks import _check_field_dataset, _check_utf8, _is_vlunicode, _stage_remote
from .chunks import ChunkDecoder
from .datasets import _KIND_ATTR, _ROW_SPLITS, _SHAPES, _are_offsets, _ListDataset
from .options import _ATTR, _STANDARD_FILTERS, _plugins

__all__ = ["HDF5Reader"]


class HDF5Reader(ArrayTreeReader):
    read_errors = (OSError, ValueError, RuntimeError)

    def __init__(self, path: str, follow_links: bool = False) -> None:
        self.path = path
        self.follow_links = follow_links
        _plugins()  # makes blosc/zstd/lz4-compressed datasets readable when installed
        local = None
        try:
            if fs.is_url(path):
                local = _stage_remote(path)
            try:
                self.file = h5py.File(local or path, "r")
            finally:
                if local is not None:
                    os.unlink(local)  # the open file is read until closed; nothing is left behind
        except CodecIOError:
            raise
        except OSError as e:
            if isinstance(e, FileNotFoundError):
                raise CodecIOError(f"{path}: no such file") from None
            raise CodecIOError(f"{path}: not a readable HDF5 file: {e}") from None
        try:
            self.arrays: dict[tuple[str, str], Any] = {}
            self.by_path: dict[str, Any] = {}
            self.groups: dict[str, Any] = {}
            self.notes: list[str] = []
            self._sized: set[str] = set()  # datasets whose declared size was checked
            # per dataset, the last chunk-aligned block read (start record, records)
            self._blocks: dict[str, tuple[int, np.ndarray]] = {}
            # per dataset, what decodes its chunks here (None: h5py reads them)
            self._decoders: dict[str, ChunkDecoder | None] = {}
            # every group reached, by identity (h5py compares the object, not the path)
            self._seen_groups: dict[Any, str] = {self.file.id: "/"}
            try:
                self._walk(self.file, "")
                stored = self.file.attrs.get(_ATTR)
            except DstoreError:
                raise
            except Exception as e:  # noqa: BLE001 - HDF5's C errors arrive as many Python types
                raise CodecIOError(
                    f"{path}: corrupt HDF5 structure: {type(e).__name__}: {e}"
                ) from None
            try:
                stored_schema = "dstore's stored schema"
                parsed = None if stored is None else load_json(stored, path, stored_schema)
            except JsonLimitError as e:
                raise CodecIOError(f"{e} (corrupt?)") from None
            self.schema = self._build_schema(parsed)
        except BaseException:
            self.close()
            raise

    def _walk(self, group: Any, prefix: str) -> None:
        for name in group:
            key = f"{prefix}{name}"
            member = self._member(group, name, key)
            if isinstance(member, h5py.Dataset):
                self._see_dataset(group, prefix, name, key, member)
            elif isinstance(member, h5py.Group):
                # A group reached twice (a second hard link, a soft link back up)
                # would be walked once per path: 40 groups of two links to the one
                # before are 2**40 paths in a 47 kB file (found by a hostile-input
                # pass; only true cycles ended, as RecursionError)
                first = self._seen_groups.setdefault(member.id, f"/{key}")
                if first != f"/{key}":
                    raise CodecIOError(
                        f"{self.path}: group '/{key}' is group {first!r} again (a second "
                        "link to it); dstore reads each group under one name"
                    )
                self._walk(member, f"{key}/")

    def _see_dataset(self, group: Any, prefix: str, name: str, key: str, member: Any) -> None:
        """A dataset met by :meth:`_walk`: a field, or the record shapes or offsets of one."""
        self._check_storage(member, key)
        where = f"{self.path}: dataset {key!r}"
        if key.endswith(_SHAPES) and key[: -len(_SHAPES)] in self.by_path:
            self.by_path[key] = member  # an image field's record shapes, not a field
            return
        base = key[: -len(_ROW_SPLITS)]
        if (
            key.endswith(_ROW_SPLITS)
            and self._is_strings(self.by_path.get(base))
            and _are_offsets(member)
        ):
            # a list-of-strings field's record offsets: the field is the pair
            lists = _ListDataset(self.by_path[base], member, where)
            self.by_path[base] = lists
            self.by_path[key] = member
            for k, v in list(self.arrays.items()):
                if v is lists.strings:
                    self.arrays[k] = lists
            return
        _check_field_dataset(member, where)
        split, field = split_key(key) if not prefix else (prefix.rstrip("/"), name)
        self.arrays[(split, field)] = member
        self.by_path[key] = member
        if prefix:
            self.groups[split] = group

    def _member(self, group: Any, name: str, key: str) -> Any:
        """``group[name]``, unless that reads another file (an external link, or a soft
        link through one) and ``follow_links`` is off: checked on the link before
        HDF5 opens what it names (DESIGN: never a read outside the input)."""
        try:
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink) and not self.follow_links:
                raise UnsafeInputError(
                    f"{self.path}: '/{key}' is an HDF5 external link to "
                    f"{link.filename!r}, object {link.path!r}: {self._another(link.filename)}"
                )
            member = group[name]
        except (KeyError, OSError) as e:
            raise CodecIOError(f"{self.path}: {key}: unreadable: {e}") from None
        if not self.follow_links and member.file.filename != self.file.filename:
            # a soft link whose path goes through an external link elsewhere in the file
            via = f"a soft link to {link.path!r}" if isinstance(link, h5py.SoftLink) else "a link"
            raise UnsafeInputError(
                f"{self.path}: '/{key}' is {via}, which leads into {member.file.filename!r}: "
                f"{self._another(member.file.filename)}"
            )
        return member

    def _another(self, target: str) -> str:
        """Why a file ``target`` names is refused; a file beside the input is named too
        (never read outside the input: it is still not the file the user named)."""
        if not fs.is_url(self.path):
            folder = os.path.dirname(os.path.abspath(self.path))
            if os.path.dirname(os.path.normpath(os.path.join(folder, target))) == folder:
                return "another file than the input (in its folder, but not the file named)"
        return "another file than the input"

    def _check_storage(self, ds: Any, key: str) -> None:
        """Refuse a dataset whose values are in other files: a virtual dataset's
        sources, raw external storage (``H5Pset_external``). A virtual source that is
        missing would read as fill values and pass ``verify``: refused even with
        ``follow_links``."""
        where = f"{self.path}: dataset '/{key}'"
        external = ds.external
        if external and not self.follow_links:
            raise UnsafeInputError(
                f"{where} keeps its values in the external file {external[0][0]!r}: "
                f"{self._another(os.fsdecode(external[0][0]))}"
            )
        if not ds.is_virtual:
            return
        for source in ds.virtual_sources():
            fname, dname = source.file_name, source.dset_name
            if fname != "." and not self.follow_links:
                raise UnsafeInputError(
                    f"{where} is an HDF5 virtual dataset reading {fname!r}, dataset "
                    f"{dname!r}: {self._another(fname)}"
                )
            self._check_virtual_source(where, fname, dname)

    def _check_virtual_source(self, where: str, fname: str, dname: str) -> None:
        """A virtual dataset's source must exist; HDF5 fills what it cannot find."""
        if fname == ".":
            if dname not in self.file:
                raise UnsafeInputError(
                    f"{where} is an HDF5 virtual dataset whose source dataset {dname!r} is "
                    "not in the file: it would read as fill values",
                    hint=False,
                )
            return
        # HDF5 looks for a relative source beside the virtual dataset's file
        folder = os.path.dirname(os.path.abspath(self.file.filename))
        real = os.path.join(folder, fname)
        found = False
        if os.path.isfile(real):
            try:
                with h5py.File(real, "r") as f:
                    found = dname in f
            except OSError:
                found = False
        if not found:
            raise UnsafeInputError(
                f"{where} is an HDF5 virtual dataset whose source {fname!r}, dataset "
                f"{dname!r}, is missing or unreadable: it would read as fill values",
                hint=False,
            )

    @staticmethod
    def _is_strings(ds: Any) -> bool:
        """Can ``ds`` be a list-of-strings field's strings (dstore's mark, or vlen text)?"""
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 1:
            return False
        if _KIND_ATTR in ds.attrs:
            return True
        info = h5py.check_string_dtype(ds.dtype)
        return info is not None and info.length is None

    def _kind_of(self, arr: Any) -> Kind:
        if isinstance(arr, _ListDataset):
            info = h5py.check_string_dtype(arr.dtype)
            return StringList(info is not None and info.encoding == "utf-8")
        info = h5py.check_string_dtype(arr.dtype)
        if info is not None:
            # UTF-8 text is a string; ASCII-declared or fixed-width data may hold any bytes
            return String() if info.encoding == "utf-8" and info.length is None else Bytes()
        base = h5py.check_vlen_dtype(arr.dtype)
        if base is not None and _is_vlunicode(arr):
            return String()
        if base is not None:
            inner = tuple(int(n) for n in arr.attrs.get("dstore_inner_shape", ()))
            return Ragged(check_dtype(np.dtype(base), f"{self.path}: dataset {arr.name!r}"), inner)
        # the plain dtype: h5py's enum labels ride in the dtype's metadata, which numpy
        # will not save (they are carried in the field's attributes instead)
        return Tensor(np.dtype(arr.dtype.str), tuple(arr.shape[1:]))

    def _stores(self, arr: Any, spec: FieldSpec, count: int) -> bool:
        if spec.dense:
            return super()._stores(arr, spec, count)
        if tuple(arr.shape) != (count,):
            return False
        kind = self._kind_of(arr)
        if isinstance(spec.kind, StringList) or isinstance(kind, StringList):
            return kind == spec.kind
        if isinstance(spec.kind, String):
            return isinstance(kind, String)
        if isinstance(spec.kind, Ragged):
            return kind == spec.kind
        # bytes and images: vlen values of their dtype (raw images also have their shapes)
        if (
            isinstance(spec.kind, Image)
            and spec.kind.encoding == "raw"
            and arr.name + _SHAPES not in self.file
        ):
            return False
        return isinstance(kind, Ragged) and kind.dtype == spec.dtype and kind.inner_shape == ()

    def _companions(self, paths: Any) -> set[str]:
        return {
            p + suffix
            for p in paths
            for suffix in (_SHAPES, _ROW_SPLITS)
            if p + suffix in self.by_path
        }

    def _read_var(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        where = f"{self.path}: dataset {arr.name!r}"
        if isinstance(arr, _ListDataset):
            col = arr.read(start, stop, where)
            col.check(where)
            if isinstance(spec.kind, StringList) and spec.kind.text:
                _check_utf8(col, where, start)
            return col
        info = h5py.check_string_dtype(arr.dtype)
        if info is not None and info.length is not None:  # fixed-width: numpy's NUL rule
            col = fixed_to_column(np.asarray(arr[start:stop]), where)
        elif info is not None:
            raw = arr[start:stop]  # bytes objects: decoding is checked per record below
            col = VarColumn.from_bytes(
                b if isinstance(b, bytes) else str(b).encode("utf-8") for b in raw
            )
        elif _is_vlunicode(arr):  # PyTables text: each record UTF-32 code points
            col = VarColumn.from_bytes(
                np.asarray(r, "<u4").tobytes().decode("utf-32-le").encode("utf-8")
                for r in arr[start:stop]
            )
        else:
            items = arr[start:stop]
            inner = spec.shape if isinstance(spec.kind, Ragged) else ()
            rows = []
            for i, raw_item in enumerate(items):
                item = np.asarray(raw_item, dtype=spec.dtype)
                size = int(np.prod(inner, dtype=np.int64))
                if size and item.size % size:
                    raise CodecIOError(
                        f"{where}, record {start + i}: {item.size} values do not fill records of inner shape {inner}"
                    )
                rows.append(item.reshape(-1, *inner) if inner else item)
            col = VarColumn.from_rows(rows, spec.dtype, inner)
            if isinstance(spec.kind, Image) and spec.kind.encoding == "raw":
                shapes = np.asarray(self.file[arr.name + _SHAPES][start:stop], dtype=np.int64)
                col = VarColumn(col.values, col.offsets, shapes)
                col.check(where)
        if isinstance(spec.kind, String):
            _check_utf8(col, where, start)
        return col

    def _check_size(self, arr: Any) -> None:
        """Refuse, before its first read, a dataset whose declared size the file does not
        back: chunks too large to decode (:data:`~dstore.codecs.arraytree.chunked.MAX_CHUNK_BYTES`), or more unallocated
        bytes (read as fill values) than :data:`~dstore.codecs.arraytree.chunked.MAX_FILL_BYTES`. ``info`` still shows it."""
        if arr.name in self._sized or not isinstance(arr, h5py.Dataset):
            return
        where = f"{self.path}: dataset {arr.name!r}"
        itemsize = np.dtype(arr.dtype).itemsize
        declared = int(np.prod(arr.shape, dtype=object)) * itemsize
        if arr.chunks is not None:
            chunk = int(np.prod(arr.chunks, dtype=object)) * itemsize
            if chunk > max_chunk_bytes():
                raise CodecIOError(
                    f"{where}: chunks {arr.chunks} hold {chunk:,} bytes each once decoded, "
                    f"more than the limit of {max_chunk_bytes():,} bytes (set DSTORE_MAX_CHUNK_BYTES "
                    "to raise it)"
                )
            covered = int(arr.id.get_num_chunks()) * chunk
        else:
            covered = int(arr.id.get_storage_size())
        unallocated = declared - covered
        if unallocated > max_fill_bytes():
            raise CodecIOError(
                f"{where}: declares {arr.shape} {arr.dtype} ({declared:,} bytes) but stores "
                f"{arr.id.get_storage_size():,} bytes: {unallocated:,} bytes were never written "
                f"and would read as fill values, more than the limit of {max_fill_bytes():,} "
                f"(set DSTORE_MAX_FILL_BYTES to raise it)"
            )
        self._sized.add(arr.name)

    def _decoder(self, arr: Any) -> ChunkDecoder | None:
        """The dataset's :class:`ChunkDecoder`, made at its first read (None: h5py reads it)."""
        if arr.name not in self._decoders:
            self._decoders[arr.name] = ChunkDecoder.of(arr, f"{self.path}: dataset {arr.name!r}")
        return self._decoders[arr.name]

    def _read_dense(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        """Records ``start:stop``, each chunk decoded once per pass: a chunk of more
        records than a batch would be decoded again for every batch (four 400 MB gzip
        chunks were still converting after 150 s), so the last chunk-aligned block read
        is kept and batches are cut from it."""
        decoder = self._decoder(arr)
        if decoder is not None:
            return decoder.read(start, stop).astype(spec.dtype, copy=False)
        rows = int(arr.chunks[0]) if arr.chunks is not None else 0
        if rows <= stop - start:
            return super()._read_column(spec, arr, start, stop)
        parts = []
        pos = start
        while pos < stop:
            lo = (pos // rows) * rows
            held = self._blocks.get(arr.name)
            if held is None or held[0] != lo:
                self._blocks[arr.name] = held = (lo, np.asarray(arr[lo : lo + rows]))
            block = held[1]
            end = min(stop, lo + len(block))
            parts.append(block[pos - lo : end - lo])
            pos = end
        data = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return np.array(data, dtype=spec.dtype)  # a copy: the block is reused

    def _read_column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        self._check_size(arr)
        try:
            if spec.dense:
                dense = self._read_dense(spec, arr, start, stop)
                # h5py's enum dtype carries metadata numpy will not save: the plain dtype
                if isinstance(dense, np.ndarray) and dense.dtype.metadata:
                    return dense.view(spec.dtype)
                return dense
            return self._read_var(spec, arr, start, stop)
        except MemoryError:
            # a MemoryError has no text: name it
            raise CodecIOError(
                f"{self.path}: dataset {arr.name!r}, records {start}..{stop - 1}: out of memory "
                "(MemoryError) while reading them"
            ) from None

    def _field_key(self, arr: Any) -> str | None:
        return arr.name.lstrip("/")

    def _field_attrs(self, arr: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # dstore's own marker of a ragged dataset's inner shape is not a user attribute
        user = self._attr_notes(
            arr.attrs,
            f"{self.path}: dataset {arr.name!r}",
            skip=("dstore_inner_shape", _KIND_ATTR),
        )
        if user:
            out["user"] = user
        # only a fill value someone chose: HDF5's default (zeros) is no information
        try:
            chosen = (
                arr.id.get_create_plist().fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
            )
            fill = np.asarray(arr.fillvalue, arr.dtype)[()] if chosen else None
        except Exception as e:  # noqa: BLE001 - HDF5's C errors arrive as many Python types
            raise CodecIOError(
                f"{self.path}: dataset {arr.name!r}: unreadable fill value: {e}"
            ) from None
        if fill is not None:
            out["fill_value"] = encode(fill)
        # an HDF5 enum's labels: the values are the integers, the labels ride in the
        # schema, and the HDF5 writer makes the enum type again
        labels = h5py.check_enum_dtype(arr.dtype) if isinstance(arr, h5py.Dataset) else None
        if labels:
            out["enum"] = {str(k): int(v) for k, v in labels.items()}
        return out

    def _root_attrs(self) -> dict[str, Any]:
        return self._attr_notes(self.file.attrs, f"{self.path}: root group", skip=(_ATTR,))

    def describe(self) -> list[str]:
        lines = []
        for (split, name), ds in self.arrays.items():
            comp = ds.compression or "none"
            if ds.compression_opts is not None:
                comp += f" {ds.compression_opts}"
            plist = ds.id.get_create_plist()
            plugin = [
                plist.get_filter(i)[3].decode(errors="replace")
                for i in range(plist.get_nfilters())
                if plist.get_filter(i)[0] not in _STANDARD_FILTERS
            ]
            if plugin:
                comp = (
                    f"{', '.join(plugin)} (a plugin filter: other tools need hdf5plugin to read it)"
                )
            lines.append(
                f"{split}/{name}: dataset {ds.name}, chunks {ds.chunks}, {comp}"
                + (", shuffle" if ds.shuffle else "")
            )
        return lines

    def close(self) -> None:
        if getattr(self, "file", None) is not None:
            self.file.close()
