"""Top-k logits and the cross-entropy loss without materialising [B, T, V].

With Gemma's V = 262,144 the logits `hidden @ embedding.T` are the largest tensor of a
teacher-forced pass ([8, 1024, 262144] bf16 = 4 GiB). Both public functions here tile that
product into blocks of [B, C, Vc] (C time steps by Vc vocabulary rows) and never hold more
than a few blocks at once:

- the OUTER loop runs over vocabulary chunks, so the [V, D] table is read from memory once
  per call (the per-time-step scan reads all of it once per token);
- the INNER loop runs over sequence chunks of C time steps; the batch axis stays whole inside
  a block, so `hidden` sharded over its batch axis stays sharded and no device gathers it.

`top_k_logits` keeps a running top-k ([B, T, k]) that each vocabulary chunk merges into;
`cross_entropy` keeps a running log-sum-exp and has a `custom_vjp` whose backward recomputes
each block of logits instead of storing them. Chunk sizes that do not divide T or V work: T is
padded (padded rows are masked), and the last vocabulary chunk is shifted back to end at V with
its already-covered rows masked, so the table is never padded or copied (except by XLA:CPU,
see `_take`).

Cost: top-k does one pass of matmuls like the full product. The loss does 4 (forward; backward
recomputes the logits, then d hidden and d embedding) where the naive loss does 3, so on a
compute-bound accelerator expect ~4/3 of the naive matmul time, in exchange for memory.

References (short on purpose, for tests, the benchmark and notebook 03):
`full_top_k_logits`, `full_cross_entropy` (materialise everything) and
`per_step_top_k_logits` (the published workaround: one [B, D] @ [D, V] per time step).
"""

import functools
import numbers

import jax
import jax.numpy as jnp
from jax import lax

from shared.errors import BadInput

# Default blocks, from the sweep of benchmarks/bench_logits.py in results/logits_cpu.json: wall
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


def full_top_k_logits(hidden, embedding, k):
    """Reference: materialise [B, T, V] logits, then top-k (same kernel as `top_k_logits`)."""
    return _top_k(hidden @ embedding.T, k)


def per_step_top_k_logits(hidden, embedding, k):
    """Reference: the field's workaround, one time step ([B, D] @ [D, V], top-k) per scan step."""
    _, (values, indices) = lax.scan(
        lambda _, h: (None, _top_k(h @ embedding.T, k)), None, jnp.swapaxes(hidden, 0, 1)
    )
    return jnp.swapaxes(values, 0, 1), jnp.swapaxes(indices, 0, 1)


