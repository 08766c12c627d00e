"""Reading Parquet: dstore's folders (manifest), Hub folders, single files of anyone.

:class:`ParquetReader` is a :class:`~dstore.sharding.ShardedDirectoryReader`:
the manifest, the shard list, ``-of-N`` completeness and reading across
shards are the container's. What is Parquet's own:

- records ``lo:hi`` of a shard read only the row groups that hold them
  (``ds["train"]["x"][i]`` reads one row group of one column);
- record ranges for training workers follow row groups (about
  ``target_bytes`` of them each), so a worker never reads a row group twice;
- a folder without a manifest is read as the Hub lays it out: the
  ``*.parquet`` files in it, else in its ``data/`` folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

from ... import fs
from ...errors import CodecIOError
from ...model.schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile
from ..base import RANGE_BYTES
from .columns import from_arrow
from .features import Storage
from .infer import infer_fields, open_parquet
from .writer import FORMAT_ID

__all__ = ["ParquetReader"]


class ParquetReader(ShardedDirectoryReader):
    format_id = FORMAT_ID
    codec_name = "parquet"
    file_pattern = r"\.parquet$"

    def __init__(self, path: str, workers: int = 0, drop_unmapped: bool = False) -> None:
        self.encodings: dict[str, dict[str, Storage]] = {}
        self.drop_unmapped = drop_unmapped
        self._notes: list[str] = []
        super().__init__(path, workers)
        self.notes = self._notes

    def load_manifest_head(self, manifest: dict[str, Any], where: str) -> None:
        try:
            self.encodings = {
                split: {name: Storage.from_json(s) for name, s in fields.items()}
                for split, fields in manifest["fields"].items()
            }
            for split, spec in self.schema.splits.items():
                if set(self.encodings[split]) != set(spec.fields):
                    raise KeyError(f"fields of split {split!r}")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CodecIOError(f"{where}: unreadable manifest: {e}") from None

    def find_files(self, path: str) -> list[str]:
        """A folder's ``*.parquet`` files, else those of its ``data/`` (the Hub's layout)."""
        data = fs.join(path, "data")
        if fs.isdir(path) and fs.isdir(data):
            mine = [f for f in fs.listdir(path) if f.endswith(".parquet")]
            if not mine:
                return super().find_files(data)
        return super().find_files(path)

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        fields, self.encodings[split], rows, notes = infer_fields(paths, self.drop_unmapped)
        self._notes.extend(notes)
        return fields, [ShardFile(p, n) for p, n in zip(paths, rows, strict=True)]

    def read_shard(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        """Records ``lo:hi`` of ``shard``: only the row groups that hold them are read."""
        storages = self.encodings[spec.name]
        pf = open_parquet(shard.path)
        try:
            meta = pf.metadata
            self.check_count(shard, meta.num_rows)
            first = 0
            for g in range(meta.num_row_groups):
                n = meta.row_group(g).num_rows
                a, b = max(lo, first), min(hi, first + n)
                if a < b:
                    table = self._row_group(pf, shard.path, g, names)
                    for s in range(a, b, rows):
                        e = min(b, s + rows)
                        part = table.slice(s - first, e - s)
                        where = f"{shard.path}: split {spec.name!r}"
                        yield {
                            name: from_arrow(
                                spec.fields[name],
                                storages[name],
                                part.column(name),
                                f"{where}, field {name!r}",
                                s,
                                pool,
                            )
                            for name in names
                        }
                first += n
        finally:
            pf.close()

    @staticmethod
    def _row_group(pf: Any, path: str, g: int, names: list[str]) -> Any:
        import pyarrow as pa

        try:
            return pf.read_row_group(g, columns=names)
        except (pa.ArrowException, OSError) as e:
            reason = " ".join(str(e).split())  # pyarrow's text can span lines
            raise CodecIOError(f"{path}: row group {g} does not read: {reason}") from None

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Whole row groups, gathered to about ``target_bytes`` (uncompressed) per range."""
        self.split(split)
        ranges: list[tuple[int, int]] = []
        first = 0
        for shard in self.shards[split]:
            pf = open_parquet(shard.path)
            try:
                groups = [pf.metadata.row_group(g) for g in range(pf.metadata.num_row_groups)]
            finally:
                pf.close()
            start, size = first, 0
            for g in groups:
                first += g.num_rows
                size += g.total_byte_size
                if size >= target_bytes:
                    ranges.append((start, first))
                    start, size = first, 0
            if first > start:
                ranges.append((start, first))
        return ranges

    def describe(self) -> list[str]:
        lines = []
        for split, shards in self.shards.items():
            groups = 0
            for shard in shards[:1]:
                pf = open_parquet(shard.path)
                groups = pf.metadata.num_row_groups
                pf.close()
            lines.append(f"{split}: {len(shards)} shard(s); first has {groups} row group(s)")
        return lines
