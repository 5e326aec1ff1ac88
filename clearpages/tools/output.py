"""How the command line prints: tables, progress, JSON, the bench plot."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .._cpu import CPU
from .._policy import NEVER
from .._units import format_size
from .measure import MISS, UNMEASURED

SCENARIOS = ("warm", "cold")


def cpu_line(cpu: CPU) -> str:
    return "%s (%s family %d model %d stepping %d), %d CPU%s for this process" % (
        cpu.brand or "unknown brand", cpu.vendor, cpu.family, cpu.model, cpu.stepping,
        cpu.cores, "" if cpu.cores == 1 else "s")


def cache_line(cpu: CPU) -> str:
    return ", ".join("%s %s" % (k, format_size(v) if v else "unknown")
                     for k, v in (("L1d", cpu.l1d), ("L2", cpu.l2), ("L3", cpu.l3)))


#: The width output is fitted to when no terminal says otherwise.
DEFAULT_COLUMNS = 80
#: Narrower than this, nothing is fitted (a table needs some room).
MIN_COLUMNS = 40
_wide = False


def set_wide(on: bool) -> None:
    """--wide: print every table whole, at its natural width, and prose
    unbroken (for a wide terminal, a file or a pipe to a script)."""
    global _wide
    _wide = bool(on)


def columns() -> int:
    """The width every line is fitted to: COLUMNS when set, else the
    terminal's, else 80; no limit with --wide."""
    if _wide:
        return sys.maxsize
    return max(MIN_COLUMNS, shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns)


def say(text: str, out: TextIO, indent: str = "", hang: str = "  ") -> None:
    """Print prose wrapped to the width (columns()): the first line after
    indent, the rest after indent + hang."""
    print(textwrap.fill(text, min(columns(), 1 << 16), initial_indent=indent,
                        subsequent_indent=indent + hang, break_long_words=False,
                        break_on_hyphens=False), file=out)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _fit(natural: list[int], least: list[int], room: int) -> list[int] | None:
    """Column widths within room: each at least its longest word, the room
    left over shared so that narrow columns keep their natural width and
    the widest give way first; None where even the least does not fit."""
    if sum(least) > room:
        return None
    widths = list(least)
    left = room - sum(least)
    wanting = sorted(range(len(natural)), key=lambda i: natural[i] - least[i])
    for k, i in enumerate(wanting):
        share = left // (len(wanting) - k)
        give = min(natural[i] - least[i], share)
        widths[i] += give
        left -= give
    return widths


def table(rows: Sequence[Sequence[Any]], head: Sequence[str], out: TextIO,
          right: Sequence[int] = (), optional: Sequence[int] = ()) -> None:
    """Columns two spaces apart, fitted to the width (columns()): a cell or a
    heading that does not fit its column wraps at its spaces onto more lines
    (right: columns aligned right), and where the longest words alone do not
    fit, the optional columns go, in the order given, and a line after the
    table names them (--wide prints them all)."""
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    room = columns()
    shown = list(range(len(head)))
    dropped: list[int] = []
    while True:
        gaps = 2 * (len(shown) - 1)
        natural = [max(len(r[i]) for r in cells) for i in shown]
        least = [max(_longest_word(r[i]) for r in cells) for i in shown]
        # Headings wrap first; cells only where that is not enough.
        body = [max([len(r[i]) for r in cells[1:]] + [least[k]]) for k, i in enumerate(shown)]
        widths = _fit(natural, body, room - gaps) or _fit(body, least, room - gaps)
        rest = [i for i in optional if i in shown]
        if widths is not None or not rest:
            break
        shown.remove(rest[0])
        dropped.append(rest[0])
    if widths is None:              # too narrow for the words themselves: as they are
        widths = least
    for n, r in enumerate(cells):
        parts = [textwrap.wrap(r[i], w, break_long_words=False, break_on_hyphens=False)
                 or [""] for i, w in zip(shown, widths)]
        for k in range(max(map(len, parts))):
            line = "  ".join(
                (p[k] if k < len(p) else "").rjust(w) if i in right else
                (p[k] if k < len(p) else "").ljust(w)
                for i, w, p in zip(shown, widths, parts))
            print(line.rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)
    if dropped:
        say("(%s not shown in %d columns: --wide, or a wider terminal or COLUMNS, shows "
            "%s)" % (", ".join(str(head[i]) for i in dropped), room,
                     "it" if len(dropped) == 1 else "them"), out)


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


