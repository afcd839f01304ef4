"""Benchmark `shared/logits.py`: full materialisation vs per-time-step scan vs chunked (ours).

For top-k logits and for the cross-entropy forward+backward it records
- temp memory: XLA `compiled.memory_analysis().temp_size_in_bytes` at the issue's size
  (compile only, nothing is allocated), on the local backend and, when libtpu is installed,
  for a deviceless TPU target (`--tpu-target`, same jitted functions);
- wall time: median of `--repeats` runs after one warm-up, `block_until_ready`, at a time size
  (`--time-B/-T/-V`, default the memory size; a CPU cannot run 5 TFLOP per call in minutes);
- a sweep of (chunk_size, vocab_chunk_size) for temp memory and time (timed round-robin, the
  minimum of the rounds), which is what the defaults in `shared/logits.py` were chosen from;
- accuracy of the bf16 gradients against an fp32 reference, ours vs the naive loss;
- the issue's targets, each with its measured ratio and whether it was met.

The JSON in benchmarks/results/logits_cpu.json was produced on the 2-core CPU machine with:

    JAX_PLATFORMS=cpu python benchmarks/bench_logits.py --time-T 128 --time-V 65536 \\
        --out benchmarks/results/logits_cpu.json

(JAX_PLATFORMS=cpu keeps JAX from probing for a TPU; libtpu still compiles for --tpu-target.)
On a GPU, run it without JAX_PLATFORMS and the --time-* flags (times at the full size) and
with another --out, e.g. benchmarks/results/logits_h100.json.
"""

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from shared import logits as L  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402

