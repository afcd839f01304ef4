"""shared.logits' chunked top-k and loss against their references: bytes, time, exactness.

Notebook 03 (both halves) and benchmarks/bench_logits.py measure with these same functions, so
a notebook's live numbers and the committed ones its answer quotes come from one computation.
The approaches, by the names tables and figures use:

    top-k          "full logits"   materialise [B, T, V], then lax.top_k
                   "per-step scan" the field's workaround: one [B, D] @ [D, V] per time step
                   "chunked"       shared.logits.top_k_logits
    loss fwd+bwd   "naive loss"    [B, T, V] logits, fp32 log-softmax, jax.grad
                   "chunked loss"  shared.logits.cross_entropy (custom backward)
"""

from __future__ import annotations

import functools
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from shared import logits as L
from shared.plan.compiler import compiled

TOP_K, LOSS = "top-k", "loss fwd+bwd"


def top_k_fns(k: int, **chunks) -> dict:
    """The three ways to top-k logits, each fn(hidden, embedding) -> (values, indices)."""
    return {
        "full logits": lambda h, e: L.full_top_k_logits(h, e, k),
        "per-step scan": lambda h, e: L.per_step_top_k_logits(h, e, k),
        "chunked": lambda h, e: L.top_k_logits(h, e, k, **chunks),
    }


def loss_fns(**kw) -> dict:
    """The loss and its gradients, fn(hidden, embedding, targets) -> (loss, (d_h, d_e)).
    `kw` (softcap, chunk sizes) goes to the chunked loss; softcap to both."""
    naive = {"softcap": kw["softcap"]} if "softcap" in kw else {}
    return {
        name: jax.value_and_grad(functools.partial(fn, **args), argnums=(0, 1))
        for name, fn, args in (
            ("naive loss", L.full_cross_entropy, naive),
            ("chunked loss", L.cross_entropy, kw),
        )
    }


def approaches(k: int, h, e, t, methods=None) -> list[tuple[str, str, object, tuple]]:
    """(what, method, fn, args) for every approach (or those in `methods`), default chunks."""
    every = [(TOP_K, m, f, (h, e)) for m, f in top_k_fns(k).items()] + [
        (LOSS, m, f, (h, e, t)) for m, f in loss_fns().items()
    ]
    return [job for job in every if methods is None or job[1] in methods]


def memory_rows(
    batches,
    T: int,
    D: int,
    V: int,
    k: int,
    *,
    dtype=jnp.bfloat16,
    device=None,
    where: str = "",
    methods=None,
) -> list[dict]:
    """Per-device bytes of every approach (or those in `methods`) at each batch, compile only
    (nothing is allocated, so Gemma's real [V, D] works on a laptop); `device` a TPU target's
    abstract device. A program the TPU compiler refuses for lack of HBM is kept: what it asked
    for, a lower bound."""
    from tqdm.auto import tqdm

    sharding = jax.sharding.SingleDeviceSharding(device) if device is not None else None
    jobs = [
        (B, *job)
        for B in batches
        for job in approaches(k, *L.example_specs(B, T, D, V, dtype, sharding), methods)
    ]
    rows = []
    for B, what, method, fn, args in tqdm(jobs, desc=f"compile on {where}", unit="compile"):
        got = compiled.compile_lowered(jax.jit(fn).lower(*args))
        rows.append(
            {
                "where": where,
                "what": what,
                "method": method,
                "B": B,
                "T": T,
                "D": D,
                "V": V,
                "logits_bytes": B * T * V * jnp.dtype(dtype).itemsize,
                **{key: got[key] for key in ("temp_bytes", "total_bytes", "refused", "compile_s")},
            }
        )
    return rows


def round_robin(calls: list[tuple], rounds: int) -> tuple[list[float], list[list[tuple]]]:
    """Seconds of each (jitted fn, args): its first call (compile + run, the warm-up), then
    `rounds` rounds that call each once, so a burst of load from other jobs hits all alike.
    Returns (first-call seconds, per call of every round (wall seconds, CPU seconds)). CPU
    seconds are this process's, all threads: what the call computed, which other jobs' load on
    a shared machine does not inflate the way it inflates wall time."""
    from tqdm.auto import tqdm

    def call(fn, args):
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        return time.perf_counter() - wall, time.process_time() - cpu

    first = [call(*c)[0] for c in tqdm(calls, desc="compile + warm-up", unit="function")]
    runs = [[] for _ in calls]
    for _ in tqdm(range(rounds), desc="timing rounds", unit="round"):
        for c, times in zip(calls, runs, strict=True):
            times.append(call(*c))
    return first, runs


def time_rows(
    B: int, T: int, D: int, V: int, k: int, *, rounds: int = 3, dtype=jnp.bfloat16, seed: int = 0
) -> list[dict]:
    """Wall and CPU time after warm-up of every approach on the default device (round_robin):
    the fastest call of each (`min_s`, `min_cpu_s`) is what ratios compare."""
    jobs = approaches(k, *L.example_inputs(B, T, D, V, dtype, seed))
    first, runs = round_robin([(jax.jit(fn), args) for _, _, fn, args in jobs], rounds)
    return [
        {
            "what": what,
            "method": method,
            "B": B,
            "T": T,
            "D": D,
            "V": V,
            "min_s": min(w for w, _ in times),
            "min_cpu_s": min(c for _, c in times),
            "median_s": statistics.median(w for w, _ in times),
            "runs_s": [round(w, 4) for w, _ in times],
            "first_call_s": t0,
        }
        for (what, method, _, _), times, t0 in zip(jobs, runs, first, strict=True)
    ]


