"""The sharded-directory container, both halves, shared by every format written as shards.

A sharded output is a folder of shard files ``<split>-00000-of-00004<suffix>``
and a manifest ``dstore.json`` written last. This package owns everything
about it that does not depend on how records become bytes:

- :mod:`~dstore.sharding.writer`: shard names, the size plan, atomic shard
  files, hashing, the manifest (:class:`ShardedDirectoryWriter`), records
  encoded on all cores in order (:func:`encode_chunks`);
- :mod:`~dstore.sharding.codec`: the codec half (:class:`ShardedCodec`: the
  size plan, no single writer; TFDS's shard names);
- :mod:`~dstore.sharding.reader`: the manifest, the shard list, reading
  across shard boundaries, record ranges, completeness of ``-of-N`` sets,
  integrity checks and ``owns`` (:class:`ShardedDirectoryReader`);
- :mod:`~dstore.sharding.files`: which files a folder, glob or brace pattern
  names, none linked in from outside; the manifest's files distinct and present;
- :mod:`~dstore.sharding.checked`: shards against their manifest entry (size,
  sha256 when read whole) and record indexes against the shards' frames;
- :mod:`~dstore.sharding.cache`, :mod:`~dstore.sharding.index`: a bounded local
  cache of remote shards, and record indexes of TFRecord shards (``.dstore-index/``).

The container names no format and runs no conversion: the conversion itself,
shard by shard, local or on Dask, resumable, with its journal, is the engine's
(:mod:`dstore.engine.run`), one floor up (``import-linter`` keeps it so).

A format asks only "the records of one shard" and "decode these records".
"""

from __future__ import annotations

from .codec import ShardedCodec, tfds_name
from .manifest import (
    MANIFEST,
    check_shards,
    foreign_files,
    is_manifest_of,
    load_manifest,
    manifest_base,
    manifest_files,
)
from .reader import (
    ShardedDirectoryReader,
    ShardFile,
    brace_files,
    check_complete,
    group_ranges,
)
from .writer import (
    ShardedDirectoryWriter,
    cut_groups,
    encode_chunks,
    open_for_write,
    open_path_for_write,
    plan_by_size,
    planning_records,
    shard_name,
)

__all__ = [
    "MANIFEST",
    "ShardFile",
    "ShardedCodec",
    "ShardedDirectoryReader",
    "ShardedDirectoryWriter",
    "brace_files",
    "check_complete",
    "check_shards",
    "cut_groups",
    "encode_chunks",
    "foreign_files",
    "group_ranges",
    "is_manifest_of",
    "load_manifest",
    "manifest_base",
    "manifest_files",
    "open_for_write",
    "open_path_for_write",
    "plan_by_size",
    "planning_records",
    "shard_name",
    "tfds_name",
]
