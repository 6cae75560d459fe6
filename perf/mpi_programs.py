#!/usr/bin/python3
"""Real MPI programs from Debian, unchanged, with and without a preload library (loom's MPI
interposer), side by side: each run's answers are compared and its wall time reported.

  /usr/bin/python3 perf/mpi_programs.py --preload build/bindings/mpi/libloom-mpi-preload.so
  /usr/bin/python3 perf/mpi_programs.py --preload LIB -n 2,4 -R 3 --markdown
  /usr/bin/python3 perf/mpi_programs.py --preload LIB --min-bytes 0   # every call on loom

The programs: hpcc (its own verdicts: every check passed, in both runs), lammps on a
Lennard-Jones liquid (perf/mpi_programs/in.lj; the thermodynamic output must be identical) and an
mpi4py program of collectives (perf/mpi_programs/mpi4py_collectives.py; every digest identical).
A program that is not installed is skipped and says so (Debian: hpcc, lammps, python3-mpi4py).
Exits 1 when any answer differs or a verdict fails. A time is the median of -R runs of each.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "mpi_programs")


def mpirun(ranks, argv, cwd, preload, timeout):
    """Runs argv under mpirun; (seconds, stdout+stderr). Raises on a failed run. `preload`: the
    -x options that preload the library (empty: MPI alone)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "-np", str(ranks)] + preload
    start = time.perf_counter()
    run = subprocess.run(cmd + argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + argv)} exited {run.returncode}:\n"
                           f"{run.stdout[-3000:]}{run.stderr[-3000:]}")
    return seconds, run.stdout + run.stderr


def hpcc(ranks, preload, timeout):
    """hpcc on its example input with a P x Q grid of the ranks: (seconds, verdict problems)."""
    with tempfile.TemporaryDirectory() as d:
        text = open("/usr/share/doc/hpcc/examples/_hpccinf.txt").read().splitlines()
        p = 2 if ranks % 2 == 0 and ranks >= 4 else 1
        text[10], text[11] = f"{p}            Ps", f"{ranks // p}            Qs"
        open(os.path.join(d, "hpccinf.txt"), "w").write("\n".join(text) + "\n")
        seconds, _ = mpirun(ranks, ["hpcc"], d, preload, timeout)
        out = open(os.path.join(d, "hpccoutf.txt")).read()
    problems = []
    if "FAILED" in out:
        problems.append("a check FAILED")
    if re.search(r"Node\(s\) with error [1-9]", out):
        problems.append("a node reported errors")
    if re.search(r"Found [1-9]\d* errors", out):
        problems.append("RandomAccess found errors")
    if re.search(r"[1-9]\d* tests completed and failed residual checks", out):
        problems.append("a residual check failed")
    passed = len(re.findall(r"PASSED|\(passed\)|Solution Validates", out))
    if passed == 0:
        problems.append("no check passed")
    return seconds, problems, f"{passed} checks passed"


def thermo(output):
    """LAMMPS's thermodynamic table: the lines from the header to 'Loop time'."""
    lines, inside = [], False
    for line in output.splitlines():
        if line.startswith("Step "):
            inside = True
        elif line.startswith("Loop time"):
            inside = False
        if inside:
            lines.append(line.split())
    return lines


def lammps(ranks, preload, timeout):
    with tempfile.TemporaryDirectory() as d:
        seconds, out = mpirun(ranks, ["lmp", "-in", os.path.join(PROGRAMS, "in.lj"), "-log",
                                      "none"], d, preload, timeout)
    table = thermo(out)
    return seconds, table, f"{len(table) - 1} thermo rows"


def mpi4py(ranks, preload, timeout):
    seconds, out = mpirun(ranks, ["/usr/bin/python3", os.path.join(PROGRAMS,
                                                                   "mpi4py_collectives.py")],
                          None, preload, timeout)
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    return seconds, lines, f"{len(lines)} digests"


def available(program):
    if program == "hpcc":
        return shutil.which("hpcc") and os.path.exists("/usr/share/doc/hpcc/examples/_hpccinf.txt")
    if program == "lammps":
        return shutil.which("lmp")
    return subprocess.run(["/usr/bin/python3", "-c", "import mpi4py, numpy"],
                          capture_output=True).returncode == 0


def compare(program, ranks, args):
    """One row: times without and with the preload, and whether the answers agree."""
    run = {"hpcc": hpcc, "lammps": lammps, "mpi4py": mpi4py}[program]
    times = {False: [], True: []}
    answers = {}
    for _ in range(args.rounds):
        for preloaded in (False, True):  # taking turns: both see the same machine
            seconds, answer, what = run(ranks, args.preload if preloaded else [], args.timeout)
            times[preloaded].append(seconds)
            answers[preloaded] = (answer, what)
    if program == "hpcc":
        problems = answers[False][0] + [f"with the preload: {p}" for p in answers[True][0]]
    else:
        problems = [] if answers[False][0] == answers[True][0] else ["the answers differ"]
        if not answers[False][0]:
            problems.append("no answer to compare")
    plain, loom = statistics.median(times[False]), statistics.median(times[True])
    return {"program": program, "ranks": ranks, "plain_s": plain, "preload_s": loom,
            "checked": answers[True][1], "problems": problems}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preload", required=True, help="the library to preload")
    ap.add_argument("-n", "--ranks", default="2,4")
    ap.add_argument("-R", "--rounds", type=int, default=1)
    ap.add_argument("--programs", default="hpcc,lammps,mpi4py")
    ap.add_argument("--min-bytes", help="LOOM_MPI_MIN_BYTES for the preloaded runs (0: every "
                    "call loom can run goes to loom; default: loom's model decides, docs/MPI.md)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one run may take")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = ap.parse_args()
    library = os.path.abspath(args.preload)
    if not os.path.exists(library):
        sys.exit(f"no preload library at {library}")
    args.preload = ["-x", f"LD_PRELOAD={library}"]
    if args.min_bytes is not None:
        args.preload += ["-x", f"LOOM_MPI_MIN_BYTES={args.min_bytes}"]
    rows, failed = [], False
    for program in args.programs.split(","):
        if not available(program):
            print(f"# {program}: not installed here, skipped")
            continue
        for ranks in (int(n) for n in args.ranks.split(",")):
            rows.append(compare(program, ranks, args))
    sep = " | " if args.markdown else "  "
    header = ["program", "ranks", "MPI alone (s)", "with loom (s)", "ratio", "answers"]
    if args.markdown:
        print("| " + sep.join(header) + " |\n|" + "---|" * len(header))
    else:
        print("# " + sep.join(header))
    for r in rows:
        verdict = "same, " + r["checked"] if not r["problems"] else "; ".join(r["problems"])
        failed |= bool(r["problems"])
        cells = [r["program"], str(r["ranks"]), f"{r['plain_s']:.2f}", f"{r['preload_s']:.2f}",
                 f"{r['plain_s'] / r['preload_s']:.2f}", verdict]
        print(("| " + sep.join(cells) + " |") if args.markdown else "  " + sep.join(cells))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
