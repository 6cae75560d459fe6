#!/usr/bin/python3
"""Bus bandwidth against size from loom-perf --json results (loom-perf, loom-mpi-perf,
loom-gloo-perf all write the same schema, and loom-perf --compare --json one document of all
their runs): one line per library and algorithm, sizes on a log-2 axis, written as PNG and SVG.

  perf/plot.py -o docs/perf/allreduce_4ranks loom.json mpi.json gloo.json
  perf/plot.py -o docs/perf/allreduce_4ranks compare.json
  perf/plot.py -o out --place in_place --title "all_reduce, 4 ranks" *.json

Runs with Debian's python3 and python3-matplotlib (hence /usr/bin/python3, not the first python3
on PATH). Several files of the same library and algorithm (repeated runs) become one line of the
median busbw per size, so a noisy run does not make the chart.
"""
import argparse
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402


def human(size):
    size = int(round(size))  # tick positions arrive as floats
    if size <= 0:
        return ""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def label(run):
    algos = sorted({row.get("algorithm", "auto") for row in run["rows"]})
    names = {"loom": "loom", "loom-nccl": "loom (NCCL API)", "mpi": "Open MPI", "gloo": "Gloo"}
    name = names.get(run["library"], run["library"])
    transport = run.get("env", {}).get("LOOM_TRANSPORT")
    if run["library"] in ("loom", "loom-nccl") and transport:
        name += f" ({transport})"
    return f"{name} {'/'.join(algos)}" if algos != ["auto"] else name


def runs_of(doc):
    """A --json file's runs: itself, or every run of a --compare document."""
    return doc["runs"] if doc.get("schema") == "loom-perf-set/1" else [doc]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="files written by --json")
    ap.add_argument("-o", "--output", required=True, help="output path without extension")
    ap.add_argument("--place", choices=("out_of_place", "in_place"), default="out_of_place")
    ap.add_argument("--title")
    args = ap.parse_args()

    lines = {}  # label -> size -> [busbw]
    meta = None
    for path in args.json:
        with open(path) as f:
            doc = json.load(f)
        for run in runs_of(doc):
            meta = meta or run
            series = lines.setdefault(label(run), {})
            for row in run["rows"]:
                if row["size"] > 0:
                    series.setdefault(row["size"], []).append(row[args.place]["busbw_gbs"])
    if not lines:
        sys.exit("plot.py: no rows")

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    for name, series in lines.items():
        sizes = sorted(series)
        ax.plot(sizes, [statistics.median(series[s]) for s in sizes], marker="o", markersize=3.5,
                linewidth=1.6, label=name)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human(v)))
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel(f"bus bandwidth (GB/s), {args.place.replace('_', '-')}")
    runs = max(len(v) for s in lines.values() for v in s.values())
    ax.set_title(args.title or
                 f"{meta['collective']}, {meta['ranks']} ranks on {meta['hosts']} host(s)"
                 f" — median of {runs} run(s)")
    ax.grid(True, which="major", alpha=0.35)
    ax.legend()
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{args.output}.{ext}")
    print(f"wrote {args.output}.png and {args.output}.svg")


if __name__ == "__main__":
    main()
