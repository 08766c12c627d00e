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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..abc import Codec, Reader
from ..errors import (
    CodecIOError,
    OptionError,
    SchemaError,
    UnknownCodecError,
)
from ..model import Column, Kind, String, VarColumn, concat_columns, slice_column
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec
from ..options import parse_bool
from ..registry import get_codec_class
from .listing import _claimed, expand
from .spool import _Desc, _Spool, _SpooledFile
from .unify import SOURCE_FIELD, SOURCES_ATTR, _coerce, _unify, flat_attrs, unflatten_attrs

__all__ = ["SOURCES_ATTR", "SOURCE_FIELD", "MultiReader", "open_sources"]


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
