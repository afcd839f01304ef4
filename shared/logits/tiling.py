"""The tiling kit every chunked [B, T, V] computation here shares: block sizes, the shifted last
vocabulary chunk, padded time, CPU-safe slicing, and the online log-sum-exp.

A block is [B, C, Vc]: C time steps by Vc vocabulary rows, the batch whole inside it (so a
`hidden` sharded over its batch stays sharded). shared.logits.chunked (top-k, the loss) and
shared.grpo.token_logprobs (GRPO's log-probs) tile with these functions and nothing else.
"""

import functools
import numbers

import jax.numpy as jnp
from jax import lax

from shared.errors import BadInput

# Default blocks, from the sweep of benchmarks/bench_logits.py in results/03_logits_cpu.json: wall
# time at B=8, T=128, V=65536 on a shared 2-core CPU (points timed round-robin, minimum of 3),
# temp memory compile-only at B=8, T=1024, V=262144 for the CPU and a deviceless TPU v6e.
# Tokens x vocabulary rows per block (B * chunk_size x vocab_chunk_size):
# - top-k: 1024 x 8192 1.6 s, 1024 x 32768 1.9 s, 256 x 32768 2.1 s, 64 x 8192 3.4 s,
#   1024 x 2048 3.6 s; TPU temp 91 MiB at 1024 x 8192 (full materialisation: 24 GiB), and
#   144 / 464 MiB at 256 / 1024 x 32768 (measured separately).
# - loss fwd+bwd: 1024 x 2048 3.7 s, 1024 x 4096 4.1 s, 1024 x 32768 5.9 s, 256 x 32768 7.6 s,
#   64 x 8192 12.3 s; 1024 x 4096 needs no HBM temp on TPU v6e (36 MiB at 1024 x 8192).
# Earlier runs on the same busy machine moved single points by up to 30% (in some, 32768-row
# top-k blocks were 1.2x faster), but always: small blocks (skinny matmuls, per-iteration
# overhead) and 32768-row loss blocks (cache misses) were slow, and 1024 x 8192 / 1024 x 4096
# were at or near the fastest with the least memory.
# The sequence chunk comes from a token budget, so the block (and the memory) does not grow with
# the batch: C = ceil(T / ceil(T / (DEFAULT_BLOCK_TOKENS // B))). GPU defaults are unmeasured:
# rerun the benchmark's sweep there before trusting them.
DEFAULT_BLOCK_TOKENS = 1024
DEFAULT_VOCAB_CHUNK = 8192  # top_k_logits
DEFAULT_VOCAB_CHUNK_LOSS = 4096  # cross_entropy


