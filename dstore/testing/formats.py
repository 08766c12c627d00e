"""Which formats a test runs over, from the registry (never a list of its own), and
a codec registered for the length of a test."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from ..abc import Codec

__all__ = ["parts_options", "registered_codec", "sharded_codec_names", "usable_formats"]


def usable_formats(*, text: bool = False) -> dict[str, str]:
    """Name -> default extension of every registered codec whose dependencies are
    installed (formats that store values as text too with ``text=True``).

    Cross-format tests iterate this, never a list of their own, so registering a
    codec is what puts it through them."""
    from ..registry import available_codecs, default_extension, get_codec_class

    return {
        name: default_extension(name)
        for name, hint in available_codecs().items()
        if hint is None and (text or not get_codec_class(name).stores_text)
    }


def sharded_codec_names() -> list[str]:
    """Every registered codec whose class says ``sharded = True``, plus those whose
    class cannot be imported here (a missing library): the ``codec`` fixture of a
    :class:`~dstore.testing.ShardedCodecSuite` skips those, saying which library."""
    from ..errors import MissingDependencyError
    from ..registry import codec_names, get_codec_class

    names = []
    for name in codec_names():
        try:
            sharded = get_codec_class(name).sharded
        except MissingDependencyError:
            sharded = True  # unknown until installed: shown as a skip, never left out unseen
        if sharded:
            names.append(name)
    return names


def parts_options(name: str, *, shard_mb: float, chunk_mb: float) -> dict[str, str]:
    """Options that cut an output of codec ``name`` into small parts (shards of
    ``shard_mb``, chunks of ``chunk_mb``), so that small test data still spans many
    of them; {} for a format with neither option."""
    from ..registry import get_codec_class

    cls = get_codec_class(name)
    fields = (
        {f.name for f in dataclasses.fields(cls.Options)}
        if dataclasses.is_dataclass(cls.Options)
        else set()
    )
    wanted = {"shard_mb": shard_mb, "chunk_mb": chunk_mb}
    return {key: str(mb) for key, mb in wanted.items() if key in fields}


@contextlib.contextmanager
def registered_codec(cls: type[Codec]) -> Iterator[type[Codec]]:
    """``cls`` registered under ``cls.name`` inside the ``with``, and gone after it
    (whatever was registered under that name before comes back): a codec defined in a
    test module leaves no trace in later tests (``dstore demo`` converts to every
    registered format)."""
    from .. import registry

    registry._load_entry_points()  # loaded now, so that leaving does not drop them
    entry, loaded = registry._entries.get(cls.name), registry._classes.get(cls.name)
    registry.register_codec(cls, clobber=True)
    try:
        yield cls
    finally:
        registry._entries.pop(cls.name, None)
        registry._classes.pop(cls.name, None)
        if entry is not None:
            registry._entries[cls.name] = entry
        if loaded is not None:
            registry._classes[cls.name] = loaded
