"""The resume journal of a sharded output being built.

:mod:`dstore.engine.run` keeps it in the temporary folder of a local
output: a JSON header (everything that fixes the output's bytes), then one
line per finished shard with its size and sha256, each fsynced. After a kill
the journal holds every shard reported done; a torn last line is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..bounded_json import load_json
from ..errors import CodecIOError
from ..fs import sha256_file

__all__ = ["JOURNAL", "append_journal", "read_journal", "still_good"]

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
