"""Engines from the user's own packages: ONNX Runtime's library from the ``onnxruntime``
package, LiteRT's from ``ai_edge_litert``, OpenVINO's C library from ``openvino``, onert's
from ``onert``, found without importing any (cheap at import time). An explicit
``ORT_DYLIB_PATH`` / ``CLEAVE_LITERT_LIB`` / ``OPENVINO_LIB`` / ``CLEAVE_ONERT_LIB`` always
wins."""

from __future__ import annotations

import glob
import importlib.machinery
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
    "openvino": ("openvino", "pip install openvino"),
    "onert": ("onert", "pip install onert"),
    "nnfw": ("onert", "pip install onert"),
}

# The variable that names each package's library, and how to find it in the package.
_LIBRARY_VARIABLE = {
    "onnxruntime": "ORT_DYLIB_PATH",
    "ai_edge_litert": "CLEAVE_LITERT_LIB",
    "openvino": "OPENVINO_LIB",
    "onert": "CLEAVE_ONERT_LIB",
}


def _package_dir(name: str) -> Optional[str]:
    # Installed packages only: a folder named like the package in the working folder (on
    # sys.path as '' or a relative entry) must not hand cleave a library to load.
    try:
        here: Optional[str] = os.path.realpath(os.getcwd())
    except OSError:  # a working folder deleted meanwhile: nothing can be found in it
        here = None
    installed = [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, installed)
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


def openvino_library() -> Optional[str]:
    """libopenvino_c of the installed ``openvino`` package, if any."""
    d = _package_dir("openvino")
    if d is None:
        return None
    found = sorted(glob.glob(os.path.join(d, "libs", "libopenvino_c.so*")))
    return found[0] if found else None


def onert_library() -> Optional[str]:
    """libonert of the installed ``onert`` package, if any."""
    d = _package_dir("onert")
    if d is None:
        return None
    lib = os.path.join(d, "native", "libonert.so")
    return lib if os.path.isfile(lib) else None


_FINDERS = {
    "onnxruntime": ort_library,
    "ai_edge_litert": litert_library,
    "openvino": openvino_library,
    "onert": onert_library,
}


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
    if "OPENVINO_LIB" not in os.environ:
        lib = openvino_library()
        if lib:
            os.environ["OPENVINO_LIB"] = lib
    if "CLEAVE_ONERT_LIB" not in os.environ:
        lib = onert_library()
        if lib:
            os.environ["CLEAVE_ONERT_LIB"] = lib


def require(engine: str) -> None:
    """Raises :class:`EngineError` naming the pip install when `engine`'s package is missing."""
    # `openvino:GPU` is OpenVINO on one of its devices.
    need = _PACKAGES.get(engine.split(":", 1)[0])
    if need is None:
        return
    package, fix = need
    explicit = os.environ.get(_LIBRARY_VARIABLE[package])
    if explicit and os.path.isfile(explicit):
        return
    found = _FINDERS[package]()
    if found is None:
        raise EngineError(f"engine '{engine}' needs the {package} package, which this Python lacks: {fix}")
