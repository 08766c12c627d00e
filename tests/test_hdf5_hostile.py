"""Foreign HDF5 files in hostile or unusual forms (issue 26): record indexes in
errors, root-level datasets, declared-size and chunk bombs, many tiny fields,
enum, byte-order and PyTables text. Files are written by h5py (and zarr) directly."""

from __future__ import annotations

import h5py

from dstore.api.verify import check


def test_verify_names_the_absolute_record_of_invalid_utf8(tmp_path, features):
    # failed before: verify re-read the failing range one record at a time and said "record 0"
    path = str(tmp_path / "text.h5")
    x, _ = features
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("s", (4,), dtype=h5py.string_dtype("utf-8"))
        ds[0], ds[1], ds[2], ds[3] = "a", "b", b"\xff\xfe", "d"
        f["x"] = x[:4]
    report = check(path)
    assert not report.ok
    bad = [r.detail for r in report.results if not r.ok]
    assert "record 2 fails" in bad[0]
    assert "'/s', record 2: invalid UTF-8" in bad[0]
