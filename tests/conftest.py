from __future__ import annotations

import os

import numpy as np
import pytest

from dstore.demo import photo_tiles
from dstore.testing import photo_features


@pytest.fixture(scope="session")
def tiles() -> tuple[np.ndarray, np.ndarray]:
    """Real-photo tiles (64x64x3 uint8) and one-hot uint8 labels."""
    return photo_tiles(60, 64)


@pytest.fixture(scope="session")
def features() -> tuple[np.ndarray, np.ndarray]:
    return photo_features()


@pytest.fixture
def label_maker_npz(tmp_path, tiles) -> str:
    """A small label-maker style data.npz, uncompressed as label-maker writes it."""
    x, y = tiles
    path = os.path.join(tmp_path, "data.npz")
    np.savez(path, x_train=x[:40], y_train=y[:40], x_test=x[40:50], y_test=y[40:50], x_val=x[50:], y_val=y[50:])
    return path
