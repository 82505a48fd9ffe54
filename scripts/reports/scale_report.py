#!/usr/bin/env python3
"""How `cleave partition` grows with the model: for each size, a generated model
(`cleave gen`) is partitioned with every part written, and each phase's wall time and the
process's peak resident memory are read from `--timings-json`. Prints one row per phase, one
column per size, and the growth from each size to the next (10x more nodes should cost at
most about 10x: a ratio far above it marks a phase that is not linear).

    python3 scripts/reports/scale_report.py [--sizes 10000,100000,1000000] [--cleave PATH]

The onnx package's own loader is timed on the largest model in the same run when it is
installed (`onnx.load`, wall and peak memory of a child process), as the reference the
issue set for reading a model.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# Growth above this, from one size to ten times it, is flagged.
LINEAR_LIMIT = 11.0
# Phases shorter than this at the larger size are too short to judge growth by.
MIN_JUDGED_S = 0.01


def find_cleave(given):
    if given:
        return given
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    for profile in ("release", "debug"):
        path = os.path.join(target, profile, "cleave")
        if os.path.exists(path):
            return path
    found = shutil.which("cleave")
    if found:
        return found
    sys.exit("scale_report: no cleave binary found; build it or pass --cleave PATH")


def run(cmd):
    """Runs cmd; returns its wall time. Exits with cleave's own message on failure."""
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"scale_report: {' '.join(cmd)} failed: {done.stderr.strip()}")
    return time.perf_counter() - start


def measure(cleave, nodes, work, devices, seed):
    model = os.path.join(work, f"g{nodes}.onnx")
    part = os.path.join(work, f"g{nodes}.part")
    run([cleave, "gen", "--nodes", str(nodes), "--devices", str(devices),
         "--seed", str(seed), "-o", model, "--rules", part])
    out = os.path.join(work, f"out{nodes}")
    timings = os.path.join(work, f"t{nodes}.json")
    run([cleave, "--quiet", "--timings-json", timings, "partition", model,
         "--rules", part, "-o", out])
    with open(timings) as f:
        report = json.load(f)
    files = len(os.listdir(out))
    shutil.rmtree(out)
    return model, report, files


def onnx_load(model):
    """Wall time and peak memory of onnx.load in a child process, or None."""
    code = ("import onnx, resource, sys, time; t = time.perf_counter(); "
            "onnx.load(sys.argv[1]); w = time.perf_counter() - t; "
            "print(w, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    done = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    wall, peak = done.stdout.split()
    return float(wall), int(peak)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000",
                    help="node counts, comma-separated, smallest first")
    ap.add_argument("--devices", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cleave", help="the cleave binary (default: target/release, then debug)")
    ap.add_argument("--workdir", help="where models and parts go (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or sizes != sorted(sizes) or sizes[0] <= 0:
        sys.exit("scale_report: --sizes must be positive and increasing")
    cleave = find_cleave(args.cleave)
    work = args.workdir or tempfile.mkdtemp(prefix="cleave-scale-")
    os.makedirs(work, exist_ok=True)

    runs = []
    for n in sizes:
        print(f"partitioning {n} nodes ...", file=sys.stderr)
        model, report, files = measure(cleave, n, work, args.devices, args.seed)
        runs.append({"nodes": n, "files": files, **report})
    reference = onnx_load(model)
    if not args.workdir:
        shutil.rmtree(work)

    if args.json:
        print(json.dumps({"runs": runs, "onnx_load": reference}, indent=1))
        return

    # Phases in the order of the largest run (they are the same in every run).
    order = [(p["depth"], p["name"]) for p in runs[-1]["phases"]]
    def wall(run, key):
        return sum(p["wall_s"] for p in run["phases"] if (p["depth"], p["name"]) == key)

    head = f"{'phase':<42}" + "".join(f"{n:>12}" for n in sizes)
    growth_head = "".join(f"{'x' + str(b // a) + ' growth':>14}" for a, b in zip(sizes, sizes[1:]))
    print(head + growth_head)
    flagged = []
    rows = [(" " * 2 * d + name, (d, name)) for d, name in order]
    rows.append(("whole command", None))
    for label, key in rows:
        walls = [r["whole_command"]["wall_s"] if key is None else wall(r, key) for r in runs]
        line = f"{label:<42}" + "".join(f"{w:>10.3f} s" for w in walls)
        for a, b in zip(walls, walls[1:]):
            if b < MIN_JUDGED_S or a <= 0:
                line += f"{'-':>14}"
                continue
            g = b / a
            mark = " !" if g > LINEAR_LIMIT else "  "
            if g > LINEAR_LIMIT:
                flagged.append(label.strip())
            line += f"{g:>12.1f}{mark}"
        print(line)
    peaks = [r["whole_command"]["peak_bytes"] or 0 for r in runs]
    print(f"{'peak resident memory':<42}" + "".join(f"{p / 1e6:>9.0f} MB" for p in peaks)
          + "".join(f"{b / a:>12.1f}  " if a else f"{'-':>14}" for a, b in zip(peaks, peaks[1:])))
    print(f"{'peak bytes per node':<42}" + "".join(f"{p / n:>12.0f}" for p, n in zip(peaks, sizes)))
    print(f"{'files written':<42}" + "".join(f"{r['files']:>12}" for r in runs))
    if reference:
        print(f"onnx.load of the {sizes[-1]}-node model: {reference[0]:.3f} s, "
              f"peak {reference[1] / 1e6:.0f} MB (python process)")
    if flagged:
        flagged = list(dict.fromkeys(flagged))
        print(f"grew more than {LINEAR_LIMIT:g}x for 10x the nodes: {', '.join(flagged)}")


if __name__ == "__main__":
    main()