def ratios(rows: list[dict], value: str) -> dict:
    """The comparisons the answers quote, from rows of memory_rows (temp_bytes) or time_rows
    (min_s, min_cpu_s); None where a side is missing, inf where only the chunked side is 0."""
    got = {(r["what"], r["method"]): r[value] for r in rows}

    def over(a, b):
        x, y = got.get(a), got.get(b)
        return None if x is None or y is None else (x / y if y else float("inf") if x else None)

    return {
        "per_step_over_chunked": over((TOP_K, "per-step scan"), (TOP_K, "chunked")),
        "full_over_chunked": over((TOP_K, "full logits"), (TOP_K, "chunked")),
        "naive_loss_over_chunked": over((LOSS, "naive loss"), (LOSS, "chunked loss")),
    }


def top_k_agreement(values, indices, ref_values, ref_indices, h, e) -> dict:
    """Values and indices against a reference top-(k+1), with ties counted, not assumed away.

    A position is tied when its reference value equals a neighbour's in the sorted reference
    row. `indices_in_fp32_order`: the share of indices equal to the top-k of the UNROUNDED fp32
    logits of (h, e); a program that ranks before rounding to bf16 scores 1 there, one that
    breaks bf16 ties by the lower index (lax.top_k on bf16 logits) less."""
    v, i = np.asarray(values, np.float32), np.asarray(indices)
    ref_v, ref_i = np.asarray(ref_values, np.float32), np.asarray(ref_indices)
    k = v.shape[-1]
    gaps = np.diff(ref_v, axis=-1)  # [..., k]: zero where two neighbours are equal
    tied = np.zeros(v.shape, bool)
    tied[..., 1:] |= gaps[..., : k - 1] == 0
    tied |= gaps[..., :k] == 0
    same = i == ref_i[..., :k]
    order = jax.lax.top_k(jnp.einsum("btd,vd->btv", h, e, preferred_element_type=jnp.float32), k)[1]
    return {
        "positions": v.size,
        "values_equal": float(np.mean(v == ref_v[..., :k])),
        "max_abs_value_err": float(np.max(np.abs(v - ref_v[..., :k]))),
        "tied_positions": int(tied.sum()),
        "index_mismatch_untied": int((~same & ~tied).sum()),
        "index_mismatch_tied": int((~same & tied).sum()),
        "indices_in_fp32_order": float(np.mean(i == np.asarray(order))),
    }


def loss_errors(h, e, t, **kw) -> list[dict]:
    """The naive and the chunked loss and gradients against an fp32 naive reference computed
    from the same (rounded) inputs; `kw` as in loss_fns."""
    cap = {"softcap": kw["softcap"]} if "softcap" in kw else {}
    ref_loss, ref_grads = jax.jit(loss_fns(**cap)["naive loss"])(
        h.astype(jnp.float32), e.astype(jnp.float32), t
    )
    rows = []
    for method, fn in loss_fns(**kw).items():
        loss, grads = jax.jit(fn)(h, e, t)
        row = {
            "dtype": jnp.dtype(h.dtype).name,
            "method": method,
            "loss": float(loss),
            "loss_abs_err": abs(float(loss) - float(ref_loss)),
        }
        for name, g, ref in zip(("d_hidden", "d_embedding"), grads, ref_grads, strict=True):
            diff = g.astype(jnp.float32) - ref
            row[f"{name}_rel_err"] = float(jnp.linalg.norm(diff) / jnp.linalg.norm(ref))
        rows.append(row)
    return rows


def exactness(
    B: int,
    T: int,
    D: int,
    V: int,
    k: int,
    chunk_size: int,
    vocab_chunk_size: int,
    softcap: float,
    seed: int = 0,
) -> tuple[list[dict], list[dict]]:
    """Random hidden states (logits of std ~3) in fp32 and bf16: every top-k approach against
    lax.top_k of the full logits, and both losses (with and without `softcap`) against fp32,
    the chunked ones with the given chunk sizes. Returns (top-k rows, loss rows)."""
    chunks = {"chunk_size": chunk_size, "vocab_chunk_size": vocab_chunk_size}
    h32, e32, t = L.example_inputs(B, T, D, V, jnp.float32, seed=seed)
    t = t.at[0, : T // 10].set(-1)  # some ignored targets
    case = f"random B={B} T={T} D={D} V={V}"
    top_rows, loss_rows = [], []
    for dtype in (jnp.float32, jnp.bfloat16):
        h, e = h32.astype(dtype), e32.astype(dtype)
        ref = jax.jit(L.full_top_k_logits, static_argnums=2)(h, e, k + 1)
        outs = {m: jax.jit(f)(h, e) for m, f in top_k_fns(k, **chunks).items()}
        top_rows += [
            {
                "case": case,
                "dtype": jnp.dtype(dtype).name,
                "method": m,
                **top_k_agreement(*out, *ref, h, e),
            }
            for m, out in outs.items()
        ]
        loss_rows += [
            {"case": case, "softcap": cap, **row}
            for cap in (None, softcap)
            for row in loss_errors(h, e, t, softcap=cap, **chunks)
        ]
    return top_rows, loss_rows
