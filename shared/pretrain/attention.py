"""Multi-head attention behind one function, the implementation chosen by name.

`attention(q, k, v)` takes q [B,T,N,H] and k, v [B,T,K,H] (GQA: N a multiple of K; query
head n reads kv head n // (N // K), the grouping every implementation here uses) and
returns [B,T,N,H]. Implementations:

- 'xla'        jax.nn.dot_product_attention(implementation='xla'): any backend; materialises
               the [B,N,T,T] scores.
- 'cudnn'      jax.nn.dot_product_attention(implementation='cudnn'): CUDA GPUs, bf16/fp16.
- 'splash'     Pallas TPU splash attention (jax.experimental.pallas.ops.tpu.splash_attention).
- 'pallas_gpu' Pallas Triton flash attention (jax.experimental.pallas.ops.gpu.attention.mha).

The default follows the platform: splash on TPU, cudnn on GPU (xla for fp32 inputs, which
cuDNN does not take), xla on CPU. On CPU the two
Pallas kernels run in Pallas interpret mode (slow, but the same kernel code), which is how
the tests check them against 'xla'.

The 1/sqrt(H) scale is applied exactly once in every path: passed as `scale` to
dot_product_attention, as `sm_scale` to the Triton kernel, and multiplied into q before
splash, whose kernel does not scale at all (a published notebook forgot this).

Under `jax.set_mesh(mesh)` with a multi-device ("fsdp", "tp") mesh the Pallas kernels run
per shard through shard_map (batch over every axis but "tp", heads over "tp"); XLA and
cuDNN attention are partitioned by the compiler.

`platform` ('tpu', 'gpu', 'cpu') defaults to jax's default backend; plan mode compiles for
a TPU topology from a CPU host, so it passes platform='tpu' to get the TPU kernel.
"""

import functools

import jax
import jax.numpy as jnp

from shared.errors import BadInput, choose

IMPLS = ("xla", "cudnn", "splash", "pallas_gpu")
PLATFORMS = ("cpu", "gpu", "tpu")
# Where each implementation can run: natively, or ('cpu') in Pallas interpret mode.
_RUNS_ON = {
    "xla": PLATFORMS,
    "cudnn": ("gpu",),
    "splash": ("tpu", "cpu"),
    "pallas_gpu": ("gpu", "cpu"),
}
_DEFAULT = {"tpu": "splash", "gpu": "cudnn", "cpu": "xla"}
# Block sizes (q, kv, backward) when none are given.
_DEFAULT_BLOCKS = {"splash": (512, 512, 512), "pallas_gpu": (128, 128, 32)}
_LANES = 128  # splash's kv compute block must be a multiple of the TPU lane count


def current_platform() -> str:
    """'tpu', 'gpu' or 'cpu': the backend jax computes on by default."""
    backend = jax.default_backend()
    return "gpu" if backend in ("gpu", "cuda", "rocm") else backend


def default_impl(platform: str | None = None) -> str:
    """The implementation `attention` uses when none is named."""
    platform = platform or current_platform()
    return _DEFAULT.get(platform, "xla")


def resolve(impl: str | None, platform: str | None = None) -> str:
    """Check `impl` can run on `platform`; BadInput with the valid choices if not."""
    platform = platform or current_platform()
    if impl is None:
        return default_impl(platform)
    choose("attention implementation", impl, IMPLS)
    if platform not in _RUNS_ON[impl]:
        here = [name for name in IMPLS if platform in _RUNS_ON[name]]
        raise BadInput(
            f"attention {impl!r} cannot run on {platform}; valid on {platform}: {', '.join(here)}"
        )
    return impl


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    impl: str | None = None,
    causal: bool = True,
    block_q: int | None = None,
    block_kv: int | None = None,
    block_bwd: int | None = None,
    interpret: bool | None = None,
    platform: str | None = None,
) -> jax.Array:
    """Scaled dot-product attention: q [B,T,N,H], k/v [B,T,K,H] -> [B,T,N,H].

    `block_q`, `block_kv`, `block_bwd` are the Pallas kernels' tile sizes (clipped to T);
    `interpret` defaults to True on CPU for the Pallas kernels.
    """
    platform = platform or current_platform()
    if impl is None and platform == "gpu" and q.dtype not in (jnp.bfloat16, jnp.float16):
        impl = "xla"  # cuDNN's fused attention takes half precision only
    impl = resolve(impl, platform)
    B, T, N, H = q.shape
    if k.ndim != 4 or k.shape != v.shape or k.shape[0] != B or k.shape[3] != H:
        raise BadInput(
            f"attention shapes: q {q.shape} [B,T,N,H] needs k and v [B,S,K,H] with "
            f"the same B and H; got k {k.shape}, v {v.shape}"
        )
    K = k.shape[2]
    if N % K:
        raise BadInput(f"attention: query heads N={N} must be a multiple of kv heads K={K}")
    scale = H**-0.5
    if impl in ("xla", "cudnn"):
        if impl == "cudnn" and q.dtype not in (jnp.bfloat16, jnp.float16):
            raise BadInput(f"attention 'cudnn' needs bf16 or fp16 inputs, got {q.dtype}")
        return jax.nn.dot_product_attention(
            q, k, v, scale=scale, is_causal=causal, implementation=impl
        )
    interpret = platform == "cpu" if interpret is None else interpret
    d_q, d_kv, d_bwd = _DEFAULT_BLOCKS[impl]
    blocks = (min(block_q or d_q, T), min(block_kv or d_kv, T), min(block_bwd or d_bwd, T))
    for name, b in zip(("block_q", "block_kv", "block_bwd"), blocks, strict=True):
        if T % b:
            raise BadInput(f"attention {impl!r}: T={T} must be a multiple of {name}={b}")
    if impl == "splash":
        if T % _LANES or blocks[1] % _LANES or blocks[2] % _LANES:
            raise BadInput(
                f"attention 'splash': T={T} and the kv blocks {blocks[1:]} must be "
                f"multiples of {_LANES}"
            )
        fn = functools.partial(_splash, causal=causal, blocks=blocks, interpret=interpret)
    else:
        fn = functools.partial(_pallas_gpu, causal=causal, blocks=blocks, interpret=interpret)
    return _per_shard(fn, q, k, v)


