"""What a ``bench --programs --generated`` run says of a policy it did not
measure: auto's time in the phases a filter keeps replaced by a fixed
candidate's, then judged by the run's own goals.

    python bench/what_if.py RUN.json [RUN.json ...] --largest 72M 128M
        [--as rep_stosb] [--places one several hot+pool threads]

Each run's JSON is what ``--json`` wrote (a run stopped part way counts
the programs it holds).  In every phase whose largest buffer lies in (LO,
HI] at one of the places (a walk's buffers are the pool's, never the
program's), a candidate "auto, the phase on NAME" takes NAME's time, round
by round; elsewhere auto's own.  Both are then judged as the run judges
auto: against ``numpy.fill`` and ``ctypes.memset`` in every program, and
the median and 10th percentile over programs of the ratio to the
per-phase oracle.

What it can say is bounded: NAME's time stands for the choice made from
the phase's first call, so a policy that would reach it only after a
comparison, or leave it after its checks, costs more or less than the
figure.  Holding the held sizes on ordinary stores, say, is shown at its
best where the machine kept them and at its worst where it did not.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import _common

PLACES = ("one", "several", "hot+pool", "threads")


def substitute(results: list[Any], lo: int, hi: int, places: list[str],
               name: str) -> tuple[str, int, int]:
    """Adds the what-if candidate to each result's times; its name, and
    the programs and phases it changed."""
    what = "auto, the phase on %s" % name
    programs = phases = 0
    for res in results:
        prog = res.program
        keep = [ph.place in places and lo < max(prog.sizes(ph), default=0) <= hi
                for ph in prog.phases]
        t = res.times
        res.times[what] = [[t[name][r][k] if keep[k] else t["auto"][r][k]
                            for k in range(len(t["auto"][r]))]
                           for r in range(len(t["auto"]))]
        programs += any(keep)
        phases += sum(keep)
    return what, programs, phases


def report(results: list[Any], names: list[str]) -> str:
    from clearpages.tools import phased as P
    lines = []
    for name in names:
        g = P.goals(results, name)
        lines.append(name)
        for every in g.rivals:
            worst = every.worst()
            lines.append("  %s (worst %s %.3f)" % (every.text(), worst[0], worst[1].ratio)
                         if worst else "  " + every.text())
        for v in (g.median, g.p10):
            lines.append("  %.3f [%.3f-%.3f] %s: %s" % (v.ratio, v.q1, v.q3, v.reference,
                                                        v.outcome))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="JSON files that --json wrote")
    ap.add_argument("--largest", nargs=2, type=_common.size_arg, metavar=("LO", "HI"),
                    required=True)
    ap.add_argument("--as", dest="name", default="rep_stosb",
                    help="the candidate whose time the kept phases take (default rep_stosb)")
    ap.add_argument("--places", nargs="+", choices=PLACES, default=list(PLACES))
    a = ap.parse_args(argv)
    from clearpages.tools import phased as P
    results = []
    for path in a.runs:
        with open(path) as f:
            results += P.from_json(json.load(f))
    if not results:
        ap.error("no programs in %s" % ", ".join(a.runs))
    if a.name not in results[0].times:
        ap.error("%r is no candidate of these runs: %s" % (a.name, ", ".join(results[0].times)))
    what, programs, phases = substitute(results, a.largest[0], a.largest[1], a.places, a.name)
    print("%d programs; %d phases in %d of them kept (largest buffer in (%s, %s], %s)" % (
        len(results), phases, programs, _common.fmt_size(a.largest[0]),
        _common.fmt_size(a.largest[1]), " ".join(a.places)))
    print(report(results, ["auto", what]))
    return 0


def test_what_if_takes_the_named_time_in_the_kept_phases_only(tmp_path: Any) -> None:
    """Two phases of one generated program, times made up: the kept phase
    takes rep_stosb's time round by round, the other keeps auto's, and the
    judged ratio against numpy.fill follows."""
    import dataclasses

    import clearpages as cp
    from clearpages.tools import generated as G, phased as P
    prog = next(p for p in G.corpus(7, 40, cp.cpu().last_cache)
                if len(p.phases) >= 2 and p.phases[0].place == "one"
                and p.phases[1].place == "walk")
    prog = dataclasses.replace(prog, phases=prog.phases[:2])
    n0 = max(prog.sizes(prog.phases[0]))
    times = {"auto": [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]],
             "rep_stosb": [[3.0, 5.0], [3.0, 5.0], [3.0, 5.0]],
             "numpy.fill": [[2.0, 2.0]] * 3, "ctypes.memset": [[2.0, 2.0]] * 3}
    results = P.from_json({"programs": [{"program": prog.to_json(), "times": times,
                                         "fixed": ["rep_stosb", "numpy.fill",
                                                   "ctypes.memset"]}]})
    what, programs, phases = substitute(results, n0 - 1, n0, list(PLACES), "rep_stosb")
    assert (programs, phases) == (1, 1)
    assert results[0].times[what] == [[3.0, 2.0]] * 3
    assert results[0].judge(what, "numpy.fill", 0.95).ratio == 4.0 / 5.0
    assert results[0].judge("auto", "numpy.fill", 0.95).ratio == 4.0 / 3.0
    assert "auto, the phase on rep_stosb" in report(results, ["auto", what])


if __name__ == "__main__":
    sys.exit(main())
