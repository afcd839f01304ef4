"""Prepare pretraining data: `python data/prepare.py --corpus shakespeare --vocab-size 4096`.

The same command line as `python -m shared.data prepare ...` (see data/README.md); this file
only makes it runnable from data/ as well. The project is installed (`make setup`), so
`shared` imports from anywhere.
"""

import sys

from shared.data.__main__ import main
from shared.errors import run_cli

if __name__ == "__main__":
    run_cli(main, ["prepare", *sys.argv[1:]])
