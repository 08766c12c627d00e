"""The ``grain`` way of bench_shuffle.py: Grain's global shuffle over dstore's
ArrayRecord shards, each record decoded by dstore's own Example decoder.

Run as its own process (``python _grain_way.py PATH WORKERS BATCH OUT.npy``; timed
after its imports): a process that has imported ``array_record`` starts dstore's
ArrayRecord DataLoader workers with 'spawn' (its threads do not survive a fork), so
bench_shuffle.py's own process must never import it."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any

import grain.python as gp
import numpy as np


class _ExampleDecoder(gp.MapTransform):
    """A Grain MapTransform decoding one serialized Example of
    dstore's ArrayRecord split ``train`` with dstore's own decoder."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._spec: Any = None

    def map(self, rec: bytes) -> dict[str, Any]:
        from dstore.codecs.example.fields import decode_examples

        if self._spec is None:
            from dstore.sources.opening import open_reader

            with open_reader(self.path) as reader:
                self._spec, self._encs = reader.split("train"), reader.encodings["train"]
        fields = self._spec.fields
        out: dict[str, Any] = {
            n: np.empty((1, *f.shape), f.dtype) if f.dense else [None] for n, f in fields.items()
        }
        decode_examples(self._spec, self._encs, list(fields), [(rec, self.path)], out, 0)
        return {n: v[0] for n, v in out.items()}


def grain_epoch(path: str, workers: int, batch: int) -> dict:
    """One epoch of Grain's global shuffle over dstore's ArrayRecord shards."""
    t0 = time.perf_counter()
    source = gp.ArrayRecordDataSource(sorted(glob.glob(os.path.join(path, "*.array_record-*"))))
    decode = _ExampleDecoder(path)
    loader = gp.DataLoader(
        data_source=source,
        sampler=gp.IndexSampler(len(source), gp.NoSharding(), shuffle=True, num_epochs=1, seed=1),
        operations=[decode, gp.Batch(batch)],
        worker_count=workers,
    )
    keys, first = [], None
    for b in loader:
        if first is None:
            first = time.perf_counter() - t0
        keys.append(np.asarray(b["k"]).reshape(-1))
    return {"seconds": time.perf_counter() - t0, "first": first, "order": np.concatenate(keys)}


if __name__ == "__main__":
    path, workers, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    res = grain_epoch(path, workers, batch)
    np.save(out, res.pop("order"))
    print(json.dumps(res))