def duration(seconds: float) -> str:
    """'45 s', '2 min 5 s', '1 h 3 min': a time left or taken, in words."""
    s = max(0, round(seconds))
    if s < 60:
        return "%d s" % s
    if s < 3600:
        return "%d min %d s" % divmod(s, 60) if s < 600 else "%d min" % round(s / 60)
    return "%d h %d min" % (s // 3600, round(s % 3600 / 60))


class Progress:
    """A bar with the time left on stderr when it is a terminal (fitted to
    its width); plain lines otherwise, one a step, so CI logs stay readable.
    quiet: nothing.  The time left is the time so far scaled by the steps
    left, said once a step is done and a second has passed."""

    def __init__(self, label: str, stream: TextIO | None = None, quiet: bool = False,
                 clock: Any = time.monotonic):
        self.label = label
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = ""
        self._clock = clock
        self._start = clock()

    def left(self, done: int, total: int) -> str:
        """'~2 min 5 s left', or '' before there is anything to go by."""
        spent = self._clock() - self._start
        if done < 1 or spent < 1 or done >= total:
            return ""
        return "~%s left" % duration(spent * (total - done) / done)

    def __call__(self, done: int, total: int, what: str) -> None:
        if self.quiet:
            return
        left = self.left(done, total)
        if self.tty:
            width = min(columns(), 200)
            bar = 20 if width >= 70 else 10
            fill = int(bar * done / max(total, 1))
            head = "%s [%s%s] %3d%%%s " % (self.label, "#" * fill, "." * (bar - fill),
                                          100 * done // max(total, 1),
                                          " " + left if left else "")
            tail = what[:max(0, width - 1 - len(head))]
            self.stream.write("\r%s%s\x1b[K" % (head, tail))
            self.stream.flush()
        elif what != self._last:
            self.stream.write("%s: %s (%d/%d%s)\n" % (self.label, what, done, total,
                                                      ", " + left if left else ""))
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
                 "cold x libc", "score", "note"), out, right=(2, 3, 4, 5, 6),
          optional=(4, 5, 7))
    goals = data.get("goals") or []
    if goals:
        print(file=out)
        say("auto judged by its worse case, scored as above, against three goals: at least "
            "0.90 of the best routine's score (libc, the C library's memset, among them); at "
            "least the rival score, the best of the code auto replaces (ctypes.memset, "
            "numpy.fill, numpy[...]=0; libc's where none was measured); and 1.2x libc at "
            "1-4x the L3. Each "
            "is judged on its figure in every repeat: the median decides, and where the "
            "repeats spread past the goal as far as the median is from it, on both sides, "
            "and are too few to bound the median on one side of the goal, they cannot "
            "tell, and the verdict is 'unmeasured, retake'. The verdict names "
            "the goal that decided it: one missed, else one unmeasured, else the nearest "
            "met.", out)

        def f(x: float | None) -> str:
            return "-" if x is None else "%.2f" % x
        table([(format_size(g["size"]), f(g["auto_score"]), g["best"], f(g["best_score"]),
                f(g["rival_score"]), f(g["near_l3_ratio"]), g["verdict"])
               for g in goals],
              ("size", "auto score", "best routine", "its score", "rival score",
               "x libc at L3", "verdict"), out, right=(1, 3, 4, 5), optional=(5, 4, 3))
        outcomes = {g.get("outcome") for g in goals}
        if UNMEASURED in outcomes:
            say("unmeasured: the repeats spread too wide to tell; retake with more samples "
                "(--repeat 31) when the machine is quieter", out)
        if MISS in outcomes:
            say("miss: short of the goal named; run `python -m clearpages calibrate` "
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
    """The default policy judged against a profile, one row a size; the
    verdict names the goal that decided it, with its figure."""
    print("the default policy replayed against %s" % label, file=out)
    table([(format_size(v.size), v.choice, "%.2f" % v.score if v.score is not None else "-",
            v.best, "%.2f" % v.best_score,
            "%.2f" % v.memset_score if v.memset_score is not None else "-",
            v.text()) for v in verdicts],
          ("size", "auto", "score", "best static", "score", "best rival", "verdict"), out,
          right=(2, 4, 5), optional=(5, 4))
