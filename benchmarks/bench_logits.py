"""Benchmark `shared/logits.py`: full materialisation vs per-time-step scan vs chunked (ours).

Default run (benchmarks/results/03_logits_cpu.json, what notebook 03_sparse_logits_exactness and
the memory part of 03_sparse_logits_fit quote), for top-k logits and the loss forward+backward:
- memory: XLA's per-device temporaries at the real Gemma 3 size (compile only, nothing is
  allocated), on the local backend and, when libtpu is installed, for one chip of a deviceless
  TPU target (`--tpu-target`, the same jitted functions);
- time: wall time after warm-up at a time size (`--time-B/-T/-V`, default the memory size; a
  CPU cannot run 5 TFLOP per call in minutes), the minimum of `--repeats` round-robin rounds;
- sweep: temporaries and time per (chunk_size, vocab_chunk_size), timed round-robin (the
  minimum of the rounds): what the defaults in `shared/logits.py` were chosen from;
- exactness: values, indices (ties counted), loss and gradients against full materialisation
  and an fp32 reference, at the shape the exactness notebook uses by default; and what a bf16
  running sum of d embedding would cost in accuracy (why the loss accumulates per vocab chunk);
- the targets of the issue that introduced `shared/logits.py`, each with its measured ratio.

    JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --time-T 128 --time-V 65536 \\
        --out benchmarks/results/03_logits_cpu.json

`--fit` instead writes what notebook 03_sparse_logits_fit quotes: the largest teacher-forced
forward batch per logits mode (`shared.plan.max_batch` on the `forward` workload, full [B, T, V]
logits vs chunked top-k) for `--model` on `--target` at T = `--T`, every probe, and the time and
dollars of scoring `--score-sequences` sequences at each mode's largest batch. Plan results are
cached in .cache/plan (a gemma3-1b search is ~15 compiles, tens of minutes on 2 cores):

    JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --fit --model gemma3-1b \\
        --target v5e-1 --out benchmarks/results/logits_fit.json

(JAX_PLATFORMS=cpu keeps JAX from probing for a TPU; libtpu still compiles for the target.)
On a GPU, run the default without JAX_PLATFORMS and the --time-* flags (times at the full size)
and with another --out, e.g. benchmarks/results/logits_h100.json.
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile only: no lock on a TPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from shared import hardware, plan  # noqa: E402
from shared import logits as L  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402
from shared.logits import compare  # noqa: E402
from shared.plan.search.view import probe_rows  # noqa: E402
from shared.plan.slices import budget  # noqa: E402
from shared.report import results  # noqa: E402

MiB = 2**20
EXACT = {
    "B": 2,
    "T": 100,
    "D": 64,
    "V": 5000,
    "k": 128,
    "chunk_size": 24,
    "vocab_chunk_size": 1000,
    "softcap": 30.0,
}  # notebook 03_sparse_logits_exactness's


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--D", type=int, default=1152)
    p.add_argument("--V", type=int, default=262144)
    p.add_argument("--k", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--time-B", type=int, help="batch for wall times (default --B)")
    p.add_argument("--time-T", type=int, help="sequence length for wall times (default --T)")
    p.add_argument("--time-V", type=int, help="vocabulary for wall times (default --V)")
    p.add_argument(
        "--chunk-sizes",
        default="8:8192,128:2048,128:32768,32:32768",
        help="sweep, comma-separated chunk_size:vocab_chunk_size pairs (time steps:rows)",
    )
    p.add_argument("--repeats", type=int, default=3, help="round-robin timing rounds (min)")
    p.add_argument("--sweep-repeats", type=int, default=3, help="round-robin rounds (min)")
    p.add_argument("--skip-time", action="store_true", help="memory only (compile only)")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument(
        "--tpu-target",
        default="v5e-1",
        help="TPU target whose one chip the memory is also compiled for; 'none' skips",
    )
    p.add_argument("--fit", action="store_true", help="the largest forward batch per logits mode")
    p.add_argument("--model", default="gemma3-1b", help="--fit: any tunix model by name")
    p.add_argument("--target", default="v5e-1", help="--fit: the TPU slice compiled for")
    p.add_argument(
        "--score-sequences",
        type=int,
        default=100_000,
        help="--fit: the run priced at each mode's largest batch",
    )
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    a.time_B, a.time_T, a.time_V = a.time_B or a.B, a.time_T or a.T, a.time_V or a.V
    try:
        a.sweep = [tuple(int(x) for x in s.split(":")) for s in a.chunk_sizes.split(",") if s]
        assert all(len(s) == 2 for s in a.sweep)
    except (ValueError, AssertionError):
        raise BadInput(f"--chunk-sizes {a.chunk_sizes!r}: want e.g. 32:8192,64:8192") from None
    if Path(a.out).suffix != ".json":
        raise BadInput(f"--out {a.out!r} must end in .json")
    return a


def rounded(ratios):
    """Ratios for the JSON: 2 decimals, "inf" where only the chunked side is 0 (no HBM temp)."""
    return {
        k: None if v is None else "inf" if math.isinf(v) else round(v, 2) for k, v in ratios.items()
    }


_T0 = time.perf_counter()


def load():
    """The host's 1-minute load average: on a shared machine, how far to trust wall times."""
    return round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None


