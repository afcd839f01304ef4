"""The measured rollout sweep of notebooks 01 and 02 and benchmarks/bench_rollout.py.

For each point (batch, generation steps): time to first token (the prefill call), decode time
per generated token, tokens actually generated (counted, not assumed), tokens/s, the per-device
peak memory after the point, the KV cache tunix allocates per device, and an out-of-memory error
as a data point. The first call of each shape (compile + run) is reported apart and discarded;
the timings are medians of `trials` calls after it. Peak memory is a process-wide high-water
mark, so callers run points in increasing batch order (or each in a fresh process).
"""

from __future__ import annotations

import statistics

from shared import sizing
from shared.errors import BadInput
from shared.hardware import measure
from shared.hardware.sharding import abstract_like, bytes_per_device
from shared.rollout.sampler import abstract_sampling_state, random_prompts, rollout, state_shardings


def _timed_rollout(sampler, prompts, steps: int, mesh) -> dict:
    """One rollout, reduced to numbers at once: the final state (its KV cache) is dropped
    here, so two caches are never alive together and the peak belongs to one rollout."""
    result = rollout(sampler, prompts, steps, mesh=mesh)
    return {
        "prefill_s": result.prefill_s,
        "decode_s": result.decode_s,
        "tokens": result.tokens.copy(),
    }


def kv_bytes(sampler, batch: int, mesh) -> tuple[int, int]:
    """(all devices, one device) bytes of the KV cache the sampler allocates for `batch` rows,
    laid out as `state_shardings` lays it (batch over fsdp, KV heads over tp if they divide)."""
    cache = sampler.cache_config.cache_size
    state = abstract_sampling_state(sampler, batch, 1, cache - 1, 0.0, None, None, 0)
    kv = {
        name: {k: v for k, v in layer.items() if k in ("k", "v")}
        for name, layer in state.cache.items()
    }
    sharded = abstract_like(state, state_shardings(state, mesh)).cache
    return (
        sum(x.size * x.dtype.itemsize for layer in kv.values() for x in layer.values()),
        bytes_per_device(
            {name: {k: sharded[name][k] for k in layer} for name, layer in kv.items()}
        ),
    )


def closed_form_kv_per_device(
    dims: sizing.ModelDims, batch: int, cache_size: int, fsdp: int = 1, tp: int = 1
) -> int:
    """shared.sizing's KV cache divided as `state_shardings` lays it out: batch over "fsdp",
    KV heads over "tp" when they divide (dense models with one KV layout; `kv_bytes` reads the
    cache tunix actually allocates)."""
    return sizing.kv_cache_bytes(dims, batch, cache_size) // fsdp // (tp if dims.K % tp == 0 else 1)


# Copies of the KV cache a rollout holds at once: tunix 0.1.5 and 0.1.6 do not donate the
# Sampler's state, so decode holds the cache it reads and the one it writes; 0.1.7 on donate.
KV_COPIES = {"0.1.7": 1, "0.1.6": 2}


def closed_form_bytes_per_device(
    dims: sizing.ModelDims,
    batch: int,
    cache_size: int,
    fsdp: int = 1,
    tp: int = 1,
    semantics: str = "0.1.7",
) -> int:
    """Weights + KV cache per device, a rollout's lower bound: bf16 weights split over "tp"
    (replicated over "fsdp", as tunix samples) and `KV_COPIES[semantics]` caches of this
    device's share of the batch. The compiler adds the decode step's logits, activations and
    buffers; plan mode reads its bytes."""
    weights = sizing.param_counts(dims)["total"] * 2 // tp
    return weights + KV_COPIES[semantics] * closed_form_kv_per_device(
        dims, batch, cache_size, fsdp, tp
    )


