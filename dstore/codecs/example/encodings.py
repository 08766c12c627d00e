"""One small class per way a field is stored in a ``tf.train.Example`` feature.

The way TFDS has one ``FeatureConnector`` per feature, each encoding is a class
that says what its feature holds (:attr:`ExampleEncoding.wire`), how a record
becomes the feature (:meth:`~ExampleEncoding.encode`) and back
(:meth:`~ExampleEncoding.decode`), what a record lacking it reads as
(:meth:`~ExampleEncoding.missing`), whether the bytes read may be written again
as they are (:meth:`~ExampleEncoding.copyable`), and the TensorFlow line that
parses it (:meth:`~ExampleEncoding.tf_lines`). :data:`ENCODINGS` holds one of
each under the name manifests store (``dstore.json``'s ``fields``), which never
changes: files written by any dstore version read with these.

=============== ============ ===============================================
name            feature      a record
=============== ============ ===============================================
``png``         bytes_list   pixels as one PNG (dstore decodes it back)
``jpeg`` ...    bytes_list   pixels as one lossy image (``webp``, ``jxl`` too)
``encoded``     bytes_list   an encoded image's bytes, passed through
``int64``       int64_list   integers and bools (uint64 as its bit pattern)
``float``       float_list   float32 numbers
``raw``         bytes_list   any other dtype's little-endian bytes
``bytes``       bytes_list   a String or Bytes record, one value
``strings``     bytes_list   a list of strings, 0..n values
``tensor``      bytes_list   ``tf.io.serialize_tensor`` bytes (read only)
``feature``     any          a serialized Feature kept as it is (Bytes)
``seq_*``       feature list one Feature per step (a SequenceExample)
=============== ============ ===============================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ...errors import CodecIOError, DstoreError
from ...model import Image, Ragged, String, StringList
from ...model.schema import FieldSpec
from ...model.precision import dequant_params
from .wire import BYTES, FLOAT, INT64, KIND_NAMES, SEQ, encode_feature
from ...images.imagecodec import LOSSY_FORMATS, LossyImage
from ...images.pixels import record_shape
from ...images.png import decode as png_decode
from .sequence import SEQ_ENCODINGS, empty_record, encode_steps, sequence_value
from .sequence import snippet as sequence_snippet
from ...model.strings import first_invalid_utf8
from .tensorproto import parse_tensor_proto

__all__ = ["DECODE_RAW_DTYPES", "ENCODINGS", "ExampleEncoding", "FieldEncoding"]


@dataclass(frozen=True)
class FieldEncoding:
    """How one field is stored in the Example: the TF feature name and its encoding."""

    feature: str  # feature name in the Example
    encoding: str  # a key of ENCODINGS: "png" | "jpeg" | "int64" | "float" | "raw" | ...
    quality: int | None = None  # of a lossy image encoding (jpeg, webp, jxl)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"feature": self.feature, "encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        return out

    @property
    def how(self) -> ExampleEncoding:
        """The class instance that encodes and decodes this field."""
        return ENCODINGS[self.encoding]

    @property
    def lossy(self) -> LossyImage | None:
        """The lossy image encoding of this field, None for every other encoding."""
        return self.how.lossy_image(self.quality)


def _native(spec: FieldSpec) -> np.dtype:
    return spec.dtype.newbyteorder("=")


def _uint64_bits(spec: FieldSpec) -> bool:
    return spec.dtype.kind == "u" and spec.dtype.itemsize == 8


def _cast_expr(value: str, native: np.dtype) -> str:
    """TensorFlow turning parsed int64/float32 values into the field's dtype."""
    if native == np.uint64:  # stored as the int64 bit pattern
        return f"tf.bitcast({value}, tf.uint64)"
    if native.name not in ("int64", "float32"):
        return f"tf.cast({value}, tf.{native.name})"
    return value


