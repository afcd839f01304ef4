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
see `take`).

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
from shared.logits.tiling import (
    DEFAULT_VOCAB_CHUNK,
    DEFAULT_VOCAB_CHUNK_LOSS,
    check_inputs,
    chunked_logsumexp,
    is_16bit_float,
    pad_time,
    per_platform,
    put,
    seq_chunk,
    take,
    vocab_chunk,
    vocab_window,
)


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
    running top-k [B, T, k]; XLA:CPU adds one copy of the table (see `take`).
    """
    B, T, _, V = check_inputs(hidden, embedding)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= V:
        raise BadInput(f"top_k_logits: k={k!r} must be an integer in [1, V={V}]")
    C = seq_chunk(chunk_size, B, T)
    Vc = vocab_chunk(vocab_chunk_size, V, k, DEFAULT_VOCAB_CHUNK)
    return per_platform(functools.partial(_top_k_impl, k=k, C=C, Vc=Vc), hidden, embedding)


def _top_k_impl(hidden, embedding, *, k, C, Vc, bits):
    B, T, _ = hidden.shape
    V = embedding.shape[0]
    out_dtype = jnp.result_type(hidden.dtype, embedding.dtype)
    hp, nC = pad_time(hidden, C)  # [B, nC * C, D]
    nV = -(-V // Vc)

    def block(i, j):
        """Top-k of one [B, C, Vc] block: fp32 values (exactly the rounded logits), indices."""
        start, keep = vocab_window(j, Vc, V)
        z = jnp.einsum(
            "bcd,vd->bcv",
            take(hp, i * C, C, 1, bits),
            take(embedding, start, Vc, 0, bits),
            preferred_element_type=jnp.float32,
        )
        z = z.astype(out_dtype).astype(jnp.float32)  # round as the full product would be
        if keep is not None:
            z = jnp.where(keep, z, -jnp.inf)
        v, idx = lax.top_k(z, k)
        return v, idx + start

    def first_chunk(i, best):
        v, idx = block(i, 0)
        return tuple(put(b, x, i * C, 1) for b, x in zip(best, (v, idx), strict=True))

    def merge_chunk(j, best):
        def seq_step(i, best):
            v, idx = block(i, j)
            old_v, old_i = (take(b, i * C, C, 1) for b in best)
            # Running entries come first, so on ties the lower index wins, as in lax.top_k.
            v, pos = lax.top_k(jnp.concatenate([old_v, v], -1), k)
            idx = jnp.take_along_axis(jnp.concatenate([old_i, idx], -1), pos, axis=-1)
            return put(best[0], v, i * C, 1), put(best[1], idx, i * C, 1)

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
    B, T, _, V = check_inputs(hidden, embedding)
    if tuple(targets.shape) != (B, T) or not jnp.issubdtype(targets.dtype, jnp.integer):
        raise BadInput(
            f"cross_entropy: targets must be integers of shape [B, T] = {(B, T)}, "
            f"got {targets.dtype} {tuple(targets.shape)}"
        )
    if softcap is not None and not (isinstance(softcap, int | float) and softcap > 0):
        raise BadInput(f"cross_entropy: softcap={softcap!r} must be None or a number > 0")
    C = seq_chunk(chunk_size, B, T)
    Vc = vocab_chunk(vocab_chunk_size, V, 1, DEFAULT_VOCAB_CHUNK_LOSS)
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
    T = hidden.shape[1]
    m, s, zt = chunked_logsumexp(
        hidden,
        embedding,
        targets,
        C=C,
        Vc=Vc,
        bits=bits,
        block_logits=lambda h, e: _logits_block(h, e, softcap)[0],
    )
    lse = m + jnp.log(s)  # [B, nC * C]
    tp, nC = pad_time(targets, C)
    valid = (tp >= 0) & (jnp.arange(nC * C) < T)
    n = jnp.maximum(jnp.sum(valid), 1).astype(jnp.float32)
    loss = jnp.sum(jnp.where(valid, lse - zt, 0.0)) / n
    return loss, lse, valid, n


def _ce_backward_impl(hidden, embedding, targets, lse, scale, *, C, Vc, softcap, bits):
    T = hidden.shape[1]
    V, D = embedding.shape
    hp, nC = pad_time(hidden, C)
    tp, _ = pad_time(targets, C)
    nV = -(-V // Vc)
    mm_dtype = jnp.result_type(hidden.dtype, embedding.dtype)
    # With bits, d_emb is carried as raw 16-bit patterns (see `take`); else in its own dtype.
    as_bits = bits and is_16bit_float(embedding)

    def vocab_step(j, carry):
        d_hidden, d_emb = carry
        start, keep = vocab_window(j, Vc, V)
        e = take(embedding, start, Vc, 0, bits)
        col = start + jnp.arange(Vc)

        def seq_step(i, carry):
            d_e, d_hidden = carry
            h = take(hp, i * C, C, 1, bits)
            t, lse_c, sc = (take(x, i * C, C, 1) for x in (tp, lse, scale))
            z, dcap = _logits_block(h, e, softcap)
            dz = (jnp.exp(z - lse_c[..., None]) - (col == t[..., None])) * sc[..., None]
            if dcap is not None:
                dz = dz * dcap
            if keep is not None:
                dz = jnp.where(keep, dz, 0.0)
            dz = dz.astype(mm_dtype)
            d_e = d_e + jnp.einsum("bcv,bcd->vd", dz, h, preferred_element_type=jnp.float32)
            dh = take(d_hidden, i * C, C, 1)
            dh = dh + jnp.einsum("bcv,vd->bcd", dz, e, preferred_element_type=jnp.float32)
            return d_e, put(d_hidden, dh, i * C, 1)

        d_e, d_hidden = lax.fori_loop(0, nC, seq_step, (jnp.zeros((Vc, D), jnp.float32), d_hidden))
        d_e = d_e.astype(embedding.dtype)
        if as_bits:
            d_e = lax.bitcast_convert_type(d_e, d_emb.dtype)
        if keep is not None:  # the last chunk's first rows were written by the chunk before
            d_e = jnp.where(keep[:, None], d_e, take(d_emb, start, Vc, 0))
        return d_hidden, put(d_emb, d_e, start, 0)

    d_emb = jnp.zeros(embedding.shape, jnp.uint16 if as_bits else embedding.dtype)
    d_hidden, d_emb = lax.fori_loop(0, nV, vocab_step, (jnp.zeros(hp.shape, jnp.float32), d_emb))
    if as_bits:
        d_emb = lax.bitcast_convert_type(d_emb, embedding.dtype)
    return d_hidden[:, :T].astype(hidden.dtype), d_emb


def _ce_primal(hidden, embedding, targets, C, Vc, softcap):
    return _ce_fwd(hidden, embedding, targets, C, Vc, softcap)[0]


def _ce_fwd(hidden, embedding, targets, C, Vc, softcap):
    fwd = functools.partial(_ce_forward, C=C, Vc=Vc, softcap=softcap)
    loss, lse, valid, n = per_platform(fwd, hidden, embedding, targets)
    return loss, (hidden, embedding, targets, lse, valid, n)


def _ce_bwd(C, Vc, softcap, res, g):
    hidden, embedding, targets, lse, valid, n = res
    scale = jnp.where(valid, g / n, 0.0)  # d loss / d token loss, 0 where ignored or padded
    bwd = functools.partial(_ce_backward_impl, C=C, Vc=Vc, softcap=softcap)
    d_hidden, d_emb = per_platform(bwd, hidden, embedding, targets, lse, scale)
    return d_hidden, d_emb, None


_chunked_ce = jax.custom_vjp(_ce_primal, nondiff_argnums=(3, 4, 5))
_chunked_ce.defvjp(_ce_fwd, _ce_bwd)


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
