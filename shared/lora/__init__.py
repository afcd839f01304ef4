"""qwix LoRA for any tunix family, what notebook 02 measures and GRPO's policy trains.

- `adapters`: apply qwix LoRA, count and free what the clone does not share, merge, export to
  safetensors and reload through tunix's loader;
- `train`: one jitted optax step on the adapters, or on every weight for a full fine-tune
  (micro-batches, remat, the chunked loss), which plan mode compiles as the `lora-train` and
  `sft` workloads (shared.plan.workloads.lora_train, .sft), and `fine_tune`, a short run of it;
- `experts`: which weights qwix adapts in a mixture of experts, and each tiny mixture's
  fine-tune (notebook 02);
- `settings`: notebook 02's setting, `LoraOverhead` (`local()` and `field()`);
- `plots`: notebook 02's figures.

The names below are the package's API: `from shared import lora; lora.apply_lora(...)`.
"""

from shared.lora.adapters import (
    apply_lora,
    default_alpha,
    expected_lora_param_count,
    export_safetensors,
    free_base,
    load_safetensors,
    lora_param_count,
    merge_lora,
    shared_base_arrays,
)
from shared.lora.train import (
    LOSSES,
    fine_tune,
    fp32_opt_init,
    init_opt_state,
    play_tokens,
    shard_batch,
    split_full,
    split_lora,
    train_step,
)

__all__ = [
    "LOSSES",
    "apply_lora",
    "default_alpha",
    "expected_lora_param_count",
    "export_safetensors",
    "fine_tune",
    "fp32_opt_init",
    "free_base",
    "init_opt_state",
    "load_safetensors",
    "lora_param_count",
    "merge_lora",
    "play_tokens",
    "shard_batch",
    "shared_base_arrays",
    "split_full",
    "split_lora",
    "train_step",
]
