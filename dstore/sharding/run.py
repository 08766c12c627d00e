"""Sharded conversions: plan record ranges, write each shard on its own, commit last.

A sharded output (TFRecord) is planned up front as :class:`~dstore.codecs.base.Shard`
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
import hashlib
import json
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from queue import SimpleQueue
from typing import Any

from ..codecs.base import Codec, Reader, Shard, ShardWriter
from ..dtypes import CastStats, DtypePolicy
from ..engine import cast_batches
from ..errors import CodecIOError, DstoreError, OutputExistsError, ResumableInterrupt
from ..fs import is_url, url_fs
from ..job import ConvertJob, SourceRef
from ..model.schema import Batch, Schema, slice_batch
from ..output import atomic_output, url_output
from ..parallel import default_workers, prefetch
from ..rawsize import RawMeter
from ..sources.opening import open_reader
from .index import INDEX_SUFFIX
from .journal import (
    JOURNAL,
    append_journal,
    cast_snapshot,
    largest_casts,
    read_journal,
    still_good,
)
from .processes import EncoderProcesses, discard, encoder_processes, report, warm_up

__all__ = ["RegionTasks", "ShardRun", "SourceRef", "start_workers", "write_sharded"]

#: records whose encoding holds the GIL a conversion needs before its shards are written
#: in worker processes: starting them (Python, numpy, dstore, fpng) costs about 0.5 s
#: of CPU each, which only many records repay
PROCESS_MIN_RECORDS = 512


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


# --------------------------------------------------------------------- journal


def _header(
    codec: Codec,
    writer: ShardWriter,
    schema: Schema,
    plan: Sequence[Shard],
    job: ConvertJob,
) -> dict[str, Any]:
    """Everything that fixes the output's bytes; a resume needs all of it equal."""
    policy = job.policy
    config = {k: v for k, v in codec.get_config().items() if k != "workers"}
    fingerprint = []
    for src in job.sources:
        try:
            st = os.stat(src)
            fingerprint.append([os.path.abspath(src), st.st_size, st.st_mtime_ns])
        except OSError:
            fingerprint.append([src, None, None])
    return {
        "journal": 1,
        "codec": config,
        "libraries": writer.fingerprint(),
        "schema": schema.to_json(),
        "policy": {
            "default": policy.default,
            "per_field": dict(policy.per_field),
            "on_overflow": policy.on_overflow,
        },
        "sources": fingerprint,
        "plan": [dataclasses.asdict(s) for s in plan],
    }


def _run_record(header: Mapping[str, Any]) -> dict[str, Any]:
    """What the finished manifest records of the command that wrote it, for a later
    ``--resume`` to recognise it: the source's fingerprint, and one digest of all
    that fixed the bytes (schema, dtype policy, plan, codec options, libraries; not
    the codec's registered name, which a subclass writing the same bytes changes)."""
    fixed = {k: v for k, v in header.items() if k not in ("journal", "sources")}
    fixed["codec"] = {k: v for k, v in header["codec"].items() if k != "name"}
    digest = hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()
    return {"source": header["sources"], "digest": digest}


def _finished_output(dst: str, codec: Codec, run: Mapping[str, Any]) -> str | None:
    """None if ``dst`` is the complete output of this very command (same source,
    options, plan and libraries) whose every shard matches its manifest; else why not."""
    try:
        with codec.open_reader(dst) as reader:
            manifest = getattr(reader, "manifest", None) or {}
            if manifest.get("run") != run:
                return "it was not written from this source with these options"
            bad = [msg for ok, msg in reader.check_integrity() if not ok]
    except DstoreError as e:
        return str(e)
    return bad[0] if bad else None


# ----------------------------------------------------------------------- runs


def _runs(shards: Sequence[Shard]) -> Iterator[list[Shard]]:
    """Consecutive shards of one split whose ranges touch: read as one stream."""
    run: list[Shard] = []
    for s in shards:
        if run and (s.split != run[-1].split or s.start != run[-1].stop):
            yield run
            run = []
        run.append(s)
    if run:
        yield run


