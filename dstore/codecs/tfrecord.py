"""TFRecord directories of ``tf.train.Example`` with PNG images -- no TensorFlow needed.

Layout written (``data.tfrecords/``)::

    train-00000-of-00002.tfrecord   shards of about ``shard_mb`` each, per split
    ...
    dstore.json                     schema, per-field encoding, shards (records, bytes, sha256)

Field encoding: image-like fields (uint8/uint16, ``(H, W)`` or ``(H, W, 1|3|4)``)
become PNG bytes; integers and bools ``int64_list``; float32 ``float_list``;
anything else (float16, float64, complex) raw little-endian bytes, its dtype
and shape kept in the manifest so every round trip restores them. PNG
encoding and decoding run on all cores (imagecodecs releases the GIL).

Reading also takes TFRecords written by others -- a single file, a glob, a
folder of shards, TFDS names like ``mnist-train.tfrecord-00000-of-00001`` --
inferring the schema from the first Example of each split.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import zlib
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from glob import escape as glob_escape
from typing import Any

import numpy as np

from .. import fs
from ..errors import CodecIOError, DstoreError, SchemaError, UnsupportedDtypeError
from ..fs import is_url
from ..model import Bytes, Image, Ragged, String, StringList, Tensor, VarColumn
from ..options import option, options_json
from ..parallel import default_workers, ordered_map
from ..precision import dequant_params
from ..schema import (
    DEFAULT_SPLIT,
    KNOWN_SPLITS,
    Batch,
    FieldSpec,
    Schema,
    SerializedBatch,
    SplitSpec,
    slice_batch,
)
from ..sharding import (
    ShardedDirectoryReader,
    ShardedDirectoryWriter,
    ShardFile,
    is_manifest_of,
    manifest_base,
    plan_by_size,
)
from ..sharding.reader import DECODE_GROUP
from . import _tfrecord_io as rio
from ._example import (
    BYTES,
    FLOAT,
    INT64,
    KIND_NAMES,
    SEQ,
    TF_FEATURE_ATTR,
    FeatureSignature,
    decode_canonical,
    decode_example,
    encode_example,
    encode_feature,
    encode_sequence_example,
    scan_example,
    signature_of,
)
from ._imagecodec import IMAGE_FORMATS, LOSSY_FORMATS, LossyImage, check_quality, is_image_like
from ._png import decode as png_decode
from ._png import encoder_id, png_encoder
from ._sequence import (
    SEQ_ENCODINGS,
    SequenceStats,
    empty_record,
    encode_steps,
    sequence_encoding,
    sequence_value,
)
from ._sequence import snippet as sequence_snippet
from ._strings import first_invalid_utf8
from ._tensorproto import parse_tensor_proto
from .base import (
    Codec,
    Reader,
    Shard,
    ShardWriter,
    Writer,
    is_regular_file,
)

__all__ = ["TFRecordCodec"]

_CHUNK = 16  # records per task handed to a worker thread
_PLAN_SAMPLE = 64  # records encoded to size the shards
#: the Example feature kind each field encoding is stored as
_WIRE_KIND = {
    "png": BYTES,
    "raw": BYTES,
    "int64": INT64,
    "float": FLOAT,
    "bytes": BYTES,  # String / Bytes: the record's bytes, one value
    "strings": BYTES,  # StringList: the record's strings, 0..n values
    **SEQ_ENCODINGS,  # a SequenceExample's feature lists (dstore.codecs._sequence)
    "encoded": BYTES,  # an encoded Image (png/jpeg/...) passed through byte for byte
    "tensor": BYTES,  # foreign only: tf.io.serialize_tensor bytes (label-maker)
    "feature": BYTES,  # Bytes records that are serialized Features (any list kind), as they are
    **dict.fromkeys(LOSSY_FORMATS, BYTES),  # pixels encoded by dstore, decoded on read
}


# ------------------------------------------------------------------ field encoding


@dataclass(frozen=True)
class FieldEncoding:
    """How one field is stored in the Example: the TF feature name and kind."""

    feature: str  # feature name in the Example
    encoding: str  # "png" | "jpeg" | "webp" | "jxl" | "int64" | "float" | "raw" | ...
    quality: int | None = None  # of a lossy image encoding (jpeg, webp, jxl)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"feature": self.feature, "encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        return out

    @property
    def lossy(self) -> LossyImage | None:
        """The lossy image encoding of this field, None for every other encoding."""
        if self.encoding not in LOSSY_FORMATS:
            return None
        return LossyImage(self.encoding, self.quality if self.quality is not None else 0)


def choose_encoding(
    spec: FieldSpec, feature: str, images: set[str] | None, lossy: LossyImage | None = None
) -> FieldEncoding:
    """How ``spec`` is stored; image fields take ``lossy`` (refused by name when they cannot)."""
    if lossy is not None and images is not None and spec.name in images and spec.dense:
        # named an image: the lossy format's own rules apply, not PNG's
        lossy.check_field(spec, "tfrecord")
        return FieldEncoding(feature, lossy.format, lossy.quality)
    enc = _choose_encoding(spec, feature, images)
    if enc.encoding != "png" or lossy is None:
        return enc
    lossy.check_field(spec, "tfrecord")
    return FieldEncoding(feature, lossy.format, lossy.quality)


def _choose_encoding(spec: FieldSpec, feature: str, images: set[str] | None) -> FieldEncoding:
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
                f"tfrecord: field {spec.name!r} is {spec.dtype}: PNG takes uint8 or uint16 only "
                "(convert floats to integers yourself; dstore never rescales silently)"
            )
        if len(spec.shape) not in (2, 3) or (
            len(spec.shape) == 3 and spec.shape[2] not in (1, 3, 4)
        ):
            raise UnsupportedDtypeError(
                f"tfrecord: field {spec.name!r} has record shape {spec.shape}: "
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


def _png_decode(data: bytes, spec: FieldSpec, where: str) -> np.ndarray:
    try:
        img = png_decode(data, where)
    except DstoreError:
        raise  # a pixel bomb, refused from its header
    except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
        raise CodecIOError(f"{where}: PNG does not decode: {e}") from None
    if img.dtype != spec.dtype.newbyteorder("=") or img.size != int(np.prod(spec.shape)):
        raise CodecIOError(
            f"{where}: PNG is {img.dtype} {img.shape}, field expects {spec.dtype} {spec.shape} "
            "(images of varying size in one field are not supported)"
        )
    return img.reshape(spec.shape)


def _encode_value(enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
    """One serialized Feature from one record (an ndarray, or bytes for byte-string kinds);
    a serialized FeatureList for a feature-list field."""
    if enc.encoding == "feature":
        return bytes(value)
    if enc.encoding in SEQ_ENCODINGS:
        return encode_steps(enc.encoding, spec, value)
    if enc.encoding in ("bytes", "encoded", "strings"):
        return encode_feature(BYTES, value)
    if (lossy := enc.lossy) is not None:
        return encode_feature(BYTES, lossy.encode(value))
    if enc.encoding == "png":
        img = value if value.ndim == 2 or value.shape[2] != 1 else value[..., 0]
        return encode_feature(
            BYTES, png(np.ascontiguousarray(img.astype(img.dtype.newbyteorder("="), copy=False)))
        )
    if enc.encoding == "int64":
        if spec.dtype.kind == "u" and spec.dtype.itemsize == 8:
            value = value.astype("<u8").view("<i8")
        return encode_feature(INT64, value.reshape(-1))
    if enc.encoding == "float":
        return encode_feature(FLOAT, value.reshape(-1))
    # astype: indexing a 1-d array gives a native-endian scalar, lose no byte order
    return encode_feature(BYTES, np.asarray(value).astype(spec.dtype).tobytes())


def _copy_signature(enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str, str] | None:
    """What a field's Feature bytes, as read, are valid for when written again -- or None
    for an encoding whose decoded record is written as other bytes (PNG decoded to
    pixels, a tensor, a lossy image, a feature list; numbers read into another dtype
    than the int64/float32 the wire holds)."""
    if enc.encoding in ("bytes", "encoded", "strings") or (
        (enc.encoding, spec.dtype.str) in (("int64", "<i8"), ("float", "<f4"))
    ):
        return (enc.feature, enc.encoding, spec.dtype.str)
    return None


def _batch_signature(
    encs: dict[str, FieldEncoding], split: SplitSpec, names: Sequence[str]
) -> tuple[Any, ...] | None:
    """The fields' copy signatures in ``names`` order; None when one cannot be copied."""
    sig = tuple(_copy_signature(encs[name], split.fields[name]) for name in names)
    return None if None in sig else sig


