"""What the tests of :class:`~dstore.testing.ShardedCodecSuite` share: the ``codec``
fixture to override, shard sizes that cut the suite's data into a few shards of any
format, sources, outputs, manifests and the temporaries a run leaves."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
import pytest

from .. import api
from ..abc import Codec
from ..sharding import MANIFEST
from .suite import codec_options

__all__ = ["SHARD_RECORDS", "ShardedSuiteBase", "shard_options", "torch_dataset"]

#: records per shard of the suite's outputs: a few shards of its data, fast to write
SHARD_RECORDS = 20


def shard_options(codec: Codec, data: Any, records: int = SHARD_RECORDS) -> dict[str, Any]:
    """``codec``'s options (as ``convert`` takes them) with ``shard_mb`` set so that the
    shards of ``data``'s largest split hold ``records`` records each (one shard when it
    has no more), found from the format's own size plan (:meth:`Codec.plan_shards`):
    every format then writes a few shards of the suite's small data, whatever its
    records' encoded size."""
    reader = api.ArrayReader(data)
    split = max(reader.schema.splits.values(), key=lambda s: s.count)
    options = changed_options(codec)
    if records >= split.count:
        return {**options, "shard_mb": "1024"}

    def sample(name: str, n: int) -> Any:
        return next(reader.iter_batches(name, stop=n, batch_rows=max(1, n)))

    def per_shard(target: float) -> int:
        sized = type(codec).from_config({**codec.get_config(), "shard_mb": repr(target / 2**20)})
        plan = sized.plan_shards(reader.schema, sample) or []
        return next(s.records for s in plan if s.split == split.name)

    # records per shard is the target over the mean encoded size (rounded down): start
    # from the raw size, then aim between the counts the plan gives
    target = (records + 0.5) * max(1.0, split.record_bytes)
    for _ in range(12):
        got = per_shard(target)
        if got == records:
            return {**options, "shard_mb": repr(target / 2**20)}
        if 1 < got < split.count:
            target = (records + 0.5) * target / (got + 0.5)
        else:
            target = target / 4 if got >= split.count else target * 4
    raise AssertionError(f"{codec.name}: no shard_mb gives {records} records per shard")


def torch_dataset(path: str, split: str, **kwargs: Any) -> Any:
    """:func:`dstore.to_torch` (torch imported only by the tests that read with it)."""
    from ..readers.torch import to_torch

    return to_torch(path, split, **kwargs)


def changed_options(codec: Codec) -> dict[str, Any]:
    """The options of ``codec`` that differ from its class's defaults, as text."""
    defaults = codec_options(type(codec)())
    return {k: v for k, v in codec_options(codec).items() if defaults.get(k) != v}


class ShardedSuiteBase:
    """The fixture and helpers of the sharded suite's tests."""

    @pytest.fixture
    def codec(self) -> Codec:  # pragma: no cover - overridden
        raise NotImplementedError

    @staticmethod
    def out(tmp_path: Any, codec: Codec, stem: str = "out") -> str:
        return os.path.join(str(tmp_path), stem + codec.extensions[0])

    @staticmethod
    def source(tmp_path: Any, data: Any, name: str = "src.npz") -> str:
        """``data`` saved as an npz file to convert from (a source any process can open)."""
        path = os.path.join(str(tmp_path), name)
        api.save(data, path)
        return path

    @staticmethod
    def convert(codec: Codec, src: str, dst: str, options: Any, **kwargs: Any) -> Any:
        return api.convert(src, dst, to=codec.name, options=dict(options), **kwargs)

    @staticmethod
    def cli_argv(codec: Codec, src: str, dst: str, options: Any, *extra: str) -> list[str]:
        """``dstore convert`` of ``src`` to ``dst`` in ``codec``'s format, as typed."""
        pairs = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
        return ["convert", src, dst, "--to", codec.name, *pairs, *extra]

    @staticmethod
    def manifest(path: str) -> dict[str, Any]:
        with open(os.path.join(path, MANIFEST)) as f:
            result: dict[str, Any] = json.load(f)
            return result

    @staticmethod
    def write_manifest(path: str, manifest: dict[str, Any]) -> None:
        with open(os.path.join(path, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)

    @classmethod
    def shard_edges(cls, path: str, split: str) -> list[int]:
        """Where each shard of ``split`` starts, then the split's record count."""
        counts = [s["records"] for s in cls.manifest(path)["splits"][split]["shards"]]
        return [0, *np.cumsum(counts).tolist()]

    @staticmethod
    def leftovers(dst: str) -> list[str]:
        """The temporaries (``.<name>.dstore-*``) a run of ``dst`` left beside it."""
        parent, name = os.path.split(dst)
        return sorted(f for f in os.listdir(parent) if f.startswith(f".{name}.dstore-"))

    @staticmethod
    def option_names(codec: Codec) -> set[str]:
        options = type(codec).Options
        return (
            {f.name for f in dataclasses.fields(options)}
            if dataclasses.is_dataclass(options)
            else set()
        )
