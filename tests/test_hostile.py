"""Hostile inputs of issue #26: each one is one error line naming what it is (exit 2), not
a crash, a memory blow-up or data delivered wrong; nothing is left at the destination."""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

from dstore.cli import main

# ------------------------------------------------------------------------ helpers


def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _deflated_zeros(head: bytes, zeros: int) -> tuple[bytes, int, int]:
    """``head`` then ``zeros`` zero bytes as a raw deflate stream, made without deflating
    them all: a full flush resets the compressor, so one block of zeros, compressed once,
    repeats. Returns (stream, crc32, inflated size)."""
    block = 2**24
    whole, tail = divmod(zeros, block)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    repeated = comp.compress(bytes(block)) + comp.flush(zlib.Z_FULL_FLUSH)
    stream = first + repeated * whole + comp.compress(bytes(tail)) + comp.flush()
    crc = zlib.crc32(head)
    zero_block = bytes(block)
    for _ in range(whole):
        crc = zlib.crc32(zero_block, crc)
    return stream, zlib.crc32(bytes(tail), crc), len(head) + zeros


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(data, zlib.crc32(kind))
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def _png_bomb(side: int) -> bytes:
    """A real PNG: ``side`` x ``side`` black greyscale pixels, every row deflated."""
    raw, _, size = _deflated_zeros(b"", side * (side + 1))
    adler = 1
    block = bytes(2**24)
    for _ in range(size // len(block)):
        adler = zlib.adler32(block, adler)
    adler = zlib.adler32(bytes(size % len(block)), adler)
    idat = b"\x78\xda" + raw + struct.pack(">I", adler)
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _zip(members: list[tuple[str, int, bytes, int, int]], comment: bytes = b"") -> bytes:
    """A zip of (name, method, stored bytes, crc32, inflated size), written byte by byte
    (sizes below 4 GiB: no zip64)."""
    body, directory = b"", b""
    for name, method, data, crc, size in members:
        raw = name.encode()
        fixed = struct.pack("<HHHHHIII", 20, 0, method, 0, 0x21, crc, len(data), size)
        directory += (
            b"PK\x01\x02"
            + struct.pack("<H", 20)
            + fixed
            + struct.pack("<HHHHHII", len(raw), 0, 0, 0, 0, 0, len(body))
            + raw
        )
        body += b"PK\x03\x04" + fixed + struct.pack("<HH", len(raw), 0) + raw + data
    end = struct.pack(
        "<4s4H2LH",
        b"PK\x05\x06",
        0,
        0,
        len(members),
        len(members),
        len(directory),
        len(body),
        len(comment),
    )
    return body + directory + end + comment


def _stored(name: str, data: bytes) -> tuple[str, int, bytes, int, int]:
    return name, 0, data, zlib.crc32(data), len(data)


def _run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------- 1. npz object member inflate bomb

_CLI_UNDER_A_MEMORY_LIMIT = r"""
import os
import resource
import sys

import dstore.api  # the library in, before the limit is measured
import dstore.codecs.npz
from dstore.cli import main

# the address space this process has now, plus 1 GiB
in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (in_use + 2**30, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_an_object_member_inflate_bomb_is_refused_before_inflating(tmp_path) -> None:
    """A 1.5 MB object member of deflated zeros inflates to 1.5 GB: `dstore info` read it
    whole before the restricted unpickler saw a byte (a MemoryError traceback under
    this 1 GiB limit). Its inflated size is bounded from the zip directory first."""
    stream, crc, size = _deflated_zeros(_npy_header("|O", (3,)), 1536 * 2**20)
    path = tmp_path / "bomb.npz"
    path.write_bytes(_zip([_stored("x.npy", _npy(np.arange(3))), ("y.npy", 8, stream, crc, size)]))
    assert path.stat().st_size < 2 * 2**20
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run(
        [sys.executable, "-c", _CLI_UNDER_A_MEMORY_LIMIT, "info", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = _one_line(done.stderr)
    assert line.startswith(f"CodecIOError: {path}: key 'y': the pickled object array inflates to")
    assert "MAX_OBJECT_BYTES" in line


def test_an_object_member_below_the_bound_still_loads_streaming(tmp_path) -> None:
    """The streamed unpickler reads what np.savez writes, deflated or stored, and a
    damaged byte is still caught (by the member's CRC-32 at its end)."""
    import dstore

    labels = [np.arange(n, dtype=np.int64) for n in (3, 0, 5)]
    for save in (np.savez, np.savez_compressed):
        src = tmp_path / f"{save.__name__}.npz"
        obj = np.empty(3, dtype=object)
        obj[:] = labels
        save(src, x=np.arange(3), y=obj)
        with dstore.open(str(src)) as ds:
            got = ds[next(iter(ds))]["y"][:]
        assert [list(v) for v in got] == [list(v) for v in labels]
    blob = bytearray((tmp_path / "savez.npz").read_bytes())
    at = blob.index(labels[2].tobytes())
    blob[at] ^= 0x40  # still a valid pickle: only the CRC-32 can tell
    (tmp_path / "damaged.npz").write_bytes(bytes(blob))
    with pytest.raises(dstore.DstoreError, match=r"damaged.npz: key 'y': .*CRC"):
        dstore.open(str(tmp_path / "damaged.npz")).close()


# ------------------------------------------------------- 2. duplicate zip member names


@pytest.mark.parametrize("command", ["info", "verify", "convert"])
def test_duplicate_member_names_are_refused_by_name(tmp_path, capsys, command) -> None:
    """zipfile writes (with a warning) and reads two members of one name: the first was
    dropped without a word and `verify` passed."""
    path = tmp_path / "dup.npz"
    path.write_bytes(
        _zip(
            [
                _stored("x.npy", _npy(np.arange(4))),
                _stored("x.npy", _npy(np.arange(4) * 2)),
            ]
        )
    )
    extra = [str(tmp_path / "out.zarr")] if command == "convert" else []
    code, _, err = _run_cli(capsys, command, str(path), *extra)
    assert code == 2
    assert _one_line(err) == (
        f"CodecIOError: {path}: two zip members are named 'x.npy'; "
        "which one holds the data is ambiguous"
    )
    assert sorted(os.listdir(tmp_path)) == ["dup.npz"]  # nothing at the destination


# ---------------------------------------------------------- 3. damaged dstore schema


@pytest.fixture
def quantized_npz(tmp_path) -> tuple[str, bytes]:
    """A dstore npz of int8 codes (a scale and offset in the schema), and its zip comment."""
    import dstore

    x = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    src, out = str(tmp_path / "f.npz"), str(tmp_path / "q8.npz")
    dstore.save({"x_train": x, "y_train": np.arange(10)}, src)
    dstore.convert(src, out, dtype="int8")
    with zipfile.ZipFile(out) as z:
        return out, z.comment


def _with_comment(path: str, comment: bytes) -> None:
    with zipfile.ZipFile(path, "a") as z:
        z.comment = comment


def _edited(comment: bytes, old: bytes, new: bytes) -> bytes:
    """``comment`` edited by hand as a schema without digest (dstore before it) would be:
    a digest catches any edit (tests below); these check what is checked beyond it."""
    assert old in comment
    return re.sub(rb', "digest": "[0-9a-f]+"', b"", comment.replace(old, new))


def _lose_byte(comment: bytes, what: bytes) -> bytes:
    at = comment.index(what)
    return comment[:at] + comment[at + 1 :]


_DAMAGE = {
    "prefix": (lambda c: _lose_byte(c, b"schema"), "is damaged"),
    "quote": (lambda c: _lose_byte(c, b'"precision'), "is damaged"),
    "last brace": (lambda c: c[:-1], "is damaged"),
    "lying dtype": (
        lambda c: _edited(c, b'"|i1"', b'"<i2"'),
        "says split 'train', field 'x' is int16 (4,); key 'x_train' holds int8 (10, 4)",
    ),
    "field with no member": (
        lambda c: _edited(
            c, b'"y": {', b'"z": {"dtype": "<i8", "shape": [], "key": "z_train"}, "y": {'
        ),
        "lists split 'train', field 'z' (key 'z_train'), which the npz does not hold",
    ),
    "member not listed": (
        lambda c: _edited(c, b', "y": {"dtype": "<i8", "shape": [], "key": "y_train"}', b""),
        "does not list key 'y_train', which the npz holds",
    ),
}


@pytest.mark.parametrize("damage", list(_DAMAGE))
@pytest.mark.parametrize("command", ["info", "verify", "convert"])
def test_a_damaged_dstore_schema_is_an_error_not_a_foreign_file(
    tmp_path, capsys, quantized_npz, damage, command
) -> None:
    """A dstore npz whose schema comment lost a byte was read as a foreign file: int8
    codes delivered as data, and `verify` passed saying "not written by dstore"."""
    path, comment = quantized_npz
    damaged = _DAMAGE[damage][0](comment)
    assert damaged != comment
    _with_comment(path, damaged)
    extra = [str(tmp_path / "out.zarr")] if command == "convert" else []
    code, out, err = _run_cli(capsys, command, path, *extra)
    assert code == 2, out
    line = _one_line(err)
    assert line.startswith(f"SchemaError: {path}: the dstore schema in the zip comment "), line
    assert _DAMAGE[damage][1] in line, line
    assert not (tmp_path / "out.zarr").exists()


def test_drop_on_a_dstore_npz_leaves_the_field_out_of_its_schema(capsys, quantized_npz) -> None:
    path, _ = quantized_npz
    code, out, err = _run_cli(capsys, "info", path, "--drop", "y_train")
    assert code == 0, err
    assert "int8" in out and "'y'" not in out and " y " not in out


# ------------------------------------------------------------------- 4. pixel bombs


def _images_file(path: str, blobs: list[bytes]) -> None:
    """A dstore file of one encoded PNG image field ``img`` (npz: bytes and its schema)."""
    import dstore
    from dstore.model import Image

    kinds = {("train", "img"): Image(np.dtype(np.uint8), 0, None, None, "png")}
    dstore.save({"train": {"img": blobs}}, path, kinds=kinds)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_running_out_of_memory_after_raising_the_pixel_limit_is_one_line(tmp_path) -> None:
    """With the pixel limit raised past the memory the process has, decoding the bomb
    runs out of memory: one 'MemoryError' line and nothing left behind (it was numpy's
    _ArrayMemoryError traceback)."""
    src = str(tmp_path / "bomb.npz")
    _images_file(src, [_png_bomb(16), _png_bomb(40000)])
    dst = str(tmp_path / "out.zarr")
    done = subprocess.run(
        [sys.executable, "-c", _CLI_UNDER_A_MEMORY_LIMIT, "convert", src, dst],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.getcwd(), DSTORE_MAX_IMAGE_PIXELS=str(2 * 10**9)),
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = _one_line(done.stderr)
    assert line.startswith(f"MemoryError: {src}: out of memory"), line
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(src)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("ext", ["npz", "tfrecords"])
def test_a_png_declaring_1_6_gigapixels_is_refused_from_its_header(tmp_path, ext) -> None:
    """A 1.5 MB PNG of 40000 x 40000 black pixels decoded to 1.6 GB (more under libpng):
    the header's size is checked against the pixel limit before any decoder runs."""
    bomb = _png_bomb(40000)
    assert len(bomb) < 2 * 2**20
    src = str(tmp_path / f"bomb.{ext}")
    _images_file(src, [_png_bomb(16), bomb])
    dst = str(tmp_path / "out.zarr")
    done = subprocess.run(
        [sys.executable, "-c", _CLI_UNDER_A_MEMORY_LIMIT, "convert", src, dst],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = _one_line(done.stderr)
    assert line.startswith(f"CodecIOError: {src}: split 'train', field 'img'"), line
    assert "record 1" in line, line
    assert "declares 40000 x 40000 pixels (1,600,000,000), more than the limit of " in line
    assert "DSTORE_MAX_IMAGE_PIXELS" in line
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(src)]


def test_the_pixel_limit_can_be_lowered_and_raised(tmp_path, capsys, monkeypatch) -> None:
    src = str(tmp_path / "small.npz")
    _images_file(src, [_png_bomb(16)])
    monkeypatch.setenv("DSTORE_MAX_IMAGE_PIXELS", "255")
    code, _, err = _run_cli(capsys, "convert", src, str(tmp_path / "a.zarr"))
    assert code == 2 and "declares 16 x 16 pixels (256), more than the limit of 255" in err
    monkeypatch.setenv("DSTORE_MAX_IMAGE_PIXELS", "256")
    code, _, err = _run_cli(capsys, "convert", src, str(tmp_path / "b.zarr"))
    assert code == 0, err
    monkeypatch.setenv("DSTORE_MAX_IMAGE_PIXELS", "lots")
    code, _, err = _run_cli(capsys, "convert", src, str(tmp_path / "c.zarr"))
    assert code == 2 and _one_line(err).startswith("ValueError: DSTORE_MAX_IMAGE_PIXELS must be")


@pytest.mark.parametrize("fmt", ["png", "jpeg8", "webp", "gif", "bmp"])
def test_image_size_reads_each_header(fmt) -> None:
    """The header parser agrees with the decoder on every format it knows."""
    import imagecodecs

    from dstore.images.imagecodec import image_size

    img = np.random.default_rng(1).integers(0, 255, (37, 53, 3), np.uint8)
    if fmt == "gif":
        img = img[..., 0]  # GIF is palette images: (H, W) of indices
    data = bytes(getattr(imagecodecs, f"{fmt}_encode")(img))
    assert image_size(data) == imagecodecs.imread(data).shape[:2] == (37, 53)


# ------------------------------------------------- 5, 6. deep JSON, out-of-range numbers

_CLI_WITH_PARSER = r"""
import sys

if sys.argv[1] == "stdlib":
    sys.modules["orjson"] = None  # an install without the json extra: the standard library parses
from dstore.cli import main

sys.exit(main(sys.argv[2:]))
"""


def _cli_child(parser: str, *argv: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", _CLI_WITH_PARSER, parser, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
        check=False,
    )
    return done.returncode, done.stderr


_NUMBERS = {
    "1e400": (
        b'[{"x": 1.5, "y": 1}, {"x": 1e400, "y": 2}]',
        "record 1, field 'x': the number 1e400 is beyond float64's range",
    ),
    "-1e400 in a list": (
        b'{"point_features": [{"f": [1.0, 2.0]}, {"f": [3.0, -1E+400]}], "dim": 2}',
        "member 'point_features', record 1, field 'f', item 1: the number -1E+400 is beyond",
    ),
    "2**64": (
        b'[{"id": 1}, {"id": 18446744073709551616}]',
        "record 1, field 'id': the number 18446744073709551616 does not fit in 64 bits",
    ),
    "-2**63 - 1": (
        b'[{"id": -9223372036854775809}]',
        "record 0, field 'id': the number -9223372036854775809 does not fit in 64 bits",
    ),
    "2**64 - 1": (
        b'[{"id": 1}, {"id": 18446744073709551615}]',
        "field 'id', record 1: the integer 18446744073709551615 does not fit in int64",
    ),
    "10**30 among floats": (
        b'[{"x": 0.5}, {"x": 1000000000000000000000000000000}]',
        "record 1, field 'x': the number 1000000000000000000000000000000 does not fit in 64 bits",
    ),
}


@pytest.mark.parametrize("parser", ["orjson", "stdlib"])
def test_json_numbers_out_of_range_are_refused_by_one_rule(tmp_path, parser) -> None:
    """1e400 became inf and 2**64 a float64 (with orjson; an exact int with the standard
    library) while 2**64 - 1 was refused: now one rule, whichever parser runs."""
    for case, (text, expected) in _NUMBERS.items():
        src = tmp_path / f"{case.replace(' ', '_')}.json"
        src.write_bytes(text)
        code, err = _cli_child(parser, "convert", str(src), str(tmp_path / "out.npz"))
        assert code == 2, (case, err)
        line = _one_line(err)
        assert line.startswith(
            f"{'SchemaError' if case == '2**64 - 1' else 'CodecIOError'}: {src}"
        ), line
        assert expected in line, (case, line)
        assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("parser", ["orjson", "stdlib"])
def test_json_lines_numbers_name_the_line_and_field(tmp_path, parser) -> None:
    src = tmp_path / "r.jsonl"
    src.write_bytes(b'{"x": 1.0}\n{"x": 2e999}\n')
    code, err = _cli_child(parser, "info", str(src))
    assert code == 2
    assert _one_line(err) == (
        f"CodecIOError: {src}, line 2: field 'x': the number 2e999 is beyond float64's range"
    )


@pytest.mark.parametrize("parser", ["orjson", "stdlib"])
@pytest.mark.parametrize("where", ["document", "attribute", "field"])
def test_deeply_nested_json_is_one_line(tmp_path, parser, where) -> None:
    """100,000 levels: orjson refused them, then the standard library's parser (the
    fallback) raised RecursionError, a traceback. 1,000 levels, which orjson takes,
    in an attribute or a record's field: a RecursionError further on."""
    deep = {"document": 100_000, "attribute": 1_000, "field": 1_000}[where]
    value = b"[" * deep + b"1" + b"]" * deep
    text = {
        "document": value,
        "attribute": b'{"recs": [{"a": 1}], "meta": ' + value + b"}",
        "field": b'[{"a": ' + value + b"}]",
    }[where]
    src = tmp_path / "deep.json"
    src.write_bytes(text)
    code, err = _cli_child(parser, "info", str(src))
    assert code == 2, err[-2000:]
    assert _one_line(err).startswith(f"CodecIOError: {src}: nested too deeply")


def test_uint64_values_beyond_int64_still_round_trip_through_json(tmp_path) -> None:
    import dstore
    from dstore.testing import read_all

    values = np.array([0, 2**63, 2**64 - 1], np.uint64)
    dstore.save({"train": {"u": values}}, str(tmp_path / "u.json"))
    np.testing.assert_array_equal(read_all(str(tmp_path / "u.json"))["train"]["u"], values)


# ---------------------------------------------------------- 7. dtype policies


@pytest.fixture
def ints_npz(tmp_path) -> str:
    src = str(tmp_path / "ints.npz")
    np.savez(src, x=np.arange(12, dtype=np.uint8).reshape(4, 3), y=np.arange(4))
    return src


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        (
            ["x=float16"],
            "DtypePolicyError: dtype policy for 'x': float16 applies to floating fields; "
            "'x' is uint8 (3,), which it would leave as it is",
        ),
        (
            ["x=float16", "x=float32"],
            "DtypePolicyError: dtype policy gives field 'x' two rules, float16 and float32; "
            "keep one",
        ),
        (
            ["float16,float32"],
            "DtypePolicyError: dtype policy gives every floating field two rules, float16 "
            "and float32; keep one",
        ),
    ],
)
def test_a_per_field_policy_that_does_nothing_or_conflicts_is_an_error(
    tmp_path, capsys, ints_npz, policies, expected
) -> None:
    """`--dtype x=float16` on an integer field exited 0 and changed nothing; two rules
    for one field took the last silently."""
    dst = str(tmp_path / "out.npz")
    argv = [a for p in policies for a in ("--dtype", p)]
    code, _, err = _run_cli(capsys, "convert", ints_npz, dst, *argv)
    assert code == 2
    assert _one_line(err) == expected
    assert sorted(os.listdir(tmp_path)) == ["ints.npz"]


