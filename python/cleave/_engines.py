"""Engines from the user's own packages: ONNX Runtime's library from the ``onnxruntime``
package, LiteRT's from ``ai_edge_litert``, found without importing either (cheap at import
time). An explicit ``ORT_DYLIB_PATH`` / ``CLEAVE_LITERT_LIB`` always wins."""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from typing import Optional

from ._errors import EngineError

# What each engine name needs, and the pip install that provides it.
_PACKAGES = {
    "onnxruntime": ("onnxruntime", "pip install onnxruntime"),
    "ort": ("onnxruntime", "pip install onnxruntime"),
    "litert": ("ai_edge_litert", "pip install ai-edge-litert"),
    "tflite": ("ai_edge_litert", "pip install ai-edge-litert"),
}


def _package_dir(name: str) -> Optional[str]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def ort_library() -> Optional[str]:
    """libonnxruntime of the installed ``onnxruntime`` package, if any."""
    d = _package_dir("onnxruntime")
    if d is None:
        return None
    found = sorted(glob.glob(os.path.join(d, "capi", "libonnxruntime.so*")))
    found += sorted(glob.glob(os.path.join(d, "capi", "libonnxruntime*.dylib")))
    found += sorted(glob.glob(os.path.join(d, "capi", "onnxruntime.dll")))
    return found[0] if found else None


def litert_library() -> Optional[str]:
    """libLiteRt of the installed ``ai_edge_litert`` package, if any."""
    d = _package_dir("ai_edge_litert")
    if d is None:
        return None
    lib = os.path.join(d, "libLiteRt.so")
    return lib if os.path.isfile(lib) else None


def configure() -> None:
    """Points the extension's engines at this interpreter's packages (once, at import)."""
    # The Ray app and LiteRT's lookup run this interpreter, not whatever python3 is first.
    os.environ.setdefault("CLEAVE_PYTHON", sys.executable)
    if "ORT_DYLIB_PATH" not in os.environ:
        lib = ort_library()
        if lib:
            os.environ["ORT_DYLIB_PATH"] = lib
    if "CLEAVE_LITERT_LIB" not in os.environ:
        lib = litert_library()
        if lib:
            os.environ["CLEAVE_LITERT_LIB"] = lib


def require(engine: str) -> None:
    """Raises :class:`EngineError` naming the pip install when `engine`'s package is missing."""
    need = _PACKAGES.get(engine)
    if need is None:
        return
    package, fix = need
    explicit = os.environ.get("ORT_DYLIB_PATH" if package == "onnxruntime" else "CLEAVE_LITERT_LIB")
    if explicit and os.path.isfile(explicit):
        return
    found = ort_library() if package == "onnxruntime" else litert_library()
    if found is None:
        raise EngineError(f"engine '{engine}' needs the {package} package, which this Python lacks: {fix}")