def _cut(batches: Iterator[Batch], sizes: Sequence[int]) -> Iterator[Iterator[Batch]]:
    """Split one stream of batches into consecutive sub-streams of ``sizes`` records."""
    carry: list[Batch] = []

    def take(n: int) -> Iterator[Batch]:
        while n > 0:
            batch = carry.pop() if carry else next(batches, None)
            if batch is None:
                return
            m = len(next(iter(batch.values())))
            if m > n:
                # slice_batch: a ragged/string column is values + offsets, not an ndarray
                carry.append(slice_batch(batch, n, m))
                batch = slice_batch(batch, 0, n)
                m = n
            n -= m
            yield batch

    for size in sizes:
        part = take(size)
        yield part
        for _ in part:  # the consumer stopped early: keep the stream aligned
            pass


def _shard_streams(
    reader: Reader,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    ahead: bool,
) -> Iterator[tuple[Shard, Iterator[Batch]]]:
    """Each pending shard with its records, one continuous read per run of
    touching shards (a compressed member cannot seek); ``ahead`` reads the
    next batch in a background thread."""
    for run in _runs(pending):
        stream = cast_batches(
            reader,
            run[0].split,
            job.policy,
            stats,
            start=run[0].start,
            stop=run[-1].stop,
            batch_bytes=job.batch_bytes,
        )
        yield from zip(
            run, _cut(prefetch(stream) if ahead else stream, [s.records for s in run]), strict=True
        )


def _shard_task(
    source: SourceRef,
    writer: ShardWriter,
    root: str,
    shard: Shard,
    policy: DtypePolicy,
    batch_bytes: int,
    batches: list[Batch] | None,
    counted: dict[tuple[str, str], int] | None = None,
    *,
    in_process: bool = False,
) -> tuple[dict[str, Any], dict[str, CastStats], int]:
    """Runs in a worker (Dask's, or a process of :mod:`.processes`): read the shard's
    records (or take them) and write the shard. Returns its manifest entry, the cast
    statistics, and the decoded bytes of its varying-size fields not ``counted`` yet
    (:class:`~dstore.rawsize.RawMeter`).

    Takes the policy and batch size, not the whole job: a task is pickled, and the
    job's progress callback and client belong to the calling process. ``in_process``:
    in a worker process of :mod:`.processes`, which reads the next batch on a thread of
    its own while this one is encoded and reports the records written to its parent as
    they are (:func:`.processes.report`)."""
    stats: dict[str, CastStats] = {}
    if batches is not None:
        return writer.write_shard(root, shard, iter(batches)), stats, 0
    with open_reader(source.path, format=source.format, **dict(source.options)) as opened:
        meter = RawMeter(opened, counted or {})
        records = cast_batches(
            meter,
            shard.split,
            policy,
            stats,
            start=shard.start,
            stop=shard.stop,
            batch_bytes=batch_bytes,
        )
        # progress only there: a writer on Dask (a test's, a user's) may not take it
        info = (
            writer.write_shard(root, shard, prefetch(records), report)
            if in_process
            else writer.write_shard(root, shard, records)
        )
    return info, stats, meter.measured


def _shard_task_in(cwd: str, *task: Any) -> tuple[dict[str, Any], dict[str, CastStats], int]:
    """:func:`_shard_task` in the caller's working directory: a worker process kept from
    an earlier conversion started in another (a notebook's ``%cd``), and the source's
    relative paths (the path, a glob, a list's lines) name the caller's files."""
    os.chdir(cwd)
    return _shard_task(*task, in_process=True)


def _counted_from(reader: Reader, shard: Shard) -> dict[tuple[str, str], int] | None:
    """What the worker writing ``shard`` has left to measure, if ``reader`` measures."""
    return reader.counted_from(shard.split, shard.start) if isinstance(reader, RawMeter) else None


def _add_measured(reader: Reader, measured: int) -> None:
    if isinstance(reader, RawMeter):
        reader.measured += measured


