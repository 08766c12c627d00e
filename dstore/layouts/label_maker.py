"""label-maker's arrays in the layouts TensorFlow's model libraries read.

label-maker's ``package`` step writes ``x_<split>`` uint8 tiles ``(N, H, W, 3)``
and ``y_<split>``: a one-hot class vector (classification), ``(N, max_boxes, 5)``
rows ``[xmin, ymin, xmax, ymax, class]`` in pixels, zero-padded to the largest
box count (object detection; classes count from 1, 0 is the background), or
``(N, H, W, 1)`` masks (segmentation).

* ``tf-object-detection``: the feature keys of the Object Detection API's
  ``TfExampleDecoder`` -- ``image/encoded``, ``image/format``, ``image/height``,
  ``image/width``, ``image/filename``, ``image/source_id``,
  ``image/object/bbox/{xmin,ymin,xmax,ymax}`` (normalised to [0, 1] by the
  tile's width and height), ``image/object/class/label`` and, from
  ``-o class_names=a,b``, ``image/object/class/text``.
* ``tf-segmentation``: DeepLab's ``build_data`` keys -- the image, its format
  and size, and ``image/segmentation/class/encoded`` (a PNG mask) with its format.
* ``tf-classification``: ``image`` and ``label``, the names label-maker's own
  TFRecord writer (``label_maker/tfrecords_cl.py``) gives them.

Mapping back restores the arrays exactly: boxes are padded again to the
count stored with the data, pixels come back from the normalised floats by
rounding (``float32(p / W) * W`` is within 1e-4 of ``p`` for any tile under a
million pixels wide), and the original keys, dtypes and shapes are kept in
the schema's attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ..abc.base import Reader
from ..errors import CodecIOError, OptionError, SchemaError
from ..model import (
    Bytes,
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    Tensor,
    VarColumn,
    kind_from_json,
)
from ..model.schema import Batch, FieldSpec, SplitSpec
from ..options import option
from .base import Layout

__all__ = ["Classification", "ObjectDetection", "Segmentation"]

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


@dataclass(frozen=True)
class ODOptions:
    RENAMED: ClassVar[dict[str, str]] = {"image_format": "image_codec"}

    # a string, split here: an empty name must be an error, not a shift of the ones after it
    class_names: str = option(
        "",
        "names of classes 1, 2, ... in label-maker's order, e.g. building,road "
        "(writes image/object/class/text)",
    )
    filenames: str = option("", "string field giving image/filename and image/source_id")
    image_codec: str = option("png", "what the codec encodes images as (image/format)")

    def names(self) -> list[str]:
        return [n.strip() for n in self.class_names.split(",")] if self.class_names else []

    def validate(self) -> None:
        if any(not name for name in self.names()):
            raise OptionError(
                f"layout tf-object-detection: class_names has an empty name: {self.class_names!r}"
            )


@dataclass
class _ODSplit:
    tile: Image
    y: FieldSpec
    clipped: np.ndarray  # boxes clipped per record (re-reads of a record count once)


class ObjectDetection(Layout):
    """label-maker object detection <-> TensorFlow Object Detection API ``tf.train.Example``."""

    name = "tf-object-detection"
    help = "TF Object Detection API keys (image/encoded, image/object/bbox/*, class/label|text)"
    Options = ODOptions
    shared_options = (IMAGE_CODEC,)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.class_names = self.options.names()
        self._splits: dict[str, _ODSplit] = {}
        self._decode: dict[str, dict[str, Any]] = {}

    def holds_layout(self, split: SplitSpec) -> bool:
        return IMAGE in split.fields and BOX_FIELDS[0] in split.fields

    # forward ------------------------------------------------------------------

    def encode_split(self, split: SplitSpec, where: str) -> tuple[SplitSpec, dict[str, Any]]:
        tile = _tile_kind(split, self.name, where)
        y = _field(split, "y", self.name, where)
        if not (isinstance(y.kind, Tensor) and y.dtype.kind in "iu" and y.shape[1:] == (5,)):
            raise SchemaError(
                f"{where}, field 'y': {y.kind.describe()} records; {self.name} needs "
                "(max_boxes, 5) integer rows [xmin, ymin, xmax, ymax, class] in pixels "
                "(label-maker's object-detection y)"
            )
        used = {"x", "y"}
        names = self.options.filenames
        if names:
            spec = _field(split, names, self.name, where)
            if not isinstance(spec.kind, String):
                raise SchemaError(
                    f"{where}, field {names!r} (-o filenames): {spec.kind.describe()}, "
                    "expected strings"
                )
            used.add(names)
        self._splits[split.name] = _ODSplit(tile, y, np.zeros(split.count, np.int64))
        fields = [
            FieldSpec(IMAGE, tile),
            FieldSpec(FORMAT, String()),
            FieldSpec(HEIGHT, Tensor(_I64, ())),
            FieldSpec(WIDTH, Tensor(_I64, ())),
            FieldSpec(FILENAME, String()),
            FieldSpec(SOURCE_ID, String()),
            *(FieldSpec(f, Ragged(_F32, ())) for f in BOX_FIELDS),
            FieldSpec(LABEL, Ragged(_I64, ())),
        ]
        if self.class_names:
            fields.append(FieldSpec(TEXT, StringList()))
        fields += _passthrough(split, used)
        saved = {
            "x": split.fields["x"].kind.to_json(),
            "y": y.kind.to_json(),
            "keys": {"x": split.fields["x"].key, "y": y.key},
            "filenames": names or None,
            "class_names": self.class_names,
        }
        return SplitSpec(split.name, split.count, {f.name: f for f in fields}), saved

    def encode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        state = self._splits[split]
        x, y = np.asarray(batch["x"]), np.asarray(batch["y"])
        n = len(x)
        h, w = int(state.tile.height or 0), int(state.tile.width or 0)
        rows = y.reshape(-1, 5).astype(np.int64)
        keep = rows.any(axis=1)  # label-maker pads with all-zero rows
        counts = keep.reshape(n, -1).sum(axis=1) if n else np.zeros(0, np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        boxes = rows[keep]
        record_of = np.repeat(np.arange(n), counts)
        labels = boxes[:, 4]
        if self.class_names:
            bad = (labels < 1) | (labels > len(self.class_names))
            if bad.any():
                i = int(np.argmax(bad))
                raise SchemaError(
                    f"{where}, field 'y', record {start + int(record_of[i])}: class index "
                    f"{int(labels[i])} has no name (class_names names {len(self.class_names)}: "
                    f"{', '.join(f'{k + 1}={c}' for k, c in enumerate(self.class_names))})"
                )
        scale = np.array([w, h, w, h], np.float64)
        norm = boxes[:, :4] / scale
        outside = ((norm < 0) | (norm > 1)).any(axis=1)
        state.clipped[start : start + n] = np.bincount(record_of[outside], minlength=n)
        norm = np.clip(norm, 0.0, 1.0).astype(_F32)
        if names := self.options.filenames:
            fnames = batch[names]
            assert isinstance(fnames, VarColumn)
        else:
            fnames = _index_strings(start, n)
        out: Batch = {
            IMAGE: x,
            FORMAT: _strings(n, self.options.image_codec),
            HEIGHT: _scalars(n, h),
            WIDTH: _scalars(n, w),
            FILENAME: fnames,
            SOURCE_ID: fnames,
            LABEL: VarColumn(labels.astype(_I64), offsets),
        }
        for k, f in enumerate(BOX_FIELDS):
            out[f] = VarColumn(np.ascontiguousarray(norm[:, k]), offsets)
        if self.class_names:
            # each box's class name: a list of strings per record (a bytes_list in TFRecord)
            class_names = self.class_names
            out[TEXT] = VarColumn(
                VarColumn.from_strings(class_names[int(c) - 1] for c in labels), offsets.copy()
            )
        for name, col in batch.items():
            if name not in ("x", "y", self.options.filenames):
                out[name] = col
        return out

    def notes(self) -> list[str]:
        clipped = sum(int(s.clipped.sum()) for s in self._splits.values())
        if not clipped:
            return []
        records = sum(int(np.count_nonzero(s.clipped)) for s in self._splits.values())
        note = (
            f"{clipped} box(es) in {records} record(s) reached outside their tile and were "
            "clipped to it (image/object/bbox/* hold the clipped boxes)"
        )
        return [note]

    # back ---------------------------------------------------------------------

    def decode_split(
        self, split: SplitSpec, saved: Mapping[str, Any], where: str, reader: Reader
    ) -> SplitSpec:
        image = split.fields[IMAGE]
        kind = image.kind
        shape = image.shape if image.dense else (kind.shape if isinstance(kind, Image) else None)
        x_kind = _saved_kind(
            saved,
            "x",
            Tensor(image.dtype, shape) if shape else Tensor(np.dtype(np.uint8), ()),
            where,
        )
        if not isinstance(x_kind, Tensor) or len(x_kind.shape) < 2:
            raise SchemaError(
                f"{where}, field {IMAGE!r}: {kind.describe()}; label-maker's x needs images of "
                "one known size"
            )
        for f in (*BOX_FIELDS, LABEL):
            if f not in split.fields or not isinstance(split.fields[f].kind, Ragged):
                raise SchemaError(f"{where}: field {f!r} missing or not a list of numbers")
        if saved:
            y_kind = kind_from_json(saved["y"], where)
        else:  # another tool's records: pad to the largest box count found
            most = 0
            for b in reader.iter_batches(split.name, fields=[BOX_FIELDS[0]]):
                col = b[BOX_FIELDS[0]]
                assert isinstance(col, VarColumn)
                most = max(most, int(col.lengths.max(initial=0)))
            y_kind = Tensor(np.dtype(np.uint16), (most, 5))
        assert isinstance(y_kind, Tensor)
        keys = saved.get("keys") or {}
        used = {IMAGE, FORMAT, HEIGHT, WIDTH, *BOX_FIELDS, LABEL, TEXT}
        fields = [FieldSpec("x", x_kind, keys.get("x")), FieldSpec("y", y_kind, keys.get("y"))]
        names = saved.get("filenames")
        if saved:  # ours: the file names are the record index, or a field restored here
            used |= {FILENAME, SOURCE_ID}
            if names:
                fields.append(FieldSpec(names, String()))
        self._decode[split.name] = {
            "x": x_kind,
            "y": y_kind,
            "filenames": names,
            "ours": bool(saved),
        }
        fields += _passthrough(split, used)
        return SplitSpec(split.name, split.count, {f.name: f for f in fields})

    def decode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        state = self._decode[split]
        x_kind, y_kind = state["x"], state["y"]
        x = _pixels(batch[IMAGE], x_kind, x_kind.shape, where, IMAGE, start).astype(x_kind.dtype)
        n = len(x)
        h, w = x_kind.shape[0], x_kind.shape[1]
        cols: list[VarColumn] = []
        for f in (*BOX_FIELDS, LABEL):
            col = batch[f]
            assert isinstance(col, VarColumn)  # the layout matched these as lists per record
            cols.append(col)
        lengths = cols[-1].lengths
        for f, c in zip(BOX_FIELDS, cols, strict=False):
            if not np.array_equal(c.lengths, lengths):
                i = int(np.argmax(c.lengths != lengths))
                raise SchemaError(
                    f"{where}, record {start + i}: {f!r} has {int(c.lengths[i])} values, "
                    f"{LABEL!r} {int(lengths[i])}"
                )
        most = y_kind.shape[0]
        if n and int(lengths.max(initial=0)) > most:
            i = int(np.argmax(lengths > most))
            raise SchemaError(
                f"{where}, record {start + i}: {int(lengths[i])} boxes, y holds {most} per record"
            )
        scale = np.array([w, h, w, h], np.float64)
        rows = np.empty((int(lengths.sum()), 5), np.float64)
        for k, c in enumerate(cols[:4]):
            # pixels back from float32(p / W): exact after rounding, far from the .5 boundary
            rows[:, k] = np.rint(c.flat_values.astype(np.float64) * scale[k])
        rows[:, 4] = cols[4].flat_values
        info = np.iinfo(y_kind.dtype)
        if len(rows) and (rows.min() < info.min or rows.max() > info.max):
            i = int(np.argmax(((rows < info.min) | (rows > info.max)).any(axis=1)))
            rec = int(np.searchsorted(np.cumsum(lengths), i, side="right"))
            raise SchemaError(
                f"{where}, record {start + rec}: box {rows[i].tolist()} does not fit y's "
                f"{y_kind.dtype}"
            )
        y = np.zeros((n, most, 5), y_kind.dtype)
        slot = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        y[np.repeat(np.arange(n), lengths), slot] = rows.astype(y_kind.dtype)
        out: Batch = {"x": x, "y": y}
        if state["filenames"]:
            out[state["filenames"]] = batch[FILENAME]
        used = {IMAGE, FORMAT, HEIGHT, WIDTH, *BOX_FIELDS, LABEL, TEXT}
        for name, col in batch.items():
            if name not in used and (name not in (FILENAME, SOURCE_ID) or not state["ours"]):
                out[name] = col
        return out


# ---------------------------------------------------------------- segmentation


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
