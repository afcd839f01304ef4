"""Closed-form sizing maths: parameters, KV cache, training memory, FLOPs, time, chips, mesh.

Everything here is arithmetic on a `ModelDims`, so it runs anywhere in microseconds and
answers "will it fit, how long" before any compile. Dimension letters follow the scaling
book: B batch, T sequence, D model, F MLP hidden, N query heads, K kv heads, H head dim,
L layers, V vocab.
"""

import math
from dataclasses import dataclass, replace

from shared.errors import BadInput, choose, positive
from shared.hardware import Chip


def _fraction_of_peak(mfu_fraction: float) -> None:
    if not 0 < mfu_fraction <= 1:
        raise BadInput(f"mfu is a fraction of peak in (0, 1], e.g. 0.4; got {mfu_fraction}")


@dataclass(frozen=True)
class ModelDims:
    """The shape of a decoder-only transformer, all the sizing maths needs."""

    name: str
    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    tied: bool = True  # one [V, D] table used for input and LM head
    mlp_matrices: int = 3  # gated MLPs (SwiGLU, GeGLU) have 3 [D, F] matrices, ReLU^2 has 2
    norms_per_layer: int = 2  # D-sized RMSNorm scales per layer (Gemma 3 has 4)
    qk_norm: bool = False  # H-sized norms on queries and keys (Gemma 3 has them)
    T: int | None = None  # a typical training sequence length for this preset

    def __post_init__(self):  # named as the command line's flags
        positive(
            layers=self.L,
            d_model=self.D,
            d_ff=self.F,
            heads=self.N,
            kv_heads=self.K,
            head_dim=self.H,
            vocab=self.V,
            seq=self.T,
            mlp_matrices=self.mlp_matrices,
        )


# Gemma 3 presets match tunix 0.1.7 `ModelConfig.gemma3_*` (text only); LLaMA 3 from the
# HF configs; `pretrain-130m` is notebook 04's model.
# A table, one model a row: the formatter would spread each over a dozen lines.
# fmt: off
PRESETS: dict[str, ModelDims] = {
    d.name: d
    for d in [
        ModelDims("gemma3-270m", L=18, D=640, F=2048, N=4, K=1, H=256, V=262144,
                  norms_per_layer=4, qk_norm=True, T=1024),
        ModelDims("gemma3-1b", L=26, D=1152, F=6912, N=4, K=1, H=256, V=262144,
                  norms_per_layer=4, qk_norm=True, T=1024),
        ModelDims("gemma3-4b", L=34, D=2560, F=10240, N=8, K=4, H=256, V=262144,
                  norms_per_layer=4, qk_norm=True, T=1024),
        ModelDims("gemma3-12b", L=48, D=3840, F=15360, N=16, K=8, H=256, V=262144,
                  norms_per_layer=4, qk_norm=True, T=1024),
        ModelDims("gemma3-27b", L=62, D=5376, F=21504, N=32, K=16, H=128, V=262144,
                  norms_per_layer=4, qk_norm=True, T=1024),
        ModelDims("llama3-8b", L=32, D=4096, F=14336, N=32, K=8, H=128, V=128256,
                  tied=False, T=8192),
        ModelDims("llama3-70b", L=80, D=8192, F=28672, N=64, K=8, H=128, V=128256,
                  tied=False, T=8192),
        ModelDims("llama3-405b", L=126, D=16384, F=53248, N=128, K=8, H=128, V=128256,
                  tied=False, T=8192),
        ModelDims("pretrain-130m", L=8, D=1024, F=3072, N=4, K=1, H=256, V=32768,
                  tied=False, T=2048),
    ]
}
# fmt: on


def preset(name: str) -> ModelDims:
    """A preset by name; BadInput naming the valid ones otherwise."""
    return PRESETS[choose("model preset", name, PRESETS)]


def custom(name: str = "custom", **dims) -> ModelDims:
    """Custom dimensions, e.g. custom(L=8, D=1024, F=3072, N=4, K=1, H=256, V=32768)."""
    return ModelDims(name=name, **dims)


def with_vocab(dims: ModelDims, V: int) -> ModelDims:
    return replace(dims, V=V)


# ---------------------------------------------------------------------------- parameters


