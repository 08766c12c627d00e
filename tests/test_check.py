"""dstore check on a labelled set of duplicates built from scikit-image's images: every
exact copy found, nearly every JPEG-re-encoded or brightness-shifted copy, no pair of
distinct tiles; its JSON, its exit status, convert --check and bench's line."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dstore
from dstore.check.labelled import labelled_set
from dstore.cli import main

pytest.importorskip("skimage")
pytest.importorskip("imagecodecs")


@pytest.fixture(scope="module")
def labelled():
    return labelled_set(64, copies=20, seed=0)


def _save(path, splits):
    """label-maker's npz: x_<split>, y_<split>."""
    np.savez(path, **{f"{k}_{s}": v for s, d in splits.items() for k, v in d.items()})
    return str(path)


@pytest.fixture(scope="module")
def leaky_npz(labelled, tmp_path_factory):
    return _save(tmp_path_factory.mktemp("check") / "data.npz", labelled.splits)


def _pairs(report_json):
    return {
        (p["a"]["split"], p["a"]["index"], p["b"]["split"], p["b"]["index"]): p
        for p in report_json["duplicates"]
    }


def _score(labelled, report_json):
    """Per kind of copy, how many were found (as the right kind of pair); and the pairs
    joining two distinct tiles (none is a copy)."""
    pairs = _pairs(report_json)
    found: dict[str, list[bool]] = {}
    for kind, a, b in labelled.truth:
        p = pairs.get((*a, *b)) or pairs.get((*b, *a))
        ok = p is not None and (p["kind"] == "exact") == (kind == "exact")
        found.setdefault(kind, []).append(ok)
    copies = {b for _, _, b in labelled.truth}
    false = [
        p
        for p in report_json["duplicates"]
        if (p["a"]["split"], p["a"]["index"]) not in copies
        and (p["b"]["split"], p["b"]["index"]) not in copies
    ]
    return found, false


def _assert_found(labelled, report_json):
    found, false = _score(labelled, report_json)
    assert all(found["exact"]), found["exact"]
    near = found["jpeg"] + found["brighter"] + found["darker"]
    assert sum(near) >= 0.9 * len(near), (sum(near), len(near))
    assert false == []


def test_labelled_copies_found_in_npz_and_in_dstores_png_tfrecord(labelled, leaky_npz, tmp_path):
    _assert_found(labelled, dstore.check(leaky_npz).to_json())
    tfr = str(tmp_path / "data.tfrecords")
    dstore.convert(leaky_npz, tfr)  # tiles stored as PNG: lossless, the same pairs
    assert (
        dstore.check(tfr).to_json()["duplicates"] == dstore.check(leaky_npz).to_json()["duplicates"]
    )


