"""Encoded images (PNG, JPEG, ...) decoded to pixels on read, for destinations that want pixels.

A TFRecord destination takes encoded images byte for byte. npz, zarr and
HDF5 hold arrays: by default a conversion to them decodes each encoded
Image field into a raw Image of varying size (pixels plus each record's
shape, ``(H, W, C)``; ``(H, W)`` for a greyscale PNG field) --
``convert(..., keep_encoded=True)`` (``--keep-encoded``) keeps the encoded
bytes instead. :class:`dstore.sources.decoded_images.DecodedImages` wraps any reader and does it;
``verify`` uses it too, to compare a source's encoded images with the
pixels a conversion stored.

A record that does not decode is one error naming the file, split, field and
record (the field is declared an image; ``--keep-encoded`` carries any bytes).
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecIOError
from ..model import Image, Kind, VarColumn
from ..model.schema import Schema

__all__ = [
    "decode_column_images",
    "decode_image",
    "decoded_kind",
    "encoded_image_fields",
    "header_shape",
]

#: PNG colour type -> channels once decoded, 0 for a 2-d grey record (a palette decodes
#: to RGB or RGBA by a later chunk: not told by the header)
_PNG_CHANNELS = {0: 0, 2: 3, 4: 2, 6: 4}
#: JPEG components -> channels once decoded (CMYK and others: not told here)
_JPEG_CHANNELS = {1: 0, 3: 3}


def decoded_kind(kind: Image) -> Image:
    """The raw Image an encoded one decodes to (sizes vary; channels as declared)."""
    return Image(kind.dtype, kind.channels, kind.height, kind.width, "raw")


def header_shape(data: bytes) -> tuple[np.dtype, tuple[int, ...]] | None:
    """The dtype and shape an encoded image decodes to, from its header alone: a PNG of
    any colour type but a palette, an 8-bit JPEG of 1 or 3 components; None otherwise
    (nothing is decoded to find out)."""
    from .imagecodec import jpeg_frame
    from .png import png_header

    png = png_header(data[:32])
    if png is not None:
        width, height, depth, color, _ = png
        channels = _PNG_CHANNELS.get(color)
        if channels is None:
            return None
        dtype = np.dtype(np.uint16 if depth == 16 else np.uint8)
        return dtype, (height, width) if channels == 0 else (height, width, channels)
    if data[:3] == b"\xff\xd8\xff":
        frame = jpeg_frame(bytes(data[: 1 << 20]))
        if frame is None or frame[0] != 8 or frame[3] not in _JPEG_CHANNELS:
            return None
        _, height, width, components = frame
        channels = _JPEG_CHANNELS[components]
        return np.dtype(np.uint8), (height, width) if channels == 0 else (height, width, channels)
    return None


def _is_encoded(kind: Kind) -> bool:
    return isinstance(kind, Image) and kind.encoding != "raw"


def encoded_image_fields(schema: Schema) -> dict[str, set[str]]:
    """``{split: {field, ...}}`` of the encoded Image fields of ``schema``."""
    out: dict[str, set[str]] = {}
    for split in schema.splits.values():
        names = {n for n, f in split.fields.items() if _is_encoded(f.kind)}
        if names:
            out[split.name] = names
    return out


#: what a record that does not decode says to do, unless the caller knows better
KEEP_ENCODED_HINT = "convert with keep_encoded=True to carry the bytes as they are"


def decode_image(data: bytes, kind: Image, where: str, hint: str = KEEP_ENCODED_HINT) -> np.ndarray:
    """Pixels of one encoded image, checked against (and shaped like) the field's kind."""
    import imagecodecs

    from .imagecodec import check_image_pixels
    from .png import decode as png_decode

    check_image_pixels(data, where)
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            img = png_decode(data)
        elif data[:3] == b"\xff\xd8\xff":
            img = imagecodecs.jpeg8_decode(data)
        else:
            img = imagecodecs.imread(data)
    except MemoryError:
        raise  # the image is fine, the process is short of memory: not "not decodable"
    except Exception as e:  # noqa: BLE001 - imagecodecs raises one error type per codec
        what = f"{type(e).__name__}: {e}".strip().rstrip(":")
        raise CodecIOError(
            f"{where}: not a decodable {kind.encoding} image ({len(data)} bytes; {what}); {hint}"
        ) from None
    img = np.asarray(img)
    if kind.channels == 0 and img.ndim == 3 and img.shape[2] == 1:
        img = img[..., 0]
    elif kind.channels != 0 and img.ndim == 2:
        img = img[..., None]  # greyscale JPEG/PNG in a field of (H, W, C) records
    channels = 0 if img.ndim == 2 else img.shape[2]
    if (
        img.ndim not in (2, 3)
        or img.dtype != kind.dtype
        or (kind.channels is not None and channels != kind.channels)
        or (kind.height is not None and img.shape[0] != kind.height)
        or (kind.width is not None and img.shape[1] != kind.width)
    ):
        raise CodecIOError(
            f"{where}: decodes to {img.dtype} {img.shape}, the field is {kind.describe()}"
        )
    return img


def decode_column_images(
    col: VarColumn, kind: Image, where: str, first: int, hint: str = KEEP_ENCODED_HINT
) -> VarColumn:
    blobs = col.to_bytes_list()
    imgs = [
        decode_image(b, kind, f"{where}, record {first + i}", hint) for i, b in enumerate(blobs)
    ]
    ndim = 2 if kind.channels == 0 else 3
    shapes = np.array([im.shape for im in imgs], np.int64).reshape(len(imgs), ndim)
    offsets = np.zeros(len(imgs) + 1, np.int64)
    np.cumsum([im.size for im in imgs], out=offsets[1:])
    values = np.concatenate([im.reshape(-1) for im in imgs]) if imgs else np.empty(0, kind.dtype)
    return VarColumn(values.astype(kind.dtype, copy=False), offsets, shapes)