def param_counts(dims: ModelDims) -> dict[str, int]:
    """Parameters by part. Attention 2·D·H·(N+K) and MLP m·D·F per layer; D·V per table."""
    attention = dims.L * 2 * dims.D * dims.H * (dims.N + dims.K)
    mlp = dims.L * dims.mlp_matrices * dims.D * dims.F
    norms = dims.L * (dims.norms_per_layer * dims.D + (2 * dims.H if dims.qk_norm else 0)) + dims.D
    embedding = dims.V * dims.D
    lm_head = 0 if dims.tied else dims.V * dims.D
    parts = {
        "embedding": embedding,
        "lm_head": lm_head,
        "attention": attention,
        "mlp": mlp,
        "norms": norms,
    }
    parts["total"] = sum(parts.values())
    parts["non_embedding"] = parts["total"] - embedding
    return parts


def matmul_params(dims: ModelDims) -> int:
    """Parameters that take part in a matmul per token: layers plus the LM head.

    The input embedding is a gather, not a matmul, so it is out; a tied table still costs
    one D·V matmul as the LM head.
    """
    p = param_counts(dims)
    return p["attention"] + p["mlp"] + dims.V * dims.D


# ---------------------------------------------------------------------------- KV cache


def kv_cache_bytes_per_token(dims: ModelDims, bytes_per_element: int = 2) -> int:
    """2 (K and V) · L · K · H · bytes. tunix allocates every layer's full cache."""
    positive(bytes_per_element=bytes_per_element)
    return 2 * dims.L * dims.K * dims.H * bytes_per_element


def kv_cache_bytes(dims: ModelDims, batch: int, cache_len: int, bytes_per_element: int = 2) -> int:
    """The KV cache for `batch` sequences of `cache_len` slots."""
    positive(batch=batch, cache_len=cache_len)
    return batch * cache_len * kv_cache_bytes_per_token(dims, bytes_per_element)


# ---------------------------------------------------------------------------- training memory

# Activation elements kept per token per layer for the backward pass, by remat policy.
# 'none' stores every intermediate a plain block makes (flash-style attention, so no [T, T]
# scores): the two norm outputs and residual (4·D), q and attention output (2·N·H), k and v
# (2·K·H), and the MLP's matrix outputs and activation (m·F, m = 3 gated, 2 for ReLU²).
# 'book3' is the scaling book's "very conservative" three D-sized checkpoints per layer;
# 'fwide' the LLaMA-3 write-up that calls book3 a trap (~110 TB for 70B): its four checkpoints
# kept at F (the FFW's B·F output) and at D, on top of the book's three D-wide ones; it keeps
# more than 'none' does. 'block' remats each block and keeps only its input.
REMAT_POLICIES = ("none", "book3", "fwide", "block")
REMAT_FORMULAS = {
    "none": "4·D + 2·N·H + 2·K·H + m·F",
    "book3": "3·D",
    "fwide": "3·D + 4·D + 4·F",
    "block": "D",
}  # m: MLP matrices (3 for SwiGLU)


def activation_elements_per_token_layer(dims: ModelDims, remat: str) -> int:
    choose("remat policy", remat, REMAT_POLICIES)
    if remat == "block":
        return dims.D
    if remat == "book3":
        return 3 * dims.D
    if remat == "fwide":
        return 3 * dims.D + 4 * dims.D + 4 * dims.F
    return 4 * dims.D + 2 * dims.N * dims.H + 2 * dims.K * dims.H + dims.mlp_matrices * dims.F


def training_memory(
    dims: ModelDims,
    batch_tokens: float,
    *,
    chips: int = 1,
    remat: str = "book3",
    param_bytes: int = 2,
    master_fp32: bool = False,
    grad_bytes: int | None = 2,
    optimizer_bytes_per_param: int = 8,
    activation_bytes: int = 2,
    logits: str = "chunked",
) -> dict[str, float]:
    """Bytes for one training step, by part, total and per chip (everything FSDP-sharded).

    Defaults follow the scaling book's LLaMA example: bf16 params, fp32 Adam state
    (8 bytes/param), three bf16 checkpoints per layer. `grad_bytes=None` leaves gradients out,
    as the book does (they can be reduce-scattered and applied as they are produced).
    `logits='full'` adds the fp32 [B, T, V] logits a naive loss keeps; 'chunked' adds nothing.
    """
    choose("logits mode", logits, ("chunked", "full"))
    positive(batch_tokens=batch_tokens, chips=chips)
    p = param_counts(dims)["total"]
    parts = {
        "params": p * param_bytes,
        "master_weights": p * 4 if master_fp32 else 0,
        "gradients": p * grad_bytes if grad_bytes else 0,
        "optimizer": p * optimizer_bytes_per_param,
        "activations": batch_tokens
        * dims.L
        * activation_bytes
        * activation_elements_per_token_layer(dims, remat),
        "logits": batch_tokens * dims.V * 4 if logits == "full" else 0,
    }
    parts["total"] = sum(parts.values())
    parts["per_chip"] = parts["total"] / chips
    return parts


