"""ArrayRecord: shards of serialized ``tf.train.Example``, TFDS's and Grain's random-access format.

Layout written (``data.arrayrecord/``)::

    data-train.array_record-00000-of-00002   shards of about ``shard_mb``, TFDS's names
    ...
    dstore.json                              schema, field encodings, shards (sha256)

Each record is the Example dstore's TFRecord writer produces for it (the same
field encodings, :mod:`dstore.codecs._example_fields`), so a record moves
between the two formats unchanged. Shards are written with the ``array-record``
package (no TensorFlow) and read back by anything that reads ArrayRecord:
``ArrayRecordDataSource``, Grain, TFDS. Only ``array_record`` is imported, and
only when a shard is opened.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ... import fs, links
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...names import escape
from ...schema import Schema
from ...sharding import is_manifest_of, plan_by_size
from .._example_fields import choose_encoding
from ..base import Codec, Reader, Shard, ShardWriter, Writer, read_at
from .options import ArrayRecordOptions
from .reader import ArrayRecordDatasetReader
from .writer import FORMAT_ID, ArrayRecordShardWriter

__all__ = ["ArrayRecordCodec", "ArrayRecordOptions"]

_PLAN_SAMPLE = 64  # records encoded to size the shards
#: the first 64 bytes of every Riegeli file (ArrayRecord's container): its file signature
_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f00000000000000004000000000000000"
    "91bac23c9287e1a90000000000000000e19f13c0e9b1c372"
    "73000000000000000000000000000000"
)


def _tfds_names(plan: list[Shard]) -> list[Shard]:
    """The planned shards under TFDS's names: ``data-train.array_record-00000-of-00002``."""
    totals: dict[str, int] = {}
    for s in plan:
        totals[s.split] = totals.get(s.split, 0) + 1
    return [
        dataclasses.replace(
            s,
            file=f"data-{escape(s.split)}.array_record-{s.index:05d}-of-{totals[s.split]:05d}",
        )
        for s in plan
    ]


class ArrayRecordCodec(Codec):
    """ArrayRecord shards of ``tf.train.Example`` (TFRecord's encoding), random access."""

    name = "arrayrecord"
    extensions = (".arrayrecord", ".array_record")
    reads_folders = True
    sharded = True
    fork_safe = False  # array_record's thread pool: DataLoader workers need 'spawn'
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through byte for byte
    keeps_empty_rows = False  # a ragged record is one feature of its values
    bfloat16_as = "float32"  # float_list is float32: bfloat16 values widen exactly
    Options = ArrayRecordOptions

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder with dstore's arrayrecord manifest, or a file with Riegeli's signature."""
        if fs.isdir(path):
            return is_manifest_of(path, FORMAT_ID)
        return read_at(path, 0, len(_SIGNATURE)) == _SIGNATURE

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        return ArrayRecordDatasetReader(os.fspath(path), self.options.workers)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            "arrayrecord is written shard by shard: use plan_shards and shard_writer"
        )

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb``, sized from the encoded first records."""
        self.check_schema(schema)
        writer = ArrayRecordShardWriter(schema, self.options)
        plan = plan_by_size(
            schema,
            sample,
            lambda split, first: [len(r) for r in writer.examples.encode(split, first)],
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=_PLAN_SAMPLE,
            suffix="",
        )
        return _tfds_names(plan)

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return ArrayRecordShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        images = None if self.options.images is None else set(self.options.images)
        for split in schema.splits.values():
            for spec in split.fields.values():
                choose_encoding(spec, spec.name, images, self.options.lossy(), self.name)
