"""Where a conversion's records come from: a path, URL, glob, folder or ``@list`` opened as
a reader, and the reader wrappers that sit between a format's reader and its users.

- :mod:`~dstore.sources.opening`: from a path (or URL) and an optional format name
  to a codec and an open reader (:func:`open_reader`, :func:`open_source`);
- :mod:`~dstore.sources.many_files`: many files read as one dataset (globs,
  folders, ``@list``), the files named in a source field.

Below :mod:`dstore.api` and :mod:`dstore.sharding.run` (a Dask worker writing a
shard opens its source itself), above the formats: imports point down only.
"""

from __future__ import annotations

from .opening import check_local_input, codec_for, open_reader, open_source, size_or_zero

__all__ = ["check_local_input", "codec_for", "open_reader", "open_source", "size_or_zero"]
