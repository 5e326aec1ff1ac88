"""auto judged on programs nobody wrote: drawn from a seed, each a sequence
of phases (sizes 4 KiB to 4x the L3, phases of 50-5,000 calls, one buffer, a
pool walk, several buffers, a hot buffer between pool pages, two threads;
noisy work between clears; other code's clears), each timed whole with every
candidate, interleaved in one process (clearpages/tools/generated.py draws
them, tools/phased.py runs and judges them).

    python bench/bench_generated.py [--programs 200] [--seed S] [--rounds 5]
                                    [--retake 4] [--quick] [--cases] [--json FILE]
    python bench/bench_generated.py --seed S --only I [I ...] [--rounds 5] [--quick]

(the same as ``python -m clearpages bench --programs --generated N``; the
seed is drawn at run time and printed unless given, so a run can be
replayed).  ``--only`` runs the programs of those indices of the seed's
corpus, in that order, in one process, as the whole run runs them (where
``bench/bench_ab.py --only`` runs each in a process of its own): a program
that lost only in the whole run, after the programs before it, is replayed
with them.  Under pytest (``-k generated``): CLEARPAGES_BENCH_PROGRAMS
programs (default 8, quick candidates, 4 rounds) from CLEARPAGES_BENCH_SEED
(default: drawn and printed), a program in doubt retaken as the command
does; the goals in extra_info and in the session's summary.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Any

import _common
import pytest

import clearpages as cp
from clearpages.tools import generated, measure, phased
from clearpages.tools.cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--retake", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", action="store_true", help="the hand-written cases too")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--only", type=int, nargs="+", metavar="I",
                    help="these programs of --seed's corpus, in this order, in one process")
    a = ap.parse_args(argv)
    if a.only:
        return only(a)
    args = ["bench", "--programs", "--generated", str(a.programs)]
    for flag, value in (("--seed", a.seed), ("--rounds", a.rounds), ("--retake", a.retake),
                        ("--json", a.json)):
        if value is not None:
            args += [flag, str(value)]
    args += ["--quick"] * a.quick + ["--cases"] * a.cases
    return cli_main(args)


def only(a: argparse.Namespace) -> int:
    """--only: some programs of a seed's corpus, judged as a run of them."""
    if a.seed is None or a.cases or a.json:
        print("--only replays programs of a given --seed; it takes no --cases or --json",
              file=sys.stderr)
        return 2
    if not measure.have_numpy():
        print("the programs need numpy", file=sys.stderr)
        return 2
    l3 = cp.cpu().last_cache or generated.DEFAULT_L3
    programs = [generated.generate(a.seed, i, l3) for i in a.only]
    rounds = a.rounds or (phased.QUICK_ROUNDS if a.quick else phased.ROUNDS)
    retake = phased.RETAKE_ROUNDS if a.retake is None else a.retake
    results = phased.run(programs, phased.candidate_names(quick=a.quick), rounds=rounds,
                         retake=retake, doubtful=phased.doubtful,
                         retake_most=phased.retake_most(rounds, retake))
    phased.report_generated(results, sys.stdout)
    return 0


SUITE = "generated"


def _seed() -> int:
    text = os.environ.get("CLEARPAGES_BENCH_SEED", "")
    return int(text) if text else random.SystemRandom().randrange(1, 10**6)


def test_generated_programs(benchmark: Any) -> None:
    """A corpus of generated programs: the time is the whole measurement;
    extra_info and the summary hold the goals, judged."""
    if not measure.have_numpy():
        pytest.skip("the programs need numpy")
    count = int(os.environ.get("CLEARPAGES_BENCH_PROGRAMS", "8"))
    seed = _seed()
    programs = generated.corpus(seed, count, cp.cpu().last_cache or generated.DEFAULT_L3)
    out: list[phased.ProgramResult] = []

    def run() -> None:
        out[:] = phased.run(programs, phased.candidate_names(quick=True),
                            rounds=phased.QUICK_ROUNDS, retake=phased.RETAKE_ROUNDS,
                            doubtful=phased.doubtful,
                            retake_most=phased.retake_most(phased.QUICK_ROUNDS,
                                                           phased.RETAKE_ROUNDS))
    benchmark.pedantic(run, rounds=1, iterations=1)
    g = phased.goals(out)
    benchmark.extra_info["seed"] = seed
    benchmark.extra_info["retaken"] = sum(1 for r in out if r.retaken)
    rec = {}
    for e in g.rivals:
        benchmark.extra_info["every program vs %s" % e.ref] = e.outcome
        rec["%s, every program" % e.ref] = e.text()
    for v in (g.median, g.p10):
        benchmark.extra_info[v.reference] = round(v.ratio, 3)
        rec[v.reference] = v.text()
    twin = phased.noise(out)
    if twin is not None:
        # what identical code scores by the same rules: the run's own noise
        benchmark.extra_info["noise, %s" % twin.p10.reference] = round(twin.p10.ratio, 3)
        rec["noise, %s" % twin.p10.reference] = twin.p10.text()
    _common.RESULTS.setdefault(SUITE, {})[("seed %d" % seed, "%d programs" % count)] = rec


def test_generated_quick() -> None:
    """Smoke: two tiny programs, one round, every place and kind of work
    the seed draws."""
    if not measure.have_numpy():
        pytest.skip("the programs need numpy")
    programs = generated.corpus(_seed(), 2, sizes=(4096, 64 * 1024), seconds=(0.005, 0.02))
    res = phased.run(programs, phased.candidate_names(quick=True), rounds=1)
    assert len(res) == 2 and all(r.rounds == 1 for r in res)


@_common.summary_of(SUITE)
def _summary(res: dict) -> tuple[str, str]:
    lines = []
    for (seed, count), rec in res.items():
        lines.append("%s, %s (replay: CLEARPAGES_BENCH_SEED=%s)" % (
            seed, count, seed.split()[-1]))
        lines += ["  " + text for text in rec.values()]
    return ("generated programs: auto >= 0.95 of numpy.fill and ctypes.memset in every "
            "program; median >= 0.97 of the per-phase oracle, 10th percentile >= 0.90",
            "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
