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
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...model import Bytes, Image, String, VarColumn, names, record
from ...model.schema import Batch, Schema, SplitSpec, slice_batch
from ...parallel import default_workers, ordered_map
from ...sharding import ShardedDirectoryWriter
from .._png import encoder_id, png_encoder
from ..base import Shard
from . import tario
from .encodings import FieldEncoding, choose_encoding, encode_value
from .options import WebDatasetOptions

__all__ = ["FORMAT_ID", "WebDatasetShardWriter", "key_width", "shard_file"]

FORMAT_ID = "dstore-webdataset"
_CHUNK = 16  # records per task handed to a worker thread


def key_width(count: int) -> int:
    """Digits of a split's sample keys: six (WebDataset's habit) or as many as it needs."""
    return max(6, len(str(max(count - 1, 0))))


def shard_file(split: str, index: int) -> str:
    """``<split>-000000.tar``: WebDataset's brace patterns (``{000000..000009}``) want a
    fixed-width number and no total."""
    return f"{names.escape(split)}-{index:06d}.tar"


def _value(spec: Any, col: Any, i: int) -> Any:
    """Record ``i`` as the encoder takes it: bytes for byte-string kinds (no UTF-8 round trip)."""
    kind = spec.kind
    if isinstance(col, VarColumn) and (
        isinstance(kind, (String, Bytes)) or (isinstance(kind, Image) and kind.encoding != "raw")
    ):
        return col.flat_values[int(col.offsets[i]) : int(col.offsets[i + 1])].tobytes()
    return record(kind, col, i)


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
        libs = {}
        for enc in {
            e.encoding: e for encs in self.encodings.values() for e in encs.values()
        }.values():
            if enc.encoding == "png":
                libs["png"] = encoder_id(str(self.options.png_level))
            elif (lossy := enc.lossy) is not None:
                libs[enc.encoding] = lossy.library_id()
        return dict(sorted(libs.items()))

    def encode_chunk(self, spec: SplitSpec, start: int, chunk: Batch, png: Any) -> list[bytes]:
        """One sample's members per record of ``chunk`` (records ``start:`` of the split)."""
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
                            _value(spec.fields[name], chunk[name], i),
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
        workers = self.options.workers or default_workers()
        png = png_encoder(str(self.options.png_level))
        pos = shard.start

        def cut() -> Iterator[tuple[int, Batch]]:
            nonlocal pos
            for batch in batches:
                n = len(next(iter(batch.values())))
                for i in range(0, n, _CHUNK):
                    yield pos + i, slice_batch(batch, i, min(i + _CHUNK, n))
                pos += n

        with ThreadPoolExecutor(workers, thread_name_prefix="dstore-wds") as pool:
            held: list[bytes] | None = None
            for group in ordered_map(
                lambda c: self.encode_chunk(spec, c[0], c[1], png), cut(), pool, 4 * workers
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
