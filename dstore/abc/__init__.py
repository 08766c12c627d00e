"""The interfaces every storage format implements, below everything that uses them.

- :class:`Codec` (:mod:`.codec`): a format's name, extensions, capability flags
  and options; it opens readers and writers, and plans shards when its output is
  a folder of independent files.
- :class:`Reader` and :class:`WrappingReader` (:mod:`.reader`): the schema and the
  records of each split, as batches, by record range or by record position
  (``read_records``), and the units a read fetches whole (``record_units``).
- :class:`Writer`, :class:`Shard` and :class:`ShardWriter` (:mod:`.writer`): the two
  ways a format is written.

This package imports only the model and the base modules (errors, options),
never a format, the container or the engine: numcodecs' ``abc.py`` and zarr's
``abc/`` sit on the same floor for the same reason (``import-linter`` keeps it so,
see ``pyproject.toml``).
"""

from .codec import Codec
from .reader import (
    RANGE_BYTES,
    Reader,
    WrappingReader,
    checked_indexes,
    even_ranges,
    runs_of,
    take_records,
)
from .writer import Shard, ShardWriter, Writer

__all__ = [
    "RANGE_BYTES",
    "Codec",
    "Reader",
    "Shard",
    "ShardWriter",
    "WrappingReader",
    "Writer",
    "checked_indexes",
    "even_ranges",
    "runs_of",
    "take_records",
]