def closed_form_max_batch(
    dims: sizing.ModelDims,
    usable_bytes: int,
    cache_size: int,
    fsdp: int = 1,
    tp: int = 1,
    semantics: str = "0.1.7",
) -> int:
    """The largest batch (a multiple of `fsdp`) whose closed form fits `usable_bytes` per
    device: an upper bound on what the compiler will allow."""
    one = closed_form_bytes_per_device(dims, fsdp, cache_size, fsdp, tp, semantics)
    two = closed_form_bytes_per_device(dims, 2 * fsdp, cache_size, fsdp, tp, semantics)
    return fsdp * max(0, (usable_bytes - (2 * one - two)) // (two - one))


def measure_point(
    sampler,
    mesh,
    vocab_size: int,
    *,
    batch: int,
    steps: int,
    prompt_len: int,
    trials: int,
    seed: int = 0,
) -> dict:
    """Time one (batch, steps) point; an out-of-memory error makes a row with status 'oom'.

    measure.time_fn times one function; a rollout needs its prefill and decode timed apart
    and its init left out, which rollout.rollout does, so the trials are counted here.
    """
    if trials < 1:
        raise BadInput(f"trials must be >= 1, got {trials}")
    prompts = random_prompts(batch, prompt_len, vocab_size, seed=seed)
    kv_total, kv_device = kv_bytes(sampler, batch, mesh)
    row = {
        "batch": batch,
        "steps": steps,
        "prompt_len": prompt_len,
        "cache_size": sampler.cache_config.cache_size,
        "kv_cache_bytes": kv_total,
        "kv_cache_bytes_per_device": kv_device,
    }

    def run():
        first = _timed_rollout(sampler, prompts, steps, mesh)
        return first, [_timed_rollout(sampler, prompts, steps, mesh) for _ in range(trials)]

    out, oom = measure.run_or_oom(run)
    row["peak_bytes_per_device"] = measure.peak_bytes_per_device()  # None on CPU
    if row["peak_bytes_per_device"] is not None:
        row["peak_includes_compiling"] = measure.peak_includes_compiling()
    if oom is not None:
        return {**row, "status": "oom", "error": oom}
    first, timed = out
    prefill_s = statistics.median(t["prefill_s"] for t in timed)
    decode_s = statistics.median(t["decode_s"] for t in timed)
    tokens = timed[-1]["tokens"]  # per row; greedy decoding repeats exactly
    total = int(tokens.sum())
    first_s = first["prefill_s"] + first["decode_s"]
    return {
        **row,
        "status": "ok",
        "trials": trials,
        "first_call_s": first_s,
        "compile_s": max(0.0, first_s - prefill_s - decode_s),
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "ttft_ms": 1e3 * prefill_s,
        "tokens": total,
        "tokens_per_row_min": int(tokens.min()),
        "tokens_per_row_max": int(tokens.max()),
        # the decode loop runs `steps` forward passes (tunix drops the last one's token)
        "decode_ms_per_step": 1e3 * decode_s / steps,
        # batch-wide: decode seconds per token it delivered (prefill's token not counted)
        "decode_ms_per_token": 1e3 * decode_s / max(1, total - batch),
        "tokens_per_s": total / (prefill_s + decode_s),
    }


def sweep(
    measure_one,
    points: list[tuple[int, int]],
    *,
    desc: str = "rollout points",
    progress: bool = True,
) -> list[dict]:
    """`measure_one(batch, steps) -> row` over points in the order given (callers sort them
    by increasing batch); after an out-of-memory batch, larger batches at the same steps are
    recorded as skipped rather than run."""
    from tqdm.auto import tqdm

    rows, oom_at = [], {}
    for batch, steps in tqdm(points, desc=desc, unit="point", disable=not progress):
        if steps in oom_at and batch >= oom_at[steps]:
            rows.append(
                {
                    "batch": batch,
                    "steps": steps,
                    "status": "skipped",
                    "error": f"batch {oom_at[steps]} ran out of memory",
                }
            )
            continue
        row = measure_one(batch, steps)
        if row["status"] == "oom":
            oom_at[steps] = min(batch, oom_at.get(steps, batch))
        rows.append(row)
    return rows


def aligned_pairs(rows: list[dict], step: int = 4) -> list[dict]:
    """Each multiple of 64 (of 8 when no batch reaches 64) against the batch `step` rows
    larger: the larger batch's decode cost per token over the aligned one's. A larger batch
    normally costs less per token (the weights are read once per step for more rows), so a
    ratio above 1 is the padding / tiling penalty of leaving the aligned size."""
    ok = {r["batch"]: r for r in rows if r.get("status") == "ok"}
    aligned = [b for b in sorted(ok) if b % 64 == 0] or [b for b in sorted(ok) if b % 8 == 0]
    return [
        {
            "aligned": b,
            "neighbour": b + step,
            "neighbour_cost_ratio": (
                ratio := ok[b + step]["decode_ms_per_token"] / ok[b]["decode_ms_per_token"]
            ),
            "aligned_wins": ratio > 1.0,
        }
        for b in aligned
        if b + step in ok
    ]


def summarize(rows: list[dict]) -> dict:
    """Best batch per token, largest that ran, first out of memory, aligned vs neighbours."""
    ok = [r for r in rows if r.get("status") == "ok"]
    oom = [r["batch"] for r in rows if r.get("status") == "oom"]
    if not ok:
        return {
            "best_batch": None,
            "largest_ran": None,
            "first_oom": min(oom, default=None),
            "aligned_pairs": [],
        }
    best = max(ok, key=lambda r: r["tokens_per_s"])
    return {
        "best_batch": best["batch"],
        "best_tokens_per_s": best["tokens_per_s"],
        "best_decode_ms_per_token": best["decode_ms_per_token"],
        "largest_ran": max(r["batch"] for r in ok),
        "first_oom": min(oom, default=None),
        "aligned_pairs": aligned_pairs(ok),
    }


def recommendation(summary: dict, rows: list[dict], where: str) -> str:
    """A paragraph written from the numbers (nothing in it is fixed in advance)."""
    if summary["best_batch"] is None:
        return f"No batch ran on {where}: every point ran out of memory or was skipped."
    ok = {r["batch"]: r for r in rows if r.get("status") == "ok"}
    best, largest = summary["best_batch"], summary["largest_ran"]
    text = (
        f"On {where}, batch {best} gives the highest throughput "
        f"({summary['best_tokens_per_s']:,.0f} tokens/s, "
        f"{summary['best_decode_ms_per_token']:.3g} ms of decode per token). "
    )
    if largest != best:
        ratio = ok[largest]["tokens_per_s"] / summary["best_tokens_per_s"]
        text += f"The largest batch that ran, {largest}, reaches {ratio:.0%} of that throughput. "
    text += (
        f"Batch {summary['first_oom']} ran out of memory, so the largest that fits lies "
        f"between {largest} and {summary['first_oom']}. "
        if summary["first_oom"]
        else f"Nothing ran out of memory up to batch {largest}. "
    )
    pairs = summary["aligned_pairs"]
    if pairs:
        won = [p for p in pairs if p["aligned_wins"]]
        detail = "; ".join(
            f"{p['neighbour']} vs {p['aligned']}: {p['neighbour_cost_ratio'] - 1:+.1%} per token"
            for p in pairs
        )
        text += (
            f"Aligned batches beat the batch 4 larger per token in {len(won)} of "
            f"{len(pairs)} comparisons ({detail})."
        )
    return text.strip()