def min_chips_for_memory(total_bytes: float, hbm_bytes_per_chip: float) -> int:
    """The fewest chips whose HBM holds `total_bytes` when everything is evenly sharded."""
    return max(1, math.ceil(total_bytes / hbm_bytes_per_chip))


# ---------------------------------------------------------------------------- FLOPs and time

FLOP_CONVENTIONS = ("maxtext", "palm", "params")


def flops_per_token(dims: ModelDims, T: int | None = None, convention: str = "maxtext") -> float:
    """Training FLOPs per token (forward + backward).

    'maxtext' (default): 6·N_matmul + 6·L·T·N·H, the attention term halved for causality.
    'palm': 6·N_matmul + 12·L·T·N·H, no causal halving (PaLM, nanochat, tpuchat).
    'params': 6·(all parameters), the scaling book's back-of-the-envelope rule.
    N_matmul leaves out the input embedding (a gather) but keeps the LM head.
    """
    choose("FLOP convention", convention, FLOP_CONVENTIONS)
    if convention == "params":
        return 6.0 * param_counts(dims)["total"]
    T = T if T is not None else dims.T
    if T is None:
        raise BadInput(f"{dims.name}: give a sequence length T for the attention FLOPs")
    positive(seq=T)
    attention = 6.0 * dims.L * T * dims.N * dims.H
    return 6.0 * matmul_params(dims) + (attention if convention == "maxtext" else 2 * attention)


def mfu(tokens_per_second: float, flops_per_tok: float, peak_flops_total: float) -> float:
    """Model FLOPs utilisation: useful FLOP/s over the slice's bf16 peak."""
    return tokens_per_second * flops_per_tok / peak_flops_total


def training_seconds(
    tokens: float, flops_per_tok: float, peak_flops_total: float, mfu_fraction: float
) -> float:
    """Wall time to train on `tokens` at a given MFU."""
    positive(tokens=tokens)
    _fraction_of_peak(mfu_fraction)
    return tokens * flops_per_tok / (peak_flops_total * mfu_fraction)


def chips_for_deadline(
    tokens: float,
    flops_per_tok: float,
    peak_flops_per_chip: float,
    mfu_fraction: float,
    seconds: float,
) -> int:
    """The fewest chips that finish `tokens` within `seconds` at the given MFU."""
    positive(tokens=tokens, seconds=seconds)
    _fraction_of_peak(mfu_fraction)
    chip_seconds = tokens * flops_per_tok / (peak_flops_per_chip * mfu_fraction)
    return max(1, math.ceil(chip_seconds / seconds))


# ---------------------------------------------------------------------------- mesh choice