def full_cross_entropy(hidden, embedding, targets, *, softcap=None):
    """Reference: the naive loss. Logits [B, T, V] in the input dtype, log-softmax in fp32.

    Mean over tokens whose target is >= 0 (negative targets are ignored), like `cross_entropy`.
    """
    logits = (hidden @ embedding.T).astype(jnp.float32)
    if softcap is not None:
        logits = softcap * jnp.tanh(logits / softcap)
    logp = jax.nn.log_softmax(logits, axis=-1)
    valid = targets >= 0
    tok = -jnp.take_along_axis(logp, jnp.where(valid, targets, 0)[..., None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(valid, tok, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def top_k_logits(hidden, embedding, k, *, chunk_size=None, vocab_chunk_size=None):
    """Top-k of `hidden @ embedding.T` without materialising it.

    hidden [B, T, D], embedding [V, D] -> (values [B, T, k], indices [B, T, k] int32), equal to
    `lax.top_k(hidden @ embedding.T, k)`: values are the logits rounded to the result dtype of
    (hidden, embedding) exactly as the full product would be, and ties keep the lower index.

    chunk_size: time steps per block (default: `DEFAULT_BLOCK_TOKENS // B`, evened out over T);
    vocab_chunk_size: vocabulary rows per block (default `DEFAULT_VOCAB_CHUNK`, at least k).
    Neither needs to divide T or V. Temp memory is a few fp32 blocks of [B, C, Vc] plus the
    running top-k [B, T, k]; XLA:CPU adds one copy of the table (see `_take`).
    """
    B, T, _, V = _check(hidden, embedding)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= V:
        raise BadInput(f"top_k_logits: k={k!r} must be an integer in [1, V={V}]")
    C = _seq_chunk(chunk_size, B, T)
    Vc = _vocab_chunk(vocab_chunk_size, V, k, DEFAULT_VOCAB_CHUNK)
    return _per_platform(functools.partial(_top_k_impl, k=k, C=C, Vc=Vc), hidden, embedding)


def _top_k_impl(hidden, embedding, *, k, C, Vc, bits):
    B, T, _ = hidden.shape
    V = embedding.shape[0]
    out_dtype = jnp.result_type(hidden.dtype, embedding.dtype)
    hp, nC = _pad_time(hidden, C)  # [B, nC * C, D]
    nV = -(-V // Vc)

    def block(i, j):
        """Top-k of one [B, C, Vc] block: fp32 values (exactly the rounded logits), indices."""
        start, keep = _vocab_window(j, Vc, V)
        z = jnp.einsum(
            "bcd,vd->bcv",
            _take(hp, i * C, C, 1, bits),
            _take(embedding, start, Vc, 0, bits),
            preferred_element_type=jnp.float32,
        )
        z = z.astype(out_dtype).astype(jnp.float32)  # round as the full product would be
        if keep is not None:
            z = jnp.where(keep, z, -jnp.inf)
        v, idx = lax.top_k(z, k)
        return v, idx + start

    def first_chunk(i, best):
        v, idx = block(i, 0)
        return tuple(_put(b, x, i * C, 1) for b, x in zip(best, (v, idx), strict=True))

    def merge_chunk(j, best):
        def seq_step(i, best):
            v, idx = block(i, j)
            old_v, old_i = (_take(b, i * C, C, 1) for b in best)
            # Running entries come first, so on ties the lower index wins, as in lax.top_k.
            v, pos = lax.top_k(jnp.concatenate([old_v, v], -1), k)
            idx = jnp.take_along_axis(jnp.concatenate([old_i, idx], -1), pos, axis=-1)
            return _put(best[0], v, i * C, 1), _put(best[1], idx, i * C, 1)

        return lax.fori_loop(0, nC, seq_step, best)

    Tp = nC * C
    best = (jnp.zeros((B, Tp, k), jnp.float32), jnp.zeros((B, Tp, k), jnp.int32))
    best = lax.fori_loop(0, nC, first_chunk, best)
    best = lax.fori_loop(1, nV, merge_chunk, best)
    return best[0][:, :T].astype(out_dtype), best[1][:, :T]


def cross_entropy(
    hidden, embedding, targets, *, chunk_size=None, softcap=None, vocab_chunk_size=None
):
    """Mean token cross-entropy of softmax(hidden @ embedding.T) against `targets`, chunked.

    hidden [B, T, D], embedding [V, D], targets [B, T] integers in [0, V); negative targets are
    ignored (the mean is over the others; 0.0 if there are none). `softcap` applies
    softcap * tanh(z / softcap) to the logits first (Gemma 2 style). Returns a float32 scalar.
    chunk_size / vocab_chunk_size as in `top_k_logits` (default vocabulary chunk
    `DEFAULT_VOCAB_CHUNK_LOSS`).

    Precision: logits, log-sum-exp and the softmax are fp32 (the matmul accumulates in fp32, the
    logits are never rounded to bf16, which makes this slightly MORE accurate than the naive
    bf16-logits loss). Gradients: `custom_vjp`; the backward recomputes each block of logits
    from the saved fp32 log-sum-exp [B, T].
    - d embedding: because the outer loop is over vocabulary chunks, each chunk's gradient
      [Vc, D] is accumulated in fp32 over all sequence chunks and rounded to the embedding dtype
      once. So no fp32 [V, D] buffer exists (1.2 GB at Gemma 3 size) and there is no repeated
      bf16 rounding of a running sum either (a seq-outer loop would need one or the other).
    - d hidden: accumulated across vocabulary chunks in an fp32 [B, T, D] buffer (37 MB at
      B=8, T=1024, D=1152), rounded to the hidden dtype at the end.
    The benchmark's "accuracy" section measures the resulting error against an fp32 reference.
    """
    B, T, _, V = _check(hidden, embedding)
    if tuple(targets.shape) != (B, T) or not jnp.issubdtype(targets.dtype, jnp.integer):
        raise BadInput(
            f"cross_entropy: targets must be integers of shape [B, T] = {(B, T)}, "
            f"got {targets.dtype} {tuple(targets.shape)}"
        )
    if softcap is not None and not (isinstance(softcap, int | float) and softcap > 0):
        raise BadInput(f"cross_entropy: softcap={softcap!r} must be None or a number > 0")
    C = _seq_chunk(chunk_size, B, T)
    Vc = _vocab_chunk(vocab_chunk_size, V, 1, DEFAULT_VOCAB_CHUNK_LOSS)
    return _chunked_ce(hidden, embedding, targets, C, Vc, softcap and float(softcap))


def example_inputs(B, T, D, V, dtype, seed=0):
    """Random hidden [B, T, D], table [V, D] (logits of std ~3, like a trained LM head) and
    targets [B, T]: what the benchmark, notebook 03 and the tests measure with."""
    kh, ke, kt = jax.random.split(jax.random.PRNGKey(seed), 3)
    h = jax.random.normal(kh, (B, T, D), jnp.float32).astype(dtype)
    e = (3.0 / D**0.5 * jax.random.normal(ke, (V, D), jnp.float32)).astype(dtype)
    return h, e, jax.random.randint(kt, (B, T), 0, V)


def example_specs(B, T, D, V, dtype, sharding=None):
    """The same as ShapeDtypeStructs, for compile-only memory measurements."""

    def spec(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding)

    return spec((B, T, D), dtype), spec((V, D), dtype), spec((B, T), jnp.int32)


# ---------------------------------------------------------------------------------------------
# cross-entropy internals


def _logits_block(h, e, softcap):
    """fp32 logits of one block [B, C, Vc] and d(capped)/d(raw) (None without softcap)."""
    z = jnp.einsum("bcd,vd->bcv", h, e, preferred_element_type=jnp.float32)
    if softcap is None:
        return z, None
    th = jnp.tanh(z / softcap)
    return softcap * th, 1.0 - th * th


def _ce_forward(hidden, embedding, targets, *, C, Vc, softcap, bits):
    B, T, _ = hidden.shape
    V = embedding.shape[0]
    hp, nC = _pad_time(hidden, C)
    tp, _ = _pad_time(targets, C)  # padded steps get target 0 and are masked below
    nV = -(-V // Vc)

    def vocab_step(j, carry):
        start, keep = _vocab_window(j, Vc, V)
        e = _take(embedding, start, Vc, 0, bits)
        col = start + jnp.arange(Vc)

        def seq_step(i, carry):
            m, s, zt = (_take(x, i * C, C, 1) for x in carry)
            t = _take(tp, i * C, C, 1)
            z, _ = _logits_block(_take(hp, i * C, C, 1, bits), e, softcap)
            if keep is not None:
                z = jnp.where(keep, z, -jnp.inf)
            m_new = jnp.maximum(m, jnp.max(z, axis=-1))
            s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(z - m_new[..., None]), axis=-1)
            hit = col == t[..., None]
            if keep is not None:
                hit = hit & keep
            zt = zt + jnp.sum(jnp.where(hit, z, 0.0), axis=-1)
            return tuple(_put(x, y, i * C, 1) for x, y in zip(carry, (m_new, s, zt), strict=True))

        return lax.fori_loop(0, nC, seq_step, carry)

    shape = (B, nC * C)
    init = (
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros(shape, jnp.float32),
    )
    m, s, zt = lax.fori_loop(0, nV, vocab_step, init)
    lse = m + jnp.log(s)  # [B, nC * C]
    valid = (tp >= 0) & (jnp.arange(nC * C) < T)
    n = jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)
    loss = jnp.sum(jnp.where(valid, lse - zt, 0.0)) / n
    return loss, lse, valid, n


def _ce_backward_impl(hidden, embedding, targets, lse, scale, *, C, Vc, softcap, bits):
    T = hidden.shape[1]
    V, D = embedding.shape
    hp, nC = _pad_time(hidden, C)
    tp, _ = _pad_time(targets, C)
    nV = -(-V // Vc)
    mm_dtype = jnp.result_type(hidden.dtype, embedding.dtype)
    # With bits, d_emb is carried as raw 16-bit patterns (see `_take`); else in its own dtype.
    as_bits = bits and _is_16bit_float(embedding)

    def vocab_step(j, carry):
        d_hidden, d_emb = carry
        start, keep = _vocab_window(j, Vc, V)
        e = _take(embedding, start, Vc, 0, bits)
        col = start + jnp.arange(Vc)

        def seq_step(i, carry):
            d_e, d_hidden = carry
            h = _take(hp, i * C, C, 1, bits)
            t, lse_c, sc = (_take(x, i * C, C, 1) for x in (tp, lse, scale))
            z, dcap = _logits_block(h, e, softcap)
            dz = (jnp.exp(z - lse_c[..., None]) - (col == t[..., None])) * sc[..., None]
            if dcap is not None:
                dz = dz * dcap
            if keep is not None:
                dz = jnp.where(keep, dz, 0.0)
            dz = dz.astype(mm_dtype)
            d_e = d_e + jnp.einsum("bcv,bcd->vd", dz, h, preferred_element_type=jnp.float32)
            dh = _take(d_hidden, i * C, C, 1)
            dh = dh + jnp.einsum("bcv,vd->bcd", dz, e, preferred_element_type=jnp.float32)
            return d_e, _put(d_hidden, dh, i * C, 1)

        d_e, d_hidden = lax.fori_loop(0, nC, seq_step, (jnp.zeros((Vc, D), jnp.float32), d_hidden))
        d_e = d_e.astype(embedding.dtype)
        if as_bits:
            d_e = lax.bitcast_convert_type(d_e, d_emb.dtype)
        if keep is not None:  # the last chunk's first rows were written by the chunk before
            d_e = jnp.where(keep[:, None], d_e, _take(d_emb, start, Vc, 0))
        return d_hidden, _put(d_emb, d_e, start, 0)

    d_emb = jnp.zeros(embedding.shape, jnp.uint16 if as_bits else embedding.dtype)
    d_hidden, d_emb = lax.fori_loop(0, nV, vocab_step, (jnp.zeros(hp.shape, jnp.float32), d_emb))
    if as_bits:
        d_emb = lax.bitcast_convert_type(d_emb, embedding.dtype)
    return d_hidden[:, :T].astype(hidden.dtype), d_emb


def _ce_primal(hidden, embedding, targets, C, Vc, softcap):
    return _ce_fwd(hidden, embedding, targets, C, Vc, softcap)[0]


def _ce_fwd(hidden, embedding, targets, C, Vc, softcap):
    fwd = functools.partial(_ce_forward, C=C, Vc=Vc, softcap=softcap)
    loss, lse, valid, n = _per_platform(fwd, hidden, embedding, targets)
    return loss, (hidden, embedding, targets, lse, valid, n)


def _ce_bwd(C, Vc, softcap, res, g):
    hidden, embedding, targets, lse, valid, n = res
    scale = jnp.where(valid, g / n, 0.0)  # d loss / d token loss, 0 where ignored or padded
    bwd = functools.partial(_ce_backward_impl, C=C, Vc=Vc, softcap=softcap)
    d_hidden, d_emb = _per_platform(bwd, hidden, embedding, targets, lse, scale)
    return d_hidden, d_emb, None


_chunked_ce = jax.custom_vjp(_ce_primal, nondiff_argnums=(3, 4, 5))
_chunked_ce.defvjp(_ce_fwd, _ce_bwd)


# ---------------------------------------------------------------------------------------------
# shared helpers


def _top_k(z, k):
    """lax.top_k, with bf16/fp16 values compared in fp32 on CPU.

    Exact (the upcast is lossless, so order and ties are unchanged); XLA's CPU TopK kernel only
    handles fp32 and sorts other dtypes, which measured ~80x slower for [1024, 32768] bf16.
    Other backends run top-k in the input dtype.
    """
    if z.dtype == jnp.float32:
        return tuple(lax.top_k(z, k))

    def cpu(z):
        v, i = lax.top_k(z.astype(jnp.float32), k)
        return v.astype(z.dtype), i

    return lax.platform_dependent(z, cpu=cpu, default=lambda z: tuple(lax.top_k(z, k)))


def _check(hidden, embedding):
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


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BadInput(f"{name}={value!r} must be a positive integer or None")
    return int(value)


def _seq_chunk(chunk_size, B, T):
    if chunk_size is None:
        c_max = max(1, DEFAULT_BLOCK_TOKENS // max(B, 1))
        return -(-T // -(-T // c_max)) if T else 1  # fewest chunks, evened out: least padding
    return min(_positive_int("chunk_size", chunk_size), max(T, 1))


def _vocab_chunk(vocab_chunk_size, V, k, default):
    if vocab_chunk_size is None:
        return min(V, max(default, k))
    Vc = _positive_int("vocab_chunk_size", vocab_chunk_size)
    if Vc < k:
        raise BadInput(f"vocab_chunk_size={Vc} must be >= k={k}")
    return min(Vc, V)


def _vocab_window(j, Vc, V):
    """Start row of vocabulary chunk j and, if chunks overlap, the mask of its new rows.

    The last chunk is shifted back to end at V (no padding copy of the table); its rows before
    j * Vc were covered by the previous chunk and are masked. `keep` is None when Vc divides V.
    """
    if V % Vc == 0:
        return j * Vc, None
    start = jnp.minimum(j * Vc, V - Vc)
    return start, start + jnp.arange(Vc) >= j * Vc


def _pad_time(x, C):
    """Zero-pad axis 1 (time) of x up to a multiple of C; returns (padded, number of chunks)."""
    T = x.shape[1]
    nC = -(-T // C)
    if nC * C != T:
        x = jnp.pad(x, [(0, 0), (0, nC * C - T)] + [(0, 0)] * (x.ndim - 2))
    return x, nC


def _is_16bit_float(x):
    return jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize == 2


def _per_platform(fn, *args):
    """`fn(*args, bits=True)` when lowered for CPU, `bits=False` for every other platform."""
    return lax.platform_dependent(
        *args, cpu=functools.partial(fn, bits=True), default=functools.partial(fn, bits=False)
    )


def _take(x, start, size, axis, bits=False):
    """`lax.dynamic_slice_in_dim`; with `bits`, 16-bit floats are sliced as uint16 patterns.

    Why `bits` on CPU: XLA:CPU's float normalisation runs bf16 dynamic-slice in fp32, and loop-
    invariant code motion then converts the WHOLE operand before the loop: an fp32 copy of the
    [V, D] table (+1.1 GiB at V=262144, D=1152). A uint16 view costs a bit copy instead
    (+0.55 GiB; XLA:CPU does not alias bitcast-convert). On TPU/GPU the bitcast would also be
    copied and nothing needs it, so there the slice is plain.
    """
    if size == x.shape[axis]:
        return x
    if not (bits and _is_16bit_float(x)):
        return lax.dynamic_slice_in_dim(x, start, size, axis)
    raw = lax.dynamic_slice_in_dim(lax.bitcast_convert_type(x, jnp.uint16), start, size, axis)
    return lax.bitcast_convert_type(raw, x.dtype)


def _put(x, update, start, axis):
    """`lax.dynamic_update_slice_in_dim` (x is fp32, int or raw uint16 here)."""
    return lax.dynamic_update_slice_in_dim(x, update.astype(x.dtype), start, axis)


__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "DEFAULT_VOCAB_CHUNK",
    "DEFAULT_VOCAB_CHUNK_LOSS",
    "cross_entropy",
    "full_cross_entropy",
    "full_top_k_logits",
    "per_step_top_k_logits",
    "top_k_logits",
]
