"""Two builds of clearpages side by side on generated programs: a change
to the learner, before and after, on programs it was not tuned on.

Each source tree (a checkout, built in place: ``python setup.py build_ext
--inplace``) runs each program in a process of its own, the two trees in
turn (which goes first alternates by round and by program), every
candidate interleaved inside the process as ``bench --programs`` runs them.
A filter keeps the phases a change is about (``--places``: where the
buffers are; ``--largest LO HI``: the phase's largest buffer in (LO, HI];
``--total``: its buffers adding up to no more than that); a program
without such a phase is left out.  Per phase and tree, auto's time over
the phase's best fixed candidate (the one with the lowest median over both
trees) and the faster of ``numpy.fill`` and ``ctypes.memset`` over auto,
each the median over rounds of the per-round ratio; then, per tree, their
median, geometric mean and the phases below 0.9, and the phases that moved
most between the trees.  The verdict is paired: per phase the log of the
after tree's ratio over the before tree's, their mean with its 95%
interval over the phases (an interval that holds 0 is no difference the
run can tell); and, per tree, auto/best weighted by time (the best's time
over auto's, each summed over the phases).

    python bench/bench_ab.py BEFORE AFTER --seed S [--programs 200] [--rounds 3]
        [--places several threads] [--largest 2M 32M] [--total 40M] [--only I ...]
        [--json FILE]

Single phases move by up to 0.15 between two runs of one build here:
judge by the paired interval, over many phases (on the Zen 4 guest, 54
phases pinned the mean to +-0.04: a change worth 2% needs 200 or more),
not by one phase.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import _common

FIXED = ("numpy.fill", "ctypes.memset", "rep_stosb")
PLACES = ("one", "walk", "several", "hot+pool", "threads")


def _keep(sizes: list[int], place: str, a: argparse.Namespace) -> bool:
    lo, hi = a.largest or (0, None)
    return (place in a.places and lo < max(sizes) and (hi is None or max(sizes) <= hi)
            and (not a.total or sum(sizes) <= a.total))


def worker(a: argparse.Namespace) -> int:
    """In the tree's own process: the kept phases of the listed programs,
    once, every candidate; their times as JSON on stdout."""
    import dataclasses

    import clearpages as cp
    from clearpages.tools import generated as G, phased as P
    th = cp.thresholds()
    cands = ["auto", *FIXED, th.streaming]
    progs = []
    for i in a.worker:
        p = G.generate(a.seed, i, cp.cpu().last_cache)
        keep = tuple(ph for ph in p.phases if _keep(list(p.sizes(ph)), ph.place, a))
        progs.append(dataclasses.replace(p, phases=keep))
    res = P.run(progs, cands, rounds=1)
    json.dump([{"name": r.program.name, "times": {c: r.times[c][0] for c in cands},
                "phases": [[ph.place, list(r.program.sizes(ph)), ph.calls, ph.work]
                           for ph in r.program.phases]} for r in res], sys.stdout)
    return 0


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def t975(df: int) -> float:
    """Student's t at 97.5% for df degrees of freedom (the normal quantile's
    Cornish-Fisher expansion: within 1% from 3 up)."""
    return 1.96 + 2.372 / df + 2.823 / df ** 2 + 2.554 / df ** 3


def paired(before: list[float], after: list[float]) -> tuple[float, float, float, int]:
    """Per phase ln(after / before) of a ratio where higher is better: their
    mean, the 95% interval of the mean (Student's t over the phases), and
    the phases after improved.  A phase's two ratios share its program, its
    best candidate and its noise of the day, so their difference is what the
    change did plus the rounds' noise; the mean over many phases and its
    interval say whether the change moved them, which the two medians side
    by side cannot (each carries the spread of the phases, ~0.15)."""
    d = [math.log(b / a) for a, b in zip(before, after)]
    if len(d) < 3:
        return (statistics.fmean(d) if d else math.nan, -math.inf, math.inf,
                sum(x > 0 for x in d))
    m = statistics.fmean(d)
    half = t975(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return m, m - half, m + half, sum(x > 0 for x in d)


def judge(runs: dict[str, list[dict[str, Any]]], trees: list[str]) -> str:
    """The per-phase ratios of each tree, summarised."""
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for t in trees:
        for x in runs[t]:
            by.setdefault(x["name"], {}).setdefault(t, []).append(x)
    ratio: dict[str, list[float]] = {t: [] for t in trees}
    vs_libc: dict[str, list[float]] = {t: [] for t in trees}
    # The time-weighted figure: the best's time over auto's, each summed
    # over the phases (medians over rounds), so that a long phase weighs
    # what it costs a program and a short, noisy one little.
    summed: dict[str, list[float]] = {t: [0.0, 0.0] for t in trees}
    moved = []
    for name, per in sorted(by.items()):
        if any(t not in per for t in trees):
            continue
        for k, ph in enumerate(per[trees[0]][0]["phases"]):
            fixed = [c for c in per[trees[0]][0]["times"] if c != "auto"]
            best = min(fixed, key=lambda c: statistics.median(
                x["times"][c][k] for t in trees for x in per[t]))
            got = []
            for t in trees:
                r = statistics.median(x["times"][best][k] / x["times"]["auto"][k]
                                      for x in per[t])
                f = statistics.median(min(x["times"]["numpy.fill"][k],
                                          x["times"]["ctypes.memset"][k])
                                      / x["times"]["auto"][k] for x in per[t])
                ratio[t].append(r)
                vs_libc[t].append(f)
                summed[t][0] += statistics.median(x["times"][best][k] for x in per[t])
                summed[t][1] += statistics.median(x["times"]["auto"][k] for x in per[t])
                got.append(r)
            what = "%s/%d %s %s x%d %s (best %s)" % (
                name, k, ph[0], "+".join(_common.fmt_size(n) for n in ph[1]), ph[2],
                ph[3], best)
            moved.append((got[-1] - got[0], what, got))
    rows = []
    for t in trees:
        xs, fs = ratio[t], vs_libc[t]
        if not xs:
            continue
        rows.append([t, str(len(xs)), "%.3f" % statistics.median(xs), "%.3f" % _geo(xs),
                     str(sum(x < 0.9 for x in xs)), "%.2f" % min(xs),
                     "%.3f" % statistics.median(fs), "%.3f" % _geo(fs),
                     str(sum(x < 0.9 for x in fs)), "%.2f" % min(fs)])
    head = ["tree", "phases", "auto/best median", "geo", "<0.9", "worst",
            "libc/auto median", "geo", "<0.9", "worst"]
    out = [_common.table(head, rows)]
    a, b = trees
    if ratio[a] and ratio[b]:
        m, lo, hi, up = paired(ratio[a], ratio[b])
        said = ("no difference these phases can tell" if lo <= 0 <= hi
                else "after better" if lo > 0 else "after worse")
        out.append("\npaired, per phase ln(after / before) of auto/best: mean %+.3f, 95%% "
                   "interval %+.3f..%+.3f over %d phases (after better in %d): %s"
                   % (m, lo, hi, len(ratio[a]), up, said))
        out.append("time-weighted auto/best (the best's time over auto's, summed over the "
                   "phases): %s" % ", ".join("%s %.3f" % (os.path.basename(t) or t,
                                                        summed[t][0] / summed[t][1])
                                             for t in trees))
    moved.sort()
    if moved:
        out.append("\nmoved most (auto/best, %s):" % " -> ".join(trees))
        for d, what, got in moved[:6] + moved[-6:] if len(moved) > 12 else moved:
            out.append("  %+.2f  %s  %s" % (d, " -> ".join("%.2f" % g for g in got), what))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", help="two source trees, built in place")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--places", nargs="+", choices=PLACES, default=list(PLACES))
    ap.add_argument("--largest", nargs=2, type=_common.size_arg, metavar=("LO", "HI"))
    ap.add_argument("--total", type=_common.size_arg, default=0)
    ap.add_argument("--only", nargs="+", type=int, metavar="I",
                    help="only these programs of the seed (their index, as in g<seed>.<I>)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--worker", nargs="+", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)
    if len(a.trees) != 2:
        ap.error("name two source trees")
    if a.only and not all(0 <= i < a.programs for i in a.only):
        ap.error("--only takes program indices from 0 to --programs - 1 (%d)" % (a.programs - 1))
    trees = [str(Path(t).resolve()) for t in a.trees]
    import clearpages as cp
    from clearpages.tools import generated as G
    l3 = cp.cpu().last_cache
    idxs = [i for i, p in enumerate(G.corpus(a.seed, a.programs, l3))
            if any(_keep(list(p.sizes(ph)), ph.place, a) for ph in p.phases)
            and (not a.only or i in a.only)]
    print("seed %d: %d of %d programs have such a phase" % (a.seed, len(idxs), a.programs),
          flush=True)
    flags = ["--seed", str(a.seed), "--places", *a.places, "--total", str(a.total)]
    if a.largest:
        flags += ["--largest", *(str(x) for x in a.largest)]
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    for r in range(a.rounds):
        for i in idxs:
            order = trees if (r + i) % 2 == 0 else trees[::-1]
            for t in order:
                env = dict(os.environ, PYTHONPATH=t)
                p = subprocess.run([sys.executable, __file__, *flags, "--worker", str(i)],
                                   env=env, capture_output=True, text=True, check=False)
                if p.returncode:
                    sys.stderr.write(p.stderr[-3000:])
                    return 1
                runs[t] += json.loads(p.stdout)
        print("round %d of %d done" % (r + 1, a.rounds), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps({"seed": a.seed, "trees": trees, "runs": runs}))
    print(judge(runs, trees))
    return 0


def test_ab_quick(tmp_path: Path) -> None:
    """The same tree twice, one small program's one-buffer phases (--only
    the last of seed 7's first six that has one), one round: both sides
    judged, every ratio positive, no other program run."""
    import clearpages as cp
    from clearpages.tools import generated as G
    root = str(Path(__file__).resolve().parent.parent)
    out = tmp_path / "ab.json"
    flags = ["--places", "one", "--largest", "0", "256K"]
    a = argparse.Namespace(places=["one"], largest=(0, 256 << 10), total=0)
    kept = [i for i, p in enumerate(G.corpus(7, 6, cp.cpu().last_cache))
            if any(_keep(list(p.sizes(ph)), ph.place, a) for ph in p.phases)]
    assert kept, "no program of seed 7 has a one-buffer phase up to 256 KiB"
    assert main([root, root, "--seed", "7", "--programs", "6", "--rounds", "1", *flags,
                 "--only", str(kept[-1]), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {x["name"] for x in data["runs"][root]} == {"g7.%d" % kept[-1]}
    for x in data["runs"][root]:
        assert all(all(v > 0 for v in t) for t in x["times"].values())


def test_only_out_of_range_is_an_error() -> None:
    """An index past --programs is refused, not silently left out."""
    import pytest
    root = str(Path(__file__).resolve().parent.parent)
    with pytest.raises(SystemExit):
        main([root, root, "--seed", "7", "--programs", "6", "--only", "6"])


if __name__ == "__main__":
    sys.exit(main())


def test_paired_tells_a_shift_from_noise() -> None:
    """A shift of every phase by 5% under noise of +-10% is told (the
    interval excludes 0, on the right side); the same noise with no shift
    is not; t975 is within 1% of Student's t from 3 degrees of freedom."""
    import random
    rng = random.Random(1)
    before = [rng.uniform(0.6, 1.2) for _ in range(200)]
    noisy = [b * rng.uniform(0.9, 1.1) for b in before]
    _, lo, hi, up = paired(before, [x * 1.05 for x in noisy])
    assert 0 < lo < math.log(1.05) < hi and up > 100
    _, lo, hi, up = paired(before, noisy)
    assert lo < 0 < hi
    for df, t in ((3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (200, 1.972)):
        assert abs(t975(df) - t) / t < 0.01, df
