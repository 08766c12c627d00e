"""``tf-object-detection``: label-maker's ``(N, max_boxes, 5)`` pixel boxes as the Object
Detection API's ``TfExampleDecoder`` features (normalised ``image/object/bbox/*``,
class labels and, from ``-o class_names=``, their text), and back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..abc import Reader
from ..errors import OptionError, SchemaError
from ..model import Image, Ragged, String, StringList, Tensor, VarColumn, kind_from_json
from ..model.schema import Batch, FieldSpec, SplitSpec
from ..options import option
from .base import Layout
from .tiles import (
    _F32,
    _I64,
    BOX_FIELDS,
    FILENAME,
    FORMAT,
    HEIGHT,
    IMAGE,
    IMAGE_CODEC,
    LABEL,
    SOURCE_ID,
    TEXT,
    WIDTH,
    _field,
    _index_strings,
    _passthrough,
    _pixels,
    _saved_kind,
    _scalars,
    _strings,
    _tile_kind,
)

__all__ = ["ODOptions", "ObjectDetection"]


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
