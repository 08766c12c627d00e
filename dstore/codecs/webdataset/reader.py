"""Reading WebDataset tars: dstore's folders (manifest) and anyone's tars (by inspection).

Nothing is extracted: each shard's headers are walked once (:func:`.tario.walk`)
into a member index -- per sample its members' offsets -- kept for the
reader's life, so any record range is one seek and one read, and training
workers may cut a shard into pieces (:meth:`WebDatasetReader.shard_pieces`).

Foreign tars (a ``.tar``, a folder of them, a ``{000000..000009}`` brace
pattern, expanded here) are grouped into samples as WebDataset does (key: the
member name up to the first dot of its base name; field: the rest, e.g.
``jpg`` or ``seg.png``) and typed from extensions: ``png/jpg/jpeg/webp`` an
encoded Image, ``cls/index`` an int64 scalar, ``npy`` a Tensor when every
record has one dtype and shape (else Ragged; the header is read, never a
pickle), ``txt`` a String, ``json`` a list of strings (any other JSON is refused
by field), anything else Bytes. Every sample of a split must hold the same
fields: one that lacks a field (or has another) is refused in one line naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ... import fs
from ...errors import CodecIOError, SchemaError
from ...model import (
    Bytes,
    Image,
    Ragged,
    String,
    StringList,
    Tensor,
    VarColumn,
    to_column,
)
from ...model.schema import DEFAULT_SPLIT, KNOWN_SPLITS, Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile, brace_files
from .._npy import npy_header
from . import tario
from .encodings import ENCODINGS, EXT_IMAGE, FieldEncoding, decode_value
from .writer import FORMAT_ID

__all__ = ["WebDatasetReader"]

_KEY_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's key / suffix split
_OURS_RE = re.compile(r"^(?P<split>.+)-\d{6}\.tar$")


@dataclass(frozen=True)
class Sample:
    """One sample of a shard: its key, its members by suffix, the bytes it spans."""

    key: str
    members: dict[str, tario.Member]
    start: int
    end: int


def _group(members: Iterator[tario.Member], path: str) -> list[Sample]:
    """Consecutive members of one key make a sample (as WebDataset groups them)."""
    out: list[Sample] = []
    key = ""
    group: dict[str, tario.Member] = {}

    def close() -> None:
        if group:
            first = min(g.header for g in group.values())
            out.append(Sample(key, dict(group), first, max(g.end for g in group.values())))
            group.clear()

    for m in members:
        parts = _KEY_RE.match(m.name)
        if parts is None:
            raise CodecIOError(f"{path}: member {m.name!r} has no <key>.<extension> name")
        if parts.group(1) != key:
            close()
            key = parts.group(1)
        suffix = parts.group(2)
        if suffix in group:
            raise CodecIOError(f"{path}: sample {key!r} has two members {suffix!r}")
        group[suffix] = m
    close()
    return out


class _Field:
    """What the members of one suffix across a split are (foreign tars)."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.ext = suffix.rsplit(".", 1)[-1].lower()
        self.npy: set[tuple[str, tuple[int, ...]]] = set()

    def see(self, f: IO[bytes], m: tario.Member, where: str) -> None:
        if self.ext == "npy":
            dtype, shape = npy_header(f, m.data, m.size, where)
            self.npy.add((dtype.str, tuple(shape)))
        elif self.ext == "json":
            f.seek(m.data)
            try:
                value = json.loads(f.read(m.size))
            except ValueError:
                value = None
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise SchemaError(
                    f"{where}: field {self.suffix!r} is JSON other than a list of strings, which "
                    "dstore does not read; leave it out of the tars"
                )

    def spec(self) -> tuple[FieldSpec, FieldEncoding]:
        name, ext = self.suffix, self.ext
        if ext in EXT_IMAGE:
            kind: Any = Image(np.dtype(np.uint8), None, None, None, EXT_IMAGE[ext])
            return FieldSpec(name, kind), FieldEncoding(name, "encoded")
        if ext in ("cls", "index"):
            return FieldSpec(name, Tensor(np.dtype(np.int64), ())), FieldEncoding(name, "cls")
        if ext == "npy":
            return FieldSpec(name, self._npy_kind()), FieldEncoding(name, "npy")
        if ext == "txt":
            return FieldSpec(name, String()), FieldEncoding(name, "txt")
        if ext == "json":
            return FieldSpec(name, StringList()), FieldEncoding(name, "json")
        return FieldSpec(name, Bytes()), FieldEncoding(name, "bin")

    def _npy_kind(self) -> Tensor | Ragged:
        dtypes = {d for d, _ in self.npy}
        inner = {s[1:] for _, s in self.npy}
        if len(self.npy) == 1:
            ((dtype, shape),) = self.npy
            return Tensor(np.dtype(dtype), shape)
        if len(dtypes) == 1 and len(inner) == 1 and all(len(s) for _, s in self.npy):
            return Ragged(np.dtype(dtypes.pop()), inner.pop())
        raise SchemaError(
            f"field {self.suffix!r}: .npy records differ in dtype or in more than their first "
            f"axis ({sorted(self.npy)[:3]} ...), so they are neither one tensor nor ragged"
        )


