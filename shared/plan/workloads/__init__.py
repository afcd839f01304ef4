"""The workloads plan mode compiles, by name: each builds the SAME jitted functions device mode
runs, with abstract arguments on the target's mesh, and says which buffers stay resident.

    rollout       tunix Sampler prefill + decode (sampling layout: weights not FSDP-sharded)
    lora-rollout  the same on a qwix LoRA model
    forward       a teacher-forced pass to top-k logits: full [B, T, V] or chunked
    lora-train    one optax step on the LoRA parameters (remat, micro-batches, loss)
    sft           the same step on every weight: a full fine-tune
    train         the ~130M pretraining model's train step (notebook 04)
    grpo          one tunix GRPO step: rollout, log-probs, policy update
    own:NAME      a reader's own jitted function and abstract arguments (`own`: plan.fits,
                  plan.largest_batch), registered when asked

Any of them takes `--model path/to/config.json` as well as a preset: a Llama 3 or Qwen 3
config from Hugging Face, read locally (shared.models.hf_config).

Shardings, against what tunix does on a TPU (tests/test_sharding_audit.py checks each line;
a mesh is ("fsdp", "tp"), every device on fsdp unless --mesh says otherwise):
- weights: tunix's own partition rules, the family's ShardingConfig read from the model's
  annotations: training layout FSDP x TP (e.g. q [N, D, H] over ("tp", "fsdp", None)); the
  rollout workloads use tunix's sampling layout (`is_sampling`: nothing over fsdp, so fsdp is
  data parallelism, except Gemma 3's kv_einsum with one KV head, gemma3-1b's, which tunix
  hard-codes over fsdp in both layouts). Same as tunix.
- activations: tunix's `shard(x, act_btd / act_btnh / act_btf)` constraints, batch over fsdp
  and the wide dimension over tp, applied under the mesh on any host
  (shared.models.activation_sharding); tunix's helpers would drop them under jax.set_mesh and
  in every deviceless compile. Same as tunix's trainers on a TPU.
- LoRA parameters: qwix shards lora_a / lora_b like the dimensions they share with their base
  weight, then tunix's reshard puts them on the mesh. Same as tunix's examples.
- optimizer state: Adam's moments in fp32 laid out like the parameters they mirror, the step
  count replicated (shared.hardware.sharding.opt_state_shardings), as tunix's trainers shard their
  optimizer from the parameters' specs. GRPO: tunix's own nnx.Optimizer over the LoRA params.
- KV cache (rollout): tunix's Sampler state with the batch over fsdp and KV heads over tp when
  they divide (shared.plan.workloads.rollout). tunix builds the state uncommitted, so on
  one device it is the same; on several we shard it on purpose: a data-parallel rollout whose
  every chip held every row's cache would not be the program anyone runs.
- rollout layout: the `rollout` recipe defaults to data parallelism (fsdp = every device,
  weights replicated), which holds the largest batch when the weights fit one chip; tunix's
  GRPO demo on 8 chips rolls out with tp (mesh 1x4): `--mesh 1x8` compiles that instead.
- GRPO: tunix's colocated roles on one mesh, its rollout sampling from the policy (training
  layout), prefill's state replicated as tunix passes it and decode's laid out as the compiled
  prefill returns it (KV cache over the batch), the reference in the training layout,
  the policy update tunix's own jitted train step with inputs placed by tunix's shard_input.
  Same as tunix 0.1.7.
- micro-batches (lora-train): tokens [B, T] reshaped to [M, B/M, T]; the model's own
  constraints put each micro-batch's activations back over every fsdp device, as tunix's
  gradient accumulation feeds each micro-batch sharded (the tokens' reshard is a few KB).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from jax.sharding import Mesh

from shared.plan.compiler.executable import Workload
from shared.plan.workloads import forward, grpo, lora_train, rollout, sft, train

# name -> builder(request, mesh): one file per workload, each reaching its recipe's jitted functions
WORKLOADS: dict[str, Callable[..., Workload]] = {
    "rollout": rollout.workload,
    "lora-rollout": partial(rollout.workload, lora=True),
    "forward": forward.workload,
    "lora-train": lora_train.workload,
    "sft": sft.workload,
    "train": train.workload,
    "grpo": grpo.workload,
}


# name -> the Request fields it reads, besides workload, model, target, mesh and fast
READS: dict[str, tuple[str, ...]] = {
    "rollout": rollout.READS,
    "lora-rollout": (*rollout.READS, "lora_rank"),
    "forward": forward.READS,
    "lora-train": lora_train.READS,
    "sft": sft.READS,
    "train": train.READS,
    "grpo": grpo.READS,
}
COMMON = ("workload", "model", "target", "mesh", "fast", "layers")  # every workload reads these
# The workloads that build a tunix model cut to `Request.layers` when it is set (a search's
# shallow probe, shared.plan.search.max_batch); the others refuse it.
# The workloads that build a tunix model (shared.models) of Request.model: the presets' and a
# Hugging Face config's; the others take our own 130M model, a test's program or a reader's step.
TUNIX_MODEL = ("rollout", "lora-rollout", "forward", "lora-train", "sft", "grpo")
CUT_TO_LAYERS = ("rollout", "lora-rollout", "lora-train", "sft", "grpo")


def build_workload(request, mesh: Mesh) -> Workload:
    return WORKLOADS[request.workload](request, mesh)
