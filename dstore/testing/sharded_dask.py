"""A sharded output written by Dask workers (``client=``): byte for byte what this
process writes, progress per shard adding up to the records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .. import api
from ..abc import Codec
from .checks import file_digests
from .data import sharded_data
from .sharded_base import ShardedSuiteBase, shard_options

__all__ = ["DaskTests"]


class DaskTests(ShardedSuiteBase):
    """Dask (a mixin of the sharded suite)."""

    @pytest.fixture(scope="class")
    @classmethod
    def dask_client(cls) -> Iterator[Any]:
        """Two Dask workers on threads of this process (a format defined in a test
        module needs no import on them); the dashboard on a free port."""
        distributed = pytest.importorskip("distributed")
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            yield client

    def test_dask_writes_the_bytes_of_a_local_run(
        self, codec: Codec, tmp_path: Any, dask_client: Any
    ) -> None:
        data = sharded_data()
        src = self.source(tmp_path, data)
        options = shard_options(codec, data)
        local = self.convert(codec, src, self.out(tmp_path, codec, "local"), options)
        seen: list[tuple[int, int]] = []
        dst = self.out(tmp_path, codec, "dask")
        remote = self.convert(
            codec, src, dst, options, client=dask_client, progress=lambda n, t: seen.append((n, t))
        )
        assert file_digests(dst) == file_digests(self.out(tmp_path, codec, "local"))
        assert remote.shards.shards == local.shards.shards >= 5
        assert sum(n for n, _ in seen) == remote.records and {t for _, t in seen} == {
            remote.records
        }
        assert api.check(dst).ok
