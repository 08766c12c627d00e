"""Writing ArrayRecord shards: TFRecord's Examples, stored by the ``array-record`` library.

The records are the serialized ``tf.train.Example``s of
:class:`~dstore.codecs.example.fields.ExampleEncoder` (the same bytes a
TFRecord shard frames); ``ArrayRecordWriter`` stores them with every option
that shapes the bytes spelled out (:meth:`ArrayRecordOptions.writer_options`),
so two writes of the same data are byte-identical. The library writes a path,
not a file object: the container's ``writes_paths`` hook gives it the
``.part`` name and hashes the file once closed (local folders only).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from importlib.metadata import version
from typing import Any

from ...abc import Shard
from ...model.schema import Batch, Schema
from ...sharding import ShardedDirectoryWriter
from ...sharding.native import write_in_child
from ..example.encoder import ExampleEncoder
from .options import ArrayRecordOptions

__all__ = ["FORMAT_ID", "ArrayRecordShardWriter"]

#: the manifest's ``format``
FORMAT_ID = "dstore-arrayrecord"
#: the child's writer of one shard (``sys.argv``: path, options)
_SETUP = """
from array_record.python.array_record_module import ArrayRecordWriter
writer = ArrayRecordWriter(sys.argv[1], sys.argv[2])
if not writer.ok():
    sys.exit("array_record cannot create the shard")
"""


class ArrayRecordShardWriter(ShardedDirectoryWriter):
    """Encodes records to Examples and hands them to ``ArrayRecordWriter``; the folder,
    shard commits and manifest are the sharded-directory container's. Holds no
    handles, so it pickles to Dask workers."""

    codec_name = "arrayrecord"
    writes_paths = True

    def __init__(
        self, schema: Schema, options: ArrayRecordOptions, plan: Sequence[Shard] = ()
    ) -> None:
        self.options = options
        self.examples = ExampleEncoder.from_options(schema, self.codec_name, options)
        self.workers = options.workers
        super().__init__(schema, plan, None)

    def gil_bound(self, split: str) -> bool:
        return self.examples.fpng_fields(split) > 0

    def current_libraries(self) -> dict[str, str]:
        """The image encoders and array_record (its chunk format and compressors), with versions."""
        return {**self.examples.libraries(), "array_record": version("array-record")}

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        yield from self.examples.encode_batches(shard.split, batches)

    def write_shard_file(self, path: str, groups: Iterator[list[bytes]]) -> None:
        """In a child process: ``ArrayRecordWriter`` starts array_record's C++ thread pool,
        which a process forked later (a DataLoader worker) inherits broken."""
        options = [self.options.writer_options()]
        write_in_child(path, "array_record", _SETUP, options, groups)

    def manifest_head(self) -> dict[str, Any]:
        return self.standard_head(
            FORMAT_ID,
            self.options,
            self.examples.fields_json(),
            writer_options=self.options.writer_options(),
        )
