"""Engines from the user's own packages, found without importing any (cheap at import time):
which engine needs which package, the library's path inside it and the variable that names it
come from the extension's engine registry (``_cleave.engines()``), the one place engines are
declared. An explicit variable (``ORT_DYLIB_PATH``, ``CLEAVE_LITERT_LIB``, ...) always wins."""

from __future__ import annotations

import glob
import importlib.machinery
import os
import sys
from typing import Any, Dict, List, Optional

from ._errors import EngineError


def _libraries() -> List[Dict[str, Any]]:
    """[{names, variable, package, file, wheel}] for each engine that loads a wheel's library."""
    from . import _cleave

    out = []
    for e in _cleave.engines():
        if e.get("library"):
            out.append({"names": [e["name"], *e["aliases"]], **e["library"]})
    return out


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


def library_in_package(lib: Dict[str, Any]) -> Optional[str]:
    """The library `lib` describes, in its installed package, if any (the file's name is a
    prefix: versioned libraries)."""
    d = _package_dir(lib["package"])
    if d is None:
        return None
    found = sorted(f for f in glob.glob(os.path.join(d, lib["file"] + "*")) if os.path.isfile(f))
    return found[0] if found else None


def _library_of(engine: str) -> Optional[Dict[str, Any]]:
    # `openvino:GPU` is OpenVINO on one of its devices.
    name = engine.split(":", 1)[0]
    return next((lib for lib in _libraries() if name in lib["names"]), None)


def ort_library() -> Optional[str]:
    """libonnxruntime of the installed ``onnxruntime`` package, if any."""
    lib = _library_of("ort")
    return library_in_package(lib) if lib else None


def configure() -> None:
    """Points the extension's engines at this interpreter's packages (once, at import)."""
    # The Ray app and LiteRT's lookup run this interpreter, not whatever python3 is first.
    os.environ.setdefault("CLEAVE_PYTHON", sys.executable)
    for lib in _libraries():
        if lib["variable"] not in os.environ:
            found = library_in_package(lib)
            if found:
                os.environ[lib["variable"]] = found


def require(engine: str) -> None:
    """Raises :class:`EngineError` naming the pip install when `engine`'s package is missing."""
    lib = _library_of(engine)
    if lib is None:
        return
    explicit = os.environ.get(lib["variable"])
    if explicit and os.path.isfile(explicit):
        return
    if library_in_package(lib) is None:
        raise EngineError(
            f"engine '{engine}' needs the {lib['package']} package, which this Python lacks: pip install {lib['wheel']}"
        )
