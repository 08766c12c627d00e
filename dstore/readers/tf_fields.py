"""How each field of a TFRecord becomes a tensor in a native tf.data pipeline: the
parse spec, PNG decoding by TensorFlow's op or dstore's own (for dstore's fast PNGs),
lossy images, quantised numbers, and the checks against the manifest's shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, SchemaError

__all__ = [
    "PNG_DECODERS",
    "Post",
    "dequantized",
    "image_decoder",
    "image_shape",
    "import_tf",
    "tfrecord_field",
    "writes_up_filtered_png",
]

#: what turns a parsed feature into its record
Post = Callable[[Any], Any]

#: ``to_tf_dataset``'s ``png_decoder`` values
PNG_DECODERS = ("auto", "tensorflow")


def import_tf() -> Any:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise MissingDependencyError(
            "to_tf_dataset", "tf", "tensorflow", what="dstore.to_tf_dataset"
        ) from e
    return tf


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype


def _decode_lossy(tf: Any, value: Any, lossy: Any, shape: tuple[int, ...], native: Any) -> Any:
    """Pixels of a dstore-encoded lossy image, as ``dstore.open`` decodes them."""
    channels = shape[2] if len(shape) == 3 else 1
    if lossy.format == "jpeg":  # the accurate IDCT: imagecodecs' (dstore.open's) pixels
        return tf.io.decode_jpeg(value, channels=channels, dct_method="INTEGER_ACCURATE")
    if lossy.format == "webp":
        return tf.io.decode_image(value, channels=channels, expand_animations=False)
    # JPEG XL: TensorFlow has no decoder; imagecodecs decodes inside the pipeline
    out = tf.numpy_function(
        lambda b: lossy.decode(bytes(b)).reshape(shape), [value], tf.as_dtype(native)
    )
    return tf.ensure_shape(out, shape)


# ------------------------------------------------------------------ images


def image_decoder(tf: Any, kind: Any, where: str) -> Post:
    """Encoded bytes -> pixels ``(H, W, C)`` (``(H, W)`` for a 2-d kind) with TensorFlow's ops.

    The dtype is the kind's (uint16 PNGs stay uint16); channels are the kind's,
    or the file's own where the kind does not know them."""
    enc = kind.encoding
    two_d = kind.channels == 0
    channels = 1 if two_d else (kind.channels or 0)
    dtype = tf.as_dtype(_native(kind.dtype))
    op = {
        "raw": "decode_png",  # a raw image of varying size is stored as PNG
        "png": "decode_png",
        "jpeg": "decode_jpeg",
        "webp": "decode_webp",
        "jxl": "decode_jxl",
        "bmp": "decode_bmp",
        "gif": "decode_image",
    }.get(enc)
    if op is None or not hasattr(tf.io, op):
        raise SchemaError(
            f"{where} holds {enc} images, which TensorFlow {tf.__version__} cannot decode; "
            "read it with dstore.to_torch or dstore.open, or leave it out with fields="
        )
    decode = getattr(tf.io, op)
    if enc in ("raw", "png", "webp", "jxl"):

        def run(v: Any) -> Any:
            return decode(v, channels=channels, dtype=dtype)
    elif enc == "gif":

        def run(v: Any) -> Any:  # the first frame, as dstore's own reader gives
            return decode(v, channels=channels or None, expand_animations=False)
    else:

        def run(v: Any) -> Any:
            return decode(v, channels=channels)

    def image(v: Any) -> Any:
        img = run(v)
        if img.shape.rank == 4:  # decode_webp gives frames: a still image is the first
            img = img[0]
        if two_d:
            img = img[..., 0]
        return tf.ensure_shape(img, image_shape(kind))

    return image


def image_shape(kind: Any) -> tuple[int | None, ...]:
    """What TensorFlow knows of an image record's shape (None where it varies)."""
    return (
        (kind.height, kind.width)
        if kind.channels == 0
        else (kind.height, kind.width, kind.channels)
    )


# ------------------------------------------------------------------ TFRecord


