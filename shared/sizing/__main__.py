"""python -m shared.sizing: see shared.sizing.cli."""

from shared.errors import run_cli
from shared.sizing.cli import main

run_cli(main)
