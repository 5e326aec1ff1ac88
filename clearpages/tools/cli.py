"""python -m clearpages info | plan SIZE | bench | calibrate

``info`` says what the machine has and what ``auto`` will do there, ``plan``
what it does for one size and why, ``bench`` how fast every routine and the
usual alternatives are here, on warm and on cold buffers (``--profile``
writes the machine profile the policy is replayed against), ``calibrate``
measures this machine's crossovers and writes them where ``auto`` finds
them.  This module parses arguments and prints; ``report`` gathers the
data and ``output`` renders it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .. import __version__, _adapt, _calibration, _config, _core, _dispatch, _units
from .._routines import BY_NAME
from . import (
    calibrate as _calibrate,
    measure as _measure,
    output as _output,
    phased as _phased,
    profile as _profile,
    report as _report,
)


class UsageError(Exception):
    """Bad input the parser could not catch: exit code 2."""


# ---- argument types -----------------------------------------------------------

def _size_arg(text: str) -> int:
    try:
        return _units.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _sizes_arg(text: str) -> list[int]:
    return [_size_arg(t) for t in text.split(",") if t.strip()]


def _names_arg(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _int_arg(text: str, minimum: int = 1) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an int, not %r" % text) from None
    if n < minimum:
        raise argparse.ArgumentTypeError("must be at least %d, not %d" % (minimum, n))
    return n


def _positive_arg(text: str) -> int:
    return _int_arg(text, 1)


def _seed_arg(text: str) -> int:
    return _int_arg(text, 0)


def _threads_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "threads must be 'auto' or an int, not %r" % text) from None
    if n < 1:
        raise argparse.ArgumentTypeError("threads must be at least 1, not %d" % n)
    return n


def _flat(lists: Sequence[Sequence[Any]] | None) -> list[Any] | None:
    if lists is None:
        return None
    return [x for part in lists for x in part]


# ---- info ---------------------------------------------------------------------


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    data = _report.info_data()
    if args.json:
        _output.dump_json(data, "-", out)
        return 0
    st = _dispatch.state()
    cpu = st.cpu
    m = data["machine"]
    v = m["versions"]
    _output.say("clearpages %s  Python %s, cffi %s, numpy %s, matplotlib %s" % (
        v["clearpages"], v["python"], v["cffi"], v["numpy"] or "not installed",
        v["matplotlib"] or "not installed"), out, hang=" " * 12)
    _output.say("system      %s, transparent huge pages: %s" % (m["kernel"], m["thp"]), out,
                hang=" " * 12)
    b = data["build"]
    print("build       %s" % ("portable (libc memset only)" if b["portable"] else
                              "native (%d routines)" % len(b["routines"])), file=out)
    # A path is not broken: on a line of its own where it would pass the width.
    ext = "extension   %s" % b["extension"]
    print(ext if len(ext) <= _output.columns() else "extension\n  %s" % b["extension"],
          file=out)
    print("\nCPU", file=out)
    print("  vendor    %s" % cpu.vendor, file=out)
    print("  brand     %s" % (cpu.brand or "(none)"), file=out)
    print("  family    %d, model %d (0x%x), stepping %d" % (cpu.family, cpu.model,
                                                           cpu.model, cpu.stepping), file=out)
    print("  cores     %d logical CPU%s for this process" % (
        cpu.cores, "" if cpu.cores == 1 else "s"), file=out)
    print("\ncaches", file=out)
    for label, size in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)):
        extra = ""
        if label == "L3" and size:
            extra = " (shared by %d logical CPUs)" % cpu.l3_sharing
        print("  %-4s %s%s" % (label, _units.format_size(size) if size else "unknown", extra),
              file=out)
    for note in cpu.notes:
        print("  note: %s" % note, file=out)
    print("\nfeatures", file=out)
    _output.table([(n, s, _report.FEATURE_USE.get(n, "")) for n, s in data["features"].items()],
           ("feature", "status", "used for"), out)
    print("\nmethods", file=out)
    _output.table([(r["name"], "yes" if r["usable"] else "no", r["role"],
             r["summary"] if r["usable"] else r["why_not"]) for r in data["methods"]],
           ("method", "usable", "stores", "what / why not"), out)
    z = data["zero_scan"]
    print(file=out)
    _output.say("zero scan   %s (is_zero, nonzero_pages); usable here: %s" % (
        z["variant"], ", ".join(z["usable"])), out, hang=" " * 12)
    th = st.thresholds
    print("\nthresholds (source: %s)" % th.source, file=out)
    rows = [(_report.LABEL.get(k, k), _output.show_value(k, getattr(th, k), cpu.cores),
             _report.threshold_why(th, k)) for k in _report.SHOWN]
    _output.table(rows, ("threshold", "value", "where it came from"), out)
    print(file=out)
    _output.say("the rule calibrate judges thresholds by: %s; the default streaming "
                "threshold is the static choice's, which cannot lose much against memset "
                "(see nt_min)" % data["rule"], out)
    print("\nadaptive auto", file=out)
    for line in _adapt.info_lines(data["adaptive"]):
        _output.say(line, out, indent="  ")
    pool, pop = data["pool"], data["populate"]
    print("\npools", file=out)
    _output.say("a Pool's thread zeroes with %s (the policy's routine for memory not used "
                "soon), at most %.3g GB/s above its low-water mark by default, flat out "
                "below it (a mark that rises by one for each acquire that finds no block "
                "ready) and while a caller waits; it faults fresh blocks in one at a time "
                "(MADV_POPULATE_WRITE)"
                % (pool["routine"], pool["default_max_rate"] / 1e9), out, indent="  ")
    f = pop["found"]
    if f is None:
        _output.say("populate(threads='auto'): one thread (one CPU here, or nothing was "
                    "measured)", out, indent="  ")
    else:
        _output.say("populate(threads='auto') on %s pages, measured now: %d threads fault in "
                    "at %.2fx one thread (the slower of two probes against the quicker of "
                    "two: %.2f against %.2f GB/s; %.1fx needed to spread), so it uses %d"
                    % (pop["page_size"], f["tried"], f["speedup"], f["spread_gbps"],
                       f["one_gbps"], pop["spread_gain"], f["threads"]), out, indent="  ")
    c = data["calibration"]
    print("\ncalibration", file=out)
    if c["setting"] == "off":
        print("  off (CLEARPAGES_CALIBRATION=off)", file=out)
    elif c["in_use"]:
        print("  in use: %s" % c["in_use"], file=out)
    else:
        _output.say("none: no valid file at %s; `python -m clearpages calibrate` writes "
                    "one" % c["looked_for"], out, indent="  ")
    print("\nenvironment", file=out)
    if data["environment"]:
        for k, val in data["environment"].items():
            print("  %s=%s" % (k, val), file=out)
    else:
        print("  no CLEARPAGES_* variables set", file=out)
    if st.forced:
        print("  auto is forced to %s by CLEARPAGES_METHOD" % st.forced, file=out)
    return 0


# ---- plan ---------------------------------------------------------------------


def _plan_pool(args: argparse.Namespace, out: TextIO) -> int:
    """plan SIZE --pool: what a Pool of SIZE blocks does, made with every
    default (the pool's own words, Pool.describe)."""
    from .._pool import Pool

    if args.count != 1 or args.threads != 1:
        raise UsageError("--pool describes a Pool of SIZE blocks; it takes no --count or "
                         "--threads")
    try:
        # low_water=0: nothing is mapped or faulted in for the question.
        with Pool(args.size, low_water=0) as pool:
            text = pool.describe(low_water=1)
            facts = {"block_size": pool.block_size, "page_size": pool.page_size_name,
                     "routine": pool.routine, "max_rate": pool.max_rate, "low_water": 1,
                     "reason": text}
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.json:
        _output.dump_json(facts, "-", out)
        return 0
    _output.say("a Pool(%s): %s" % (_units.format_size(args.size), text), out)
    return 0


def _bytes_text(n: int) -> str:
    """A size in words: "1 byte", "100 bytes", "4 KiB (4096 bytes)"."""
    if n < 1024:
        return "%d byte%s" % (n, "" if n == 1 else "s")
    return "%s (%d bytes)" % (_units.format_size(n), n)


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    if args.pool:
        return _plan_pool(args, out)
    try:
        p = _core.plan(args.size, count=args.count, threads=args.threads)
    except ValueError as e:
        raise UsageError(str(e)) from None
    cpu = _core.cpu()
    r = BY_NAME[p.method]
    if args.json:
        _output.dump_json({"nbytes": p.nbytes, "count": p.count, "method": p.method,
                    "role": r.role, "kind": r.role,     # "kind": the old key, one release
                    "threads": p.threads, "unit": p.unit, "chunk": p.chunk,
                    "reason": p.reason,
                    "evidence": list(p.evidence), "learned": p.learned,
                    "skips_untouched": p.skips_untouched,
                    "untouched": p.untouched,
                    "thresholds_source": _core.thresholds().source,
                    "cpu": _calibration.identity(cpu)}, "-", out)
        return 0
    fmt = _units.format_size
    if p.count == 1:
        pieces = "in one piece"
    else:
        pieces = "in %d pieces: SIZE is the total, %s a piece on average" % (
            p.count, _bytes_text(p.nbytes // p.count) if p.nbytes >= p.count
            else "under 1 byte")
    _output.say("plan for %s %s, threads=%s" % (_bytes_text(p.nbytes), pieces, args.threads),
                out)
    _output.say("on %s" % _output.cpu_line(cpu), out)

    def line(label: str, text: str) -> None:
        _output.say("%-9s %s" % (label, text), out, indent="  ", hang=" " * 10)

    line("method", "%s, %s stores: %s" % (p.method, "ordinary" if r.temporal else
                                          "streaming", r.summary))
    line("threads", str(p.threads))
    if p.count == 1 and p.threads == 1 and p.nbytes <= p.unit:
        line("work", "one call of the routine over all %s" % fmt(p.nbytes))
    elif p.one_by_one:
        line("work", "the pieces one by one as they come, on the calling thread, with a "
                     "look at the clock every 16384 pieces for the 40 ms slices")
    else:
        line("work", "a native job run in 40 ms slices: each thread's first unit is %s "
                     "until the routine's speed is timed, later units end by the slice's "
                     "deadline" % fmt(p.unit))
    line("reason", p.reason)
    for why in p.evidence:
        line("because", why)
    if p.learned:
        line("learned", p.learned)
    line("untouched", p.untouched)
    print("thresholds from: %s" % _core.thresholds().source, file=out)   # a path: unbroken
    return 0


# ---- bench ----------------------------------------------------------------------


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib, which is not installed: "
                         "pip install 'clearpages[plot]' (or matplotlib)") from None


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    if args.plot:
        _need_matplotlib()
    sizes = _flat(args.sizes)
    if sizes is not None and (not sizes or min(sizes) < 1):
        raise UsageError("--sizes needs sizes of at least 1 byte")
    if args.profile:
        return _bench_profile(args, sizes, out)
    if args.programs:
        return _bench_programs(args, sizes, out)
    if _phased_flags(args):
        raise UsageError("--generated, --seed, --retake, --resume and --cases go with --programs")
    if args.pool:
        return _bench_pool(args, sizes, out)
    if sizes is None:
        sizes = _report.cap_sizes([_units.parse_size(s) for s in
                                   (_report.QUICK_SIZES if args.quick else _report.FULL_SIZES)])
    if args.scan:
        return int(_bench_scan(args, sizes, out, out))
    # Many short samples rather than a few long ones: on a shared machine a
    # sample is either undisturbed or not, and the median needs a majority.
    repeat = args.repeat or (9 if args.quick else 15)
    target = args.target_ms / 1000 if args.target_ms else (0.001 if args.quick else 0.002)
    budget = args.budget_s or (6.0 if args.quick else 8.0)
    scenarios = _measure.SCENARIOS if args.scenario == "both" else (args.scenario,)
    progress = _output.Progress("bench", quiet=args.quiet)
    try:
        data = _report.bench_data(sizes, _flat(args.methods), repeat=repeat, target_s=target,
                                  budget_s=budget, scenarios=scenarios, direct=args.direct,
                                  progress=progress)
    except (ValueError, _core.UnsupportedMethod) as e:
        raise UsageError(str(e)) from None
    finally:
        progress.close()
    # With --json - the JSON owns stdout and the table moves to stderr.
    table_out = sys.stderr if args.json == "-" else out
    _output.print_bench(data, _core.cpu(), table_out)
    if not args.methods:
        data["scan"] = _bench_scan(args, sizes, table_out, None)
    if args.json:
        _output.dump_json(data, args.json, out)
        if args.json != "-":
            print("\nwrote %s" % args.json, file=table_out)
    if args.plot:
        _output.plot_bench(data, _core.cpu(), args.plot, __version__)
        print("wrote %s" % args.plot, file=table_out)
    return 0


def _bench_scan(args: argparse.Namespace, sizes: list[int], out: TextIO,
                json_out: TextIO | None) -> Any:
    """The scan section: is_zero against numpy's a.any(), warm and cold (with
    --scan alone: the whole output, and its JSON)."""
    from . import scanbench as _scanbench

    if json_out is not None and (args.methods or args.plot or args.scenario != "both"
                                 or args.direct):
        raise UsageError("--scan measures is_zero against a.any(), warm and cold; it "
                         "takes no --methods, --plot, --scenario or --direct")
    progress = _output.Progress("scan", quiet=args.quiet)
    try:
        data = _scanbench.measure(sizes, repeat=args.repeat or (5 if args.quick else 9),
                                  target_s=args.target_ms / 1000 if args.target_ms else 0.002,
                                  progress=progress)
    finally:
        progress.close()
    if json_out is None:
        _scanbench.report(data, out)
        return data
    table_out = sys.stderr if args.json == "-" else out
    if json_out is out and not args.json:
        _output.say(_output.cpu_line(_core.cpu()), out)
    _scanbench.report(data, table_out)
    if args.json:
        _output.dump_json(data, args.json, out)
    return 0


def _bench_pool(args: argparse.Namespace, sizes: list[int] | None, out: TextIO) -> int:
    """cp.Pool against fresh memory: acquire's latency, the time to a zeroed,
    resident buffer, and what a co-running memory-bound loop loses."""
    from . import poolbench as _poolbench

    if args.methods or args.plot or args.scenario != "both" or args.direct or args.scan:
        raise UsageError("--pool measures the pool against np.zeros, torch.zeros and "
                         "Region; it takes no --methods, --plot, --scenario, --direct "
                         "or --scan")
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise UsageError("--pool needs numpy (its touches, and np.zeros to compare "
                         "with): pip install numpy") from None
    quick = args.quick
    sizes = sizes or [64 * _units.MiB] + ([] if quick else [_units.GiB])
    progress = _output.Progress("pool", quiet=args.quiet)
    try:
        data = _poolbench.measure(sizes, quick=quick, progress=progress)
    finally:
        progress.close()
    table_out = sys.stderr if args.json == "-" else out
    _output.say(_output.cpu_line(_core.cpu()), table_out)
    _output.say("load average %s (the machine's other work shows in every figure)"
                % " ".join("%.2f" % x for x in os.getloadavg()), table_out)
    _poolbench.report(data, table_out)
    if args.json:
        _output.dump_json(data, args.json, out)
    return 0


def _phased_flags(args: argparse.Namespace) -> bool:
    """Whether the flags ask for the phased programs (--generated, --cases,
    --seed, --retake, --resume)."""
    return _drawing_flags(args) or args.resume is not None


def _drawing_flags(args: argparse.Namespace) -> bool:
    """Whether the flags say which programs to run (what --resume reads from
    its file instead)."""
    return (args.generated is not None or args.cases or args.seed is not None
            or args.retake is not None)


def _bench_programs(args: argparse.Namespace, sizes: list[int] | None, out: TextIO) -> int:
    from . import programs as _programs

    if _phased_flags(args):
        return _bench_phased(args, sizes, out)
    if args.methods or args.json or args.plot or args.scenario != "both" or args.direct:
        raise UsageError("--programs runs every candidate in every workload, warm and "
                         "cold; it takes no --methods, --json, --plot, --scenario or --direct")
    quick = args.quick
    sizes = _report.cap_sizes(sizes or list(_programs.QUICK_SIZES if quick else _programs.SIZES))
    mixed = [n for n in (_programs.QUICK_MIXED_SIZES if quick else _programs.MIXED_SIZES)
             if args.sizes is None or n in sizes]
    progress = _output.Progress("programs", quiet=args.quiet)
    try:
        res = _programs.run(sizes, mixed_sizes=mixed,
                            rounds=args.repeat or (9 if quick else 15),
                            target_s=args.target_ms / 1000 if args.target_ms else 0.0005,
                            progress=progress)
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        progress.close()
    cpu = _core.cpu()
    _output.say("%s; %s" % (_output.cpu_line(cpu), _output.cache_line(cpu)), out)
    _programs.report(res, out)
    return 0


def _bench_phased(args: argparse.Namespace, sizes: list[int] | None, out: TextIO) -> int:
    """Generated programs (--generated N [--seed S]) and the hand-written
    cases (--cases), run by tools.phased."""
    import random

    from . import generated

    if args.methods or args.plot or args.scenario != "both" or args.direct:
        raise UsageError("--generated and --cases run every candidate on whole programs; "
                         "they take no --methods, --plot, --scenario or --direct")
    if args.resume:
        return _bench_resumed(args, sizes, out)
    if args.seed is not None and args.generated is None:
        raise UsageError("--seed is the seed of --generated N")
    if args.retake is not None and args.generated is None and not args.cases:
        raise UsageError("--retake retakes programs of --generated N or --cases")
    cpu = _core.cpu()
    l3 = cpu.last_cache or generated.DEFAULT_L3
    pool = _measure.cold_pool_size()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    programs = []
    if args.cases:
        programs += generated.cases(sizes=sizes, pool=pool)
    if args.generated:
        # --sizes: the range generated programs draw their sizes from;
        # --target-ms (for tests): their longest nominal time
        span = (min(sizes), max(sizes)) if sizes else None
        top = args.target_ms / 1000 if args.target_ms else generated.SECONDS[1]
        programs += generated.corpus(seed, args.generated, l3, sizes=span,
                                     seconds=(min(generated.SECONDS[0], top / 5), top))
    names = _phased.candidate_names(quick=args.quick)
    rounds = args.repeat or (_phased.QUICK_ROUNDS if args.quick else _phased.ROUNDS)
    retake = _phased.RETAKE_ROUNDS if args.retake is None else args.retake
    command = "python -m clearpages bench --programs"
    if args.cases:
        command += " --cases"
    if args.generated:
        command += " --generated %d --seed %d" % (args.generated, seed)
    if sizes:
        command += " --sizes %s" % ",".join(str(n) for n in sizes)
    command += " --rounds %d%s" % (rounds, " --quick" if args.quick else "")
    command += " --retake %d" % retake
    if args.clock != _phased.CPU:
        command += " --clock %s" % args.clock
    settings = {"command": command, "seed": seed if args.generated else None,
                "rounds": rounds, "retake": retake,
                "retake_most": _phased.retake_most(rounds, retake),
                "candidates": names, "cold_pool": pool, "clock": args.clock}
    if args.generated and not args.cases:
        # what --resume needs to draw the same programs again and to check
        # that it runs the same code on the same machine
        settings["drawn"] = {"count": args.generated, "l3": l3,
                             "sizes": list(span) if span else None,
                             "seconds": [min(generated.SECONDS[0], top / 5), top],
                             "quick": bool(args.quick)}
        settings["code"] = _report.code()
    return _run_phased(args, programs, settings, [], out)


def _run_phased(args: argparse.Namespace, programs: list[Any], settings: dict[str, Any],
                before: list[Any], out: TextIO) -> int:
    """Run programs (after the results ``before``, which a resumed run kept),
    keep the JSON as each ends, judge them all."""
    from . import generated

    names, rounds, retake = settings["candidates"], settings["rounds"], settings["retake"]
    command = settings["command"]
    table_out = sys.stderr if args.json == "-" else out
    cpu = _core.cpu()
    nominal = sum(generated.estimate_s(p) for p in programs) * len(names) * rounds
    load = os.getloadavg()
    _output.say("%s; %s" % (_output.cpu_line(cpu), _output.cache_line(cpu)), table_out)
    _output.say("%s (replays this run); load average %.1f %.1f %.1f" % ((command,) + load),
                table_out)
    if before:
        _output.say("resumed: %d programs kept from %s, %d to run" % (
            len(before), args.json, len(programs)), table_out)
    _output.say("%d programs x %d candidates x %d rounds, about %s at the programs' nominal "
                "pace%s (the progress line corrects it as it runs); phases timed by %s" % (
                    len(programs), len(names), rounds,
                    _output.duration(nominal * _phased.PACE_GUESS),
                    ", and more where a retake adds rounds" if retake else "",
                    "their thread's CPU time" if settings["clock"] == _phased.CPU
                    else "the elapsed time"), table_out)
    table_out.flush()
    settings.setdefault("load_average", {}).setdefault("start", list(load))

    def keep(so_far: list[_phased.ProgramResult]) -> None:
        # a long run keeps what it measured if it is stopped (--resume goes on)
        if args.json and args.json != "-":
            _output.dump_json(_phased.to_json(before + so_far, settings), args.json)

    progress = _output.Progress("programs", quiet=args.quiet)
    try:
        results = before + _phased.run(
            programs, names, rounds=rounds, progress=progress, done=keep,
            clock=settings["clock"], retake=retake,
            retake_most=settings.get("retake_most", rounds + retake),
            doubtful=lambda r: _phased.doubtful(r) if r.program.seed is not None
            else _phased.cells_doubtful(r))
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        progress.close()
    after = os.getloadavg()
    _output.say("load average at the end %.1f %.1f %.1f" % after, table_out)
    cases = [r for r in results if r.program.seed is None]
    drawn = [r for r in results if r.program.seed is not None]
    judged = {}
    if cases:
        print(file=table_out)
        _phased.report_cases(cases, table_out)
    if drawn:
        judged = _phased.report_generated(drawn, table_out)
    if args.json:
        settings["load_average"]["end"] = list(after)
        _output.dump_json(_phased.to_json(results, settings, judged), args.json, out)
        if args.json != "-":
            print("\nwrote %s" % args.json, file=table_out)
    return 0


def _bench_resumed(args: argparse.Namespace, sizes: list[int] | None, out: TextIO) -> int:
    """--resume FILE: go on with the generated run FILE holds, on the same
    machine and code: the programs it finished are kept, the others run."""
    from . import generated

    if (_drawing_flags(args) or sizes or args.repeat or args.quick or args.clock != "cpu"
            or args.target_ms):
        raise UsageError("--resume takes its programs, rounds and clock from the file; "
                         "give it alone (with --quiet or --wide)")
    if args.json not in (None, args.resume):
        raise UsageError("--resume writes back to the file it resumes; give no --json")
    args.json = args.resume
    try:
        with open(args.resume, encoding="utf-8") as f:
            data = json.load(f)
        settings, kept = data["settings"], _phased.from_json(data)
    except OSError as e:
        raise UsageError("cannot read %s: %s" % (args.resume, e.strerror or e)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError("%s is not a run written by bench --programs --generated --json "
                         "(%s)" % (args.resume, e)) from None
    drawn = settings.get("drawn")
    if not drawn or "code" not in settings:
        raise UsageError("%s cannot be resumed: it was written by a version that did not "
                         "record what it ran, or by a run with --cases" % args.resume)
    now = _report.machine()
    here = {"the CPU": (data.get("machine", {}).get("cpu"), now["cpu"]),
            "the code (clearpages' files, thresholds, CLEARPAGES_ variables)":
                (settings["code"], _report.code()),
            "the cold pool": (settings.get("cold_pool"), _measure.cold_pool_size()),
            "the candidates": (settings["candidates"],
                               _phased.candidate_names(quick=drawn["quick"]))}
    differ = [what for what, (then, now) in here.items() if then != now]
    if differ:
        raise UsageError("%s and this run differ in %s: resuming would judge two runs "
                         "as one; start a new run instead" % (args.resume, " and ".join(differ)))
    programs = generated.corpus(settings["seed"], drawn["count"], drawn["l3"],
                                sizes=tuple(drawn["sizes"]) if drawn["sizes"] else None,
                                seconds=tuple(drawn["seconds"]))
    if [r.program for r in kept] != programs[:len(kept)]:
        raise UsageError("%s holds programs that seed %d does not draw: it was edited, or "
                         "written by another generator" % (args.resume, settings["seed"]))
    settings.setdefault("resumed", []).append(
        {"date": now["date"], "kept": len(kept)})
    return _run_phased(args, programs[len(kept):], settings, kept, out)


def _bench_profile(args: argparse.Namespace, sizes: list[int] | None, out: TextIO) -> int:
    if args.methods or args.json or args.plot or args.scenario != "both":
        raise UsageError("--profile records every routine, warm and cold; it takes "
                         "no --methods, --json, --plot or --scenario")
    progress = _output.Progress("profile", quiet=args.quiet)
    try:
        data = _report.profile_data(sizes, repeat=args.repeat or 9,
                                    target_s=args.target_ms / 1000 if args.target_ms else 0.002,
                                    budget_s=args.budget_s or 6.0, progress=progress)
    finally:
        progress.close()
    _output.dump_json(data, args.profile, out)
    if args.profile != "-":
        prof = _profile.from_json(data, os.path.basename(args.profile))
        _output.print_replay(_profile.replay(prof), prof.label, out)
        print("\nwrote %s" % args.profile, file=out)
    return 0


# ---- calibrate ------------------------------------------------------------------


def cmd_calibrate(args: argparse.Namespace, out: TextIO) -> int:
    try:
        st = _dispatch.state()
    except _calibration.MissingCalibration:
        # CLEARPAGES_CALIBRATION names the file this run is to write:
        # measure without it, then write it there.
        _dispatch.reload({**os.environ, "CLEARPAGES_CALIBRATION": "off"})
        st = _dispatch.state()
        named: str | None = os.environ["CLEARPAGES_CALIBRATION"].strip()
    else:
        named = None
    cpu = st.cpu
    if args.output:
        path = os.path.expanduser(args.output)
    else:
        path = os.path.expanduser(named) if named else str(
            _calibration.resolve(cpu, st.config.calibration) or _calibration.default_path(cpu))
    progress = _output.Progress("calibrate", quiet=args.quiet)
    try:
        result = _calibrate.calibrate(
            quick=args.quick, sizes=_flat(args.sizes), thread_sizes=_flat(args.thread_sizes),
            repeat=args.repeat, target_s=args.target_ms / 1000 if args.target_ms else None,
            budget_s=args.budget_s, verify=not args.no_verify,
            progress=lambda what, done, total: progress(done, total, what))
    finally:
        progress.close()
    th, d = result.thresholds, result.default
    # With --json - the JSON owns stdout and the tables move to stderr.
    json_to, out = (out, sys.stderr) if args.json == "-" else (out, out)
    _output.say("clearpages calibrate on %s" % _output.cpu_line(cpu), out)
    _output.say("rule: %s" % _calibrate.RULE, out)
    _output.say("caches %s; %s run" % (_output.cache_line(cpu), "custom" if args.sizes else
                                       "quick" if args.quick else "full"), out)
    print(file=out)
    show = _output.show_value
    _output.table([(k, show(k, getattr(d, k), cpu.cores), show(k, getattr(th, k), cpu.cores),
                    th.reason(k)) for k in _calibration.FIELDS],
                  ("threshold", "default", "calibrated", "evidence"), out)
    print(file=out)
    _output.say("auto at each measured size, default policy vs calibrated (GB/s = 10^9 "
                "bytes/s, median, warm/cold; score: the worse of the two ratios to the best "
                "routine):", out)
    rows = []
    for r in result.comparison(cpu):
        def speeds(who: str, r: dict[str, Any] = r) -> str:
            return "/".join("%.1f" % r["%s_%s_gbps" % (who, sc)] for sc in ("warm", "cold")
                            if "%s_%s_gbps" % (who, sc) in r)
        rows.append((_units.format_size(r["size"]), r["threads"], r["default"], speeds("default"),
                     "%.2f" % r["default_score"] if "default_score" in r else "",
                     r["calibrated"], speeds("calibrated"),
                     "%.2f" % r["calibrated_score"] if "calibrated_score" in r else ""))
    _output.table(rows, ("size", "threads", "default", "GB/s", "score", "calibrated", "GB/s",
                         "score"), out, right=(3, 4, 6, 7))
    extra = {"quick": bool(args.quick), "comparison": result.comparison(cpu)}
    written = _calibration.save(path, cpu, th, extra=extra)
    print("\nwrote %s" % written, file=out)
    if args.json:
        _output.dump_json({"machine": _report.machine(), "rule": _calibrate.RULE,
                           "default": d.as_json(), "calibrated": th.as_json(),
                           "wrote": str(written), **extra}, args.json, json_to)
    if named:
        if os.path.abspath(os.path.expanduser(named)) != os.path.abspath(written):
            note = ("note: auto reads %s (CLEARPAGES_CALIBRATION), which does not exist yet"
                    % named)
        else:
            note = "auto uses it in new processes; in a running one call " \
                   "clearpages.reload_config()"
    elif st.config.calibration == "off":
        note = "note: CLEARPAGES_CALIBRATION=off is set, so auto will not read it"
    elif args.output and _calibration.resolve(cpu, st.config.calibration) != written:
        note = "note: auto reads %s; set CLEARPAGES_CALIBRATION=%s to use this file" % (
            _calibration.resolve(cpu, st.config.calibration), written)
    else:
        note = "auto uses it in new processes; in a running one call " \
               "clearpages.reload_config()"
    _output.say(note, out)
    return 0


# ---- the parser -------------------------------------------------------------------


def parser(prog: str = "python -m clearpages") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Zero memory as fast as the hardware allows: what this machine has, "
                    "what auto does, how fast it is.")
    p.add_argument("--version", action="version", version="clearpages %s" % __version__)
    # Every command prints for the terminal's width (COLUMNS, else 80).
    fitted = argparse.ArgumentParser(add_help=False)
    fitted.add_argument("--wide", action="store_true",
                        help="print tables whole and prose unbroken, whatever the "
                             "terminal's width (default: fitted to COLUMNS, else 80)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser(
        "info", parents=[fitted], help="the CPU, caches, features, methods, thresholds",
        description="What this machine has and what auto does on it: the CPU and its "
                    "caches, the features found, the routines usable here (and why not "
                    "where one is not), the thresholds in force with their evidence, what "
                    "adaptive auto has learned, the calibration file and the CLEARPAGES_* "
                    "variables set.")
    info.add_argument("--json", action="store_true", help="machine-readable output")

    plan = sub.add_parser(
        "plan", parents=[fitted], help="what auto does for SIZE bytes, and why",
        description="What clear() with method='auto' does for SIZE bytes: the routine, "
                    "the threads, whether it is one call or a job, the reason and the "
                    "evidence for each threshold the reason names.  With --count N, SIZE "
                    "is the total of N pieces, as cp.plan(SIZE, count=N) and clear_many "
                    "see it: the routine is chosen from the total.")
    plan.add_argument("size", type=_size_arg, metavar="SIZE",
                      help="bytes in all: 4096, 64K, 64M, 1G")
    plan.add_argument("--count", type=_positive_arg, default=1, metavar="N",
                      help="SIZE in N pieces, as clear_many or clear_pages clears them "
                           "(SIZE is the total, not each piece); default 1")
    plan.add_argument("--threads", type=_threads_arg, default=1,
                      help="a number (default 1, as clear()) or 'auto'")
    plan.add_argument("--pool", action="store_true",
                      help="what a cp.Pool of SIZE blocks does (its page size, the routine "
                      "its thread zeroes with, its pace) instead of a clear")
    plan.add_argument("--json", action="store_true", help="machine-readable output")

    b = sub.add_parser(
        "bench", parents=[fitted], help="every method and the usual alternatives, side by side",
        description="How fast every routine this machine runs, auto, the C library's "
                    "memset behind ctypes (ctypes.memset) and numpy clear here, side by "
                    "side, on warm and on cold buffers, one thread; then auto judged "
                    "against its goals, and the zero scan (two to three minutes; a bar on "
                    "stderr says the time left).  --profile writes this machine's profile "
                    "instead.")
    b.add_argument("--quick", action="store_true",
                   help="sizes %s, fewer repeats (under a minute)"
                        % ",".join(_report.QUICK_SIZES))
    b.add_argument("--sizes", type=_sizes_arg, nargs="+", metavar="SIZE",
                   help="sizes to measure (default %s)" % ",".join(_report.FULL_SIZES))
    b.add_argument("--methods", type=_names_arg, nargs="+", metavar="NAME",
                   help="methods to measure: auto, routines, memset, numpy.fill, "
                        "numpy[...]=0 (default: all usable; memset is always added)")
    b.add_argument("--repeat", "--rounds", type=_positive_arg, metavar="N",
                   help="samples per candidate and size (with --programs: rounds)")
    b.add_argument("--json", metavar="FILE", help="write every sample as JSON ('-': stdout)")
    b.add_argument("--plot", metavar="FILE.png",
                   help="a PNG of GB/s against size (needs matplotlib)")
    b.add_argument("--scenario", choices=("both", "warm", "cold"), default="both",
                   help="warm (the same buffer back to back), cold (a different buffer "
                        "each call) or both (default)")
    b.add_argument("--direct", action="store_true",
                   help="call the routines directly (one cffi call each) instead of "
                        "through clearpages.clear(view, method=NAME)")
    b.add_argument("--profile", metavar="FILE",
                   help="write this machine's profile (every routine called directly, "
                        "warm and cold, 4 KiB to 1 GiB) as JSON and replay the default "
                        "policy against it (about three minutes)")
    b.add_argument("--programs", action="store_true",
                   help="whole programs instead of clears: a clear, then what the program "
                        "does with the buffer (pad a batch, a scratch buffer, a page pool, "
                        "a wipe; a hot buffer and a cold pool together), warm and cold; "
                        "auto's ratio to the best candidate, with its spread (about three "
                        "minutes; with --quick about one)")
    b.add_argument("--generated", type=_positive_arg, metavar="N",
                   help="with --programs: N programs drawn from --seed (sizes, phases, "
                        "places, work between clears, other code's clears, two threads), "
                        "each timed whole with every candidate; auto judged against "
                        "numpy.fill, ctypes.memset and the best fixed choice per phase, "
                        "beside what numpy.fill timed twice scores against itself (the "
                        "run's own noise).  Most of a minute a program (14 candidates, 5 "
                        "rounds; --quick: 10 and 4), more where the L3 is large: 200 "
                        "programs take hours (see --resume)")
    b.add_argument("--seed", type=_seed_arg, metavar="S",
                   help="the seed --generated draws from (default: drawn at run time and "
                        "printed, so that the run can be replayed)")
    b.add_argument("--retake", type=_seed_arg, metavar="K",
                   help="with --generated: a program whose verdict against numpy.fill or "
                        "ctypes.memset is in doubt after its rounds (the median's bounds hold "
                        "the goal: auto's whichever side of it the median is on, numpy.fill's "
                        "own twin's below it) runs K rounds more, every candidate, and again "
                        "while in doubt, up to %d rounds in all; it is judged over all of "
                        "them; with --cases, a case whose phase cell is in doubt, alike "
                        "(default %d; 0: none)" % (_phased.RETAKE_MOST, _phased.RETAKE_ROUNDS))
    b.add_argument("--resume", metavar="FILE",
                   help="with --programs: go on with the --generated run whose --json FILE "
                        "was being written when it stopped: the programs it finished are "
                        "kept, the rest run (the same seed, rounds and candidates; the same "
                        "machine and code, or it refuses), and the verdict covers them all")
    b.add_argument("--cases", action="store_true",
                   help="with --programs: the hand-written phased programs (warm, cold, "
                        "warm again at 1-16 MiB; clear then use, one buffer and a pool walk, "
                        "16 KiB-64 MiB; --sizes picks sizes), every phase judged.  With "
                        "--generated, --sizes gives the range sizes are drawn from")
    b.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="with --generated or --cases: time each phase by its thread's CPU "
                        "time (default: a preemption by another process is left out) or "
                        "by the elapsed time")
    b.add_argument("--scan", action="store_true",
                   help="only the zero scan section: is_zero against numpy's a.any(), "
                        "warm and cold, and its early exit (it follows the clear table "
                        "when no --methods are given; alone, under a minute)")
    b.add_argument("--pool", action="store_true",
                   help="cp.Pool against fresh memory: acquire's latency, the time to a "
                   "zeroed resident buffer (64 MiB, and 1 GiB without --quick) against "
                   "np.zeros, torch.zeros and Region, and a co-running loop's slowdown "
                   "(needs numpy; under a minute, with --quick some seconds)")
    b.add_argument("--quiet", action="store_true", help="no progress on stderr")
    b.add_argument("--target-ms", type=float, help=argparse.SUPPRESS)
    b.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)

    c = sub.add_parser(
        "calibrate", parents=[fitted],
        help="measure this machine's crossovers, write the policy file auto reads",
        description="Measure every usable routine at sizes from a few hundred bytes to past "
                    "the caches, warm and cold, and the thread counts; keep the thresholds "
                    "that score best by the worse case, and write them where auto reads "
                    "them (CLEARPAGES_CALIBRATION, or the cache directory).  A few minutes; "
                    "a bar on stderr says the time left.")
    c.add_argument("--quick", action="store_true",
                   help="fewer sizes and repeats (about a minute)")
    c.add_argument("--output", metavar="PATH",
                   help="where to write (default: the file auto reads, in "
                        "$XDG_CACHE_HOME/clearpages/)")
    c.add_argument("--json", metavar="FILE",
                   help="also write the thresholds (default and calibrated, no limit as "
                        "null) and the comparison as JSON ('-': stdout)")
    c.add_argument("--quiet", action="store_true", help="no progress on stderr")
    c.add_argument("--sizes", type=_sizes_arg, nargs="+", help=argparse.SUPPRESS)
    c.add_argument("--thread-sizes", type=_sizes_arg, nargs="+", help=argparse.SUPPRESS)
    c.add_argument("--repeat", type=_positive_arg, help=argparse.SUPPRESS)
    c.add_argument("--target-ms", type=float, help=argparse.SUPPRESS)
    c.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)
    c.add_argument("--no-verify", action="store_true", help=argparse.SUPPRESS)
    return p


COMMANDS = {"info": cmd_info, "plan": cmd_plan, "bench": cmd_bench,
            "calibrate": cmd_calibrate}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         prog: str | None = None) -> int:
    """The command line; returns the exit status (2: bad usage).  prog: the
    name usage lines give (``python -m clearpages`` passes its own; the
    console script, called by that name, is ``clearpages``)."""
    if prog is None:
        prog = ("clearpages" if os.path.basename(sys.argv[0] or "") == "clearpages"
                else "python -m clearpages")
    p = parser(prog)
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    _output.set_wide(args.wide)
    try:
        return COMMANDS[args.command](args, out or sys.stdout)
    except (UsageError, _config.ConfigError) as e:
        print("%s: error: %s" % (p.prog, e), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    finally:
        _output.set_wide(False)


if __name__ == "__main__":
    sys.exit(main())
