"""The plan command line's flag for each Request field, shared by the command line
(shared.plan.__main__, which refuses a flag its workload does not read), the atlas's renderer
(shared.plan.atlas.render, which writes the command that computes a cell into docs/atlas.csv
for the lookup to print) and the note a search near an atlas cell prints first
(shared.plan.point_view.describe_nearby). Its own module: importing __main__ sets the JAX
platform, which a renderer must not."""

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