def test_a_blanket_policy_with_no_floating_field_says_so_once(tmp_path, capsys, ints_npz) -> None:
    dst = str(tmp_path / "out.npz")
    # the same rule twice is no conflict
    code, out, err = _run_cli(capsys, "convert", ints_npz, dst, "--dtype", "float16,float16")
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == ["note: dtype policy float16 changed nothing: no field is floating"]


# ------------------------------------------------------------ 9. names in printed output

_HOSTILE = "y: 3 records bit-exact\nok  data_z\x1b[31m"


def _hostile_npz(path, counts: tuple[int, int] = (3, 3)) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", _npy(np.arange(counts[0])))
        z.writestr(_HOSTILE + ".npy", _npy(np.arange(counts[1])))


@pytest.mark.parametrize("command", ["info", "verify", "verify-two", "convert"])
def test_names_cannot_forge_report_lines_or_reach_the_terminal(tmp_path, capsys, command) -> None:
    """A field name with a newline printed raw made `verify` print a fake `ok ...` line,
    and escape sequences reached the terminal."""
    src = str(tmp_path / "evil.npz")
    _hostile_npz(src)
    argv = {
        "info": ["info", src],
        "verify": ["verify", src],
        "verify-two": ["verify", src, src],
        # the summary's note names the key left out
        "convert": ["convert", src, str(tmp_path / "o.npz"), "--drop", _HOSTILE],
    }
    code, out, err = _run_cli(capsys, *argv[command])
    assert code == 0, err
    assert "\x1b" not in out + err
    lines = out.splitlines()
    if command == "verify-two":
        assert [ln.split(":")[0] for ln in lines if ln.startswith("ok")] == [
            "ok  data/x",
            "ok  data/'y",  # the quoted name, one line
        ]
    if command != "verify":  # which checks a split as a whole, naming no field
        assert repr(_HOSTILE) in out
        assert len(lines) == len(out.split("\n")) - 1  # nothing but the lines printed


