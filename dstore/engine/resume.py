"""Resuming a sharded output: the header that says which command made it, the
finished output a rerun recognises, the shards of an interrupted run that still
match their journal (kept) and the files it left that no journal line vouches for
(removed)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..abc import Codec, Reader, Shard, ShardWriter
from ..errors import CodecIOError, DstoreError, OutputExistsError
from ..fs import is_url, url_fs
from ..model.schema import Schema
from ..sharding.index import INDEX_DIR, INDEX_SUFFIX, index_name
from .job import ConvertJob
from .journal import JOURNAL, append_journal, read_journal, still_good

__all__ = [
    "check_finished",
    "check_resumable",
    "check_unchanged",
    "file_states",
    "keep_finished_shards",
    "remove_unjournaled",
    "run_header",
    "run_record",
]


def run_header(
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
        # only when set: the digest of a plain run's finished output stays what it was
        **({"shuffle_seed": job.shuffle_seed} if job.shuffle_seed is not None else {}),
    }


def run_record(header: Mapping[str, Any]) -> dict[str, Any]:
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


def file_states(paths: Sequence[str]) -> list[tuple[int, int, int, int] | None]:
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


def check_unchanged(
    reader: Reader,
    paths: Sequence[str],
    before: list[tuple[int, int, int, int] | None],
    splits: Sequence[str],
) -> None:
    """Raise if a source file changed since ``before``: its members checked again (naming
    the split and field whose CRC-32 no longer matches), else named as changed."""
    now = file_states(paths)
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


def remove_unjournaled(root: str, shards: Sequence[Shard]) -> None:
    """The files of ``shards`` (and their index and ``.part``), written or not."""
    for shard in shards:
        for name in (shard.file, index_name(shard.file), shard.file + INDEX_SUFFIX):
            for path in (name, name + ".part"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(root, path))


def check_finished(dst: str, codec: Codec, run: dict[str, Any]) -> None:
    """With --resume, ``dst`` exists: refused unless it is this command's finished output."""
    why = _finished_output(dst, codec, run)
    if why is not None:
        raise OutputExistsError(
            f"{dst}: already exists and is not this command's finished output ({why}); "
            "pass overwrite=True to replace it"
        )


def check_resumable(dst: str, header: dict[str, Any], folder: str) -> None:
    """An interrupted run's folder is resumed only by the same command (its journal's header)."""
    old, _ = read_journal(folder)
    if old is not None and old != header:
        changed = [k for k in dict.fromkeys([*old, *header]) if old.get(k) != header.get(k)]
        if "shuffle_seed" in changed:  # said first: it also changes the schema
            was, now = old.get("shuffle_seed"), header.get("shuffle_seed")
            changed.remove("shuffle_seed")
            changed.insert(0, f"shuffle_seed= (was {was}, now {now})")
        raise CodecIOError(
            f"{dst}: cannot resume: {', '.join(changed)} changed since the interrupted run "
            "(run without resume=True to start again)"
        )


def keep_finished_shards(
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
    # partial shards and indexes, and the old journal (rewritten below)
    for name in _files_below(root):
        if name not in keep:
            os.remove(os.path.join(root, name))
    append_journal(journal, header)
    for entry in kept.values():
        append_journal(journal, entry)
    return kept, journal


def _files_below(root: str) -> list[str]:
    """The files of a run's folder (its root and its ``.dstore-index/``), relative to it."""
    out = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name == INDEX_DIR and os.path.isdir(path) and not os.path.islink(path):
            out += [f"{INDEX_DIR}/{f}" for f in os.listdir(path)]
        else:
            out.append(name)
    return out