def mesh_choice(
    dims: ModelDims,
    batch_tokens: float,
    chips: int,
    chip: Chip,
    fsdp_axes: int | None = None,
    tp_axes: int = 1,
) -> dict[str, float | bool | str]:
    """The scaling book's FSDP / tensor-parallel choice for a training step ("Training", part 5).

    alpha = peak FLOP/s / W_ici (both directions of one link; 2550 on v5p).
    - pure FSDP over all `ici_axes` is compute-bound when B/chips > alpha / ici_axes;
    - FSDP (M_X axes) x TP (M_Y axes) can be compute-bound when B/chips > 4·alpha²/(F·M_X·M_Y);
    - X_opt = sqrt(B·chips·M_X / (F·M_Y)) minimises the summed comms (training chapter); the
      compute-bound range of X is the roots of alpha·F·M_Y·X² − B·F·M_X·M_Y·X + alpha·B·chips·M_X.
      The LLaMA chapter quotes the upper root (≈1927 for 70B); we recommend X_opt (≈1618).
    - TP alone turns comms-bound when Y > M_Y·F/alpha.
    Defaults M_X = ici_axes − 1 (at least 1) and M_Y = 1, the book's 3D-torus example.
    """
    if chip.peak_bf16_flops is None or chip.ici_bidirectional_bandwidth is None:
        raise BadInput(f"mesh choice needs a chip with a peak and an interconnect, not {chip.name}")
    positive(batch_tokens=batch_tokens, chips=chips)
    M_X = fsdp_axes if fsdp_axes is not None else max(1, chip.ici_axes - 1)
    M_Y = tp_axes
    alpha = chip.peak_bf16_flops / chip.ici_bidirectional_bandwidth
    B, F = batch_tokens, dims.F
    per_chip = B / chips
    fsdp_threshold = alpha / chip.ici_axes
    mixed_threshold = 4 * alpha**2 / (F * M_X * M_Y)
    x_opt = math.sqrt(B * chips * M_X / (F * M_Y))
    disc = (B * F * M_X * M_Y) ** 2 - 4 * (alpha * F * M_Y) * (alpha * B * chips * M_X)
    if disc >= 0:
        x_low, x_high = (
            (B * F * M_X * M_Y + s * math.sqrt(disc)) / (2 * alpha * F * M_Y) for s in (-1, 1)
        )
    else:
        x_low = x_high = float("nan")
    if per_chip > fsdp_threshold:
        x, advice = chips, "pure FSDP is compute-bound: shard everything over all chips"
    else:
        # TP splits heads and F, powers of two in practice: the best such split of the chips.
        splits = [chips // y for y in (2**i for i in range(chips.bit_length())) if chips % y == 0]
        x = min(splits, key=lambda d: comms_to_compute(dims, B, chips, alpha, d, M_X, M_Y))
        ratio = comms_to_compute(dims, B, chips, alpha, x, M_X, M_Y)
        verdict = "compute-bound" if ratio <= 1 else f"comms-bound by {ratio - 1:.0%}"
        advice = f"mixed FSDP x TP: {x}-way FSDP, {chips // x}-way tensor parallel ({verdict})"
        if per_chip <= mixed_threshold:
            advice = "comms-bound with any FSDP/TP mix: raise the batch or use fewer chips"
    return {
        "alpha": alpha,
        "per_chip_batch_tokens": per_chip,
        "M_X": M_X,
        "M_Y": M_Y,
        "fsdp_threshold": fsdp_threshold,
        "fsdp_compute_bound": per_chip > fsdp_threshold,
        "mixed_threshold": mixed_threshold,
        "mixed_compute_bound": per_chip > mixed_threshold,
        "x_opt": x_opt,
        "x_compute_bound_low": x_low,
        "x_compute_bound_high": x_high,
        "tp_max": M_Y * F / alpha,
        "fsdp": x,
        "tp": chips // x,
        "comms_to_compute": comms_to_compute(dims, B, chips, alpha, x, M_X, M_Y),
        "advice": advice,
    }


def comms_to_compute(
    dims: ModelDims, batch_tokens: float, chips: int, alpha: float, fsdp_degree, M_X: int, M_Y: int
):
    """(FSDP + TP communication time) / matmul time of one layer's MLP, forward pass.

    From the book: T_fsdp = 4·D·F/(Y·W·M_X), T_tp = 4·B·D/(X·W·M_Y), T_math = 4·B·D·F/(chips·C)
    with Y = chips/X, which reduces to alpha·(X/(M_X·B) + chips/(X·M_Y·F)). Below 1 the step is
    compute-bound. Works on numpy arrays of `fsdp_degree` too.
    """
    return alpha * (fsdp_degree / (M_X * batch_tokens) + chips / (fsdp_degree * M_Y * dims.F))


# ---------------------------------------------------------------------------- command line


def human(value: float, unit: str = "") -> str:
    """1.23e9 -> '1.23 G'; bytes in binary units ('1.50 GiB') when unit == 'B'."""
    if unit == "B":
        scales = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
        for suffix, scale in scales:
            if abs(value) >= scale:
                return f"{value / scale:.2f} {suffix}"
        return f"{value:.0f} B"
    if abs(value) >= 1e15:
        return f"{value:.3g} {unit}".rstrip()
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {suffix}{unit}"
    return f"{value:.4g} {unit}".rstrip()