def test_an_error_naming_a_hostile_key_is_one_whole_line(tmp_path, capsys) -> None:
    """The error was cut at the newline in the name, and so lost its end (the --drop hint)."""
    src = str(tmp_path / "evil.npz")
    _hostile_npz(src, (3, 4))
    code, _, err = _run_cli(capsys, "info", src)
    assert code == 2
    line = _one_line(err)
    assert repr(_HOSTILE) in line and "\x1b" not in line
    assert line.endswith("leave it out with --drop x")


# -------------------------------------------------------------------------- 10. --drop


def test_drop_leaves_out_a_0d_npz_member(tmp_path, capsys) -> None:
    """np.savez(..., n=np.array(5)) beside the data: the 0-d check ran before --drop,
    so the member could not be left out."""
    src, dst = str(tmp_path / "d.npz"), str(tmp_path / "out.npz")
    np.savez(src, x=np.arange(6.0).reshape(3, 2), n=np.array(5))
    code, _, err = _run_cli(capsys, "convert", src, dst)
    assert code == 2
    assert _one_line(err) == (
        f"SchemaError: {src}: key 'n' is a 0-d array; every field needs a record axis "
        "(leave it out with --drop n)"
    )
    code, out, err = _run_cli(capsys, "convert", src, dst, "--drop", "n")
    assert code == 0, err
    assert f"note: {src}: key 'n' () left out (drop=n)" in out
    with np.load(dst) as z:
        assert z.files == ["x"]


