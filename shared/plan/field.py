"""What the field has run: published settings that fit (or did not), which plan mode must agree
with. `benchmarks/bench_field.py` compiles each as a plan request and commits the verdicts
(`benchmarks/results/field_validation.json`); `tests/test_field.py` holds that file to this
table and every row to agreement.

Each point states where it comes from, the tunix version it ran under, the setting, the outcome,
and how our compiled program differs from theirs. Where the source leaves a knob open we take
tunix's own default (PeftTrainer's loss forms the [B, T, V] logits: `loss="full"`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.plan.workloads.request import Request

MTNT = "tunix examples/sft/mtnt/README.md (2025-09-30), sequence 256"
GRPO_NOTEBOOK = "tunix examples/grpo_gemma.ipynb (2026-08-03)"
FIELD_ROLLOUTS = "the field: gemma3-1b rollouts on one v5e chip, 200 ran and 256 ran out of HBM"
# mtnt's table says "the config in the script does not match the exact configuration listed";
# its launch scripts use LoRA rank 16 on q/kv/gate/up/down, adamw, the PeftTrainer loss.
MTNT_LORA = {"seq": 256, "lora_rank": 16, "loss": "full", "remat": "none"}


@dataclass(frozen=True)
class FieldPoint:
    source: str
    tunix: str  # the tunix version the outcome was seen with
    setting: str  # in the source's words
    fits: bool  # the outcome the source reports
    request: Request  # the same setting as a plan request
    differs: str  # how our compiled program differs from theirs ("" when it does not)


POINTS = (
    FieldPoint(
        MTNT,
        "0.1.x (2025-09)",
        "Gemma 2b LoRA, v5e-1, batch 4",
        True,
        Request("lora-train", "gemma-2b", "v5e-1", batch=4, **MTNT_LORA),
        "ours also adapts the attention output (attn_vec_einsum); bf16 weights; "
        "one optax step on the adapters, not PeftTrainer",
    ),
    FieldPoint(
        MTNT,
        "0.1.x (2025-09)",
        "Llama3.2 1b LoRA, v5e-1, batch 4",
        True,
        Request("lora-train", "llama3.2-1b", "v5e-1", batch=4, **MTNT_LORA),
        "ours also adapts o_proj; bf16 weights; one optax step on the adapters",
    ),
    FieldPoint(
        MTNT,
        "0.1.x (2025-09)",
        "Qwen3 14b LoRA, v5e-8, tp sharding, batch 8",
        True,
        Request("lora-train", "qwen3-14b", "v5e-8", batch=8, mesh="1x8", **MTNT_LORA),
        "ours also adapts o_proj; bf16 weights; one optax step on the adapters",
    ),
    FieldPoint(
        GRPO_NOTEBOOK,
        "main (2026-08)",
        "Gemma 3 1B IT GRPO, LoRA r64 on attention and MLP, v6e-1, prompt 256 + 768 "
        "generated, KV cache 1280, 2 generations, micro-batch 1",
        True,
        Request(
            "grpo",
            "gemma3-1b",
            "v6e-1",
            batch=2,  # one prompt per micro-batch x 2 generations
            prompt_len=256,
            steps=768,
            cache_size=1280,
            num_generations=2,
            lora_rank=64,
            beta=0.08,
            logps="tunix",
        ),
        "we compile tunix 0.1.7's GRPO (its update returns new weight buffers; tunix main "
        "fused it later): ours holds one more copy of the base than theirs may",
    ),
    FieldPoint(
        FIELD_ROLLOUTS,
        "0.1.6",
        "batch 200, prompt 128, 1024 steps, KV cache 1312",
        True,
        Request(
            "rollout",
            "gemma3-1b",
            "v5e-1",
            batch=200,
            prompt_len=128,
            steps=1024,
            cache_size=1312,
            tunix="0.1.6",
        ),
        "",
    ),
    FieldPoint(
        FIELD_ROLLOUTS,
        "0.1.6",
        "batch 256, prompt 128, 1024 steps, KV cache 1312",
        False,
        Request(
            "rollout",
            "gemma3-1b",
            "v5e-1",
            batch=256,
            prompt_len=128,
            steps=1024,
            cache_size=1312,
            tunix="0.1.6",
        ),
        "",
    ),
)
