"""``python -m cleave``: the ``cleave`` command."""

from ._cli import main

main()
