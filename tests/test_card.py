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

import numpy as np
import pytest

import dstore
from dstore.bench.report import save_report
from dstore.cli import main
from dstore.registry import available_codecs, codec_names, default_extension, get_codec_class

mlc = pytest.importorskip("mlcroissant")
datasets = pytest.importorskip("datasets")

FORMATS = [n for n in codec_names() if available_codecs()[n] is None]


@pytest.fixture(scope="module")
def source(tmp_path_factory, tiles, features) -> str:
    """Real photo tiles, their features (float32), labels, names and boxes (ragged) as npz."""
    x, _ = tiles
    feats, labels = features
    rng = np.random.default_rng(0)

    def split(lo: int, hi: int) -> dict[str, object]:
        n = hi - lo
        return {
            "image": x[lo:hi, :32, :32],
            "feat": feats[lo:hi, :8].astype(np.float32),
            "label": labels[lo:hi].astype(np.int64),
            "name": np.array([f"tile {i}: é" for i in range(lo, hi)]),
            "boxes": [rng.random((1 + i % 3, 4)).astype(np.float32) for i in range(n)],
        }

    path = str(tmp_path_factory.mktemp("src") / "src.npz")
    dstore.save({"train": split(0, 12), "test": split(12, 16)}, path)
    return path


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


def test_json_lines_records_read_by_mlcroissant_are_the_files(tmp_path, source):
    """A JSON Lines file of records is read by mlcroissant record for record; one dstore
    wrote ends with its schema line, which the record set's description names and
    mlcroissant yields as a last record of nulls.

    pandas, which mlcroissant reads JSON Lines with, parses a float64 decimal to within
    one unit in the last place (0.029296875 as 0.029296875000000003): the plain file's
    features are eighths, which every parser reads exactly; dstore's file says float32."""
    with dstore.open(source) as ds:
        train = {n: ds["train"][n][:] for n in ("feat", "label", "name")}
    train["feat"] = np.round(train["feat"] * 64) / 8
    plain = tmp_path / "plain.jsonl"
    with open(plain, "w", encoding="utf-8") as f:
        for i in range(len(train["label"])):
            rec = {
                "feat": train["feat"][i].tolist(),
                "label": int(train["label"][i]),
                "name": train["name"][i],
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    dstore.card(plain)
    with dstore.open(plain) as ds:
        split = next(iter(ds))
        _assert_same(_records(f"{plain}.croissant.json", split), ds, split)

    ours = str(tmp_path / "ours.jsonl")
    dstore.save({"train": train}, ours)
    dstore.card(ours)
    doc = _load(f"{ours}.croissant.json")
    assert "last line is dstore's schema" in doc["recordSet"][0]["description"]
    records = _records(f"{ours}.croissant.json", "train")
    with dstore.open(ours) as ds:
        _assert_same(records[:-1], ds, "train")
    assert all(v is None for v in records[-1].values())


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


def _zarr_lists_quietly(store: str) -> dict[str, np.ndarray]:
    """Every array of the store as zarr-python users list and read it, with any warning
    an error (zarr warns of each file in a store that is no node, when it lists)."""
    import warnings

    zarr = pytest.importorskip("zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        group = zarr.open_group(store, mode="r")
        found = dict(group.members(max_depth=None))
        assert [name for name, _ in group.groups()] == sorted(n for n in found if "/" not in n)
        return {k: v[:] for k, v in found.items() if isinstance(v, zarr.Array)}


def test_a_zarr_store_holds_its_card_and_zarr_lists_it_quietly(tmp_path, source):
    """A zarr store is written with croissant.json in it, and zarr-python lists and reads
    the store without a warning (the root's consolidated metadata lists its nodes), also
    after an append grew its arrays; dstore reads the arrays as their own metadata says,
    whatever the listing says."""
    import zarr

    out = str(tmp_path / "out.zarr")
    dstore.convert(source, out, dtype="feat=float16")
    card = os.path.join(out, "croissant.json")
    doc = _load(card)
    assert not mlc.Dataset(jsonld=card).metadata.ctx.issues.errors
    assert {d["encodingFormat"] for d in doc["distribution"] if d["@type"] == "cr:FileSet"} == {
        get_codec_class("zarr").media_type
    }
    assert "datePublished" not in doc and doc["version"] == "1.0.0"
    dstore.convert(source, out, append=True, append_again=True)
    arrays = _zarr_lists_quietly(out)
    with dstore.open(out) as ds:
        assert arrays["train/label"].tolist() == ds["train"]["label"][:].tolist()
        assert len(arrays["train/label"]) == ds["train"].count == 24
        assert np.array_equal(arrays["test/feat"], ds["test"]["feat"][:])
    doc = _load(card)  # rewritten by the append, inside the store
    assert doc["version"] == "2.0.0" and "Split 'train': 24 records." in json.dumps(doc)
    assert not os.path.exists(out + ".croissant.json")
    # a listing that lies (one array's shape): zarr users get what it says, dstore what
    # the array's own metadata says
    with open(os.path.join(out, "zarr.json")) as f:
        root = json.load(f)
    root["consolidated_metadata"]["metadata"]["train/label"]["shape"] = [2]
    with open(os.path.join(out, "zarr.json"), "w") as f:
        json.dump(root, f)
    assert zarr.open_group(out, mode="r")["train/label"].shape == (2,)
    with dstore.open(out) as ds:
        assert ds["train"]["label"][:].tolist() == arrays["train/label"].tolist()
    dstore.convert(source, out, overwrite=True)  # its own card is no foreign file
    assert _load(card)["version"] == "1.0.0"


def test_a_zarr_store_written_before_gets_its_card_inside(tmp_path, source):
    """'dstore card' on a store dstore wrote before stores had their listing: the listing
    is added (no value changes) and the card goes inside, keeping what its earlier card
    beside the store was given; a zarr store dstore did not write is never changed: its
    card goes beside it."""
    import zarr

    out = tmp_path / "old.zarr"
    dstore.convert(source, str(out), card=False)
    root = json.loads((out / "zarr.json").read_text())
    del root["consolidated_metadata"]  # as stores were written before
    (out / "zarr.json").write_text(json.dumps(root))
    assert main(["card", str(out), "--out", f"{out}.croissant.json", "--license", "mit"]) == 0
    assert main(["card", str(out)]) == 0
    assert _load(out / "croissant.json")["license"] == "mit"
    _zarr_lists_quietly(str(out))
    assert main(["verify", source, str(out)]) == 0
    assert not [p for p in os.listdir(tmp_path) if "dstore-append" in p]

    theirs = tmp_path / "theirs.zarr"
    group = zarr.open_group(str(theirs), mode="w")
    group.create_array("x", shape=(3, 2), dtype="f4")[:] = np.arange(6).reshape(3, 2)
    before = (theirs / "zarr.json").read_bytes()
    assert dstore.card(str(theirs)).written == [f"{theirs}.croissant.json"]
    assert (theirs / "zarr.json").read_bytes() == before
    assert sorted(os.listdir(theirs)) == ["x", "zarr.json"]