def tfrecord_field(
    tf: Any, source: Any, name: str, enc: Any, own_png: bool = False
) -> tuple[Any, Post]:
    """The parse spec of one field's feature, and what turns the parsed value into its record
    (``own_png``: fixed-size PNGs by dstore's decoder, :func:`_own_png_pixels`)."""
    from ..codecs.example.tf import DECODE_RAW_DTYPES as _DECODE_RAW_DTYPES
    from ..model import Bytes, Image, Ragged, String

    field = source.spec.fields[name]
    kind = field.kind
    where = f"{source.path}: split {source.split!r}, field {name!r}"
    native = _native(field.dtype)
    bf16 = native.name == "bfloat16"  # TensorFlow's bfloat16 is ml_dtypes'
    tdtype = tf.as_dtype(native) if native.kind in "biufc" or bf16 else None
    ragged = isinstance(kind, Ragged)
    shape = (-1, *field.shape) if ragged else field.shape
    string = tf.io.FixedLenFeature([], tf.string)

    if enc.encoding == "strings":  # a list of strings per record: a tf.string vector
        return tf.io.RaggedFeature(tf.string, row_splits_dtype=tf.int64), lambda v: v
    if enc.encoding in ("bytes", "encoded") or (enc.encoding == "png" and not field.dense):
        if isinstance(kind, (String, Bytes)):
            return string, lambda v: v
        if isinstance(kind, Image):
            return string, image_decoder(tf, kind, where)
        raise SchemaError(f"{where} is {kind.describe()} stored as bytes, which is not a record")
    if enc.encoding == "tensor":  # tf.io.serialize_tensor bytes (label-maker records)
        spec_shape = (None, *field.shape) if ragged else field.shape
        return string, lambda v: tf.ensure_shape(tf.io.parse_tensor(v, tdtype), spec_shape)
    if enc.encoding == "raw":
        if native.name not in _DECODE_RAW_DTYPES:
            raise SchemaError(
                f"{where} is {field.dtype}, which TensorFlow has no dtype for; "
                "read it with dstore.open"
            )
        little = field.dtype.byteorder != ">"
        return string, lambda v: tf.reshape(
            tf.io.decode_raw(v, tdtype, little_endian=little), shape
        )
    if enc.lossy is not None and field.dense:  # dstore's JPEG/WebP/JPEG XL: to its pixels
        lossy = enc.lossy
        return string, lambda v: tf.reshape(_decode_lossy(tf, v, lossy, shape, native), shape)
    if enc.encoding == "png" and own_png:
        return string, _own_png_pixels(tf, shape, native, where)
    if enc.encoding == "png":  # a fixed-size image: decoded straight to its shape
        channels = field.shape[2] if len(field.shape) == 3 else 1
        # its height and width checked, not only its size: (128, 32, 3) is not (64, 64, 3)
        decoded = (*field.shape[:2], channels)
        return string, lambda v: tf.reshape(
            tf.ensure_shape(tf.io.decode_png(v, channels=channels, dtype=tdtype), decoded),
            shape,
        )
    return _number_field(tf, enc, native, tdtype, shape, ragged)


def writes_up_filtered_png(reader: Any) -> bool:
    """Whether a dstore manifest says its PNGs were written at ``png_level`` fast or fastest:
    fpng's rows (or UP-filtered rows for gray and 16-bit images), which dstore's decoder
    inflates with ISA-L and unfilters in numpy at 2.6x ``tf.io.decode_png``'s speed per
    tile (385 against 1,017 us on 256x256x3 photo tiles; zlib's inflate is most of the
    latter). Other PNGs -- TensorFlow's, zlib levels -- stay with TensorFlow's op."""
    from ..images.png import FPNG_LEVELS

    # a manifest edited by hand or by another tool may hold anything: then TensorFlow's op
    manifest = getattr(reader, "manifest", None)
    options = manifest.get("options") if isinstance(manifest, dict) else None
    level = options.get("png_level") if isinstance(options, dict) else None
    return isinstance(level, str) and level in FPNG_LEVELS


