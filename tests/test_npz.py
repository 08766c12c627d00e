"""npz specifics: streaming reads of compressed and stored members, key layouts, np.load compatibility."""

from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np
import pytest

import dstore
from dstore.errors import CodecIOError
from dstore.testing import assert_datasets_equal, read_all


def _load(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("writer", [np.savez, np.savez_compressed])
def test_reads_numpy_written_files_in_small_batches(tmp_path, tiles, writer):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    writer(src, x_train=x[:50], y_train=y[:50], x_val=x[50:], y_val=y[50:])
    with dstore.open(src) as ds:
        assert set(ds) == {"train", "val"}
        batches = list(ds["train"].iter_batches(batch_rows=7))
        assert [len(b["x"]) for b in batches] == [7] * 7 + [1]
        np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), x[:50])
        np.testing.assert_array_equal(ds["val"]["y"][3:], y[53:])


def test_written_npz_is_plain_numpy_and_compressed(tmp_path, tiles):
    x, y = tiles
    out = str(tmp_path / "out.npz")
    dstore.save({"x_train": x, "y_train": y}, out)
    loaded = _load(out)
    np.testing.assert_array_equal(loaded["x_train"], x)
    np.testing.assert_array_equal(loaded["y_train"], y)
    with zipfile.ZipFile(out) as z:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
        assert sum(i.compress_size for i in z.infolist()) < x.nbytes


def test_parallel_deflate_output_equals_input_at_every_level(tmp_path, tiles):
    x, _ = tiles
    for level in (1, 6, 9):
        out = str(tmp_path / f"l{level}.npz")
        dstore.save({"x": x}, out, level=level, workers=2)
        np.testing.assert_array_equal(_load(out)["x"], x)
        with zipfile.ZipFile(out) as z:
            assert z.testzip() is None


def test_key_layouts(tmp_path):
    src = str(tmp_path / "k.npz")
    np.savez(
        src,
        **{
            "train/a": np.arange(3),
            "train/b": np.ones(3),
            "test/a": np.arange(2),
            "test/b": np.ones(2),
        },
    )
    with dstore.open(src) as ds:
        assert set(ds) == {"train", "test"} and set(ds["train"]) == {"a", "b"}
    out = str(tmp_path / "k2.npz")
    dstore.convert(src, out)
    assert set(_load(out)) == {"train/a", "train/b", "test/a", "test/b"}

    plain = str(tmp_path / "plain.npz")
    np.savez(plain, features=np.ones((4, 3)), row=np.arange(4))
    with dstore.open(plain) as ds:
        assert list(ds) == ["data"] and set(ds["data"]) == {"features", "row"}


def test_fortran_order_member(tmp_path):
    arr = np.asfortranarray(np.arange(60, dtype=np.float32).reshape(10, 6))
    src = str(tmp_path / "f.npz")
    np.savez(src, x=arr)
    assert_datasets_equal({"data": {"x": np.ascontiguousarray(arr)}}, read_all(src))


def test_crc_error_in_member_is_reported(tmp_path):
    src = str(tmp_path / "c.npz")
    np.savez(src, x=np.arange(1000, dtype=np.int64))
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    pos = raw.index(np.arange(1000, dtype=np.int64)[500:501].tobytes())
    raw[pos] ^= 0xFF
    with open(src, "wb") as f:
        f.write(raw)
    with dstore.open(src) as ds, pytest.raises(CodecIOError, match="CRC"):
        ds["data"].read()


def test_non_npy_member_refused(tmp_path):
    src = str(tmp_path / "odd.npz")
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("notes.txt", "hello")
    with pytest.raises(dstore.SchemaError, match=r"notes\.txt"):
        dstore.open(src)


def test_hdf5_paths_become_npz_keys(tmp_path):
    src = str(tmp_path / "a.h5")
    h5py = pytest.importorskip("h5py")
    with h5py.File(src, "w") as f:
        f["train/x"] = np.arange(5)
    out = str(tmp_path / "a.npz")
    dstore.convert(src, out)
    assert set(_load(out)) == {"train/x"}


