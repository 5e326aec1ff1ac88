"""What the learner's decision costs a walk of cold buffers, in C alone.

A harness built from this checkout's ``csrc/core/adapt.c`` (with gcc, into
a temporary directory) walks a pool much larger than the L3, clearing each
slice with ``memset`` (``--stos``: ``rep stosq``); in one mode nothing else runs, in the other the
learner decides each call first (``cp_adapt_choose``) and times the calls
it asks to (``cp_adapt_record_span``), as the binding does.  The two modes
run as separate processes, interleaved, several rounds each; printed: the
median ns a call of each and the learner's share above ``memset`` alone.
No Python between the calls, so what is left is the decision itself:
after a clear of cold memory the instructions that follow it run at their
own cost (none of it hidden behind the clear's stores), so the learner's
cost on such a walk is its count of instructions.

``--callgrind`` counts them instead (valgrind's callgrind, instrumented
after the learner has settled): instructions a call inside
``cp_adapt_choose``, the timed calls' share included.

    python bench/bench_adapt_walk.py [--size 4K] [--pool 512M] [--rounds 7] [--stos]
                                     [--callgrind]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clearpages.tools.lowlevel import parse_size

CORE = Path(__file__).resolve().parent.parent / "csrc" / "core"

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "adapt.h"
#ifdef COUNT
#include <valgrind/callgrind.h>
#endif

static void clear(char *d, size_t n)
{
#ifdef STOS
    size_t q = n / 8;
    __asm__ volatile("rep stosq" : "+D"(d), "+c"(q) : "a"(0ul) : "memory");
#else
    memset(d, 0, n);
#endif
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int learner = atoi(argv[1]);
    size_t n = strtoull(argv[2], 0, 10), pool = strtoull(argv[3], 0, 10);
    long settle = atol(argv[4]), calls = atol(argv[5]);
    int rounds = atoi(argv[6]);
    char *p = mmap(0, pool, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    memset(p, 1, pool);
    struct cp_adapt_params a;
    cp_adapt_defaults(&a);
    a.lo = 4096;
    a.hi = 64u << 20;
    a.reuse_bytes = 16u << 20;
    a.recent_max = 8u << 20;
    cp_adapt_configure(&a);
    size_t stride = (n + 4095) / 4096 * 4096, slots = pool / stride, k = 0;
    volatile int sink = 0;
    for (int r = -1; r < rounds; r++) {
        long m = r < 0 ? settle : calls;
#ifdef COUNT
        if (r == 0)
            CALLGRIND_START_INSTRUMENTATION;
#endif
        uint64_t t = now_ns();
        for (long i = 0; i < m; i++, k++) {
            char *d = p + (k % slots) * stride;
            int ticket = learner ? cp_adapt_choose(n, d) : -1;
            sink += ticket;
            if (ticket >= 0 && !(ticket & CP_ADAPT_UNTIMED)) {
                uint64_t t0 = cp_adapt_now_ns();
                clear(d, n);
                cp_adapt_record_span(n, ticket, t0, cp_adapt_now_ns());
            } else {
                clear(d, n);
            }
        }
        if (r >= 0)
            printf("%.2f\n", (double)(now_ns() - t) / (double)m);
    }
    return 0;
}
"""


def build(where: Path, count: bool, stos: bool = False) -> Path:
    src = where / "walk.c"
    src.write_text(HARNESS)
    exe = where / ("walk_count" if count else "walk_stos" if stos else "walk")
    cmd = ["gcc", "-O2", "-fno-builtin-memset", "-I", str(CORE), str(src),
           str(CORE / "adapt.c"), str(CORE / "inject.c"), str(CORE / "fork.c"),
           "-o", str(exe), "-lpthread", "-lm"]
    if count:
        cmd.insert(1, "-DCOUNT")
    if stos:
        cmd.insert(1, "-DSTOS")
    subprocess.run(cmd, check=True)
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4K")
    ap.add_argument("--pool", default="512M")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--stos", action="store_true",
                    help="clear with rep stosq instead of the C library's memset")
    ap.add_argument("--callgrind", action="store_true",
                    help="count the learner's instructions a call instead of timing")
    args = ap.parse_args(argv)
    n, pool = parse_size(args.size), parse_size(args.pool)
    if not shutil.which("gcc"):
        print("bench_adapt_walk: needs gcc", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        if args.callgrind:
            if not shutil.which("valgrind"):
                print("bench_adapt_walk: --callgrind needs valgrind", file=sys.stderr)
                return 2
            exe = build(where, count=True)
            out = where / "cg.out"
            calls = 50_000
            subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                            "--callgrind-out-file=%s" % out, str(exe), "1", str(n),
                            str(pool), "300000", str(calls), "1"],
                           check=True, capture_output=True)
            text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)],
                                  check=True, capture_output=True, text=True).stdout
            m = re.search(r"^\s*([\d,]+) .*:cp_adapt_choose \[", text, re.M)
            if not m:
                print("bench_adapt_walk: no cp_adapt_choose in callgrind's report",
                      file=sys.stderr)
                return 1
            per = int(m.group(1).replace(",", "")) / calls
            print("learner's decision, %s walk of a %s pool: %.0f instructions a call "
                  "(cp_adapt_choose inclusive, %d calls after 300,000)"
                  % (args.size, args.pool, per, calls))
            return 0
        exe = build(where, count=False, stos=args.stos)
        got: dict[int, list[float]] = {0: [], 1: []}
        for r in range(args.rounds):
            for mode in ((0, 1) if r % 2 else (1, 0)):
                run = subprocess.run([str(exe), str(mode), str(n), str(pool),
                                      str(args.calls), str(args.calls), "5"],
                                     check=True, capture_output=True, text=True)
                got[mode].append(statistics.median(float(x) for x in run.stdout.split()))
    alone, learner = statistics.median(got[0]), statistics.median(got[1])
    print("%s clears walking a %s pool, C harness, medians of %d rounds: %s alone "
          "%.1f ns a call, with the learner's decision %.1f (+%.1f ns, x%.3f)"
          % (args.size, args.pool, args.rounds, "rep stosq" if args.stos else "memset",
             alone, learner, learner - alone, learner / alone))
    return 0


if __name__ == "__main__":
    sys.exit(main())
