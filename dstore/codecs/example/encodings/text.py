"""Byte strings in an Example: one string or bytes value (``bytes``), encoded images
passed through (``encoded``), lists of strings (``strings``), Features kept as
serialized (``feature``) and a SequenceExample's feature lists (``seq_*``)."""

from __future__ import annotations

from typing import Any

from ....errors import CodecIOError
from ....model import String, StringList
from ....model.schema import FieldSpec
from ....model.strings import first_invalid_utf8
from ..sequence import SEQ_ENCODINGS, empty_record, encode_steps, sequence_value
from ..sequence import snippet as sequence_snippet
from ..wire import encode_feature
from .base import ExampleEncoding, FieldEncoding

__all__ = ["ByteString", "Encoded", "FeatureList", "SerializedFeature", "Strings"]


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

    names = tuple(SEQ_ENCODINGS)

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
