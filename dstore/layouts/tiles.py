"""What label-maker's three layouts share: the tile field and its image kind, the
pixels of encoded or raw tiles checked against it, and the constant fields
(format, file name, source id) TensorFlow's readers expect beside the image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CodecIOError, SchemaError
from ..model import Image, Kind, VarColumn, kind_from_json
from ..model.schema import FieldSpec, SplitSpec

__all__ = [
    "BOX",
    "BOX_FIELDS",
    "FILENAME",
    "FORMAT",
    "HEIGHT",
    "IMAGE",
    "IMAGE_CODEC",
    "LABEL",
    "MASK",
    "MASK_FORMAT",
    "SOURCE_ID",
    "TEXT",
    "WIDTH",
]

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
#: the codec option that picks the image encoding; written into ``image/format``
IMAGE_CODEC = "image_codec"

IMAGE, FORMAT, HEIGHT, WIDTH = "image/encoded", "image/format", "image/height", "image/width"
FILENAME, SOURCE_ID = "image/filename", "image/source_id"
BOX = ("xmin", "ymin", "xmax", "ymax")
BOX_FIELDS = tuple(f"image/object/bbox/{c}" for c in BOX)
LABEL, TEXT = "image/object/class/label", "image/object/class/text"
MASK, MASK_FORMAT = "image/segmentation/class/encoded", "image/segmentation/class/format"


# ----------------------------------------------------------------------- helpers


def _field(split: SplitSpec, name: str, layout: str, where: str) -> FieldSpec:
    spec = split.fields.get(name)
    if spec is None:
        raise SchemaError(
            f"{where}: no field {name!r} (fields: {', '.join(split.fields) or 'none'}); "
            f"{layout} maps label-maker's x_<split> tiles and y_<split> labels"
        )
    return spec


def _tile_kind(split: SplitSpec, layout: str, where: str) -> Image:
    """The tiles ``x`` as a raw fixed-size Image (uint8/uint16, (H, W) or (H, W, 1|3|4))."""
    spec = _field(split, "x", layout, where)
    shape = spec.shape if spec.dense else None
    ok = (
        shape is not None
        and spec.dtype.kind == "u"
        and spec.dtype.itemsize in (1, 2)
        and (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3, 4)))
    )
    if not ok:
        raise SchemaError(
            f"{where}, field 'x': {spec.kind.describe()} records; {layout} needs image tiles, "
            "uint8 or uint16 (H, W) or (H, W, 1|3|4) (label-maker's x)"
        )
    assert shape is not None
    return Image(spec.dtype, 0 if len(shape) == 2 else shape[2], shape[0], shape[1], "raw")


def _strings(n: int, text: str) -> VarColumn:
    """``n`` records of the same string (offsets only grow: one copy of the bytes each)."""
    data = np.frombuffer(text.encode(), np.uint8)
    return VarColumn(np.tile(data, n), np.arange(n + 1, dtype=np.int64) * len(data))


def _scalars(n: int, value: int) -> np.ndarray:
    return np.full(n, value, _I64)


def _index_strings(start: int, n: int) -> VarColumn:
    return VarColumn.from_strings(str(i) for i in range(start, start + n))


def _saved_kind(saved: Mapping[str, Any], name: str, default: Kind, where: str) -> Kind:
    data = saved.get(name)
    return kind_from_json(data, where) if data else default


def _pixels(
    col: Any, kind: Kind, shape: tuple[int, ...], where: str, name: str, start: int
) -> np.ndarray:
    """A batch of images as one ndarray of ``shape`` per record: the codec decoded them
    already (dense), or they arrive encoded (PNG/JPEG bytes) and are decoded here."""
    if not isinstance(col, VarColumn):
        arr = np.asarray(col)
        if arr.shape[1:] != shape:
            if (*arr.shape[1:], 1) == shape or arr.shape[1:] == (*shape, 1):
                return arr.reshape((len(arr), *shape))
            raise SchemaError(f"{where}, field {name!r}: images of shape {arr.shape[1:]}")
        return arr
    import imagecodecs  # the tfrecord extra: only files that keep images encoded get here

    from ..images.imagecodec import check_image_pixels

    out = np.empty((len(col), *shape), kind.value_dtype)
    for i, blob in enumerate(col.to_bytes_list()):
        check_image_pixels(blob, f"{where}, field {name!r}, record {start + i}")
        try:
            img = imagecodecs.imread(blob)
        except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
            raise CodecIOError(
                f"{where}, field {name!r}, record {start + i}: does not decode: {e}"
            ) from None
        if img.size != int(np.prod(shape)):
            raise SchemaError(
                f"{where}, field {name!r}, record {start + i}: image {img.shape}, expected {shape}"
            )
        out[i] = img.reshape(shape)
    return out


def _passthrough(split: SplitSpec, used: set[str]) -> list[FieldSpec]:
    """Fields the layout does not map travel under their own names (never dropped)."""
    return [spec for name, spec in split.fields.items() if name not in used]


# ------------------------------------------------------------- object detection