MiB = 2**20


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
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point (median)")
    p.add_argument("--sweep-repeats", type=int, default=3, help="round-robin rounds (min)")
    p.add_argument("--per-step-repeats", type=int, default=1, help="it is the slowest by far")
    p.add_argument("--skip-time", action="store_true", help="memory only (compile only)")
    p.add_argument("--skip-ce", action="store_true")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-per-step-time", action="store_true", help="the slowest timing")
    p.add_argument(
        "--tpu-target",
        default="v6e:1x1",
        help="deviceless TPU topology for a second set of memory numbers; 'none' to skip",
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


# ---------------------------------------------------------------------------------------------
# the functions compared


def topk_fns(k):
    return {
        "full": lambda h, e: L.full_top_k_logits(h, e, k),
        "per_step": lambda h, e: L.per_step_top_k_logits(h, e, k),
        "ours": lambda h, e: L.top_k_logits(h, e, k),
    }


def ce_fns():
    grad = lambda f: jax.value_and_grad(f, argnums=(0, 1))  # noqa: E731
    return {
        "full": grad(L.full_cross_entropy),
        "ours": grad(L.cross_entropy),
    }


def temp_bytes(fn, *args):
    """XLA's temp bytes for fn(*args), compile only. Out-of-memory at compile -> parsed need."""
    try:
        m = jax.jit(fn).lower(*args).compile().memory_analysis()
        return {
            "temp_bytes": m.temp_size_in_bytes,
            "argument_bytes": m.argument_size_in_bytes,
            "output_bytes": m.output_size_in_bytes,
            "alias_bytes": m.alias_size_in_bytes,
        }
    except Exception as err:  # TPU compiles refuse programs over HBM; record what they needed
        m = re.search(r"HLO temporaries \(([\d.]+)([GM])\)", str(err))
        if not m:
            raise
        need = float(m.group(1)) * (2**30 if m.group(2) == "G" else MiB)
        return {"temp_bytes": int(need), "compile_oom": str(err).splitlines()[0][:300]}


def wall_time(fn, args, repeats):
    c = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(c(*args))  # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(c(*args))
        runs.append(time.perf_counter() - t0)
    return {
        "median_s": statistics.median(runs),
        "min_s": min(runs),
        "runs_s": [round(r, 4) for r in runs],
    }


def ratio(a, b):
    """a / b rounded; None when either is missing; "inf" when only b is 0 (e.g. no HBM temp)."""
    if a is None or b is None:
        return None
    if b == 0:
        return "inf" if a else None
    return round(a / b, 2)


_T0 = time.perf_counter()


def log(*msg):
    print(f"[{time.perf_counter() - _T0:6.1f}s]", *msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# sections


def memory_section(a, dtype, sharding=None):
    h, e, t = L.example_specs(a.B, a.T, a.D, a.V, dtype, sharding)
    out = {"top_k": {}, "cross_entropy_fwd_bwd": {}}
    for name, fn in topk_fns(a.k).items():
        out["top_k"][name] = temp_bytes(fn, h, e)
        log(f"  top_k {name}: {out['top_k'][name]['temp_bytes'] / MiB:.0f} MiB")
    if not a.skip_ce:
        for name, fn in ce_fns().items():
            out["cross_entropy_fwd_bwd"][name] = temp_bytes(fn, h, e, t)
            log(f"  ce {name}: {out['cross_entropy_fwd_bwd'][name]['temp_bytes'] / MiB:.0f} MiB")
    tk, ce = out["top_k"], out["cross_entropy_fwd_bwd"]
    out["ratios"] = {
        "top_k_full_over_ours": ratio(tk["full"]["temp_bytes"], tk["ours"]["temp_bytes"]),
        "top_k_per_step_over_ours": ratio(tk["per_step"]["temp_bytes"], tk["ours"]["temp_bytes"]),
        "ce_full_over_ours": ratio(ce["full"]["temp_bytes"], ce["ours"]["temp_bytes"])
        if ce
        else None,
    }
    return out


def tpu_memory_section(a, dtype):
    # Deviceless compile only: another process's libtpu lock (a notebook, a plan run) must not
    # block it. Set before libtpu loads, which with JAX_PLATFORMS=cpu is the call below.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from jax.experimental import topologies

        topo = topologies.get_topology_desc(
            platform="tpu", topology_name=a.tpu_target, chips_per_host_bounds=(1, 1, 1)
        )
    except Exception as err:  # no libtpu (e.g. a CUDA install): say so, keep going
        return {"skipped": f"no TPU topology {a.tpu_target!r}: {str(err).splitlines()[0][:200]}"}
    dev = topo.devices[0]
    log(f"memory on deviceless {dev.device_kind} ({a.tpu_target}):")
    out = memory_section(a, dtype, jax.sharding.SingleDeviceSharding(dev))
    return {"target": a.tpu_target, "device_kind": dev.device_kind, **out}


def time_section(a, dtype):
    h, e, t = L.example_inputs(a.time_B, a.time_T, a.D, a.time_V, dtype)
    out = {"top_k": {}, "cross_entropy_fwd_bwd": {}}
    for name, fn in topk_fns(a.k).items():
        if name == "per_step" and a.skip_per_step_time:
            continue
        repeats = a.per_step_repeats if name == "per_step" else a.repeats
        out["top_k"][name] = wall_time(fn, (h, e), repeats)
        log(f"  top_k {name}: {out['top_k'][name]['median_s']:.3f} s")
    if not a.skip_ce:
        for name, fn in ce_fns().items():
            out["cross_entropy_fwd_bwd"][name] = wall_time(fn, (h, e, t), a.repeats)
            log(f"  ce {name}: {out['cross_entropy_fwd_bwd'][name]['median_s']:.3f} s")
    med = lambda sec, name: out[sec].get(name, {}).get("median_s")  # noqa: E731
    out["ratios"] = {
        "top_k_per_step_over_ours": ratio(med("top_k", "per_step"), med("top_k", "ours")),
        "top_k_ours_over_full": ratio(med("top_k", "ours"), med("top_k", "full")),
        "ce_ours_over_full": ratio(
            med("cross_entropy_fwd_bwd", "ours"), med("cross_entropy_fwd_bwd", "full")
        ),
    }
    return out


def sweep_section(a, dtype):
    """Temp memory per (chunk_size, vocab_chunk_size); times measured round-robin.

    All points are compiled and warmed up first, then timed in `--sweep-repeats` rounds that
    visit every point once, so a burst of load from other jobs hits all points alike; the
    minimum over rounds is the least noisy estimate on a shared machine.
    """
    hm, em, tm = L.example_specs(a.B, a.T, a.D, a.V, dtype)
    rows, timed = [], []
    for C, Vc in [(None, None), *a.sweep]:
        kw = {"chunk_size": C, "vocab_chunk_size": Vc}
        row = {"chunk_size": C, "vocab_chunk_size": Vc}
        fns = {"top_k": lambda h, e, t, kw=kw: L.top_k_logits(h, e, a.k, **kw)}
        if not a.skip_ce:
            fns["ce"] = jax.value_and_grad(
                lambda h, e, t, kw=kw: L.cross_entropy(h, e, t, **kw), (0, 1)
            )
        for name, fn in fns.items():
            row[f"{name}_temp_bytes"] = temp_bytes(fn, hm, em, tm)["temp_bytes"]
            timed.append((row, name, fn))
        rows.append(row)
    if not a.skip_time:
        args = L.example_inputs(a.time_B, a.time_T, a.D, a.time_V, dtype)
        compiled = []
        for row, name, fn in timed:
            c = jax.jit(fn).lower(*args).compile()
            jax.block_until_ready(c(*args))  # warm-up
            compiled.append((row, name, c, []))
        for _ in range(a.sweep_repeats):
            for _, _, c, runs in compiled:
                t0 = time.perf_counter()
                jax.block_until_ready(c(*args))
                runs.append(time.perf_counter() - t0)
        for row, name, _, runs in compiled:
            row[f"{name}_time_min_s"] = round(min(runs), 4)
            row[f"{name}_time_runs_s"] = [round(r, 3) for r in runs]
    for row in rows:
        log(f"  {row}")
    return rows


def accuracy_section(dtype):
    """Errors of bf16 gradients vs an fp32 reference computed from the same (rounded) inputs."""
    B, T, D, V = 2, 256, 256, 8192
    h, e, t = L.example_inputs(B, T, D, V, dtype, seed=1)
    t = t.at[0, :7].set(-1)  # a few ignored targets
    ref_l, (ref_h, ref_e) = ce_fns()["full"](h.astype(jnp.float32), e.astype(jnp.float32), t)

    def rel(x, y):
        return float(jnp.linalg.norm((x.astype(jnp.float32) - y).ravel()) / jnp.linalg.norm(y))

    out = {"shape": {"B": B, "T": T, "D": D, "V": V}, "dtype": str(jnp.dtype(dtype))}
    for name, fn in ce_fns().items():  # ours with chunks that divide neither T nor V
        kw = {"chunk_size": 48, "vocab_chunk_size": 1000} if name == "ours" else {}
        loss, (gh, ge) = jax.jit(fn, static_argnames=tuple(kw))(h, e, t, **kw)
        out[name] = {
            "loss_abs_err": abs(float(loss) - float(ref_l)),
            "d_hidden_rel_err": rel(gh, ref_h),
            "d_embedding_rel_err": rel(ge, ref_e),
        }
    # What a sequence-outer loop would get by keeping its running d_embedding sum in bf16
    # (the alternative to an fp32 [V, D] accumulator), with the same 48-step chunks as ours.
    out["bf16_running_sum_d_embedding_rel_err"] = rel(bf16_running_sum_d_emb(h, e, t, 48), ref_e)
    top_v, top_i = L.top_k_logits(h, e, 64, chunk_size=48, vocab_chunk_size=1000)
    full_v, full_i = L.full_top_k_logits(h, e, 64)
    out["top_k_values_equal"] = bool(jnp.array_equal(top_v, full_v))
    out["top_k_indices_equal_fraction"] = float(jnp.mean(top_i == full_i))
    return out


def bf16_running_sum_d_emb(h, e, t, C):
    """d loss / d embedding summed over sequence chunks of C steps in a bf16 accumulator."""
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
    mem = res.get("memory_tpu") if "top_k" in res.get("memory_tpu", {}) else res["memory"]
    tm = res.get("time", {}).get("ratios", {})
    r = mem["ratios"]

    def t(value, op, bound, source):
        v = float(value) if value is not None else None  # "inf" -> inf
        met = None if v is None else (v >= bound if op == ">=" else v <= bound)
        return {"value": value, "target": f"{op} {bound}", "met": met, "source": source}

    msrc = "memory_tpu" if mem is not res["memory"] else "memory"
    return {
        "top_k_temp_full_over_ours": t(r["top_k_full_over_ours"], ">=", 30, msrc),
        "top_k_time_per_step_over_ours": t(tm.get("top_k_per_step_over_ours"), ">=", 1.5, "time"),
        "top_k_time_ours_over_full": t(tm.get("top_k_ours_over_full"), "<=", 1.2, "time"),
        "ce_temp_full_over_ours": t(r["ce_full_over_ours"], ">=", 5, msrc),
        "ce_time_ours_over_full": t(tm.get("ce_ours_over_full"), "<=", 1.2, "time"),
        "local_backend_memory": {
            "top_k_full_over_ours": res["memory"]["ratios"]["top_k_full_over_ours"],
            "ce_full_over_ours": res["memory"]["ratios"]["ce_full_over_ours"],
        },
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
            "ours on CPU includes one copy of the [V, D] table that XLA:CPU makes for loops that "
            f"slice it ({a.V * a.D * 2 / MiB:.0f} MiB here); TPU/GPU do not (see memory_tpu)",
            "CPU wall times come from a 2-core machine shared with other jobs: expect +-30% noise",
        ]
    if "top_k" in res.get("memory_tpu", {}):
        out.append(
            "memory_tpu: XLA:TPU keeps small buffers in on-chip memory, which temp_bytes (HBM) "
            "does not count; a temp of 0 means nothing of that program needed HBM scratch"
        )
    return out


def main(argv=None):
    a = parse_args(argv)
    dtype = jnp.dtype(a.dtype)
    dev = jax.devices()[0]
    res = {
        "command": "python benchmarks/bench_logits.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "env": {k: os.environ[k] for k in ("JAX_PLATFORMS", "XLA_FLAGS") if k in os.environ},
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": dev.device_kind,
        "device_count": jax.device_count(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "memory_shape": {"B": a.B, "T": a.T, "D": a.D, "V": a.V, "k": a.k, "dtype": a.dtype},
        "time_shape": {"B": a.time_B, "T": a.time_T, "D": a.D, "V": a.time_V, "k": a.k},
        "defaults": {
            "block_tokens": L.DEFAULT_BLOCK_TOKENS,
            "vocab_chunk_top_k": L.DEFAULT_VOCAB_CHUNK,
            "vocab_chunk_loss": L.DEFAULT_VOCAB_CHUNK_LOSS,
            "note": "sweep rows with chunk_size None use these defaults",
        },
        "full_logits_tensor_bytes": a.B * a.T * a.V * dtype.itemsize,
    }
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
    log("accuracy:")
    res["accuracy"] = accuracy_section(dtype)
    res["targets"] = targets(res)
    res["notes"] = notes(res, a)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")  # a failed run never leaves a half-written result
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(out)
    log(json.dumps(res["targets"], indent=2))
    return 0


if __name__ == "__main__":
    run_cli(main)
