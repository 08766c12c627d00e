"""Fields of a ``tf.train.Example``: how each dstore field kind is stored, both ways.

Shared by every format whose records are serialized Examples (TFRecord shards and
any other), so the bytes of one record are the same in all and a
record read from one is copied to the other unchanged (:class:`SerializedBatch`).

Contract:

* :func:`choose_encoding` picks a :class:`FieldEncoding` per field (the feature
  name and how the values are stored: PNG or a lossy image, int64_list,
  float_list, raw little-endian bytes, byte strings, feature lists), each
  encoding one small class of :mod:`.encodings` that encodes and
  decodes its records;
* :class:`.encoder.ExampleEncoder` turns batches into serialized Examples (unframed: a
  format adds its own framing), on all cores, the same bytes in every process;
* :func:`read_examples` decodes serialized Examples back into batches, each
  error naming the record (``where``), keeping the records a writer may copy.

No TensorFlow: the wire format is :mod:`dstore.codecs.example.wire`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from contextlib import suppress
from typing import Any

import numpy as np

from ...errors import CodecIOError, DstoreError, UnsupportedDtypeError
from ...images.imagecodec import LOSSY_FORMATS, LossyImage, is_image_like
from ...model import Bytes, Image, Ragged, String, StringList, VarColumn
from ...model.schema import Batch, FieldSpec, Schema, SerializedBatch, SplitSpec
from .canonical import decode_canonical
from .encodings import ENCODINGS, FieldEncoding
from .sequence import sequence_encoding
from .wire import TF_FEATURE_ATTR, decode_example

__all__ = [
    "ENCODINGS",
    "ExampleRecords",
    "FieldEncoding",
    "batch_signature",
    "check_fields",
    "check_manifest_fields",
    "choose_encoding",
    "describe_fields",
    "read_examples",
    "written_encodings",
]

#: records per task handed to a worker thread (encoding and decoding)
CHUNK = 16

# ------------------------------------------------------------------ field encoding


def choose_encoding(
    spec: FieldSpec,
    feature: str,
    images: set[str] | None,
    lossy: LossyImage | None = None,
    codec: str = "tfrecord",
) -> FieldEncoding:
    """How ``spec`` is stored; image fields take ``lossy`` (refused by name when they cannot).
    ``codec`` starts the messages."""
    if lossy is not None and images is not None and spec.name in images and spec.dense:
        # named an image: the lossy format's own rules apply, not PNG's
        lossy.check_field(spec, codec)
        return FieldEncoding(feature, lossy.format, lossy.quality)
    enc = _choose_encoding(spec, feature, images, codec)
    if enc.encoding != "png" or lossy is None:
        return enc
    lossy.check_field(spec, codec)
    return FieldEncoding(feature, lossy.format, lossy.quality)


def written_encodings(spec: FieldSpec) -> set[str]:
    """Every encoding :func:`choose_encoding` gives ``spec`` whatever the options (named
    an image or not, any lossy format): what a manifest may say of the field."""
    out = set()
    for images in (None, set(), {spec.name}):
        for lossy in (None, *(LossyImage(f) for f in LOSSY_FORMATS)):
            with suppress(DstoreError):  # not an image (a lossy format's) rules take
                out.add(choose_encoding(spec, spec.name, images, lossy).encoding)
    return out


def _choose_encoding(
    spec: FieldSpec, feature: str, images: set[str] | None, codec: str
) -> FieldEncoding:
    kind = spec.kind
    if isinstance(kind, Bytes) and spec.attrs.get(TF_FEATURE_ATTR):
        return FieldEncoding(feature, "feature")
    seq = sequence_encoding(spec, _number_encoding(spec.dtype))
    if seq is not None:  # read from a SequenceExample's feature list: written back as one
        return FieldEncoding(feature, seq)
    if isinstance(kind, (String, Bytes)):
        return FieldEncoding(feature, "bytes")
    if isinstance(kind, StringList):
        return FieldEncoding(feature, "strings")
    if isinstance(kind, Image):
        # raw pixels of any size become PNG; encoded images travel as they are
        return FieldEncoding(feature, "png" if kind.encoding == "raw" else "encoded")
    if isinstance(kind, Ragged):
        # a variable-length list of the flattened values; the inner shape is in the manifest
        return FieldEncoding(feature, _number_encoding(spec.dtype))
    png = (spec.name in images) if images is not None else is_image_like(spec)
    if png:
        if spec.dtype.kind != "u" or spec.dtype.itemsize not in (1, 2):
            raise UnsupportedDtypeError(
                f"{codec}: field {spec.name!r} is {spec.dtype}: PNG takes uint8 or uint16 only "
                "(convert floats to integers yourself; dstore never rescales silently)"
            )
        if len(spec.shape) not in (2, 3) or (
            len(spec.shape) == 3 and spec.shape[2] not in (1, 3, 4)
        ):
            raise UnsupportedDtypeError(
                f"{codec}: field {spec.name!r} has record shape {spec.shape}: "
                "PNG needs (H, W) or (H, W, 1|3|4)"
            )
        return FieldEncoding(feature, "png")
    return FieldEncoding(feature, _number_encoding(spec.dtype))


def _number_encoding(dtype: np.dtype) -> str:
    """int64_list for integers and bools (uint64 as its int64 bit pattern), float_list
    for float32, raw little-endian bytes for any other dtype."""
    if dtype.kind in "biu":
        return "int64"
    if dtype.kind == "f" and dtype.itemsize == 4:
        return "float"
    return "raw"


def _copy_signature(enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str, str] | None:
    """What a field's Feature bytes, as read, are valid for when written again -- or None
    for an encoding whose decoded record is written as other bytes (PNG decoded to
    pixels, a tensor, a lossy image, a feature list; numbers read into another dtype
    than the int64/float32 the wire holds)."""
    if enc.how.copyable(spec):
        return (enc.feature, enc.encoding, spec.dtype.str)
    return None


def batch_signature(
    encs: dict[str, FieldEncoding], split: SplitSpec, names: Sequence[str]
) -> tuple[Any, ...] | None:
    """The fields' copy signatures in ``names`` order; None when one cannot be copied."""
    sig = tuple(_copy_signature(encs[name], split.fields[name]) for name in names)
    return None if None in sig else sig