def check_inputs(hidden, embedding):
    if hidden.ndim != 3 or embedding.ndim != 2 or hidden.shape[-1] != embedding.shape[-1]:
        raise BadInput(
            f"need hidden [B, T, D] and embedding [V, D] with the same D, got hidden "
            f"{tuple(hidden.shape)} and embedding {tuple(embedding.shape)}"
        )
    for name, x in (("hidden", hidden), ("embedding", embedding)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise BadInput(f"{name} must be floating point, got {x.dtype}")
    B, T, D = hidden.shape
    return B, T, D, embedding.shape[0]


def positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BadInput(f"{name}={value!r} must be a positive integer or None")
    return int(value)


def seq_chunk(chunk_size, B, T):
    if chunk_size is None:
        c_max = max(1, DEFAULT_BLOCK_TOKENS // max(B, 1))
        return -(-T // -(-T // c_max)) if T else 1  # fewest chunks, evened out: least padding
    return min(positive_int("chunk_size", chunk_size), max(T, 1))


def vocab_chunk(vocab_chunk_size, V, k, default):
    if vocab_chunk_size is None:
        return min(V, max(default, k))
    Vc = positive_int("vocab_chunk_size", vocab_chunk_size)
    if Vc < k:
        raise BadInput(f"vocab_chunk_size={Vc} must be >= k={k}")
    return min(Vc, V)


def vocab_window(j, Vc, V):
    """Start row of vocabulary chunk j and, if chunks overlap, the mask of its new rows.

    The last chunk is shifted back to end at V (no padding copy of the table); its rows before
    j * Vc were covered by the previous chunk and are masked. `keep` is None when Vc divides V.
    """
    if V % Vc == 0:
        return j * Vc, None
    start = jnp.minimum(j * Vc, V - Vc)
    return start, start + jnp.arange(Vc) >= j * Vc


def pad_time(x, C):
    """Zero-pad axis 1 (time) of x up to a multiple of C; returns (padded, number of chunks)."""
    T = x.shape[1]
    nC = -(-T // C)
    if nC * C != T:
        x = jnp.pad(x, [(0, 0), (0, nC * C - T)] + [(0, 0)] * (x.ndim - 2))
    return x, nC


def is_16bit_float(x):
    return jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize == 2


def per_platform(fn, *args):
    """`fn(*args, bits=True)` when lowered for CPU, `bits=False` for every other platform."""
    return lax.platform_dependent(
        *args, cpu=functools.partial(fn, bits=True), default=functools.partial(fn, bits=False)
    )


def take(x, start, size, axis, bits=False):
    """`lax.dynamic_slice_in_dim`; with `bits`, 16-bit floats are sliced as uint16 patterns.

    Why `bits` on CPU: XLA:CPU's float normalisation runs bf16 dynamic-slice in fp32, and loop-
    invariant code motion then converts the WHOLE operand before the loop: an fp32 copy of the
    [V, D] table (+1.1 GiB at V=262144, D=1152). A uint16 view costs a bit copy instead
    (+0.55 GiB; XLA:CPU does not alias bitcast-convert). On TPU/GPU the bitcast would also be
    copied and nothing needs it, so there the slice is plain.
    """
    if size == x.shape[axis]:
        return x
    if not (bits and is_16bit_float(x)):
        return lax.dynamic_slice_in_dim(x, start, size, axis)
    raw = lax.dynamic_slice_in_dim(lax.bitcast_convert_type(x, jnp.uint16), start, size, axis)
    return lax.bitcast_convert_type(raw, x.dtype)


def put(x, update, start, axis):
    """`lax.dynamic_update_slice_in_dim` (x is fp32, int or raw uint16 here)."""
    return lax.dynamic_update_slice_in_dim(x, update.astype(x.dtype), start, axis)


def chunked_logsumexp(hidden, table, targets, *, C, Vc, bits, block_logits):
    """The online log-sum-exp over the vocabulary, one [B, C, Vc] block at a time: the running
    max m, the running sum s of exp(z - m) and the target's logit zt, each f32 [B, nC * C] over
    the time axis padded to chunks of C (log-sum-exp = m + log s). The cross-entropy's forward
    and GRPO's log-probs both run it; they differ only in `block_logits(h [B, C, D], e [Vc, D])
    -> f32 [B, C, Vc]` (soft-cap, temperature, rounding). The outer loop runs over vocabulary
    chunks, so the table is read once; the last chunk's already-covered rows are masked."""
    B = hidden.shape[0]
    V = table.shape[0]
    hp, nC = pad_time(hidden, C)
    tp, _ = pad_time(targets, C)  # padded steps get target 0; callers mask them

    def vocab_step(j, carry):
        start, keep = vocab_window(j, Vc, V)
        e = take(table, start, Vc, 0, bits)
        col = start + jnp.arange(Vc)

        def seq_step(i, carry):
            m, s, zt = (take(x, i * C, C, 1) for x in carry)
            z = block_logits(take(hp, i * C, C, 1, bits), e)
            hit = col == take(tp, i * C, C, 1)[..., None]
            if keep is not None:
                z, hit = jnp.where(keep, z, -jnp.inf), hit & keep
            m_new = jnp.maximum(m, jnp.max(z, axis=-1))
            s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(z - m_new[..., None]), axis=-1)
            zt = zt + jnp.sum(jnp.where(hit, z, 0.0), axis=-1)
            return tuple(put(x, y, i * C, 1) for x, y in zip(carry, (m_new, s, zt), strict=True))

        return lax.fori_loop(0, nC, seq_step, carry)

    shape = (B, nC * C)
    init = (
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros(shape, jnp.float32),
    )
    return lax.fori_loop(0, -(-V // Vc), vocab_step, init)
