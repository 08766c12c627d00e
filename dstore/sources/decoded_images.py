"""A reader wrapper: encoded image fields (PNG, JPEG, ...) read as pixels (``convert
--decode-images``, ``verify`` of a decoded copy)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from ..abc import Reader, WrappingReader
from ..images.decoding import decode_column_images, decoded_kind, encoded_image_fields
from ..model import Image, VarColumn
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import Batch, Schema, SplitSpec


class DecodedImages(WrappingReader):
    """``inner`` with the encoded Image fields in ``fields`` (default: all) read as pixels."""

    def __init__(self, inner: Reader, fields: Mapping[str, set[str]] | None = None) -> None:
        super().__init__(inner)
        self.notes = inner.notes
        self.fields = dict(encoded_image_fields(inner.schema) if fields is None else fields)
        splits = {}
        for split in inner.schema.splits.values():
            names = self.fields.get(split.name, set())
            specs = {
                n: replace(f, kind=decoded_kind(f.kind))
                if n in names and isinstance(f.kind, Image)
                else f
                for n, f in split.fields.items()
            }
            splits[split.name] = SplitSpec(split.name, split.count, specs)
        # the stored checksums are of the encoded bytes: the inner reader checks them
        attrs = {k: v for k, v in inner.schema.attrs.items() if k != CHECKSUM_ATTR}
        self.schema = Schema(splits, attrs)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        decode = self.fields.get(spec.name, set())
        inner = self.inner.schema.splits[spec.name]
        pos = start
        for batch in self.inner.iter_batches(
            spec.name, fields=names, start=start, stop=stop, batch_rows=rows
        ):
            n = len(next(iter(batch.values()))) if batch else 0
            out: Batch = {}
            for name, col in batch.items():
                kind = inner.fields[name].kind
                if name in decode and isinstance(col, VarColumn) and isinstance(kind, Image):
                    where = f"{self.path}: split {spec.name!r}, field {name!r}"
                    out[name] = decode_column_images(col, kind, where, pos)
                else:
                    out[name] = col
            pos += n
            yield out


def decoded_for(reader: Reader, keeps_encoded_images: bool, keep_encoded: bool) -> Reader:
    """``reader`` as a conversion writes it: encoded images decoded to pixels for a
    destination format that does not keep them (``keeps_encoded_images`` False), unless
    the user asked to ``keep_encoded``; else ``reader`` itself."""
    if keep_encoded or keeps_encoded_images or not encoded_image_fields(reader.schema):
        return reader
    return DecodedImages(reader)
