"""Writing WebDataset tar shards: record *i* of a split is the sample of members
``<key>.<field>.<ext>``, ``key`` being *i* zero-padded, members sorted by name."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

from ...model import column_len, raw_record
from ...model.schema import Batch, Schema, SplitSpec
from ...sharding import ShardedDirectoryWriter, encode_chunks
from .._png import png_encoder
from .._record_bytes import encode_record
from .._stored_fields import table_json, table_libraries
from ..base import Shard
from . import tario
from .encodings import FieldEncoding, choose_encoding

__all__ = ["FORMAT_ID", "WebDatasetShardWriter"]

FORMAT_ID = "dstore-webdataset"


class WebDatasetShardWriter(ShardedDirectoryWriter):
    """Encodes records to tar samples; picklable (options and encodings only) for Dask."""

    codec_name = "webdataset"

    def __init__(self, schema: Schema, options: Any, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        self.encodings: dict[str, dict[str, FieldEncoding]] = {
            split.name: {n: choose_encoding(s, options.lossy()) for n, s in split.fields.items()}
            for split in schema.splits.values()
        }
        super().__init__(schema, plan, None)

    def current_libraries(self) -> dict[str, str]:
        return table_libraries(self.encodings, str(self.options.png_level))

    def encode_chunk(
        self, spec: SplitSpec, start: int, chunk: Batch, png: Any = None
    ) -> list[bytes]:
        """One sample's members per record of ``chunk`` (records ``start:`` of the split)."""
        png = png or png_encoder(str(self.options.png_level))
        encs = self.encodings[spec.name]
        width = max(6, len(str(max(spec.count - 1, 0))))  # six digits, as WebDataset's

        def member(i: int, name: str) -> bytes:
            f, e = spec.fields[name], encs[name]
            value = raw_record(f.kind, chunk[name], i)
            return tario.member(
                f"{start + i:0{width}d}.{e.at}", encode_record(e.encoding, f, value, e.lossy, png)
            )

        order = sorted(chunk, key=lambda name: encs[name].at)
        n = column_len(next(iter(chunk.values()))) if chunk else 0
        return [b"".join(member(i, name) for name in order) for i in range(n)]

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        spec = self.schema.splits[shard.split]
        png = png_encoder(str(self.options.png_level))
        yield from encode_chunks(
            batches,
            lambda at, chunk: self.encode_chunk(spec, shard.start + at, chunk, png),
            self.options.workers,
            "dstore-wds",
        )

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        wrote = False
        for records in super().write_records(shard, batches, out):
            wrote = True
            yield records
        if wrote:  # a shard of no records stays empty
            out.write(tario.END)

    def manifest_head(self) -> dict[str, Any]:
        return self.standard_head(FORMAT_ID, self.options, table_json(self.encodings))
