#!/usr/bin/env python3
"""Draw quantjit-bench GEMM results: GOPS per shape against the measured peak and the peer.

Usage: plot.py RESULTS.jsonl OUT.png [--log] [--title TEXT]

RESULTS.jsonl is what `quantjit-bench gemm --format json` prints (one object per shape; lines
that are not JSON objects are ignored). `quantjit-bench gemm --plot OUT.png` runs this script
itself. Bars: quantjit's GOPS and, where present, the peer's (e.g. oneDNN) per shape; dashed
line: the measured peak (peak_gops); the label above a pair of bars is peer time / our time.
"""
import argparse
import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot.py: %s has no matplotlib (Debian: apt-get install python3-matplotlib; "
             "QJ_PYTHON names another interpreter)" % sys.executable)

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--log", action="store_true", help="logarithmic GOPS axis")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()

    rows = load(args.results)
    if not rows:
        print("plot.py: no JSON records in %s" % args.results, file=sys.stderr)
        return 1

    # Several weight formats in one file (--weights s8,s4,...): each bar also names its types.
    fmt = lambda r: "%s A x %s W" % (r.get("a_type", "?"), r.get("w_type", "?"))
    several = len({fmt(r) for r in rows}) > 1
    labels = ["%dx%dx%d" % (r["m"], r["n"], r["k"]) + ("\n" + fmt(r) if several else "") for r in rows]
    ours = [r.get("gops") or 0.0 for r in rows]
    peer = [r.get("peer_gops") for r in rows]
    have_peer = any(p for p in peer)
    peer_name = next((r.get("peer") for r in rows if r.get("peer_gops")), "peer")
    peaks = [r["peak_gops"] for r in rows if r.get("peak_gops")]

    n = len(rows)
    width = 0.4 if have_peer else 0.7
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * n + 2.5), 5.0))
    xs = list(range(n))
    ax.bar([x - (width / 2 if have_peer else 0) for x in xs], ours, width,
           label="quantjit", color="#1f77b4")
    if have_peer:
        ax.bar([x + width / 2 for x in xs], [p or 0.0 for p in peer], width,
               label=peer_name, color="#ff7f0e")
        for x, r in zip(xs, rows):
            if r.get("ratio"):
                top = max(r.get("gops") or 0, r.get("peer_gops") or 0)
                ax.annotate("%.2f" % r["ratio"], (x, top), textcoords="offset points",
                            xytext=(0, 3), ha="center", fontsize=7)
    for x, r in zip(xs, rows):
        if r.get("error"):
            ax.annotate("failed", (x, 0), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7, color="red", rotation=90)
    # One dashed line per measured peak (the VNNI peak, and the FMA peak of the float weights).
    for peak in sorted(set(round(p, 1) for p in peaks)):
        ax.axhline(peak, linestyle="--", color="black", linewidth=1)
        types = sorted({r.get("w_type", "?") for r in rows if r.get("peak_gops") and round(r["peak_gops"], 1) == peak})
        ax.annotate("measured peak %.0f GOPS%s" % (peak, " (%s)" % ", ".join(types) if several else ""),
                    (n - 0.5, peak), textcoords="offset points", xytext=(-4, 3), ha="right", fontsize=8)
    top = max([max(peaks) if peaks else 0.0] + ours + [p or 0.0 for p in peer])
    if top > 0:
        ax.set_ylim(top=top * 1.3 if not args.log else top * 4)
    if args.log:
        ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=45 if n > 3 else 0, ha="right" if n > 3 else "center",
                       fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel("GOPS (2*M*N*K / median time)")
    r0 = rows[0]
    what = "%d formats" % len({fmt(r) for r in rows}) if several else "%s -> %s" % (fmt(r0), r0.get("c_type", "?"))
    title = args.title or "GEMM %s, %s, %s thread(s), isa %s" % (
        what, r0.get("mode", "?"), r0.get("threads", "?"), r0.get("isa", "?"))
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(args.out, dpi=110)
    except (OSError, ValueError) as e:  # a missing directory, an unknown file type
        sys.exit("plot.py: cannot write %s: %s" % (args.out, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