@pytest.mark.parametrize("ext", ["zarr", "h5", "json", "tfrecords"])
def test_drop_works_for_every_format(tmp_path, capsys, ext) -> None:
    import dstore
    from dstore.testing import read_all

    src, dst = str(tmp_path / f"d.{ext}"), str(tmp_path / "out.npz")
    x, y = np.arange(6.0).reshape(3, 2), np.arange(3)
    dstore.save({"train": {"x": x, "y": y}}, src)
    code, out, err = _run_cli(capsys, "convert", src, dst, "--drop", "y")
    assert code == 0, err
    assert "left out" in out
    got = read_all(dst)
    assert list(got["train"]) == ["x"]
    np.testing.assert_array_equal(got["train"]["x"], x)
    code, _, err = _run_cli(capsys, "info", src, "--drop", "train/nope")
    assert code == 2
    assert "drop='train/nope': no such field (fields: 'x', 'y')" in _one_line(err)


# ------------------------------------------------------------ 11. --from json on a folder


def test_from_json_reads_a_folder_whatever_the_file_names(tmp_path, capsys) -> None:
    """pyspacer-style feature files named without .json: `fv/: no such file`."""
    import json

    from dstore.testing import read_all

    folder = tmp_path / "fv"
    folder.mkdir()
    for i in range(3):
        records = [{"row": i, "col": j, "f": [float(i), float(j)]} for j in range(2)]
        (folder / f"img{i}.featurevector").write_text(json.dumps(records))
    dst = str(tmp_path / "fv.npz")
    code, _, err = _run_cli(capsys, "convert", str(folder), dst, "--from", "json")
    assert code == 0, err
    got = read_all(dst)
    (split,) = got.values()
    assert len(split["row"]) == 6
    assert sorted(set(split["source"].to_str_list())) == [f"img{i}.featurevector" for i in range(3)]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run_cli(capsys, "info", str(empty), "--from", "json")
    assert code == 2
    assert (
        _one_line(err)
        == f"CodecIOError: {empty}: the folder holds no json file (nor one without a format)"
    )