class ExampleEncoding:
    """One field encoding; subclasses override what differs from a byte-string feature."""

    name: str  # what manifests store
    wire: int = BYTES  # the Example feature kind records are stored as
    one_string: ClassVar[bool] = False  # exactly one byte string per record
    feature_list: ClassVar[bool] = False  # a SequenceExample's feature list
    keeps_views: ClassVar[bool] = False  # takes byte strings as views into the record

    def lossy_image(self, quality: int | None) -> LossyImage | None:
        return None

    def copyable(self, spec: FieldSpec) -> bool:
        """True when a Feature as read is the Feature this encoding writes for its record."""
        return False

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        """One serialized Feature from one record (an ndarray, or bytes of byte-string kinds)."""
        return encode_feature(BYTES, value)

    def decode(
        self, enc: FieldEncoding, spec: FieldSpec, kind: int, values: Any, where: str
    ) -> Any:
        """One record from its Feature (``kind``, ``values``), checked against the field."""
        if kind >= SEQ:
            raise CodecIOError(
                f"{where}: {enc.feature!r} is a {KIND_NAMES[kind]}, expected a feature of an Example"
            )
        if kind != self.wire:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} is a {KIND_NAMES[kind]}, "
                f"expected {KIND_NAMES[self.wire]}"
            )
        if self.one_string and len(values) != 1:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} holds {len(values)} byte strings, expected 1"
            )
        if kind == BYTES and not self.keeps_views:
            # views into the record (decode_examples): the decoders take bytes; a byte
            # string kept as it is stays a view until its column is joined
            values = [bytes(v) for v in values]
        return self.read(enc, spec, values, where)

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        raise NotImplementedError

    def missing(self, spec: FieldSpec) -> Any:
        """The record of a feature an Example lacks, where the rules give one; else None."""
        return None

    # -------------------------------------------------------------- TensorFlow

    def tf_lines(self, name: str, enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str]:
        """The field's ``feature_description`` entry and the ``decode`` line returning it."""
        feature, value = repr(enc.feature), f"ex[{enc.feature!r}]"
        if not spec.dense and not self.parsed_whole(spec):
            line = f"        {name!r}: {self.tf_var_value(value, spec, enc)},  # {spec.kind.describe()}"
            return self.tf_var_spec(feature), line
        shape = (-1, *spec.shape) if isinstance(spec.kind, Ragged) else spec.shape
        value, native, shape, note = self.tf_value(value, spec, enc, shape)
        return self.tf_spec(feature, shape), f"        {name!r}: {value},  # {native} {shape}{note}"

    def parsed_whole(self, spec: FieldSpec) -> bool:
        """A record that varies still parsed as one fixed-length feature (raw bytes)."""
        return False

    def tf_spec(self, feature: str, shape: tuple[int, ...]) -> str:
        """The parse spec of a fixed-shape field."""
        return f"    {feature}: tf.io.FixedLenFeature([], tf.string),"

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        """A fixed-shape field's expression, its dtype and shape as returned, a note."""
        return value, _native(spec).name, shape, ""

    def tf_var_spec(self, feature: str) -> str:
        """The parse spec of a field whose records vary."""
        return f"    {feature}: tf.io.FixedLenFeature([], tf.string),"

    def tf_var_value(self, value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
        """The expression turning a varying field's parsed feature into its record."""
        kind = spec.kind
        if isinstance(kind, Ragged):
            if kind.inner_shape:
                value = f"tf.reshape({value}, {[-1, *kind.inner_shape]})"
            return _cast_expr(value, _native(spec))
        if isinstance(kind, Image):
            channels = kind.channels or 0
            if kind.encoding in ("raw", "png"):
                return f"tf.io.decode_png({value}, channels={channels}, dtype=tf.{kind.dtype.newbyteorder('=').name})"
            if kind.encoding == "jpeg":
                return f"tf.io.decode_jpeg({value}, channels={channels})"
            return f"tf.io.decode_image({value}, channels={channels}, expand_animations=False)"
        return value  # String: UTF-8 bytes, .numpy().decode() gives the str


# ------------------------------------------------------------------ numbers


class _Numbers(ExampleEncoding):
    """A list of numbers per record: the field's values, flattened."""

    dtype_copied: ClassVar[str]  # the dtype whose records are the wire's values as they are
    tf_type: ClassVar[str]

    def copyable(self, spec: FieldSpec) -> bool:
        return spec.dtype.str == self.dtype_copied

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        if isinstance(spec.kind, Ragged):
            flat = values.view("<u8") if _uint64_bits(spec) else values
            return _ragged_rows(enc, spec, flat.astype(spec.dtype), where)
        size = math.prod(spec.shape)  # a tuple of ints: math.prod, not numpy per record
        if len(values) != size:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(values)} values, expected {size} "
                f"for shape {spec.shape}"
            )
        if _uint64_bits(spec):
            return values.view("<u8").astype(spec.dtype).reshape(spec.shape)
        return values.astype(spec.dtype).reshape(spec.shape)

    def missing(self, spec: FieldSpec) -> Any:
        return np.empty((0, *spec.shape), spec.dtype) if isinstance(spec.kind, Ragged) else None

    def tf_spec(self, feature: str, shape: tuple[int, ...]) -> str:
        dims = [] if shape == () else [int(np.prod(shape))]
        return f"    {feature}: tf.io.FixedLenFeature({dims}, {self.tf_type}),"

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        if len(shape) > 1:
            value = f"tf.reshape({value}, {list(shape)})"
        quant = dequant_params(spec)
        if quant is None:
            return _cast_expr(value, _native(spec)), _native(spec).name, shape, ""
        # int8/uint8 codes: the values dstore reads
        scale, offset = (repr(a.tolist()) for a in quant)
        if quant[0].ndim:
            scale, offset = (f"tf.constant({c}, tf.float32)" for c in (scale, offset))
        value = f"tf.cast({value}, tf.float32) * {scale} + {offset}"
        return value, "float32", shape, f"; {spec.dtype.name} codes dequantized"

    def tf_var_spec(self, feature: str) -> str:
        return f"    {feature}: tf.io.RaggedFeature({self.tf_type}),"


