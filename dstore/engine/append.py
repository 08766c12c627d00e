"""The next version of a sharded dataset: an append's new shards, or a compaction's.

The records are planned and written exactly as a conversion's (:mod:`.run`:
threads, encoder processes or Dask, the resume journal), with three differences:

- the shards are numbered after the latest version's (``train-00002-of-00003``, its
  names never taken by a file any kept version lists), and a format that numbers
  records in its files counts them on from the dataset's last
  (``ShardWriter.record_offsets``);
- they are written in the version's pending folder (``.dstore-versions/pending-*``),
  where no glob of the dataset finds them;
- the commit is the container's (:func:`dstore.sharding.versions.commit_version`):
  the manifest of the dataset after this version -- the kept shards, then the new --
  created only if no other writer took that version number, then settled into the
  root. Files a hook wrote beside the shards (a card) are the version's metadata and
  move into the root with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any

from ..abc import Codec, Reader, Shard, ShardWriter
from ..errors import AppendError, ResumableInterrupt
from ..fs import is_url
from ..model import concat_columns
from ..model.schema import Batch, Schema
from ..sharding.manifest import MANIFEST
from ..sharding.versions import (
    PendingVersion,
    commit_version,
    kept_names,
    remove_stale,
    remove_tree,
)
from ..sharding.writer import ShardedDirectoryWriter
from .cast import cast_batches
from .job import ConvertJob
from .journal import JOURNAL, read_journal
from .run import ShardRun, write_sharded

__all__ = ["NextVersion", "next_indexes", "write_next_version"]


def next_indexes(manifest: Mapping[str, Any]) -> dict[str, int]:
    """Per split, the number the next shard takes: after every shard a kept version
    lists (a conversion's shards are numbered from 0)."""
    meta = manifest.get("version") or {}
    counted = {split: len(info["shards"]) for split, info in manifest["splits"].items()}
    return {**counted, **{str(k): int(v) for k, v in meta.get("next_index", {}).items()}}


def _renumber(
    codec: Codec, plan: list[Shard], first: Mapping[str, int], taken: set[str]
) -> list[Shard]:
    """``plan`` numbered on from ``first`` (per split) under the format's names, moved
    further on while a name is ``taken`` (a file a kept version lists): a name is one
    file wherever it lies, so an older version never reads a newer shard."""
    counts: dict[str, int] = {}
    for s in plan:
        counts[s.split] = counts.get(s.split, 0) + 1
    starts = {}
    for split, n in counts.items():
        start = first.get(split, 0)
        while any(codec.shard_file(split, start + i, start + n) in taken for i in range(n)):
            start += 1
        starts[split] = start
    return [
        dataclasses.replace(
            s,
            index=starts[s.split] + s.index,
            file=codec.shard_file(
                s.split, starts[s.split] + s.index, starts[s.split] + counts[s.split]
            ),
        )
        for s in plan
    ]


@dataclasses.dataclass
class NextVersion:
    """The next version of a sharded dataset as a target of :func:`.run.write_sharded`."""

    pending: PendingVersion
    codec: Codec
    #: the dataset after this version (counts, the versions record)
    schema: Schema
    #: the shards of the base version it keeps, per split, in order
    kept: dict[str, list[dict[str, Any]]]
    #: the new shards, as planned
    plan: list[Shard]
    superseded: list[str]
    resume: bool
    #: per split, the records before the first new one (0 for a compaction)
    offsets: dict[str, int]

    def prepare(self, writer: ShardWriter) -> None:
        writer.record_offsets = self.offsets

    @contextlib.contextmanager
    def output(self, header: dict[str, Any]) -> Iterator[str]:
        if self.resume and not is_url(self.pending.root):
            self._adopt(header)
        remove_stale(
            self.pending.root, keep=[self.pending.token], locked=not is_url(self.pending.root)
        )
        try:
            yield self.pending.folder
        except ResumableInterrupt:
            raise  # the finished shards stay, with their journal, for resume=True
        except BaseException:
            remove_tree(self.pending.folder)
            raise

    def _adopt(self, header: dict[str, Any]) -> None:
        """Continue an interrupted append of the same records (its journal's header)."""
        from ..sharding.versions import PENDING

        folder = os.path.dirname(self.pending.folder)
        for name in sorted(os.listdir(folder), reverse=True):
            path = os.path.join(folder, name)
            mine = name == self.pending.token
            if name.startswith(PENDING) and not mine and read_journal(path)[0] == header:
                os.rmdir(self.pending.folder)
                self.pending.folder, self.pending.token = path, name
                return

    def commit(
        self, writer: ShardWriter, root: str, entries: list[dict[str, Any]], run: Any
    ) -> None:
        old = [Shard(split, 0, 0, 0, e["file"]) for split, es in self.kept.items() for e in es]
        head_writer = self.codec.shard_writer(self.schema, [*old, *self.plan])
        if not isinstance(head_writer, ShardedDirectoryWriter):
            raise AppendError(
                f"{self.pending.root}: {self.codec.name} keeps no versions to append to"
            )
        kept = [e for es in self.kept.values() for e in es]
        manifest = head_writer.manifest([*kept, *entries], run)
        _check_same_encoding(self.pending, manifest)
        listed = {e["file"] for e in entries} | {
            e["index"]["file"] for e in entries if "index" in e
        }
        metadata = sorted(
            name
            for name in _top_files(root)
            if name not in listed and name not in (JOURNAL, MANIFEST)
        )
        manifest["version"] = {
            "number": self.pending.number,
            "next_index": _after(self.pending.base_manifest, self.plan),
            "metadata": metadata,
            "superseded": self.superseded,
        }
        commit_version(self.pending, manifest)


def _top_files(folder: str) -> list[str]:
    if is_url(folder):
        from ..fs import listdir

        return listdir(folder)
    return [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))]


