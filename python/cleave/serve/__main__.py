"""``python -m cleave.serve``; or ``python FOLDER`` for the package as the cleave binary writes
it out (``ray_app``): run as a folder, it has no parent package, so it imports itself by its
folder's name first."""

import importlib
import os
import sys

if __package__:
    from .cli import main
else:
    folder = os.path.dirname(os.path.abspath(__file__))
    # Its parent holds the package (the folder itself may or may not be on sys.path).
    sys.path.insert(0, os.path.dirname(folder))
    main = importlib.import_module(os.path.basename(folder) + ".cli").main

if __name__ == "__main__":
    main()