class Int64(_Numbers):
    name = "int64"
    wire = INT64
    dtype_copied = "<i8"
    tf_type = "tf.int64"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        if _uint64_bits(spec):
            value = value.astype("<u8").view("<i8")
        return encode_feature(INT64, value.reshape(-1))


class Float(_Numbers):
    name = "float"
    wire = FLOAT
    dtype_copied = "<f4"
    tf_type = "tf.float32"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        return encode_feature(FLOAT, value.reshape(-1))


class Raw(ExampleEncoding):
    """Any other dtype: the record's bytes in the field's byte order, one byte string."""

    name = "raw"
    one_string = True

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        # astype: indexing a 1-d array gives a native-endian scalar, lose no byte order
        return encode_feature(BYTES, np.asarray(value).astype(spec.dtype).tobytes())

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        data = values[0]
        if isinstance(spec.kind, Ragged):
            if len(data) % (spec.dtype.itemsize * max(math.prod(spec.shape), 1)):
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} has {len(data)} bytes, not a whole number "
                    f"of {spec.dtype} rows of shape {spec.shape}"
                )
            return _ragged_rows(enc, spec, np.frombuffer(data, spec.dtype), where)
        size = math.prod(spec.shape) * spec.dtype.itemsize
        if len(data) != size:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(data)} bytes, expected {size}"
            )
        return np.frombuffer(data, spec.dtype).reshape(spec.shape)

    def parsed_whole(self, spec: FieldSpec) -> bool:
        return isinstance(spec.kind, Ragged)

    def tf_lines(self, name: str, enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str]:
        native = _native(spec)
        if native.name in DECODE_RAW_DTYPES or not (spec.dense or self.parsed_whole(spec)):
            return super().tf_lines(name, enc, spec)
        shape = (-1, *spec.shape) if isinstance(spec.kind, Ragged) else spec.shape
        line = (
            f"        {name!r}: ex[{enc.feature!r}],  # raw bytes of {int(np.prod(shape))} {spec.dtype.str} values "
            f"{shape}: TensorFlow has no {native.name}; numpy: np.frombuffer(b, {spec.dtype.str!r})"
        )
        return self.tf_spec(repr(enc.feature), shape), line

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec)
        order = ", little_endian=False" if spec.dtype.byteorder == ">" else ""
        value = f"tf.reshape(tf.io.decode_raw({value}, tf.{native.name}{order}), {list(shape)})"
        return value, native.name, shape, ""