def log(*msg):
    print(f"[{time.perf_counter() - _T0:6.1f}s]", *msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# sections


def memory_section(a, dtype, device=None, where=None):
    rows = compare.memory_rows(
        [a.B], a.T, a.D, a.V, a.k, dtype=dtype, device=device, where=where or jax.default_backend()
    )
    for r in rows:
        log(f"  {r['what']} {r['method']}: {r['temp_bytes'] / MiB:.0f} MiB temporaries")
    return {"rows": rows, "ratios": rounded(compare.ratios(rows, "temp_bytes"))}


def tpu_memory_section(a, dtype):
    try:
        dev = plan.topology_devices(hardware.parse_target(a.tpu_target))[0]
    except BadInput as err:  # no libtpu (e.g. a CUDA install): say so, keep going
        return {"skipped": f"no TPU target {a.tpu_target!r}: {err}"}
    log(f"memory on deviceless {dev.device_kind} ({a.tpu_target}, one chip):")
    where = f"{a.tpu_target} ({dev.device_kind}, one chip)"
    return {
        "target": a.tpu_target,
        "device_kind": dev.device_kind,
        **memory_section(a, dtype, dev, where),
    }


def time_section(a, dtype):
    rows = compare.time_rows(a.time_B, a.time_T, a.D, a.time_V, a.k, rounds=a.repeats, dtype=dtype)
    for r in rows:
        log(f"  {r['what']} {r['method']}: {r['min_s']:.3f} s ({r['min_cpu_s']:.3f} CPU s)")
    return {
        "rows": rows,
        "ratios": rounded(compare.ratios(rows, "min_s")),
        "cpu_ratios": rounded(compare.ratios(rows, "min_cpu_s")),
        "load_average": load(),
    }


def sweep_section(a, dtype):
    """Temp memory per (chunk_size, vocab_chunk_size); times measured round-robin
    (`--sweep-repeats` rounds), the minimum of the rounds: the least noisy on a shared machine."""
    hm, em, tm = L.example_specs(a.B, a.T, a.D, a.V, dtype)
    rows, timed = [], []
    for C, Vc in [(None, None), *a.sweep]:
        kw = {"chunk_size": C, "vocab_chunk_size": Vc}
        row = {"chunk_size": C, "vocab_chunk_size": Vc}
        fns = {
            "top_k": lambda h, e, t, kw=kw: L.top_k_logits(h, e, a.k, **kw),
            "ce": jax.value_and_grad(lambda h, e, t, kw=kw: L.cross_entropy(h, e, t, **kw), (0, 1)),
        }
        for name, fn in fns.items():
            c = jax.jit(fn).lower(hm, em, tm).compile()
            row[f"{name}_temp_bytes"] = c.memory_analysis().temp_size_in_bytes
            timed.append((row, name, fn))
        rows.append(row)
    if not a.skip_time:
        args = L.example_inputs(a.time_B, a.time_T, a.D, a.time_V, dtype)
        _, runs = compare.round_robin([(jax.jit(fn), args) for _, _, fn in timed], a.sweep_repeats)
        for (row, name, _), times in zip(timed, runs, strict=True):
            row[f"{name}_time_min_s"] = round(min(w for w, _ in times), 4)
            row[f"{name}_cpu_min_s"] = round(min(c for _, c in times), 4)
            row[f"{name}_time_runs_s"] = [round(w, 3) for w, _ in times]
    for row in rows:
        log(f"  {row}")
    return rows


def exactness_section():
    """compare.exactness at the notebook's default shape, and the bf16 running sum."""
    top_k, loss = compare.exactness(**EXACT)
    B, T, D, V = (EXACT[x] for x in "BTDV")
    h, e, t = L.example_inputs(B, T, D, V, jnp.bfloat16)
    _, (_, ref_e) = jax.jit(compare.loss_fns()["naive loss"])(
        h.astype(jnp.float32), e.astype(jnp.float32), t
    )
    running = bf16_running_sum_d_emb(h, e, t, EXACT["chunk_size"]).astype(jnp.float32)
    return {
        "params": EXACT,
        "top_k": top_k,
        "loss": loss,
        "bf16_running_sum_d_embedding_rel_err": float(
            jnp.linalg.norm(running - ref_e) / jnp.linalg.norm(ref_e)
        ),
    }


def bf16_running_sum_d_emb(h, e, t, C):
    """d loss / d embedding summed over sequence chunks of C steps in a bf16 accumulator: what
    a sequence-outer loop gets without an fp32 [V, D] buffer."""
    valid = t >= 0
    logits = jnp.einsum("btd,vd->btv", h, e, preferred_element_type=jnp.float32)
    dz = jax.nn.softmax(logits, -1) - jax.nn.one_hot(t, e.shape[0])
    dz = (dz * (valid / valid.sum())[..., None]).astype(e.dtype)
    acc = jnp.zeros(e.shape, e.dtype)
    for i in range(0, h.shape[1], C):
        part = jnp.einsum(
            "btv,btd->vd", dz[:, i : i + C], h[:, i : i + C], preferred_element_type=jnp.float32
        )
        acc = (acc.astype(jnp.float32) + part).astype(e.dtype)
    return acc


def targets(res):
    """The issue's targets, from the TPU-target memory when present, else the local backend."""
    mem = res["memory_tpu"] if "rows" in res.get("memory_tpu", {}) else res["memory"]
    tm = res.get("time", {}).get("ratios", {})
    r = mem["ratios"]

    def t(value, op, bound, source):
        v = float(value) if value is not None else None  # "inf" -> inf
        met = None if v is None else (v >= bound if op == ">=" else v <= bound)
        return {"value": value, "target": f"{op} {bound}", "met": met, "source": source}

    def inverse(v):
        return None if v is None else round(1 / float(v), 2)

    msrc = "memory_tpu" if mem is not res["memory"] else "memory"
    return {
        "top_k_temp_full_over_ours": t(r["full_over_chunked"], ">=", 30, msrc),
        "top_k_time_per_step_over_ours": t(tm.get("per_step_over_chunked"), ">=", 1.5, "time"),
        "top_k_time_ours_over_full": t(inverse(tm.get("full_over_chunked")), "<=", 1.2, "time"),
        "ce_temp_full_over_ours": t(r["naive_loss_over_chunked"], ">=", 5, msrc),
        "ce_time_ours_over_full": t(inverse(tm.get("naive_loss_over_chunked")), "<=", 1.2, "time"),
    }


def notes(res, a):
    """Why some numbers look the way they do (conditions, not results)."""
    out = []
    if (a.time_B, a.time_T, a.time_V) != (a.B, a.T, a.V):
        flops = 2 * a.B * a.T * a.V * a.D
        out.append(
            f"wall times use the smaller time_shape: the memory shape is {flops / 1e12:.1f} "
            "TFLOP per top-k call (x4 for the loss fwd+bwd), minutes per call on this host"
        )
    if res["backend"] == "cpu":
        out += [
            "XLA:CPU's TopK kernel is fp32-only (bf16 falls back to a ~80x slower sort), so all "
            "three upcast bf16 logits (exactly) before top-k on CPU; XLA:CPU's 'full' temp thus "
            "holds an fp32 copy of the logits next to the bf16 ones",
            "chunked on CPU includes one copy of the [V, D] table that XLA:CPU makes for loops "
            f"that slice it ({a.V * a.D * 2 / MiB:.0f} MiB here); TPU/GPU do not (memory_tpu)",
            "CPU wall times come from a 2-core machine shared with other jobs (time.load_average:"
            " the host's load while timing): cpu_ratios compare the CPU seconds each call used,"
            " which other jobs' load does not inflate the way it inflates wall time",
        ]
    if "rows" in res.get("memory_tpu", {}):
        out.append(
            "memory_tpu: XLA:TPU keeps small buffers in on-chip memory, which temp_bytes (HBM) "
            "does not count; a temp of 0 means nothing of that program needed HBM scratch"
        )
    return out


def fit(a):
    """The largest forward batch per logits mode, with every probe, and the scoring run's cost."""
    out = {
        "model": a.model,
        "target": a.target,
        "seq": a.T,
        "k": a.k,
        "score_sequences": a.score_sequences,
        "modes": {},
    }
    for mode in ("full", "topk"):
        log(f"max batch, forward {a.model} on {a.target}, logits={mode}:")
        search = plan.max_batch(
            plan.Request("forward", a.model, a.target, batch=1, seq=a.T, logits=mode, k=a.k)
        )
        best = next(
            (p for p in search["probes"] if p["batch"] == search["max_batch"] and not p["fast"]),
            None,
        )
        est = best and budget.estimate(best, runs=math.ceil(a.score_sequences / best["batch"]))
        out["versions"] = search["probes"][-1]["versions"]
        out["modes"][mode] = {
            "max_batch": search["max_batch"],
            "first_not_fitting": search["first_not_fitting"],
            "summary": plan.describe(search),
            "compiles": search["compiles"],
            "search_wall_s": round(search["wall_s"], 1),
            "at_max_batch": best
            and {
                key: best[key]
                for key in (
                    "bytes_per_device",
                    "hbm_bytes",
                    "resident_bytes",
                    "roofline_lower_bound_s",
                )
            },
            "score_run": est and {**est, "describe": budget.describe(est)},
            "probes": probe_rows(search),
        }
        log(f"  {out['modes'][mode]['summary']}")
    return out


def main(argv=None):
    a = parse_args(argv)
    dtype = jnp.dtype(a.dtype)
    dev = jax.devices()[0]
    res = {
        **results.header("benchmarks/bench_logits.py", argv),
        "env": {k: os.environ[k] for k in ("JAX_PLATFORMS", "XLA_FLAGS") if k in os.environ},
        "backend": jax.default_backend(),
        "device_kind": dev.device_kind,
    }
    if a.fit:
        res.update(fit(a))
    else:
        res.update(
            {
                "device_count": jax.device_count(),
                "memory_shape": {
                    "B": a.B,
                    "T": a.T,
                    "D": a.D,
                    "V": a.V,
                    "k": a.k,
                    "dtype": a.dtype,
                },
                "time_shape": {"B": a.time_B, "T": a.time_T, "D": a.D, "V": a.time_V, "k": a.k},
                "defaults": {
                    "block_tokens": L.DEFAULT_BLOCK_TOKENS,
                    "vocab_chunk_top_k": L.DEFAULT_VOCAB_CHUNK,
                    "vocab_chunk_loss": L.DEFAULT_VOCAB_CHUNK_LOSS,
                    "note": "sweep rows with chunk_size None use these defaults",
                },
                "full_logits_tensor_bytes": a.B * a.T * a.V * dtype.itemsize,
            }
        )
        log(f"memory on {res['backend']} ({res['device_kind']}), shape {res['memory_shape']}:")
        res["memory"] = memory_section(a, dtype)
        if a.tpu_target.lower() != "none":
            res["memory_tpu"] = tpu_memory_section(a, dtype)
        if not a.skip_time:
            log(f"wall time, shape {res['time_shape']}:")
            res["time"] = time_section(a, dtype)
        if not a.skip_sweep:
            log("sweep (chunk_size, vocab_chunk_size):")
            res["sweep"] = sweep_section(a, dtype)
        log("exactness:")
        res["exactness"] = exactness_section()
        res["targets"] = targets(res)
        res["notes"] = notes(res, a)
    results.write(a.out, res)
    log(
        json.dumps(
            res.get("targets") or {m: v["summary"] for m, v in res["modes"].items()}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    run_cli(main)
