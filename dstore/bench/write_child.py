"""One benchmark cell's writes, in a process of their own.

``python -m dstore.bench.write_child REQUEST.json`` converts the bench's source
once untimed (the warm-up: imports, allocator and page-cache state) and then
``repeats`` timed times, and writes ``{"write_s": [...], "peak_rss": bytes}``
(or ``{"error": "Type: message"}``) to the request's ``result`` path. A fresh
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


def run(request: dict[str, Any]) -> dict[str, Any]:
    from .. import api
    from ..engine.dtypes import parse_policy
    from ..errors import DstoreError
    from ..output import remove_path

    out = request["out"]
    times: list[float] = []
    try:
        _register(request["format"], request.get("codec_target"))
        policy = parse_policy(request["dtype"])
        for i in range(1 + max(1, int(request["repeats"]))):
            if i:
                remove_path(out)
            t = time.perf_counter()
            api.convert(
                request["source"],
                out,
                to=request["format"],
                dtype=policy,
                options=request["options"],
            )
            if i:  # the first write is the warm-up
                times.append(time.perf_counter() - t)
    except DstoreError as e:
        return {"error": f"{type(e).__name__}: {e}", "peak_rss": _peak_rss_bytes()}
    return {"write_s": times, "peak_rss": _peak_rss_bytes()}


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
