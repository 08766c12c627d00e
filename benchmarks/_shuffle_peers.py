"""The peers' shuffled readers for bench_shuffle.py, one epoch per process.

Run by bench_shuffle.py with the Python of the environment each peer needs
(MosaicML streaming and litdata import torchvision, which needs torch's default
CUDA build here: ``--peers-python``; Grain, webdataset and Hugging Face
``datasets`` run in dstore's own). Nothing here uses dstore's readers: the
parts of dstore used are its PNG decoder, so that every reader decodes the same
PNG bytes with the same function (``--decoder pil`` uses PIL instead), and, for
Grain's tf.train.Example records, its Example wire parser.

    python _shuffle_peers.py write mds|litdata WEBDATASET_DIR OUT
    python _shuffle_peers.py write hf PARQUET_DIR -
    python _shuffle_peers.py read PEER PATH [--workers 2] [--batch 64] [--seed 1]

``write`` copies the PNG bytes, label and position ``k`` of every record of
dstore's WebDataset tars into the peer's own format with the peer's own writer
(``hf``: ``load_dataset`` converts dstore's Parquet files into its Arrow cache);
``read`` prints one line ``RESULT {"seconds", "first", "order"}``: the epoch's
seconds from building the dataset to the last batch (imports excluded), the
seconds to the first batch, and the ``k`` of each record in the order delivered.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import sys
import tarfile
import time

import numpy as np

PEERS = ("mds", "litdata", "grain", "webdataset", "hf")


def decoder(name: str):
    if name == "pil":
        from PIL import Image

        return lambda data: np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    from dstore.images.png import decode

    return decode


def dstore_samples(wds_dir: str):
    """(k, PNG bytes, label bytes) of each record of dstore's WebDataset tars, in order
    (a sample's members are consecutive and share the name before the first dot)."""

    def sample_of(members: dict[str, bytes]) -> tuple[int, bytes, bytes]:
        y = np.load(io.BytesIO(members["y.npy"]))
        return int(members["k.cls"]), members["x.png"], y.tobytes()

    for tar_path in sorted(glob.glob(os.path.join(wds_dir, "train-*.tar"))):
        with tarfile.open(tar_path) as tar:
            key, members = None, {}
            for member in tar:
                name, ext = member.name.split(".", 1)
                if name != key and members:
                    yield sample_of(members)
                    members = {}
                key = name
                f = tar.extractfile(member)
                assert f is not None
                members[ext] = f.read()
            if members:
                yield sample_of(members)


def write_mds(wds_dir: str, out: str) -> None:
    from streaming import MDSWriter

    columns = {"x": "bytes", "k": "int64", "y": "bytes"}
    with MDSWriter(out=out, columns=columns, size_limit="64mb") as writer:
        for k, png, y in dstore_samples(wds_dir):
            writer.write({"x": png, "k": k, "y": y})


def _litdata_item(sample: tuple[int, bytes, bytes]) -> dict:
    k, png, y = sample
    return {"x": png, "k": k, "y": y}


def write_litdata(wds_dir: str, out: str) -> None:
    from litdata import optimize

    samples = list(dstore_samples(wds_dir))
    optimize(_litdata_item, samples, out, chunk_bytes="64MB", num_workers=1)


def loader_mds(path: str, decode, workers: int, batch: int, seed: int):
    import torch
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Decoded(StreamingDataset):
        def get_item(self, idx: int) -> dict:
            s = super().get_item(idx)
            return {"x": torch.from_numpy(decode(s["x"])), "k": s["k"]}

    ds = Decoded(local=path, shuffle=True, shuffle_algo="py1e", shuffle_seed=seed, batch_size=batch)
    return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)


def loader_litdata(path: str, decode, workers: int, batch: int, seed: int):
    import torch
    from litdata import StreamingDataset

    class Decoded(StreamingDataset):
        def __getitem__(self, index) -> dict:
            s = super().__getitem__(index)
            return {"x": torch.from_numpy(decode(s["x"])), "k": s["k"]}

    ds = Decoded(input_dir=path, shuffle=True, seed=seed)
    return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)


def loader_webdataset(path: str, decode, workers: int, batch: int, seed: int):
    import torch
    import webdataset as wds

    def dec(sample: dict) -> dict:
        return {"x": torch.from_numpy(decode(sample["x.png"])), "k": int(sample["k.cls"])}

    urls = sorted(glob.glob(os.path.join(path, "train-*.tar")))
    # empty_check=False: a worker may get no shard when there are fewer shards than workers
    ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, empty_check=False)
    ds = ds.shuffle(1000).map(dec)
    return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)


