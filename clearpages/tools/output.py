"""How the command line prints: tables, progress, JSON, the bench plot."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

from .._cpu import CPU
from .._policy import NEVER
from .._units import format_size

SCENARIOS = ("warm", "cold")


def cpu_line(cpu: CPU) -> str:
    return "%s (%s family %d model %d stepping %d), %d CPU%s for this process" % (
        cpu.brand or "unknown brand", cpu.vendor, cpu.family, cpu.model, cpu.stepping,
        cpu.cores, "" if cpu.cores == 1 else "s")


def cache_line(cpu: CPU) -> str:
    return ", ".join("%s %s" % (k, format_size(v) if v else "unknown")
                     for k, v in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)))


#: Every line the command line prints fits in this many columns.
WIDTH = 100


def say(text: str, out: TextIO, indent: str = "", hang: str = "  ") -> None:
    """Print prose wrapped to WIDTH columns: the first line after indent,
    the rest after indent + hang."""
    print(textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent + hang,
                        break_long_words=False, break_on_hyphens=False), file=out)


def table(rows: Sequence[Sequence[Any]], head: Sequence[str], out: TextIO,
          right: Sequence[int] = ()) -> None:
    """Columns two spaces apart; a last column of prose that would pass
    WIDTH wraps under itself."""
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    start = sum(widths[:-1]) + 2 * (len(widths) - 1)
    last = max(WIDTH - start, 20)
    if len(head) - 1 not in right:
        widths[-1] = min(widths[-1], last)
    for n, r in enumerate(cells):
        lead = "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r[:-1], widths)))
        if len(r) - 1 in right:
            tail = [r[-1].rjust(widths[-1])]
        else:
            tail = textwrap.wrap(r[-1], last, break_long_words=False,
                                 break_on_hyphens=False) or [""]
        print(((lead + "  " if lead else "") + tail[0]).rstrip(), file=out)
        for more in tail[1:]:
            print(" " * start + more, file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def dump_json(data: Any, path: str, out: TextIO | None = None) -> None:
    text = json.dumps(data, indent=2) + "\n"
    if path == "-":
        (out or sys.stdout).write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def show_value(field: str, value: Any, cores: int) -> str:
    """A threshold as ``info`` and ``calibrate`` print it."""
    if field == "max_threads":
        return "all (%d)" % cores if value == 0 else str(value)
    if field == "long" and not value:
        return "(none)"
    if isinstance(value, int):
        return "never" if value >= NEVER else format_size(value)
    return str(value)


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


# ---- bench ----------------------------------------------------------------------


def _by_size(results: Sequence[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """{size: {name: {scenario: result}}} in measured order."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for r in results:
        out.setdefault(r["size"], {}).setdefault(r["name"], {})[r.get("scenario", "warm")] = r
    return out


def print_bench(data: dict[str, Any], cpu: CPU, out: TextIO) -> None:
    m = data["machine"]
    say("clearpages bench on %s" % cpu_line(cpu), out)
    say("caches %s; %s; THP %s; %s" % (cache_line(cpu), m["kernel"], m["thp"], m["date"]),
        out)
    print("thresholds: %s" % data["thresholds"]["source"], file=out)
    say("GB/s = 10^9 bytes/s at the median time of the repeats; x libc = median / the "
        "median of libc (the C library's memset, called as the routines are) in the same "
        "case; ctypes.memset is that memset behind ctypes' call, whose own cost is most of "
        "a small clear's.", out)
    say("warm: the same buffer cleared back to back; cold: a different buffer each call, "
        "walking a %s pool (-: the pool cannot make that size cold)."
        % format_size(data["settings"].get("cold_pool", 0)), out)
    say("score: the worse of the two ratios to the best routine of each case, for every "
        "row alike (what auto is judged by; above 1: faster than every routine). "
        "note: plan marks the routine auto plans, best-warm and best-cold the fastest row "
        "of that case. Routines: %s; auto = clearpages.clear(view)."
        % data["settings"].get("routines", "called directly"), out)
    rows = []
    for size, names in _by_size(data["results"]).items():
        first = True
        for name, cases in names.items():
            cell = []
            for sc in SCENARIOS:
                r = cases.get(sc)
                ratio = r.get("ratio_to_libc") if r else None
                cell.append(("%.2f" % r["gbps_median"], "%.2f" % ratio if ratio else "n/a")
                            if r else ("-", "-"))
            any_r = next(iter(cases.values()))
            note = " ".join(x for x in (
                "plan" if any_r["plan"] else "",
                "best-%s" % "/".join(sc for sc in SCENARIOS
                                     if sc in cases and cases[sc]["best"])
                if any(c["best"] for c in cases.values()) else "") if x)
            score = any_r.get("score")
            rows.append((format_size(size) if first else "", name, cell[0][0], cell[1][0],
                         cell[0][1], cell[1][1], "%.2f" % score if score is not None else "-",
                         note))
            first = False
    print(file=out)
    table(rows, ("size", "method", "warm GB/s", "cold GB/s", "warm x libc",
                 "cold x libc", "score", "note"), out, right=(2, 3, 4, 5, 6))
    goals = data.get("goals") or []
    if goals:
        print(file=out)
        say("auto judged by its worse case, scored as above. Goals: within 10% of the best "
            "static routine, never below the rival score, the best of libc, ctypes.memset "
            "and numpy.fill, and 1.2x libc at 1-4x the L3. noise: the interquartile range "
            "of auto's ratio to those, repeat by repeat, at least 5%; a shortfall within it "
            "is '~', not a miss.", out)

        def f(x: float | None) -> str:
            return "-" if x is None else "%.2f" % x
        shown = {"ok": "ok", "noise": "~ (within noise)", "MISSES": "MISSES"}
        table([(format_size(g["size"]), f(g["auto_score"]), g["best"], f(g["best_score"]),
                f(g["rival_score"]), f(g["near_l3_ratio"]),
                "%.0f%%" % (100 * g.get("noise", 0.05)),
                shown[g.get("verdict", "ok" if g["ok"] else "MISSES")])
               for g in goals],
              ("size", "auto score", "best routine", "its score", "rival score",
               "x libc at L3", "noise", "goal"), out, right=(1, 3, 4, 5, 6))
        verdicts = {g.get("verdict") for g in goals}
        if "noise" in verdicts:
            say("~: short of a goal by less than the noise measured there; to tell, rerun "
                "with more samples (--repeat 31) when the machine is quieter", out)
        if "MISSES" in verdicts:
            say("MISSES: short beyond the noise; run `python -m clearpages calibrate` "
                "(auto then starts from this machine's own crossovers), bench again, "
                "and if a miss stays, report it with this table and "
                "`python -m clearpages info`", out)


