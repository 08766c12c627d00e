"""Writing an HDF5 file: the space it will need checked first, every dataset
created at its final shape, filled batch by batch."""

from __future__ import annotations

import contextlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h5py
import numpy as np

from ...abc import Writer
from ...errors import CodecIOError
from ...model import Image, Ragged, String, StringList, VarColumn, names
from ...model.attrs import fill_value, for_hdf5, group_attrs
from ...model.keys import stored_paths
from ...model.schema import Batch, FieldSpec, Schema
from ...output import TMP_MARK, check_room
from ...parallel import default_workers
from ..arraytree.chunked import AlignedAppender
from .checks import _enum_or
from .datasets import _KIND_ATTR, _ROW_SPLITS, _SHAPES, _ChunkStore, _VarDataset
from .options import _ATTR, HDF5Options, _plugins

__all__ = ["HDF5Writer", "size_bound"]


def _output_name(path: str) -> str:
    """The destination a temporary output stands for (``.out.h5.dstore-tmp-1-ab`` -> ``out.h5``)."""
    folder, base = os.path.split(path)
    if base.startswith(".") and TMP_MARK in base:
        base = base[1 : base.index(TMP_MARK)]
    return os.path.join(folder, base)


def _chunked(spec: FieldSpec, count: int) -> bool:
    return bool(count) and all(spec.shape)


