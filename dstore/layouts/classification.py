"""``tf-classification``: tiles and one-hot labels as the ``image`` and ``label``
features label-maker's own TFRecord writer gives them, and back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..abc import Reader
from ..errors import SchemaError
from ..model import Bytes, Kind, Tensor, VarColumn, kind_from_json
from ..model.schema import Batch, FieldSpec, SplitSpec
from ..options import option
from .base import Layout
from .tiles import _field, _passthrough, _pixels, _saved_kind, _tile_kind

__all__ = ["ClassOptions", "Classification"]


@dataclass(frozen=True)
class ClassOptions:
    image_encoding: Literal["png", "tensor"] = option(
        "png",
        "the image as PNG, or as the tf.io.serialize_tensor bytes label-maker's own writer "
        "stores (tf.io.parse_tensor reads them; uncompressed)",
    )


class Classification(Layout):
    """label-maker classification <-> ``image`` / ``label``, as label-maker's TFRecord
    writer names them. label-maker stores ``tf.io.serialize_tensor`` bytes in
    ``image``; this layout stores the image as the codec encodes it (PNG by
    default: a pipeline reads it with ``tf.io.decode_png``), or with
    ``-o image_encoding=tensor`` the very bytes label-maker writes, so that its
    pipelines (``tf.io.parse_tensor``) read them unchanged. ``label`` is the
    one-hot vector as an int64 list, as there."""

    name = "tf-classification"
    help = "label-maker's own TFRecord names: image (PNG or its tensor bytes), label (int64)"
    Options = ClassOptions

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._decode: dict[str, tuple[Tensor, Kind]] = {}
        self._image_kinds: dict[str, Kind] = {}

    def holds_layout(self, split: SplitSpec) -> bool:
        return "image" in split.fields and "label" in split.fields and "x" not in split.fields

    def encode_split(self, split: SplitSpec, where: str) -> tuple[SplitSpec, dict[str, Any]]:
        tile = _tile_kind(split, self.name, where)
        y = _field(split, "y", self.name, where)
        if not (isinstance(y.kind, Tensor) and y.dtype.kind in "biu" and len(y.shape) == 1):
            raise SchemaError(
                f"{where}, field 'y': {y.kind.describe()} records; {self.name} needs one "
                "(classes,) integer vector per tile (label-maker's one-hot classification y)"
            )
        image = FieldSpec("image", Bytes()) if self.options.image_encoding == "tensor" else None
        fields = [
            image or FieldSpec("image", tile),
            FieldSpec("label", y.kind),
            *_passthrough(split, {"x", "y"}),
        ]
        saved = {
            "x": split.fields["x"].kind.to_json(),
            "keys": {"x": split.fields["x"].key, "y": y.key},
        }
        return SplitSpec(split.name, split.count, {f.name: f for f in fields}), saved

    def encode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        image = batch["x"]
        if self.options.image_encoding == "tensor":
            from ..codecs.example.tensorproto import serialize_tensor

            image = VarColumn.from_bytes(serialize_tensor(t) for t in np.asarray(image))
        out: Batch = {"image": image, "label": batch["y"]}
        out.update({k: v for k, v in batch.items() if k not in ("x", "y")})
        return out

    def decode_split(
        self, split: SplitSpec, saved: Mapping[str, Any], where: str, reader: Reader
    ) -> SplitSpec:
        image, label = split.fields["image"], split.fields["label"]
        shape = image.shape if image.dense else getattr(image.kind, "shape", None)
        if saved.get("x") and isinstance(image.kind, Bytes):  # ours, as serialized tensors
            shape = kind_from_json(saved["x"], where).shape  # type: ignore[attr-defined]
        if not shape or not isinstance(label.kind, Tensor):
            raise SchemaError(
                f"{where}: 'image' {image.kind.describe()}, 'label' {label.kind.describe()}; "
                "label-maker's arrays need images of one size and fixed-length labels"
            )
        x_kind = _saved_kind(saved, "x", Tensor(image.dtype, shape), where)
        assert isinstance(x_kind, Tensor)
        self._decode[split.name] = (x_kind, label.kind)
        self._image_kinds[split.name] = image.kind
        keys = saved.get("keys") or {}
        fields = [
            FieldSpec("x", x_kind, keys.get("x")),
            FieldSpec("y", label.kind, keys.get("y")),
            *_passthrough(split, {"image", "label"}),
        ]
        return SplitSpec(split.name, split.count, {f.name: f for f in fields})

    def decode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        x_kind, _ = self._decode[split]
        col = batch["image"]
        if isinstance(col, VarColumn) and isinstance(self._image_kinds[split], Bytes):
            from ..codecs.example.tensorproto import parse_tensor_proto

            arrays = []
            for i, blob in enumerate(col.to_bytes_list()):
                t = parse_tensor_proto(blob, f"{where}, field 'image', record {start + i}")
                if not isinstance(t, np.ndarray) or t.shape != x_kind.shape:
                    raise SchemaError(
                        f"{where}, field 'image', record {start + i}: not a tensor of shape "
                        f"{x_kind.shape}"
                    )
                arrays.append(t)
            batch = {
                **batch,
                "image": np.stack(arrays) if arrays else np.empty((0, *x_kind.shape), x_kind.dtype),
            }
        out: Batch = {
            "x": _pixels(batch["image"], x_kind, x_kind.shape, where, "image", start).astype(
                x_kind.dtype
            ),
            "y": batch["label"],
        }
        out.update({k: v for k, v in batch.items() if k not in ("image", "label")})
        return out