def _after(base: Mapping[str, Any], plan: list[Shard]) -> dict[str, int]:
    out = next_indexes(base)
    for s in plan:
        out[s.split] = max(out.get(s.split, 0), s.index + 1)
    return out


def _check_same_encoding(pending: PendingVersion, manifest: Mapping[str, Any]) -> None:
    """The new shards must be encoded as the kept ones are: same options, same field
    encodings (a different image codec would make one split two formats)."""
    base = pending.base_manifest
    # the shard size changes no record's bytes: a compaction may choose another
    sized = {k: v for k, v in (base.get("options") or {}).items() if k != "shard_mb"}
    if sized != {k: v for k, v in (manifest.get("options") or {}).items() if k != "shard_mb"}:
        raise AppendError(
            f"{pending.root}: its options are {base.get('options')}, this version's would be "
            f"{manifest.get('options')}; nothing was appended"
        )
    for key in ("format", "compression"):
        if base.get(key) != manifest.get(key):
            raise AppendError(
                f"{pending.root}: its {key} is {base.get(key)!r}, this version's would be "
                f"{manifest.get(key)!r}; nothing was appended"
            )
    for split, fields in (base.get("fields") or {}).items():
        new = (manifest.get("fields") or {}).get(split)
        if new is not None and new != fields:
            raise AppendError(
                f"{pending.root}: split {split!r}: its fields are stored as {fields}, this "
                f"version's would be {new}; nothing was appended"
            )


def _sample(reader: Reader, job: ConvertJob, schema: Schema) -> Any:
    def sample(split: str, n: int) -> Batch:
        parts = list(
            cast_batches(reader, split, job.policy, {}, stop=n, batch_bytes=job.batch_bytes)
        )
        fields = schema.splits[split].fields
        return {k: concat_columns(fields[k].kind, [p[k] for p in parts]) for k in fields}

    return sample


def write_next_version(
    reader: Reader,
    codec: Codec,
    schema_in: Schema,
    after: Schema,
    job: ConvertJob,
    pending: PendingVersion,
    compact: bool = False,
) -> ShardRun:
    """Write ``reader``'s records (``schema_in``, as stored) as the next version of the
    dataset ``pending`` began: appended after its records, or (``compact``) all of
    them rewritten into new shards. ``after`` is the dataset's schema once committed."""
    base = pending.base_manifest
    # a compaction names its shards as one conversion would, where no kept file has
    # those names; an append numbers them on from the latest version's
    first = {} if compact else next_indexes(base)
    planned = codec.plan_shards(schema_in, _sample(reader, job, schema_in)) or []
    plan = _renumber(codec, planned, first, kept_names(pending.root))
    if compact:
        kept: dict[str, list[dict[str, Any]]] = {split: [] for split in after.splits}
        superseded = [
            f
            for info in base["splits"].values()
            for e in info["shards"]
            for f in (e["file"], *([e["index"]["file"]] if "index" in e else []))
        ]
        offsets: dict[str, int] = {}
    else:
        kept = {
            split: list(base["splits"].get(split, {}).get("shards", [])) for split in after.splits
        }
        superseded = []
        offsets = {split: int(info["count"]) for split, info in base["splits"].items()}
    target = NextVersion(pending, codec, after, kept, plan, superseded, job.resume, offsets)
    return write_sharded(reader, pending.root, codec, schema_in, plan, job, target)