def to_column(spec: FieldSpec, col: Any) -> Any:
    """A batch column from decoded records: the array itself, or values + offsets."""
    if spec.dense:
        return col
    if isinstance(spec.kind, Ragged):
        return VarColumn.from_rows(col, spec.dtype, spec.shape)
    if isinstance(spec.kind, StringList):
        return VarColumn.from_lists(col)
    if isinstance(spec.kind, Image) and spec.kind.encoding == "raw":
        return VarColumn.from_shaped(col, spec.dtype)
    return VarColumn.from_bytes(col)


# ------------------------------------------------------------------ encoding records


def check_fields(schema: Schema, options: Any, codec: str) -> None:
    """Refuse, before a byte is written, fields the options cannot store (by name)."""
    images = None if options.images is None else set(options.images)
    for split in schema.splits.values():
        for spec in split.fields.values():
            choose_encoding(spec, spec.name, images, options.lossy(), codec)


def describe_fields(encs: dict[str, FieldEncoding]) -> list[str]:
    """``dstore info``'s line per field: its feature name and encoding."""
    return [
        f"  {name}: feature {enc.feature!r} as {enc.encoding}"
        + (f" quality {enc.quality}" if enc.lossy else "")
        for name, enc in encs.items()
    ]


# ------------------------------------------------------------------ decoding records


def check_manifest_fields(
    manifest: dict[str, Any], schema: Schema, where: str
) -> dict[str, dict[str, FieldEncoding]]:
    """The field encodings a manifest lists (its ``fields``), checked against its schema."""
    try:
        encodings = {
            split: {
                name: FieldEncoding(e["feature"], e["encoding"], e.get("quality"))
                for name, e in split_fields.items()
            }
            for split, split_fields in manifest["fields"].items()
        }
    except (KeyError, TypeError, AttributeError) as e:
        raise CodecIOError(f"{where}: unreadable manifest: {e}") from None
    if set(encodings) != set(schema.splits):
        raise CodecIOError(
            f"{where}: splits of the schema, fields and shards disagree (corrupt manifest)"
        )
    for split, encs in encodings.items():
        if set(encs) != set(schema.splits[split].fields):
            raise CodecIOError(
                f"{where}: split {split!r}: fields disagree with the schema (corrupt manifest)"
            )
        for name, enc in encs.items():
            if enc.encoding not in ENCODINGS:
                raise CodecIOError(
                    f"{where}: split {split!r}, field {name!r}: unknown encoding {enc.encoding!r}"
                )
            try:
                enc.lossy  # noqa: B018 - checks the quality a lossy field declares
            except ValueError as e:
                raise CodecIOError(
                    f"{where}: split {split!r}, field {name!r}: {e} (corrupt manifest)"
                ) from None
    return encodings


