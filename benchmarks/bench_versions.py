"""Same-run A/B: `dstore convert` npz -> TFRecord (PNG images) at this checkout vs earlier revisions.

    python benchmarks/bench_versions.py --base REV [--base REV2 ...] --tiles N --pairs K
        [--head REV] [-o KEY=VALUE ...]

What it measures: the wall time (and the child's CPU time, workers included) of
one whole ``dstore convert SRC OUT [-o ...]`` process -- interpreter start-up
and imports included -- on ONE label-maker style ``data.npz`` of N 256x256x3
uint8 tiles cropped from scikit-image's photographs (``dstore.demo``'s helper,
one-hot labels, ``np.savez`` uncompressed). "head" is the current checkout
(working tree as it is) unless --head names a revision; each such REV is a
detached git worktree in a temp dir (removed at the end). Every process gets ``PYTHONPATH`` set to its version's
tree, so the same Python and installed libraries run every version's code.

Why pairs alternate: the machine is shared and its load drifts by minutes, so
running all of one version and then all of the other would time the load, not
the code. Each pair runs a base and then head back to back; the per-pair ratio
head/base compares two runs under nearly the same load, and the median of the
pair ratios is the figure to read (the ratio of medians is printed beside it).
Each run's exit code must be 0, and every version's last output must hold as
many records as head's (read back with this checkout's ``dstore.open``).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent


@dataclass
class Version:
    """One dstore tree to run and the measurements of its runs."""

    label: str
    rev: str
    subject: str
    root: Path
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    out_bytes: list[int] = field(default_factory=list)


def git(*args: str, cwd: Path = CHECKOUT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def make_source(path: Path, tiles: int) -> None:
    """The label-maker style npz, built with this checkout's helper (real photo crops)."""
    sys.path.insert(0, str(CHECKOUT))
    from dstore.demo import make_label_maker_npz

    make_label_maker_npz(str(path), n=tiles, seed=42)


def add_worktree(rev: str, tmp: Path, role: str) -> Version:
    sha = git("rev-parse", "--short", f"{rev}^{{commit}}")
    root = tmp / f"{role}-{sha}"
    git("worktree", "add", "--detach", str(root), sha)
    return Version(f"{role} {sha}", sha, git("log", "-1", "--format=%s", sha)[:60], root)


def head_version() -> Version:
    sha = git("rev-parse", "--short", "HEAD")
    dirty = (
        " (+ uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    )
    return Version("head", sha + dirty, git("log", "-1", "--format=%s")[:60], CHECKOUT)


def env_for(version: Version) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(version.root), PYTHONWARNINGS="ignore")


def check_import(version: Version, cwd: Path) -> None:
    """The subprocess must import dstore from the version's tree, not an installed copy."""
    out = subprocess.run(
        [sys.executable, "-c", "import dstore; print(dstore.__file__)"],
        env=env_for(version),
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(version.root.resolve()):
        sys.exit(f"{version.label}: dstore imported from {out}, not from {version.root}")


def tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def run_convert(version: Version, src: Path, out: Path, opts: list[str], cwd: Path) -> None:
    """One timed ``dstore convert`` process; appends wall s, CPU s and output bytes."""
    remove(out)
    argv = ["convert", str(src), str(out), *opts]
    code = f"from dstore.cli import main; import sys; sys.exit(main({argv!r}))"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env_for(version),
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{version.label} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    version.seconds.append(wall)
    version.cpu.append((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
    version.out_bytes.append(tree_size(out))


def count_records(path: Path) -> int:
    """Records in every split, read back with this checkout's dstore (labels only, not the PNGs)."""
    sys.path.insert(0, str(CHECKOUT))
    import dstore

    n = 0
    with dstore.open(path) as ds:
        for split in ds:
            for batch in ds[split].iter_batches(fields=["y"]):
                n += len(batch["y"])
    return n


def report(versions: list[Version], head: Version, tiles: int, pairs: list[list[float]]) -> None:
    print("| version | commit | runs | median s | tiles/s | median CPU s | output MB |")
    print("|---|---|---|---|---|---|---|")
    for v in [*versions, head]:
        med = statistics.median(v.seconds)
        print(
            f"| {v.label} | {v.rev}: {v.subject} | {len(v.seconds)} | {med:.2f} | "
            f"{tiles / med:.1f} | {statistics.median(v.cpu):.2f} | "
            f"{statistics.median(v.out_bytes) / 1e6:.1f} |"
        )
    print()
    print(
        "| head vs | head/base of medians | median of pair ratios | per-pair ratios "
        "| CPU head/base of medians |"
    )
    print("|---|---|---|---|---|")
    head_med = statistics.median(head.seconds)
    for v, ratios in zip(versions, pairs, strict=True):
        ratio_of_medians = head_med / statistics.median(v.seconds)
        listed = ", ".join(f"{r:.3f}" for r in ratios)
        print(
            f"| {v.label} | {ratio_of_medians:.3f} | **{statistics.median(ratios):.3f}** | "
            f"{listed} | {statistics.median(head.cpu) / statistics.median(v.cpu):.3f} |"
        )
    print("\nratio = head seconds / base seconds: below 1 means head is faster.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", action="append", required=True, help="git revision to compare")
    ap.add_argument("--tiles", type=int, default=1500)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--head", help="a revision to use as head instead of this checkout")
    ap.add_argument("-o", dest="options", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    opts = [x for kv in args.options for x in ("-o", kv)]

    print(f"# bench_versions {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}; "
        f"load average at start: {loadavg()}"
    )
    print(
        "The machine is shared and loaded, so base and head runs alternate in pairs "
        "(base, head, base, head, ...); read the per-pair ratios."
    )
    print(f"options: {' '.join(opts) or '(defaults)'}; times are whole processes (start-up too)\n")

    tmp = Path(tempfile.mkdtemp(prefix="bench-versions-"))
    worktrees: list[Version] = []  # removed at the end
    try:
        for rev in args.base:
            worktrees.append(add_worktree(rev, tmp, "base"))
        versions = list(worktrees)
        if args.head:
            worktrees.append(head := add_worktree(args.head, tmp, "head"))
        else:
            head = head_version()
        src = tmp / "data.npz"
        make_source(src, args.tiles)
        print(f"source: {src.stat().st_size / 1e6:.0f} MB npz of {args.tiles} tiles\n")
        for v in [*versions, head]:
            check_import(v, tmp)
        outs = {v.label: tmp / f"out-{v.rev.split()[0]}.tfrecords" for v in [*versions, head]}
        pairs: list[list[float]] = [[] for _ in versions]
        for k in range(args.pairs):
            for i, v in enumerate(versions):
                run_convert(v, src, outs[v.label], opts, tmp)
                run_convert(head, src, outs[head.label], opts, tmp)
                pairs[i].append(head.seconds[-1] / v.seconds[-1])
                print(
                    f"pair {k + 1}/{args.pairs} {v.label}: {v.seconds[-1]:.2f} s, "
                    f"head {head.seconds[-1]:.2f} s, load {loadavg()}",
                    file=sys.stderr,
                )
        expected = count_records(outs[head.label])
        for v in versions:
            got = count_records(outs[v.label])
            if got != expected:
                sys.exit(f"{v.label} wrote {got} records, head {expected}")
        print(
            f"records: every version's output holds {expected} (read back with this checkout's dstore.open)\n"
        )
        report(versions, head, args.tiles, pairs)
        print(f"\nload average at end: {loadavg()}")
    finally:
        for v in worktrees:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(v.root)], check=False, cwd=CHECKOUT
            )
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
