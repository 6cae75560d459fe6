#!/usr/bin/python3
"""Which loom algorithm wins where, measured.

Runs loom-perf once per forced algorithm (--algo NAME) for allreduce, allgather and alltoall,
plus loom's own choice ("auto") and Open MPI (loom-mpi-perf under mpirun) as a reference, in two
settings:

  local  4 ranks on one host (loom-perf -N 4; Open MPI: mpirun -np 4)
  netns  2 hosts x 2 ranks in network namespaces, links shaped to 1 Gbit/s
         (perf/netns-cluster.sh -H 2 -R 2 --rate 1gbit; Open MPI through its --peers)

Every cell is the median over --repeats runs of the out-of-place busbw (GB/s); the fastest
algorithm of each size is in bold. An algorithm that loom refuses shows as "n/a (reason)".
Writes Markdown (docs/ALGORITHMS.md):

  sudo perf/algo_table.py --out docs/ALGORITHMS.md

Standard library only. Needs root for the netns setting (skip it with --settings local).
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIVES = [("all_reduce", "allreduce"), ("all_gather", "allgather"), ("alltoall", "alltoall")]


def log(msg):
    print(f"[algo_table {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def algorithms(build):
    """Every algorithm per collective, as `loom-info` lists them."""
    out = subprocess.run([os.path.join(build, "loom-info")], capture_output=True, text=True,
                         check=True).stdout
    algos, inside = {}, False
    for line in out.splitlines():
        if line.startswith("algorithms:"):
            inside = True
            continue
        if inside:
            if not line.startswith("  ") or not line.strip():
                break
            name, *rest = line.split()
            algos[name] = rest
    return algos


def parse_tables(text):
    """Rows of every table that a loom-perf-style program printed: [(backend, {size: busbw})]."""
    tables, cur = [], None
    for line in text.splitlines():
        if line.startswith("# Backend:"):
            cur = {}
            tables.append((line[len("# Backend:"):].strip(), cur))
        elif cur is not None and line and not line.startswith("#"):
            f = line.split()
            if len(f) >= 8 and f[0].isdigit():
                cur[int(f[0])] = float(f[7])  # out-of-place busbw (two decimals only)
    return tables


def reason_of(stderr, rc):
    """A short reason out of a failed run's stderr."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and "sch_htb" not in l
             and not l.startswith("# netns")]
    msg = lines[-1] if lines else f"exit code {rc}"
    m = re.search(r".*failed: (?:[a-z ]+: )?(.*)$", msg)  # the innermost failure
    if m:
        msg = m.group(1)
    m = re.search(r"cannot serve this call: (.*?)(?:; use another algorithm)?$", msg)
    if m:
        msg = "refused: " + m.group(1)
    msg = re.sub(r"loomCommInitRank \(rank \d+ of \d+\): ", "", msg)
    msg = msg.replace("|", "/")
    return msg[:110]


