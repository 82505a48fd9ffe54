"""cleave's exceptions: one base, :class:`Error`, and a subclass per kind of failure.

The kind comes from the Rust library's typed error, never from reading its message.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

__all__ = [
    "Error",
    "InvalidModelError",
    "UnsupportedError",
    "ArgumentError",
    "EngineError",
    "FileError",
    "InternalError",
    "LimitError",
]


class Error(Exception):
    """Anything cleave refuses or fails at. ``str(e)`` is one line: the file, then the cause.

    Attributes:
        path: the file the error concerns, or None.
        cause: the cause alone, without the file.
        node: the node at fault, when there is one (invalid and unsupported models).
        op: that node's operator type.
    """

    def __init__(
        self, cause: str, path: Optional[str] = None, node: Optional[str] = None, op: Optional[str] = None
    ) -> None:
        self.path = path
        self.cause = cause
        self.node = node
        self.op = op
        super().__init__(f"{path}: {cause}" if path else cause)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        # Whole across processes (a Ray actor's error reaching the ingress): by default
        # pickle rebuilds an exception from its message alone.
        return (type(self), (self.cause, self.path, self.node, self.op))


class InvalidModelError(Error):
    """The model is not a valid model of its format: truncated, bad attributes, a cycle..."""


class UnsupportedError(Error):
    """A valid model that asks for what cleave or the chosen devices do not do, such as an
    operator none of the devices runs."""


class ArgumentError(Error):
    """A request is wrong: a rule, cost or memory argument, a device list, a rule file."""


class EngineError(Error):
    """An engine could not be loaded (its package is not installed) or failed on a part."""


class FileError(Error, OSError):
    """A file or folder could not be read or written."""


class LimitError(Error):
    """A served stage holds all it may: ``status`` 429 (too many sequences or cache bytes: try
    again when one ends) or 413 (the sequence would outgrow the stage's context)."""

    def __init__(self, cause: str, status: int) -> None:
        self.status = status
        super().__init__(cause)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (type(self), (self.cause, self.status))


class InternalError(Error):
    """cleave broke one of its own invariants: a bug, please report it."""


_KINDS = {
    "model": InvalidModelError,
    "unsupported": UnsupportedError,
    "argument": ArgumentError,
    "engine": EngineError,
    "io": FileError,
    "internal": InternalError,
}


def _from_rust(
    kind: str, path: Optional[str], message: str, node: Optional[str] = None, op: Optional[str] = None
) -> Error:
    """The exception the extension module raises for a failure of `kind`."""
    return _KINDS.get(kind, Error)(message, path, node, op)