def _ragged_rows(enc: FieldEncoding, spec: FieldSpec, flat: np.ndarray, where: str) -> np.ndarray:
    """A Ragged record ``(n, *inner)`` from its flat values."""
    per = math.prod(spec.shape)
    if per == 0 or len(flat) % per:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} has {len(flat)} values, not a whole number of "
            f"rows of inner shape {spec.shape} (field {spec.name!r})"
        )
    return flat.reshape(-1, *spec.shape)


class Tensor(ExampleEncoding):
    """Foreign only: ``tf.io.serialize_tensor`` bytes (label-maker); dstore writes no tensors."""

    name = "tensor"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        raise CodecIOError(f"field {spec.name!r}: dstore reads serialized tensors, never writes")

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        where = f"{where}, feature {enc.feature!r}"
        t = parse_tensor_proto(values[0], where)
        if not isinstance(t, np.ndarray) or t.dtype != spec.dtype:
            got = "a string tensor" if not isinstance(t, np.ndarray) else f"a {t.dtype} tensor"
            raise CodecIOError(f"{where}: holds {got}, field expects {spec.kind.describe()}")
        ragged = isinstance(spec.kind, Ragged)
        if (t.shape[1:] if ragged else t.shape) != spec.shape:
            raise CodecIOError(
                f"{where}: tensor of shape {t.shape}, field expects {spec.kind.describe()}"
            )
        return t

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        return f"tf.io.parse_tensor({value}, out_type=tf.{native})", native, shape, ""

    def tf_var_value(self, value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
        return f"tf.io.parse_tensor({value}, out_type=tf.{_native(spec).name})"


# ------------------------------------------------------------------ byte strings


class ByteString(ExampleEncoding):
    """A String or Bytes record: its bytes, one value (Strings checked as UTF-8)."""

    name = "bytes"
    one_string = True
    keeps_views = True

    def copyable(self, spec: FieldSpec) -> bool:
        return True

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        value = values[0]
        if isinstance(spec.kind, String):
            try:
                str(value, "utf-8")  # a check (bytes or a view into the record)
            except UnicodeDecodeError as e:
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} (field {spec.name!r}) is not valid UTF-8 "
                    f"at byte {e.start}"
                ) from None
        return value


class Encoded(ByteString):
    """An encoded Image (PNG, JPEG, ...): its bytes passed through byte for byte."""

    name = "encoded"


class Strings(ExampleEncoding):
    """A list of strings: its byte strings, 0..n values."""

    name = "strings"

    def copyable(self, spec: FieldSpec) -> bool:
        return True

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        if isinstance(spec.kind, StringList) and spec.kind.text:
            bad = first_invalid_utf8(values)
            if bad is not None:
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} (field {spec.name!r}), string {bad[0]}: "
                    f"not valid UTF-8 at byte {bad[1]}"
                )
        return list(values)

    def missing(self, spec: FieldSpec) -> Any:
        return []

    def tf_var_spec(self, feature: str) -> str:
        return f"    {feature}: tf.io.RaggedFeature(tf.string),"


class SerializedFeature(Strings):
    """Bytes records that are serialized Features (any list kind), kept as they are."""

    name = "feature"

    def copyable(self, spec: FieldSpec) -> bool:
        return False

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        return bytes(value)

    def decode(
        self, enc: FieldEncoding, spec: FieldSpec, kind: int, values: Any, where: str
    ) -> Any:
        return encode_feature(kind, values)  # the same bytes: encode_feature is canonical

    def missing(self, spec: FieldSpec) -> Any:
        return None


