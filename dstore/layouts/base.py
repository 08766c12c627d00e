"""The interface a training layout implements, and the reader that applies one.

A layout maps the arrays one tool writes (label-maker's ``x_<split>`` tiles
and ``y_<split>`` labels) to the feature names and encodings a training
library expects (TensorFlow's Object Detection API, DeepLab, ...), and back.
It works on schemas and batches only, so it knows no storage format: the
destination codec stores the fields it produces (a TFRecord feature per
field), and reading those files with the same layout gives the arrays back.

:class:`LayoutReader` wraps any :class:`~dstore.abc.Reader` and
presents the mapped dataset: ``dstore.convert(..., layout=NAME)`` streams
through it like through any other reader. The direction is decided per
dataset from its fields: a dataset that already holds the layout's fields is
mapped back, anything else is mapped forward.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..abc import Reader
from ..errors import SchemaError
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import Batch, Schema, SplitSpec
from ..options import parse_options

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["LAYOUT_ATTR", "Layout", "LayoutReader"]

#: Schema attribute where a layout keeps what mapping back needs (padding, dtypes, names).
LAYOUT_ATTR = "dstore.layout"


class Layout(ABC):
    """Maps a split's fields to a training layout's fields and back.

    Subclasses set ``name``, ``help`` and ``Options`` (a dataclass whose
    fields, declared with :func:`dstore.options.option`, are the ``-o KEY=VALUE``
    options the layout takes; the conversion
    removes them from the destination codec's options, except the keys in
    ``shared_options``, which both read -- ``image_codec`` says what the codec
    encodes the images as, and the layout writes it in ``image/format``).

    ``where`` arguments name the source for error messages. A layout keeps
    per-split state (``encode_split`` is called once per split before any of its
    batches) and counts what it changed in :meth:`notes`.
    """

    name: ClassVar[str]
    help: ClassVar[str] = ""
    Options: ClassVar[type[DataclassInstance]] = dataclasses.make_dataclass(
        "Options", [], frozen=True
    )
    shared_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        # read by type like the codecs' options; a mistake is one OptionError line
        # Any, as Codec.options: each layout reads the fields of its own dataclass
        self.options: Any = parse_options(self.Options, options, f"layout {self.name}")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        if not dataclasses.is_dataclass(cls.Options):
            return ()
        return tuple(f.name for f in dataclasses.fields(cls.Options))

    @abstractmethod
    def holds_layout(self, split: SplitSpec) -> bool:
        """True when ``split`` already has this layout's fields (so it is mapped back)."""

    @abstractmethod
    def encode_split(self, split: SplitSpec, where: str) -> tuple[SplitSpec, dict[str, Any]]:
        """The split in the training layout, and what :meth:`decode_split` will need to
        restore it exactly (stored in the schema's attributes). Refuses fields that do
        not have the layout's shapes, with one line."""

    @abstractmethod
    def encode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        """Records ``start:start+n`` of ``split`` mapped to the training layout."""

    @abstractmethod
    def decode_split(
        self, split: SplitSpec, saved: Mapping[str, Any], where: str, reader: Reader
    ) -> SplitSpec:
        """The source arrays' split from the layout's; ``saved`` is what
        :meth:`encode_split` stored (empty for files written by other tools, whose
        records ``reader`` can then be scanned for what the arrays need: a box count)."""

    @abstractmethod
    def decode_batch(self, split: str, batch: Batch, start: int, where: str) -> Batch:
        """Records of ``split`` mapped back from the training layout."""

    def notes(self) -> list[str]:
        """What the mapping changed (boxes clipped to their tile), one line each."""
        return []


class LayoutReader(Reader):
    """A reader presenting ``inner``'s dataset through ``layout`` (either direction)."""

    def __init__(self, inner: Reader, layout: Layout) -> None:
        self.inner = inner
        self.layout = layout
        self.path = inner.path
        self.random_access = inner.random_access
        self.sequential_reason = inner.sequential_reason
        src = inner.schema
        held = {name: layout.holds_layout(s) for name, s in src.splits.items()}
        if len(set(held.values())) > 1:
            have = [n for n, h in held.items() if h]
            lack = [n for n, h in held.items() if not h]
            raise SchemaError(
                f"{self.path}: split(s) {', '.join(map(repr, have))} hold {layout.name}'s fields "
                f"but {', '.join(map(repr, lack))} do not: a layout maps a whole dataset one way"
            )
        self.decoding = bool(held) and all(held.values())
        attrs = {k: v for k, v in src.attrs.items() if k not in (CHECKSUM_ATTR, LAYOUT_ATTR)}
        splits: dict[str, SplitSpec] = {}
        if self.decoding:
            saved = src.attrs.get(LAYOUT_ATTR) or {}
            if saved and saved.get("name") != layout.name:
                raise SchemaError(
                    f"{self.path}: was written with layout {saved.get('name')!r}, "
                    f"not {layout.name!r}"
                )
            for name, spec in src.splits.items():
                where = f"{self.path}: split {name!r}"
                splits[name] = layout.decode_split(
                    spec, (saved.get("splits") or {}).get(name, {}), where, inner
                )
        else:
            per_split = {}
            for name, spec in src.splits.items():
                splits[name], per_split[name] = layout.encode_split(
                    spec, f"{self.path}: split {name!r}"
                )
            attrs[LAYOUT_ATTR] = {"name": layout.name, "splits": per_split}
        self.schema = Schema(splits, attrs)

    @property
    def notes(self) -> Sequence[str]:  # type: ignore[override]
        return [*self.inner.notes, *self.layout.notes()]

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        where = f"{self.path}: split {spec.name!r}"
        step = self.layout.decode_batch if self.decoding else self.layout.encode_batch
        pos = start
        # every source field: each output field may need several of them (boxes need the tile)
        for batch in self.inner.iter_batches(spec.name, start=start, stop=stop, batch_rows=rows):
            n = len(next(iter(batch.values())))
            out = step(spec.name, batch, pos, where)
            yield {name: out[name] for name in names}
            pos += n

    def close(self) -> None:
        self.inner.close()
