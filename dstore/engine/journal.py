"""The resume journal of a sharded output being built.

:mod:`dstore.engine.run` keeps it in the temporary folder of a local
output: a JSON header (everything that fixes the output's bytes), then one
line per finished shard with its size and sha256, each fsynced. After a kill
the journal holds every shard reported done; a torn last line is ignored.
Each shard's line also records the casts' largest errors so far (the card of a
resumed run states them over every value, as an uninterrupted run's does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..bounded_json import load_json
from ..errors import CodecIOError
from ..fs import sha256_file
from .dtypes import CastStats

__all__ = [
    "JOURNAL",
    "append_journal",
    "cast_snapshot",
    "largest_casts",
    "read_journal",
    "still_good",
]

JOURNAL = "dstore.journal"


def read_journal(folder: str) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """The header and finished shards of a journal; a torn last line is ignored."""
    try:
        with open(os.path.join(folder, JOURNAL)) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, {}
    where = os.path.join(folder, JOURNAL)
    try:
        header = load_json(lines[0], where, "journal header")
    except (IndexError, CodecIOError):
        return None, {}
    done = {}
    for line in lines[1:]:
        try:
            entry = load_json(line, where, "journal line")
            done[entry["file"]] = entry
        except (CodecIOError, KeyError, TypeError):
            break  # killed mid-line: later lines cannot exist
    return header, done


def append_journal(path: str, obj: Mapping[str, Any]) -> None:
    """One line, fsynced: after a kill, the journal holds every shard reported done."""
    with open(path, "a") as f:
        f.write(json.dumps(obj, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def still_good(folder: str, entry: Mapping[str, Any]) -> bool:
    """The shard file a journal entry names (and its record index, if it has one) is
    still there with its size and sha256."""
    files = [entry, *([entry["index"]] if "index" in entry else [])]
    try:
        return all(
            sha256_file(os.path.join(folder, f["file"])) == (f["bytes"], f["sha256"]) for f in files
        )
    except (OSError, KeyError, TypeError):
        return False


def cast_snapshot(stats: Mapping[str, CastStats]) -> dict[str, list[float]]:
    """Each field's largest absolute and relative cast error and clipped count so far."""
    return {n: [s.max_abs_error, s.max_rel_error, s.clipped] for n, s in stats.items()}


def largest_casts(
    parts: list[Mapping[str, CastStats] | Mapping[str, Any] | None],
) -> dict[str, CastStats]:
    """The largest of cast statistics and :func:`cast_snapshot` s (of a journal): maxima,
    the same in any order and over any runs (a count would not be: a snapshot may
    include records of shards another holds)."""
    out: dict[str, CastStats] = {}
    for part in parts:
        for name, value in (part or {}).items():
            err, rel, clipped = (
                (value.max_abs_error, value.max_rel_error, value.clipped)
                if isinstance(value, CastStats)
                else value
            )
            s = out.setdefault(name, CastStats())
            s.max_abs_error = max(s.max_abs_error, float(err))
            s.max_rel_error = max(s.max_rel_error, float(rel))
            s.clipped = max(s.clipped, int(clipped))
    return out