class FeatureList(ExampleEncoding):
    """A SequenceExample's feature list, one Feature per step (:mod:`._sequence`)."""

    feature_list = True

    def __init__(self, name: str) -> None:
        self.name = name  # one instance per step kind
        self.wire = SEQ_ENCODINGS[name]

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        return encode_steps(self.name, spec, value)

    def decode(
        self, enc: FieldEncoding, spec: FieldSpec, kind: int, values: Any, where: str
    ) -> Any:
        return sequence_value(self.name, spec, kind, values, where)

    def missing(self, spec: FieldSpec) -> Any:
        return empty_record(spec)

    def tf_lines(self, name: str, enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str]:
        line, value = sequence_snippet(repr(enc.feature), spec, self.name)
        return line, f"        {name!r}: {value},  # {spec.kind.describe()}, one per step"


# ------------------------------------------------------------------ images


class Png(ExampleEncoding):
    """Pixels as one PNG (a 1-channel axis dropped), decoded back to the field's pixels."""

    name = "png"
    one_string = True

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        img = value if value.ndim == 2 or value.shape[2] != 1 else value[..., 0]
        native = np.ascontiguousarray(img.astype(img.dtype.newbyteorder("="), copy=False))
        return encode_feature(BYTES, png(native))

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        where = f"{where}, feature {enc.feature!r}"
        img = _png(values[0], where)
        if spec.dense:
            if img.dtype != _native(spec) or img.size != math.prod(spec.shape):
                raise CodecIOError(
                    f"{where}: PNG is {img.dtype} {img.shape}, field expects {spec.dtype} "
                    f"{spec.shape} (images of varying size in one field are not supported)"
                )
            return img.reshape(spec.shape)
        kind = spec.kind  # a raw Image of varying size
        assert isinstance(kind, Image)
        if kind.channels == 1 and img.ndim == 2:  # PNG has no 1-channel axis: dropped on write
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

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        channels = shape[2] if len(shape) == 3 else 1
        value = f"tf.io.decode_png({value}, channels={channels}, dtype=tf.{native})"
        if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
            return value, native, (*shape, 1), f"; dstore reads {shape}"
        return value, native, shape, ""


def _png(data: bytes, where: str) -> np.ndarray:
    try:
        return png_decode(data, where)
    except DstoreError:
        raise  # a pixel bomb, refused from its header
    except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
        raise CodecIOError(f"{where}: PNG does not decode: {e}") from None


class Lossy(ExampleEncoding):
    """Pixels as one JPEG, WebP or JPEG XL of the field's quality, decoded back to pixels."""

    one_string = True

    def __init__(self, name: str) -> None:
        self.name = name  # one instance per lossy format

    def lossy_image(self, quality: int | None) -> LossyImage | None:
        return LossyImage(self.name, quality if quality is not None else 0)

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        lossy = enc.lossy
        assert lossy is not None
        return encode_feature(BYTES, lossy.encode(value))

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        lossy = enc.lossy
        assert lossy is not None
        return lossy.decode_record(
            values[0], record_shape(spec), spec.dtype, f"{where}, feature {enc.feature!r}"
        )

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        channels = shape[2] if len(shape) == 3 else 1
        value = _lossy_decode_expr(value, self.name, channels, native)
        if self.name == "jxl":  # TensorFlow has no JPEG XL decoder: give it the shape
            value = f"tf.ensure_shape({value}, {[*shape[:2], channels]})"
        note = ""
        if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
            note, shape = f"; dstore reads {shape}", (*shape, 1)
        return value, native, shape, f"{note}; {self.name} quality {enc.quality}"

    def tf_var_value(self, value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
        kind = spec.kind  # raw pixels of varying size, stored lossy
        assert isinstance(kind, Image)
        return _lossy_decode_expr(value, self.name, kind.channels or 0, kind.dtype.name)


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


#: every field encoding by the name manifests store
ENCODINGS: dict[str, ExampleEncoding] = {
    e.name: e
    for e in (
        Png(),
        Raw(),
        Int64(),
        Float(),
        ByteString(),
        Strings(),
        *(FeatureList(name) for name in SEQ_ENCODINGS),
        Encoded(),
        Tensor(),
        SerializedFeature(),
        *(Lossy(fmt) for fmt in LOSSY_FORMATS),
    )
}

#: dtypes ``tf.io.decode_raw`` can produce (its ``out_type``), TensorFlow 2.x
DECODE_RAW_DTYPES = {
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
