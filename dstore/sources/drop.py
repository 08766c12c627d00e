"""A reader wrapper: a dataset without some fields (``--drop`` for formats whose codec
has no such option of its own)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..abc import Reader, WrappingReader
from ..errors import DstoreError, SchemaError
from ..model.schema import Batch, Schema, SplitSpec
from ..registry import get_codec_class, infer_codec

if TYPE_CHECKING:
    pass


class DropFields(WrappingReader):
    """``inner`` without some fields: ``drop`` for a format whose codec has no such
    option of its own (npz's drops zip members, before they are checked). A name
    leaves that field out of every split, ``split/field`` out of one split."""

    def __init__(self, inner: Reader, keys: Sequence[str]) -> None:
        super().__init__(inner)
        matched: set[str] = set()
        splits = {}
        for split in inner.schema.splits.values():
            kept = {}
            for name, spec in split.fields.items():
                hit = next((k for k in (name, f"{split.name}/{name}") if k in keys), None)
                if hit is None:
                    kept[name] = spec
                else:
                    matched.add(hit)
            splits[split.name] = SplitSpec(split.name, split.count, kept)
        missing = [k for k in keys if k not in matched]
        if missing:
            fields = sorted({n for s in inner.schema.splits.values() for n in s.fields})
            raise SchemaError(
                f"{inner.path}: drop={missing[0]!r}: no such field "
                f"(fields: {', '.join(map(repr, fields))})"
            )
        self.schema = Schema(splits, inner.schema.attrs, inner.schema.checksums)
        self.notes = [*inner.notes, *(f"{inner.path}: field {k!r} left out (drop)" for k in keys)]

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        # the outer iter_batches checks the stored sha256 of the fields read
        return self.inner.iter_batches(
            spec.name, fields=names, start=start, stop=stop, batch_rows=rows, verify=False
        )

    def read_records(self, split: str, indexes: Any, fields: Sequence[str] | None = None) -> Batch:
        names = list(fields) if fields is not None else list(self.split(split).fields)
        return self.inner.read_records(split, indexes, names)

    def describe(self) -> list[str]:
        return self.inner.describe()


def generic_drop(
    path: str, format: str | None, options: Mapping[str, Any]
) -> tuple[Mapping[str, Any], list[str]]:
    """``options`` without ``drop``, and its keys, when the reading codec has no ``drop``
    option of its own (then :class:`DropFields` does it); else ``options`` as they are."""
    if not options.get("drop"):
        return options, []
    try:
        cls = get_codec_class(format or infer_codec(path))
    except DstoreError:
        return options, []  # the codec's own error says what is wrong
    own = dataclasses.is_dataclass(cls.Options) and any(
        f.name == "drop" for f in dataclasses.fields(cls.Options)
    )
    if own:
        return options, []
    keys = [k.strip() for k in str(options["drop"]).split(",") if k.strip()]
    return {k: v for k, v in options.items() if k != "drop"}, keys
