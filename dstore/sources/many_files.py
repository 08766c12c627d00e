"""Many files of one format read as one dataset, and written back one file per source.

CoralNet keeps one small feature file per image, millions of them. Calling
``dstore convert`` once per file pays the interpreter's start-up each time;
naming them all as one source pays it once::

    dstore convert "features/*.json" feats.npz --dtype float16   # a glob (quoted)
    dstore convert features/ feats.npz                            # a folder (recursive)
    dstore convert @list.txt feats.npz                            # a file listing paths

The records of every file are concatenated in order (glob and folder
entries sorted by name, a list in its own order) and a string field
``source`` names the file each record came from (its path relative to the
glob's folder, the folder, or as the list writes it). The schema keeps the
files in order with their record counts and the attributes that differ
between them (pyspacer's ``npoints``) under ``dstore.sources``; attributes all
files share stay plain attributes. ``dstore convert feats.npz out/
--per-source --to json`` writes one file per source back from the ``source``
field.

Memory stays bounded whatever the file count: a first pass reads each file's
schema. A file that is parsed whole to know it (JSON) is parsed once: its
columns go to an anonymous temporary file (the spool) and are read back from
there; other formats (npz headers) are opened again. Either way the
conversion holds one file's records at a time.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import links
from ..abc import Codec, Reader
from ..errors import (
    CodecIOError,
    OptionError,
    SchemaError,
    UnknownCodecError,
)
from ..images.decoding import decode_column_images
from ..images.imagecodec import is_image_like, record_channels
from ..model import (
    Column,
    Image,
    Kind,
    Ragged,
    String,
    Tensor,
    VarColumn,
    concat_columns,
    slice_column,
)
from ..model.attrs import ATTRS_KEY
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec
from ..options import parse_bool
from ..registry import available_codecs, get_codec_class, infer_codec

__all__ = [
    "SOURCES_ATTR",
    "SOURCE_FIELD",
    "MultiReader",
    "expand",
    "flat_attrs",
    "is_multi",
    "open_sources",
    "unflatten_attrs",
]

#: The string field naming each record's file.
SOURCE_FIELD = "source"
#: Schema attribute: the files in order, their record counts and the attributes that vary.
SOURCES_ATTR = "dstore.sources"
_MAGIC = set("*?[")


def _has_magic(path: str) -> bool:
    return any(c in _MAGIC for c in path)


def is_multi(path: str, format: str | None = None) -> bool:
    """True when ``path`` names many files: ``@list``, a glob, or a folder that is not
    itself a dataset (its name claims no format and no format's marker is inside)."""
    if "://" in path or (os.path.exists(path) and not os.path.isdir(path)):
        return False
    if path.startswith("@") or _has_magic(path):
        return True
    if not os.path.isdir(path):
        return False
    if format is not None:
        # a format whose dataset is a folder (shards, a zarr store) reads it itself;
        # for any other, a folder can only be many files of it, whatever their names
        return not (get_codec_class(format).reads_folders or _claimed(path) == format)
    try:
        infer_codec(path)
    except UnknownCodecError:
        return True
    return False


def _claimed(name: str) -> str | None:
    try:
        return infer_codec(name)
    except UnknownCodecError:
        return None


def expand(
    spec: str,
    format: str | None = None,
    *,
    follow_links: bool = False,
    skipped: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """The files ``spec`` names and each one's source name, in reading order.

    A glob or folder enters a folder link only with ``follow_links`` (the links it
    did not enter are appended to ``skipped``), and never one real folder twice;
    the same real file named twice is refused (:mod:`dstore.links`)."""
    paths, names = _expand(spec, format, follow_links, [] if skipped is None else skipped)
    links.check_distinct(spec, paths)
    return paths, names


def _expand(
    spec: str, format: str | None, follow_links: bool, skipped: list[str]
) -> tuple[list[str], list[str]]:
    if spec.startswith("@") and not os.path.exists(spec):
        return _listed_files(spec[1:])
    if _has_magic(spec):
        return _glob_files(spec, follow_links, skipped)
    return _folder_files(spec, format, follow_links, skipped)


def _listed_files(listing: str) -> tuple[list[str], list[str]]:
    """``@list.txt``: one file a line (relative to the list's folder), ``#`` comments."""
    try:
        with open(listing, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f]
    except OSError as e:
        raise CodecIOError(f"{listing}: cannot read the list of files: {e.strerror}") from None
    names = [ln for ln in lines if ln and not ln.startswith("#")]
    base = os.path.dirname(listing)
    paths = [n if os.path.isabs(n) else os.path.join(base, n) for n in names]
    for i, p in enumerate(paths):
        if not os.path.isfile(p):
            raise CodecIOError(f"{listing}: entry {i + 1}, {names[i]}: no such file")
    if not paths:
        raise CodecIOError(f"{listing}: the list names no file")
    return paths, names


def _glob_files(spec: str, follow_links: bool, skipped: list[str]) -> tuple[list[str], list[str]]:
    """The files a glob matches, named relative to the pattern's fixed leading folders."""
    paths = links.glob_files(spec, follow_links, skipped)
    if not paths:
        raise CodecIOError(f"{spec}: the pattern matches no file (nothing was written)")
    parts = spec.replace(os.sep, "/").split("/")
    fixed = []
    for part in parts[:-1]:
        if _has_magic(part):
            break
        fixed.append(part)
    root = "/".join(fixed) or "."
    return paths, [os.path.relpath(p, root).replace(os.sep, "/") for p in paths]


def _folder_files(
    spec: str, format: str | None, follow_links: bool, skipped: list[str]
) -> tuple[list[str], list[str]]:
    """The files of a folder tree a format claims (``format``'s and unclaimed ones, when
    named), named relative to the folder."""
    paths = []
    # a folder that is a dataset itself (x.zarr, x.tfrecords) is not walked into
    for path in links.walk_files(
        spec, follow_links, lambda d: not d.startswith(".") and _claimed(d) is None, skipped
    ):
        fname = os.path.basename(path)
        if fname.startswith("."):
            continue
        fmt = _claimed(fname)
        # with a format named (--from): its files and those no format claims (features
        # saved as "0001.fv"), not another format's; else every file a format claims
        if fmt in (format, None) if format is not None else fmt is not None:
            paths.append(path)
    if not paths and format is not None:
        raise CodecIOError(f"{spec}: the folder holds no {format} file (nor one without a format)")
    if not paths:
        raise UnknownCodecError(
            spec,
            list(available_codecs()),
            f"{spec}: no format claims this folder or any file in it (name one with from_format=)",
        )
    return paths, [os.path.relpath(p, spec).replace(os.sep, "/") for p in paths]


# --------------------------------------------------------------------- kinds


def _unify(a: Kind, b: Kind) -> Kind | None:
    """One kind holding both files' records (int vs float, lengths that vary between
    files, images whose size varies), or None when they disagree."""
    if a == b:
        return a
    image = _unify_images(a, b)
    if image is not None:
        return image
    num = "iuf"
    if isinstance(a, (Tensor, Ragged)) and isinstance(b, (Tensor, Ragged)):
        if a.dtype.kind not in num or b.dtype.kind not in num:
            return None
        dtype = np.result_type(a.dtype, b.dtype)
        if isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape:
            return Tensor(dtype, a.shape)
        inner_a = a.shape[1:] if isinstance(a, Tensor) else a.inner_shape
        inner_b = b.shape[1:] if isinstance(b, Tensor) else b.inner_shape
        tensors_ok = all(len(k.shape) >= 1 for k in (a, b) if isinstance(k, Tensor))
        if inner_a == inner_b and tensors_ok:
            return Ragged(dtype, inner_a)
    return None


def _as_image(kind: Kind, other: Kind) -> Image | None:
    """``kind`` as an Image when it is one: an Image, or a tensor the file's reader holds
    as pixels (:func:`is_image_like`, what TFRecord stores as PNG; a TFRecord of PNGs of one
    size reads as one) -- or shaped like the pixels of ``other``, an Image (a file of
    grey+alpha PNGs of one size beside one whose sizes vary)."""
    if isinstance(kind, Image):
        return kind
    if not isinstance(kind, Tensor):
        return None
    channels = record_channels(kind.shape)
    like_other = isinstance(other, Image) and channels is not None and channels == other.channels
    if channels is None or not (is_image_like(FieldSpec("", kind)) or like_other):
        return None
    if kind.dtype.kind != "u" or kind.dtype.itemsize not in (1, 2) or min(kind.shape[:2]) == 0:
        return None
    return Image(kind.dtype, channels, kind.shape[0], kind.shape[1], "raw")


def _unify_images(a: Kind, b: Kind) -> Image | None:
    """Images of one dtype and channel count whose size differs between files: an Image of
    varying size. Raw pixels beside encoded images are pixels (the encoded ones decoded):
    a file of PNGs of one size reads as a tensor of pixels already (its bytes are gone)."""
    ia, ib = _as_image(a, b), _as_image(b, a)
    if ia is None or ib is None or ia.dtype != ib.dtype or ia.channels != ib.channels:
        return None
    if ia.channels is None:
        return None  # channels that vary inside a file: nothing to check pixels against
    if ia.encoding != ib.encoding and "raw" not in (ia.encoding, ib.encoding):
        return None  # PNG beside JPEG: not asked for; each file's own kind is kept apart
    encoding = ia.encoding if ia.encoding == ib.encoding else "raw"
    if (ia.height, ia.width) == (ib.height, ib.width):
        return Image(ia.dtype, ia.channels, ia.height, ia.width, encoding)
    # a size that varies, as a file whose PNG sizes vary is read (height and width unknown)
    return Image(ia.dtype, ia.channels, None, None, encoding)


def _coerce(col: Column, have: Kind, want: Kind, where: str = "", first: int = 0) -> Column:
    """A file's column as the unified kind wants it; ``where`` and ``first`` (the batch's
    first record in the file) name a record whose image does not decode."""
    if have == want:
        return col
    if isinstance(want, Image):
        return _coerce_image(col, have, want, where, first)
    if isinstance(want, Tensor):
        return np.asarray(col).astype(want.dtype)
    assert isinstance(want, Ragged)
    if isinstance(col, VarColumn):
        return VarColumn(col.flat_values.astype(want.dtype), col.offsets)
    arr = np.asarray(col)
    width = arr.shape[1] if arr.ndim > 1 else 0
    offsets = np.arange(len(arr) + 1, dtype=np.int64) * width
    return VarColumn(arr.reshape((-1, *want.inner_shape)).astype(want.dtype), offsets)


def _coerce_image(col: Column, have: Kind, want: Image, where: str, first: int) -> Column:
    if isinstance(have, Image) and have.encoding != want.encoding:
        assert isinstance(col, VarColumn) and want.encoding == "raw"
        # --keep-encoded cannot help here: other files hold this field as pixels
        hint = "other files hold this field as pixels, so it is decoded: convert the file alone"
        pixels = decode_column_images(col, have, where, first, hint)
        if want.is_dense:  # encoded images of the one size the other files' pixels have
            return pixels.flat_values.reshape((len(pixels), *(want.shape or ())))
        return pixels
    if isinstance(col, VarColumn) or want.is_dense:
        return col  # encoded as wanted, or pixels of varying size already
    # pixels of one size: each record's flattened pixels and its shape
    arr = np.asarray(col)
    size = int(np.prod(arr.shape[1:], dtype=np.int64))
    offsets = np.arange(len(arr) + 1, dtype=np.int64) * size
    shapes = np.tile(np.array(arr.shape[1:], np.int64), (len(arr), 1))
    return VarColumn(arr.reshape(-1), offsets, shapes)


def flat_attrs(attrs: Mapping[str, Any]) -> dict[str, str]:
    """Attributes as flat key -> JSON text, so files can be compared key by key."""
    out = {}
    for key, value in attrs.items():
        if key in (CHECKSUM_ATTR, SOURCES_ATTR):
            continue
        if key == ATTRS_KEY and isinstance(value, Mapping):
            for name, enc in (value.get("root") or {}).items():
                out[f"{ATTRS_KEY}/root/{name}"] = json.dumps(enc, sort_keys=True)
            for split, held in (value.get("splits") or {}).items():
                for name, enc in held.items():
                    out[f"{ATTRS_KEY}/splits/{split}/{name}"] = json.dumps(enc, sort_keys=True)
            continue
        out[key] = json.dumps(value, sort_keys=True)
    return out


def unflatten_attrs(flat: Mapping[str, str]) -> dict[str, Any]:
    """The inverse of the flattening the schema's per-source attributes use."""
    out: dict[str, Any] = {}
    for key, text in flat.items():
        value = json.loads(text)
        if key.startswith(ATTRS_KEY + "/root/"):
            held = out.setdefault(ATTRS_KEY, {})
            held.setdefault("root", {})[key[len(ATTRS_KEY) + 6 :]] = value
        elif key.startswith(ATTRS_KEY + "/splits/"):
            split, _, name = key[len(ATTRS_KEY) + 8 :].rpartition("/")
            held = out.setdefault(ATTRS_KEY, {})
            held.setdefault("splits", {}).setdefault(split, {})[name] = value
        else:
            out[key] = value
    return out


#: Where one column of a spooled file is: (offset, bytes, dtype, shape) per array
#: (one for a dense column; values, offsets and shapes of a VarColumn).
_Desc = tuple[bool, list[tuple[int, int, str, tuple[int, ...]]]]


class _Spool:
    """Columns of parsed files in an anonymous temporary file, read back when needed."""

    def __init__(self) -> None:
        self._f = tempfile.TemporaryFile(prefix="dstore-sources-")  # noqa: SIM115 - closed in close()
        self._end = 0

    def _write(self, arr: np.ndarray) -> tuple[int, int, str, tuple[int, ...]]:
        arr = np.ascontiguousarray(arr)
        self._f.seek(self._end)
        self._f.write(arr.data)
        where = (self._end, arr.nbytes, arr.dtype.str, arr.shape)
        self._end += arr.nbytes
        return where

    def put(self, cols: Mapping[str, Column]) -> dict[str, _Desc]:
        out: dict[str, _Desc] = {}
        for name, col in cols.items():
            if isinstance(col, VarColumn):
                # JSON, the only parsed (spooled) format, has no list-of-strings fields
                parts = [col.flat_values, col.offsets]
                parts += [] if col.shapes is None else [col.shapes]
                out[name] = (True, [self._write(a) for a in parts])
            else:
                out[name] = (False, [self._write(col)])
        return out

    def _read(self, where: tuple[int, int, str, tuple[int, ...]]) -> np.ndarray:
        offset, nbytes, dtype, shape = where
        self._f.seek(offset)
        return np.frombuffer(self._f.read(nbytes), dtype).reshape(shape)

    def get(self, desc: _Desc) -> Column:
        var, parts = desc
        arrays = [self._read(w) for w in parts]
        if not var:
            return arrays[0]
        return VarColumn(arrays[0], arrays[1], arrays[2] if len(arrays) > 2 else None)

    def close(self) -> None:
        self._f.close()


class _SpooledFile(Reader):
    """One parsed file's records, back from the spool."""

    def __init__(
        self,
        path: str,
        spool: _Spool,
        descs: dict[str, dict[str, _Desc]],
        counts: dict[str, int],
    ) -> None:
        self.path = path
        self._spool = spool
        self._descs = descs
        self.schema = Schema({s: SplitSpec(s, n, {}) for s, n in counts.items()})

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        cols = {n: self._spool.get(self._descs[spec.name][n]) for n in names}
        for pos in range(start, stop, rows):
            yield {n: slice_column(c, pos, min(stop, pos + rows)) for n, c in cols.items()}


@dataclass
class _File:
    path: str
    name: str
    counts: dict[str, int]
    kinds: dict[str, dict[str, Kind]]  # shared between files with the same schema
    attrs: dict[str, str]


class MultiReader(Reader):
    """Files of one format as one dataset, with a ``source`` string field."""

    def __init__(
        self,
        spec: str,
        paths: Sequence[str],
        names: Sequence[str],
        codec: Codec,
        spool: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.path = spec
        self.codec = codec
        self.format = codec.name
        #: every input file (an output may not land on one of them)
        self.inputs = list(paths)
        self.bytes_in = 0
        self._spool = _Spool() if spool else None
        self._spooled: dict[int, dict[str, dict[str, _Desc]]] = {}
        self._files: list[_File] = []
        try:
            self._scan(paths, names, progress)
        except BaseException:
            self.close()
            raise

    def _scan(
        self,
        paths: Sequence[str],
        names: Sequence[str],
        progress: Callable[[int, int], None] | None,
    ) -> None:
        """Every file's schema, unified: one pass before the first record (seconds of
        opening files for thousands of them, hence ``progress``)."""
        splits: dict[str, dict[str, Kind]] = {}  # the unified kinds
        first: dict[str, str] = {}  # split -> the file that fixed its fields
        seen_kinds: dict[str, dict[str, dict[str, Kind]]] = {}
        for i, (path, name) in enumerate(zip(paths, names, strict=True)):
            reader = self.codec.open_reader(path)
            self.bytes_in += os.path.getsize(path)
            try:
                kinds = {
                    s: {n: f.kind for n, f in sp.fields.items()}
                    for s, sp in reader.schema.splits.items()
                }
                for split, fields in kinds.items():
                    count = reader.schema.splits[split].count
                    if not fields and count == 0:
                        continue  # an empty list of records says nothing about fields
                    if SOURCE_FIELD in fields:
                        raise SchemaError(
                            f"{path}: split {split!r} has a field {SOURCE_FIELD!r} already; "
                            "dstore adds that field to name each record's file"
                        )
                    self._merge(splits, first, split, fields, path)
                key = json.dumps(
                    {s: {n: k.to_json() for n, k in f.items()} for s, f in kinds.items()}
                )
                kinds = seen_kinds.setdefault(key, kinds)
                counts = {s: sp.count for s, sp in reader.schema.splits.items()}
                self._files.append(
                    _File(path, name, counts, kinds, flat_attrs(reader.schema.attrs))
                )
                if self._spool is not None and getattr(reader, "memory_bytes", False):
                    self._spooled[i] = {
                        s: self._spool.put(reader.read(s)) for s in reader.schema.splits
                    }
            finally:
                reader.close()
            if progress is not None:
                progress(1, len(paths))
        self._fields = splits
        self.schema = self._build_schema(splits)

    @staticmethod
    def _merge(
        splits: dict[str, dict[str, Kind]],
        first: dict[str, str],
        split: str,
        fields: dict[str, Kind],
        path: str,
    ) -> None:
        if split not in splits:
            splits[split] = dict(fields)
            first[split] = path
            return
        have = splits[split]
        missing = [n for n in have if n not in fields]
        extra = [n for n in fields if n not in have]
        if missing or extra:
            what = f"has no field {missing[0]!r}" if missing else f"has a field {extra[0]!r}"
            raise SchemaError(
                f"{path}: split {split!r} {what}, unlike {first[split]} (fields {list(have)})"
            )
        for n, kind in fields.items():
            merged = _unify(have[n], kind)
            if merged is None:
                raise SchemaError(
                    f"{path}: split {split!r}, field {n!r} is {kind.describe()}, but in "
                    f"{first[split]} it is {have[n].describe()}"
                )
            have[n] = merged

    def _build_schema(self, splits: dict[str, dict[str, Kind]]) -> Schema:
        files = self._files
        flat = [f.attrs for f in files]
        common = {
            k: v for k, v in (flat[0] if flat else {}).items() if all(a.get(k) == v for a in flat)
        }
        attrs = unflatten_attrs(common)
        varying = [{k: v for k, v in a.items() if common.get(k) != v} for a in flat]
        names = list(splits) or [s for f in files for s in f.counts][:1]
        attrs[SOURCES_ATTR] = {
            "field": SOURCE_FIELD,
            "format": self.codec.name,
            "files": [f.name for f in files],
            # a list per split: records of each file, in file order
            "records": {s: [f.counts.get(s, 0) for f in files] for s in names},
            **({"attrs": varying} if any(varying) else {}),
        }
        out = {}
        for s in names:
            fields = {n: FieldSpec(n, k) for n, k in splits.get(s, {}).items()}
            fields[SOURCE_FIELD] = FieldSpec(SOURCE_FIELD, String())
            count = sum(f.counts.get(s, 0) for f in files)
            out[s] = SplitSpec(s, count, fields)
        return Schema(out, attrs)

    def _reader(self, i: int) -> tuple[Reader, bool]:
        f = self._files[i]
        if i in self._spooled:
            assert self._spool is not None
            return _SpooledFile(f.path, self._spool, self._spooled[i], f.counts), False
        reader = self.codec.open_reader(f.path)
        kinds = {
            s: {n: fs.kind for n, fs in sp.fields.items()} for s, sp in reader.schema.splits.items()
        }
        counts = {s: sp.count for s, sp in reader.schema.splits.items()}
        if kinds != f.kinds or counts != f.counts:
            reader.close()
            raise CodecIOError(f"{f.path}: the file changed while it was being read")
        return reader, False

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        counts = np.array([f.counts.get(spec.name, 0) for f in self._files], np.int64)
        ends = np.cumsum(counts)
        first = int(np.searchsorted(ends, start, side="right"))
        inner = [n for n in names if n != SOURCE_FIELD]
        want = self._fields.get(spec.name, {})
        pending: dict[str, list[Column]] = {n: [] for n in names}
        held = 0
        for i in range(first, len(self._files)):
            base = int(ends[i] - counts[i])
            if base >= stop:
                break
            lo, hi = max(start, base) - base, min(stop, int(ends[i])) - base
            if hi <= lo:
                continue
            f = self._files[i]
            if not inner:  # only the file names: known without opening the file
                for pos in range(lo, hi, rows):
                    k = min(hi, pos + rows) - pos
                    pending[SOURCE_FIELD].append(_repeat_string(f.name, k))
                    held += k
                    while held >= rows:
                        yield self._flush(spec, pending, rows)
                        held -= rows
                continue
            reader, cached = self._reader(i)
            try:
                have = f.kinds[spec.name]
                pos = lo
                for batch in reader.iter_batches(
                    spec.name, fields=inner, start=lo, stop=hi, batch_rows=rows
                ):
                    n = len(next(iter(batch.values()))) if batch else 0
                    for name in inner:
                        where = f"{f.path}: split {spec.name!r}, field {name!r}"
                        col = _coerce(batch[name], have[name], want[name], where, pos)
                        pending[name].append(col)
                    pos += n
                    if SOURCE_FIELD in pending:
                        pending[SOURCE_FIELD].append(_repeat_string(f.name, n))
                    held += n
                    while held >= rows:
                        yield self._flush(spec, pending, rows)
                        held -= rows
            finally:
                if not cached:
                    reader.close()
        if held:
            yield self._flush(spec, pending, held)

    @staticmethod
    def _flush(spec: SplitSpec, pending: dict[str, list[Column]], rows: int) -> Batch:
        """The first ``rows`` records held (batches of at most ``rows``, as asked); the rest
        stays pending."""
        out = {}
        for n, parts in pending.items():
            col = concat_columns(spec.fields[n].kind, parts)
            out[n] = slice_column(col, 0, rows)
            parts.clear()
            if len(col) > rows:
                parts.append(slice_column(col, rows, len(col)))
        return out

    def describe(self) -> list[str]:
        return [f"{len(self._files)} {self.codec.name} files read as one dataset"]

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


def _repeat_string(text: str, n: int) -> VarColumn:
    raw = np.frombuffer(text.encode("utf-8"), np.uint8)
    return VarColumn(np.tile(raw, n), np.arange(n + 1, dtype=np.int64) * len(raw))


def open_sources(
    spec: str,
    format: str | None,
    options: Mapping[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> MultiReader:
    """A reader over the files ``spec`` names (all of one format: ``format``, or the one
    their extensions claim); ``progress(1, files)`` after each file's schema is read."""
    try:
        follow = parse_bool(options.get("follow_links", False))
    except ValueError as e:
        raise OptionError(f"option follow_links={options['follow_links']!r}: {e}") from None
    skipped: list[str] = []
    paths, names = expand(spec, format, follow_links=follow, skipped=skipped)
    fmt = format
    if fmt is None:
        formats = {p: _claimed(os.path.basename(p)) for p in paths}
        fmt = formats[paths[0]]
        if fmt is None:
            raise UnknownCodecError(
                paths[0],
                [],
                f"{paths[0]}: no format claims this extension (name one with from_format=)",
            )
        other = next((p for p in paths if formats[p] != fmt), None)
        if other is not None:
            raise SchemaError(
                f"{spec}: {other} is {formats[other] or 'of no known format'}, but {paths[0]} "
                f"is {fmt}: all sources must be of one format (pick one with from_format=)"
            )
    cls = get_codec_class(fmt)
    codec = cls(**{**cls.path_options(paths[0]), **dict(options)})
    reader = MultiReader(spec, paths, names, codec, progress=progress)
    if skipped:  # said, not silent: the user may have meant to read what is behind them
        shown = ", ".join(skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        reader.notes = [
            f"{spec}: {len(skipped)} folder link(s) not followed ({shown}); "
            "follow_links=True reads them"
        ]
    return reader