def size_bound(schema: Schema, options: HDF5Options) -> int:
    """An upper bound of the bytes of the HDF5 file dstore writes for ``schema``.

    Raw bytes of every chunk at full size (HDF5 stores edge chunks whole), plus what
    a filter may add to incompressible data (deflate stored blocks: 5 bytes per
    16 kB; blosc/zstd headers), plus the chunk index, object headers and schema."""
    total = 64 * 1024 + 2 * len(json.dumps(schema.to_json()))  # superblock, root, schema attr
    for split in schema.splits.values():
        total += 4096
        for spec in split.fields.values():
            total += 4096 + 2 * len(json.dumps(spec.to_json()))  # object header, attributes
            if not _chunked(spec, split.count):
                continue
            rows = options.chunk_rows(spec, split.count)
            n_chunks = -(-split.count // rows)
            chunk = rows * spec.record_bytes
            total += n_chunks * (chunk + chunk // 1000 + 512)  # + filter growth + index entry
    return total


def _check_space(path: str, need: int, raw: int) -> None:
    """Refuse before writing a byte: HDF5 cannot recover from a failed write (a write
    that fails while HDF5 closes the file leaves the library in a state where the
    process later dies with SIGSEGV/SIGBUS), so a full disk must not happen mid-write."""
    dst = _output_name(path)
    folder = os.path.dirname(os.path.abspath(path))
    what = (
        f"the HDF5 file may need up to {need:,} bytes ({raw:,} bytes of data; "
        "compression is not guaranteed)"
    )
    check_room(dst, folder, need, what)


def _write_error(path: str, e: BaseException) -> CodecIOError:
    """One line for a write HDF5 could not do: h5py's messages span lines and bury the cause."""
    text = str(e)
    code = getattr(e, "errno", None)
    if not isinstance(code, int) or not code:
        found = re.search(r"errno = (\d+)", text)
        code = int(found.group(1)) if found else None
    if code:
        cause = f"{os.strerror(code)} (errno {code})"
    else:
        cause = text.splitlines()[0] if text else type(e).__name__
    return CodecIOError(
        f"{_output_name(path)}: writing the HDF5 file failed: {cause}; nothing was written"
    )


def _set_attrs(obj: Any, encoded: dict[str, Any]) -> None:
    """Restore user attributes (dstore's own schema attribute is never overwritten)."""
    for name, enc in encoded.items():
        if name != _ATTR:
            try:
                obj.attrs[name] = for_hdf5(enc)[0]
            except (
                TypeError,
                ValueError,
                OSError,
            ) as e:  # e.g. text with NUL, which HDF5 cannot hold
                where = f"{_output_name(obj.file.filename)}: {obj.name}"
                raise CodecIOError(
                    f"{where}: attribute {name!r} cannot be stored in HDF5: {e}"
                ) from None


def _filters(options: HDF5Options) -> dict[str, Any]:
    """``create_dataset``'s compression arguments for ``options.compression``."""
    if options.compression == "gzip":
        return {"compression": "gzip", "compression_opts": options.level}
    if options.compression == "lzf":
        return {"compression": "lzf"}
    if options.compression == "blosc":
        shuffle = _plugins().Blosc.SHUFFLE if options.shuffle else _plugins().Blosc.NOSHUFFLE
        return dict(_plugins().Blosc(cname="zstd", clevel=options.level, shuffle=shuffle))
    if options.compression == "zstd":
        return dict(_plugins().Zstd(clevel=options.level))
    return {}


class HDF5Writer(Writer):
    def __init__(self, path: str, schema: Schema, options: HDF5Options) -> None:
        super().__init__(path, schema)
        self.options = options
        if options.check_space:
            _check_space(path, size_bound(schema, options), schema.nbytes)
        self._workers = default_workers()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="dstore-h5")
        # No chunk cache: every chunk reaches the file in write(), where a full disk is an
        # exception dstore can report; a cached chunk would be written in close(), and HDF5
        # does not survive a failed write there.
        self.file = h5py.File(path, "w-", rdcc_nbytes=0)
        self._appenders: dict[tuple[str, str], AlignedAppender] = {}
        self._var: dict[tuple[str, str], _VarDataset] = {}
        comp = _filters(options)
        root_attrs, split_attrs = group_attrs(schema.attrs)
        _set_attrs(self.file, root_attrs)
        paths = stored_paths(schema)
        for split in schema.splits.values():
            for spec in split.fields.values():
                # the split's group, or the root for a split read from there (stored_paths)
                where, _, name = paths[(split.name, spec.name)].rpartition("/")
                # require: a nested split (a/b) may have created this group (a) already
                group = self.file.require_group(where) if where else self.file
                if not spec.dense:
                    self._var[(split.name, spec.name)] = self._create_var(
                        group, name, split.count, spec
                    )
                    continue
                self._appenders[(split.name, spec.name)] = self._create_dense(
                    group, name, split.count, spec, comp
                )
            if split.name in split_attrs or not split.fields:
                group = self.file.require_group("/".join(names.split_parts(split.name)))
                _set_attrs(group, split_attrs.get(split.name, {}))

    def _create_dense(
        self, group: Any, name: str, count: int, spec: FieldSpec, comp: dict[str, Any]
    ) -> AlignedAppender:
        """A fixed-shape field as one chunked dataset (compressed with ``comp``) and the
        appender that writes it chunk by chunk."""
        options = self.options
        rows = options.chunk_rows(spec, count)
        chunked = bool(count) and all(spec.shape)
        ds = group.create_dataset(
            name,
            shape=(count, *spec.shape),
            dtype=_enum_or(spec),
            fillvalue=fill_value(spec.attrs, spec.dtype),
            chunks=(rows, *(max(1, d) for d in spec.shape)) if chunked else None,
            shuffle=options.shuffle
            and options.compression in ("gzip", "lzf", "zstd")
            and count > 0
            and all(spec.shape),
            **(comp if chunked else {}),
        )
        _set_attrs(ds, spec.attrs.get("user", {}))
        return AlignedAppender(rows, _ChunkStore(ds, rows, options, self._pool, self._workers))

    def _create_var(self, group: Any, name: str, count: int, spec: FieldSpec) -> _VarDataset:
        """A field whose records vary, as HDF5 variable-length data (one array or string per record).

        Strings are UTF-8 vlen strings; bytes and encoded images vlen uint8
        (vlen *strings* end at the first NUL, vlen arrays keep every byte);
        ragged values vlen arrays of their dtype, each record flattened, the
        inner shape in the dataset's ``dstore_inner_shape`` attribute; raw
        images of varying size vlen pixels plus a ``<name>.shapes`` dataset;
        lists of strings as :class:`_ListDataset` describes.
        HDF5 filters compress only the pointers of vlen data, so none is set."""
        kind = spec.kind
        if isinstance(kind, StringList):
            strings = group.create_dataset(
                name,
                shape=(0,),
                maxshape=(None,),
                chunks=(4096,),
                dtype=h5py.string_dtype("utf-8") if kind.text else h5py.vlen_dtype(np.uint8),
            )
            strings.attrs[_KIND_ATTR] = json.dumps(kind.to_json())
            splits = group.create_dataset(name + _ROW_SPLITS, shape=(count + 1,), dtype="<i8")
            return _VarDataset(strings, splits)
        dtype = (
            h5py.string_dtype("utf-8") if isinstance(kind, String) else h5py.vlen_dtype(spec.dtype)
        )
        chunks = (max(1, min(count, 4096)),) if count else None
        ds = group.create_dataset(name, shape=(count,), dtype=dtype, chunks=chunks)
        shapes = None
        if isinstance(kind, Ragged):
            ds.attrs["dstore_inner_shape"] = list(kind.inner_shape)
        if isinstance(kind, Image) and kind.encoding == "raw":
            ndim = 2 if kind.channels == 0 else 3
            shapes = group.create_dataset(name + _SHAPES, shape=(count, ndim), dtype="<i8")
        return _VarDataset(ds, shapes)

    def write(self, split: str, batch: Batch) -> None:
        try:
            for name, data in batch.items():
                if isinstance(data, VarColumn):
                    self._var[(split, name)].write(self.schema.splits[split].fields[name], data)
                else:
                    self._appenders[(split, name)].append(data)
        except (OSError, RuntimeError) as e:
            raise _write_error(self.path, e) from None

    def close(self) -> None:
        try:
            for appender in self._appenders.values():
                appender.flush()
            self.file.attrs[_ATTR] = json.dumps(self.schema.to_json())
            self.file.flush()
        except (OSError, RuntimeError) as e:
            raise _write_error(self.path, e) from None
        self.file.close()
        self._pool.shutdown()

    def abort(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        with contextlib.suppress(Exception):  # the output is deleted anyway
            self.file.close()
