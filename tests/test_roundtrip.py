"""The shared suite over every registered codec: registering a codec is what tests it."""

from __future__ import annotations

import pytest

import dstore
from dstore.registry import codec_names
from dstore.testing import CodecSuite


class TestRegisteredCodecs(CodecSuite):
    @pytest.fixture(params=codec_names())
    def codec(self, request: pytest.FixtureRequest) -> dstore.abc.Codec:
        try:
            return dstore.get_codec(request.param)
        except dstore.MissingDependencyError as e:
            pytest.skip(str(e))
