#!/usr/bin/env python3
"""The at-scale table of docs/SCALE.md: simulated allreduce busbw per algorithm on the
dgx-rail corpus models, with the fastest marked and the tuner's choice beside it.

Runs loom-sim (docs/SIMULATOR.md) and turns its output into Markdown:

    perf/scale_table.py BUILD_DIR [MODEL...] > tables.md   (default: every model below)

The 1024-node model (8192 ranks) is simulated without the tuner. The ring-like algorithms
(ring, hierarchical, torus) have tens of millions of messages there, hours of full simulation:
at the sizes whose chunks divide evenly among the ranks (256 KiB and up) the simulator's fast
path (loom-sim --fast, docs/SIMULATOR.md) predicts them from one host's ranks, and their cells
carry a dagger; below, their cells say "not simulated" with the message count.
"""
import subprocess
import sys

ALGOS = ["ring", "tree", "rhd", "rd", "hierarchical", "torus"]
RING_LIKE = ["ring", "hierarchical", "torus"]
GPUS_PER_NODE = 8

# (model, --topo, [(size sweep, algorithms)], ask the tuner). At 8192 ranks rhd takes minutes
# per size above 256 KiB (docs/SIMULATOR.md "Scale"), so it is run up to 256 KiB only.
# A sweep is (sizes, algorithms, fast path).
MODELS = [
    ("dgx-rail-16", "topology/models/dgx-rail-16.json", [("8:1G:8", ALGOS, False)], True),
    ("dgx-rail-128", "topology/models/dgx-rail-128.json",
     [("8:8M:32", ALGOS, False), ("1G:1G:2", ALGOS, False)], True),
    ("dgx-rail-1024", "dgx-rail-1024",
     [("8:256K:32", ["tree", "rhd", "rd"], False), ("8M:8M:2", ["tree", "rd"], False),
      ("1G:1G:2", ["tree", "rd"], False), ("256K:256K:2", RING_LIKE, True),
      ("8M:8M:2", RING_LIKE, True), ("1G:1G:2", RING_LIKE, True)], False),
]


def messages(algo, nodes):
    """Plan messages of an allreduce over `nodes` dgx-rail nodes: a ring has 2(N-1) per rank;
    hierarchical and torus have 2(R-1) within the node and 2(H-1) across nodes per rank."""
    n = nodes * GPUS_PER_NODE
    if algo == "ring":
        return 2 * n * (n - 1)
    return n * (2 * (GPUS_PER_NODE - 1) + 2 * (nodes - 1))


def run_sim(build, topo, sizes, algos, tuner, fast):
    cmd = [f"{build}/loom-sim", "--topo", topo, "--sizes", sizes, "--algos", ",".join(algos)]
    if not tuner:
        cmd.append("--no-tuner")
    if fast:
        cmd.append("--fast")
    print(f"<!-- {' '.join(cmd[1:])} -->", flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}  # size -> {algo: (time_us, busbw)}, and "tuner": (description, time_us)
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        fields = line.split()
        size = int(fields[0])
        entry = rows.setdefault(size, {})
        if fields[1] == "#":  # "SIZE # the tuner's choice: ALGO params, T us"
            choice = line.split("choice: ", 1)[1]
            desc, time_us = choice.rsplit(", ", 1)
            entry["tuner"] = (desc, float(time_us.split()[0]))
            continue
        algo = fields[2]
        if "skipped:" in fields:
            entry[algo] = None
            continue
        numbers = [f for f in fields[3:] if f not in ("*", "t", "*t")]
        entry[algo] = float(numbers[0])  # µs; busbw is recomputed from it (loom-sim rounds)
        if fast:
            if numbers[4] != "fast":
                sys.exit(f"loom-sim --fast fell back to the full simulation: {line}")
            entry.setdefault("fast", set()).add(algo)
    return rows


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def busbw(size, time_us, nranks):
    """nccl-tests' allreduce busbw, GB/s, to three significant digits."""
    return f"{size / (time_us * 1e-6) / 1e9 * 2 * (nranks - 1) / nranks:.3g}"


def table(name, nodes, rows, tuner):
    nranks = nodes * GPUS_PER_NODE
    header = ["size"] + ALGOS + (["tuner's choice (busbw)", "tuner = fastest?"] if tuner else [])
    print(f"\n### {name}: {nodes} nodes, {nranks} ranks\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---:" if i == 0 else "---" for i in range(len(header))) + "|")
    for size in sorted(rows):
        entry = rows[size]
        ran = {a: v for a, v in entry.items() if a in ALGOS and v is not None}
        best_time = min(ran.values()) if ran else 0
        # Ties (hierarchical and torus build the same plan when the torus is nodes × GPUs).
        best = [a for a in ran if ran[a] <= best_time * (1 + 1e-4)]
        cells = [human(size)]
        for algo in ALGOS:
            if algo not in entry and algo in RING_LIKE:
                cells.append(f"not simulated: {messages(algo, nodes) / 1e6:.0f} M messages")
            elif algo not in entry:
                cells.append("not simulated: minutes")
            elif entry[algo] is None:
                cells.append("refused")
            else:
                bw = busbw(size, entry[algo], nranks)
                if algo in entry.get("fast", ()):
                    bw += " †"
                cells.append(f"**{bw}** *" if algo in best else bw)
        if tuner and "tuner" in entry:
            desc, time_us = entry["tuner"]
            cells.append(f"{desc} ({busbw(size, time_us, nranks)})")
            if desc.split()[0] in best:
                cells.append("yes")
            elif time_us < best_time * (1 - 1e-4):
                cells.append("yes (faster with other lanes/shape)")
            else:
                cells.append("NO")
        print("| " + " | ".join(cells) + " |")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    only = sys.argv[2:]
    print("Busbw in GB/s (nccl-tests' definition) of each allreduce algorithm at one lane, "
          "the fastest in bold with `*`; the tuner's choice is over lanes 1, 2, 4 and torus "
          "shapes too.")
    for name, topo, sweeps, full in MODELS:
        if only and name not in only:
            continue
        nodes = int(name.rsplit("-", 1)[1])
        rows = {}
        for sizes, algos, fast in sweeps:
            for size, entry in run_sim(build, topo, sizes, algos, full, fast).items():
                fastCells = rows.get(size, {}).get("fast", set()) | entry.pop("fast", set())
                rows.setdefault(size, {}).update(entry)
                if fastCells:
                    rows[size]["fast"] = fastCells
        table(name, nodes, rows, full)


if __name__ == "__main__":
    main()
