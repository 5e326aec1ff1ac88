"""Ctrl-C latency: SIGINT to KeyboardInterrupt while a large Region is
cleared in a loop (the goal: within milliseconds, even on a 12 GiB region).

    python bench/bench_ctrl_c.py [--size 12G] [--tries 5]

The buffer is then partly cleared; the table gives the milliseconds from the
signal to the exception, for one thread and for threads="auto".
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time

import _common

import clearpages as cp


def latencies(region: cp.Region, threads: int | str, tries: int) -> list[float]:
    out = []
    sent = [0.0]

    def fire() -> None:
        sent[0] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)

    for trial in range(tries):
        timer = threading.Timer(0.2 + 0.137 * trial, fire)
        timer.start()
        try:
            while True:
                cp.clear(region, threads=threads)
        except KeyboardInterrupt:
            out.append((time.perf_counter() - sent[0]) * 1e3)
        timer.join()
    return out


def run(size: int, tries: int) -> str:
    with cp.Region(size, page_size="2m", populate=True) as region:
        rows = []
        for threads in (1, "auto"):
            ms = latencies(region, threads, tries)
            rows.append([threads, "%.1f" % min(ms), "%.1f" % sorted(ms)[len(ms) // 2],
                         "%.1f" % max(ms)])
    return ("SIGINT -> KeyboardInterrupt while clearing a %s Region in a loop, ms over "
            "%d tries\n" % (_common.fmt_size(size), tries)
            + _common.table(["threads", "min", "median", "max"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=_common.size_arg, default=_common.size_arg("12G"))
    ap.add_argument("--tries", type=int, default=5)
    a = ap.parse_args(argv)
    print(_common.machine_label())
    print()
    print(run(a.size, a.tries))
    return 0


def test_ctrl_c_quick():
    text = run(256 << 20, 2)
    assert "256MiB" in text


if __name__ == "__main__":
    raise SystemExit(main())