def plot_bench(data: dict[str, Any], cpu: CPU, path: str, version: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    present = [sc for sc in SCENARIOS
               if any(r.get("scenario", "warm") == sc for r in data["results"])]
    fig, axes = plt.subplots(1, len(present), figsize=(7 * len(present), 5.5),
                             squeeze=False, sharey=True)
    sizes = sorted({r["size"] for r in data["results"]})
    for ax, sc in zip(axes[0], present):
        by_name: dict[str, list[tuple[int, float, float, float]]] = {}
        for r in data["results"]:
            if r.get("scenario", "warm") == sc:
                by_name.setdefault(r["name"], []).append(
                    (r["size"], r["gbps_median"], r["gbps_q1"], r["gbps_q3"]))
        for name, pts in by_name.items():
            pts.sort()
            xs = [p[0] for p in pts]
            style: dict[str, Any] = {}
            if name == "auto":
                style = {"linewidth": 2.5, "color": "black"}
            elif name in ("ctypes.memset", "numpy.fill", "numpy[...]=0"):
                style = {"linestyle": "--"}
            (line,) = ax.plot(xs, [p[1] for p in pts], marker="o", markersize=3, label=name,
                              **style)
            ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15,
                            color=line.get_color(), linewidth=0)
        lo, hi = sizes[0] / 1.5, sizes[-1] * 1.5
        for label, size in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)):
            if size and lo <= size <= hi * 4:
                hi = max(hi, size * 1.5)
                ax.axvline(size, color="grey", linestyle=":", linewidth=1)
                ax.text(size, 1.0, " " + label, transform=ax.get_xaxis_transform(),
                        va="top", ha="left", fontsize=8, color="grey")
        ax.set_xscale("log", base=2)
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(
            FuncFormatter(lambda x, _: format_size(x).replace(" ", "")))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("bytes cleared per call")
        ax.set_title("%s: %s" % (sc, "the same buffer back to back" if sc == "warm" else
                                 "a different buffer each call"), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    axes[0][0].set_ylabel("GB/s (10^9 bytes/s), median; band: IQR")
    fig.suptitle("clearpages %s: %s, %s, %s" % (
        version, cpu.brand or cpu.vendor, data["machine"]["kernel"],
        data["machine"]["date"][:10]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_replay(verdicts: Sequence[Any], label: str, out: TextIO) -> None:
    """The default policy judged against a profile, one row a size."""
    print("the default policy replayed against %s" % label, file=out)
    table([(format_size(v.size), v.choice, "%.2f" % v.score if v.score is not None else "-",
            v.best, "%.2f" % v.best_score,
            "%.2f" % v.memset_score if v.memset_score is not None else "-",
            "ok" if v.ok else "MISSES") for v in verdicts],
          ("size", "auto", "score", "best static", "score", "best rival", "goal"), out,
          right=(2, 4, 5))
