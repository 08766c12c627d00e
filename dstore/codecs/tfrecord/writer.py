"""Writing TFRecord shards: each record a framed ``tf.train.Example``, the manifest's head."""

from __future__ import annotations

import zlib
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from ...abc import Shard
from ...model.schema import Batch, Schema
from ...sharding import ShardedDirectoryWriter
from ..example.encoder import ExampleEncoder
from . import io as rio
from .options import TFRecordOptions


class TFRecordShardWriter(ShardedDirectoryWriter):
    """Frames the Examples of :class:`ExampleEncoder` as TFRecords; the shard files and
    the manifest are the sharded-directory container's (:mod:`dstore.sharding`).

    Holds only options and encodings (no open handles or threads), so it
    pickles to Dask workers; every process writes the same bytes for a shard.
    """

    codec_name = "tfrecord"
    record_index = True  # each record is one frame: shards get DALI-style .idx sidecars

    def __init__(
        self, schema: Schema, options: TFRecordOptions, plan: Sequence[Shard] = ()
    ) -> None:
        self.options = options
        self.examples = ExampleEncoder(
            schema,
            self.codec_name,
            renames=options.renames(),
            images=options.image_set(),
            lossy=options.lossy(),
            png_level=str(options.png_level),
            workers=options.workers,
        )
        self.encodings = self.examples.encodings
        self.workers = options.workers
        compression = None if options.compression == "none" else options.compression
        super().__init__(schema, plan, compression)

    def current_libraries(self) -> dict[str, str]:
        """The compressors this process would use, with their versions."""
        libs = self.examples.libraries()
        if self.options.compression == "gzip":
            libs["gzip"] = f"zlib {zlib.ZLIB_RUNTIME_VERSION}"
        return libs

    def gil_bound(self, split: str) -> bool:
        return self.examples.fpng_fields(split) > 0

    def encode_chunk(self, split: str, chunk: Batch, png: Any = None) -> list[bytes]:
        """Framed TFRecords for the records of ``chunk``."""
        return self.examples.encode(split, chunk, png, rio.frame)

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        """Framed records, in chunks encoded on all cores, in order."""
        yield from self.examples.encode_batches(
            shard.split, batches, rio.frame, shard.stop - shard.start
        )

    def manifest_head(self) -> dict[str, Any]:
        skip = {"workers"}
        if self.options.image_codec == "png":  # PNG outputs' manifests stay as they were
            skip |= {"image_codec", "quality"}
        return self.standard_head(
            "dstore-tfrecord", self.options, self.examples.fields_json(), skip
        )


# ------------------------------------------------------------------------- reader
