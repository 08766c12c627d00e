"""Sharded conversions: plan record ranges, write each shard on its own, commit last.

A sharded output (TFRecord) is planned up front as :class:`~dstore.abc.Shard`
record ranges. Every shard is a pure function of its records and the codec
options, so it can be written here, again after an interruption, or by a Dask
worker, and the bytes are the same. The manifest is written last: until then
the output is not complete.

Here, shards are written on threads, or -- when their encoder holds the GIL
(``ShardWriter.gil_bound``: fpng) and the source can be reopened by range --
by worker processes (:mod:`.processes`), each reading its shard's records
itself: one shard per worker at a time, the largest first.

Resume: a local output is built in a temporary folder (see ``dstore.output``)
holding a journal -- the plan, then one line per finished shard with its
sha256, each fsynced. ``resume=True`` adopts the folder of a killed or
interrupted run, keeps the shards whose file still matches the journal, and
writes only the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..abc import Codec, Reader, Shard, ShardWriter
from ..errors import CodecIOError, ResumableInterrupt
from ..fs import is_url
from ..model.schema import Schema
from ..output import atomic_output, url_output
from .dask import write_on_dask
from .dtypes import CastStats
from .job import ConvertJob
from .journal import append_journal, cast_snapshot, largest_casts
from .local import worker_processes, write_in_processes
from .resume import check_finished, check_resumable, keep_finished_shards, run_header, run_record
from .shards import shard_streams

__all__ = ["ShardRun", "ShardTarget", "write_sharded"]


@dataclasses.dataclass
class ShardRun:
    """What a sharded write did."""

    shards: int
    written: int
    kept: int
    stats: dict[str, CastStats]
    note: str = ""
    #: ``resume`` found the destination already complete and wrote nothing
    complete: bool = False
    #: bytes of the shards (and their indexes) the run's plan lists
    bytes: int = 0


# --------------------------------------------------------------------- journal


class ShardTarget(Protocol):
    """Where a sharded write goes when it is not a new output folder: the next version
    of an existing dataset (:class:`dstore.engine.append.NextVersion`)."""

    def prepare(self, writer: ShardWriter) -> None:
        """Set up the shard writer (``record_offsets``) before any shard is written."""

    def output(self, header: dict[str, Any]) -> contextlib.AbstractContextManager[str]:
        """The folder to write the shards in (and the resume journal), removed on failure."""

    def commit(
        self, writer: ShardWriter, root: str, entries: list[dict[str, Any]], run: Any
    ) -> None:
        """Make the written shards (``entries``, in plan order) part of the dataset."""


def write_sharded(
    reader: Reader,
    dst: str,
    codec: Codec,
    schema_out: Schema,
    plan: list[Shard],
    job: ConvertJob,
    target: ShardTarget | None = None,
    on_commit: Callable[[str, dict[str, CastStats]], None] | None = None,
) -> ShardRun:
    """Write ``plan`` (from ``codec.plan_shards``) at ``dst`` as ``job`` says; see the
    module doc. ``target``: into the next version of the dataset at ``dst`` instead of
    a new output folder.

    ``on_commit(root, largest)`` is the one hook for files written beside the manifest
    (the cards, :mod:`dstore.card`): it writes them into ``root`` once every shard is
    there. For a new output that is the folder renamed into place at the end; for a
    next version it is the version's pending folder, whose files the container moves
    into the dataset's root with the version (:mod:`dstore.sharding.versions`,
    ``metadata``). ``largest`` holds each cast field's largest errors over every value,
    those of shards kept from an interrupted run included (journaled with them), so
    that it is the same however the run went.

    Progress advances per record written locally, per shard on Dask. With
    ``job.resume``, a ``dst`` that is already this command's complete output (see
    :func:`_finished_output`) is left as it is and reported complete."""
    progress, resume, client = job.progress, job.resume, job.client
    writer = codec.shard_writer(schema_out, plan)
    if target is not None:
        target.prepare(writer)
    header = run_header(codec, writer, schema_out, plan, job)
    run = run_record(header)
    total = reader.schema.records
    stats: dict[str, CastStats] = {}

    if resume and target is None and not is_url(dst) and os.path.lexists(dst):
        check_finished(dst, codec, run)
        if progress is not None:
            progress(total, total)
        return ShardRun(len(plan), 0, len(plan), stats, complete=True)

    output = _output(dst, codec, job, header) if target is None else target.output(header)
    with output as root:
        kept, journal = keep_finished_shards(root, plan, header)
        if progress is not None and kept:
            progress(sum(s.records for s in plan if s.file in kept), total)
        infos = dict(kept)

        def done(shard: Shard, info: dict[str, Any]) -> None:
            infos[shard.file] = info
            if journal is not None:  # with the casts' largest errors so far (the card's)
                append_journal(journal, {**info, "cast": cast_snapshot(stats)})
            if progress is not None and client is not None:  # locally: per record, below
                progress(shard.records, total)

        pending = [s for s in plan if s.file not in kept]
        try:
            note = _write_pending(reader, writer, root, pending, job, stats, done, total)
        except KeyboardInterrupt:
            finished = len(infos)
            if journal is not None and finished:
                raise ResumableInterrupt(
                    f"interrupted: {finished} of {len(plan)} shards are kept in {root}; "
                    "the same conversion with resume=True writes only the rest, any other run removes them"
                ) from None
            raise
        entries = [infos[s.file] for s in plan]
        largest = _largest(kept, stats)
        _commit(
            writer,
            root,
            entries,
            run,
            journal,
            target,
            lambda: on_commit and on_commit(root, largest),
        )
    listed = sum(e.get("bytes", 0) + e.get("index", {}).get("bytes", 0) for e in entries)
    return ShardRun(len(plan), len(pending), len(kept), stats, note, bytes=listed)


def _largest(kept: Mapping[str, Any], stats: dict[str, CastStats]) -> dict[str, CastStats]:
    """Each cast field's largest errors: this run's and those journaled with kept shards."""
    return largest_casts([*(e.get("cast") for e in kept.values()), stats])


def _commit(
    writer: ShardWriter,
    root: str,
    entries: list[dict[str, Any]],
    run: dict[str, Any],
    journal: str | None,
    target: ShardTarget | None,
    hook: Callable[[], object],
) -> None:
    """The manifest and the hook's files, then the journal gone; a version's commit
    moves the files out of ``root``, so there the journal goes first."""
    if target is None:
        writer.commit(root, entries, run)
    hook()
    if journal is not None:
        os.remove(journal)
    if target is not None:
        target.commit(writer, root, entries, run)


def _output(dst: str, codec: Codec, job: ConvertJob, header: dict[str, Any]) -> Any:
    """The context that gives the folder to write in and commits (or removes) it."""
    if is_url(dst):
        if job.resume:
            raise CodecIOError(f"{dst}: resume=True needs a local destination")
        return url_output(dst, codec=codec, sources=job.sources, overwrite=job.overwrite)
    return atomic_output(
        dst,
        codec=codec,
        sources=job.sources,
        overwrite=job.overwrite,
        resume=functools.partial(check_resumable, dst, header) if job.resume else None,
    )


def _write_pending(
    reader: Reader,
    writer: ShardWriter,
    root: str,
    pending: list[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    done: Callable[[Shard, dict[str, Any]], None],
    total: int,
) -> str:
    """The shards not kept, here or on ``job.client``; the note Dask leaves, if any."""
    progress = job.progress
    if job.client is not None:
        return write_on_dask(reader, writer, root, pending, job, stats, done)
    advance = None if progress is None else (lambda n: progress(n, total))
    pool = (
        None if is_url(root) or len(pending) < 2 else worker_processes(reader, writer, pending, job)
    )
    if pool is not None:
        write_in_processes(pool, reader, writer, root, pending, job, stats, done, advance)
        return ""
    for shard, batches in shard_streams(reader, pending, job, stats, ahead=True):
        done(shard, writer.write_shard(root, shard, batches, advance))
    return ""


# ------------------------------------------------------------- region writes