def test_a_dropped_hostile_name_is_quoted_in_the_note(tmp_path, capsys):
    """--drop of a member whose name holds a newline and an escape: the note names it
    quoted, on one line (it printed the name raw, forging an 'ok ...' line)."""
    from dstore.cli import main

    evil = "y\nok  data_z\x1b[31m"
    src = tmp_path / "evil.npz"
    np.savez(src, x=np.arange(6.0).reshape(3, 2), **{evil: np.arange(3)})
    assert main(["convert", str(src), str(tmp_path / "out.npz"), "--drop", evil]) == 0
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert not any(line.startswith("ok") for line in lines), lines
    assert "\x1b" not in out.out + out.err
    assert any("left out (drop=" in line for line in lines)


def test_any_byte_lost_from_the_schema_comment_is_an_error_or_the_same_values(tmp_path, tiles):
    """An int8-quantized dstore npz: deleting any one byte of its schema comment either
    fails in one error naming the damage, or reads exactly the same values. A key that
    lost a byte and still parsed ("attrs" -> "ttrs") delivered the int8 codes as data
    and verify passed; the stored schema's digest now catches it."""
    import shutil

    import dstore
    from dstore.errors import DstoreError

    _, labels = tiles
    feats = np.linspace(-3, 3, 24, dtype=np.float32).reshape(6, 4)
    good = str(tmp_path / "good.npz")
    dstore.save({"train": {"x": feats, "y": labels[:6]}}, good, dtype="x=int8")
    with dstore.open(good) as ds:
        expected = ds["train"]["x"][:]
    with zipfile.ZipFile(good) as z:
        comment = z.comment
    silent = []
    path = str(tmp_path / "damaged.npz")
    for pos in range(len(comment)):
        shutil.copyfile(good, path)
        with zipfile.ZipFile(path, "a") as z:
            z.comment = comment[:pos] + comment[pos + 1 :]
        try:
            with dstore.open(path) as ds:
                got = ds["train"]["x"][:]
        except DstoreError:
            continue
        if not (got.dtype == expected.dtype and np.array_equal(got, expected)):
            silent.append((pos, comment[max(0, pos - 8) : pos + 8]))
    assert silent == [], silent[:5]
