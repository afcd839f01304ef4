"""Closed-form sizing maths: parameters, KV cache, training memory, FLOPs, time, chips, mesh.

Everything here is arithmetic on a `ModelDims`, so it runs anywhere in microseconds and
answers "will it fit, how long" before any compile. Dimension letters follow the scaling
book: B batch, T sequence, D model, F MLP hidden, N query heads, K kv heads, H head dim,
L layers, V vocab.
"""

from dataclasses import dataclass, replace

from shared.errors import choose


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


# Gemma 3 presets match tunix 0.1.7 `ModelConfig.gemma3_*` (text only); LLaMA 3 from the
# HF configs; `pretrain-130m` is notebook 04's model.
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
    parts = {"embedding": embedding, "lm_head": lm_head, "attention": attention, "mlp": mlp,
             "norms": norms}
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
    return 2 * dims.L * dims.K * dims.H * bytes_per_element


def kv_cache_bytes(dims: ModelDims, batch: int, cache_len: int, bytes_per_element: int = 2) -> int:
    """The KV cache for `batch` sequences of `cache_len` slots."""
    return batch * cache_len * kv_cache_bytes_per_token(dims, bytes_per_element)
