"""One way to report bad input: a single actionable line and exit status 2.

Functions raise `BadInput` with a message that says what was wrong and what is valid;
command lines wrap their `main` in `run_cli`, so users never see a traceback from deep
inside JAX for a misspelled preset or target.
"""

import os
import sys
from collections.abc import Callable, Iterable


class BadInput(ValueError):
    """A user-facing input error whose message is one actionable line."""


def choose(kind: str, name: str, valid: Iterable[str]) -> str:
    """Return `name` if it is one of `valid`, else raise BadInput naming the valid ones."""
    valid = list(valid)
    if name not in valid:
        raise BadInput(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")
    return name


def positive(**values: float | None) -> None:
    """BadInput naming the first of `values` that is zero or negative (None means not given).
    Lower-case names are shown as command-line flags (`cache_len` -> cache-len), upper-case
    ones as a notebook's parameters (PROMPT_LEN)."""
    for name, value in values.items():
        if value is not None and not value > 0:
            shown = name if name.isupper() else name.replace("_", "-")  # PARAM, or --flag's
            raise BadInput(f"{shown} must be positive, got {value}")


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run a command-line `main`, turning BadInput into one line on stderr and exit 2, and a
    reader that stopped reading (`... lookup M T R | head -1`) into a quiet exit 1, as Python's
    documentation advises: its output is pointed at /dev/null first, so the flush at exit
    does not raise again."""
    try:
        code = main(argv)
    except BadInput as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    sys.exit(code or 0)
