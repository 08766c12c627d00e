"""How a documented limit is raised: an environment variable naming a positive integer
wins over the module constant (``DSTORE_MAX_CHUNK_BYTES``, ``DSTORE_MAX_JSON_BYTES``...)."""

from __future__ import annotations

import os

__all__ = ["env_limit"]


def env_limit(name: str, default: int) -> int:
    """The limit in force: the environment variable ``name`` (a positive integer) if it
    is set, else ``default``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"{name} must be a positive integer. Got {text!r} instead.")
    return int(text)
