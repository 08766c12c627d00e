"""ArrayRecord: shards of serialized ``tf.train.Example``, TFDS's and Grain's random-access format.

Layout written (``data.arrayrecord/``)::

    data-train.array_record-00000-of-00002   shards of about ``shard_mb``, TFDS's names
    ...
    dstore.json                              schema, field encodings, shards (sha256)

Each record is the Example dstore's TFRecord writer produces for it (the same
field encodings, :mod:`dstore.codecs.example.fields`), so a record moves
between the two formats unchanged. Shards are written with the ``array-record``
package (no TensorFlow) and read back by anything that reads ArrayRecord:
``ArrayRecordDataSource``, Grain, TFDS. Only ``array_record`` is imported, and
only when a shard is opened.
"""

from __future__ import annotations

import os
from typing import Any

from ... import fs, links
from ...abc import Reader, Shard, ShardWriter
from ...fs import read_at
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import Batch, Schema
from ...sharding import ShardedCodec, tfds_name
from ..example.fields import check_fields
from .options import ArrayRecordOptions
from .reader import ArrayRecordDatasetReader
from .writer import FORMAT_ID, ArrayRecordShardWriter

__all__ = ["ArrayRecordCodec", "ArrayRecordOptions"]

#: the first 64 bytes of every Riegeli file (ArrayRecord's container): its file signature
_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f00000000000000004000000000000000"
    "91bac23c9287e1a90000000000000000e19f13c0e9b1c372"
    "73000000000000000000000000000000"
)


class ArrayRecordCodec(ShardedCodec):
    """ArrayRecord shards of ``tf.train.Example`` (TFRecord's encoding), random access."""

    name = "arrayrecord"
    media_type = "https://github.com/google/array_record"
    extensions = (".arrayrecord", ".array_record")
    fork_safe = False  # array_record's thread pool: DataLoader workers need 'spawn'...
    #: ...once this process has imported the library (its reader is imported on first read)
    fork_unsafe_module = "array_record.python.array_record_module"
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through byte for byte
    keeps_empty_rows = False  # a ragged record is one feature of its values
    bfloat16_as = "float32"  # float_list is float32: bfloat16 values widen exactly
    Options = ArrayRecordOptions

    format_id = FORMAT_ID

    @classmethod
    def owns_file(cls, path: str) -> bool:
        """A file with Riegeli's signature."""
        return read_at(path, 0, len(_SIGNATURE)) == _SIGNATURE

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        return ArrayRecordDatasetReader(os.fspath(path), self.options.workers, self.follow_links)

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [len(r) for r in writer.examples.encode(split, records)]

    def shard_file(self, split: str, index: int, total: int) -> str:
        # TFDS's names (data-train.array_record-00000-of-00002), which TFDS and Grain read
        return tfds_name("data", "array_record", split, index, total)

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return ArrayRecordShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        check_fields(schema, self.options, self.name)