def loader_hf(path: str, decode, workers: int, batch: int, seed: int):
    """``load_dataset`` of dstore's Parquet files (converted to Arrow once by ``write hf``;
    loading that cache is timed), ``shuffle(seed)``: with ``--decoder pil``,
    ``with_format('torch')`` (the Image feature decodes with PIL, Hugging Face's own way),
    otherwise the Image column undecoded and its PNG bytes decoded by ``decode``."""
    import datasets
    import torch

    ds = _hf_load(path).shuffle(seed=seed)
    if decode is None:
        ds = ds.with_format("torch")
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)

    def collate(rows: list[dict]) -> dict:
        xs = [torch.from_numpy(decode(r["x"]["bytes"])) for r in rows]
        return {"x": torch.stack(xs), "k": torch.tensor([r["k"] for r in rows])}

    ds = ds.cast_column("x", datasets.Image(decode=False))
    return torch.utils.data.DataLoader(
        ds, batch_size=batch, num_workers=workers, collate_fn=collate
    )


def _hf_load(path: str):
    import datasets

    files = sorted(glob.glob(os.path.join(path, "train-*.parquet")))
    cache = os.path.join(os.path.dirname(path), "hf-cache")
    return datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)


def grain_loader(path: str, decode, workers: int, batch: int, seed: int):
    """Grain's own loader (``grain.DataLoader``, ``IndexSampler(shuffle=True)``: a global
    permutation) over dstore's ArrayRecord shards; each record's tf.train.Example is
    parsed by dstore's wire decoder."""
    import grain

    from dstore.codecs.example.wire import decode_example

    class Decode(grain.transforms.Map):
        def map(self, record: bytes) -> dict:
            ex = decode_example(record)
            return {"x": decode(bytes(ex["x"][1][0])), "k": int(ex["k"][1][0])}

    shards = sorted(glob.glob(os.path.join(path, "data-train.array_record-*")))
    source = grain.sources.ArrayRecordDataSource(shards)
    sampler = grain.samplers.IndexSampler(
        num_records=len(source),
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=seed,
    )
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(), grain.transforms.Batch(batch_size=batch)],
        worker_count=workers,
    )


#: what each peer imports, imported before the epoch's clock starts
MODULES = {
    "mds": ("torch", "streaming", "streaming.base.util"),
    "litdata": ("torch", "litdata"),
    "grain": ("grain", "dstore.codecs.example.wire"),
    "webdataset": ("torch", "webdataset"),
    "hf": ("torch", "datasets"),
}

LOADERS = {
    "mds": loader_mds,
    "litdata": loader_litdata,
    "grain": grain_loader,
    "webdataset": loader_webdataset,
    "hf": loader_hf,
}


def timed_epoch(loader, t0: float) -> dict:
    """One pass over ``loader``, whose clock started at ``t0``: seconds, seconds to the
    first batch, the positions (field ``k``) in the order delivered, and the CPU seconds
    (user, system) of the worker processes the pass started and ended (0 for a loader
    whose workers outlive it). bench_shuffle's own ways time their epochs with it too."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    keys, first = [], None
    for b in loader:
        if first is None:
            first = time.perf_counter() - t0
        keys.append(np.asarray(b["k"]).reshape(-1))
    seconds = time.perf_counter() - t0  # a DataLoader's workers are joined when it ends
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "first": first,
        "order": np.concatenate(keys),
        "worker_user": after.ru_utime - children.ru_utime,
        "worker_sys": after.ru_stime - children.ru_stime,
    }


def read(peer: str, path: str, decode, workers: int, batch: int, seed: int) -> dict:
    import importlib

    for name in MODULES[peer]:
        importlib.import_module(name)
    t0 = time.perf_counter()
    epoch = timed_epoch(LOADERS[peer](path, decode, workers, batch, seed), t0)
    return {**epoch, "order": epoch["order"].tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("peer", choices=("mds", "litdata", "hf"))
    w.add_argument("source")
    w.add_argument("out")
    r = sub.add_parser("read")
    r.add_argument("peer", choices=PEERS)
    r.add_argument("path")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--batch", type=int, default=64)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--decoder", choices=("dstore", "pil"), default="dstore")
    args = ap.parse_args()
    if args.cmd == "write":
        if args.peer == "hf":
            _hf_load(args.source)  # Arrow conversion into the cache, once
        else:
            {"mds": write_mds, "litdata": write_litdata}[args.peer](args.source, args.out)
        return
    decode = decoder(args.decoder)
    if args.peer == "hf" and args.decoder == "pil":
        decode = None  # Hugging Face's own Image feature decodes
    res = read(args.peer, args.path, decode, args.workers, args.batch, args.seed)
    print("RESULT " + json.dumps(res))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