# ---------------------------------------------------------------------------- Pallas paths


def _splash(q, k, v, *, causal, blocks, interpret):
    """Splash works on one sequence with heads first: vmap over B, [N,T,H] and [K,T,H]."""
    _, T, N, H = q.shape
    kernel = _splash_kernel(N, T, causal, blocks, interpret)
    q = (q.astype(jnp.float32) * H**-0.5).astype(q.dtype)  # splash itself never scales
    heads_first = (0, 2, 1, 3)
    out = jax.vmap(kernel)(
        q.transpose(heads_first), k.transpose(heads_first), v.transpose(heads_first)
    )
    return out.transpose(heads_first)


@functools.lru_cache(maxsize=64)
def _splash_kernel(N, T, causal, blocks, interpret):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    bq, bkv, bwd = blocks
    head_mask = sa.CausalMask((T, T)) if causal else sa.FullMask((T, T))
    sizes = sa.BlockSizes(
        block_q=bq,
        block_kv=bkv,
        block_kv_compute=bkv,
        block_q_dkv=bwd,
        block_kv_dkv=bwd,
        block_kv_dkv_compute=bwd,
        block_q_dq=bwd,
        block_kv_dq=bwd,
    )
    return sa.make_splash_mha(
        sa.MultiHeadMask([head_mask] * N),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )


def _pallas_gpu(q, k, v, *, causal, blocks, interpret):
    """The Triton kernel wants as many kv heads as query heads: repeat each kv head N/K times."""
    from jax.experimental.pallas.ops.gpu import attention as gpu_attention

    N, H, K = q.shape[2], q.shape[3], k.shape[2]
    if K != N:
        k, v = jnp.repeat(k, N // K, axis=2), jnp.repeat(v, N // K, axis=2)
    bq, bkv, bwd = blocks
    sizes = gpu_attention.BlockSizes(
        block_q=bq, block_k=bkv, block_q_dkv=bwd, block_kv_dkv=bwd, block_q_dq=bwd, block_kv_dq=bwd
    )
    return gpu_attention.mha(
        q, k, v, None, sm_scale=H**-0.5, causal=causal, block_sizes=sizes, interpret=interpret
    )


def _per_shard(fn, q, k, v):
    """Run a Pallas kernel per shard under a multi-device mesh (kernels are not partitionable)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return fn(q, k, v)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    tp = sizes.get("tp", 1)
    batch_axes = tuple(a for a in mesh.axis_names if a != "tp" and sizes[a] > 1)
    batch_ways = 1
    for a in batch_axes:
        batch_ways *= sizes[a]
    B, _, N, _ = q.shape
    K = k.shape[2]
    if B % batch_ways or N % tp or (K % tp and K != 1):
        raise BadInput(
            f"attention under mesh {sizes}: batch {B} must divide by {batch_ways} "
            f"and heads N={N}, K={K} by tp={tp} (or K=1)"
        )
    batch = batch_axes or None
    head = "tp" if tp > 1 else None
    q_spec = jax.P(batch, None, head, None)
    kv_spec = jax.P(batch, None, head if K % tp == 0 else None, None)
    return jax.shard_map(
        fn, mesh=mesh, in_specs=(q_spec, kv_spec, kv_spec), out_specs=q_spec, check_vma=False
    )(q, k, v)
