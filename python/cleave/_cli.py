"""The ``cleave`` console command: the same command line as the Rust binary, run in process
through the extension module."""

from __future__ import annotations

import signal
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    from . import _engines
    from ._cleave import cli_main

    _engines.configure()
    # Behave as the binary does: Ctrl-C stops the command, a closed pipe ends it quietly
    # (Python would otherwise keep both signals from reaching the native code).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    code = cli_main(["cleave", *args])
    sys.exit(code)
