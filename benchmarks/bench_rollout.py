"""Rollout timings on the attached device: the tunix Sampler's prefill and decode for Gemma 3.

For each point (batch, generation steps) it records time to first token (the prefill call),
decode time per generated token, tokens actually generated (counted, not assumed), tokens/s,
the per-device peak memory after the point, the KV-cache estimate of shared.sizing, and an
out-of-memory error as a data point. The first call of each shape (compile + run) is reported
apart and discarded; the timings are medians of `--trials` calls after it.

Two sweeps, as in notebook 01 (which measures with the functions of this file):
- steps at batch 1 (`--steps`), then
- batch sizes at the largest step count (`--batch-sizes`), multiples of 64 and their
  off-by-4 neighbours on a real device.

Peak memory is a process-wide high-water mark: points run in increasing batch order in one
process (default), or each in a fresh process with `--fresh` (the parent never touches the
accelerator; a crashed point is recorded with its error). Once a batch runs out of memory,
larger batches at the same step count are recorded as skipped.

On an H100/H200, gemma3-1b with random weights, the seed's shapes:

    python benchmarks/bench_rollout.py --model gemma3-1b --weights dummy \\
        --batch-sizes 1,4,16,60,64,68,124,128,132,252,256,260 --steps 128,256,512,1024 \\
        --prompt-len 256 --cache-size 1312 --trials 3 --fresh \\
        --out benchmarks/results/rollout_h100.json

(jax preallocates 75% of GPU memory; XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 lets a point use
more. Add larger batches to --batch-sizes to find where an H100's 80 GB runs out.)

benchmarks/results/rollout_cpu.json was produced on the 2-core CPU machine with:

    JAX_PLATFORMS=cpu python benchmarks/bench_rollout.py --model gemma3-tiny \\
        --batch-sizes 1,4,8,12,16 --steps 8,16,32 --prompt-len 16 --trials 2 \\
        --out benchmarks/results/rollout_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is sys.path[0], not the repo
    sys.path.insert(0, str(REPO))

from shared import gemma, measure, sizing  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402

# ---------------------------------------------------------------------------- one point


def _timed_rollout(sampler, prompts, steps: int, mesh) -> dict:
    """One rollout, reduced to numbers at once: the final state (its KV cache) is dropped
    here, so two caches are never alive together and the peak belongs to one rollout."""
    result = gemma.rollout(sampler, prompts, steps, mesh=mesh)
    return {"prefill_s": result.prefill_s, "decode_s": result.decode_s,
            "tokens": result.tokens.copy()}


def kv_bytes_per_device(dims: sizing.ModelDims, batch: int, cache_size: int, fsdp: int = 1,
                        tp: int = 1) -> int:
    """shared.sizing's KV cache divided as gemma.state_shardings lays it out: batch over
    "fsdp", KV heads over "tp" when they divide."""
    return sizing.kv_cache_bytes(dims, batch, cache_size) // fsdp // (
        tp if dims.K % tp == 0 else 1)


def measure_point(sampler, mesh, dims: sizing.ModelDims, *, batch: int, steps: int,
                  prompt_len: int, trials: int, seed: int = 0) -> dict:
    """Time one (batch, steps) point; an out-of-memory error makes a row with status 'oom'.

    measure.time_fn times one function; a rollout needs its prefill and decode timed apart
    and its init left out, which gemma.rollout does, so the trials are counted here.
    """
    if trials < 1:
        raise BadInput(f"trials must be >= 1, got {trials}")
    cache_size = sampler.cache_config.cache_size
    prompts = gemma.random_prompts(batch, prompt_len, dims.V, seed=seed)
    row = {"batch": batch, "steps": steps, "prompt_len": prompt_len, "cache_size": cache_size,
           "kv_cache_bytes": sizing.kv_cache_bytes(dims, batch, cache_size),
           "kv_cache_bytes_per_device": kv_bytes_per_device(dims, batch, cache_size,
                                                             mesh.shape["fsdp"], mesh.shape["tp"])}

    def run():
        first = _timed_rollout(sampler, prompts, steps, mesh)
        return first, [_timed_rollout(sampler, prompts, steps, mesh) for _ in range(trials)]

    out, oom = measure.run_or_oom(run)
    row["peak_bytes_per_device"] = measure.peak_bytes_per_device()  # None on CPU
    if oom is not None:
        return {**row, "status": "oom", "error": oom}
    first, timed = out
    prefill_s = statistics.median(t["prefill_s"] for t in timed)
    decode_s = statistics.median(t["decode_s"] for t in timed)
    tokens = timed[-1]["tokens"]  # per row; greedy decoding repeats exactly
    total = int(tokens.sum())
    first_s = first["prefill_s"] + first["decode_s"]
    return {**row, "status": "ok", "trials": trials,
            "first_call_s": first_s, "compile_s": max(0.0, first_s - prefill_s - decode_s),
            "prefill_s": prefill_s, "decode_s": decode_s, "ttft_ms": 1e3 * prefill_s,
            "tokens": total, "tokens_per_row_min": int(tokens.min()),
            "tokens_per_row_max": int(tokens.max()),
            # the decode loop runs `steps` forward passes (tunix drops the last one's token)
            "decode_ms_per_step": 1e3 * decode_s / steps,
            # batch-wide: decode seconds per token it delivered (prefill's token not counted)
            "decode_ms_per_token": 1e3 * decode_s / max(1, total - batch),
            "tokens_per_s": total / (prefill_s + decode_s)}


def sweep(measure_one, points: list[tuple[int, int]], *, desc: str = "rollout points",
          progress: bool = True) -> list[dict]:
    """`measure_one(batch, steps) -> row` over points in the order given (callers sort them
    by increasing batch); after an out-of-memory batch, larger batches at the same steps are
    recorded as skipped rather than run."""
    from tqdm.auto import tqdm

    rows, oom_at = [], {}
    for batch, steps in tqdm(points, desc=desc, unit="point", disable=not progress):
        if steps in oom_at and batch >= oom_at[steps]:
            rows.append({"batch": batch, "steps": steps, "status": "skipped",
                         "error": f"batch {oom_at[steps]} ran out of memory"})
            continue
        row = measure_one(batch, steps)
        if row["status"] == "oom":
            oom_at[steps] = min(batch, oom_at.get(steps, batch))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- the answer


def aligned_pairs(rows: list[dict], step: int = 4) -> list[dict]:
    """Each multiple of 64 (of 8 when no batch reaches 64) against the batch `step` rows
    larger: the larger batch's decode cost per token over the aligned one's. A larger batch
    normally costs less per token (the weights are read once per step for more rows), so a
    ratio above 1 is the padding / tiling penalty of leaving the aligned size."""
    ok = {r["batch"]: r for r in rows if r.get("status") == "ok"}
    aligned = [b for b in sorted(ok) if b % 64 == 0] or [b for b in sorted(ok) if b % 8 == 0]
    return [{"aligned": b, "neighbour": b + step,
             "neighbour_cost_ratio": (ratio := ok[b + step]["decode_ms_per_token"]
                                      / ok[b]["decode_ms_per_token"]),
             "aligned_wins": ratio > 1.0}
            for b in aligned if b + step in ok]


def summarize(rows: list[dict]) -> dict:
    """Best batch per token, largest that ran, first out of memory, aligned vs neighbours."""
    ok = [r for r in rows if r.get("status") == "ok"]
    oom = [r["batch"] for r in rows if r.get("status") == "oom"]
    if not ok:
        return {"best_batch": None, "largest_ran": None, "first_oom": min(oom, default=None),
                "aligned_pairs": []}
    best = max(ok, key=lambda r: r["tokens_per_s"])
    return {"best_batch": best["batch"], "best_tokens_per_s": best["tokens_per_s"],
            "best_decode_ms_per_token": best["decode_ms_per_token"],
            "largest_ran": max(r["batch"] for r in ok), "first_oom": min(oom, default=None),
            "aligned_pairs": aligned_pairs(ok)}


def recommendation(summary: dict, rows: list[dict], where: str) -> str:
    """A paragraph written from the numbers (nothing in it is fixed in advance)."""
    if summary["best_batch"] is None:
        return f"No batch ran on {where}: every point ran out of memory or was skipped."
    ok = {r["batch"]: r for r in rows if r.get("status") == "ok"}
    best, largest = summary["best_batch"], summary["largest_ran"]
    text = (f"On {where}, batch {best} gives the highest throughput "
            f"({summary['best_tokens_per_s']:,.0f} tokens/s, "
            f"{summary['best_decode_ms_per_token']:.3g} ms of decode per token). ")
    if largest != best:
        ratio = ok[largest]["tokens_per_s"] / summary["best_tokens_per_s"]
        text += (f"The largest batch that ran, {largest}, reaches {ratio:.0%} of that "
                 f"throughput. ")
    text += (f"Batch {summary['first_oom']} ran out of memory, so the largest that fits lies "
             f"between {largest} and {summary['first_oom']}. " if summary["first_oom"] else
             f"Nothing ran out of memory up to batch {largest}. ")
    pairs = summary["aligned_pairs"]
    if pairs:
        won = [p for p in pairs if p["aligned_wins"]]
        detail = "; ".join(f"{p['neighbour']} vs {p['aligned']}: "
                           f"{p['neighbour_cost_ratio'] - 1:+.1%} per token" for p in pairs)
        text += (f"Aligned batches beat the batch 4 larger per token in {len(won)} of "
                 f"{len(pairs)} comparisons ({detail}).")
    return text.strip()


# ---------------------------------------------------------------------------- command line


def _ints(text: str, what: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise BadInput(f"--{what} {text!r}: want positive integers like 1,4,16")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gemma3-tiny", help=", ".join(gemma.MODEL_NAMES))
    p.add_argument("--weights", default="dummy", help="dummy | kaggle")
    p.add_argument("--batch-sizes", default="1,4,8,12,16", help="batch sweep, comma-separated")
    p.add_argument("--steps", default="8,16,32",
                   help="steps sweep at batch 1; the batch sweep uses the largest")
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--cache-size", type=int, help="KV slots (default prompt-len + max steps)")
    p.add_argument("--trials", type=int, default=3, help="timed calls after the first")
    p.add_argument("--mesh", help="FSDPxTP, e.g. 8x1 (default: every device on fsdp)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-at-eos", action="store_true",
                   help="stop rows at EOS (default: never, so every row decodes every step)")
    p.add_argument("--fresh", action="store_true", help="each point in a fresh process")
    p.add_argument("--point", help=argparse.SUPPRESS)  # "B,S": one point (a --fresh child)
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    a.batch_list, a.steps_list = _ints(a.batch_sizes, "batch-sizes"), _ints(a.steps, "steps")
    a.cache_size = a.cache_size or a.prompt_len + max(a.steps_list)
    if a.prompt_len + max(a.steps_list) > a.cache_size:
        raise BadInput(f"--cache-size {a.cache_size} < prompt length + max steps "
                       f"({a.prompt_len + max(a.steps_list)})")
    if Path(a.out).suffix != ".json":
        raise BadInput(f"--out {a.out!r} must end in .json")
    return a


def device_info() -> dict:
    import jax

    dev = jax.local_devices()[0]
    return {"jax": jax.__version__, "backend": jax.default_backend(),
            "device_kind": dev.device_kind, "devices": jax.device_count()}


def setup(a):
    """(sampler, mesh, dims) for the model on this process's devices."""
    from shared import hardware
    from shared.sharding import make_mesh

    hardware.initialize_distributed()
    mesh = make_mesh(a.mesh)
    # tunix's sampling layout, as plan mode's 'rollout' compiles it
    model, tok = gemma.load(a.model, a.weights, mesh=mesh, seed=a.seed, is_sampling=True)
    dims = gemma.dims_from_config(a.model, model.config)
    sampler = gemma.make_sampler(model, tok, a.cache_size, stop_at_eos=a.stop_at_eos)
    return sampler, mesh, dims


