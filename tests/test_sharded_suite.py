"""The shared sharded suite over every registered sharded codec: registering a format
with ``sharded = True`` is what tests its resume, manifest damage, Dask, cache and
record index (``dstore.testing.ShardedCodecSuite``)."""

from __future__ import annotations

import pytest

import dstore
from dstore.testing import ShardedCodecSuite, sharded_codec_names


class TestShardedCodecs(ShardedCodecSuite):
    @pytest.fixture(params=sharded_codec_names())
    def codec(self, request: pytest.FixtureRequest) -> dstore.abc.Codec:
        try:
            return dstore.get_codec(request.param)
        except dstore.MissingDependencyError as e:
            pytest.skip(str(e))