def test_json_schema_and_counts(labelled, leaky_npz, capsys):
    assert main(["check", leaky_npz, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"duplicates", "summary"}
    counts = {s: len(d["x"]) for s, d in labelled.splits.items()}
    for p in out["duplicates"]:
        assert set(p) == {"kind", "a", "b", "distance", "labels_differ"}
        assert p["kind"] in ("exact", "near") and isinstance(p["labels_differ"], bool)
        for end in ("a", "b"):
            assert set(p[end]) == {"split", "index"}
            assert 0 <= p[end]["index"] < counts[p[end]["split"]]
        if p["kind"] == "exact":
            assert p["distance"] == 0
        else:
            assert 0 <= p["distance"] <= 4 and isinstance(p["distance"], int)
    s = out["summary"]
    assert s["records"] == counts and s["training_split"] == "train" and s["leaked"] is True
    assert s["fields"] == {"exact": ["x"], "image": ["x"], "vector": [], "label": ["y"]}
    # every copy of a training tile sits in test or val: their leak counts add up to them
    in_test = sum(1 for _, _, b in labelled.truth if b[0] == "test")
    test = s["leakage"]["test"]["train"]
    assert test["records"] >= 0.9 * in_test and test["records"] <= in_test
    assert test["exact"] == sum(1 for k, _, b in labelled.truth if k == "exact" and b[0] == "test")
    assert test["percent"] == pytest.approx(100 * test["records"] / counts["test"], abs=1e-3)
    assert s["label_conflicts"] == {"exact": 0, "near": 0}


def test_summary_line_of_several_leaks_stays_short(leaky_npz):
    """Leaks from two evaluation splits: one short figure each, every one of them
    (bench prints this line; three splits made it 400 characters)."""
    report = dstore.check(leaky_npz)
    leaks = [(s, o, c) for s, per in report.leakage.items() for o, c in per.items()]
    leaks = [(s, o, c) for s, o, c in leaks if s != report.training and c["records"]]
    assert len(leaks) >= 2
    line = report.summary_line()
    assert len(line) <= 160, line
    for split, other, c in leaks:
        assert (
            f"{split} {c['records']}/{report.records[split]} ({c['percent']:.1f}%) dup {other}"
            in line
        )


def test_exit_status(labelled, tmp_path, capsys):
    clean = {s: {k: v[: len(v) - 30] for k, v in d.items()} for s, d in labelled.splits.items()}
    clean["test"] = {k: v[: len(v) - 60] for k, v in labelled.splits["test"].items()}
    clean["val"] = {k: v[: len(v) - 40] for k, v in labelled.splits["val"].items()}
    clean["train"] = labelled.splits["train"]
    path = _save(tmp_path / "clean.npz", clean)
    assert main(["check", path]) == 0
    assert "no duplicates across splits" in capsys.readouterr().out
    # a duplicate inside one split is reported, and is no leak
    inside = {**clean, "test": {k: np.concatenate([v, v[:2]]) for k, v in clean["test"].items()}}
    path = _save(tmp_path / "inside.npz", inside)
    assert main(["check", path, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["within_splits"]["test"] == {"exact": 2, "near": 0}
    assert main(["check", str(tmp_path / "missing.npz")]) == 2
    assert main(["check", path, "--fields", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "'nope'" in err and "the fields: x, y" in err


def test_label_conflicts_reported_on_their_own(labelled, tmp_path, capsys):
    splits = {s: {k: v.copy() for k, v in d.items()} for s, d in labelled.splits.items()}
    kind, _, (split, index) = labelled.truth[0]
    assert kind == "exact"
    splits[split]["y"][index] += 1  # the copy's label differs from its original's
    path = _save(tmp_path / "conflict.npz", splits)
    assert main(["check", path, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    differ = [p for p in out["duplicates"] if p["labels_differ"]]
    assert [(p["kind"], p["b"]) for p in differ] == [("exact", {"split": split, "index": index})]
    assert out["summary"]["label_conflicts"] == {"exact": 1, "near": 0}
    main(["check", path])
    assert "label conflicts: 1 exact and 0 near" in capsys.readouterr().out
    # with the labels among the checked fields, the copy is no exact duplicate any more
    report = dstore.check(path, fields=["x", "y"])
    assert report.fields.labels == () and report.label_conflicts == {"exact": 0, "near": 0}


def test_convert_check_sees_the_records_as_written(labelled, leaky_npz, tmp_path, capsys):
    expected = dstore.check(leaky_npz)
    for name in ("out.tfrecords", "out.zarr"):
        dst = str(tmp_path / name)
        assert main(["convert", leaky_npz, dst, "--check"]) == 1  # leaks: exit 1, output kept
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1] == expected.summary_line()
        assert dstore.check(dst).to_json()["duplicates"] == expected.to_json()["duplicates"]
    assert main(["convert", leaky_npz, str(tmp_path / "o2.tfrecords"), "--check", "--resume"]) == 2
    assert "--check and --resume" in capsys.readouterr().err


def test_convert_check_of_shards_written_on_threads(labelled, leaky_npz, tmp_path):
    """Many small shards: the observer sees each shard's records from its thread, once."""
    from dstore.check import ConvertCheck

    observer = ConvertCheck(where="x")
    dstore.convert(
        leaky_npz, str(tmp_path / "s.tfrecords"), options={"shard_mb": 0.3}, observe=observer
    )
    assert len(list((tmp_path / "s.tfrecords").glob("train-*"))) > 3
    _assert_found(labelled, observer.report().to_json())


def test_phash_agrees_with_imagehash(labelled):
    imagehash = pytest.importorskip("imagehash")
    from PIL import Image

    from dstore.check.perceptual import hamming, phash

    tiles = np.concatenate([d["x"][:60] for d in labelled.splits.values()])
    theirs = np.array(
        [int(str(imagehash.phash(Image.fromarray(t))), 16) for t in tiles], dtype=np.uint64
    )
    apart = hamming(phash(tiles), theirs)
    # the two differ in the resampling only (box mean vs Lanczos): a few bits at most
    assert apart.max() <= 6 and apart.mean() <= 2, np.bincount(apart)
    # and both tell copies from distinct tiles alike
    for kind, (s1, i1), (s2, i2) in labelled.truth[20:]:
        a, b = (Image.fromarray(labelled.splits[s]["x"][i]) for s, i in ((s1, i1), (s2, i2)))
        assert imagehash.phash(a) - imagehash.phash(b) <= 8, kind


def test_bench_prints_the_leakage_line(tmp_path, capsys):
    pytest.importorskip("sklearn")
    from dstore.demo import hog_features

    feats, labels = hog_features(200, seed=5)
    path = str(tmp_path / "f.npz")
    test = np.concatenate([feats[150:], feats[:3]])  # three training vectors again
    np.savez(
        path,
        features_train=feats[:150],
        labels_train=labels[:150],
        features_test=test,
        labels_test=np.concatenate([labels[150:], labels[:3]]),
    )
    args = ["bench", path, "--formats", "npz", "--dtypes", "keep", "--repeats", "1", "--no-probe"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(ln for ln in out if ln.startswith("check:"))
    assert line.startswith(
        "check: 3 of 53 test records (5.7%) duplicate train records (exact 3, near 0)"
    )


def test_label_maker_example_of_the_docs_prints_what_they_say(tmp_path):
    """docs/check.md's label-maker example, run as written: the line it prints is the one
    the page quotes."""
    import pathlib
    import re
    import subprocess
    import sys

    page = (pathlib.Path(__file__).parents[1] / "docs" / "check.md").read_text()
    section = page[page.index("## Example: label-maker") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    quoted = re.search(r"It prints `(check: .*?)`", section, re.S).group(1)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == " ".join(quoted.split())
    # the CoralNet example: its file, then the table the page shows for it
    section = page[page.index("## Example: CoralNet") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    table = re.search(r"```console\n\$ dstore check features.npz\n(.*?)```", section, re.S).group(1)
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True)
    out = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "check", "features.npz"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and out.stdout == table