def _child_args(a, batch: int, steps: int, out: Path) -> list[str]:
    """The command line of a --fresh child measuring one point (same model, shapes, trials)."""
    args = [sys.executable, __file__, "--model", a.model, "--weights", a.weights,
            "--steps", a.steps, "--prompt-len", str(a.prompt_len),
            "--cache-size", str(a.cache_size), "--trials", str(a.trials), "--seed", str(a.seed),
            "--point", f"{batch},{steps}", "--out", str(out)]
    return args + (["--mesh", a.mesh] if a.mesh else []) + (
        ["--stop-at-eos"] if a.stop_at_eos else [])


def _point_in_child(a, batch: int, steps: int) -> dict:
    """Run one point in a fresh process and read its row; a crash becomes a row too."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "point.json"
        done = subprocess.run(_child_args(a, batch, steps, out), capture_output=True, text=True)
        if done.returncode == 0 and out.exists():
            return json.loads(out.read_text())
    text = (done.stderr or done.stdout).strip()
    # run_or_oom turns an OOM of the rollout into a row; one elsewhere (loading) ends here
    status = "oom" if measure.is_out_of_memory(RuntimeError(text)) else "error"
    tail = " | ".join(text.splitlines()[-3:])
    return {"batch": batch, "steps": steps, "status": status,
            "error": f"exit {done.returncode}: {tail[:300]}"}


def _write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")  # a failed run never leaves a half-written result
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    started = time.perf_counter()
    steps_points = [(1, s) for s in a.steps_list]
    batch_points = [(b, max(a.steps_list)) for b in a.batch_list]
    if a.point:  # a --fresh child: one point, its row and this device's description
        batch, steps = (int(x) for x in a.point.split(","))
        sampler, mesh, dims = setup(a)
        row = measure_point(sampler, mesh, dims, batch=batch, steps=steps,
                            prompt_len=a.prompt_len, trials=a.trials, seed=a.seed)
        _write_json(Path(a.out), {**row, "device": device_info()})
        return 0
    if a.fresh:  # the parent never initialises the accelerator: each child owns it alone
        measure_one = lambda b, s: _point_in_child(a, b, s)  # noqa: E731
        info = None
    else:
        sampler, mesh, dims = setup(a)
        measure_one = lambda b, s: measure_point(  # noqa: E731
            sampler, mesh, dims, batch=b, steps=s, prompt_len=a.prompt_len, trials=a.trials,
            seed=a.seed)
        info = device_info()
    # Increasing batch order: the steps sweep (batch 1) first, then the batch sweep; the point
    # both share (batch 1 at the largest step count) is measured once.
    rows = sweep(measure_one, list(dict.fromkeys(steps_points + batch_points)))
    by_point = {(r["batch"], r["steps"]): r for r in rows}
    batch_rows = [by_point[p] for p in batch_points]
    info = info or next((r.pop("device") for r in rows if "device" in r), {})
    for r in rows:
        r.pop("device", None)
    summary = summarize(batch_rows)
    where = f"{info.get('device_kind', '?')} ({a.model}, {max(a.steps_list)} steps)"
    result = {
        "command": "python benchmarks/bench_rollout.py " + " ".join(argv),
        **info, "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "model": a.model, "weights": a.weights, "prompt_len": a.prompt_len,
        "cache_size": a.cache_size, "trials": a.trials, "stop_at_eos": a.stop_at_eos,
        "fresh_process_per_point": a.fresh, "mesh": a.mesh,
        "steps_sweep": [by_point[p] for p in steps_points], "batch_sweep": batch_rows,
        "summary": summary, "recommendation": recommendation(summary, batch_rows, where),
        "wall_s": time.perf_counter() - started,
        "notes": [
            "timings are medians of `trials` calls after a first (compile + run) call",
            "tokens are counted from the token buffer (gemma.generated_tokens); with "
            "stop_at_eos false every row decodes every step, as random weights would "
            "otherwise stop rows at whatever step they happen to emit EOS",
            "peak_bytes_per_device is the process-wide high-water mark after the point "
            "(None on CPU); in one process it is meaningful because points run in "
            "increasing batch order",
        ],
    }
    _write_json(Path(a.out), result)
    print(result["recommendation"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main)
