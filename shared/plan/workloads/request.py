"""A plan request: everything that decides what gets compiled, and the plan cache's key.

It lives beside the workloads (which read its fields) rather than with the verdict, so that
the arithmetic modules that take one (the matmul bound, the request checks) need not import
the compiler stack the verdict runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from shared.models import hf_config
from shared.plan.compiler.cache_entries import compiler_versions
from shared.plan.compiler.sources import verdict_sources_digest
from shared.plan.workloads import COMMON, READS, TUNIX_MODEL

OWN_PREFIX = "own:"  # the workload name of a reader's own step (shared.plan.workloads.own)


@dataclass(frozen=True)
class Request:
    """Everything that decides what gets compiled: the cache key."""

    workload: str
    model: str
    target: str
    batch: int = 8
    seq: int = 1024
    prompt_len: int = 256
    steps: int = 1024
    cache_size: int | None = None
    logits: str = "full"
    k: int = 128
    lora_rank: int = 8
    mesh: str | None = None
    microbatches: int = 1
    remat: str = "none"
    loss: str = "chunked"
    tunix: str = "0.1.7"  # the Sampler's semantics: "0.1.6" compiles it without donation
    fast: bool = False  # compile with the least optimisation effort: see fast_options
    # None: the whole model. N: its first N decoder layers, a search's cheap probe of how bytes
    # grow with depth (shared.plan.search.max_batch), never a verdict on the model
    layers: int | None = None
    # grpo (shared.plan.workloads.grpo): `batch` is the sequences per call (tunix's micro-batch of
    # prompts x num_generations) of every phase whose own *_micro is None, so --max-batch finds the
    # largest micro-batch that fits; `steps` is the completion length, `cache_size` the KV slots
    prompts_per_step: int | None = None  # None: the least multiple of the phases' micro-batches
    num_generations: int = 4  # G: completions sampled per prompt
    num_iterations: int = 1  # mu: > 1 adds the old-policy log-prob phase
    rollout_micro: int | None = None  # sequences per Sampler call
    logps_micro: int | None = None  # sequences per log-prob call (reference, old policy)
    train_micro: int | None = None  # sequences per forward/backward of the policy update
    logps: str = "tunix"  # the log-prob phases: tunix's [B, T, V] function | "chunked"
    beta: float = 0.08  # KL weight; 0 drops the reference phase (and the reference weights)
    phases: str | None = None  # compile only these ("rollout,logps,update"); None: all

    @property
    def builds_tunix_model(self) -> bool:
        """Whether `model` names a tunix model (a preset, a config.json) this workload builds."""
        return self.workload in TUNIX_MODEL

    @property
    def own_step(self) -> bool:
        """A reader's own jitted step (plan.fits): `model` is only its name, no preset's."""
        return self.workload.startswith(OWN_PREFIX)

    def key(self) -> str:
        """The cache key: the fields this workload reads (two requests differing only in a
        field it ignores compile the same program), the versions and the source of shared/ a
        verdict runs (verdict_sources_digest)."""
        sources = verdict_sources_digest()
        read = READS.get(self.workload)  # a workload that names none (a test's) keys on all
        fields = (
            dataclasses.asdict(self)
            if read is None
            else {name: getattr(self, name) for name in (*COMMON, *read)}
        )
        if hf_config.is_config(self.model):  # the path alone would not see an edited file
            fields = {**fields, "model_config": hf_config.digest(self.model)}
        blob = json.dumps(
            {"request": fields, "versions": compiler_versions(self.target), "sources": sources},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def same_request(recorded: dict, request: Request) -> bool:
    """Whether a request recorded in a results file (its fields as a dict) is `request`. A
    field the record lacks was added to Request after it was written and is taken at its
    default (Request.layers, 2026-11-25), so committed results stay comparable."""
    defaults = {f.name: f.default for f in dataclasses.fields(Request)}
    return {**defaults, **recorded} == dataclasses.asdict(request)


def request_of(point: dict) -> Request:
    """The request a verdict answered (its fields are the first keys of the verdict)."""
    return Request(**{field.name: point[field.name] for field in dataclasses.fields(Request)})
