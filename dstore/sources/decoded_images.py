"""A reader wrapper: encoded image fields (PNG, JPEG, ...) read as pixels (``convert
--decode-images``, ``verify`` of a decoded copy).

An encoded field whose size its schema does not say (images of a Hugging Face Parquet,
JPEGs of a TFRecord or a WebDataset dstore did not write) is looked at first: when the
header of every image of the split says one shape (and the dtype and channels the field
allows), it decodes to a fixed-shape image field, ``(N, H, W, C)`` in an npz, whatever
the format it came from; else to images of varying size. The look reads the field's
bytes once more and decodes nothing; a header that lies is caught when that image is
decoded (its pixels are checked against the field)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

import numpy as np

from ..abc import Reader, WrappingReader
from ..images.decoding import decode_column_images, decoded_kind, encoded_image_fields, header_shape
from ..model import Image, VarColumn
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import Batch, Schema, SplitSpec

#: bytes of each image read for its header (a JPEG's frame may follow its EXIF data)
_HEAD = 1 << 20


class DecodedImages(WrappingReader):
    """``inner`` with the encoded Image fields in ``fields`` (default: all) read as pixels."""

    def __init__(self, inner: Reader, fields: Mapping[str, set[str]] | None = None) -> None:
        super().__init__(inner)
        self.notes = inner.notes
        self.fields = dict(encoded_image_fields(inner.schema) if fields is None else fields)
        splits = {}
        #: the encoded kind each field is decoded against (with the size found, if one)
        self.kinds: dict[tuple[str, str], Image] = {}
        for split in inner.schema.splits.values():
            names = self.fields.get(split.name, set())
            specs = dict(split.fields)
            for n in names:
                kind = split.fields[n].kind
                if isinstance(kind, Image):
                    self.kinds[split.name, n] = kind = self._sized(split, n, kind)
                    specs[n] = replace(split.fields[n], kind=decoded_kind(kind))
            splits[split.name] = SplitSpec(split.name, split.count, specs)
        # the stored checksums are of the encoded bytes: the inner reader checks them
        attrs = {k: v for k, v in inner.schema.attrs.items() if k != CHECKSUM_ATTR}
        self.schema = Schema(splits, attrs)

    def _sized(self, split: SplitSpec, name: str, kind: Image) -> Image:
        """``kind`` with what every image of the split declares in its header: its size
        when they have one, its channels when they share them (and the field's dtype)."""
        if kind.fixed_size or not split.count:
            return kind
        seen: set[tuple[np.dtype, tuple[int, ...]]] = set()
        for batch in self.inner.iter_batches(split.name, fields=[name]):
            col = batch[name]
            assert isinstance(col, VarColumn)  # an encoded image field's column always is
            for i in range(len(col)):
                found = header_shape(col.row(i)[:_HEAD].tobytes())
                if found is None:
                    return kind  # a header that does not say
                seen.add(found)
        kinds = {(dtype, 0 if len(shape) == 2 else shape[2]) for dtype, shape in seen}
        if len(kinds) != 1:
            return kind
        ((dtype, channels),) = kinds
        if dtype != kind.dtype or kind.channels not in (None, channels):
            return kind
        sizes = {shape[:2] for _, shape in seen}
        height, width = next(iter(sizes)) if len(sizes) == 1 else (None, None)
        return Image(dtype, channels, height, width, kind.encoding)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        decode = self.fields.get(spec.name, set())
        pos = start
        for batch in self.inner.iter_batches(
            spec.name, fields=names, start=start, stop=stop, batch_rows=rows
        ):
            n = len(next(iter(batch.values()))) if batch else 0
            out: Batch = {}
            for name, col in batch.items():
                kind = self.kinds.get((spec.name, name))
                if name in decode and isinstance(col, VarColumn) and kind is not None:
                    where = f"{self.path}: split {spec.name!r}, field {name!r}"
                    pixels = decode_column_images(col, kind, where, pos)
                    # one size: each image was checked to have it, so they stack
                    shape = kind.shape
                    out[name] = pixels if shape is None else pixels.flat_values.reshape(n, *shape)
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
