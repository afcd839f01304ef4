"""Rollout timings on the attached device: the tunix Sampler's prefill and decode for Gemma 3.

For each point (batch, generation steps) it records time to first token (the prefill call),
decode time per generated token, tokens actually generated (counted, not assumed), tokens/s,
the per-device peak memory after the point, the KV-cache estimate of shared.sizing, and an
out-of-memory error as a data point. The first call of each shape (compile + run) is reported
apart and discarded; the timings are medians of `--trials` calls after it.

Two sweeps, as in notebook 01 (both measure with shared.rollout.sweep):
- steps at batch 1 (`--steps`), then
- batch sizes at the largest step count (`--batch-sizes`), multiples of 64 and their
  off-by-4 neighbours on a real device.

Peak memory is a process-wide high-water mark: points run in increasing batch order in one
process (default), or each in a fresh process with `--fresh` (the parent never touches the
accelerator; a crashed point is recorded with its error). Once a batch runs out of memory,
larger batches at the same step count are recorded as skipped. In one process the file is
rewritten after every point (`complete` false until the last), and a point that fails
otherwise than by running out of memory is recorded with its error.

On an H100/H200, gemma3-1b with random weights, the seed's shapes:

    python benchmarks/bench_rollout.py --model gemma3-1b --weights dummy \\
        --batch-sizes 1,4,16,60,64,68,124,128,132,252,256,260 --steps 128,256,512,1024 \\
        --prompt-len 256 --cache-size 1312 --trials 3 --fresh \\
        --out benchmarks/results/rollout_h100.json

(jax preallocates 75% of GPU memory; XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 lets a point use
more. Add larger batches to --batch-sizes to find where an H100's 80 GB runs out.)

benchmarks/results/01_rollout_cpu.json was produced on the 2-core CPU machine with:

    JAX_PLATFORMS=cpu python benchmarks/bench_rollout.py --model gemma3-tiny \\
        --batch-sizes 1,4,8,12,16 --steps 8,16,32 --prompt-len 16 --trials 2 \\
        --out benchmarks/results/01_rollout_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

from shared import models  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402
from shared.hardware import measure  # noqa: E402
from shared.report import results  # noqa: E402
from shared.rollout import sampler as rollout  # noqa: E402
from shared.rollout.sweep import measure_point, recommendation, summarize, sweep  # noqa: E402


def error(err: BaseException) -> dict:
    """A failed point's error for its row: the exception's type and first line."""
    first = (str(err).strip().splitlines() or [""])[0]
    return {"error": f"{type(err).__name__}: {first[:300]}"}


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
    p.add_argument("--model", default="gemma3-tiny", help=", ".join(models.MODEL_NAMES))
    p.add_argument("--weights", default="dummy", help="dummy | real")
    p.add_argument("--batch-sizes", default="1,4,8,12,16", help="batch sweep, comma-separated")
    p.add_argument(
        "--steps",
        default="8,16,32",
        help="steps sweep at batch 1; the batch sweep uses the largest",
    )
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--cache-size", type=int, help="KV slots (default prompt-len + max steps)")
    p.add_argument("--trials", type=int, default=3, help="timed calls after the first")
    p.add_argument("--mesh", help="FSDPxTP, e.g. 8x1 (default: every device on fsdp)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--stop-at-eos",
        action="store_true",
        help="stop rows at EOS (default: never, so every row decodes every step)",
    )
    p.add_argument("--fresh", action="store_true", help="each point in a fresh process")
    p.add_argument(
        "--run-peak",
        action="store_true",
        help="on a GPU: run each point again in a fresh process with XLA's autotuner off, "
        "whose peak is the run's own (run_peak_bytes_per_device; see measure.NO_AUTOTUNING)",
    )
    p.add_argument("--point", help=argparse.SUPPRESS)  # "B,S": one point (a --fresh child)
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    a.batch_list, a.steps_list = _ints(a.batch_sizes, "batch-sizes"), _ints(a.steps, "steps")
    a.cache_size = a.cache_size or a.prompt_len + max(a.steps_list)
    if a.prompt_len + max(a.steps_list) > a.cache_size:
        raise BadInput(
            f"--cache-size {a.cache_size} < prompt length + max steps "
            f"({a.prompt_len + max(a.steps_list)})"
        )
    if Path(a.out).suffix != ".json":
        raise BadInput(f"--out {a.out!r} must end in .json")
    return a


def device_info() -> dict:
    import jax

    dev = jax.local_devices()[0]
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device_kind": dev.device_kind,
        "devices": jax.device_count(),
    }


def setup(a):
    """(sampler, mesh, vocabulary size) for the model on this process's devices."""
    from shared import hardware
    from shared.hardware.sharding import make_mesh

    hardware.initialize_distributed()
    mesh = make_mesh(a.mesh)
    # tunix's sampling layout, as plan mode's 'rollout' compiles it
    model, tok = models.load(a.model, a.weights, mesh=mesh, seed=a.seed, is_sampling=True)
    vocab = models.family_of_model(model).vocab_size(model.config)
    sampler = rollout.make_sampler(model, tok, a.cache_size, stop_at_eos=a.stop_at_eos)
    return sampler, mesh, vocab


def _child_args(a, batch: int, steps: int, trials: int | None = None) -> list[str]:
    """The command line of a --fresh child measuring one point (same model, shapes; `trials`,
    by default the run's)."""
    args = [
        sys.executable,
        __file__,
        "--model",
        a.model,
        "--weights",
        a.weights,
        "--steps",
        a.steps,
        "--prompt-len",
        str(a.prompt_len),
        "--cache-size",
        str(a.cache_size),
        "--trials",
        str(trials or a.trials),
        "--seed",
        str(a.seed),
        "--point",
        f"{batch},{steps}",
    ]
    return (
        args + (["--mesh", a.mesh] if a.mesh else []) + (["--stop-at-eos"] if a.stop_at_eos else [])
    )


