"""Prepare pretraining data: `python data/prepare.py --corpus shakespeare --vocab-size 4096`.

The same command line as `python -m shared.data prepare ...` (see data/README.md); this file
only makes it runnable from data/ as well.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.data import main  # noqa: E402
from shared.errors import run_cli  # noqa: E402

if __name__ == "__main__":
    run_cli(main, ["prepare", *sys.argv[1:]])
