"""Croissant 1.1 cards (issue #38): every registered format's dataset is described so that
mlcroissant accepts it, every sha256 matches its file, a split is a record set and a field
a field with its stored dtype; Parquet and JSON Lines records come out of mlcroissant as
dstore reads them; the lossy choices carry the error measured (when written, by
``--source``) and ``dstore bench``'s figures. The formats come from the registry."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import dstore
from dstore.bench.report import save_report
from dstore.cli import main
from dstore.registry import available_codecs, codec_names, default_extension

mlc = pytest.importorskip("mlcroissant")
datasets = pytest.importorskip("datasets")
pd = pytest.importorskip("pandas")

FORMATS = [n for n in codec_names() if available_codecs()[n] is None]


@pytest.fixture(scope="module")
def source(card_source) -> str:
    return card_source


def _load(path: str | os.PathLike[str]) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_is_described_and_mlcroissant_accepts_it(tmp_path, source, fmt):
    out = str(tmp_path / f"out{default_extension(fmt)}")
    dstore.convert(source, out, to=fmt, dtype="feat=float16")
    beside = not os.path.isdir(out)
    path = out + ".croissant.json" if beside else os.path.join(out, "croissant.json")
    if not beside:  # a folder output (a zarr store too) is written with its card, valid
        assert not mlc.Dataset(jsonld=path).metadata.ctx.issues.errors
        assert "datePublished" not in _load(path)  # its bytes: the data's and options' only
    else:
        assert not os.path.exists(path) and sorted(os.listdir(tmp_path)) == [os.path.basename(out)]
    report = dstore.card(out, license="cc-by-4.0")
    assert report.written[0] == path  # (a Parquet folder's README.md follows)
    assert "license" not in report.missing and "name" in report.missing
    ds = mlc.Dataset(jsonld=path)  # raises on any validation error
    assert not ds.metadata.ctx.issues.errors
    doc = _load(path)
    assert doc["conformsTo"] == "http://mlcommons.org/croissant/1.1"
    for key in ("name", "description", "license", "creator", "url", "version", "datePublished"):
        assert doc[key], key
    objects = [d for d in doc["distribution"] if d["@type"] == "cr:FileObject"]
    assert objects
    for d in objects:  # every file listed exists, of its size and sha256
        file = os.path.join(os.path.dirname(path), d["contentUrl"])
        assert _sha256(file) == d["sha256"], d["contentUrl"]
        assert d["contentSize"] == f"{os.path.getsize(file)} B"
        assert d["encodingFormat"]
    with dstore.open(out) as stored:
        fields_of = {s: list(stored[s]) for s in stored}
    assert [rs["@id"] for rs in doc["recordSet"]] == list(fields_of)
    for rs in doc["recordSet"]:
        fields = {f["name"]: f for f in rs["field"]}
        assert list(fields) == fields_of[rs["@id"]]
        assert all(f["@id"] == f"{rs['@id']}/{n}" for n, f in fields.items())
        assert fields["feat"]["dataType"] == "cr:Float16"
        assert (fields["feat"]["isArray"], fields["feat"]["arrayShape"]) == (True, "8")
        assert fields["label"]["dataType"] == "cr:Int64" and "isArray" not in fields["label"]
        assert fields["name"]["dataType"] == "sc:Text"
        assert (fields["boxes"]["isArray"], fields["boxes"]["arrayShape"]) == (True, "-1,4")
        assert all("source" in f for f in rs["field"])


def _records(path: str, split: str) -> list[dict[str, object]]:
    return list(mlc.Dataset(jsonld=path).records(record_set=split))


def _assert_same(records: list[dict[str, object]], ds: dstore.Dataset, split: str) -> None:
    """mlcroissant's records are dstore's, record by record, field by field."""
    view = ds[split]
    assert len(records) == view.count
    for name in view:
        values = view[name][:]
        for i, rec in enumerate(records):
            got = rec[f"{split}/{name}"]
            if isinstance(got, bytes):
                got = got.decode()
            if hasattr(got, "getdata"):  # a PIL image: its pixels
                got = np.asarray(got)
            want = values[i]
            if isinstance(want, str):
                assert got == want, (name, i)
            else:
                assert np.array_equal(np.asarray(got, dtype=np.asarray(want).dtype), want), (
                    name,
                    i,
                )


@pytest.mark.parametrize("images", ["png", "jpeg"])
def test_parquet_records_read_by_mlcroissant_are_the_datasets(tmp_path, source, images):
    out = str(tmp_path / "out.parquet")
    dstore.convert(source, out, dtype="feat=float16", options={"image_codec": images})
    with dstore.open(out) as ds:
        for split in ds:
            # labels, strings, float16 numbers, ragged boxes, and the images decoded to the
            # pixels dstore decodes (the JPEG's, not the source's)
            _assert_same(_records(os.path.join(out, "croissant.json"), split), ds, split)


def _eighths(source: str) -> dict[str, dict[str, object]]:
    """Features, labels and names per split; the features in eighths, which every JSON
    parser reads exactly (pandas, which mlcroissant reads JSON Lines with, parses a
    float64 decimal to within one unit in the last place)."""
    with dstore.open(source) as ds:
        out = {s: {n: ds[s][n][:] for n in ("feat", "label", "name")} for s in ds}
    for split in out.values():
        split["feat"] = np.round(split["feat"] * 64) / 8
    return out


def test_json_lines_records_read_by_mlcroissant_are_the_files(tmp_path, source):
    """mlcroissant yields a JSON Lines dataset's records exactly, in order, split by split:
    a file of records, a file dstore wrote (its schema rides on the last record: no
    record of nulls), and several splits, one file each, read as one dataset (the
    ``source`` field is each record's file)."""
    splits = _eighths(source)
    plain = tmp_path / "plain.jsonl"
    with open(plain, "w", encoding="utf-8") as f:
        train = splits["train"]
        for i in range(len(train["label"])):
            rec = {n: np.asarray(train[n][i]).tolist() for n in ("feat", "label")}
            f.write(json.dumps({**rec, "name": train["name"][i]}, ensure_ascii=False) + "\n")
    dstore.card(plain)
    with dstore.open(plain) as ds:
        split = next(iter(ds))
        _assert_same(_records(f"{plain}.croissant.json", split), ds, split)

    ours = str(tmp_path / "ours.jsonl")
    dstore.save({"train": splits["train"]}, ours)
    dstore.card(ours)
    doc = _load(f"{ours}.croissant.json")
    assert "dstore's schema" not in doc["recordSet"][0]["description"]
    with dstore.open(ours) as ds:
        _assert_same(_records(f"{ours}.croissant.json", "train"), ds, "train")

    folder = tmp_path / "splits"
    folder.mkdir()
    for name, fields in splits.items():
        dstore.save({name: fields}, str(folder / f"{name}.jsonl"))
    assert main(["card", str(folder)]) == 0
    card = str(folder / "croissant.json")
    assert not mlc.Dataset(jsonld=card).metadata.ctx.issues.errors
    with dstore.open(str(folder)) as ds:
        assert sorted(ds) == sorted(splits) and "source" in ds["test"]
        for split in ds:
            _assert_same(_records(card, split), ds, split)  # "source" too: the file's name


def test_json_lines_of_several_splits_read_by_mlcroissant_split_by_split(tmp_path, source):
    """The default JSON Lines output of a dataset of several splits is a folder of one file
    per split: mlcroissant's record set of a split is exactly its records, in order;
    pandas and ``datasets`` read each file as that split's records; each file reads alone
    with dstore as the one split it holds."""
    splits = _eighths(source)
    src = str(tmp_path / "eighths.npz")
    dstore.save(splits, src)
    out = tmp_path / "m.jsonl"
    assert main(["convert", src, str(out)]) == 0
    card = str(out / "croissant.json")
    assert not mlc.Dataset(jsonld=card).metadata.ctx.issues.errors
    with dstore.open(str(out)) as ds:
        assert list(ds) == list(splits)
        for split in ds:
            _assert_same(_records(card, split), ds, split)
    for split, fields in splits.items():
        file = str(out / f"{split}.jsonl")
        frame = pd.read_json(file, lines=True)
        assert frame["label"].tolist() == np.asarray(fields["label"]).tolist()
        assert frame["name"].tolist() == list(fields["name"])
        loaded = datasets.load_dataset("json", data_files={split: file}, split=split)
        assert loaded["label"] == np.asarray(fields["label"]).tolist()
        with dstore.open(file) as alone:
            assert list(alone) == [split]
            assert np.array_equal(alone[split]["feat"][:], fields["feat"])


def _one_file(folder: Path, *, alone: bool) -> list[str]:
    """The lines of the one file dstore wrote before for the splits of a JSON Lines
    folder: each split's records in turn, then dstore's schema, alone on the last line or
    carried by the last record."""
    manifest = json.loads((folder / "dstore.json").read_text(encoding="utf-8"))
    records = []
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            *lines, last = (folder / shard["file"]).read_text(encoding="utf-8").splitlines()
            records += [*lines, last.split(', "dstore:schema": ', 1)[0] + "}"]
    schema = json.dumps(manifest["schema"])
    if alone:
        return [*records, '{"dstore:schema": ' + schema + "}"]
    return [*records[:-1], records[-1][:-1] + ', "dstore:schema": ' + schema + "}"]


def test_json_lines_written_before_read_as_they_were(tmp_path, source):
    """A JSON Lines file as dstore wrote it before -- its splits one after the other in
    one file, its schema alone on the last line or carried by the last record -- reads
    back exactly, is described with that line named (mlcroissant yields it as a last
    record of nulls), and takes an append; a file of several splits has no extractable
    source (mlcroissant cannot select a file's rows)."""
    splits = _eighths(source)
    new = tmp_path / "new.jsonl"
    dstore.save(splits, str(new))
    assert new.is_dir()  # several splits: a file each
    for alone in (True, False):
        old = tmp_path / f"old-{alone}.jsonl"
        old.write_text("\n".join(_one_file(new, alone=alone)) + "\n", encoding="utf-8")
        with dstore.open(str(new)) as a, dstore.open(str(old)) as b:
            assert list(a) == list(b) == list(splits)
            for split in a:
                for name in a[split]:
                    assert np.array_equal(
                        np.asarray(a[split][name][:]), np.asarray(b[split][name][:])
                    )
        assert main(["verify", str(new), str(old)]) == 0
        doc = _load(dstore.card(str(old)).written[0])
        assert all(
            ("last line is dstore's schema" in rs["description"]) == alone
            for rs in doc["recordSet"]
        )
        assert all("extract" not in f["source"] for rs in doc["recordSet"] for f in rs["field"])

    one = tmp_path / "one.jsonl"
    dstore.save({"train": splits["train"]}, str(one))
    *records, last = one.read_text(encoding="utf-8").splitlines()
    record, member = last.split(', "dstore:schema": ', 1)
    one.write_text("\n".join([*records, record + "}", '{"dstore:schema": ' + member]) + "\n")
    dstore.card(str(one))
    got = _records(f"{one}.croissant.json", "train")
    with dstore.open(str(one)) as ds:
        _assert_same(got[:-1], ds, "train")
    assert all(v is None for v in got[-1].values())
    # rewritten as files are written now: with the appended split "test", a folder
    dstore.convert(str(new), str(one), append=True)
    with dstore.open(str(one)) as ds:
        assert ds["train"].count == 2 * len(splits["train"]["label"])
        assert ds["test"].count == len(splits["test"]["label"])
    assert sorted(p.name for p in one.iterdir()) == [
        "croissant.json",
        "dstore.json",
        "test.jsonl",
        "train.jsonl",
    ]
    with dstore.open(str(one)) as ds:
        for split in ds:
            _assert_same(_records(str(one / "croissant.json"), split), ds, split)


def test_write_time_card_states_the_cast_error_measured_on_every_value(tmp_path, source):
    out = str(tmp_path / "out.tfrecords")
    dstore.convert(source, out, dtype="feat=float16")
    doc = _load(os.path.join(out, "croissant.json"))
    (line,) = [p for p in doc["rai:dataPreprocessingProtocol"] if p.startswith("feat:")]
    with dstore.open(source) as src:
        a = np.concatenate([src[s]["feat"][:] for s in src]).astype(np.float64)
    b = a.astype(np.float16).astype(np.float64)
    err, rel = np.abs(a - b), np.abs(a - b)[a != 0] / np.abs(a[a != 0])
    assert "float32 -> float16 (dtype policy float16)" in line
    assert f"max abs error {err.max():.3g}, max rel error {rel.max():.3g}" in line
    assert "(every value, measured against the source when written)" in line
    # a later card keeps it (the files are the same), with what the user gives now
    assert main(["card", out, "--license", "mit", "--name", "Tiles"]) == 0
    again = _load(os.path.join(out, "croissant.json"))
    assert line in again["rai:dataPreprocessingProtocol"]
    assert (again["license"], again["name"]) == ("mit", "Tiles")
    assert "datePublished" not in doc and again["datePublished"]  # the day of dstore card


def test_source_measures_lossy_images_and_bench_adds_accuracy(tmp_path, source):
    out = str(tmp_path / "out.parquet")
    dstore.convert(source, out, options={"image_codec": "jpeg", "quality": 70})
    doc = _load(os.path.join(out, "croissant.json"))
    (line,) = [p for p in doc["rai:dataPreprocessingProtocol"] if p.startswith("image")]
    assert "jpeg quality 70" in line and "error not measured" in line  # never invented
    report = str(tmp_path / "bench.json")
    save_report(dstore.bench(source, formats=["parquet"], dtypes=["keep"]), report)
    assert main(["card", out, "--source", source, "--bench", report]) == 0
    doc = _load(os.path.join(out, "croissant.json"))
    (line,) = [p for p in doc["rai:dataPreprocessingProtocol"] if p.startswith("image")]
    with dstore.open(source) as a, dstore.open(out) as b:
        for split in a:
            d = a[split]["image"][:].astype(np.float64) - b[split]["image"][:]
            psnr = 10 * math.log10(255.0**2 / float(np.mean(d**2)))
            assert f"split {split}: max abs error {np.abs(d).max():.3g}" in line
            assert f"PSNR {psnr:.3g} dB" in line
    bench = _load(report)
    bench_lines = [p for p in doc["rai:dataPreprocessingProtocol"] if p.startswith("dstore bench")]
    assert bench_lines and all(f"{bench['baseline_accuracy']:.4g}" in p for p in bench_lines)
    measured = [c for c in bench["cells"] if c["format"] == "parquet" and c["accuracy"] is not None]
    assert measured
    for cell in measured:
        assert any(f"accuracy {cell['accuracy']:.4g}" in p for p in bench_lines)


def test_a_card_is_part_of_the_commit_and_a_users_card_is_never_replaced(
    tmp_path, source, monkeypatch, capsys
):
    from dstore.card import build

    out = tmp_path / "out.parquet"

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(build, "hub_card", broken)
    with pytest.raises(OSError, match="disk full"):
        dstore.convert(source, str(out))
    assert os.listdir(tmp_path) == []  # no output, no temporary folder
    monkeypatch.undo()

    dstore.convert(source, str(out), card=False)
    assert not {"croissant.json", "README.md"} & set(os.listdir(out))
    (out / "croissant.json").write_text('{"name": "mine"}')
    assert main(["card", str(out)]) == 2
    err = capsys.readouterr().err
    assert "dstore did not write it" in err and "(use --out FILE;" in err
    with pytest.raises(dstore.OutputExistsError, match=r"\(pass out=FILE;"):
        dstore.card(out)
    assert (out / "croissant.json").read_text() == '{"name": "mine"}'
    with pytest.raises(dstore.OutputExistsError, match="did not write"):
        dstore.convert(source, str(out), overwrite=True)  # the user's card is foreign
    os.remove(out / "croissant.json")
    assert main(["card", str(out)]) == 0  # dstore's own card: replaced by --overwrite
    dstore.convert(source, str(out), overwrite=True)
    assert "written by dstore" in (out / "croissant.json").read_text()


def test_a_card_refuses_a_shard_that_differs_from_its_manifest(tmp_path, source, capsys):
    out = tmp_path / "out.tfrecords"
    dstore.convert(source, str(out))
    shard = next(p for p in out.iterdir() if p.name.startswith("test-"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    before = (out / "croissant.json").read_bytes()
    assert main(["card", str(out)]) == 2
    err = capsys.readouterr().err
    assert shard.name in err and "differs from the manifest" in err
    assert (out / "croissant.json").read_bytes() == before


@pytest.mark.parametrize(
    ("ext", "stored", "bf16"),
    [(".zarr", "uint16", "cr:UInt16"), (".tfrecords", "float32", "cr:Float32")],
)
def test_bfloat16_and_int8_fields_say_how_they_are_stored(tmp_path, source, ext, stored, bf16):
    pytest.importorskip("ml_dtypes")
    out = str(tmp_path / f"out{ext}")
    dstore.convert(source, out, dtype=["feat=bfloat16", "boxes=int8"])
    path = os.path.join(out, "croissant.json")  # written with the conversion
    doc = _load(path)
    mlc.Dataset(jsonld=path)
    fields = {f["name"]: f for f in doc["recordSet"][0]["field"]}
    assert fields["feat"]["dataType"] == bf16  # the bits, or the values widened exactly
    assert f"bfloat16 values stored as {stored}" in fields["feat"]["description"]
    assert fields["boxes"]["dataType"] == "cr:Int8"
    assert "int8 codes" in fields["boxes"]["description"]
    lines = {p.split(":", 1)[0]: p for p in doc["rai:dataPreprocessingProtocol"]}
    assert "-> " not in lines["feat"]  # a precision encoding, not a plain cast
    assert "bfloat16" in lines["feat"] and "int8" in lines["boxes"]
    # the conversion measured both on every value
    assert "every value, measured against the source when written" in lines["feat"]
    assert "every value, measured against the source when written" in lines["boxes"]


def test_card_on_the_command_line(tmp_path, source, capsys):
    assert main(["card", source, "--out", str(tmp_path / "c.json"), "--license", "mit"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'c.json'}" in out
    assert "missing (a neutral default was written): name, description, creator, url" in out
    assert "rai:dataCollection" in out  # what dstore cannot know is listed, not invented
    doc = json.loads((tmp_path / "c.json").read_text())
    file = doc["distribution"][0]
    assert os.path.normpath(tmp_path / file["contentUrl"]) == os.path.normpath(source)
    assert main(["card", source, "--hf"]) == 2
    assert "README.md" in capsys.readouterr().err


def test_a_folder_of_files_is_read_as_before_its_cards(tmp_path, source):
    """dstore's cards in a folder of many files (the folder's croissant.json, a file's
    f.json.croissant.json beside it) are no source: the folder and a glob of it read the
    same records after 'dstore card' as before, and the folder's card lists the files."""
    with dstore.open(source) as ds:
        train = {n: ds["train"][n][:] for n in ("feat", "label")}
    folder = tmp_path / "feats"
    folder.mkdir()
    for i in range(4):
        rec = {"feat": train["feat"][i].tolist(), "label": int(train["label"][i])}
        (folder / f"f{i}.json").write_text(json.dumps(rec))

    def read(spec: str) -> dict[str, list[object]]:
        with dstore.open(spec) as ds:
            return {s: [np.asarray(ds[s][n][:]).tolist() for n in ds[s]] for s in ds}

    before = {spec: read(spec) for spec in (str(folder), f"{folder}/*.json")}
    assert main(["card", str(folder)]) == 0
    assert main(["card", str(folder / "f0.json")]) == 0
    assert {"croissant.json", "f0.json.croissant.json"} <= set(os.listdir(folder))
    for spec, records in before.items():
        assert read(spec) == records, spec
    assert main(["card", str(folder)]) == 0  # written again, from the same files
    doc = _load(folder / "croissant.json")
    listed = {d["contentUrl"] for d in doc["distribution"] if d["@type"] == "cr:FileObject"}
    assert listed == {f"f{i}.json" for i in range(4)}
    mlc.Dataset(jsonld=str(folder / "croissant.json"))


def test_an_append_rewrites_the_cards_with_its_version(tmp_path, source):
    """The append itself rewrites the cards dstore wrote: Croissant states version 2,
    every shard with its sha256 and the new counts, keeps the name and license given
    earlier, and mlcroissant reads it; the Hub's README counts the new records (the
    append left version 1's cards before). 'dstore card' then changes nothing."""
    out = str(tmp_path / "out.parquet")
    dstore.convert(source, out)
    assert main(["card", out, "--name", "tiles", "--license", "cc-by-4.0"]) == 0
    dstore.convert(source, out, append=True, append_again=True)
    doc = _load(os.path.join(out, "croissant.json"))
    assert doc["version"] == "2.0.0"
    assert (doc["name"], doc["license"]) == ("tiles", "cc-by-4.0")
    with dstore.open(out) as ds:
        counts = {s: ds[s].count for s in ds}
    assert {rs["@id"]: rs["description"] for rs in doc["recordSet"]} == {
        s: f"Split '{s}': {n} records." for s, n in counts.items()
    }
    for d in doc["distribution"]:
        if d["@type"] == "cr:FileObject":
            assert _sha256(os.path.join(out, d["contentUrl"])) == d["sha256"]
    assert len([d for d in doc["distribution"] if d["@type"] == "cr:FileObject"]) == 4
    assert not mlc.Dataset(jsonld=os.path.join(out, "croissant.json")).metadata.ctx.issues.errors
    hub = datasets.load_dataset(out)
    assert {s: len(hub[s]) for s in hub} == counts
    with open(os.path.join(out, "README.md")) as f:
        readme = f.read()
    for n in counts.values():
        assert f"num_examples: {n}" in readme
    before = _load(os.path.join(out, "croissant.json"))
    assert main(["card", out]) == 0
    after = _load(os.path.join(out, "croissant.json"))
    after.pop("datePublished", None), before.pop("datePublished", None)
    assert after == before