def _record(spec: FieldSpec, col: Any, i: int) -> Any:
    """Record ``i`` of a batch column as the encoder takes it: bytes for byte-string
    kinds (no UTF-8 round trip), else an ndarray."""
    if not isinstance(col, VarColumn):
        return col[i]
    if isinstance(col.values, VarColumn):  # a list of strings: its byte strings
        return col.values.slice(int(col.offsets[i]), int(col.offsets[i + 1])).to_bytes_list()
    if isinstance(spec.kind, (String, Bytes)) or (
        isinstance(spec.kind, Image) and spec.kind.encoding != "raw"
    ):
        lo, hi = int(col.offsets[i]), int(col.offsets[i + 1])
        return col.values[lo:hi].tobytes()
    return col.row(i)


def _decode_value(enc: FieldEncoding, spec: FieldSpec, kind: int, values: Any, where: str) -> Any:
    """One record from its Feature: an ndarray, or bytes for byte-string kinds."""
    if enc.encoding == "feature":  # the same bytes again: encode_feature wrote them canonically
        return encode_feature(kind, values)
    if enc.encoding in SEQ_ENCODINGS or kind >= SEQ:
        if enc.encoding not in SEQ_ENCODINGS:
            raise CodecIOError(
                f"{where}: {enc.feature!r} is a {KIND_NAMES[kind]}, expected a feature of an Example"
            )
        return sequence_value(enc.encoding, spec, kind, values, where)
    expected = _WIRE_KIND[enc.encoding]
    if kind != expected:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} is a {KIND_NAMES[kind]}, "
            f"expected {KIND_NAMES[expected]}"
        )
    if enc.encoding == "strings":
        if isinstance(spec.kind, StringList) and spec.kind.text:
            bad = first_invalid_utf8(values)
            if bad is not None:
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} (field {spec.name!r}), string {bad[0]}: "
                    f"not valid UTF-8 at byte {bad[1]}"
                )
        return list(values)
    if (enc.encoding in ("png", "raw", "bytes", "encoded") or enc.lossy) and len(values) != 1:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} holds {len(values)} byte strings, expected 1"
        )
    if enc.encoding in ("bytes", "encoded"):
        if isinstance(spec.kind, String):
            try:
                values[0].decode("utf-8")
            except UnicodeDecodeError as e:
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} (field {spec.name!r}) is not valid UTF-8 "
                    f"at byte {e.start}"
                ) from None
        return values[0]
    if enc.encoding == "tensor":
        return _tensor_value(values[0], spec, f"{where}, feature {enc.feature!r}")
    if (lossy := enc.lossy) is not None:
        if spec.dense:
            shape = spec.shape
        else:  # a raw Image of varying size
            assert isinstance(spec.kind, Image)
            shape = (-1, -1) if spec.kind.channels == 0 else (-1, -1, spec.kind.channels or -1)
        return lossy.decode_record(
            values[0], shape, spec.dtype, f"{where}, feature {enc.feature!r}"
        )
    if isinstance(spec.kind, Image) and not spec.dense:
        return _png_decode_any(values[0], spec, f"{where}, feature {enc.feature!r}")
    if isinstance(spec.kind, Ragged):
        return _ragged_value(enc, spec, values, where)
    size = math.prod(spec.shape)  # a tuple of ints: math.prod, not numpy per record
    if enc.encoding in ("png", "raw"):
        if enc.encoding == "png":
            return _png_decode(values[0], spec, f"{where}, feature {enc.feature!r}")
        if len(values[0]) != size * spec.dtype.itemsize:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(values[0])} bytes, "
                f"expected {size * spec.dtype.itemsize}"
            )
        return np.frombuffer(values[0], spec.dtype).reshape(spec.shape)
    if len(values) != size:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} has {len(values)} values, expected {size} "
            f"for shape {spec.shape}"
        )
    if spec.dtype.kind == "u" and spec.dtype.itemsize == 8:
        return values.view("<u8").astype(spec.dtype).reshape(spec.shape)
    return values.astype(spec.dtype).reshape(spec.shape)


