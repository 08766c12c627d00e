"""A dataset's versions: ``log`` (what each holds), ``compact`` and ``prune``.

Every dataset dstore wrote has versions (:mod:`dstore.sharding.versions`, the schema's
``versions``): :func:`log` lists them; :func:`compact` rewrites a sharded dataset's
shards -- after many small appends, many small files -- into shards of the target
size as a new version (the same records in the same order); :func:`prune` deletes
what only versions older than the ``keep`` latest need, and lists those as pruned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from .. import fs
from ..errors import UsageError
from ..locking import append_lock
from ..output import fmt_bytes
from ..registry import get_codec_class, infer_codec
from ..sharding.manifest import VERSIONS
from ..sharding.versions import (
    SUPERSEDED,
    begin_version,
    committed,
    entry_files,
    pruned_through,
    remove_stale,
    remove_tree,
    version_file,
)
from ..sources.opening import open_reader
from ..sources.versions import version_of

__all__ = ["LogReport", "PruneReport", "compact", "log", "prune"]


@dataclasses.dataclass
class LogReport:
    """The versions of a dataset, oldest first: one JSON object each (``version``,
    ``time``, ``operation``, ``records`` split -> count, ``added``, ``source``,
    ``state``: ``kept``, ``pruned`` or ``replaced``)."""

    path: str
    versions: list[dict[str, Any]]

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(v) for v in self.versions]

    def lines(self) -> list[str]:
        head = f"{'version':>7}  {'time (UTC)':20}  {'operation':9}  {'records':24}  {'added':16}  state    source"
        out = [f"{self.path}: {len(self.versions)} version(s)", head]
        for v in self.versions:
            records = " ".join(f"{k}={n}" for k, n in (v.get("records") or {}).items())
            added = " ".join(f"+{n}" for n in (v.get("added") or {}).values()) or "-"
            out.append(
                f"{v['version']:>7}  {v.get('time') or '?':20}  {v.get('operation', '?'):9}  "
                f"{records:24}  {added:16}  {v['state']:8} {v.get('source') or '-'}"
            )
        return out


def _history(path: str, format: str | None) -> tuple[list[dict[str, Any]], int]:
    """The dataset's version records (a version 1 written before versions: made up from
    what it says of itself) and the version read as its latest."""
    from .append_settings import first_record

    with open_reader(path, format=format, decode=False) as reader:
        history = [dict(v) for v in reader.schema.versions] or [first_record(path, reader)]
        return history, version_of(reader)


def log(path: str | os.PathLike[str], *, format: str | None = None) -> LogReport:
    """The versions of the dataset at ``path``, oldest first (``dstore log``)."""
    path = os.fspath(path)
    history, _ = _history(path, format)
    pruned = pruned_through(path) if fs.isdir(path) else 0
    out = []
    for record in history:
        number = int(record.get("version", 0))
        state = "kept"
        if number <= pruned:
            state = "pruned"
        elif record.get("readable") is False:
            state = "replaced"
        shown = {k: v for k, v in record.items() if k not in ("checksums", "readable", "stat")}
        out.append({**shown, "state": state})
    return LogReport(path, out)


def _sharded(path: str, format: str | None, what: str) -> Any:
    cls = get_codec_class(format or infer_codec(path))
    if not cls.sharded:
        raise UsageError(
            f"{path}: {what} works on sharded formats' folders; {cls.name} "
            + (
                "appends into its chunks: it needs no compaction"
                if cls.appends_in_place
                else "is written whole by each append: it keeps one version"
            )
        )
    if not fs.isdir(path):
        raise UsageError(f"{path}: not a dataset folder")
    return cls


def compact(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    options: Mapping[str, Any] | None = None,
    progress: Any = None,
) -> Any:
    """Rewrite the latest version's shards into shards of the target size (``shard_mb``,
    the dataset's unless ``options`` says) as a new version: the same records in the
    same order. The old shards move to ``.dstore-versions/superseded/`` (older versions
    still read them) until :func:`prune` deletes them. Returns the
    :class:`~dstore.api.ConvertReport` of the new version."""
    from ..engine.append import write_next_version
    from ..engine.job import ConvertJob
    from .append_settings import dataset_codec, first_record, new_record
    from .convert import ConvertReport

    path = os.fspath(path)
    cls = _sharded(path, format, "compact")
    t0 = time.perf_counter()
    with append_lock(path) if not fs.is_url(path) else contextlib.nullcontext():
        pending = begin_version(path)
        try:
            with open_reader(path, format=cls.name, decode=False, version=pending.base) as reader:
                _refuse_lossy(path, reader)
                others = {k: v for k, v in (options or {}).items() if k != "shard_mb"}
                codec, _ = dataset_codec(path, cls, reader, others)
                codec.options = dataclasses.replace(codec.options, **_size(options, cls))
                listed = getattr(reader, "shards", {}).values()  # the shards read, as listed
                bytes_in = sum(s.size or 0 for shards in listed for s in shards)
                history = list(reader.schema.versions) or [first_record(path, reader)]
                after = _same_records(reader.schema)
                job = ConvertJob(progress=progress, sources=(path,))
                record = new_record(
                    pending.number, "compact", after, {}, None, None, None, codec, job.policy, None
                )
                after.versions = [*history, record]
                run = write_next_version(reader, codec, reader.schema, after, job, pending, True)
        except BaseException:
            remove_tree(pending.folder)
            raise
    schema = after
    return ConvertReport(
        src=path,
        dst=path,
        src_format=cls.name,
        dst_format=cls.name,
        records=schema.records,
        splits=len(schema.splits),
        raw_bytes=schema.nbytes,
        bytes_in=bytes_in,
        bytes_out=run.bytes,
        seconds=time.perf_counter() - t0,
        cast=run.stats,
        shards=run,
        version=pending.number,
    )


def _refuse_lossy(path: str, reader: Any) -> None:
    for split in reader.schema.splits:
        for name in reader.lossy_fields(split):
            raise UsageError(
                f"{path}: split {split!r}, field {name!r} is stored in a lossy image encoding; "
                "compacting would encode it once more (convert the dataset instead)"
            )


def _size(options: Mapping[str, Any] | None, cls: Any) -> dict[str, Any]:
    """``shard_mb`` as asked (compaction may change the size: the bytes of a record do
    not depend on it)."""
    if not options or "shard_mb" not in options:
        return {}
    return {"shard_mb": cls.parse_options({"shard_mb": options["shard_mb"]}).shard_mb}


def _same_records(schema: Any) -> Any:
    from ..model.schema import Schema

    return Schema(dict(schema.splits), dict(schema.attrs), {}, [])


@dataclasses.dataclass
class PruneReport:
    """What :func:`prune` removed."""

    path: str
    kept: list[int]
    pruned: list[int]
    files: int
    bytes: int

    def summary(self) -> str:
        if not self.pruned:
            return f"{self.path}: nothing to prune (versions {_span(self.kept)} kept)"
        return (
            f"{self.path}: versions {_span(self.pruned)} pruned, {_span(self.kept)} kept; "
            f"{self.files} file(s) deleted, {fmt_bytes(self.bytes)} freed"
        )


def _span(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    return str(numbers[0]) if len(numbers) == 1 else f"{numbers[0]}..{numbers[-1]}"


def prune(path: str | os.PathLike[str], *, keep: int, format: str | None = None) -> PruneReport:
    """Keep the ``keep`` latest versions of the sharded dataset at ``path``: the files
    only older versions list (shards a compaction superseded) are deleted, and those
    versions are listed as pruned (reading one is a :class:`~dstore.errors.VersionError`).
    Files of appends that were killed before their commit go too."""
    path = os.fspath(path)
    _sharded(path, format, "prune")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise UsageError(f"prune: keep must be a whole number >= 1. Got {keep!r} instead.")
    with append_lock(path) if not fs.is_url(path) else contextlib.nullcontext():
        begin = begin_version(path)  # settles the latest; its pending folder is not used
        remove_tree(begin.folder)
        numbers = committed(path) or [1]
        latest = numbers[-1]
        through = max(pruned_through(path), latest - keep)
        kept = [n for n in numbers if n > through]
        needed = set()
        for n in kept:
            with fs.open_binary(version_file(path, n)) as f:
                needed.update(entry_files(json.loads(f.read())))
        files, freed = _delete_superseded(path, needed)
        remove_stale(path, locked=not fs.is_url(path))
        pruned = [n for n in numbers if n <= through and n > pruned_through(path)]
        if through > pruned_through(path):
            fs.write_replacing(
                fs.join(fs.join(path, VERSIONS), "pruned.json"),
                (json.dumps({"through": through}) + "\n").encode(),
            )
    return PruneReport(path, kept, pruned, files, freed)


def _delete_superseded(path: str, needed: set[str]) -> tuple[int, int]:
    """Delete the superseded shards no kept version lists: (files, bytes)."""
    folder = fs.join(fs.join(path, VERSIONS), SUPERSEDED)
    if not fs.isdir(folder):
        return 0, 0
    files = bytes_ = 0
    if fs.is_url(folder):
        store, p = fs.url_fs(folder)
        for found, info in store.find(p, detail=True).items():
            rel = found[len(p.rstrip("/")) + 1 :]
            if rel not in needed:
                bytes_ += int(info.get("size") or 0)
                store.rm(found)
                files += 1
        return files, bytes_
    for root, _, names in os.walk(folder):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            if rel not in needed:
                bytes_ += os.path.getsize(full)
                os.remove(full)
                files += 1
    return files, bytes_
