"""A model cut to a few layers, and the straight line through two such depths carried to the
whole model's: how near that line comes to the full model's compiled bytes, and how much
cheaper the cut compiles are (benchmarks/bench_plan.py, `breakdown` and `locate`;
shared.plan.compiler.timing.depth_line).

The batch search located deep models with these lines until 2026-11-28. A rollout's cut
compiles took longer than its exact full-depth verdict (qwen3-8b at 32 rows on a v6e-1: 64 s
against 41 s; llama3.1-8b at 128 on a 4x2 v5e-8: 39 s against 30 s) and came 0.9-13% off,
where the whole model's bytes at buffer assignment (shared.plan.compiler.assigned) took 13 s and 10
s and came 0.2-0.3% under (benchmarks/results/plan_locate_rollout.json); a LoRA step's probe
took half the cut pair's time (plan_locate.json). So the search locates with that probe, and
these lines remain the measurement it was chosen against.
"""

from __future__ import annotations

from shared import models
from shared.plan.workloads import CUT_TO_LAYERS
from shared.plan.workloads.request import Request


def cut_pair(model: str) -> tuple[int, int]:
    """One and two repeats of `model`'s attention pattern, at least 2 layers: the depths a
    cut model keeps the full model's mix of layers at."""
    cut = max(models.attention_period(model), 2)
    return cut, 2 * cut


def cut_depths(request: Request) -> tuple[tuple[int, int] | None, int]:
    """The two depths a deep model is cut to (one and two repeats of its attention pattern, at
    least 2 layers), and its full depth; None for a model shallower than 4x the deeper cut,
    where a cut saves too little to pay for two compiles.

    Why cut: a 27B LoRA step's fast compile at full depth took 144 s and was 24% under the
    exact bytes, while exact compiles at 6 and 12 layers took 50 s and 71 s and their straight
    line came within 4% of the exact full-depth bytes (benchmarks/results/plan_cpu.json,
    `breakdown`). For gemma3-1b the fast full-depth compile is within 0.3% and cheap, and a
    26-layer model barely shrinks, so shallow models keep it."""
    if request.workload not in CUT_TO_LAYERS or request.layers is not None:
        return None, 0
    full = models.model_config(request.model).num_layers
    shallow, deep = cut_pair(request.model)
    return ((shallow, deep) if 4 * deep <= full else None), full


def carry(a: float, b: float, depths: tuple[int, int], full_layers: int) -> float:
    """Bytes `a` and `b` of a model cut to the two `depths`, carried on their straight line to
    `full_layers`."""
    low, high = depths
    return a + (full_layers - low) * (b - a) / (high - low)


def carried_to_depth(shallow: dict, deep: dict, depths: tuple[int, int], full_layers: int) -> float:
    """The whole model's bytes, from verdicts of it cut to the two `depths` (`shallow`,
    `deep`): each executable's bytes (the resident ones plus its own transient ones) carried
    to `full_layers` on its own straight line (carry), and the largest of those lines. Not the
    line through each depth's worst executable: the worst can change with depth. qwen3-8b
    rollouts on a v5p-8 at batch 1140: prefill is the worst at 2 and 4 layers (14.64, 18.43
    GiB), decode at 36 (its KV cache grows faster a layer); the line through the worst said
    79.1 GiB, decode's own line 119.7, and the compiler's full-depth bytes around it (95.5 at
    872, 126.2 at 1212) put 1140 at 119.7. The line through the worst is no larger than the
    worst executable's own, and stands in where a verdict has no transient bytes by label."""
    labels = set(shallow.get("transient_bytes", {})) & set(deep.get("transient_bytes", {}))
    lines = [carry(shallow["bytes_per_device"], deep["bytes_per_device"], depths, full_layers)]
    for label in labels:
        a, b = (p["resident_bytes"] + p["transient_bytes"][label] for p in (shallow, deep))
        lines.append(carry(a, b, depths, full_layers))
    return max(lines)
