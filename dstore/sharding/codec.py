"""What every format written as a folder of shards does the same way as a :class:`Codec`.

A sharded format is written shard by shard (never through one ``Writer``),
and its shards are planned alike: about ``shard_mb`` each, sized from the
first records as the format encodes them. :class:`ShardedCodec` holds that;
a format names its shard suffix, how big its encoded records are
(:meth:`~ShardedCodec.record_sizes`) and, if its shards are not called
``<split>-00000-of-00004<suffix>``, their names (:meth:`~ShardedCodec.name_shards`).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from typing import Any, ClassVar

from .. import fs
from ..abc import Codec, Shard, ShardWriter, Writer
from ..model import names
from ..model.schema import Batch, Schema
from .manifest import foreign_files, manifest_files
from .writer import plan_by_size, planning_records, shard_name

__all__ = ["ShardedCodec", "tfds_name"]


class ShardedCodec(Codec):
    """A :class:`Codec` whose output is a sharded directory (:mod:`dstore.sharding`);
    its options carry ``shard_mb``."""

    sharded = True
    reads_folders = True
    #: the shard files' suffix in the size plan's names
    shard_suffix: ClassVar[str] = ""
    #: records encoded to size the shards
    plan_sample: ClassVar[int] = 64
    #: the manifest's ``format`` value (``dstore-webdataset``)
    format_id: ClassVar[str]

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder whose dstore manifest of this format loads, or a file of the format
        (:meth:`owns_file`)."""
        if fs.isdir(path):
            return manifest_files(path, cls.format_id) is not None
        return cls.owns_file(path)

    @classmethod
    def owns_file(cls, path: str) -> bool:
        """Whether the file at ``path`` is one of this format's (its signature)."""
        return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files in a dataset folder its manifest does not list."""
        return foreign_files(path, cls.format_id) if fs.isdir(path) else []

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            f"{self.name} is written shard by shard: use plan_shards and shard_writer"
        )

    @abstractmethod
    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        """The encoded size of each of ``records`` (the first of ``split``), by ``writer``
        (this codec's :meth:`shard_writer` of an empty plan)."""

    def name_shards(self, plan: list[Shard]) -> list[Shard]:
        """The planned shards under the format's own names (:meth:`shard_file`)."""
        totals: dict[str, int] = {}
        for s in plan:
            totals[s.split] = totals.get(s.split, 0) + 1
        return [
            dataclasses.replace(s, file=self.shard_file(s.split, s.index, totals[s.split]))
            for s in plan
        ]

    def shard_file(self, split: str, index: int, total: int) -> str:
        """The name of shard ``index`` of ``total`` of ``split``:
        ``<split>-00000-of-00004<suffix>`` unless the format names its own."""
        return shard_name(split, index, total, self.shard_suffix)

    def planning_records(self, schema: Schema) -> int:
        return planning_records(schema, self.options.shard_mb * 2**20, self.plan_sample)

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb``, sized from the encoded first records."""
        self.check_schema(schema)
        writer: ShardWriter = self.shard_writer(schema, [])
        plan = plan_by_size(
            schema,
            sample,
            lambda split, first: self.record_sizes(writer, split, first),
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=self.plan_sample,
            suffix=self.shard_suffix,
        )
        return self.name_shards(plan)


def tfds_name(prefix: str, kind: str, split: str, index: int, total: int) -> str:
    """A shard under TFDS's name, ``<prefix>-<split>.<kind>-00000-of-00002`` (e.g.
    ``data-train.tfrecord-00000-of-00002``), which TFDS and Grain read."""
    return f"{prefix}-{names.escape(split)}.{kind}-{index:05d}-of-{total:05d}"