class Runner:
    def __init__(self, args):
        self.a = args
        self.perf = os.path.join(args.build, "perf", "loom-perf")
        self.mpiperf = os.path.join(args.build, "perf", "loom-mpi-perf")
        self.tmp = tempfile.mkdtemp(prefix="algo_table.")
        self.commands = []

    def sweep_args(self, coll, sizes, check, netns):
        lo, hi, f = sizes
        a = [coll, "-b", str(lo), "-e", str(hi), "-f", str(f), "-c", str(check)]
        if netns:
            a += ["-w", str(self.a.netns_warmup), "-n", str(self.a.netns_iters)]
        return a

    def run(self, cmd, timeout=300):
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = 124, (e.stdout or b"").decode(errors="replace") if isinstance(
                e.stdout, bytes) else (e.stdout or ""), "timed out"
        log(f"rc={rc} {time.time() - t0:5.1f}s  {' '.join(cmd)}")
        return rc, out, err

    def loom(self, setting, coll, algo, sizes, check):
        """{size: busbw} of one loom-perf run, or a reason string."""
        jf = os.path.join(self.tmp, "run.json")
        if os.path.exists(jf):
            os.unlink(jf)
        extra = [] if algo == "auto" else ["--algo", algo]
        if setting == "local":
            cmd = [self.perf] + self.sweep_args(coll, sizes, check, False) + ["-N", "4"] + extra
        else:
            cmd = self.netns_cmd(peers=False) + self.sweep_args(coll, sizes, check, True) + extra
        rc, out, err = self.run(cmd + ["--json", jf])
        if rc not in (0, 1) or not os.path.exists(jf):
            return reason_of(err, rc)
        with open(jf) as f:
            d = json.load(f)
        return {r["size"]: r["out_of_place"]["busbw_gbs"] for r in d["rows"] if r["size"] > 0}

    def netns_cmd(self, peers):
        """The testbed's command line up to the loom-perf arguments (`--peers`: Open MPI too)."""
        return [os.path.join(ROOT, "perf", "netns-cluster.sh"), "-H", "2", "-R", "2", "--rate",
                self.a.rate, "--mtu", str(self.a.mtu), "--build", self.a.build] + \
            (["--peers"] if peers else []) + ["--"]

    def mpi(self, setting, coll, sizes):
        """Open MPI's {size: busbw} (and, in netns, loom auto's from the same --peers run)."""
        if setting == "local":
            jf = os.path.join(self.tmp, "mpi.json")
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", self.mpiperf] + \
                self.sweep_args(coll, sizes, 0, False) + ["--json", jf]
            rc, out, err = self.run(cmd)
            if rc != 0 or not os.path.exists(jf):
                return reason_of(err, rc)
            with open(jf) as f:
                d = json.load(f)
            return {r["size"]: r["out_of_place"]["busbw_gbs"] for r in d["rows"] if r["size"] > 0}
        # netns: --peers runs loom-perf (auto) and then loom-mpi-perf over the same links; both
        # print a table (a shared --json FILE would be overwritten), so parse the printed tables.
        cmd = self.netns_cmd(peers=True) + self.sweep_args(coll, sizes, 0, True)
        rc, out, err = self.run(cmd)
        for backend, rows in parse_tables(out):
            if "MPI" in backend and rows:
                return {s: b for s, b in rows.items() if s > 0}
        return reason_of(err, rc)


def median_cell(results):
    """results: list over repeats of {size: busbw} or reason str -> {size: median} or str."""
    dicts = [r for r in results if isinstance(r, dict)]
    if not dicts:
        return results[0]
    sizes = sorted(set().union(*dicts))
    return {s: statistics.median([d[s] for d in dicts if s in d]) for s in sizes}


