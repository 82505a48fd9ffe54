"""cleave's exceptions: one base, :class:`Error`, and a subclass per kind of failure."""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["Error", "InvalidModelError", "ArgumentError", "EngineError"]


class Error(Exception):
    """Anything cleave refuses or fails at. ``str(e)`` is one line: the file, then the cause.

    Attributes:
        path: the file the error concerns, or None.
        cause: the cause alone, without the file.
    """

    def __init__(self, cause: str, path: Optional[str] = None) -> None:
        self.path = path
        self.cause = cause
        super().__init__(f"{path}: {cause}" if path else cause)


class InvalidModelError(Error):
    """The model is invalid or unreadable (truncated, bad attributes, a cycle...).

    Attributes:
        node: the node named in the cause, when there is one.
        op: that node's operator type, when the cause names it.
    """

    def __init__(self, cause: str, path: Optional[str] = None) -> None:
        super().__init__(cause, path)
        self.node, self.op = _node_and_op(cause)


class ArgumentError(Error):
    """A request is wrong: a rule, cost or memory argument, a device list, a rule file."""


class EngineError(Error):
    """An engine could not be loaded (its package is not installed) or failed on a part."""


# "node 'conv1' (Conv)" or "node conv1 (Conv)", as cleave's messages name nodes.
_NODE = re.compile(r"\bnode '([^']*)'(?: \(([^)]*)\))?|\bnode ([^\s',;:()]+)(?: \(([^)]*)\))?")


def _node_and_op(cause: str) -> "tuple[Optional[str], Optional[str]]":
    m = _NODE.search(cause)
    if not m:
        return None, None
    node = m.group(1) if m.group(1) is not None else m.group(3)
    op = m.group(2) if m.group(1) is not None else m.group(4)
    return node, op


def _from_rust(kind: str, path: Optional[str], message: str) -> Error:
    """The exception the extension module raises for a failure of `kind`."""
    cls = {"model": InvalidModelError, "argument": ArgumentError, "engine": EngineError}.get(kind, Error)
    return cls(message, path)
