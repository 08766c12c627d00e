"""Writing ArrayRecord shards: TFRecord's Examples, stored by the ``array-record`` library.

The records are the serialized ``tf.train.Example``s of
:class:`~dstore.codecs._example_fields.ExampleEncoder` (the same bytes a
TFRecord shard frames); ``ArrayRecordWriter`` stores them with every option
that shapes the bytes spelled out (:meth:`ArrayRecordOptions.writer_options`),
so two writes of the same data are byte-identical. The library writes a path,
not a file object: the container's ``writes_paths`` hook gives it the
``.part`` name and hashes the file once closed (local folders only).
"""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Generator, Iterator, Sequence
from importlib.metadata import version
from typing import Any

from ...errors import CodecIOError
from ...model.schema import Batch, Schema
from ...sharding import ShardedDirectoryWriter
from .._example_fields import ExampleEncoder
from ..base import Shard
from .options import ArrayRecordOptions

__all__ = ["FORMAT_ID", "ArrayRecordShardWriter"]

#: the manifest's ``format``
FORMAT_ID = "dstore-arrayrecord"
#: a record's length before it on the child's standard input
_LEN = struct.Struct("<Q")
#: the child that writes one shard: length-prefixed records on stdin, then EOF
_CHILD = """
import struct, sys
from array_record.python.array_record_module import ArrayRecordWriter
writer = ArrayRecordWriter(sys.argv[1], sys.argv[2])
if not writer.ok():
    sys.exit("array_record cannot create the shard")
read = sys.stdin.buffer.read
while len(head := read(8)) == 8:
    data = read(struct.unpack("<Q", head)[0])
    writer.write(data)
writer.close()
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
        super().__init__(schema, plan, None)

    def current_libraries(self) -> dict[str, str]:
        """The image encoders and array_record (its chunk format and compressors), with versions."""
        return {**self.examples.libraries(), "array_record": version("array-record")}

    def encode_shard(
        self, shard: Shard, batches: Iterator[Batch]
    ) -> Generator[list[bytes], None, None]:
        yield from self.examples.encode_batches(shard.split, batches)

    def write_shard_file(self, path: str, groups: Iterator[list[bytes]]) -> None:
        """The records handed to ``ArrayRecordWriter`` in a child process.

        Why a child: the writer starts array_record's C++ thread pool, and a process
        that forks after that (a DataLoader worker reading the shards just written)
        inherits it broken and dies with SIGSEGV in its first ``ArrayRecordReader``.
        The child is a plain interpreter (not multiprocessing), so a Dask worker's
        daemon process may start it too."""
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, path, self.options.writer_options()],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdin is not None
        try:
            for group in groups:
                child.stdin.write(b"".join(p for rec in group for p in (_LEN.pack(len(rec)), rec)))
        except BrokenPipeError:
            pass  # the child stopped: its exit status and message say why, below
        except BaseException:
            child.kill()  # a failed or interrupted write: the container removes the .part
            child.communicate()
            raise
        try:
            _, raw = child.communicate()  # end of input, its messages, every pipe closed
        except BrokenPipeError:  # it stopped early: its status says why
            raw = child.stderr.read() if child.stderr is not None else b""
            child.wait()
        err = (raw or b"").decode(errors="replace")
        if child.returncode != 0:
            last = (
                err.strip().splitlines()[-1] if err.strip() else f"exit status {child.returncode}"
            )
            raise CodecIOError(f"{path}: array_record's writer failed: {last}")

    def manifest_head(self) -> dict[str, Any]:
        return self.standard_head(
            FORMAT_ID,
            self.options,
            self.examples.fields_json(),
            writer_options=self.options.writer_options(),
        )
