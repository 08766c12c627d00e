"""``tf-segmentation``: tiles and ``(N, H, W, 1)`` masks as DeepLab's ``build_data``
features (the mask a PNG of its own), and back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..abc import Reader
from ..errors import SchemaError
from ..model import Image, String, Tensor, VarColumn
from ..model.schema import Batch, FieldSpec, SplitSpec
from ..options import option
from .base import Layout
from .tiles import (
    _I64,
    FORMAT,
    HEIGHT,
    IMAGE,
    IMAGE_CODEC,
    MASK,
    MASK_FORMAT,
    WIDTH,
    _field,
    _passthrough,
    _pixels,
    _saved_kind,
    _scalars,
    _strings,
    _tile_kind,
)

__all__ = ["SegOptions", "Segmentation"]


@dataclass(frozen=True)
class SegOptions:
    RENAMED: ClassVar[dict[str, str]] = {"image_format": "image_codec"}

    image_codec: str = option("png", "what the codec encodes images as (image/format)")


class Segmentation(Layout):
    """label-maker segmentation <-> DeepLab's ``build_data`` Example keys.

    The mask is PNG-encoded here, not by the codec, so that a lossy
    ``image_codec`` for the images never touches the class indices."""

    name = "tf-segmentation"
    help = "DeepLab keys (image/encoded, image/segmentation/class/encoded PNG mask)"
    Options = SegOptions
    shared_options = (IMAGE_CODEC,)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._tiles: dict[str, Image] = {}
        self._decode: dict[str, tuple[Tensor, Tensor]] = {}

    def holds_layout(self, split: SplitSpec) -> bool:
        return IMAGE in split.fields and MASK in split.fields

    def encode_split(self, split: SplitSpec, where: str) -> tuple[SplitSpec, dict[str, Any]]:
        tile = _tile_kind(split, self.name, where)
        y = _field(split, "y", self.name, where)
        hw = (tile.height, tile.width)
        if not (
            isinstance(y.kind, Tensor)
            and y.dtype.kind == "u"
            and y.dtype.itemsize in (1, 2)
            and (y.shape == hw or y.shape == (*hw, 1))
        ):
            raise SchemaError(
                f"{where}, field 'y': {y.kind.describe()} records; {self.name} needs uint8 "
                f"masks {(*hw, 1)} of class indices, the tiles' size (label-maker's "
                "segmentation y)"
            )
        self._tiles[split.name] = tile
        mask = Image(y.dtype, 1, tile.height, tile.width, "png")
        fields = [
            FieldSpec(IMAGE, tile),
            FieldSpec(FORMAT, String()),
            FieldSpec(HEIGHT, Tensor(_I64, ())),
            FieldSpec(WIDTH, Tensor(_I64, ())),
            FieldSpec(MASK, mask),
            FieldSpec(MASK_FORMAT, String()),
            *_passthrough(split, {"x", "y"}),
        ]
        saved = {
            "x": split.fields["x"].kind.to_json(),
            "y": y.kind.to_json(),
            "keys": {"x": split.fields["x"].key, "y": y.key},
        }
        return SplitSpec(split.name, split.count, {f.name: f for f in fields}), saved

    def encode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        from ..images.png import encode_fast  # the tfrecord extra, as the destination needs

        tile = self._tiles[split]
        x, y = np.asarray(batch["x"]), np.asarray(batch["y"])
        n = len(x)
        masks = y.reshape(n, int(tile.height or 0), int(tile.width or 0))
        out: Batch = {
            IMAGE: x,
            FORMAT: _strings(n, self.options.image_codec),
            HEIGHT: _scalars(n, int(tile.height or 0)),
            WIDTH: _scalars(n, int(tile.width or 0)),
            MASK: VarColumn.from_bytes(encode_fast(np.ascontiguousarray(m)) for m in masks),
            MASK_FORMAT: _strings(n, "png"),
        }
        out.update({k: v for k, v in batch.items() if k not in ("x", "y")})
        return out

    def decode_split(
        self, split: SplitSpec, saved: Mapping[str, Any], where: str, reader: Reader
    ) -> SplitSpec:
        image, mask = split.fields[IMAGE], split.fields[MASK]
        shape = image.shape if image.dense else getattr(image.kind, "shape", None)
        if not shape:
            raise SchemaError(
                f"{where}, field {IMAGE!r}: {image.kind.describe()}; label-maker's x needs "
                "images of one known size"
            )
        x_kind = _saved_kind(saved, "x", Tensor(image.dtype, shape), where)
        y_kind = _saved_kind(
            saved,
            "y",
            Tensor(getattr(mask.kind, "dtype", np.dtype(np.uint8)), (*shape[:2], 1)),
            where,
        )
        assert isinstance(x_kind, Tensor) and isinstance(y_kind, Tensor)
        self._decode[split.name] = (x_kind, y_kind)
        keys = saved.get("keys") or {}
        fields = [
            FieldSpec("x", x_kind, keys.get("x")),
            FieldSpec("y", y_kind, keys.get("y")),
            *_passthrough(split, {IMAGE, FORMAT, HEIGHT, WIDTH, MASK, MASK_FORMAT}),
        ]
        return SplitSpec(split.name, split.count, {f.name: f for f in fields})

    def decode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        x_kind, y_kind = self._decode[split]
        out: Batch = {
            "x": _pixels(batch[IMAGE], x_kind, x_kind.shape, where, IMAGE, start).astype(
                x_kind.dtype
            ),
            "y": _pixels(batch[MASK], y_kind, y_kind.shape, where, MASK, start).astype(
                y_kind.dtype
            ),
        }
        used = {IMAGE, FORMAT, HEIGHT, WIDTH, MASK, MASK_FORMAT}
        out.update({k: v for k, v in batch.items() if k not in used})
        return out


# -------------------------------------------------------------- classification
