"""python -m clearpages info | plan SIZE | bench | calibrate

``info`` says what the machine has and what ``auto`` will do there, ``plan``
what it does for one size and why, ``bench`` how fast every routine and the
usual alternatives are here, ``calibrate`` measures this machine's
crossovers and writes them where ``auto`` finds them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from . import __version__, _adapt, _calibration, _config, _core, _cpu, _measure
from ._policy import NEVER, format_size
from ._routines import BY_NAME, ROUTINES

#: What each feature is for, as `info` shows it.
FEATURE_USE = {
    "erms": "enhanced rep movsb/stosb: rep_stosb is fast",
    "fsrm": "fast short rep movsb",
    "fzrm": "fast zero-length rep movsb",
    "fsrs": "fast short rep stosb",
    "fsrc": "fast short rep cmpsb/scasb",
    "avx2": "avx2_nt (32-byte streaming stores)",
    "avx512f": "avx512_nt (64-byte streaming stores)",
    "clflushopt": "optimized cache-line flush",
    "movdir64b": "64-byte direct stores",
    "clzero": "clzero (AMD: zero a cache line without reading it)",
    "osxsave": "the OS manages vector state (XGETBV is legal)",
    "sse2": "movnti (8-byte streaming stores)",
    "hypervisor": "running under a hypervisor (guest cache sizes may be the host's)",
}

#: Reasons for the defaults the policy states without one.
DEFAULT_WHY = {
    "thread_min": "default: below it a second thread costs more (start-up, a cold core) "
                  "than it gains",
    "max_threads": "default: every CPU this process may run on",
    "chunk": "Linux clears huge pages in 32 MiB chunks between reschedules",
}

THP = "/sys/kernel/mm/transparent_hugepage/enabled"

QUICK_SIZES = ("4K", "64K", "1M", "32M", "256M")
FULL_SIZES = ("4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G")


class UsageError(Exception):
    """Bad input the parser could not catch: exit code 2."""


# ---- helpers ----------------------------------------------------------------


def _size_arg(text: str) -> int:
    try:
        return _config.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _sizes_arg(text: str) -> list[int]:
    return [_size_arg(t) for t in text.split(",") if t.strip()]


def _names_arg(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _positive_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an int, not %r" % text) from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1, not %d" % n)
    return n


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


def _thp_mode() -> str:
    try:
        text = open(THP).read()
    except OSError:
        return "unknown"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()


def _versions() -> dict[str, str | None]:
    import cffi

    out: dict[str, str | None] = {"clearpages": __version__,
                                  "python": platform.python_version(),
                                  "cffi": cffi.__version__}
    for mod in ("numpy", "matplotlib"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    return out


def machine() -> dict[str, Any]:
    """Who measured: CPU identity, kernel, versions, date (for JSON and headers)."""
    cpu = _core.cpu()
    return {
        "cpu": _calibration.identity(cpu),
        "kernel": "%s %s %s" % (platform.system(), platform.release(), platform.machine()),
        "thp": _thp_mode(),
        "versions": _versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _cpu_line(cpu: _cpu.CPU) -> str:
    return "%s (%s family %d model %d stepping %d), %d CPU%s for this process" % (
        cpu.brand or "unknown brand", cpu.vendor, cpu.family, cpu.model, cpu.stepping,
        cpu.cores, "" if cpu.cores == 1 else "s")


def _cache_line(cpu: _cpu.CPU) -> str:
    return ", ".join("%s %s" % (k, format_size(v) if v else "unknown")
                     for k, v in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)))


def _table(rows: Sequence[Sequence[Any]], head: Sequence[str], out: TextIO,
           right: Sequence[int] = ()) -> None:
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    for n, r in enumerate(cells):
        line = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
        print(line.rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def _dump_json(data: Any, path: str, out: TextIO | None = None) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if path == "-":
        (out or sys.stdout).write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


class Progress:
    """A bar on stderr when it is a terminal; plain lines otherwise, so CI
    logs stay readable.  quiet: nothing."""

    def __init__(self, label: str, stream: TextIO | None = None, quiet: bool = False):
        self.label = label
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = ""

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.quiet:
            return
        if self.tty:
            width = 30
            fill = int(width * done / max(total, 1))
            self.stream.write("\r%s [%s%s] %d/%d %s\x1b[K" % (
                self.label, "#" * fill, "." * (width - fill), done, total, what))
            self.stream.flush()
        elif what != self._last:
            self.stream.write("%s: %s (%d/%d)\n" % (self.label, what, done, total))
            self.stream.flush()
        self._last = what

    def close(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# ---- info ---------------------------------------------------------------------


def _feature_status(name: str) -> str:
    st = _core._state
    if name in st.cpu.features:
        return "present"
    if name in st.cpu.disabled:
        return "disabled by CLEARPAGES_DISABLE"
    if name in st.raw_cpu.os_disabled:
        return "not enabled by the OS (XCR0)"
    return "missing"


def info_data() -> dict[str, Any]:
    st = _core._state
    cpu = st.cpu
    th = st.thresholds
    portable = st.built <= {"libc"}
    cal = st.calibration
    setting = st.config.calibration
    looked = _calibration.resolve(cpu, setting)
    from . import _native

    return {
        "machine": machine(),
        "cpu": {
            "vendor": cpu.vendor, "brand": cpu.brand, "family": cpu.family,
            "model": cpu.model, "stepping": cpu.stepping, "cores": cpu.cores,
            "x86": cpu.is_x86, "notes": list(cpu.notes),
        },
        "caches": {"l1d": cpu.l1d, "l2": cpu.l2, "l3": cpu.l3,
                   "l3_sharing": cpu.l3_sharing},
        "features": {n: _feature_status(n) for n in _cpu.FEATURE_NAMES},
        "methods": [{"name": r.name, "usable": r.name in st.methods,
                     "kind": "temporal" if r.temporal else "streaming",
                     "summary": r.summary, "why_not": st.missing(r.name)}
                    for r in ROUTINES],
        "thresholds": {
            "source": th.source,
            "values": {k: getattr(th, k) for k in _calibration.FIELDS + ("chunk",)},
            "why": {k: th.reason(k) for k in _calibration.FIELDS + ("chunk",)},
        },
        "calibration": {
            "setting": setting,
            "in_use": str(cal.path) if cal is not None else None,
            "looked_for": str(looked) if looked is not None else None,
        },
        "environment": dict(st.config.raw),
        "forced_method": st.forced,
        "adaptive": _adapt.info(th, st.adapt_on, st.forced),
        "build": {"portable": portable, "routines": sorted(st.built),
                  "extension": getattr(_native, "__file__", None)},
    }


def cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    data = info_data()
    if args.json:
        _dump_json(data, "-", out)
        return 0
    st = _core._state
    cpu = st.cpu
    m = data["machine"]
    v = m["versions"]
    print("clearpages %s  Python %s, cffi %s, numpy %s, matplotlib %s" % (
        v["clearpages"], v["python"], v["cffi"], v["numpy"] or "not installed",
        v["matplotlib"] or "not installed"), file=out)
    print("system      %s, transparent huge pages: %s" % (m["kernel"], m["thp"]), file=out)
    b = data["build"]
    print("build       %s, extension %s" % (
        "portable (libc memset only)" if b["portable"] else
        "native (%d routines)" % len(b["routines"]), b["extension"]), file=out)
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
        print("  %-4s %s%s" % (label, format_size(size) if size else "unknown", extra),
              file=out)
    for note in cpu.notes:
        print("  note: %s" % note, file=out)
    print("\nfeatures", file=out)
    _table([(n, s, FEATURE_USE.get(n, "")) for n, s in data["features"].items()],
           ("feature", "status", "used for"), out)
    print("\nmethods", file=out)
    _table([(r["name"], "yes" if r["usable"] else "no", r["kind"],
             r["summary"] if r["usable"] else r["why_not"]) for r in data["methods"]],
           ("method", "usable", "stores", "what / why not"), out)
    th = st.thresholds
    print("\nthresholds (source: %s)" % th.source, file=out)
    rows = []
    for k in _calibration.FIELDS + ("chunk",):
        val = getattr(th, k)
        if k in ("max_threads",):
            shown = "all (%d)" % cpu.cores if val == 0 else str(val)
        elif isinstance(val, int):
            shown = "never" if val >= NEVER else format_size(val)
        else:
            shown = val
        why = th.reason(k)
        if why == "default" or k == "chunk":
            why = DEFAULT_WHY.get(k, why)
        rows.append((k, shown, why))
    _table(rows, ("threshold", "value", "where it came from"), out)
    print("\nadaptive auto", file=out)
    for line in _adapt.info_lines(data["adaptive"]):
        print("  " + line, file=out)
    c = data["calibration"]
    print("\ncalibration", file=out)
    if c["setting"] == "off":
        print("  off (CLEARPAGES_CALIBRATION=off)", file=out)
    elif c["in_use"]:
        print("  in use: %s" % c["in_use"], file=out)
    else:
        print("  none: no valid file at %s (write one with `python -m clearpages "
              "calibrate`)" % c["looked_for"], file=out)
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


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    try:
        p = _core.plan(args.size, count=args.count, threads=args.threads)
    except ValueError as e:
        raise UsageError(str(e)) from None
    cpu = _core.cpu()
    r = BY_NAME[p.method]
    if args.json:
        _dump_json({"nbytes": p.nbytes, "count": p.count, "method": p.method,
                    "kind": "temporal" if r.temporal else "streaming",
                    "threads": p.threads, "chunk": p.chunk, "reason": p.reason,
                    "learned": p.learned,
                    "thresholds_source": _core.thresholds().source,
                    "cpu": _calibration.identity(cpu)}, "-", out)
        return 0
    pieces = "1 piece" if p.count == 1 else "%d pieces" % p.count
    print("plan for %s (%d bytes) in %s, threads=%s" % (
        format_size(p.nbytes), p.nbytes, pieces, args.threads), file=out)
    print("on %s" % _cpu_line(cpu), file=out)
    print("  method   %s (%s stores: %s)" % (p.method, "ordinary" if r.temporal
                                               else "streaming", r.summary), file=out)
    print("  threads  %d" % p.threads, file=out)
    print("  chunk    %s" % format_size(p.chunk), file=out)
    print("  reason   %s" % p.reason, file=out)
    if p.learned:
        print("  learned  %s" % p.learned, file=out)
    print("thresholds from: %s" % _core.thresholds().source, file=out)
    return 0


# ---- bench ----------------------------------------------------------------------


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib, which is not installed: "
                         "pip install 'clearpages[plot]' (or matplotlib)") from None


def bench(sizes: Sequence[int], names: Sequence[str] | None = None, *, repeat: int = 7,
          target_s: float = 0.002, budget_s: float = 3.0,
          progress: Progress | None = None) -> dict[str, Any]:
    """Measure; the dict that --json writes (also used by the table and plot)."""
    if names is None:
        names = list(_measure.known_names())
    else:
        names = list(dict.fromkeys(names))
        if _measure.MEMSET not in names:
            names.append(_measure.MEMSET)       # the reference for the ratio
    try:
        cands = _measure.candidates(names)
    except (ValueError, _core.UnsupportedMethod) as e:
        raise UsageError(str(e)) from None

    def tick(done: int, total: int, size: int) -> None:
        if progress is not None:
            progress(done, total, format_size(size))

    rows = _measure.measure(sorted(set(sizes)), cands, repeat=repeat, target_s=target_s,
                            budget_s=budget_s, progress=tick)
    results = []
    for row in rows:
        size = next(iter(row.values())).size
        planned = _core.plan(size, threads=1).method
        best = max(row.values(), key=lambda m: m.median).name
        ref = row[_measure.MEMSET].median
        for m in row.values():
            d = m.to_json()
            d["ratio_to_memset"] = m.median / ref if ref else None
            d["plan"] = m.name == planned
            d["best"] = m.name == best
            results.append(d)
    th = _core.thresholds()
    return {
        "machine": machine(),
        "thresholds": {"source": th.source,
                       "values": {k: getattr(th, k) for k in _calibration.FIELDS}},
        "settings": {"repeat": repeat, "target_s": target_s, "budget_s": budget_s,
                     "sizes": sorted(set(sizes)), "names": names},
        "results": results,
    }


def print_bench(data: dict[str, Any], out: TextIO) -> None:
    m = data["machine"]
    cpu = _core.cpu()
    print("clearpages bench on %s" % _cpu_line(cpu), file=out)
    print("caches %s; %s; THP %s; %s" % (_cache_line(cpu), m["kernel"], m["thp"],
                                          m["date"]), file=out)
    print("thresholds: %s" % data["thresholds"]["source"], file=out)
    print("GB/s = 10^9 bytes/s at the median time of the repeats; IQR = the middle "
          "half of the repeats; x memset = median / ctypes.memset's median.", file=out)
    print("One prefaulted 2 MiB-aligned buffer, all candidates interleaved; routines "
          "called directly, auto = clearpages.clear(view).", file=out)
    rows = []
    last = None
    for r in data["results"]:
        size = format_size(r["size"]) if r["size"] != last else ""
        last = r["size"]
        note = " ".join(x for x in ("plan" if r["plan"] else "",
                                    "best" if r["best"] else "") if x)
        rows.append((size, r["name"], "%.2f" % r["gbps_median"],
                     "%.2f-%.2f" % (r["gbps_q1"], r["gbps_q3"]),
                     "%.2f" % r["ratio_to_memset"] if r["ratio_to_memset"] else "n/a",
                     "%d x %d" % (r["repeats"], r["calls_per_sample"]), note))
    print(file=out)
    _table(rows, ("size", "method", "GB/s", "IQR GB/s", "x memset", "reps x calls", ""),
           out, right=(2, 3, 4, 5))


def plot_bench(data: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cpu = _core.cpu()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    by_name: dict[str, list[tuple[int, float, float, float]]] = {}
    for r in data["results"]:
        by_name.setdefault(r["name"], []).append(
            (r["size"], r["gbps_median"], r["gbps_q1"], r["gbps_q3"]))
    for name, pts in by_name.items():
        pts.sort()
        xs = [p[0] for p in pts]
        style: dict[str, Any] = ({"linewidth": 2.5, "color": "black"}
                                 if name == _measure.AUTO else {})
        if name in _measure.COMPETITORS:
            style = {"linestyle": "--"}
        (line,) = ax.plot(xs, [p[1] for p in pts], marker="o", markersize=3, label=name,
                          **style)
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15,
                        color=line.get_color(), linewidth=0)
    sizes = sorted({r["size"] for r in data["results"]})
    lo, hi = sizes[0] / 1.5, sizes[-1] * 1.5
    for label, size in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)):
        if size and lo <= size <= hi * 4:
            hi = max(hi, size * 1.5)
            ax.axvline(size, color="grey", linestyle=":", linewidth=1)
            ax.text(size, 1.0, " " + label, transform=ax.get_xaxis_transform(),
                    va="top", ha="left", fontsize=8, color="grey")
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(x).replace(" ", "")))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("bytes cleared per call")
    ax.set_ylabel("GB/s (10^9 bytes/s), median; band: IQR")
    ax.set_title("clearpages %s: %s\n%s, %s" % (
        __version__, cpu.brand or cpu.vendor, data["machine"]["kernel"],
        data["machine"]["date"][:10]), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mem_cap_sizes(sizes: list[int]) -> list[int]:
    cap = _calibration._memory_cap()
    return [s for s in sizes if s <= cap] or sizes[:1]


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    if args.plot:
        _need_matplotlib()
    sizes = _flat(args.sizes)
    if sizes is None:
        sizes = _mem_cap_sizes([_config.parse_size(s) for s in
                                (QUICK_SIZES if args.quick else FULL_SIZES)])
    if not sizes or min(sizes) < 1:
        raise UsageError("--sizes needs sizes of at least 1 byte")
    # Many short samples rather than a few long ones: on a shared machine a
    # sample is either undisturbed or not, and the median needs a majority.
    repeat = args.repeat or (9 if args.quick else 15)
    target = args.target_ms / 1000 if args.target_ms else (0.001 if args.quick else 0.002)
    budget = args.budget_s or (6.0 if args.quick else 8.0)
    progress = Progress("bench", quiet=args.quiet)
    try:
        data = bench(sizes, _flat(args.methods), repeat=repeat, target_s=target,
                     budget_s=budget, progress=progress)
    finally:
        progress.close()
    # With --json - the JSON owns stdout and the table moves to stderr.
    table_out = sys.stderr if args.json == "-" else out
    print_bench(data, table_out)
    if args.json:
        _dump_json(data, args.json, out)
        if args.json != "-":
            print("\nwrote %s" % args.json, file=table_out)
    if args.plot:
        plot_bench(data, args.plot)
        print("wrote %s" % args.plot, file=table_out)
    return 0


# ---- calibrate ------------------------------------------------------------------


def _show(field: str, value: Any, cores: int) -> str:
    if field == "max_threads":
        return "all (%d)" % cores if value == 0 else str(value)
    if isinstance(value, int):
        return "never" if value >= NEVER else format_size(value)
    return str(value)


def cmd_calibrate(args: argparse.Namespace, out: TextIO) -> int:
    st = _core._state
    cpu = st.cpu
    if args.output:
        path = os.path.expanduser(args.output)
    else:
        path = str(_calibration.resolve(cpu, st.config.calibration)
                   or _calibration.default_path(cpu))
    progress = Progress("calibrate", quiet=args.quiet)
    try:
        result = _calibration.calibrate(
            quick=args.quick, sizes=_flat(args.sizes), thread_sizes=_flat(args.thread_sizes),
            repeat=args.repeat, target_s=args.target_ms / 1000 if args.target_ms else None,
            budget_s=args.budget_s, verify=not args.no_verify,
            progress=lambda what, done, total: progress(done, total, what))
    finally:
        progress.close()
    th, d = result.thresholds, result.default
    print("clearpages calibrate on %s" % _cpu_line(cpu), file=out)
    print("caches %s; %s run" % (_cache_line(cpu), "custom" if args.sizes else
                                 "quick" if args.quick else "full"), file=out)
    print(file=out)
    _table([(k, _show(k, getattr(d, k), cpu.cores), _show(k, getattr(th, k), cpu.cores),
             th.reason(k)) for k in _calibration.FIELDS],
           ("threshold", "default", "calibrated", "evidence"), out)
    print("\nauto at each measured size, default policy vs calibrated "
          "(GB/s = 10^9 bytes/s, median):", file=out)
    rows = []
    for r in result.comparison(cpu):
        ratio = r["calibrated_gbps"] / r["default_gbps"] if r["default_gbps"] else 0
        rows.append((format_size(r["size"]), r["threads"], r["default"],
                     "%.2f" % r["default_gbps"], r["calibrated"],
                     "%.2f" % r["calibrated_gbps"], "%.2f" % ratio))
    _table(rows, ("size", "threads", "default", "GB/s", "calibrated", "GB/s", "ratio"),
           out, right=(3, 5, 6))
    extra = {"quick": bool(args.quick), "comparison": result.comparison(cpu)}
    written = _calibration.save(path, cpu, th, extra=extra)
    print("\nwrote %s" % written, file=out)
    if st.config.calibration == "off":
        print("note: CLEARPAGES_CALIBRATION=off is set, so auto will not read it", file=out)
    elif args.output and _calibration.resolve(cpu, st.config.calibration) != written:
        print("note: auto reads %s; set CLEARPAGES_CALIBRATION=%s to use this file"
              % (_calibration.resolve(cpu, st.config.calibration), written), file=out)
    else:
        print("auto uses it in new processes; in a running one call "
              "clearpages.reload_config()", file=out)
    return 0


# ---- the parser -------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m clearpages",
        description="Zero memory as fast as the hardware allows: what this machine has, "
                    "what auto does, how fast it is.")
    p.add_argument("--version", action="version", version="clearpages %s" % __version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="the CPU, caches, features, methods, thresholds")
    info.add_argument("--json", action="store_true", help="machine-readable output")

    plan = sub.add_parser("plan", help="what auto does for SIZE bytes, and why")
    plan.add_argument("size", type=_size_arg, metavar="SIZE",
                      help="bytes: 4096, 64K, 64M, 1G")
    plan.add_argument("--count", type=_positive_arg, default=1, metavar="N",
                      help="in N pieces (clear_many / clear_pages); default 1")
    plan.add_argument("--threads", type=_threads_arg, default="auto",
                      help="'auto' (default) or a number")
    plan.add_argument("--json", action="store_true", help="machine-readable output")

    b = sub.add_parser("bench", help="every method and the usual alternatives, side by side")
    b.add_argument("--quick", action="store_true",
                   help="sizes %s, fewer repeats (well under a minute)" % ",".join(QUICK_SIZES))
    b.add_argument("--sizes", type=_sizes_arg, nargs="+", metavar="SIZE",
                   help="sizes to measure (default %s)" % ",".join(FULL_SIZES))
    b.add_argument("--methods", type=_names_arg, nargs="+", metavar="NAME",
                   help="methods to measure: auto, routines, memset, numpy.fill, "
                        "numpy[...]=0 (default: all usable; memset is always added)")
    b.add_argument("--repeat", type=_positive_arg, metavar="N",
                   help="samples per candidate and size")
    b.add_argument("--json", metavar="FILE", help="write every sample as JSON ('-': stdout)")
    b.add_argument("--plot", metavar="FILE.png",
                   help="a PNG of GB/s against size (needs matplotlib)")
    b.add_argument("--quiet", action="store_true", help="no progress on stderr")
    b.add_argument("--target-ms", type=float, help=argparse.SUPPRESS)
    b.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)

    c = sub.add_parser("calibrate", help="measure this machine's crossovers, write the "
                                         "policy file auto reads")
    c.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    c.add_argument("--output", metavar="PATH",
                   help="where to write (default: the file auto reads, in "
                        "$XDG_CACHE_HOME/clearpages/)")
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


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """The command line; returns the exit status (2: bad usage)."""
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        return COMMANDS[args.command](args, out or sys.stdout)
    except UsageError as e:
        print("%s: error: %s" % (p.prog, e), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
