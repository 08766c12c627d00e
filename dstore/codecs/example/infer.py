"""Inferring the fields of ``tf.train.Example`` records dstore did not write.

Shared by the formats whose records are serialized Examples (TFRecord and
any other): a format feeds every record of a split to
:class:`ExampleInference` (with where it was read) and gets each field's kind
and :class:`~dstore.codecs.example.fields.FieldEncoding`. The rules are
:class:`_FeatureStats`'s; the pass parses each Example's wire format without
decoding images (PNG sizes come from their headers), so it costs about a read
of the files; only byte strings that are not images are looked at (UTF-8,
serialized tensors).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import CodecIOError, SchemaError
from ...model import Bytes, Image, Ragged, String, StringList
from ...model.schema import FieldSpec, Schema
from .canonical import decode_canonical
from .fields import (
    ExampleRecords,
    FieldEncoding,
    check_manifest_fields,
    describe_fields,
    written_encodings,
)
from .sequence import SequenceStats
from .signature import FeatureSignature, scan_example, signature_of
from .tensorproto import parse_tensor_proto
from .tf import parse_snippet
from .wire import BYTES, FLOAT, KIND_NAMES, SEQ, decode_example

if TYPE_CHECKING:
    from ...sharding import ShardFile

__all__ = ["ExampleInference", "ExampleShards"]


@dataclass
class _FeatureStats:
    """What the pre-pass learns about one feature across the records of a split.

    Rules (README, "Reading foreign TFRecords"): a number list whose length
    varies, or that some records lack, is Ragged (a missing feature reads as an
    empty list); one byte string per record is a PNG/JPEG Image (PNGs of one
    size: a fixed-size image decoded to pixels), a serialized TensorProto
    (a Tensor, Ragged when its first axis varies), String when every record is
    valid UTF-8, else Bytes. A byte-string feature with 0 or several values in
    some record is a list of strings (of bytes unless every string is UTF-8);
    records lacking it then read as an empty list. A byte-string feature with
    exactly one value wherever it is present, missing from some record, is an
    error naming that record: it has no empty value that is not also data."""

    name: str
    kind: int
    first: tuple[str, int]
    present: int = 0
    min_n: int = -1
    max_n: int = -1
    heads: set[bytes | None] = field(default_factory=set)
    missing_at: tuple[str, int] | None = None
    utf8: bool = True
    tensor: bool = True
    tensor_dtype: np.dtype | None = None
    tensor_shapes: set[tuple[int, ...]] = field(default_factory=set)
    bad_at: tuple[str, int] | None = None  # a byte-string feature with n != 1: a list

    @property
    def looks(self) -> bool:
        """True while the values themselves must be read (byte strings that are not images)."""
        listy = self.bad_at is not None
        return self.kind == BYTES and (None in self.heads or listy) and (self.utf8 or self.tensor)

    def absent(self, at: tuple[str, int]) -> None:
        if self.missing_at is None:
            self.missing_at = at

    def see(self, n: int, head: bytes | None, at: tuple[str, int]) -> None:
        self.min_n = n if self.min_n < 0 else min(self.min_n, n)
        self.max_n = max(self.max_n, n)
        if self.kind == BYTES and n != 1 and self.bad_at is None:
            self.bad_at = at
            self.tensor = False  # lists of serialized tensors are not a kind
        if self.kind == BYTES and n == 1:
            self.heads.add(head)

    def look(self, values: Any, where: str) -> None:
        for v in values:
            if self.tensor:
                if v[:1] != b"\x08":
                    self.tensor = False
                else:
                    try:
                        t = parse_tensor_proto(bytes(v), where)
                    except CodecIOError:
                        self.tensor = False
                    else:
                        if not isinstance(t, np.ndarray) or (
                            self.tensor_dtype is not None and t.dtype != self.tensor_dtype
                        ):
                            self.tensor = False
                        else:
                            self.tensor_dtype = t.dtype
                            self.tensor_shapes.add(t.shape)
            if self.utf8 and not _is_utf8(v):
                self.utf8 = False

    def field(self, total: int) -> tuple[FieldSpec, FieldEncoding]:
        name = self.name
        missing = self.present < total
        if self.kind != BYTES:
            dtype = np.dtype(np.float32 if self.kind == FLOAT else np.int64)
            enc = FieldEncoding(name, "float" if self.kind == FLOAT else "int64")
            if missing or self.min_n != self.max_n:
                return FieldSpec(name, Ragged(dtype, ())), enc
            return FieldSpec.tensor(name, dtype, () if self.max_n == 1 else (self.max_n,)), enc
        if self.bad_at is not None:
            # images were never text; other strings were looked at once the list showed
            text = self.utf8 and not any(h is not None for h in self.heads)
            return FieldSpec(name, StringList(text)), FieldEncoding(name, "strings")
        if missing:
            assert self.missing_at is not None  # set with the first record that lacks it
            path, index = self.missing_at
            raise SchemaError(
                f"{path}: feature {name!r} has no value in record {index} (first seen in record "
                f"{self.first[1]}): a byte-string feature with one value in every other record "
                "has no empty value that is not also data"
            )
        heads = self.heads
        if heads and None not in heads:
            return self._image_field()
        if None in heads and len(heads) > 1:  # some images, some not: keep every byte
            return FieldSpec(name, Bytes()), FieldEncoding(name, "bytes")
        if self.tensor and self.tensor_dtype is not None:
            return self._tensor_field(self.tensor_dtype)
        return FieldSpec(name, String() if self.utf8 else Bytes()), FieldEncoding(name, "bytes")

    def _image_field(self) -> tuple[FieldSpec, FieldEncoding]:
        """One image per record (every head a PNG's IHDR or ``b"jpeg"``)."""
        name = self.name
        images = {h for h in self.heads if h is not None}
        if len(images) == 1 and b"jpeg" not in images:
            # PNGs of one size: a fixed-size image, decoded to pixels as before
            return self._fixed_png(next(iter(images))), FieldEncoding(name, "png")
        if images == {b"jpeg"}:
            kind = Image(np.dtype(np.uint8), None, None, None, "jpeg")
            return FieldSpec(name, kind), FieldEncoding(name, "encoded")
        if b"jpeg" in images:  # PNG and JPEG mixed
            return FieldSpec(name, Bytes()), FieldEncoding(name, "bytes")
        depth = {h[16] for h in images if h}
        dtype = np.dtype(np.uint16 if depth == {16} else np.uint8)
        colours = {h[17] for h in images if h}
        channels = _PNG_CHANNELS.get(next(iter(colours))) if len(colours) == 1 else None
        kind = Image(dtype, channels, None, None, "png")
        return FieldSpec(name, kind), FieldEncoding(name, "encoded")

    def _tensor_field(self, dtype: np.dtype) -> tuple[FieldSpec, FieldEncoding]:
        """Serialized tensors of one dtype: a Tensor, or Ragged when the first axis varies."""
        name, shapes = self.name, self.tensor_shapes
        if len(shapes) == 1:
            return FieldSpec.tensor(name, dtype, next(iter(shapes))), FieldEncoding(name, "tensor")
        inner = {sh[1:] for sh in shapes}
        if len(inner) == 1 and all(len(sh) >= 1 for sh in shapes):
            kind = Ragged(dtype, next(iter(inner)))
            return FieldSpec(name, kind), FieldEncoding(name, "tensor")
        raise SchemaError(
            f"{self.first[0]}: feature {name!r} holds serialized tensors of shapes "
            f"{sorted(shapes)[:3]}: only the first axis may vary between records"
        )

    def _fixed_png(self, ihdr: bytes) -> FieldSpec:
        width, height = int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
        channels = _PNG_CHANNELS.get(ihdr[17])
        dtype = np.dtype(np.uint16 if ihdr[16] == 16 else np.uint8)
        if channels in (None, 0, 1):
            return FieldSpec.tensor(self.name, dtype, (height, width))
        return FieldSpec.tensor(self.name, dtype, (height, width, channels))


#: PNG colour type -> channels after decoding (palette images decode to RGB)
_PNG_CHANNELS = {0: 0, 2: 3, 3: 3, 4: 2, 6: 4}


def _is_utf8(value: bytes | memoryview) -> bool:
    """Whether ``value`` is valid UTF-8, decoded 1 MiB at a time (a decode of the whole
    would allocate a string of its size)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(value)
    step = 1 << 20
    try:
        for lo in range(0, len(view), step):
            decoder.decode(view[lo : lo + step])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


class _Values:
    """A record's decoded features, decoded once and only when a rule needs them."""

    def __init__(self, rec: bytes, where: str, values: Any, sig: dict[str, FeatureSignature]):
        self.rec, self.where, self.values, self.sig = rec, where, values, sig

    def get(self) -> Any:
        if self.values is None:
            # number lists are not looked at: decode the byte strings alone
            looked = {n for n, (k, _, _) in self.sig.items() if k % SEQ == BYTES}
            # views into the record: a large byte string is looked at, not copied
            self.values = decode_example(self.rec, self.where, looked, views=True)
        return self.values


class ExampleInference:
    """The fields of a split of Examples, learned from every record fed to :meth:`add`."""

    def __init__(self, first_path: str) -> None:
        self.first_path = first_path
        self.stats: dict[str, _FeatureStats] = {}
        self.seqs: dict[str, SequenceStats] = {}  # a SequenceExample's feature lists
        self.ref: dict[str, FeatureSignature] | None = None
        # the features (UTF-8 name, kind) of the last record scanned, in order: a record in
        # their canonical form is decoded in one walk, its signature read off its values
        self.canon: list[tuple[bytes, int]] | None = None
        self.total = 0
        #: features seen only as an empty ``Feature{}`` so far: (first record's file, index)
        self.empty: dict[str, tuple[str, int]] = {}
        #: what the reader should say (a feature left out)
        self.notes: list[str] = []

    def add(self, rec: bytes, path: str, index: int, where: str) -> None:
        """Learn from record ``index`` of ``path`` (``where`` names it in messages)."""
        values, sig = self._signature(rec, where)
        if (
            sig == self.ref
            and not any(st.looks for st in self.stats.values())
            and not any(sq.looks for sq in self.seqs.values())
        ):
            for seen in self.stats.values():  # the common case: nothing new to learn
                seen.present += 1
            self.total += 1
            return
        self.ref = sig
        self._learn(rec, path, index, where, values, sig)
        self.total += 1

    def _signature(self, rec: bytes, where: str) -> tuple[Any, dict[str, FeatureSignature]]:
        """The record's values (when it has the last record's canonical form) and its
        signature; a record of another form becomes the canonical one."""
        values = None if self.canon is None else decode_canonical(rec, self.canon, views=True)
        if values is not None:
            return values, signature_of(values)
        sig = scan_example(rec, where)
        self.canon = [(name.encode(), k) for name, (k, _, _) in sig.items()]
        if any(k >= SEQ for k, _, _ in sig.values()):
            self.canon = None
        return values, sig

    def _learn(
        self,
        rec: bytes,
        path: str,
        index: int,
        where: str,
        values: Any,
        sig: dict[str, FeatureSignature],
    ) -> None:
        """A record whose features differ from the last one's: each feature seen or absent."""
        at = (path, index)
        lazy = _Values(rec, where, values, sig)
        for name in self.stats.keys() - sig.keys():
            self.stats[name].absent(at)
        for name, (kind, n, head) in sig.items():
            if kind == 0:  # an empty Feature{}: this record lacks the feature
                if name in self.stats:
                    self.stats[name].absent(at)
                elif name not in self.seqs:
                    self.empty.setdefault(name, at)
                continue
            if (kind >= SEQ and name in self.stats) or (kind < SEQ and name in self.seqs):
                raise SchemaError(
                    f"{path}: {name!r} is a feature list in some records and a feature "
                    f"in others (record {index}): a feature must keep one kind"
                )
            if kind >= SEQ:
                self._see_list(name, kind, n, head, at, lazy)
            else:
                self._see(name, kind, n, head, at, lazy)

    def _see_list(
        self, name: str, kind: int, n: int, head: bytes | None, at: tuple[str, int], lazy: _Values
    ) -> None:
        sq = self.seqs.setdefault(name, SequenceStats(name))
        if kind > SEQ and sq.kind > SEQ and kind != sq.kind:
            raise SchemaError(
                f"{at[0]}: feature list {name!r} is a {KIND_NAMES[sq.kind]} and a "
                f"{KIND_NAMES[kind]} in record {at[1]}: it must keep one kind"
            )
        sq.see(kind, head or b"", at)
        if sq.looks and n:
            sq.look(lazy.get()[name][1])

    def _see(
        self, name: str, kind: int, n: int, head: bytes | None, at: tuple[str, int], lazy: _Values
    ) -> None:
        path, index = at
        st = self.stats.get(name)
        if st is None:
            st = self.stats[name] = _FeatureStats(name, kind, at)
            empty_at = self.empty.pop(name, None)
            if self.total:  # absent (or an empty Feature{}) in the records before this one
                st.missing_at = st.missing_at or empty_at or (self.first_path, 0)
        elif st.kind != kind:
            raise SchemaError(
                f"{path}: feature {name!r} is a {KIND_NAMES[st.kind]} in record "
                f"{st.first[1]} of {st.first[0]} and a {KIND_NAMES[kind]} in record "
                f"{index}: a feature must keep one kind"
            )
        st.present += 1
        st.see(n, head, at)
        if kind == BYTES and st.looks and n:
            st.look(lazy.get()[name][1], f"{path}: record {index}")

    def result(self) -> tuple[dict[str, FieldSpec], dict[str, FieldEncoding]]:
        """Each field's spec and encoding, from all the records seen."""
        fields: dict[str, FieldSpec] = {}
        encs: dict[str, FieldEncoding] = {}
        for name, st in self.stats.items():
            fields[name], encs[name] = st.field(self.total)
        for name, sq in self.seqs.items():
            fields[name], encs[name] = sq.field(), FieldEncoding(name, sq.encoding)
        for name, (path, index) in self.empty.items():
            if name not in fields:  # no record gave it a kind: there is nothing to read
                self.notes.append(
                    f"{path}: feature {name!r} is an empty tf.train.Feature in every record "
                    f"(first in record {index}): it has no kind or value, left out"
                )
        return fields, encs


class ExampleShards(ExampleRecords):
    """What a sharded reader of serialized Examples shares with every other one: the
    field encodings, from a manifest or learned from every record of files dstore did
    not write, and what ``dstore info`` shows of them (its format adds how the shards
    are read: :meth:`shards_note`, :meth:`source_lines`).
    A mixin placed before :class:`~dstore.sharding.ShardedDirectoryReader`."""

    schema: Schema
    notes: Sequence[str]
    shards: dict[str, list[ShardFile]]

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        self.encodings = check_manifest_fields(manifest, self.schema, where)

    def written_encodings(self, spec: FieldSpec) -> set[str]:
        return written_encodings(spec)

    def infer_fields(
        self,
        split: str,
        paths: list[str],
        records: Callable[[str], Iterable[tuple[bytes, str]]],
    ) -> dict[str, FieldSpec]:
        """The fields of ``split`` from every record of ``paths`` (``records(path)``: each
        with where it was read); the encodings are kept for reading."""
        inference = ExampleInference(paths[0])
        for p in paths:
            for i, (rec, where) in enumerate(records(p)):
                inference.add(rec, p, i, where)
        fields, self.encodings[split] = inference.result()
        self.notes = [*self.notes, *inference.notes]  # e.g. features empty in every record
        return fields

    def describe(self) -> list[str]:
        """``dstore info``: each split's shards and field encodings, then the TensorFlow
        snippet of the first split that has fields and shards."""
        lines = []
        for split, shards in self.shards.items():
            lines.append(f"split {split}: {len(shards)} shard(s){self.shards_note(split)}")
            lines.extend(describe_fields(self.encodings[split]))
        for split, spec in self.schema.splits.items():
            if spec.fields and self.shards[split]:
                return [*lines, f"TensorFlow ({split} split):", *self.tensorflow_snippet(split)]
        return lines

    def tensorflow_snippet(self, split: str) -> list[str]:
        """Python that reads ``split`` and parses each record with TensorFlow; every line
        runs as is."""
        encodings = self.encodings[split]
        paths = [s.path for s in self.shards[split]]
        return [*parse_snippet(self.schema.splits[split], encodings), *self.source_lines(paths)]

    def shards_note(self, split: str) -> str:
        """What ``dstore info`` adds after a split's shard count."""
        return ""

    def source_lines(self, paths: list[str]) -> list[str]:
        """The snippet's lines that read the records of ``paths`` and ``decode`` them."""
        raise NotImplementedError
