"""Large byte records stream (memory follows the largest record, not a multiple of the
file), and ``--overwrite`` replaces only what the target format wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dstore.codecs.example.wire import BYTES, INT64, encode_example, encode_feature
from dstore.codecs.tfrecord.io import frame

RECORD_MIB = 20

# VmHWM, not getrusage: Linux carries ru_maxrss over exec from the parent process
_CHILD = """
import sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
import dstore.cli
n = sys.argv.index("--then")
assert dstore.cli.main(sys.argv[1:n]) == 0  # a small file first: every import is done
base = hwm()
code = dstore.cli.main(sys.argv[n + 1 :])
print("PEAK", base, hwm(), code)
"""


def _photo_bytes(size: int, seed: int) -> bytes:
    from skimage import data

    pixels = np.roll(data.astronaut().ravel(), seed * 7919)
    return np.tile(pixels, -(-size // pixels.size))[:size].tobytes()


def _tfrecord(path: str, size: int, records: int = 2) -> int:
    """Examples of one ``bytes_list`` of ``size`` bytes and an int64 label; the largest size."""
    largest = 0
    with open(path, "wb") as f:
        for i in range(records):
            rec = encode_example(
                {
                    "blob": encode_feature(BYTES, _photo_bytes(size, i)),
                    "label": encode_feature(INT64, np.array([i])),
                }
            )
            largest = max(largest, len(rec))
            f.write(frame(rec))
    return largest


def _peak_growth(tmp_path, command: str, *paths: str) -> int:
    """Bytes of peak RSS a ``dstore <command>`` on the large paths adds (child process)."""
    warm = [command, str(tmp_path / "small.tfrecord"), str(tmp_path / "warm.npz")]
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), *warm, "--then", command, *paths],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PEAK ")), None)
    assert line is not None, proc.stderr[-2000:]
    _, base, peak, code = line.split()
    assert code == "0", proc.stderr[-2000:]
    return (int(peak) - int(base)) * 1024


@pytest.mark.slow
def test_large_byte_records_convert_and_verify_in_bounded_memory(tmp_path):
    """Two 20 MiB bytes_list records: converting to npz took 45x the largest record
    (npz's fixed-width strings built from index arrays of 8 bytes per byte, the
    record copied at framing, parsing and batching); verify 18x."""
    src, dst = str(tmp_path / "big.tfrecord"), str(tmp_path / "big.npz")
    _tfrecord(str(tmp_path / "small.tfrecord"), 1000)  # warm.npz: written by the first warm-up
    largest = _tfrecord(src, RECORD_MIB * 1024 * 1024)
    batch = os.path.getsize(src)  # both records fit one batch
    growth = _peak_growth(tmp_path, "convert", src, dst)
    assert growth < 3 * largest + batch, f"convert: {growth / largest:.1f}x the largest record"
    # verify holds a batch of each side and the sharded reader's generators keep the
    # previous one while reading the next: 18x before, about 5x now
    growth = _peak_growth(tmp_path, "verify", src, dst)
    assert growth < 7 * largest, f"verify: {growth / largest:.1f}x the largest record"
    with np.load(dst) as z:
        got = z["blob"]
        assert got.dtype == np.dtype(f"S{RECORD_MIB * 1024 * 1024}")
        assert [bytes(v) for v in got] == [
            _photo_bytes(RECORD_MIB * 1024 * 1024, i) for i in (0, 1)
        ]
        assert z["label"].tolist() == [0, 1]


# ------------------------------------------------------------------ --overwrite


def _formats() -> dict[str, str]:
    from dstore.testing import usable_formats

    return usable_formats()


def _tree(path: str) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiles) -> dict[str, str]:
    import dstore

    root = tmp_path_factory.mktemp("made")
    x, y = tiles
    src, old = str(root / "src.npz"), str(root / "old.npz")
    np.savez(src, x_train=x[:8], y_train=y[:8])
    np.savez(old, x_train=x[8:12], y_train=y[8:12])
    out = {"src": src}
    for name, ext in _formats().items():
        out[name] = str(root / f"made{ext}")
        dstore.convert(old, out[name])
    return out


@pytest.mark.parametrize("target", sorted(_formats()))
def test_overwrite_refuses_a_dataset_folder_holding_foreign_files(tmp_path, capsys, made, target):
    """A thesis.docx inside a dataset folder of the target format: --overwrite deleted
    it with the dataset; now refused naming it, and --overwrite-foreign replaces all."""
    import shutil

    from dstore.cli import main

    if not os.path.isdir(made[target]):
        pytest.skip(f"{target} writes one file: nothing of a user's can sit inside it")
    dst = str(tmp_path / os.path.basename(made[target]))
    shutil.copytree(made[target], dst)
    with open(os.path.join(dst, "thesis.docx"), "wb") as f:
        f.write(b"PK my thesis")
    before = _tree(dst)
    assert main(["convert", made["src"], dst, "--to", target, "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "thesis.docx" in err and "--overwrite-foreign" in err, err
    assert _tree(dst) == before
    assert main(["convert", made["src"], dst, "--to", target, "--overwrite-foreign"]) == 0
    assert not os.path.exists(os.path.join(dst, "thesis.docx"))
    import dstore

    assert dstore.verify(made["src"], dst).ok
    # a clean dataset is still replaced by plain --overwrite
    assert main(["convert", made["src"], dst, "--to", target, "--overwrite"]) == 0


@pytest.mark.parametrize("target", sorted(_formats()))
def test_overwrite_refuses_a_folder_with_only_the_format_tag(tmp_path, capsys, made, target):
    """dstore.json carrying the format tag of a sharded format plus a user's file: not a
    dataset dstore reads, so never replaced (it was deleted)."""
    import json

    from dstore.cli import main

    dst = str(tmp_path / f"out{os.path.splitext(made[target])[1]}")
    os.makedirs(dst)
    tag = None
    manifest = os.path.join(made[target], "dstore.json")
    if os.path.isfile(manifest):
        with open(manifest) as f:
            tag = json.load(f)["format"]
    with open(os.path.join(dst, "dstore.json"), "w") as f:
        json.dump({"format": tag or "dstore-tfrecord"}, f)
    with open(os.path.join(dst, "thesis.docx"), "wb") as f:
        f.write(b"my thesis")
    before = _tree(dst)
    for flag in ("--overwrite", "--overwrite-foreign"):
        assert main(["convert", made["src"], dst, "--to", target, flag]) == 2
        assert "refusing to replace it" in capsys.readouterr().err
        assert _tree(dst) == before


def test_per_source_overwrite_refuses_foreign_files_inside_an_output(tmp_path, tiles):
    """--per-source: a note inside one of the folder's TFRecord outputs is named and
    kept under overwrite=True, deleted under overwrite="foreign"."""
    import dstore
    from dstore.api.per_source import write_per_source
    from dstore.errors import OutputExistsError

    x, _ = tiles
    (tmp_path / "in").mkdir()
    np.savez(tmp_path / "in" / "a.npz", x=x[:4])
    np.savez(tmp_path / "in" / "b.npz", x=x[4:10])
    whole, per = str(tmp_path / "all.h5"), str(tmp_path / "per")
    dstore.convert(str(tmp_path / "in" / "*.npz"), whole)
    write_per_source(whole, per, to="tfrecord")
    note = os.path.join(per, "a.tfrecords", "notes.txt")
    with open(note, "w") as f:
        f.write("mine")
    with pytest.raises(OutputExistsError, match=r"notes\.txt"):
        write_per_source(whole, per, to="tfrecord", overwrite=True)
    assert os.path.exists(note)
    write_per_source(whole, per, to="tfrecord", overwrite="foreign")
    assert not os.path.exists(note)
    assert dstore.verify(str(tmp_path / "in" / "a.npz"), os.path.join(per, "a.tfrecords")).ok