def _stored_kinds_file(path: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    arrays = {
        "x_train": rng.integers(0, 256, (97, 5, 3), dtype=np.uint8),
        "y_train": rng.standard_normal(97).astype(">f8"),  # big-endian, 8-byte rows
        "k_train": np.arange(97, dtype=np.int16) * 3 - 50,  # 2-byte rows: offsets off the page
        "s_train": np.array([f"r{i}" * (i % 4) for i in range(97)]),
    }
    np.savez(path, **arrays)
    return arrays


@pytest.mark.parametrize("mapped", [True, False])
def test_partial_reads_of_a_stored_member_equal_np_load(tmp_path, monkeypatch, mapped):
    """Ranges not covering a whole stored member are memory-mapped (or, when mapping is not
    possible, read with plain seeks): the same values, element by element, either way."""
    from dstore.codecs.npz import NpzReader

    src = str(tmp_path / "s.npz")
    arrays = _stored_kinds_file(src)
    if not mapped:
        monkeypatch.setattr(NpzReader, "_map_stored", lambda self, m, offset, length: None)
    finishes = []
    real_finish = NpzReader._finish
    monkeypatch.setattr(
        NpzReader, "_finish", lambda self, *a: finishes.append(1) or real_finish(self, *a)
    )
    with dstore.open(src) as ds:
        for start, stop, rows in [(0, 10, 3), (1, 97, 7), (50, 97, 64), (96, 97, 1), (13, 14, 5)]:
            batches = list(ds["train"].iter_batches(start=start, stop=stop, batch_rows=rows))
            assert sum(len(b["x"]) for b in batches) == stop - start
            for key in ("x", "y", "k"):
                got = np.concatenate([b[key] for b in batches])
                np.testing.assert_array_equal(got, arrays[f"{key}_train"][start:stop])
            strings = [s for b in batches for s in b["s"].to_str_list()]
            assert strings == list(arrays["s_train"][start:stop])
    # a partial read to a member's end never reads on through the file looking for a CRC
    assert not finishes


def test_mapped_rows_are_private_copies_of_the_file(tmp_path):
    """Mapped rows are writeable (torch takes them without a copy) but copy-on-write: a write
    changes neither the file nor what a later read of the same records gives."""
    src = str(tmp_path / "s.npz")
    arrays = _stored_kinds_file(src)
    with open(src, "rb") as f:
        before = f.read()
    with dstore.open(src) as ds:
        (batch,) = ds["train"].iter_batches(start=5, stop=20, fields=["x"])
        assert batch["x"].flags.writeable
        batch["x"][:] = 0
        (again,) = ds["train"].iter_batches(start=5, stop=20, fields=["x"])
        np.testing.assert_array_equal(again["x"], arrays["x_train"][5:20])
    with open(src, "rb") as f:
        assert f.read() == before


@pytest.mark.parametrize("isal_crc", [True, False])
def test_whole_reads_of_stored_members_skip_zipfile_and_keep_the_crc(
    tmp_path, monkeypatch, isal_crc
):
    """A whole read of a stored member fills the rows' buffer from the plain file (no
    zipfile read, whose copies held the GIL) with the same values as np.load, and still
    checks the member's CRC-32 (zlib's or ISA-L's: the same values), also when the
    damage is in the last byte."""
    from dstore.codecs.npz import members as npz_reader

    if not isal_crc:
        monkeypatch.setattr(npz_reader, "crc32_function", lambda: zlib.crc32)
    src = str(tmp_path / "s.npz")
    arrays = _stored_kinds_file(src)
    zip_reads = []
    real_read = zipfile.ZipExtFile.read
    with dstore.open(src) as ds:
        monkeypatch.setattr(  # after the members' headers were read
            zipfile.ZipExtFile, "read", lambda self, *a: zip_reads.append(1) or real_read(self, *a)
        )
        for rows in (7, 97, 1000):
            batches = list(ds["train"].iter_batches(batch_rows=rows, fields=["x", "y", "k"]))
            for key in ("x", "y", "k"):
                got = np.concatenate([b[key] for b in batches])
                np.testing.assert_array_equal(got, arrays[f"{key}_train"])
                assert got.dtype == arrays[f"{key}_train"].dtype.newbyteorder("=")
    assert not zip_reads
    big = np.arange(300_000, dtype=np.int64)  # larger than the header read at open
    np.savez(src, y=big)
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    last = raw.index(big[-1:].tobytes()) + 7  # the last byte of the last record
    raw[last] ^= 0x01
    with open(src, "wb") as f:
        f.write(raw)
    with dstore.open(src) as ds, pytest.raises(CodecIOError, match=r"field 'y'.*CRC"):
        list(ds["data"].iter_batches(batch_rows=100_000))


def test_stored_member_damage_is_reported_as_before(tmp_path):
    """A whole read still checks the member's CRC-32 (zipfile); a file truncated after it was
    opened gives a clear error on a partial read (the range is not mapped), not a SIGBUS."""
    src = str(tmp_path / "c.npz")
    np.savez(src, x=np.arange(1000, dtype=np.int64))
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    pos = raw.index(np.arange(1000, dtype=np.int64)[500:501].tobytes())
    raw[pos] ^= 0xFF
    with open(src, "wb") as f:
        f.write(raw)
    with dstore.open(src) as ds:
        with pytest.raises(CodecIOError, match="CRC"):
            list(ds["data"].iter_batches(batch_rows=100))
        # a partial read has never covered the CRC: the damaged value comes back as stored
        (part,) = ds["data"].iter_batches(start=400, stop=600)
        assert part["x"][100] != 500 and part["x"][99] == 499
        os.truncate(src, pos - 8 * 100)  # records from 400 on are gone
        with pytest.raises(CodecIOError, match="truncated: data ends at record 400"):
            list(ds["data"].iter_batches(start=300, stop=600))


def _npz_with_header(path: str, descr: str, shape: tuple[int, ...], data: bytes = b"", **zip_kw):
    import io

    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "w", **zip_kw) as z:
        z.writestr("x.npy", buf.getvalue() + data)
    return path


