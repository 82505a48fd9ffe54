"""The partition as served: a conn.json read and checked, what each part's replica is built from,
and what the ingress knows of it."""

import hashlib
import json
import os

from .actors import default_threads, per_backend_value
from .runtime import extension

INLINE_MAX_BYTES = 64 << 20


def served_formats():
    """The part formats some engine of cleave's registry runs; None where this Python has no
    cleave package (``export`` writes files only; the nodes that run the parts check)."""
    try:
        engines = extension().engines()
    except RuntimeError:
        return None
    return sorted({f for e in engines for f in e["formats"]})


class Partition:
    """A conn.json read, its paths made absolute."""

    def __init__(self, conn_path):
        self.path = os.path.abspath(conn_path)
        self.dir = os.path.dirname(self.path)
        with open(self.path, encoding="utf-8") as f:
            raw = json.load(f)
        self.raw = raw
        src = raw.get("source") or {}
        self.source_file = os.path.normpath(os.path.join(self.dir, src["file"])) if src.get("file") else None
        self.inputs = list(src.get("inputs") or [])
        self.outputs = list(src.get("outputs") or [])
        self.parts = []
        seen = set(self.inputs)
        for i, p in enumerate(raw.get("parts") or []):
            missing = [t for t in p["inputs"] if t not in seen]
            if missing:
                raise ValueError(
                    f"{self.path}: part {i + 1} reads {missing[0]!r}, which neither a graph input nor an earlier "
                    "part gives"
                )
            seen.update(p["outputs"])
            backend = p.get("backend") or "cpu"
            fmt = part_format(p)
            formats = served_formats()
            if formats is not None and fmt not in formats:
                raise ValueError(
                    f"{self.path}: part {i + 1} ({p['file']}) is a {fmt or 'unknown-format'} part, and no engine "
                    f"here serves it (cleave's engines run {', '.join(formats)})"
                )
            self.parts.append(
                {
                    "index": i + 1,
                    "file": os.path.join(self.dir, p["file"]),
                    "inputs": list(p["inputs"]),
                    "outputs": list(p["outputs"]),
                    "backend": backend,
                    "deployment": f"part{i + 1}_{_safe(backend)}",
                    # What conn.json records the part is for (`openvino:CPU` for `ov-CPU`).
                    "engine": p.get("engine"),
                    "format": fmt,
                }
            )
        if not self.parts:
            raise ValueError(f"{self.path}: lists no parts")
        if not self.inputs:
            self.inputs = list(self.parts[0]["inputs"])
        if not self.outputs:
            self.outputs = list(self.parts[-1]["outputs"])
        bad = [t for t in self.outputs if t not in seen]
        if bad:
            raise ValueError(f"{self.path}: graph output {bad[0]!r} is produced by no part")

    @property
    def stem(self):
        name = os.path.basename(self.path)
        return name[: -len(".conn.json")] if name.endswith(".conn.json") else os.path.splitext(name)[0]

    def digest(self, settings=None):
        """Identifies the partition and how it is deployed (`settings`), so a running
        application can be told apart from another."""
        h = hashlib.sha256()
        h.update(json.dumps([self.raw.get("parts"), settings], sort_keys=True).encode())
        for p in self.parts:
            with open(p["file"], "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        return h.hexdigest()[:16]


def settings(resources, replicas, threads, data_plane, listen):
    """What, besides the partition, makes one deployment of it differ from another."""
    return {
        "resources": resources or {},
        "replicas": replicas or {},
        "threads": threads or {},
        "data_plane": data_plane,
        "ingress_listen": listen,
    }


def _safe(name):
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


def part_format(record):
    """The format of a conn.json part: what the writer recorded, else its file's extension."""
    fmt = record.get("format")
    if fmt:
        return str(fmt).lower()
    return os.path.splitext(record["file"])[1].lower().lstrip(".")


def part_specs(partition, opts, threads=None, replicas=None):
    """What each part's replica is built from: its conn.json record, its thread count (0: its
    share of its node's cores), and `share`, how many replicas of parts the deployment runs,
    which divide a node's cores where no count is given."""
    share = sum(per_backend_value(replicas, p["backend"], 1) for p in partition.parts)
    specs = []
    for p in partition.parts:
        spec = {k: p[k] for k in ("index", "file", "inputs", "outputs", "backend", "deployment", "engine", "format")}
        spec["threads"] = per_backend_value(threads, p["backend"], default_threads(opts[p["deployment"]]))
        spec["share"] = share
        specs.append(spec)
    return specs


def ingress_meta(partition, specs, name, digest):
    """What the ingress knows of the partition: its graph inputs and outputs, and the tensors
    each part reads and gives."""
    return {
        "name": name,
        "digest": digest,
        "inputs": partition.inputs,
        "outputs": partition.outputs,
        "parts": [{k: s[k] for k in ("inputs", "outputs", "backend", "deployment")} for s in specs],
    }