def _worker_processes(
    reader: Reader, writer: ShardWriter, shards: Sequence[Shard], job: ConvertJob
) -> EncoderProcesses | None:
    """Worker processes to write ``shards`` in, one shard each at a time; None when
    threads serve as well: the encoders release the GIL (``ShardWriter.gil_bound``), the
    records are few, the source cannot be reopened by range, or this is a worker."""
    if job.client is not None or job.source is None or not reader.random_access:
        return None
    gil_bound = sum(s.records for s in shards if writer.gil_bound(s.split))
    workers = writer.workers or default_workers()
    if gil_bound < PROCESS_MIN_RECORDS or workers < 2:
        return None
    return encoder_processes(workers)


def start_workers(reader: Reader, codec: Codec, schema: Schema, dst: str, job: ConvertJob) -> None:
    """Start the worker processes a sharded conversion of ``schema`` will likely write in
    (:func:`_worker_processes`; its raw records span more than a shard), and have them
    import what they run, while this process plans the shards."""
    target = getattr(getattr(codec, "options", None), "shard_mb", 0) * 2**20
    if is_url(dst) or job.resume or schema.nbytes <= target:
        return
    writer = codec.shard_writer(schema, [])
    whole = [Shard(s.name, 0, 0, s.count, "") for s in schema.splits.values()]
    pool = _worker_processes(reader, writer, whole, job)
    if pool is not None:
        warm_up(pool, ["dstore.sharding.run", type(writer).__module__])


def _in_processes(
    pool: EncoderProcesses,
    reader: Reader,
    writer: ShardWriter,
    root: str,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    done: Callable[[Shard, dict[str, Any]], None],
    advance: Callable[[int], None] | None,
) -> None:
    """Each shard written by a worker process that reads the source itself (no records
    pass through this process), the largest first, the next one to the first idle.
    Meanwhile this process checks the source as a whole read would (the CRC-32 of the
    npz members the workers read in parts)."""
    assert job.source is not None
    queue = deque(sorted(pending, key=lambda s: s.records, reverse=True))
    cwd = os.getcwd()
    running: dict[Future[Any], tuple[int, Shard]] = {}
    written: SimpleQueue[int] = SimpleQueue()  # the workers' progress, passed on here

    def start(child: int) -> None:
        if queue:
            shard = queue.popleft()
            # small batches: a worker reads them as it encodes, and two workers' memory
            # stays that of one conversion on threads
            batch_bytes = max(1 << 20, job.batch_bytes // 4)
            task = (job.source, writer, root, shard, job.policy, batch_bytes, None)
            counted = _counted_from(reader, shard)
            fut = pool.children[child].submit(_shard_task_in, cwd, *task, counted)
            running[fut] = (child, shard)

    def pass_on_progress() -> None:
        while not written.empty():
            n = written.get()
            if advance is not None:
                advance(n)

    counts = {s.split: reader.schema.splits[s.split].count for s in pending}
    in_parts = sorted({s.split for s in pending if s.start > 0 or s.stop < counts[s.split]})
    for worker in pool.children:
        worker.on_report = written.put
    # the workers open the source again by name: a change they would read goes unseen by
    # the CRC-32 this process checks (before they read it) unless the files are compared
    sources_before = _file_states(job.sources)
    try:
        for child in range(len(pool)):
            start(child)
        for split in in_parts:  # meanwhile, what the workers' range reads do not check
            reader.check_ranges(split)
        while running:
            finished = wait(running, timeout=0.2, return_when=FIRST_COMPLETED).done
            pass_on_progress()  # a shard's reports come before its answer
            for fut in finished:
                child, shard = running.pop(fut)
                try:
                    info, task_stats, measured = fut.result()
                except RuntimeError as e:  # the process died (killed, out of memory)
                    raise CodecIOError(f"shard {shard.file}: {e}") from None
                CastStats.merge_into(stats, task_stats)
                _add_measured(reader, measured)
                done(shard, info)
                start(child)
        _check_unchanged(reader, job.sources, sources_before, sorted({s.split for s in pending}))
    except BaseException:
        discard(pool)  # none of its children may go on writing into an output being removed
        # what the stopped workers were writing: a .part, or a shard renamed into place
        # before its journal line (a folder kept for --resume holds journaled shards only)
        _remove_unjournaled(root, [shard for _, shard in running.values()])
        raise
    finally:
        for worker in pool.children:
            worker.on_report = None


def _file_states(paths: Sequence[str]) -> list[tuple[int, int, int, int] | None]:
    """What writing or replacing a local file changes: device, inode, size, mtime."""
    states: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):  # a URL: not a local file
            states.append(None)
            continue
        states.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return states


