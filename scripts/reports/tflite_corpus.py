"""The TFLite side of the corpus table: every TFLite model of the test data split at random
over 2 and 3 backends and checked by LiteRT alone (scripts/oracles/check_tflite_parts.py).

    python3 scripts/reports/tflite_corpus.py CLEAVE DEST [--only NAME]

Per model (DEST/tflite*, from scripts/testdata/tflite_models.py and scripts/testdata/tf_while_models.py), for 2
backends and for 3: a third of the operators pinned at random by [OPNAME] (seeded by the
model's name; half of a model's operators when it has 20 or fewer), `cleave partition`, then check_tflite_parts.py over five invokes, every
boundary tensor compared with LiteRT on the whole model. Models whose inputs have a dynamic
dim are split a second time with the input fixed (--shape) and --learn-dims, and the parts
must then allocate before any run (--prepared); the table gives how many parts could not
without. Prints one markdown row per model; exits 1 when any check fails.
"""
import argparse
import hashlib
import json
import pathlib
import random
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "oracles"))
import tflite_common as tc

FOLDERS = ("tflite", "tflite-quant", "tflite-stateful", "tflite-keras", "tflite-while")
BACKENDS = ("host", "dsp", "gpu")


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


def last_line(out):
    return (out.strip().splitlines() or ["no output"])[-1]


def nodes_of(cleave, model, tmp):
    part = tmp / "all.part"
    part.write_text("[partition]\nbackends=host\ndefault=host\ncomply=opcode\n")
    code, out = run([cleave, "query", model, "--json", "--rules", part])
    if code:
        raise RuntimeError(last_line(out))
    start = out.index("{")
    # Nodes that compute constants from weights (DENSIFY, DEQUANTIZE of float16 weights) are
    # copied into the parts that read them; the rules pin the others, as the tests do.
    return [n for n in json.loads(out[start:])["nodes"] if n["device"]]


def fixed_shapes(model):
    """--shape flags for inputs with a dynamic dim (set to 1), or [] when all are static."""
    interp = tc.interpreter(model)
    flags = []
    for d in interp.get_input_details():
        sig = list(d["shape_signature"])
        if any(x < 0 for x in sig):
            dims = ",".join(str(1 if x < 0 else x) for x in sig)
            flags += ["--shape", f"{d['name']}={dims}"]
    return flags


def unprepared(conn):
    work = conn.parent
    count = 0
    for p in json.loads(conn.read_text())["parts"]:
        try:
            tc.interpreter(work / p["file"]).allocate_tensors()
        except RuntimeError:
            count += 1
    return count


def split(cleave, model, nodes, n, tmp, extra=()):
    rng = random.Random(int(hashlib.sha256(f"{model.name}-{n}".encode()).hexdigest()[:8], 16))
    backends = BACKENDS[:n]
    # A third of the operators; half of a loop model's few.
    share = 1 / 3 if len(nodes) > 20 else 1 / 2
    rules = [f"{x['name']}={rng.choice(backends)}" for x in nodes if rng.random() < share]
    part = tmp / f"{model.stem}-{n}.part"
    part.write_text(f"[partition]\nbackends={','.join(backends)}\ndefault=host\ncomply=opname\n\n"
                    "[OPNAME]\n" + "\n".join(rules) + "\n")
    work = tmp / f"{model.stem}-{n}-{len(extra)}"
    code, out = run([cleave, "partition", model, "--rules", part, "-o", work, *extra])
    if code:
        raise RuntimeError(f"partition: {last_line(out)}")
    return work / f"{model.stem}.conn.json"


def check(conn, model, flags):
    code, out = run([sys.executable, HERE.parent / "oracles" / "check_tflite_parts.py", conn, model, "--invokes", "5", *flags])
    if code:
        raise RuntimeError(last_line(out))
    return last_line(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cleave")
    ap.add_argument("dest", type=pathlib.Path)
    ap.add_argument("--only")
    args = ap.parse_args()
    models = sorted(p for f in FOLDERS for p in (args.dest / f).glob("*.tflite"))
    if args.only:
        models = [m for m in models if args.only in m.name]
    print("| model | folder | operators | 2 backends | 3 backends | dynamic dims: parts not allocatable without / with --learn-dims |")
    print("|---|---|---|---|---|---|")
    failed = 0
    for model in models:
        with tempfile.TemporaryDirectory() as t:
            tmp = pathlib.Path(t)
            cells = []
            nodes = []
            try:
                nodes = nodes_of(args.cleave, model, tmp)
                shapes = fixed_shapes(model)
                learned = []
                for n in (2, 3):
                    conn = split(args.cleave, model, nodes, n, tmp)
                    parts = len(json.loads(conn.read_text())["parts"])
                    check(conn, model, shapes)
                    cells.append(f"{parts} parts, match")
                    if shapes:
                        before = unprepared(conn)
                        conn = split(args.cleave, model, nodes, n, tmp, (*shapes, "--learn-dims"))
                        check(conn, model, [*shapes, "--prepared"])
                        learned.append(f"{before} / {unprepared(conn)} of {parts}")
                cells.append("; ".join(learned) if learned else "static")
            except RuntimeError as e:
                failed += 1
                cells += ["FAILED"] * (3 - len(cells)) + [str(e)]
            print(f"| {model.stem} | {model.parent.name} | {len(nodes)} | " + " | ".join(cells) + " |",
                  flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
