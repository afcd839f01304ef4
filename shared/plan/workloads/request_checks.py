"""The checks a plan request's fields pass before anything is built or compiled: one line
(BadInput) for a value no workload can mean, where it would otherwise end in a JAX traceback
from deep inside a model or silently in a verdict nobody asked for.

Why a module of its own: the verdict (shared.plan.verdict), the buffer-assignment probes
(shared.plan.compiler.assigned) and the compile timings (shared.plan.compiler.timing) each check a
request before
they build its workload, and the verdict's module is long enough."""

from __future__ import annotations

import dataclasses
from importlib.metadata import version

from shared import models
from shared.errors import BadInput
from shared.hardware import parse_target
from shared.models.expert_routing import runs_megablox
from shared.plan.workloads import CUT_TO_LAYERS, READS

# Request fields that count something: a workload reading one needs it a positive integer.
COUNTS = (
    "batch",
    "seq",
    "prompt_len",
    "steps",
    "cache_size",
    "k",
    "lora_rank",
    "microbatches",
    "prompts_per_step",
    "num_generations",
    "num_iterations",
    "rollout_micro",
    "logps_micro",
    "train_micro",
)


def check_request(request) -> None:
    """BadInput in one line for a count the workload reads that is not a positive integer
    (`--seq 0` would otherwise end in a JAX traceback from deep inside a model) or a negative
    KL weight; None means "not given" where a field allows it."""
    reads = READS.get(request.workload) or [f.name for f in dataclasses.fields(request)]
    for name in COUNTS:
        value = getattr(request, name)
        if name in reads and value is not None and (type(value) is not int or value < 1):
            raise BadInput(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if request.layers is not None and request.workload not in CUT_TO_LAYERS:
        raise BadInput(
            f"the {request.workload} workload cannot be cut to {request.layers} layers "
            f"(those that can: {', '.join(CUT_TO_LAYERS)})"
        )
    if "beta" in reads and request.beta < 0:
        raise BadInput(f"--beta (the KL weight) must be zero or positive, got {request.beta}")
    if request.builds_tunix_model:  # the others (a reader's own step) name no preset
        check_runs_there(request.model, request.target)


def check_runs_there(model: str, target: str) -> None:
    """BadInput for a model tunix cannot run on the target's platform: a Qwen 3 mixture of
    experts on a GPU, whose layer runs megablox, a Pallas TPU kernel, under a mesh entered as
    tunix's trainers enter it (`with mesh:`; shared.models.expert_routing); the compile would
    end in "Cannot lower pallas_call". Its dense fallback, every expert on every token, runs
    only without such a mesh: not the program tunix's trainers run."""
    if not parse_target(target).chip.is_tpu and runs_megablox(models.model_config(model)):
        raise BadInput(
            f"{model} does not run on a GPU ({target}) in tunix {version('google-tunix')}: its "
            "mixture-of-experts layer runs megablox, a Pallas TPU kernel, under the mesh tunix's "
            "trainers enter; plan it for a TPU slice (v5p-8, v6e-8)"
        )
