"""One benchmark cell's writes, in a process of their own.

``python -m dstore.bench.write_child REQUEST.json`` runs the request's ``writes`` in
order: each converts a working copy (``source``) to ``out`` ``repeats`` times, timed
(0: once, untimed -- the warm-up that pays imports, allocator and page-cache
state); the output of a write's last run is kept. It writes ``{"writes": [[[wall,
cpu], ...], ...], "peak_rss": bytes}`` (or ``{"error": "Type: message"}``) to the
request's ``result`` path. CPU seconds are this process's and its finished
children's (worker processes), user and system. A fresh
process per cell makes the peak resident set that of this cell's writes (plus
the interpreter and the codec's libraries), not growth over whatever the
parent already held, which printed 0.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time
from typing import Any

__all__ = ["run"]


def _peak_rss_bytes() -> int:
    """This program's peak resident set since it started.

    On Linux, ``ru_maxrss`` keeps the parent's peak across fork + exec, so a big
    parent would show through; ``VmHWM`` belongs to this process image alone.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS: bytes; else KiB


def _register(fmt: str, target: str | None) -> None:
    """A codec the parent registered by hand is registered here too (from its import path)."""
    from ..registry import codec_names, register_codec

    if target is None or fmt in codec_names():
        return
    module, _, attr = target.partition(":")
    register_codec(getattr(importlib.import_module(module), attr), name=fmt)


def _live_descendants_cpu() -> float:
    """CPU seconds of this process's descendants still running (a pool of worker
    processes lives across writes: ``RUSAGE_CHILDREN`` counts a child only once it is
    reaped). Read from ``/proc``; 0 where there is none."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except (OSError, ValueError):
        return 0.0
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in names:
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / ticks
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        kids = [p for p, pp in parent.items() if pp == pid and p not in mine]
        mine.update(kids)
        todo += kids
    return sum(cpu[p] for p in mine)


def _cpu_seconds() -> float:
    """This process's CPU seconds and its descendants' (threads, reaped and live workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + _live_descendants_cpu()
    )


def run(request: dict[str, Any]) -> dict[str, Any]:
    from .. import api
    from ..engine import local as engine_local
    from ..engine.dtypes import parse_policy
    from ..errors import DstoreError
    from ..output import remove_path

    done: list[list[list[float]]] = []
    if request.get("whole_records", 0) >= engine_local.PROCESS_MIN_RECORDS:
        # a sample's parts are written as the whole data would be: in the worker
        # processes a sharded conversion of that many records starts (threads below)
        engine_local.PROCESS_MIN_RECORDS = 1
    try:
        _register(request["format"], request.get("codec_target"))
        policy = parse_policy(request["dtype"])
        for write in request["writes"]:
            times: list[list[float]] = []
            for _ in range(max(1, int(write["repeats"]))):
                remove_path(write["out"])
                t, cpu = time.perf_counter(), _cpu_seconds()
                api.convert(
                    write["source"],
                    write["out"],
                    to=request["format"],
                    dtype=policy,
                    options=request["options"],
                )
                times.append([time.perf_counter() - t, _cpu_seconds() - cpu])
            done.append(times if write["repeats"] else [])
    except DstoreError as e:
        return {"error": f"{type(e).__name__}: {e}", "peak_rss": _peak_rss_bytes()}
    return {"writes": done, "peak_rss": _peak_rss_bytes()}


def main(argv: list[str]) -> int:
    from ..bounded_json import load_json_file

    request = load_json_file(argv[0], "bench request")
    result = run(request)
    tmp = request["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, request["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
