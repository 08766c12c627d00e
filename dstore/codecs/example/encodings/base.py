"""What every field encoding of an Example shares: :class:`FieldEncoding` (a field's
feature name, encoding and quality, as manifests store them), :class:`ExampleEncoding`
(the base class, which registers each subclass in :data:`ENCODINGS`), and the dtype
helpers the TensorFlow parsing lines use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ....errors import CodecIOError
from ....images.imagecodec import LossyImage
from ....model import Image, Ragged
from ....model.schema import FieldSpec
from ..wire import BYTES, KIND_NAMES, SEQ, encode_feature

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


#: every field encoding by the name manifests store, filled as each class is defined
#: (:meth:`ExampleEncoding.__init_subclass__`): no module lists them all
ENCODINGS: dict[str, ExampleEncoding] = {}


class ExampleEncoding:
    """One field encoding; subclasses override what differs from a byte-string feature.

    A subclass that sets ``name`` registers one instance of itself under that name in
    :data:`ENCODINGS`; one that sets ``names`` registers an instance per name, built
    as ``cls(name)`` (the lossy image formats, the feature lists). A subclass setting
    neither is a family's shared base and registers nothing."""

    name: str  # what manifests store
    #: the names one class serves, each an instance of its own
    names: ClassVar[tuple[str, ...]] = ()
    wire: int = BYTES  # the Example feature kind records are stored as
    one_string: ClassVar[bool] = False  # exactly one byte string per record
    feature_list: ClassVar[bool] = False  # a SequenceExample's feature list
    keeps_views: ClassVar[bool] = False  # takes byte strings as views into the record

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "names" in cls.__dict__:
            instances = [cls(name) for name in cls.names]  # type: ignore[call-arg]
        elif "name" in cls.__dict__:
            instances = [cls()]
        else:
            return
        for encoding in instances:
            if encoding.name in ENCODINGS:  # a name manifests store must mean one thing
                raise TypeError(f"field encoding {encoding.name!r} is defined twice")
            ENCODINGS[encoding.name] = encoding

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
        return self.read(enc, spec, self.feature_values(enc, kind, values, where), where)

    def decode_into(
        self,
        enc: FieldEncoding,
        spec: FieldSpec,
        kind: int,
        values: Any,
        where: str,
        into: np.ndarray,
    ) -> None:
        """:meth:`decode` written into ``into``, the record's row of a dense field's column
        (an encoding that can decode straight there overrides it)."""
        into[...] = self.decode(enc, spec, kind, values, where)

    def feature_values(self, enc: FieldEncoding, kind: int, values: Any, where: str) -> Any:
        """A Feature's values once its kind and count are checked against this encoding."""
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
        return values

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