def _check_unchanged(
    reader: Reader,
    paths: Sequence[str],
    before: list[tuple[int, int, int, int] | None],
    splits: Sequence[str],
) -> None:
    """Raise if a source file changed since ``before``: its members checked again (naming
    the split and field whose CRC-32 no longer matches), else named as changed."""
    now = _file_states(paths)
    changed = [p for p, was, is_ in zip(paths, before, now, strict=True) if was != is_]
    if not changed:
        return
    try:
        for split in splits:
            reader.check_ranges(split)
    except DstoreError as e:
        raise CodecIOError(f"{e} (it changed during the conversion)") from None
    raise CodecIOError(
        f"{changed[0]}: changed during the conversion (the worker processes read it again); "
        "run again when nothing writes to it"
    )


def _remove_unjournaled(root: str, shards: Sequence[Shard]) -> None:
    """The files of ``shards`` (and their index and ``.part``), written or not."""
    for shard in shards:
        for name in (shard.file, shard.file + INDEX_SUFFIX):
            for path in (name, name + ".part"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(root, path))


def _distributed(
    reader: Reader,
    writer: ShardWriter,
    root: str,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    done: Callable[[Shard, dict[str, Any]], None],
) -> str:
    """One Dask task per shard (on ``job.client``); workers read the source themselves
    when it allows it."""
    from dask.distributed import as_completed

    client, source, retries = job.client, job.source, job.retries
    streamed = source is None or not reader.random_access
    note = ""
    if streamed:
        note = (
            f"{reader.path}: the source only streams (compressed npz members or in-memory data): "
            "this process reads it and sends each shard's records to the workers"
        )
    token = hashlib.sha256(f"{root}{os.getpid()}".encode()).hexdigest()[:8]
    futures = {}

    def streamed_shards() -> Iterator[tuple[Shard, list[Batch] | None]]:
        if not streamed:
            yield from ((s, None) for s in pending)
            return
        for shard, batches in _shard_streams(reader, pending, job, stats, ahead=False):
            yield shard, list(batches)

    def submit(shard: Shard, batches: list[Batch] | None) -> Any:
        data: Any = batches
        if batches is not None:  # sent as data, not inside the task graph
            data = client.scatter([batches], hash=False)[0]
        fut = client.submit(
            _shard_task,
            source or SourceRef(reader.path),
            writer,
            root,
            shard,
            job.policy,
            job.batch_bytes,
            data,
            key=f"dstore-{token}-{shard.file}",
            retries=retries,
            pure=False,
        )
        futures[fut] = shard
        return fut

    # Bound what is in flight when this process streams records to the workers.
    window = (
        len(pending)
        if not streamed
        else 2 * max(1, len(client.scheduler_info().get("workers", {})))
    )
    queue = streamed_shards()
    for _ in range(window):
        item = next(queue, None)
        if item is None:
            break
        submit(*item)
    results = as_completed(list(futures))
    try:
        for fut in results:
            shard = futures.pop(fut)
            try:
                info, task_stats, measured = fut.result()
            except DstoreError as e:
                raise type(e)(f"shard {shard.file} failed (after {retries} retries): {e}") from None
            except Exception as e:  # noqa: BLE001 - anything a worker raised, named by shard
                raise CodecIOError(
                    f"shard {shard.file} failed (after {retries} retries): {type(e).__name__}: {e}"
                ) from None
            CastStats.merge_into(stats, task_stats)
            _add_measured(reader, measured)
            done(shard, info)
            item = next(queue, None)
            if item is not None:
                results.add(submit(*item))
    finally:
        if futures:  # a shard failed or Ctrl-C: stop the rest before the output is removed
            _cancel_and_drain(client, list(futures), f"dstore-{token}-")
    return note


