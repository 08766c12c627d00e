"""TFRecord directories of ``tf.train.Example`` with PNG images -- no TensorFlow needed.

Layout written (``data.tfrecords/``)::

    train-00000-of-00002.tfrecord   shards of about ``shard_mb`` each, per split
    ...
    dstore.json                     schema, per-field encoding, shards (records, bytes, sha256)

Field encoding: image-like fields (uint8/uint16, ``(H, W)`` or ``(H, W, 1|3|4)``)
become PNG bytes; integers and bools ``int64_list``; float32 ``float_list``;
anything else (float16, float64, complex) raw little-endian bytes, its dtype
and shape kept in the manifest so every round trip restores them. PNG
encoding and decoding run on all cores (imagecodecs releases the GIL).

Reading also takes TFRecords written by others -- a single file, a glob, a
folder of shards, TFDS names like ``mnist-train.tfrecord-00000-of-00001`` --
inferring the schema from the first Example of each split.
"""

from __future__ import annotations

import os
from typing import Any

from ... import fs, links
from ...abc import Codec, Reader, Shard, ShardWriter, Writer
from ...errors import CodecIOError
from ...fs import is_regular_file
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import Schema
from ...sharding import foreign_files, manifest_files, plan_by_size, planning_records, shard_name
from ..example.fields import choose_encoding
from . import io as rio
from .options import TFRecordOptions
from .reader import TFRecordReader
from .writer import TFRecordShardWriter

__all__ = ["TFRecordCodec", "TFRecordOptions", "TFRecordReader", "TFRecordShardWriter"]

_PLAN_SAMPLE = 64  # records encoded to size the shards


# ------------------------------------------------------------------------ options


class TFRecordCodec(Codec):
    """TFRecord shards of ``tf.train.Example``, images as PNG (no TensorFlow needed)."""

    name = "tfrecord"
    media_type = "https://www.tensorflow.org/tutorials/load_data/tfrecord"
    reads_folders = True
    sharded = True
    tensorflow_native = True  # tf.data.TFRecordDataset reads the shards itself
    frame_indexes = True  # dstore index: <file>.idx for TFRecord files others wrote
    extensions = (".tfrecords", ".tfrecord")
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through byte for byte
    keeps_empty_rows = False  # a ragged record is one feature of its values
    bfloat16_as = "float32"  # float_list is float32: bfloat16 values widen exactly
    supports_urls = True
    random_access_when = "plain, with its .idx"  # record offsets: 'dstore index'
    Options = TFRecordOptions

    @classmethod
    def path_options(cls, path: str) -> dict[str, Any]:
        """``x.tfrecords.gz``: gzip-compressed shards, as TensorFlow users name such files."""
        return {"compression": "gzip"} if path.rstrip("/").lower().endswith(".gz") else {}

    @classmethod
    def frame_files(cls, path: str, follow_links: bool = False) -> list[str]:
        return TFRecordReader.find_files_at(path, follow_links)

    @classmethod
    def frame_lengths(cls, path: str) -> list[int]:
        with rio.RecordFile(path) as rf:
            if rf.compressed:
                raise CodecIOError(
                    f"{path}: a {str(rf.compression).upper()} TFRecord file cannot be indexed (it "
                    "cannot be entered mid-way); convert it to a plain one to read it at random"
                )
            return rf.frame_lengths()

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder with dstore's manifest, or one TFRecord file whose first
        record's framing (length and its CRC) checks out, plain or GZIP."""
        if fs.isdir(path):
            return manifest_files(path, "dstore-tfrecord") is not None
        if not is_regular_file(path):
            return False
        try:
            records = rio.RecordFile(path)
            try:  # the header only: a 2**-32 chance for other bytes, and no large read
                return records.header_ok()
            finally:
                records.close()
        except (CodecIOError, OSError):
            return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files in a dataset folder its manifest does not list."""
        return foreign_files(path, "dstore-tfrecord") if fs.isdir(path) else []

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's
            links.check_store(path, self.follow_links, "folder")
        return TFRecordReader(path, self.options.workers, self.follow_links)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            "tfrecord is written shard by shard: use plan_shards and shard_writer"
        )

    def planning_records(self, schema: Schema) -> int:
        return planning_records(schema, self.options.shard_mb * 2**20, _PLAN_SAMPLE)

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb`` each, sized from the encoded first records.

        Encoding a sample (not guessing from raw sizes) makes PNG shards land
        near the target; the sample is the split's first records, so the
        plan is the same on every run over the same data and options."""
        self.check_schema(schema)
        writer = TFRecordShardWriter(schema, self.options)
        return plan_by_size(
            schema,
            sample,
            lambda split, first: [len(r) for r in writer.encode_chunk(split, first)],
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=_PLAN_SAMPLE,
            suffix=".tfrecord",
        )

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return TFRecordShardWriter(schema, self.options, plan)

    def shard_file(self, split: str, index: int, total: int) -> str:
        return shard_name(split, index, total, ".tfrecord")

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        images = self.options.image_set()
        for split in schema.splits.values():
            for spec in split.fields.values():
                choose_encoding(spec, spec.name, images, self.options.lossy())