def _tensor_value(data: bytes, spec: FieldSpec, where: str) -> np.ndarray:
    """A record from ``tf.io.serialize_tensor`` bytes, checked against the field."""
    t = parse_tensor_proto(data, where)
    if not isinstance(t, np.ndarray) or t.dtype != spec.dtype:
        got = "a string tensor" if not isinstance(t, np.ndarray) else f"a {t.dtype} tensor"
        raise CodecIOError(f"{where}: holds {got}, field expects {spec.kind.describe()}")
    ok = t.shape[1:] == spec.shape if isinstance(spec.kind, Ragged) else t.shape == spec.shape
    if not ok:
        raise CodecIOError(
            f"{where}: tensor of shape {t.shape}, field expects {spec.kind.describe()}"
        )
    return t


def _ragged_value(enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> np.ndarray:
    """A Ragged record ``(n, *inner)`` from its flat list (or raw bytes)."""
    inner = spec.shape
    per = math.prod(inner)
    if enc.encoding == "raw":
        if len(values[0]) % (spec.dtype.itemsize * max(per, 1)):
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(values[0])} bytes, not a whole number "
                f"of {spec.dtype} rows of shape {inner}"
            )
        flat = np.frombuffer(values[0], spec.dtype)
    else:
        flat = values.view("<u8") if spec.dtype.kind == "u" and spec.dtype.itemsize == 8 else values
        flat = flat.astype(spec.dtype)
    if per == 0 or len(flat) % per:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} has {len(flat)} values, not a whole number of "
            f"rows of inner shape {inner} (field {spec.name!r})"
        )
    return flat.reshape(-1, *inner)


def _png_decode_any(data: bytes, spec: FieldSpec, where: str) -> np.ndarray:
    """A PNG of any size for a raw Image field of varying size, checked against its kind."""
    kind = spec.kind
    assert isinstance(kind, Image)
    try:
        img = png_decode(data, where)
    except DstoreError:
        raise  # a pixel bomb, refused from its header
    except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
        raise CodecIOError(f"{where}: PNG does not decode: {e}") from None
    if kind.channels == 1 and img.ndim == 2:  # PNG has no 1-channel axis: dstore drops it on write
        img = img[..., None]
    channels = 0 if img.ndim == 2 else img.shape[2]
    if img.dtype != kind.dtype or (kind.channels is not None and channels != kind.channels):
        raise CodecIOError(
            f"{where}: PNG is {img.dtype} {img.shape}, field expects {kind.describe()}"
        )
    for axis, want in ((0, kind.height), (1, kind.width)):
        if want is not None and img.shape[axis] != want:
            raise CodecIOError(f"{where}: PNG is {img.shape}, field expects {kind.describe()}")
    return img


# ------------------------------------------------------------------------ options


@dataclass(frozen=True)
class TFRecordOptions:
    shard_mb: float = field(
        default=256.0, metadata={"help": "target shard size in MiB (TFDS aims at 64 MiB - 1 GiB)"}
    )
    compression: str = field(
        default="none",
        metadata={"help": 'none or gzip (TensorFlow: compression_type="GZIP")'},
    )
    png_level: str = field(
        default="fast",
        metadata={
            "help": "fast (UP filter + ISA-L deflate) or libpng zlib level 0-9 "
            "(6: TensorFlow's sizes)"
        },
    )
    images: tuple[str, ...] | None = option(
        None, "comma-separated fields stored as PNG; auto = image-like fields; none", none="auto"
    )
    # option() gives each instance its own copy of a mutable default
    rename: dict[str, str] = option(  # noqa: RUF009
        {}, "feature names in the Example, e.g. x=image,y=label"
    )
    image_format: str = field(
        default="png",
        metadata={
            "help": "image fields as png (lossless), jpeg (libjpeg-turbo), webp or jxl (lossy, "
            "decoded to pixels on read)"
        },
    )
    quality: int = field(
        default=90, metadata={"help": "quality 1..100 of jpeg/webp/jxl images (png ignores it)"}
    )
    workers: int = field(default=0, metadata={"help": "threads encoding PNGs; 0 = one per core"})

    def validate(self) -> None:
        if self.shard_mb <= 0:
            raise ValueError(f"tfrecord: shard_mb must be > 0. Got {self.shard_mb} instead.")
        if self.compression not in ("none", "gzip"):
            raise ValueError(
                f"tfrecord: compression must be none or gzip. Got {self.compression!r} instead."
            )
        if str(self.png_level) != "fast" and not (
            str(self.png_level).isdigit() and 0 <= int(self.png_level) <= 9
        ):
            raise ValueError(
                f"tfrecord: png_level must be fast or 0..9. Got {self.png_level!r} instead."
            )
        if self.image_format not in IMAGE_FORMATS:
            raise ValueError(
                f"tfrecord: image_format must be one of {', '.join(IMAGE_FORMATS)}. "
                f"Got {self.image_format!r} instead."
            )
        check_quality(self.quality, "tfrecord")

    def lossy(self) -> LossyImage | None:
        """The lossy encoding image fields take, None for PNG."""
        if self.image_format == "png":
            return None
        return LossyImage(self.image_format, self.quality)

    def image_set(self) -> set[str] | None:
        """The fields stored as PNG, or None: every image-like field."""
        return None if self.images is None else set(self.images)

    def renames(self) -> dict[str, str]:
        """Field name -> feature name, for the fields renamed."""
        return dict(self.rename)


# ------------------------------------------------------------------------- writer


