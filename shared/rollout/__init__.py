"""Rollouts with tunix's Sampler: what notebook 01 sizes and GRPO's first phase runs.

- `sampler`: the Sampler for any family, its prefill and decode as jitted functions, the
  abstract sampling state plan mode compiles them with (shared.plan.workloads.rollout), KV-cache
  bytes;
- `sweep`: the measured batch sweep on a device (time, tokens per second, peak HBM, OOM);
- `moe`: the tiny mixtures of experts rolled out beside their families' dense tiny models;
- `settings`: notebook 01's setting, `RolloutSizing` (`local()` and the field's `field()`);
- `plots`: notebook 01's figures.
"""
