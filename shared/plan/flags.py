"""The plan command line's flag for each Request field, shared by the command line
(shared.plan.__main__, which refuses a flag its workload does not read) and the atlas lookup
(shared.plan.lookup, which prints the command that computes a cell). Imports nothing heavy:
the lookup answers without jax."""

from __future__ import annotations

# A Request field whose flag is named otherwise on the command line: argparse's dest -> field.
FLAG_FIELDS = {"tunix_semantics": "tunix"}
_FIELD_FLAGS = {field: dest for dest, field in FLAG_FIELDS.items()}


def flag_for(field: str) -> str:
    """The command line's flag that sets a Request field: `lora_rank` -> `--lora-rank`."""
    return "--" + _FIELD_FLAGS.get(field, field).replace("_", "-")


def plan_command(workload: str, model: str, target: str, settings: dict) -> str:
    """`python -m shared.plan` searching the largest batch of one request: its workload,
    model and target, and each of `settings` (Request fields; None: left at its default)."""
    flags = [f"{flag_for(k)} {v}" for k, v in settings.items() if v is not None]
    return " ".join(
        ["python -m shared.plan", workload, "--model", model, "--target", target, "--max-batch"]
        + flags
    )
