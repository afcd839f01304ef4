"""GRPO on a budget: tunix's GRPOLearner as a whole recipe (notebook 07).

- `recipe`: the reward task and `GRPOSettings` (what plan mode and the real run both read);
- `runner`: tunix's RLCluster and GRPOLearner built from the settings, run and timed per phase;
- `token_logprobs`: GRPO's log-prob phases without [B, T, V] logits;
- `plots`: notebook 07's figures;
- `settings`: `GRPOBudget`, notebook 07's setting (local() and field() presets).

Plan mode compiles the same jitted functions: shared.plan.workloads.grpo.
"""

from shared.grpo.recipe import (
    GRPOSettings,
    arithmetic_batches,
    arithmetic_problems,
    arithmetic_reward,
)
from shared.grpo.runner import (
    METRICS,
    PHASES,
    GRPOResult,
    GRPORun,
    base_copies,
    base_weights,
    build_grpo,
    quick_compiles,
    run_grpo,
)

__all__ = [
    "METRICS",
    "PHASES",
    "GRPOResult",
    "GRPORun",
    "GRPOSettings",
    "arithmetic_batches",
    "arithmetic_problems",
    "arithmetic_reward",
    "base_copies",
    "base_weights",
    "build_grpo",
    "quick_compiles",
    "run_grpo",
]