def _is_utf8_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TFRecordShardWriter(ShardedDirectoryWriter):
    """Encodes records to framed Examples; the shard files and the manifest are the
    sharded-directory container's (:mod:`dstore.sharding`).

    Holds only options and encodings (no open handles or threads), so it
    pickles to Dask workers; every process writes the same bytes for a shard.
    """

    codec_name = "tfrecord"

    def __init__(
        self, schema: Schema, options: TFRecordOptions, plan: Sequence[Shard] = ()
    ) -> None:
        self.options = options
        renames = options.renames()
        images = options.image_set()
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        for split in schema.splits.values():
            if images is not None and (unknown := images - set(split.fields)):
                raise SchemaError(f"tfrecord: images= names unknown field(s) {sorted(unknown)}")
            self.encodings[split.name] = {
                name: choose_encoding(spec, renames.get(name, name), images, options.lossy())
                for name, spec in split.fields.items()
            }
            features = [e.feature for e in self.encodings[split.name].values()]
            for name, enc in self.encodings[split.name].items():
                # feature names are kept byte for byte, but a protobuf key is UTF-8 text
                if not _is_utf8_text(enc.feature):
                    raise SchemaError(
                        f"tfrecord: split {split.name!r}, field {name!r}: feature name {enc.feature!r} "
                        "is not valid Unicode text (a lone surrogate); rename it with -o rename=..."
                    )
            if len(set(features)) != len(features):
                raise SchemaError(f"tfrecord: two fields map to the same feature name: {features}")
        compression = None if options.compression == "none" else options.compression
        super().__init__(schema, plan, compression)

    def current_libraries(self) -> dict[str, str]:
        """The compressors this process would use, with their versions."""
        libs = {}
        if any(e.encoding == "png" for encs in self.encodings.values() for e in encs.values()):
            libs["png"] = encoder_id(str(self.options.png_level))
        for fmt in sorted({e.encoding for encs in self.encodings.values() for e in encs.values()}):
            if fmt in LOSSY_FORMATS:
                lossy = next(
                    e.lossy
                    for encs in self.encodings.values()
                    for e in encs.values()
                    if e.encoding == fmt
                )
                assert lossy is not None
                libs[fmt] = lossy.library_id()
        if self.options.compression == "gzip":
            libs["gzip"] = f"zlib {zlib.ZLIB_RUNTIME_VERSION}"
        return libs

    def encode_chunk(self, split: str, chunk: Batch, png: Any = None) -> list[bytes]:
        """Framed TFRecords for the records of ``chunk``."""
        png = png or png_encoder(str(self.options.png_level))
        spec = self.schema.splits[split]
        encs = self.encodings[split]
        n = len(next(iter(chunk.values())))
        lists = {encs[name].feature for name in chunk if encs[name].encoding in SEQ_ENCODINGS}
        # records read as exactly the Example this loop would encode: framed as they are
        copies = None
        if isinstance(chunk, SerializedBatch) and chunk.signature == _batch_signature(
            encs, spec, list(chunk)
        ):
            copies = chunk.records
        out = []
        for i in range(n):
            if copies is not None and (rec := copies[i]) is not None:
                out.append(rio.frame(rec))
                continue
            feats = {
                encs[name].feature: _encode_value(
                    encs[name], spec.fields[name], _record(spec.fields[name], col, i), png
                )
                for name, col in chunk.items()
            }
            if lists:  # fields read from feature lists: a SequenceExample, the rest its context
                context = {k: v for k, v in feats.items() if k not in lists}
                steps = {k: v for k, v in feats.items() if k in lists}
                out.append(rio.frame(encode_sequence_example(context, steps)))
            else:
                out.append(rio.frame(encode_example(feats)))
        return out

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        """Chunks of ``_CHUNK`` records encoded on all cores (PNG releases the GIL), in order."""
        workers = self.options.workers or default_workers()
        png = png_encoder(str(self.options.png_level))
        chunks = (
            slice_batch(batch, i, min(i + _CHUNK, n))
            for batch in batches
            for n in (len(next(iter(batch.values()))),)
            for i in range(0, n, _CHUNK)
        )
        with ThreadPoolExecutor(workers, thread_name_prefix="dstore-png") as pool:
            yield from ordered_map(
                lambda c: self.encode_chunk(shard.split, c, png), chunks, pool, 4 * workers
            )

    def manifest_head(self) -> dict[str, Any]:
        skip = {"workers"}
        if self.options.image_format == "png":  # PNG outputs' manifests stay as they were
            skip |= {"image_format", "quality"}
        return {
            **manifest_base("dstore-tfrecord", self.compression),
            "options": {k: v for k, v in options_json(self.options).items() if k not in skip},
            "libraries": self.libraries,
            "schema": self.schema.to_json(),
            "fields": {
                split: {name: e.to_json() for name, e in encs.items()}
                for split, encs in self.encodings.items()
            },
        }


# ------------------------------------------------------------------------- reader

_TFDS_RE = re.compile(r"^(?:.*-)?(?P<split>[A-Za-z0-9_]+)\.tfrecords?-\d+-of-\d+(?:\.gz)?$")
_OURS_RE = re.compile(r"^(?P<split>[A-Za-z0-9_]+)-\d+-of-\d+\.tfrecords?(?:\.gz)?$")
_OF_RE = re.compile(r"-(\d+)-of-(\d+)")


_PNG_COLOURS = {0: "gray", 2: "RGB", 3: "palette", 4: "gray+alpha", 6: "RGBA"}


def _png_text(ihdr: bytes) -> str:
    width, height = int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
    return f"{width}x{height} {ihdr[16]}-bit {_PNG_COLOURS.get(ihdr[17], 'unknown-colour')} PNG"


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
                        t = parse_tensor_proto(v, where)
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
            if self.utf8:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
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
            images = {h for h in heads if h is not None}  # all of them: None is not in heads
            if len(images) == 1 and b"jpeg" not in images:
                # PNGs of one size: a fixed-size image, decoded to pixels as before
                return self._fixed_png(next(iter(images))), FieldEncoding(name, "png")
            if images == {b"jpeg"}:
                return FieldSpec(
                    name, Image(np.dtype(np.uint8), None, None, None, "jpeg")
                ), FieldEncoding(name, "encoded")
            if b"jpeg" not in images:
                depth = {h[16] for h in images if h}
                dtype = np.dtype(np.uint16 if depth == {16} else np.uint8)
                colours = {h[17] for h in images if h}
                channels = _PNG_CHANNELS.get(next(iter(colours))) if len(colours) == 1 else None
                return FieldSpec(name, Image(dtype, channels, None, None, "png")), FieldEncoding(
                    name, "encoded"
                )
            return FieldSpec(name, Bytes()), FieldEncoding(name, "bytes")  # PNG and JPEG mixed
        if None in heads and len(heads) > 1:  # some images, some not: keep every byte
            return FieldSpec(name, Bytes()), FieldEncoding(name, "bytes")
        if self.tensor and self.tensor_dtype is not None:
            shapes = self.tensor_shapes
            dtype = self.tensor_dtype
            if len(shapes) == 1:
                return FieldSpec.tensor(name, dtype, next(iter(shapes))), FieldEncoding(
                    name, "tensor"
                )
            inner = {sh[1:] for sh in shapes}
            if len(inner) == 1 and all(len(sh) >= 1 for sh in shapes):
                return FieldSpec(name, Ragged(dtype, next(iter(inner)))), FieldEncoding(
                    name, "tensor"
                )
            raise SchemaError(
                f"{self.first[0]}: feature {name!r} holds serialized tensors of shapes "
                f"{sorted(shapes)[:3]}: only the first axis may vary between records"
            )
        if self.utf8:
            return FieldSpec(name, String()), FieldEncoding(name, "bytes")
        return FieldSpec(name, Bytes()), FieldEncoding(name, "bytes")

    def _fixed_png(self, ihdr: bytes) -> FieldSpec:
        width, height = int.from_bytes(ihdr[8:12], "big"), int.from_bytes(ihdr[12:16], "big")
        channels = _PNG_CHANNELS.get(ihdr[17])
        dtype = np.dtype(np.uint16 if ihdr[16] == 16 else np.uint8)
        if channels in (None, 0, 1):
            return FieldSpec.tensor(self.name, dtype, (height, width))
        return FieldSpec.tensor(self.name, dtype, (height, width, channels))