def _running_here(prefix: str, dask_worker: Any = None) -> int:
    """Runs on a worker: how many of its threads still run a task of this conversion
    (a cancelled task keeps running; Dask only forgets its result)."""
    return sum(1 for ts in dask_worker.state.all_running_tasks if str(ts.key).startswith(prefix))


def _cancel_and_drain(
    client: Any, futures: list[Any], prefix: str, patience: float = 600.0
) -> None:
    """Cancel the tasks and wait until no worker still runs one, so that none
    writes a shard into the temporary output after the caller removed it."""
    import time

    client.cancel(futures)
    deadline = time.monotonic() + patience  # a safety net for a hung task, not a timing
    while time.monotonic() < deadline:
        try:
            running = client.run(_running_here, prefix)
        except Exception:  # noqa: BLE001 - a lost worker writes nothing more
            return
        if not any(running.values()):
            return
        time.sleep(0.05)


def write_sharded(
    reader: Reader,
    dst: str,
    codec: Codec,
    schema_out: Schema,
    plan: list[Shard],
    job: ConvertJob,
    on_commit: Callable[[str, dict[str, CastStats]], None] | None = None,
) -> ShardRun:
    """Write ``plan`` (from ``codec.plan_shards``) at ``dst`` as ``job`` says; see the
    module doc. ``on_commit(root, largest)`` runs once the manifest is written, before
    the folder is committed (the cards, :mod:`dstore.card`): ``largest`` holds each cast
    field's largest errors over every value, those of shards kept from an interrupted
    run included (journaled with them), so that it is the same however the run went.

    Progress advances per record written locally, per shard on Dask. With
    ``job.resume``, a ``dst`` that is already this command's complete output (see
    :func:`_finished_output`) is left as it is and reported complete."""
    progress, resume, client = job.progress, job.resume, job.client
    writer = codec.shard_writer(schema_out, plan)
    header = _header(codec, writer, schema_out, plan, job)
    run = _run_record(header)
    total = reader.schema.records
    stats: dict[str, CastStats] = {}

    if resume and not is_url(dst) and os.path.lexists(dst):
        _check_finished(dst, codec, run)
        if progress is not None:
            progress(total, total)
        return ShardRun(len(plan), 0, len(plan), stats, complete=True)

    with _output(dst, codec, job, header) as root:
        kept, journal = _keep_finished_shards(root, plan, header)
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
                    "the same command with --resume writes only the rest, any other run removes them"
                ) from None
            raise
        writer.commit(root, [infos[s.file] for s in plan], run)
        if journal is not None:
            os.remove(journal)
        if on_commit is not None:  # card hook (#38): part of the same commit
            on_commit(root, largest_casts([*(e.get("cast") for e in kept.values()), stats]))
    return ShardRun(len(plan), len(pending), len(kept), stats, note)


def _check_finished(dst: str, codec: Codec, run: dict[str, Any]) -> None:
    """With --resume, ``dst`` exists: refused unless it is this command's finished output."""
    why = _finished_output(dst, codec, run)
    if why is not None:
        raise OutputExistsError(
            f"{dst}: already exists and is not this command's finished output ({why}); "
            "use --overwrite to replace it"
        )


def _check_resumable(dst: str, header: dict[str, Any], folder: str) -> None:
    """An interrupted run's folder is resumed only by the same command (its journal's header)."""
    old, _ = read_journal(folder)
    if old is not None and old != header:
        changed = [k for k in header if old.get(k) != header[k]]
        raise CodecIOError(
            f"{dst}: cannot resume: {', '.join(changed)} changed since the interrupted run "
            "(run without --resume to start again)"
        )


def _output(dst: str, codec: Codec, job: ConvertJob, header: dict[str, Any]) -> Any:
    """The context that gives the folder to write in and commits (or removes) it."""
    if is_url(dst):
        if job.resume:
            raise CodecIOError(f"{dst}: --resume needs a local destination")
        return url_output(dst, codec=codec, sources=job.sources, overwrite=job.overwrite)
    return atomic_output(
        dst,
        codec=codec,
        sources=job.sources,
        overwrite=job.overwrite,
        resume=functools.partial(_check_resumable, dst, header) if job.resume else None,
    )


