"""The TensorFlow snippet that parses dstore's Examples: ``feature_description`` and ``decode``.

Shared by the formats whose records are serialized Examples (TFRecord,
ArrayRecord): ``dstore info`` prints it, each line runs as is, and the values
it returns are the ones dstore reads (PNG decoded with the channels dstore
keeps, raw bytes reshaped, int8/uint8 codes dequantized, uint64 bit patterns).
How the records reach ``decode`` (``tf.data.TFRecordDataset``,
``ArrayRecordDataSource``) is the format's own line.
"""

from __future__ import annotations

import numpy as np

from ..model import Image, Ragged, String
from ..model.schema import FieldSpec, SplitSpec
from ..precision import dequant_params
from ._example_fields import FieldEncoding
from ._imagecodec import LOSSY_FORMATS
from ._sequence import SEQ_ENCODINGS
from ._sequence import snippet as sequence_snippet

__all__ = ["DECODE_RAW_DTYPES", "parse_snippet"]


def parse_snippet(split: SplitSpec, encs: dict[str, FieldEncoding]) -> list[str]:
    """Lines defining ``feature_description`` and ``decode(record)`` (a dict of the
    split's fields, as dstore reads them) for TensorFlow."""
    # the import too: the snippet is printed to be pasted and run as it is
    lines = ["import tensorflow as tf", "", "feature_description = {"]
    returns = []
    sequence = []  # a SequenceExample's feature lists
    for name, spec in split.fields.items():
        enc = encs[name]
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
        elif enc.encoding == "raw" and native.name not in DECODE_RAW_DTYPES:
            returns.append(
                f"        {name!r}: {value},  # raw bytes of {int(np.prod(shape))} {spec.dtype.str} values "
                f"{shape}: TensorFlow has no {native.name}; numpy: np.frombuffer(b, {spec.dtype.str!r})"
            )
            continue
        elif enc.encoding == "raw":
            order = ", little_endian=False" if spec.dtype.byteorder == ">" else ""
            value = f"tf.reshape(tf.io.decode_raw({value}, tf.{native.name}{order}), {list(shape)})"
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