# Headers are claims (found by a hostile-input pass): each of these made
# `dstore convert` walk 10**18 records, allocate gigabytes, or inflate a bzip2
# bomb before reading one header byte. Each is now one line and exit 2.
_CLAIMS = {
    "shape overflowing 64 bits": ("<f8", (2**62, 2**62), "claims shape"),
    "more data than the member": ("<f8", (1000, 3), "claims shape"),
    "zero-byte strings": ("|S0", (10**15,), "zero bytes per element"),
    "zero-byte text": ("<U0", (10**15,), "zero bytes per element"),
    "empty records without end": ("<f8", (10**18, 0), "empty records is not data"),
    "empty ragged values": ("<f8", (3 * 2**44, 0), "empty records is not data"),
}


@pytest.mark.parametrize("case", list(_CLAIMS))
def test_a_header_claiming_what_the_member_does_not_hold_is_refused(tmp_path, case):
    descr, shape, message = _CLAIMS[case]
    src = _npz_with_header(str(tmp_path / "evil.npz"), descr, shape, b"\0" * 64)
    for call in (dstore.info, lambda p: dstore.convert(p, str(tmp_path / "o.zarr"))):
        with pytest.raises(CodecIOError, match=message):
            call(src)
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_member_compressed_other_than_numpy_does_is_refused(tmp_path, method):
    """zipfile inflates a whole bzip2/lzma block per read with no output limit: a 4 kB
    member unpacked gigabytes before its header was read. numpy writes stored or
    deflated members only."""
    src = _npz_with_header(str(tmp_path / "b.npz"), "|u1", (4,), b"\1\2\3\4", compression=method)
    with pytest.raises(CodecIOError, match=f"key 'x': compressed with zip method {method}"):
        dstore.info(src)
    plain = _npz_with_header(str(tmp_path / "ok.npz"), "|u1", (4,), b"\1\2\3\4")
    np.testing.assert_array_equal(read_all(plain)["data"]["x"], [1, 2, 3, 4])


def test_object_member_records_of_numpys_maximum_dimensions_are_refused(tmp_path):
    """np.savez of 64-d records (numpy's maximum): stacking them adds a 65th axis, and
    `dstore info` printed numpy's IndexError traceback (found by a hostile-input pass)."""
    records = np.empty(2, dtype=object)
    records[0], records[1] = np.zeros((1,) * 64), np.zeros((1,) * 64)
    src = str(tmp_path / "deep.npz")
    np.savez(src, y=records)
    with pytest.raises(dstore.errors.SchemaError, match="record 0: 64 dimensions"):
        dstore.info(src)
    records[0], records[1] = np.zeros((1,) * 63), np.ones((1,) * 63)
    np.savez(src, y=records)
    assert dstore.info(src).schema.splits["data"].count == 2


@pytest.mark.parametrize("start", [0, 1])
def test_many_stored_fields_read_side_by_side_hold_no_descriptor_each(tmp_path, start):
    """A split's fields stream side by side: 600 stored members read (whole, then from
    record 1 without mapping) under a limit of 200 open files. Failed before: the whole
    reads opened the file once per member and kept it ('Too many open files')."""
    import subprocess
    import sys
    import textwrap

    src = str(tmp_path / "many.npz")
    values = np.arange(600 * 3, dtype="f8").reshape(600, 3)
    np.savez(src, **{f"f{i}": values[i] for i in range(600)})
    code = textwrap.dedent(
        f"""
        import resource
        import numpy as np
        import dstore
        from dstore.codecs.npz import NpzReader
        NpzReader._map_stored = lambda self, m, offset, length: None
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
        with dstore.open({src!r}) as ds:
            (batch,) = ds["data"].iter_batches(start={start}, batch_rows=10)
            print(sum(float(batch[f"f{{i}}"].sum()) for i in range(600)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) == values[:, start:].sum()