def fmt(v):
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    if v >= 0.01:
        return f"{v:.3f}"
    return f"{v:.2g}" if v > 0 else "0"


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def table(cells, algos, mpi):
    """Markdown: one row per size, one column per algorithm, then auto and Open MPI."""
    ok = {a: c for a, c in cells.items() if isinstance(c, dict)}
    sizes = sorted(set().union(*ok.values())) if ok else []
    cols = algos + ["auto"]
    head = "| size | " + " | ".join(f"`{a}`" for a in algos) + " | loom auto | Open MPI |"
    lines = [head, "|" + "---:|" * (len(cols) + 2)]
    for s in sizes:
        forced = {a: ok[a][s] for a in algos if a in ok and s in ok[a]}
        best = max(forced.values()) if forced else None
        row = [human(s)]
        for a in cols:
            c = cells.get(a)
            if not isinstance(c, dict):
                row.append("n/a¹")  # the reason once, under the table
            elif s not in c:
                row.append("–")
            else:
                t = fmt(c[s])
                row.append(f"**{t}**" if a != "auto" and best is not None and c[s] == best
                           and best > 0 else t)
        # Parsed from a printed table (netns), 0.00 only says "under 0.005".
        row.append(("<0.005" if mpi[s] == 0 else fmt(mpi[s])) if isinstance(mpi, dict) and s in mpi else
                   "–" if isinstance(mpi, dict) else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    notes = [f"- ¹ `{a}`: n/a ({cells[a]})" for a in cols if not isinstance(cells.get(a), dict)]
    if not isinstance(mpi, dict):
        notes.append(f"- Open MPI: n/a ({mpi})")
    return "\n".join(lines + ([""] + notes if notes else []))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "ALGORITHMS.md"))
    ap.add_argument("--build", default=os.environ.get("LOOM_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--settings", default="local,netns", help="local, netns or both (default)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell, median (default 3)")
    ap.add_argument("--netns-repeats", type=int, default=1,
                    help="runs per netns cell (default 1: keeps the whole script under ~6 min)")
    ap.add_argument("--rate", default="1gbit", help="netns link rate (tc units)")
    ap.add_argument("--mtu", type=int, default=9000,
                    help="netns link MTU (default 9000: at 1500 this machine's 2 cores, not the "
                         "links, limit 4 ranks' TCP)")
    ap.add_argument("--netns-warmup", type=int, default=2, help="netns -w (default 2)")
    ap.add_argument("--netns-iters", type=int, default=5, help="netns -n (default 5)")
    ap.add_argument("--netns-max", default="16M", help="netns largest size (default 16M)")
    ap.add_argument("--results", help="also keep the raw medians as JSON here")
    args = ap.parse_args()

    t0 = time.time()
    algos = algorithms(args.build)
    runner = Runner(args)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    # 8 B .. 16 MiB by factor 8, then 64 MiB in its own run (8 * 8^k never lands on 64 MiB).
    local_sweeps = [(8, 16 << 20, 8), (64 << 20, 64 << 20, 8)]
    netns_max = args.netns_max
    netns_sweeps = [(8, min(16 << 20, parse_size(netns_max)), 8)]
    if parse_size(netns_max) > 16 << 20:
        netns_sweeps.append((parse_size(netns_max), parse_size(netns_max), 8))
    results = {}
    for setting in settings:
        sweeps = local_sweeps if setting == "local" else netns_sweeps
        reps = args.repeats if setting == "local" else args.netns_repeats
        for coll, key in COLLECTIVES:
            cells = {}
            for algo in algos[key] + ["auto"]:
                runs = []
                for rep in range(reps):
                    merged = {}
                    for sw in sweeps:
                        # The first local repeat checks every result (-c 1); the rest time only.
                        check = 1 if (setting == "local" and rep == 0) else 0
                        r = runner.loom(setting, coll, algo, sw, check)
                        if not isinstance(r, dict):
                            merged = r
                            break
                        merged.update(r)
                    runs.append(merged)
                    if not isinstance(merged, dict):
                        break  # a refusal does not change on a repeat
                cells[algo] = median_cell(runs)
            mruns = []
            for rep in range(reps):
                merged = {}
                for sw in sweeps:
                    r = runner.mpi(setting, coll, sw)
                    if not isinstance(r, dict):
                        merged = r
                        break
                    merged.update(r)
                mruns.append(merged)
                if not isinstance(merged, dict):
                    break
            results[(setting, key)] = (cells, median_cell(mruns))
    elapsed = time.time() - t0

    if args.results:
        with open(args.results, "w") as f:
            json.dump({f"{s}/{k}": {"loom": c, "mpi": m} for (s, k), (c, m) in results.items()},
                      f, indent=1, default=str)
    write_md(args, algos, results, settings, elapsed)
    log(f"wrote {args.out} in {elapsed:.0f} s")


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    mpi = mpi.splitlines()[0] if mpi else "?"
    return (f"{os.cpu_count()} vCPU ({cpu}), {mem} RAM, Linux {platform.release()}, "
            f"{platform.node()}; {mpi}")


def write_md(args, algos, results, settings, elapsed):
    cmdline = "sudo perf/algo_table.py --out docs/ALGORITHMS.md"
    extra, skip = [], False
    for a in sys.argv[1:]:  # --results only keeps raw numbers: not part of the recipe
        if skip or a.startswith("--results"):
            skip = a == "--results" and not skip
            continue
        extra.append(a)
    if extra and extra != ["--out", "docs/ALGORITHMS.md"]:
        cmdline = "sudo perf/algo_table.py " + " ".join(extra)
    md = [
        "# Which algorithm wins where, measured",
        "",
        "<!-- Generated by perf/algo_table.py; rerun it rather than editing the tables. -->",
        "",
        f"Produced by `{cmdline}` on {datetime.date.today().isoformat()} "
        f"(loom commit {git_commit()}, {elapsed / 60:.1f} min).",
        "",
        f"Machine: {machine()}. A small shared VM: 4 ranks on 2 cores are oversubscribed, so "
        "absolute numbers are low and noisy; the ranking between algorithms is the point.",
        "",
        "How: for each collective, `loom-perf COLL -b 8 -e 16M -f 8` and `-b 64M -e 64M` once per "
        "algorithm that `build/loom-info` lists (`--algo NAME`), once with loom's own choice "
        "(\"loom auto\"), and the same sweep with Open MPI (`loom-mpi-perf` under "
        "`mpirun --allow-run-as-root --oversubscribe -np 4`). Each cell is the out-of-place "
        "busbw in GB/s (nccl-tests' bus bandwidth: allreduce 2(n−1)/n × size/time, allgather "
        "and alltoall (n−1)/n × size/time), the median of "
        f"{args.repeats} runs (one host) / {args.netns_repeats} runs (netns), read from "
        "`--json`. The first one-host run of each cell checks every result (`-c 1`), the "
        "others only time (`-c 0`). **Bold**: the fastest forced algorithm at that size "
        "(loom auto and Open MPI are not ranked). \"–\": no row at that size (allgather and "
        "alltoall round 8 B down to 0 elements per rank).",
        "",
    ]
    titles = {
        "local": "## One host, 4 ranks (`loom-perf -N 4`, shared memory)",
        "netns": (f"## 2 hosts × 2 ranks, links shaped to {args.rate}, MTU {args.mtu} "
                  f"(`perf/netns-cluster.sh -H 2 -R 2 --rate {args.rate} --mtu {args.mtu} -- ... "
                  f"-w {args.netns_warmup} -n {args.netns_iters}`)"),
    }
    for setting in settings:
        md += [titles[setting], ""]
        if setting == "netns":
            md += [
                "Shared memory inside a namespace, TCP across the bridge; every host's link is "
                f"htb-shaped to {args.rate} both ways with a 1 MB bfifo. Sizes up to "
                f"{args.netns_max} (-w {args.netns_warmup} -n {args.netns_iters}) keep the run "
                "short: a 64 MiB allreduce takes about a second per call at 1 Gbit/s. Open MPI "
                "is run by the same script's `--peers` (mpirun over the namespaces, btl tcp); "
                "its busbw is parsed from the printed table (two decimals).",
                "",
            ]
        for coll, key in COLLECTIVES:
            if (setting, key) not in results:
                continue
            cells, mpi = results[(setting, key)]
            md += [f"### {key}", "", table(cells, algos[key], mpi), ""]
    md += [ANALYSIS_HEADING, "", ANALYSIS_MARKER, ""]
    text = "\n".join(md)
    if os.path.exists(args.out):
        with open(args.out) as f:
            text = keep_analysis(text, f.read())
    with open(args.out, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")


ANALYSIS_HEADING = "## What wins where"
ANALYSIS_MARKER = "<!-- analysis -->"


def keep_analysis(text, old):
    """`text` (a fresh document ending in the heading and the marker) with the hand-written part
    of `old` (everything after its heading) in place of the marker, when there is one beyond
    the marker line itself, which it keeps for the next regeneration."""
    m = re.search(re.escape(ANALYSIS_HEADING) + r"\n(.*)\Z", old, re.S)
    if not m or not m.group(1).replace(ANALYSIS_MARKER, "").strip():
        return text
    head = text[:text.rindex(ANALYSIS_HEADING) + len(ANALYSIS_HEADING)]
    return head + "\n" + m.group(1)


if __name__ == "__main__":
    main()