def decode_examples(
    split: SplitSpec,
    encs: dict[str, FieldEncoding],
    names: Sequence[str],
    recs: list[tuple[bytes, str]],
    out: dict[str, np.ndarray | list[Any]],
    offset: int,
    records: list[bytes | None] | None = None,
    canon: list[tuple[bytes, int]] | None = None,
) -> None:
    """Decode ``recs`` (serialized Examples, each with where it was read) into ``out``
    from ``offset``. With ``canon`` (the features' UTF-8 names and kinds, in order) a
    record in that canonical form is decoded in one walk and, with ``records``, kept
    there for a writer to copy (None otherwise)."""
    for i, (rec, where) in enumerate(recs):
        # byte strings as views into the record: a large one is copied once, into its column
        feats = None if canon is None else decode_canonical(rec, canon, views=True)
        if records is not None:
            records[offset + i] = None if feats is None else rec
        if feats is None:
            feats = decode_example(rec, where, views=True)
        for name in names:
            enc = encs[name]
            spec = split.fields[name]
            if enc.feature not in feats:
                empty = enc.how.missing(spec)
                if empty is None:
                    raise CodecIOError(
                        f"{where}: Example has no feature {enc.feature!r} (field {name!r})"
                    )
                out[name][offset + i] = empty
                continue
            kind, values = feats[enc.feature]
            column = out[name]
            if isinstance(column, np.ndarray):  # a dense field: decoded into its row
                enc.how.decode_into(enc, spec, kind, values, where, column[offset + i, ...])
            else:
                column[offset + i] = enc.how.decode(enc, spec, kind, values, where)


def read_examples(
    spec: SplitSpec,
    encs: dict[str, FieldEncoding],
    names: list[str],
    raw: Iterator[tuple[bytes, str]],
    count: int,
    rows: int,
    pool: Executor,
) -> Iterator[Batch]:
    """``count`` serialized Examples from ``raw`` (each with where it was read) decoded on
    ``pool``, as batches of at most ``rows``. When every field is read and each can be
    copied, a batch is a :class:`SerializedBatch` carrying the records a writer of the
    same Examples (TFRecord, ...) writes again without encoding them."""
    signature = batch_signature(encs, spec, names) if names == list(spec.fields) else None
    canon = None
    if signature is not None:
        canon = [(encs[n].feature.encode(), encs[n].how.wire) for n in names]
    pos = 0
    while pos < count:
        n = min(rows, count - pos)
        # dense fields fill an array in place; others collect records, joined below
        out: dict[str, np.ndarray | list[Any]] = {
            name: np.empty((n, *f.shape), f.dtype) if f.dense else [None] * n
            for name in names
            for f in (spec.fields[name],)
        }
        records: list[bytes | None] | None = None if signature is None else [None] * n
        futures = []
        for off in range(0, n, CHUNK):
            recs = [next(raw) for _ in range(min(CHUNK, n - off))]
            futures.append(
                pool.submit(decode_examples, spec, encs, names, recs, out, off, records, canon)
            )
        for fut in futures:
            fut.result()
        del futures, recs  # nothing but ``out`` and ``records`` holds a record now
        # each field's records are dropped as soon as its column is joined
        cols = {name: to_column(spec.fields[name], out.pop(name)) for name in list(out)}
        if records is None or signature is None:
            yield cols
        else:
            yield SerializedBatch(cols, records, signature)
        del cols, records  # this batch is the consumer's now: not kept while the next is read
        pos += n


class ExampleRecords:
    """What a sharded reader of ``tf.train.Example`` records (TFRecord, ArrayRecord)
    decodes the same way: stored records read apart (``shard_raw_records``), then the
    records of every shard a window touches decoded into one batch."""

    encodings: dict[str, dict[str, FieldEncoding]]
    #: a window's records of every shard are decoded into one batch (no join per shard)
    decodes_across_shards = True

    def decode_raw(
        self,
        spec: SplitSpec,
        names: list[str],
        raw: Iterator[tuple[bytes, str]],
        count: int,
        pool: Executor,
    ) -> Batch:
        return next(read_examples(spec, self.encodings[spec.name], names, raw, count, count, pool))
