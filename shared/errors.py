"""One way to report bad input: a single actionable line and exit status 2.

Functions raise `BadInput` with a message that says what was wrong and what is valid;
command lines wrap their `main` in `run_cli`, so users never see a traceback from deep
inside JAX for a misspelled preset or target.
"""

import difflib
import os
import sys
from collections.abc import Callable, Iterable


class BadInput(ValueError):
    """A user-facing input error whose message is one actionable line."""


def choose(kind: str, name: str, valid: Iterable[str]) -> str:
    """The one of `valid` that `name` names, ignoring case (`Gemma3-4B` is gemma3-4b); else
    BadInput with the closest names first (`gema3-4b`: did you mean 'gemma3-4b'?), then every
    valid one."""
    valid = list(valid)
    if name in valid:
        return name
    folded = {v.lower(): v for v in valid}
    if name.lower() in folded:
        return folded[name.lower()]
    raise BadInput(f"unknown {kind} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the names of `valid` closest to `name` (difflib's ratio, case
    ignored), or "" where none is close."""
    folded = {v.lower(): v for v in valid}
    close = difflib.get_close_matches(name.lower(), list(folded), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(folded[c]) for c in close)}?)" if close else ""


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
