"""Logits without [B, T, V]: what notebook 03 measures and every trainer here uses.

- `chunked`: top-k logits and the cross-entropy loss (custom backward) in [B, C, Vc] blocks, and
  the references that materialise everything;
- `tiling`: the block sizes, slicing and online log-sum-exp every chunked computation shares
  (GRPO's token log-probs too);
- `compare`: chunked against the references: bytes, time, exactness (notebook 03);
- `settings`: notebook 03's settings, `ExactnessCheck` and `FitSearch` (`local()`, `field()`).

`from shared import logits; logits.cross_entropy(...)`: the names below are the package's API.
"""

from shared.logits.chunked import (
    cross_entropy,
    example_inputs,
    example_specs,
    full_cross_entropy,
    full_top_k_logits,
    per_step_top_k_logits,
    top_k_logits,
)
from shared.logits.tiling import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_VOCAB_CHUNK,
    DEFAULT_VOCAB_CHUNK_LOSS,
)

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_VOCAB_CHUNK",
    "DEFAULT_VOCAB_CHUNK_LOSS",
    "cross_entropy",
    "example_inputs",
    "example_specs",
    "full_cross_entropy",
    "full_top_k_logits",
    "per_step_top_k_logits",
    "top_k_logits",
]
