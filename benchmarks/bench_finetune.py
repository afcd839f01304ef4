"""A fine-tune step measured on the attached device beside the plan engine's verdict for it:
the `sft` (every weight) and `lora-train` workloads, `shared.lora.train_step` itself, on a
tunix model with random weights, as JSON.

Per point (WORKLOAD:BATCH at --seq):
1. its peak HBM in a fresh process with XLA's GPU autotuner off, so no compile-time scratch
   is in it (shared.hardware.measure.NO_AUTOTUNING): `run_peak_bytes_per_device`, or its
   out-of-memory message. All children run before this process touches the device (jax here
   would hold most of its memory). Its kernels are not the autotuned ones, and near the HBM's
   edge XLA rematerializes that program otherwise: full fine-tune of gemma3-1b at 32 on an
   H200 peaked 1.05% over the planned program there, which this process's own peak (3.,
   `peak_bytes_per_device`, an upper bound) matched to the kilobyte;
2. the plan engine's verdict for the same request on this slice
   (`hardware.current_target_name()`: compiled for the attached GPU or TPU, nothing
   allocated): `predicted_bytes_per_device`, fits, the roofline lower bound;
3. the step timed here with the autotuner on: the median of --steps steps after a compile
   step and a warm-up step, tokens per second, and for `sft` the MFU (shared.sizing's model
   FLOPs) and the compiler's FLOP count over those model FLOPs (`speed`).
An out-of-memory point is a row, and the file is rewritten after every point (`complete`
false until the last), so a run stopped at a time limit keeps what it measured.

    # on a GPU (H100/H200) or TPU: gemma3-1b, full fine-tune and LoRA at sequence 2048
    python benchmarks/bench_finetune.py --model gemma3-1b --seq 2048 \\
        --points sft:4,sft:8,lora-train:8 --out benchmarks/results/finetune_h100.json
    # CPU smoke run of the same code path (no prediction or peak off a TPU/GPU)
    JAX_PLATFORMS=cpu python benchmarks/bench_finetune.py --model gemma3-tiny --seq 32 \\
        --points sft:2,lora-train:2 --steps 2 --out /tmp/finetune_cpu.json
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

from shared import lora, models, plan, sizing  # noqa: E402
from shared.errors import BadInput, choose, run_cli  # noqa: E402
from shared.hardware import current_target_name, measure, parse_target, sharding  # noqa: E402
from shared.lora.finetune_points import parse_points, run_peaks  # noqa: E402
from shared.report import results  # noqa: E402

RANK = 16  # the LoRA rank of notebook 02's setting


def step_setup(model_name: str, workload: str, batch: int, seq: int, mesh):
    """The arguments of one train_step, as device mode builds them: random weights (tunix's
    dummy model), qwix adapters for LoRA, fp32 AdamW state, random tokens [B, T+1]."""
    import jax
    import optax

    base, _ = models.load(model_name, "dummy", mesh=mesh, seed=0)
    model = (
        lora.apply_lora(base, RANK, lora.default_alpha(RANK), mesh=mesh)
        if workload == "lora-train"
        else base
    )
    graph, trained, frozen = (lora.split_lora if workload == "lora-train" else lora.split_full)(
        model
    )
    optimizer = optax.adamw(1e-4)  # the plan workload's optimizer (finetune_executable)
    opt_state = lora.init_opt_state(optimizer, trained, mesh=mesh)
    vocab = model.config.num_embed
    tokens = jax.random.randint(jax.random.key(1), (batch, seq + 1), 0, vocab, "int32")
    return graph, optimizer, trained, frozen, opt_state, lora.shard_batch(tokens, mesh)


def run_steps(model_name: str, workload: str, batch: int, seq: int, steps: int) -> dict:
    """Compile step, warm-up step, then `steps` timed steps (each blocking on its loss)."""
    import jax

    mesh = sharding.make_mesh(None)
    graph, optimizer, trained, frozen, opt_state, tokens = step_setup(
        model_name, workload, batch, seq, mesh
    )
    seconds, losses = [], []
    with jax.set_mesh(mesh):
        for _ in range(steps + 2):
            start = time.perf_counter()
            # trained and opt_state are donated: rebind them every step
            trained, opt_state, loss = lora.train_step(
                graph, optimizer, trained, frozen, opt_state, tokens
            )
            losses.append(float(loss))
            seconds.append(time.perf_counter() - start)
    return {
        "compile_and_first_s": seconds[0],
        "step_s": statistics.median(seconds[2:]),
        "steps_timed": steps,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "peak_bytes_per_device": measure.peak_bytes_per_device(),
    }


def measure_point(a, workload: str, batch: int) -> dict:
    """One point in this process: its row, out of memory included."""
    result, oom = measure.run_or_oom(run_steps, a.model, workload, batch, a.seq, a.steps)
    return {"status": "oom", "error": oom} if oom else {"status": "ok", **result}


def peak_in_child(a, workload: str, batch: int) -> dict:
    """The point's peak in a fresh process with the GPU autotuner off (one timed step)."""
    args = [sys.executable, __file__, "--model", a.model, "--seq", str(a.seq), "--steps", "1"]
    row, failed = measure.json_from_child(
        [*args, "--points", f"{workload}:{batch}", "--child"],
        env=measure.without_autotuning(dict(os.environ)),
    )
    row = row or failed
    if row["status"] == "ok":
        return {"run_peak_bytes_per_device": row["peak_bytes_per_device"]}
    return {"run_peak_bytes_per_device": None, "run_peak_error": row["error"]}