def _point_in_child(a, batch: int, steps: int, env: dict | None = None, trials=None) -> dict:
    """Run one point in a fresh process (its environment `env`, by default this one's) and
    read its row; a crash becomes a row too."""
    row, failed = measure.json_from_child(_child_args(a, batch, steps, trials), env=env)
    # run_or_oom turns an OOM of the rollout into a row; one elsewhere (loading) ends here
    return row if failed is None else {"batch": batch, "steps": steps, **failed}


def run_peaks(a, points: list[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """Per point, its peak in a fresh process with XLA's GPU autotuner off, so no compile-time
    scratch is in it (measure.NO_AUTOTUNING): `run_peak_bytes_per_device`, or the child's
    error. Run before this process touches the device: jax here would hold most of its memory
    (XLA_PYTHON_CLIENT_MEM_FRACTION) and every child would run out (seen on an H200). The
    process-wide peak of the timed run keeps the autotuner's scratch; timings stay tuned."""
    env = measure.without_autotuning(dict(os.environ))
    peaks = {}
    for batch, steps in points:
        child = _point_in_child(a, batch, steps, env=env, trials=1)
        ok = child.get("status") == "ok"
        peaks[batch, steps] = {
            "run_peak_bytes_per_device": child.get("peak_bytes_per_device") if ok else None,
            **({} if ok else {"run_peak_error": child.get("error") or child.get("status")}),
        }
    return peaks


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    started = time.perf_counter()
    steps_points = [(1, s) for s in a.steps_list]
    batch_points = [(b, max(a.steps_list)) for b in a.batch_list]
    if a.point:  # a --fresh child: one point, its row and this device's description
        batch, steps = (int(x) for x in a.point.split(","))
        sampler, mesh, vocab = setup(a)
        row = measure_point(
            sampler,
            mesh,
            vocab,
            batch=batch,
            steps=steps,
            prompt_len=a.prompt_len,
            trials=a.trials,
            seed=a.seed,
        )
        results.write(a.out, {**row, "device": device_info()})
        return 0
    points = list(dict.fromkeys(steps_points + batch_points))
    peaks = run_peaks(a, points) if a.run_peak else {}
    if a.fresh:  # the parent never initialises the accelerator: each child owns it alone
        measure_one = lambda b, s: _point_in_child(a, b, s)  # noqa: E731
        info = None
    else:
        sampler, mesh, vocab = setup(a)
        measure_one = lambda b, s: measure_point(  # noqa: E731
            sampler,
            mesh,
            vocab,
            batch=b,
            steps=s,
            prompt_len=a.prompt_len,
            trials=a.trials,
            seed=a.seed,
        )
        info = device_info()
    measured = []

    def measure_and_keep(batch: int, steps: int) -> dict:
        """One point, then the rows so far written out (`complete` false), so a run stopped
        at a time limit keeps what it measured; the full file below replaces it. A point
        that fails (other than out of memory) becomes a row with its error."""
        try:
            measured.append(measure_one(batch, steps))
        except BadInput:
            raise
        except Exception as err:  # not out of memory (that is a row already): a row too
            traceback.print_exc()
            measured.append({"batch": batch, "steps": steps, "status": "error", **error(err)})
        partial = {**results.header("benchmarks/bench_rollout.py", argv), **(info or {})}
        results.write(a.out, {**partial, "model": a.model, "complete": False, "rows": measured})
        return measured[-1]

    # Increasing batch order: the steps sweep (batch 1) first, then the batch sweep; the point
    # both share (batch 1 at the largest step count) is measured once.
    rows = sweep(measure_and_keep, points)
    for row in rows:
        row.update(peaks.get((row["batch"], row["steps"]), {}))
    by_point = {(r["batch"], r["steps"]): r for r in rows}
    batch_rows = [by_point[p] for p in batch_points]
    info = info or next((r.pop("device") for r in rows if "device" in r), {})
    for r in rows:
        r.pop("device", None)
    summary = summarize(batch_rows)
    where = f"{info.get('device_kind', '?')} ({a.model}, {max(a.steps_list)} steps)"
    result = {
        **results.header("benchmarks/bench_rollout.py", argv),
        **info,
        "model": a.model,
        "complete": True,
        "weights": a.weights,
        "prompt_len": a.prompt_len,
        "cache_size": a.cache_size,
        "trials": a.trials,
        "stop_at_eos": a.stop_at_eos,
        "fresh_process_per_point": a.fresh,
        "mesh": a.mesh,
        "steps_sweep": [by_point[p] for p in steps_points],
        "batch_sweep": batch_rows,
        "summary": summary,
        "recommendation": recommendation(summary, batch_rows, where),
        "wall_s": time.perf_counter() - started,
        "notes": [
            "timings are medians of `trials` calls after a first (compile + run) call",
            "tokens are counted from the token buffer (rollout.generated_tokens); with "
            "stop_at_eos false every row decodes every step, as random weights would "
            "otherwise stop rows at whatever step they happen to emit EOS",
            "peak_bytes_per_device is the process-wide high-water mark after the point "
            "(None on CPU); in one process it is meaningful because points run in "
            "increasing batch order. On a GPU it includes XLA's autotuning scratch while "
            "compiling (peak_includes_compiling); run_peak_bytes_per_device (--run-peak) is "
            "the point's peak in a process with the autotuner off",
        ],
    }
    results.write(a.out, result)
    print(result["recommendation"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_cli(main)
