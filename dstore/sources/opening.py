"""From a path (or URL) and an optional format name to a codec and an open reader.

Its own module, below both :mod:`dstore.api` and :mod:`dstore.engine.run`, because a
Dask worker writing one shard opens the source itself: with this here, the
sharded writer needs nothing from the API layer and the imports go one way
(``api`` -> ``shards`` -> ``engine``; ``api`` and ``shards`` -> ``sources``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..abc import Codec, Reader
from ..errors import CodecIOError
from ..model.schema import check_empty_records
from ..output import path_size
from ..registry import get_codec_class, infer_codec
from .drop import DropFields, generic_drop
from .logical import logical_reader
from .versions import at_version

if TYPE_CHECKING:
    from .many_files import MultiReader

__all__ = ["codec_for", "open_reader", "open_source", "size_or_zero"]


def codec_for(path: str, name: str | None, options: Mapping[str, Any] | None) -> Codec:
    """The codec ``name`` (or the one ``path``'s extension names) with ``options``."""
    cls = get_codec_class(name or infer_codec(path))
    # what the path's name implies (x.tfrecords.gz: gzip), unless an option says otherwise
    return cls(**{**cls.path_options(path), **dict(options or {})})


def check_local_input(path: str) -> None:
    """Refuse a missing path, and anything that is neither a file nor a folder: reading a
    FIFO blocks until someone writes to it, a device never ends."""
    # globs, and brace patterns a codec expands itself (webdataset's {000000..000009})
    if "://" in path or any(c in path for c in "*?[{"):
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CodecIOError(f"{path}: no such file or directory") from None
    except OSError as e:
        raise CodecIOError(f"{path}: cannot stat: {e.strerror or e}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise CodecIOError(f"{path}: is {kind}, not a regular file or folder; refusing to read it")


def _open_many(
    path: str,
    format: str | None,
    options: Mapping[str, Any],
    scan_progress: Callable[[int, int], None] | None,
) -> MultiReader | None:
    """A reader over the many files ``path`` names, or None when it names one dataset."""
    if "://" in path or os.path.isfile(path):
        return None  # a file is one dataset: `info x.npz` never imports the multi-file reader
    from . import listing

    if not listing.is_multi(path, format):
        return None
    from . import many_files

    return many_files.open_sources(path, format, options, scan_progress)


def open_source(
    path: str,
    format: str | None,
    options: Mapping[str, Any],
    decode: bool = True,
    scan_progress: Callable[[int, int], None] | None = None,
) -> tuple[Codec, Reader]:
    """The codec and an open reader for the dataset at ``path``; a glob, a folder of files
    or ``@list`` is many files read as one dataset (:mod:`dstore.sources.many_files`), whose
    schemas are read first: ``scan_progress(1, files)`` is called after each file.

    bfloat16 bits and int8 codes read back as numbers; ``decode=False`` gives them as stored."""
    reader: Reader
    options, drop = generic_drop(path, format, options)
    # a reading choice of any format, not a codec option: which version of the dataset
    version = options.get("version")
    options = {k: v for k, v in options.items() if k != "version"}
    multi = _open_many(path, format, options, scan_progress)
    if multi is not None:
        codec, reader = multi.codec, multi
    else:
        check_local_input(path)
        codec = codec_for(path, format, options)
        reader = codec.open_reader(path)
    try:
        reader = at_version(reader, None if version is None else int(version))
        if drop:
            reader = DropFields(reader, drop)
        check_empty_records(reader.schema, path)
    except BaseException:
        reader.close()
        raise
    return codec, logical_reader(reader) if decode else reader


def open_reader(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    decode: bool = True,
    scan_progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> Reader:
    """A codec reader for ``path`` (format from the extension unless given).

    ``decode=False`` gives the values as stored (int8 codes, bfloat16 bits);
    ``version=N`` reads the dataset as it was at version N (:mod:`.versions`);
    ``scan_progress(1, files)`` is called after each file of a many-file source is scanned."""
    return open_source(os.fspath(path), format, options, decode, scan_progress)[1]


def size_or_zero(path: str) -> int:
    """Bytes at ``path``, or 0 where that cannot be known (a URL without listing rights)."""
    try:
        return path_size(path)
    except OSError:
        return 0
