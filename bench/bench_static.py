"""The static choice (adaptation off) at several streaming thresholds, side
by side on generated programs: where should it stream from?

Each candidate is ``auto`` with adaptation off and CLEARPAGES_NT_THRESHOLD
set for its run (``cp.reload_config``), beside the fixed routines of the
quick set, ``numpy.fill`` and ``ctypes.memset``, interleaved round by round
in one process (clearpages/tools/phased.py runs the programs).  Printed
per threshold: its ratio to the per-phase oracle (median and 10th
percentile over programs) and to ``numpy.fill`` and ``ctypes.memset`` (the
worst program, and how many fall below 0.95 of them).

    python bench/bench_static.py [--programs 20] [--seed S] [--rounds 4]
                                 [--at default 1/4 1/2] [--json FILE]

``--at``: thresholds as ``default`` (the package's), a fraction of the L3
(``1/4``) or a size (``32K``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys

import _common  # noqa: F401  (puts the checkout on the path)

import clearpages as cp
from clearpages.tools import generated, measure, phased
from clearpages.tools.lowlevel import format_size, parse_size


def threshold(text: str, l3: int) -> int | None:
    """None for the package's default, else bytes."""
    if text == "default":
        return None
    if "/" in text:
        num, den = text.split("/")
        return l3 * int(num) // int(den)
    return parse_size(text)


def candidate(name: str, nt: int | None) -> phased.Candidate:
    def before() -> None:
        env = {"CLEARPAGES_ADAPT": "0"}
        if nt is not None:
            env["CLEARPAGES_NT_THRESHOLD"] = str(nt)
        cp.reload_config(env)

    return phased.Candidate(name, phased.clearer("auto"), before=before,
                            after=lambda: cp.reload_config())


def _median(xs: list[float]) -> float:
    ys = [x for x in xs if math.isfinite(x)]
    return statistics.median(ys) if ys else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=20)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--rounds", type=int, default=phased.QUICK_ROUNDS)
    ap.add_argument("--at", nargs="+", default=["default", "1/4", "1/2"])
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 10**6)
    l3 = cp.cpu().last_cache or generated.DEFAULT_L3
    statics = {}
    for text in a.at:
        nt = threshold(text, l3)
        name = "static %s" % (text if nt is None else format_size(nt))
        statics[name] = nt

    def pick(name: str) -> phased.Candidate:
        return candidate(name, statics[name]) if name in statics else phased.candidate(name)
    fixed = phased.fixed_names(phased.candidate_names(quick=True))
    names = list(statics) + fixed
    programs = generated.corpus(seed, a.programs, l3)
    print("%s; static thresholds side by side: --programs %d --seed %d --rounds %d; "
          "load average %.1f %.1f %.1f" % ((cp.cpu().brand or cp.cpu().vendor, a.programs,
                                            seed, a.rounds) + os.getloadavg()))
    results = phased.run(programs, names, rounds=a.rounds, make=pick)
    print("load average at the end %.1f %.1f %.1f" % os.getloadavg())
    print("%-16s %-26s %-22s %-22s" % ("", "/oracle median (p10)", "/numpy.fill worst (<0.95)",
                                       "/ctypes.memset worst (<0.95)"))
    for name in statics:
        oracle = [_median(r.ratios(name, phased.ORACLE)) for r in results]
        rivals = []
        for ref in (measure.NUMPY_FILL, measure.MEMSET):
            xs = [_median(r.ratios(name, ref)) for r in results]
            rivals.append("%.2f (%d)" % (min(xs), sum(x < phased.GOAL_RIVAL for x in xs)))
        print("%-16s %-26s %-22s %-22s" % (
            name, "%.3f (%.3f)" % (_median(oracle), phased.percentile(oracle, 0.1)), *rivals))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(phased.to_json(results, {"seed": seed, "at": a.at}), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
