"""Tiling under a small device memory: each model optimized for a myriad whose tile budget is
BYTES (the built-in profile with `tile_bytes` replaced), then proven with check_optimized.py
(onnxruntime on both models, every shared tensor). One row per model: tiled layers, tiles,
the largest tile's memory against the budget, layers left whole, parity.

    python3 scripts/reports/tile_report.py CLEAVE BYTES MODEL[:NAME=D,D,...] ... [--json]
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PROFILE = HERE.parent.parent / "crates/device/src/profiles/myriad.toml"


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    as_json = "--json" in sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    cleave, budget, models = args[0], int(args[1]), args[2:]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        profile = tmp / "myriad.toml"
        text = PROFILE.read_text()
        profile.write_text(re.sub(r"(?m)^tile_bytes = \d+$", f"tile_bytes = {budget}", text))
        for spec in models:
            path, _, shape = spec.partition(":")
            out = tmp / (pathlib.Path(path).stem + ".opt.onnx")
            cmd = [cleave, "optimize", path, "--devices", "myriad,cpu", "--profile", str(profile), "-o", str(out), "--json"]
            if shape:
                cmd += ["--shape", shape]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                rows.append({"model": pathlib.Path(path).name, "error": p.stderr.strip()[-300:]})
                continue
            report = json.loads(p.stdout)
            tiled = [n for n in report.get("notes", []) if re.match(r"tile: .*, the largest needing", n)]
            whole = [n for n in report.get("notes", []) if n.startswith("tile: ") and n not in tiled]
            tiles = [int(re.search(r": (\d+) tiles ", n).group(1)) for n in tiled]
            largest = max((int(re.search(r"needing (\d+) of", n).group(1)) for n in tiled), default=0)
            schemes = sorted({re.search(r" tiles over (.*?) \(", n).group(1) for n in tiled})
            c = subprocess.run([sys.executable, str(HERE.parent / "oracles" / "check_optimized.py"), path, str(out)], capture_output=True, text=True)
            rows.append({
                "model": pathlib.Path(path).name, "tiled_layers": len(tiled), "tiles": sum(tiles),
                "largest_tile_bytes": largest, "budget": budget, "left_whole": len(whole),
                "schemes": schemes, "nodes_after": report.get("nodes_after"),
                "parity": (c.stdout.strip().splitlines() or [c.stderr.strip()])[-1],
                "ok": c.returncode == 0,
            })
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'model':<26} {'tiled':>5} {'tiles':>6} {'largest B':>10} {'budget B':>9} {'whole':>5}  parity")
        for r in rows:
            if "error" in r:
                print(f"{r['model']:<26} error: {r['error']}")
                continue
            print(f"{r['model']:<26} {r['tiled_layers']:>5} {r['tiles']:>6} {r['largest_tile_bytes']:>10} {r['budget']:>9} {r['left_whole']:>5}  {r['parity']}")
    sys.exit(0 if all(r.get("ok") for r in rows) else 1)


if __name__ == "__main__":
    main()
