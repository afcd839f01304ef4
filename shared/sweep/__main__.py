"""`python -m shared.sweep`: run a sweep config's trials (see shared.sweep.runner)."""

from shared.errors import run_cli
from shared.sweep.runner import main

run_cli(main)
