"""Writing WebDataset tar shards: records -> samples of members, in order.

Each record becomes the members ``<key>.<field>.<ext>`` (:mod:`.encodings`),
``key`` its index in the split zero-padded to one width per split (at least
six digits), so name order is record order; a sample's members are sorted by
name. Images are encoded on all cores (the encoders release the GIL); every
member's bytes depend only on the data and the options (:mod:`.tario`). The
shard files, ``.part`` commits and the manifest are the sharded-directory
container's (:mod:`dstore.sharding`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

from ...model import names, raw_record
from ...model.schema import Batch, Schema, SplitSpec
from ...sharding import ShardedDirectoryWriter, encode_chunks
from .._pixels import image_libraries
from .._png import png_encoder
from ..base import Shard
from . import tario
from .encodings import FieldEncoding, choose_encoding, encode_value
from .options import WebDatasetOptions

__all__ = ["FORMAT_ID", "WebDatasetShardWriter", "key_width", "shard_file"]

FORMAT_ID = "dstore-webdataset"


def key_width(count: int) -> int:
    """Digits of a split's sample keys: six (WebDataset's habit) or as many as it needs."""
    return max(6, len(str(max(count - 1, 0))))


def shard_file(split: str, index: int) -> str:
    """``<split>-000000.tar``: WebDataset's brace patterns (``{000000..000009}``) want a
    fixed-width number and no total."""
    return f"{names.escape(split)}-{index:06d}.tar"


class WebDatasetShardWriter(ShardedDirectoryWriter):
    """Encodes records to tar samples; picklable (options and encodings only) for Dask."""

    codec_name = "webdataset"

    def __init__(
        self, schema: Schema, options: WebDatasetOptions, plan: Sequence[Shard] = ()
    ) -> None:
        self.options = options
        self.encodings: dict[str, dict[str, FieldEncoding]] = {
            split.name: {n: choose_encoding(s, options.lossy()) for n, s in split.fields.items()}
            for split in schema.splits.values()
        }
        super().__init__(schema, plan, None)

    def current_libraries(self) -> dict[str, str]:
        every = [e for encs in self.encodings.values() for e in encs.values()]
        return image_libraries((e.lossy or e.encoding for e in every), str(self.options.png_level))

    def encode_chunk(
        self, spec: SplitSpec, start: int, chunk: Batch, png: Any = None
    ) -> list[bytes]:
        """One sample's members per record of ``chunk`` (records ``start:`` of the split)."""
        png = png or png_encoder(str(self.options.png_level))
        encs = self.encodings[spec.name]
        width = key_width(spec.count)
        order = sorted(chunk, key=lambda name: encs[name].suffix)
        n = len(next(iter(chunk.values()))) if chunk else 0
        out = []
        for i in range(n):
            key = f"{start + i:0{width}d}"
            out.append(
                b"".join(
                    tario.member(
                        f"{key}.{encs[name].suffix}",
                        encode_value(
                            encs[name],
                            spec.fields[name],
                            raw_record(spec.fields[name].kind, chunk[name], i),
                            png,
                        ),
                    )
                    for name in order
                )
            )
        return out

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        """Groups of samples in record order; the last one carries the end-of-archive blocks."""
        spec = self.schema.splits[shard.split]
        png = png_encoder(str(self.options.png_level))
        held: list[bytes] | None = None
        for group in encode_chunks(
            batches,
            lambda at, chunk: self.encode_chunk(spec, shard.start + at, chunk, png),
            self.options.workers,
            "dstore-wds",
        ):
            if held is not None:
                yield held
            held = group
        if held is not None:
            held[-1] += tario.END
            yield held

    def manifest_head(self) -> dict[str, Any]:
        fields = {
            split: {name: e.to_json() for name, e in encs.items()}
            for split, encs in self.encodings.items()
        }
        return self.standard_head(FORMAT_ID, self.options, fields)
