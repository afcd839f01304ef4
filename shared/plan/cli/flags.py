"""The plan command lines' flag for each Request field, shared by the command lines
(shared.plan.cli.main, shared.plan.__main__: `KNOBS`, `add_knobs`), the atlas's renderer
(shared.plan.atlas.render, which writes the command that computes a cell into docs/atlas.csv
for the lookup to print) and the note a search near an atlas cell prints first
(shared.plan.cli.point_view.describe_nearby). Its own module: importing __main__ sets the JAX
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


# Each workload knob: its Request field -> (the flag's names, argparse's keywords). Both
# command lines add a workload's knobs from here: the sub-command one only those the workload
# reads (shared.plan.workloads.READS), the flat one all of them, refusing the rest.
KNOBS: dict[str, tuple[tuple[str, ...], dict]] = {
    "seq": (("--seq",), {"type": int, "default": 1024, "help": "sequence length"}),
    "prompt_len": (("--prompt-len",), {"type": int, "default": 256}),
    "steps": (
        ("--steps", "--completion-len"),
        {"type": int, "default": 1024, "help": "generation steps (grpo: the completion length)"},
    ),
    "cache_size": (
        ("--cache-size",),
        {"type": int, "help": "KV cache slots (default prompt+steps)"},
    ),
    "logits": (("--logits",), {"default": "full", "help": "full | topk"}),
    "k": (("--k",), {"type": int, "default": 128, "help": "--logits topk: k"}),
    "lora_rank": (("--lora-rank",), {"type": int, "default": 8}),
    "microbatches": (
        ("--microbatches",),
        {"type": int, "default": 1, "help": "accumulation steps"},
    ),
    "remat": (
        ("--remat",),
        {
            "default": "none",
            "help": "none | block | decoder (train: none | block | dots)",
        },
    ),
    "loss": (("--loss",), {"default": "chunked", "help": "chunked | full"}),
    "tunix": (
        ("--tunix-semantics",),
        {"default": "0.1.7", "help": "0.1.7 (donated KV cache) or 0.1.6 (not donated)"},
    ),
    "prompts_per_step": (
        ("--prompts-per-step",),
        {"type": int, "help": "default: the least multiple of the phases' micro-batches"},
    ),
    "num_generations": (
        ("--num-generations",),
        {"type": int, "default": 4, "help": "G, per prompt"},
    ),
    "num_iterations": (
        ("--num-iterations",),
        {"type": int, "default": 1, "help": "> 1: old-policy log-probs"},
    ),
    "rollout_micro": (("--rollout-micro",), {"type": int, "help": "sequences per Sampler call"}),
    "logps_micro": (("--logps-micro",), {"type": int, "help": "sequences per log-prob call"}),
    "train_micro": (("--train-micro",), {"type": int, "help": "sequences per update pass"}),
    "logps": (("--logps",), {"default": "tunix", "help": "log-prob phases: tunix | chunked"}),
    "beta": (("--beta",), {"type": float, "default": 0.08, "help": "KL weight (0: no reference)"}),
    "phases": (
        ("--phases",),
        {"help": "compile only these of rollout,logps,update"},
    ),
}


def add_knobs(group, fields) -> None:
    """Add the flag of each Request field in `fields` that is a workload knob to `group`."""
    for field in fields:
        if field in KNOBS:
            names, keywords = KNOBS[field]
            metavar = "N" if keywords.get("type") in (int, float) else "NAME"
            group.add_argument(
                *names, dest=_FIELD_FLAGS.get(field, field), metavar=metavar, **keywords
            )