def _own_png_pixels(tf: Any, shape: tuple[int, ...], native: np.dtype, where: str) -> Post:
    """A fixed-size PNG's pixels by dstore's decoder, in a ``tf.numpy_function``: ISA-L and
    numpy let go of the GIL, so tf.data's parallel map decodes on every core.

    A record unlike the manifest fails as one line naming the field: the decoder's
    error comes back as a string that an ``Assert`` raises (an exception raised in a
    numpy_function reaches the user with TensorFlow's Python traceback appended)."""
    from ..images import png as _png

    height, width = shape[:2]
    channels = shape[2] if len(shape) == 3 else 1
    decoded = (height, width) if channels == 1 else (height, width, channels)
    declared = f"{native} {shape}"

    def checked(data: bytes) -> np.ndarray:
        header = _png.png_header(data)
        if header is None:
            raise ValueError(f"{len(data)} bytes that are not a PNG, not the {declared} PNG")
        w, h = header[:2]
        # before decoding: a header declaring millions of pixels is never allocated
        if (h, w) != (height, width):
            raise ValueError(
                f"a PNG of {h} rows of {w} pixels, not the {declared} its manifest declares"
            )
        try:
            img = _png.decode(data, "PNG")
        except Exception as e:
            raise ValueError(f"a PNG that does not decode ({e})") from e
        # the shape, not only the size: a (48, 64, 4) PNG must not pass as (64, 64, 3)
        if img.dtype != native or img.shape != decoded:
            raise ValueError(
                f"a PNG of {img.dtype} {img.shape}, not the {declared} its manifest declares"
            )
        return img.reshape(shape)

    def failure(e: Exception, which: str = "") -> bytes:
        reason = " ".join(str(e).split()) or type(e).__name__
        return f"{where}{which}: {reason}".encode()

    def pixels(data: bytes) -> tuple[np.ndarray, bytes]:
        try:
            return checked(data), b""
        except Exception as e:  # noqa: BLE001 - any failure of a record: one line naming it
            # no pixels: the Assert fails before anything reads them (and a hostile
            # manifest's declared shape is never allocated)
            return np.zeros(0, native), failure(e)

    def batch_pixels(blobs: np.ndarray) -> tuple[np.ndarray, bytes]:
        out: np.ndarray | None = None
        for i, data in enumerate(blobs):
            try:
                img = checked(data)
            except Exception as e:  # noqa: BLE001 - as pixels(), naming the record in its batch
                return np.zeros((0, *shape), native), failure(e, f", record {i} of a batch")
            if out is None:  # allocated once the first PNG's header matched the manifest
                out = np.empty((len(blobs), *shape), native)
            out[i] = img
        return (out if out is not None else np.zeros((0, *shape), native)), b""

    def post(v: Any) -> Any:
        one = len(v.shape) == 0
        out, error = tf.numpy_function(
            pixels if one else batch_pixels, [v], (tf.as_dtype(native), tf.string), stateful=False
        )
        ok = tf.debugging.Assert(tf.equal(error, b""), [error])
        with tf.control_dependencies([ok]):
            return tf.ensure_shape(tf.identity(out), shape if one else (None, *shape))

    return post


def batch_decoded_png(source: Any, name: str, enc: Any, own_png: bool) -> bool:
    """Whether the field's records are PNGs dstore's decoder reads (:func:`_own_png_pixels`):
    a batch of them is then decoded in one call, after batching (one crossing into Python
    per batch, not per record)."""
    field = source.spec.fields[name]
    return own_png and enc.encoding == "png" and field.dense and enc.lossy is None


def _number_field(
    tf: Any, enc: Any, native: np.dtype, tdtype: Any, shape: tuple[int, ...], ragged: bool
) -> tuple[Any, Post]:
    """A numeric field stored as an int64 or float list feature: its parse spec and the
    cast (uint64 from its bit pattern) and reshape to the record."""
    wire = tf.int64 if enc.encoding == "int64" else tf.float32
    if ragged:  # a list of any length (empty where a record lacks the feature)
        feature = tf.io.RaggedFeature(wire, row_splits_dtype=tf.int64)
    else:
        feature = tf.io.FixedLenFeature([] if shape == () else [int(np.prod(shape))], wire)

    def number(v: Any) -> Any:
        if native == np.uint64:  # stored as the int64 bit pattern
            v = tf.bitcast(v, tf.uint64)
        elif tdtype != wire:
            v = tf.cast(v, tdtype)
        return tf.reshape(v, shape)

    return feature, number


def dequantized(post: Post, quant: tuple[np.ndarray, np.ndarray]) -> Post:
    """``post``, then int8/uint8 codes (cast to float32 by ``post``) back to their values."""
    scale, offset = quant
    return lambda v: post(v) * scale + offset