def _column(spec: FieldSpec, values: list[Any], where: str) -> Any:
    kind = spec.kind
    if spec.dense:
        return np.stack(values).astype(spec.dtype, copy=False)
    if isinstance(kind, (String, Bytes)) or (isinstance(kind, Image) and kind.encoding != "raw"):
        col = VarColumn.from_bytes(values)
        if isinstance(kind, String):
            try:
                col.check_utf8(where)
            except SchemaError as e:
                raise CodecIOError(str(e)) from None
        return col
    return to_column(kind, values, where)


class WebDatasetReader(ShardedDirectoryReader):
    """Tar shards of samples; a member index per shard makes every record range cheap."""

    format_id = FORMAT_ID
    codec_name = "webdataset"
    file_pattern = r"\.tar$"

    def __init__(self, path: str, workers: int = 0) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        self._index: dict[str, list[Sample]] = {}
        super().__init__(path, workers)

    def split_of(self, filename: str) -> str:
        m = _OURS_RE.match(filename)
        if m and m.group("split") in KNOWN_SPLITS:
            return m.group("split")
        stem = filename.split(".", 1)[0]
        return stem if stem in KNOWN_SPLITS else super().split_of(filename)

    def find_files(self, path: str) -> list[str]:
        """A ``{000000..000009}`` brace pattern (WebDataset's URLs) names every file."""
        return brace_files(path) or super().find_files(path)

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        try:
            fields = manifest["fields"]
            self.encodings = {split: FieldEncoding.table(fields[split]) for split in fields}
        except (KeyError, TypeError, AttributeError) as e:
            raise CodecIOError(f"{where}: unreadable manifest: {e}") from None
        for split, spec in self.schema.splits.items():
            encs = self.encodings.get(split, {})
            if set(encs) != set(spec.fields):
                raise CodecIOError(f"{where}: split {split!r}: fields disagree with the schema")
            for name, enc in encs.items():
                if enc.encoding not in ENCODINGS or "/" in enc.suffix:
                    raise CodecIOError(f"{where}: split {split!r}, field {name!r}: bad encoding")

    def samples(self, path: str) -> list[Sample]:
        """The member index of one shard (walked once, then kept)."""
        if path not in self._index:
            try:
                with fs.open_binary(path) as f:
                    self._index[path] = _group(tario.walk(f, path, fs.getsize(path)), path)
            except FileNotFoundError:  # a shard the manifest lists (a damaged name, a lost file)
                raise CodecIOError(f"{path}: no such shard (the manifest lists it)") from None
        return self._index[path]

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        fields: dict[str, _Field] = {}
        first: tuple[str, str] | None = None
        shards = []
        for path in paths:
            samples = self.samples(path)
            with fs.open_binary(path) as f:
                for s in samples:
                    if first is None:
                        first = (path, s.key)
                        fields = {suffix: _Field(suffix) for suffix in s.members}
                    elif s.members.keys() != fields.keys():
                        odd = sorted(s.members.keys() ^ fields.keys())[0]
                        raise SchemaError(
                            f"{path}: sample {s.key!r} {'has' if odd in s.members else 'lacks'} "
                            f"field {odd!r} unlike sample {first[1]!r} of {first[0]}: every sample "
                            "of a split must hold the same fields"
                        )
                    for suffix, m in s.members.items():
                        fields[suffix].see(f, m, f"{path}: sample {s.key!r}")
            shards.append(ShardFile(path, len(samples)))
        specs = {suffix: fl.spec() for suffix, fl in fields.items()}
        self.encodings[split] = {name: enc for name, (_, enc) in specs.items()}
        return {name: spec for name, (spec, _) in specs.items()}, shards

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """Entering a shard mid-way is one seek (the member index), so cut it by size."""
        return self.pieces_by_size(shard, target_bytes)

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[Any]:
        """Samples ``lo:hi`` of ``shard``, each with the bytes it spans (one seek to ``lo``)."""
        samples = self.samples(shard.path)
        self.check_count(shard, len(samples), "samples")
        with fs.open_binary(shard.path) as f:
            for s in samples[lo:hi]:
                f.seek(s.start)
                buf = f.read(s.end - s.start)
                if len(buf) != s.end - s.start:
                    raise CodecIOError(f"{shard.path}: ends inside sample {s.key!r}")
                yield s, buf, shard.path

    def decode_records(self, spec: SplitSpec, names: list[str], records: list[Any]) -> Batch:
        encs = self.encodings[spec.name]
        values: dict[str, list[Any]] = {name: [] for name in names}
        for s, buf, path in records:
            for name in names:
                m = s.members.get(encs[name].suffix)
                where = f"{path}: sample {s.key!r}, field {name!r}"
                if m is None:
                    raise CodecIOError(f"{where}: no member {encs[name].suffix!r}")
                data = buf[m.data - s.start : m.data - s.start + m.size]
                values[name].append(decode_value(encs[name], spec.fields[name], data, where))
        return {
            n: _column(spec.fields[n], v, f"{spec.name}: field {n!r}") for n, v in values.items()
        }

    def describe(self) -> list[str]:
        lines = [
            f"{split}: {len(shards)} tar shard(s); members "
            + ", ".join(
                f"{n}: .{e.suffix} ({e.encoding})" for n, e in self.encodings[split].items()
            )
            for split, shards in self.shards.items()
        ]
        if self.manifest is None:
            lines.append(
                f"no dstore manifest: fields inferred from extensions ({DEFAULT_SPLIT!r} "
                "unless file names say train/test/...)"
            )
        return lines
