"""The conversion engine: what turns a reader and a codec into an output.

- :mod:`.cast`: the one loop every write runs (read a record range, check it,
  apply the dtype policy) and the single-writer path;
- :mod:`.dtypes`: the dtype policies (``keep``, ``float16``, ``round:N``, ``int8``...)
  and their overflow rules;
- :mod:`.job`: one conversion's settings as one frozen object;
- :mod:`.run`: the sharded runner (local threads, encoder processes, Dask) and
  resume, with its journal (:mod:`.journal`);
- :mod:`.rawsize`: the decoded size of what was read, for the summary.

The engine sits above the formats and the container and below the sources,
readers and API: it is handed a reader and a codec, and never opens a source or
names a format itself (a worker reopens the source through the function the API
put in :class:`~dstore.engine.job.SourceRef`).
"""
