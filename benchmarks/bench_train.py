"""Time the pretraining step (shared.pretrain.train's own jitted step) and report tok/s and MFU as
JSON.

MFU uses shared.sizing's MaxText convention (causal attention halved) against the devices'
bf16 peak; the PaLM convention (non-causal, as tpuchat reports) is printed beside it. Inputs
are random tokens: this measures the step, not the data pipeline. Each configuration in the
sweep is compiled, warmed up, then timed over `--steps` steps with one device sync at the end
(per-step syncs would add host latency to every step). The file is rewritten after every point
(`complete` false until the last); a point that runs out of memory or fails otherwise is
recorded with its error and the sweep goes on.

    # on a GPU (H100/H200) or TPU: the 130m config, a sweep of batch and attention
    python benchmarks/bench_train.py --config 130m --seq 2048 --batches 16,32,64 \\
        --attention default,xla --out benchmarks/results/train_h100.json
    # CPU smoke run of the same code path (MFU there is against a measured matmul peak)
    JAX_PLATFORMS=cpu python benchmarks/bench_train.py --config tiny --seq 128 --batches 8 \\
        --steps 3 --out benchmarks/results/04_train_cpu.json
"""

import argparse
import time
import traceback
from pathlib import Path

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from shared import sizing  # noqa: E402
from shared.errors import BadInput, run_cli  # noqa: E402
from shared.hardware import measure, sharding  # noqa: E402
from shared.pretrain import model, optim, train  # noqa: E402
from shared.report import results  # noqa: E402


def bench_point(
    config_name: str,
    batch: int,
    seq: int,
    attention: str | None,
    remat: str,
    microbatches: int,
    steps: int,
    mesh,
) -> dict:
    """Compile, warm up and time one configuration; out-of-memory becomes a data point."""
    overrides = {"T": seq, "remat": remat, **({"attention": attention} if attention else {})}
    config = model.config(config_name, **overrides)
    tx = optim.make_optimizer(3e-4, 0.1, 1000, 10, 0.2, 1.0)
    point = {
        "config": config_name,
        "batch": batch,
        "seq": seq,
        "microbatches": microbatches,
        "attention": attention or "default",
        "remat": remat,
    }

    def run():
        graphdef, params, opt_state = train.init_state(config, tx, mesh, seed=0)
        step = train.make_train_step(graphdef, config, tx, microbatches)
        tokens = jax.random.randint(jax.random.key(0), (batch, seq + 1), 0, config.V, jnp.int32)
        tokens = jax.device_put(tokens, sharding.batch_sharding(mesh))
        start = time.perf_counter()
        params, opt_state, out = step(params, opt_state, tokens)
        jax.block_until_ready(out["loss"])
        compile_and_first = time.perf_counter() - start
        params, opt_state, out = step(params, opt_state, tokens)  # warm-up
        jax.block_until_ready(out["loss"])
        start = time.perf_counter()
        for _ in range(steps):
            params, opt_state, out = step(params, opt_state, tokens)
        jax.block_until_ready(out["loss"])
        return compile_and_first, (time.perf_counter() - start) / steps, float(out["loss"])

    with jax.set_mesh(mesh):
        result, oom = measure.run_or_oom(run)
    if oom:
        return {**point, "out_of_memory": oom}
    compile_s, step_s, loss = result
    peak, peak_label = train.peak_flops()
    tok_per_s = batch * seq / step_s
    dims = config.dims()
    return {
        **point,
        "params": sizing.param_counts(dims)["total"],
        "compile_and_first_s": compile_s,
        "step_s": step_s,
        "tok_per_s": tok_per_s,
        "loss": loss,
        "mfu": sizing.mfu(tok_per_s, sizing.flops_per_token(dims, seq), peak),
        "mfu_palm": sizing.mfu(tok_per_s, sizing.flops_per_token(dims, seq, "palm"), peak),
        "mfu_peak": peak_label,
        "peak_bytes_per_device": measure.peak_bytes_per_device(),
    }


def write_report(out: Path, head: dict, points: list[dict], planned: int) -> dict | None:
    """The results file with the points measured so far (`complete` once all `planned` are);
    returns the point of highest MFU."""
    best = max((pt for pt in points if "mfu" in pt), key=lambda pt: pt["mfu"], default=None)
    complete = len(points) == planned
    results.write(out, {**head, "complete": complete, "points": points, "best": best})
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", default="130m", help=", ".join(model.CONFIGS))
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batches", default="16,32", help="global batch sizes, comma-separated")
    p.add_argument(
        "--attention",
        default="default",
        help="comma-separated: default (by backend), xla, cudnn, splash, pallas_gpu",
    )
    p.add_argument("--remat", default="none", help="none | block | dots")
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
    p.add_argument("--mesh", help="FSDPxTP (default: all devices on fsdp)")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = p.parse_args(argv)
    mesh = sharding.make_mesh(args.mesh)
    device = jax.devices()[0]
    head = {
        **results.header("benchmarks/bench_train.py", argv),
        "backend": device.platform,
        "device_kind": device.device_kind,
        "devices": jax.device_count(),
        "flop_convention": "mfu: maxtext (causal attention halved); mfu_palm: non-causal",
    }
    planned = len(args.attention.split(",")) * len(args.batches.split(","))
    points = []
    for attention in args.attention.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            sharding.check_batch(batch // args.microbatches, mesh)
            try:
                point = bench_point(
                    args.config,
                    batch,
                    args.seq,
                    None if attention == "default" else attention,
                    args.remat,
                    args.microbatches,
                    args.steps,
                    mesh,
                )
            except BadInput:
                raise
            except Exception as err:  # not out of memory (a point already): a point too
                traceback.print_exc()
                first = (str(err).strip().splitlines() or [""])[0]
                point = {
                    "config": args.config,
                    "batch": batch,
                    "seq": args.seq,
                    "attention": attention,
                    "error": f"{type(err).__name__}: {first[:300]}",
                }
            points.append(point)
            shown = (
                f"{point['tok_per_s']:>12,.0f} tok/s  MFU {point['mfu']:.1%} "
                f"(PaLM {point['mfu_palm']:.1%})"
                if "tok_per_s" in point
                else f"out of memory: {point['out_of_memory'][:80]}"
                if "out_of_memory" in point
                else f"failed: {point['error'][:80]}"
            )
            print(
                f"{args.config} B={batch:<4} T={args.seq} attention={point['attention']:<10} "
                f"{shown}",
                flush=True,
            )
            # after every point, so a run stopped at a time limit keeps what it measured
            best = write_report(args.out, head, points, planned)
    if best:
        print(
            f"best: B={best['batch']} attention={best['attention']} "
            f"{best['tok_per_s']:,.0f} tok/s, MFU {best['mfu']:.1%} -> {args.out}"
        )
    return 0


if __name__ == "__main__":
    run_cli(main)