#: PNG colour type -> channels after decoding (palette images decode to RGB)
_PNG_CHANNELS = {0: 0, 2: 3, 3: 3, 4: 2, 6: 4}


class TFRecordReader(ShardedDirectoryReader):
    """TFRecord shards: dstore's folders (manifest and field encodings) and files
    written by TensorFlow, TFDS or anyone (fields by inspection of every record)."""

    format_id = "dstore-tfrecord"
    codec_name = "tfrecord"
    sequential_reason = "TFRecord shards are read in order"
    file_pattern = r"\.tfrecords?(-\d+-of-\d+)?(\.gz)?$"

    def __init__(self, path: str, workers: int = 0) -> None:
        self.encodings: dict[str, dict[str, FieldEncoding]] = {}
        super().__init__(path, workers)

    def split_of(self, filename: str) -> str:
        for rx in (_OURS_RE, _TFDS_RE):
            m = rx.match(filename)
            if m:
                return m.group("split")
        stem = re.sub(r"\.tfrecords?(\.gz)?$", "", filename)
        return stem if stem in KNOWN_SPLITS else DEFAULT_SPLIT

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        try:
            self.encodings = {
                split: {
                    name: FieldEncoding(e["feature"], e["encoding"], e.get("quality"))
                    for name, e in fields.items()
                }
                for split, fields in manifest["fields"].items()
            }
        except (KeyError, TypeError, AttributeError) as e:
            raise CodecIOError(f"{where}: unreadable manifest: {e}") from None
        if set(self.encodings) != set(self.schema.splits):
            raise CodecIOError(
                f"{where}: splits of the schema, fields and shards disagree (corrupt manifest)"
            )
        for split, encs in self.encodings.items():
            if set(encs) != set(self.schema.splits[split].fields):
                raise CodecIOError(
                    f"{where}: split {split!r}: fields disagree with the schema (corrupt manifest)"
                )
            for name, enc in encs.items():
                if enc.encoding not in _WIRE_KIND:
                    raise CodecIOError(
                        f"{where}: split {split!r}, field {name!r}: unknown encoding {enc.encoding!r}"
                    )
                try:
                    enc.lossy  # noqa: B018 - checks the quality a lossy field declares
                except ValueError as e:
                    raise CodecIOError(
                        f"{where}: split {split!r}, field {name!r}: {e} (corrupt manifest)"
                    ) from None

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        fields, self.encodings[split], shards = self._scan_split(paths)
        return fields, shards

    def _scan_split(
        self, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], dict[str, FieldEncoding], list[ShardFile]]:
        """Fields inferred from every record of the split (see :func:`_infer_kinds`).

        The pass parses each Example's wire format without decoding images
        (PNG sizes come from their headers), so it costs about a read of the
        files; only byte strings that are not images are looked at (UTF-8,
        serialized tensors)."""
        stats: dict[str, _FeatureStats] = {}
        seqs: dict[str, SequenceStats] = {}  # a SequenceExample's feature lists
        shards = []
        ref: dict[str, FeatureSignature] | None = None
        # the features (UTF-8 name, kind) of the last record scanned, in order: a record in
        # their canonical form is decoded in one walk, its signature read off its values
        canon: list[tuple[bytes, int]] | None = None
        total = 0
        for p in paths:
            with rio.RecordFile(p) as rf:
                while True:
                    index, offset = rf.index, rf.offset
                    rec = rf.next_record()
                    if rec is None:
                        break
                    at = (p, index)
                    where = f"{p}: record {index} at byte {offset}"
                    values = None if canon is None else decode_canonical(rec, canon)
                    if values is not None:
                        sig = signature_of(values)
                    else:
                        sig = scan_example(rec, where)
                        canon = [(name.encode(), k) for name, (k, _, _) in sig.items()]
                        if any(k >= SEQ for k, _, _ in sig.values()):
                            canon = None
                    if (
                        sig == ref
                        and not any(st.looks for st in stats.values())
                        and not any(sq.looks for sq in seqs.values())
                    ):
                        for seen in stats.values():  # the common case: nothing new to learn
                            seen.present += 1
                        total += 1
                        continue
                    ref = sig
                    # number lists are not looked at: decode the byte strings alone
                    looked = {n for n, (k, _, _) in sig.items() if k % SEQ == BYTES}
                    for name in stats.keys() - sig.keys():
                        stats[name].absent(at)
                    for name, (kind, n, head) in sig.items():
                        if (kind >= SEQ and name in stats) or (kind < SEQ and name in seqs):
                            raise SchemaError(
                                f"{p}: {name!r} is a feature list in some records and a feature "
                                f"in others (record {index}): a feature must keep one kind"
                            )
                        if kind >= SEQ:
                            sq = seqs.setdefault(name, SequenceStats(name))
                            if kind > SEQ and sq.kind > SEQ and kind != sq.kind:
                                raise SchemaError(
                                    f"{p}: feature list {name!r} is a {KIND_NAMES[sq.kind]} and a "
                                    f"{KIND_NAMES[kind]} in record {index}: it must keep one kind"
                                )
                            sq.see(kind, head or b"", at)
                            if sq.looks and n:
                                if values is None:
                                    values = decode_example(rec, where, looked)
                                sq.look(values[name][1])
                            continue
                        st = stats.get(name)
                        if st is None:
                            st = stats[name] = _FeatureStats(name, kind, at)
                            if total:  # absent from the records before this one
                                st.missing_at = st.missing_at or (paths[0], 0)
                        elif st.kind != kind:
                            raise SchemaError(
                                f"{p}: feature {name!r} is a {KIND_NAMES[st.kind]} in record "
                                f"{st.first[1]} of {st.first[0]} and a {KIND_NAMES[kind]} in record "
                                f"{index}: a feature must keep one kind"
                            )
                        st.present += 1
                        st.see(n, head, at)
                        if kind == BYTES and st.looks and n:
                            if values is None:
                                values = decode_example(rec, where, looked)
                            st.look(values[name][1], f"{p}: record {index}")
                    total += 1
                shards.append(ShardFile(p, rf.index, rf.compression))
        fields: dict[str, FieldSpec] = {}
        encs: dict[str, FieldEncoding] = {}
        for name, st in stats.items():
            fields[name], encs[name] = st.field(total)
        for name, sq in seqs.items():
            fields[name], encs[name] = sq.field(), FieldEncoding(name, sq.encoding)
        return fields, encs, shards

    def shard_records(self, shard: ShardFile, lo: int, hi: int) -> Iterator[tuple[bytes, str]]:
        """Raw records lo:hi of one shard with their location, CRCs checked."""
        with rio.RecordFile(shard.path, shard.compression) as rf:
            rf.skip(lo)
            for _ in range(lo, hi):
                where = f"{shard.path}: record {rf.index} at byte {rf.offset}"
                rec = rf.next_record()
                if rec is None:
                    raise CodecIOError(
                        f"{shard.path}: ended after {rf.index} records, expected {shard.records}"
                    )
                yield rec, where
            if hi == shard.records and rf.next_record() is not None:
                raise CodecIOError(f"{shard.path}: more records than the {shard.records} expected")

    def shard_pieces(self, shard: ShardFile, target_bytes: int) -> int:
        """A plain shard is entered mid-way by seeking over record headers (cheap); a
        GZIP or ZLIB shard would have to be decompressed up to there, so it stays whole."""
        if (shard.compression or rio.detect_compression(shard.path)) is None:
            return self.pieces_by_size(shard, target_bytes)
        return 1

    def _decode_chunk(
        self,
        split: SplitSpec,
        encs: dict[str, FieldEncoding],
        names: Sequence[str],
        recs: list[tuple[bytes, str]],
        out: dict[str, np.ndarray | list[Any]],
        offset: int,
        records: list[bytes | None] | None = None,
        canon: list[tuple[bytes, int]] | None = None,
    ) -> None:
        """Decode ``recs`` into ``out`` from ``offset``. With ``canon`` (the features'
        UTF-8 names and kinds, in order) a record in that canonical form is decoded in
        one walk and, with ``records``, kept there for a writer to copy (None otherwise)."""
        for i, (rec, where) in enumerate(recs):
            feats = None if canon is None else decode_canonical(rec, canon)
            if records is not None:
                records[offset + i] = None if feats is None else rec
            if feats is None:
                feats = decode_example(rec, where)
            for name in names:
                enc = encs[name]
                spec = split.fields[name]
                if enc.feature not in feats:
                    if isinstance(spec.kind, Ragged) and enc.encoding in ("int64", "float"):
                        # a list feature some records lack: an empty list (README rule)
                        out[name][offset + i] = np.empty((0, *spec.shape), spec.dtype)
                        continue
                    if enc.encoding == "strings":  # the same rule for lists of strings
                        out[name][offset + i] = []
                        continue
                    if enc.encoding in SEQ_ENCODINGS:  # and for feature lists: no steps
                        out[name][offset + i] = empty_record(spec)
                        continue
                    raise CodecIOError(
                        f"{where}: Example has no feature {enc.feature!r} (field {name!r})"
                    )
                kind, values = feats[enc.feature]
                out[name][offset + i] = _decode_value(enc, spec, kind, values, where)

    def read_shard(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        encs = self.encodings[spec.name]
        raw = self.shard_records(shard, lo, hi)
        # every field copyable: batches carry the records a TFRecord writer can reuse
        signature = _batch_signature(encs, spec, names) if names == list(spec.fields) else None
        canon = None
        if signature is not None:
            canon = [(encs[n].feature.encode(), _WIRE_KIND[encs[n].encoding]) for n in names]
        pos = lo
        while pos < hi:
            n = min(rows, hi - pos)
            # dense fields fill an array in place; others collect records, joined below
            out: dict[str, np.ndarray | list[Any]] = {
                name: np.empty((n, *f.shape), f.dtype) if f.dense else [None] * n
                for name in names
                for f in (spec.fields[name],)
            }
            records: list[bytes | None] | None = None if signature is None else [None] * n
            futures = []
            for off in range(0, n, DECODE_GROUP):
                recs = [next(raw) for _ in range(min(DECODE_GROUP, n - off))]
                futures.append(
                    pool.submit(
                        self._decode_chunk, spec, encs, names, recs, out, off, records, canon
                    )
                )
            for fut in futures:
                fut.result()
            cols = {name: _to_column(spec.fields[name], col) for name, col in out.items()}
            if records is None or signature is None:
                yield cols
            else:
                yield SerializedBatch(cols, records, signature)
            pos += n
        for _ in raw:  # drain: checks the tail of the shard
            pass

    def lossy_fields(self, split: str) -> dict[str, LossyImage]:
        """Fields of ``split`` stored in a lossy image encoding (decoded on read)."""
        return {
            name: lossy
            for name, enc in self.encodings.get(split, {}).items()
            if (lossy := enc.lossy) is not None
        }

    def tf_compression_types(self, split: str) -> list[str]:
        """TensorFlow's ``compression_type`` of each shard of ``split``: "", "GZIP" or "ZLIB"."""
        shown = {None: "", "gzip": "GZIP", "zlib": "ZLIB"}
        if self.manifest is not None:
            return [shown[self.manifest.get("compression")]] * len(self.shards[split])
        return [shown[s.compression] for s in self.shards[split]]

    def feature_description(self, split: str) -> list[str]:
        """A Python snippet a TensorFlow user pastes to read this split: every line runs as is.

        It defines ``feature_description``, ``decode(record)`` (a dict of the
        split's fields) and ``dataset``, with the compression the files have."""
        lines = ["feature_description = {"]
        returns = []
        sequence = []  # a SequenceExample's feature lists
        for name, spec in self.schema.splits[split].fields.items():
            enc = self.encodings[split][name]
            feature, native = repr(enc.feature), spec.dtype.newbyteorder("=")
            value, shape = f"ex[{feature}]", spec.shape
            kind = spec.kind
            if enc.encoding in SEQ_ENCODINGS:
                line, value = sequence_snippet(feature, spec, enc.encoding)
                sequence.append(line)
                returns.append(f"        {name!r}: {value},  # {kind.describe()}, one per step")
                continue
            if not spec.dense and not (isinstance(kind, Ragged) and enc.encoding == "raw"):
                lines.append(_var_feature_line(feature, enc))
                returns.append(
                    f"        {name!r}: {_var_value(value, spec, enc)},  # {kind.describe()}"
                )
                continue
            if isinstance(kind, Ragged):  # raw bytes of a ragged field of a dtype lists lack
                shape = (-1, *shape)
            if enc.encoding in ("png", "raw", "tensor", *LOSSY_FORMATS):
                lines.append(f"    {feature}: tf.io.FixedLenFeature([], tf.string),")
            else:
                tf_type = "tf.int64" if enc.encoding == "int64" else "tf.float32"
                dims = [] if shape == () else [int(np.prod(shape))]
                lines.append(f"    {feature}: tf.io.FixedLenFeature({dims}, {tf_type}),")
            note = ""
            if enc.encoding == "tensor":
                value = f"tf.io.parse_tensor({value}, out_type=tf.{native.name})"
            elif enc.encoding in LOSSY_FORMATS:
                channels = shape[2] if len(shape) == 3 else 1
                value = _lossy_decode_expr(value, enc.encoding, channels, native.name)
                if enc.encoding == "jxl":  # TensorFlow has no JPEG XL decoder: give it the shape
                    value = f"tf.ensure_shape({value}, {[*shape[:2], channels]})"
                if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
                    note = f"; dstore reads {shape}"
                    shape = (*shape, 1)
                note += f"; {enc.encoding} quality {enc.quality}"
            elif enc.encoding == "png":
                channels = shape[2] if len(shape) == 3 else 1
                value = f"tf.io.decode_png({value}, channels={channels}, dtype=tf.{native.name})"
                if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
                    note = f"; dstore reads {shape}"
                    shape = (*shape, 1)
            elif enc.encoding == "raw" and native.name not in _DECODE_RAW_DTYPES:
                returns.append(
                    f"        {name!r}: {value},  # raw bytes of {int(np.prod(shape))} {spec.dtype.str} values "
                    f"{shape}: TensorFlow has no {native.name}; numpy: np.frombuffer(b, {spec.dtype.str!r})"
                )
                continue
            elif enc.encoding == "raw":
                order = ", little_endian=False" if spec.dtype.byteorder == ">" else ""
                value = (
                    f"tf.reshape(tf.io.decode_raw({value}, tf.{native.name}{order}), {list(shape)})"
                )
            else:
                if len(shape) > 1:
                    value = f"tf.reshape({value}, {list(shape)})"
                quant = dequant_params(spec)
                if quant is not None:  # int8/uint8 codes: the values dstore reads
                    scale, offset = (repr(a.tolist()) for a in quant)
                    if quant[0].ndim:
                        scale, offset = (f"tf.constant({c}, tf.float32)" for c in (scale, offset))
                    value = f"tf.cast({value}, tf.float32) * {scale} + {offset}"
                    note = f"; {spec.dtype.name} codes dequantized"
                    native = np.dtype(np.float32)
                elif native == np.uint64:  # stored as the int64 bit pattern
                    value = f"tf.bitcast({value}, tf.uint64)"
                elif native.name not in ("int64", "float32"):
                    value = f"tf.cast({value}, tf.{native.name})"
            returns.append(f"        {name!r}: {value},  # {native.name} {shape}{note}")
        lines.append("}")
        if sequence:
            lines += ["sequence_features = {", *sequence, "}", "", "def decode(record):"]
            lines.append("    ex, seq = tf.io.parse_single_sequence_example(")
            lines.append("        record, feature_description, sequence_features")
            lines.append("    )")
        else:
            lines += ["", "def decode(record):"]
            lines.append("    ex = tf.io.parse_single_example(record, feature_description)")
        lines += ["    return {", *returns, "    }", ""]
        paths = [s.path for s in self.shards[split]]
        types = self.tf_compression_types(split)
        if len(set(types)) <= 1:
            lines.append(f"files = {_files_expression(paths)}")
            ctype = types[0] if types else ""
            lines.append(
                f"dataset = tf.data.TFRecordDataset(files, compression_type={ctype!r}).map(decode)"
            )
        else:  # one TFRecordDataset reads one compression: chain one per file, in order
            lines.append(f"files = {paths!r}")
            lines.append(f"compression_types = {types!r}")
            lines.append(
                "dataset = tf.data.TFRecordDataset(files[0], compression_type=compression_types[0])"
            )
            lines.append("for f, c in zip(files[1:], compression_types[1:]):")
            lines.append(
                "    dataset = dataset.concatenate(tf.data.TFRecordDataset(f, compression_type=c))"
            )
            lines.append("dataset = dataset.map(decode)")
        return lines

    def describe(self) -> list[str]:
        lines = []
        for split, shards in self.shards.items():
            comp = "+".join(sorted({t.lower() for t in self.tf_compression_types(split)} - {""}))
            lines.append(f"split {split}: {len(shards)} shard(s)" + (f", {comp}" if comp else ""))
            for name, enc in self.encodings[split].items():
                how = enc.encoding + (f" quality {enc.quality}" if enc.lossy else "")
                lines.append(f"  {name}: feature {enc.feature!r} as {how}")
        first = next((s for s, spec in self.schema.splits.items() if spec.fields), None)
        if first is not None:
            lines.append(f"TensorFlow ({first} split):")
            lines.extend(self.feature_description(first))
        return lines


def _var_feature_line(feature: str, enc: FieldEncoding) -> str:
    """The parse spec of a field whose records vary: a ragged list, or one byte string."""
    if enc.encoding in ("int64", "float"):
        dtype = "tf.int64" if enc.encoding == "int64" else "tf.float32"
        return f"    {feature}: tf.io.RaggedFeature({dtype}),"
    if enc.encoding in ("feature", "strings"):  # a list of byte strings per record
        return f"    {feature}: tf.io.RaggedFeature(tf.string),"
    return f"    {feature}: tf.io.FixedLenFeature([], tf.string),"


def _var_value(value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
    """The TensorFlow expression turning a parsed feature into the record dstore reads."""
    kind = spec.kind
    native = spec.dtype.newbyteorder("=")
    if isinstance(kind, Ragged):
        if enc.encoding == "tensor":
            return f"tf.io.parse_tensor({value}, out_type=tf.{native.name})"
        if kind.inner_shape:
            value = f"tf.reshape({value}, {[-1, *kind.inner_shape]})"
        if native == np.uint64:
            return f"tf.bitcast({value}, tf.uint64)"
        if native.name not in ("int64", "float32"):
            return f"tf.cast({value}, tf.{native.name})"
        return value
    if isinstance(kind, Image):
        channels = kind.channels or 0
        if enc.encoding in LOSSY_FORMATS:  # raw pixels of varying size, stored lossy
            return _lossy_decode_expr(value, enc.encoding, channels, kind.dtype.name)
        if kind.encoding == "raw" or kind.encoding == "png":
            return f"tf.io.decode_png({value}, channels={channels}, dtype=tf.{kind.dtype.newbyteorder('=').name})"
        if kind.encoding == "jpeg":
            return f"tf.io.decode_jpeg({value}, channels={channels})"
        return f"tf.io.decode_image({value}, channels={channels}, expand_animations=False)"
    if isinstance(kind, String):
        return value  # UTF-8 bytes: .numpy().decode() gives the str
    return value


def _lossy_decode_expr(value: str, fmt: str, channels: int, dtype: str) -> str:
    """TensorFlow decoding a dstore-encoded lossy image to its pixels."""
    if fmt == "jpeg":
        # TensorFlow's default IDCT is libjpeg-turbo's fast integer one; the accurate one is
        # what imagecodecs (dstore's reads) uses: then both give the same pixels
        return f"tf.io.decode_jpeg({value}, channels={channels}, dct_method='INTEGER_ACCURATE')"
    if fmt == "webp":
        return f"tf.io.decode_image({value}, channels={channels}, expand_animations=False)"
    # JPEG XL: TensorFlow has no decoder; imagecodecs (which wrote it) decodes in the pipeline
    decode = "lambda b: __import__('imagecodecs').jpegxl_decode(b)"
    if channels in (0, 1):
        decode = "lambda b: __import__('imagecodecs').jpegxl_decode(b)[..., None]"
    return f"tf.numpy_function({decode}, [{value}], tf.{dtype})"


#: dtypes ``tf.io.decode_raw`` can produce (its ``out_type``), TensorFlow 2.x
_DECODE_RAW_DTYPES = {
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "complex64",
    "complex128",
    "bool",
}


def _to_column(spec: FieldSpec, col: Any) -> Any:
    """A batch column from decoded records: the array itself, or values + offsets."""
    if spec.dense:
        return col
    if isinstance(spec.kind, Ragged):
        return VarColumn.from_rows(col, spec.dtype, spec.shape)
    if isinstance(spec.kind, StringList):
        return VarColumn.from_lists(col)
    if isinstance(spec.kind, Image) and spec.kind.encoding == "raw":
        flat = VarColumn.from_rows([a.reshape(-1) for a in col], spec.dtype)
        shapes = np.array([a.shape for a in col], np.int64).reshape(len(col), -1)
        return VarColumn(flat.values, flat.offsets, shapes)
    return VarColumn.from_bytes(col)


def _files_expression(paths: list[str]) -> str:
    """``paths`` as Python: a list when short, else a sorted glob that matches exactly them."""
    if len(paths) <= 4 or is_url(paths[0]):
        return repr(paths)
    folder = os.path.dirname(paths[0])
    names = {os.path.basename(p) for p in paths}
    first = os.path.basename(paths[0])
    m = _OF_RE.search(first)
    if m and all(os.path.dirname(p) == folder for p in paths):
        star = "-" + "[0-9]" * len(m.group(1)) + f"-of-{m.group(2)}"
        pattern = glob_escape(first[: m.start()]) + star + glob_escape(first[m.end() :])
        if {f for f in os.listdir(folder or ".") if fnmatch.fnmatchcase(f, pattern)} == names:
            return f"sorted(tf.io.gfile.glob({os.path.join(folder, pattern)!r}))"
    return repr(paths)


class TFRecordCodec(Codec):
    """TFRecord shards of ``tf.train.Example``, images as PNG (no TensorFlow needed)."""

    name = "tfrecord"
    reads_folders = True
    sharded = True
    tensorflow_native = True  # tf.data.TFRecordDataset reads the shards itself
    extensions = (".tfrecords", ".tfrecord")
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through byte for byte
    keeps_empty_rows = False  # a ragged record is one feature of its values
    bfloat16_as = "float32"  # float_list is float32: bfloat16 values widen exactly
    supports_urls = True
    Options = TFRecordOptions

    @classmethod
    def path_options(cls, path: str) -> dict[str, Any]:
        """``x.tfrecords.gz``: gzip-compressed shards, as TensorFlow users name such files."""
        return {"compression": "gzip"} if path.rstrip("/").lower().endswith(".gz") else {}

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder with dstore's manifest, or one TFRecord file whose first
        record's framing (length and its CRC) checks out, plain or GZIP."""
        if fs.isdir(path):
            return is_manifest_of(path, "dstore-tfrecord")
        if not is_regular_file(path):
            return False
        try:
            records = rio.RecordFile(path)
            try:  # the header only: a 2**-32 chance for other bytes, and no large read
                return records.header_ok()
            finally:
                records.close()
        except (CodecIOError, OSError):
            return False

    def open_reader(self, path: str) -> Reader:
        return TFRecordReader(path, self.options.workers)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            "tfrecord is written shard by shard: use plan_shards and shard_writer"
        )

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb`` each, sized from the encoded first records.

        Encoding a sample (not guessing from raw sizes) makes PNG shards land
        near the target; the sample is the split's first records, so the
        plan is the same on every run over the same data and options."""
        self.check_schema(schema)
        writer = TFRecordShardWriter(schema, self.options)
        return plan_by_size(
            schema,
            sample,
            lambda split, first: [len(r) for r in writer.encode_chunk(split, first)],
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=_PLAN_SAMPLE,
            suffix=".tfrecord",
        )

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return TFRecordShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        images = self.options.image_set()
        for split in schema.splits.values():
            for spec in split.fields.values():
                choose_encoding(spec, spec.name, images, self.options.lossy())