def _keep_finished_shards(
    root: str, plan: list[Shard], header: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The shards of ``plan`` an interrupted run finished (still intact) and the journal
    (None for a URL): everything else in a local ``root`` is removed, and the journal
    rewritten with this run's header and the shards kept."""
    if is_url(root):
        store, prefix = url_fs(root)
        store.makedirs(prefix, exist_ok=True)
        return {}, None
    os.makedirs(root, exist_ok=True)
    journal = os.path.join(root, JOURNAL)
    _, done_before = read_journal(root)
    planned = {s.file for s in plan}
    kept = {f: e for f, e in done_before.items() if f in planned and still_good(root, e)}
    keep = set(kept) | {e["index"]["file"] for e in kept.values() if "index" in e}
    for name in os.listdir(root):  # partial shards and the old journal, rewritten below
        if name not in keep:
            os.remove(os.path.join(root, name))
    append_journal(journal, header)
    for entry in kept.values():
        append_journal(journal, entry)
    return kept, journal


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
        return _distributed(reader, writer, root, pending, job, stats, done)
    advance = None if progress is None else (lambda n: progress(n, total))
    pool = (
        None
        if is_url(root) or len(pending) < 2
        else _worker_processes(reader, writer, pending, job)
    )
    if pool is not None:
        _in_processes(pool, reader, writer, root, pending, job, stats, done, advance)
        return ""
    for shard, batches in _shard_streams(reader, pending, job, stats, ahead=True):
        done(shard, writer.write_shard(root, shard, batches, advance))
    return ""


# ------------------------------------------------------------- region writes


class RegionTasks:
    """Chunk-aligned blocks of a single output (a zarr store created at its final
    shape) written as Dask tasks: ``submit`` is the writer's hook
    (:meth:`~dstore.codecs.base.Writer.write_regions`).

    This process reads the source in record order: the stored whole-field sha256 is
    one stream over every record and a ragged field's offsets depend on every record
    before, so both stay here, and so the output's bytes are those of a local run.
    The workers encode and write the chunks; what is in flight is bounded (two
    blocks per worker), so memory stays that of a local run."""

    def __init__(self, client: Any, retries: int = 2) -> None:
        self.client = client
        self.retries = retries
        self.token = (
            f"dstore-region-{hashlib.sha256(f'{id(self)}{os.getpid()}'.encode()).hexdigest()[:8]}-"
        )
        self.window = 2 * max(1, len(client.scheduler_info().get("workers", {})))
        self.futures: list[tuple[Any, str]] = []
        self.count = 0

    def submit(self, function: Callable[..., None], region: Any, start: int, block: Any) -> None:
        where = f"{'/'.join(region.parts)} records {start}:{start + len(block)}"
        data = self.client.scatter([block], hash=False)[0]  # sent as data, not in the graph
        fut = self.client.submit(
            function,
            region,
            start,
            data,
            key=f"{self.token}{self.count}",
            retries=self.retries,
            pure=False,
        )
        self.count += 1
        self.futures.append((fut, where))
        while len(self.futures) > self.window:
            self._wait_first()

    def _wait_first(self) -> None:
        fut, where = self.futures[0]
        try:
            fut.result()
        except DstoreError as e:
            raise type(e)(f"{where} failed (after {self.retries} retries): {e}") from None
        except Exception as e:  # noqa: BLE001 - anything a worker raised, named by block
            raise CodecIOError(
                f"{where} failed (after {self.retries} retries): {type(e).__name__}: {e}"
            ) from None
        self.futures.pop(0)

    def finish(self) -> None:
        """Wait for every block; the first failure raises, naming its array and records."""
        while self.futures:
            self._wait_first()

    def cancel(self) -> None:
        """Stop the blocks still in flight before the caller removes the output."""
        if self.futures:
            _cancel_and_drain(self.client, [f for f, _ in self.futures], self.token)
            self.futures = []
