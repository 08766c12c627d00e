"""Which files a sharded reader reads, and whether it may read them.

- :func:`list_files`: the shard files of a folder, a glob or a brace pattern
  (``{000000..000009}``) dstore did not write, none reached through a link out of
  the folder (or the pattern's fixed folder) unless the user allows links;
- :func:`with_sidecar`: such a shard with its record index, if it has one, under
  the same rule;
- :func:`check_complete`: ``-i-of-N`` sets with a member missing are refused;
- :func:`check_listed`: the files a manifest lists exist and are distinct files
  (a second name for a shard, a hard link, a link inside the folder, reads its
  records twice).

Only local paths have links and inodes; URLs are listed as they are.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import stat
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .. import fs, links
from ..errors import CodecIOError
from .index import sidecars

if TYPE_CHECKING:
    from .reader import ShardFile

__all__ = ["brace_files", "check_complete", "check_listed", "list_files", "with_sidecar"]

_OF_RE = re.compile(r"-(\d+)-of-(\d+)")
_BRACE_RE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def check_complete(split: str, paths: Sequence[str]) -> None:
    """Shards named ``-i-of-N`` must all be there: a partial set must not look complete."""
    numbered = [
        (int(m.group(1)), int(m.group(2)))
        for p in paths
        if (m := _OF_RE.search(os.path.basename(p)))
    ]
    if not numbered:
        return
    totals = {n for _, n in numbered}
    have = {i for i, _ in numbered}
    total = max(totals)
    missing = [i for i in range(total) if i not in have]
    if len(totals) > 1 or missing:
        shown = ", ".join(f"{i:05d}" for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CodecIOError(
            f"{os.path.dirname(paths[0]) or '.'}: split {split!r} is incomplete: "
            f"{len(have)} of {total} shards present" + (f" (missing {shown})" if missing else "")
        )


def brace_files(path: str) -> list[str] | None:
    """The files a ``{000000..000009}`` brace pattern names (the shard URLs of WebDataset
    and tf.data), each of which must exist; None for a path without one."""
    if not _BRACE_RE.search(path):
        return None
    pieces = _BRACE_RE.split(path)  # text, lo, hi, text, lo, hi, ..., text
    ranges = [
        [f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        for lo, hi in zip(pieces[1::3], pieces[2::3], strict=True)
    ]
    files = []
    for combo in itertools.product(*ranges):
        parts = [pieces[0]]
        for value, text in zip(combo, pieces[3::3], strict=True):
            parts += [value, text]
        files.append("".join(parts))
    missing = [f for f in files if not fs.exists(f)]
    if missing or not files:
        raise CodecIOError(f"{path}: {missing[0] if missing else 'no file'} does not exist")
    return files


def list_files(path: str, pattern: str, what: str, follow_links: bool) -> list[str]:
    """The files at ``path`` a format reads: a folder's files whose names ``pattern``
    (a regex) finds, a brace pattern's or a glob's files, or the one file.

    A local file reached through a link out of the folder (or out of the pattern's
    fixed folder) is refused unless ``follow_links``."""
    braced = brace_files(path)
    if braced is not None:
        files, root = braced, links.pattern_root(path)
    elif fs.isdir(path):
        files = sorted(fs.join(path, f) for f in fs.listdir(path) if re.search(pattern, f))
        root = path
    elif any(c in path for c in "*?["):
        files, root = sorted(fs.glob(path)), links.pattern_root(path)
    else:
        files, root = ([path] if fs.exists(path) else []), ""  # named by the user: theirs
    if not files:
        raise CodecIOError(f"{path}: no {what} files found")
    if root and not fs.is_url(path):
        links.check_inside(root, files, follow_links)
        for file in files:
            links.check_regular(root, file)
    return files


def with_sidecar(shard: ShardFile, follow_links: bool) -> ShardFile:
    """A local shard dstore did not write, with its record index if it has one: in the
    folder's ``.dstore-index/``, else ``<shard>.idx`` beside it (``dstore index --out``,
    DALI's ``tfrecord2idx``, dstore's outputs before). An index linked in from
    outside the shard's folder is refused unless ``follow_links``."""
    if shard.index is not None or fs.is_url(shard.path):
        return shard
    for sidecar in sidecars(shard.path):
        if os.path.isfile(sidecar):
            links.check_inside(os.path.dirname(shard.path) or ".", [sidecar], follow_links)
            return dataclasses.replace(shard, index=sidecar)
    return shard


def check_listed(
    where: str, root: str, splits: Mapping[str, Sequence[ShardFile]]
) -> dict[str, list[ShardFile]]:
    """The local files a manifest lists (shards and their indexes, by split) exist and
    each is its own file (not a second name of another: a link inside the folder, a
    hard link, a name differing in case on macOS). Returns the splits' shards, those
    whose index is missing without it: an index is optional (such a shard is read in
    order, and ``dstore verify`` reports the index missing; ``cp out/*`` copies none)."""
    if fs.is_url(root):  # an object store has no links; a missing object fails on its read
        return {split: list(shards) for split, shards in splits.items()}
    first: dict[tuple[int, int], str] = {}
    kept: dict[str, list[ShardFile]] = {}
    for split, shards in splits.items():
        kept[split] = []
        for listed in shards:
            shard = listed
            if listed.index is not None and not os.path.lexists(listed.index):
                shard = dataclasses.replace(listed, index=None)
            for path in (shard.path, shard.index):
                if path is not None:
                    _check_distinct(where, root, path, first)
            kept[split].append(shard)
    return kept


def _check_distinct(where: str, root: str, path: str, first: dict[tuple[int, int], str]) -> None:
    # names relative to the folder are made for an error only (relpath per file costs
    # more than its stat on a manifest of thousands of shards)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        name = os.path.relpath(path, root)
        raise CodecIOError(f"{where}: {name}: missing (the manifest lists it)") from None
    except OSError as e:
        name = os.path.relpath(path, root)
        raise CodecIOError(f"{where}: {name}: cannot stat: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CodecIOError(
            f"{where}: {os.path.relpath(path, root)}: not a regular file (a FIFO, device, "
            "socket or folder; the "
            "manifest lists a file); refused"
        )
    key = (st.st_dev, st.st_ino)
    if key in first:
        raise CodecIOError(
            f"{where}: {os.path.relpath(path, root)} is the same file as "
            f"{os.path.relpath(first[key], root)}; each file the manifest lists is read once"
        )
    first[key] = path