def prediction(a, workload: str, batch: int, target: str | None) -> dict:
    """The plan engine's verdict for this point on this slice (none off a TPU/GPU)."""
    if target is None:
        return {"predicted_bytes_per_device": None}
    rank = {"lora_rank": RANK} if workload == "lora-train" else {}
    verdict = plan.plan_point(
        plan.Request(workload, a.model, target, batch=batch, seq=a.seq, **rank)
    )
    return {
        "target": target,
        "predicted_bytes_per_device": verdict["bytes_per_device"],
        "predicted_fits": verdict["fits"],
        "hbm_bytes": verdict["hbm_bytes"],
        "flops_per_step": verdict["flops_per_device"],
        "devices": verdict["devices"],
        "roofline_lower_bound_s": verdict["roofline_lower_bound_s"],
        "plan_compile_s": verdict.get("compile_s"),
    }


def speed(row: dict, model: str, seq: int, target: str | None) -> dict:
    """Tokens per second; for a full fine-tune also its MFU (shared.sizing's model FLOPs, the
    MaxText convention, against the slice's datasheet bf16 peak), and how the compiler's FLOP
    count for the step compares with those model FLOPs (the plan's roofline rests on the
    compiler's count). A LoRA step takes no weight gradients of the frozen base, so 6·N does
    not describe it: tokens per second only."""
    if row.get("status") != "ok":
        return {}
    tokens = row["batch"] * seq
    out = {"tokens_per_s": tokens / row["step_s"]}
    if row["workload"] != "sft" or target is None:
        return out
    model_flops = sizing.flops_per_token(models.model_dims(model), seq) * tokens
    out["mfu"] = model_flops / row["step_s"] / parse_target(target).peak_flops_total
    if row.get("flops_per_step"):  # the verdict's FLOPs are per device
        out["compiler_over_model_flops"] = row["flops_per_step"] * row["devices"] / model_flops
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="gemma3-1b", help="any shared.models name")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument(
        "--points", default="sft:4,sft:8,lora-train:8", help="WORKLOAD:BATCH, comma-separated"
    )
    p.add_argument("--steps", type=int, default=5, help="timed steps per point")
    p.add_argument("--no-run-peak", action="store_true", help="skip the autotuner-off children")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    a = p.parse_args(argv)
    choose("model", a.model, models.MODEL_NAMES)
    points = parse_points(a.points)
    if a.child:  # one point, measured alone (peak_in_child)
        results.write(a.out, measure_point(a, *points[0]))
        return 0
    started = time.perf_counter()
    if a.no_run_peak:
        peaks = {}
    else:  # each point's autotuner-off peak, kept in --out as each child finishes
        head = results.header("benchmarks/bench_finetune.py", argv)
        peaks = run_peaks(a.out, head, points, lambda w, b: peak_in_child(a, w, b))
    import jax

    target = current_target_name()
    head = {
        **results.header("benchmarks/bench_finetune.py", argv),
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "devices": jax.device_count(),
        "model": a.model,
        "seq": a.seq,
        "lora_rank": RANK,
        "weights": "dummy (random)",
    }
    rows = []
    for workload, batch in points:
        row = {"workload": workload, "batch": batch, **peaks.get((workload, batch), {})}
        try:
            row.update(prediction(a, workload, batch, target))
            row.update(measure_point(a, workload, batch))
        except BadInput:
            raise
        except Exception as err:  # not out of memory (that is a row): a row too, the rest go on
            traceback.print_exc()
            row.update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
        row.update(speed(row, a.model, a.seq, target))
        rows.append(row)
        results.write(a.out, {**head, "complete": False, "rows": rows})
        print(json.dumps(row), file=sys.stderr, flush=True)
    notes = [
        "run_peak_bytes_per_device: the point's peak in a fresh process with the GPU autotuner "
        "off (measure.NO_AUTOTUNING): no compile-time scratch, but a program compiled with "
        "other kernels, which XLA may rematerialize otherwise near the HBM's edge; "
        "peak_bytes_per_device: this process's high-water mark, autotuner scratch included: "
        "an upper bound of the planned program's own peak",
        "step_s: median of steps_timed steps after a compile step and a warm-up step",
        "mfu (sft only): shared.sizing's model FLOPs per token (MaxText convention) times the "
        "tokens of a step, over step_s, against the slice's datasheet bf16 peak; "
        "compiler_over_model_flops: the plan verdict's FLOPs for the step over those model FLOPs",
    ]
    wall = time.perf_counter() - started
    results.write(a.out, {**head, "complete": True, "rows": rows, "wall_s": wall, "notes": notes})
    return 0


if __name__ == "__main__":
    run_cli(main)
