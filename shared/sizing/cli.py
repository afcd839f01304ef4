"""`python -m shared.sizing params|kv|train ...`: the closed-form answers of shared.sizing as a
table (or JSON), for a preset model or custom dimensions."""

import argparse
import json

from shared.errors import BadInput
from shared.hardware import parse_target
from shared.sizing import (
    FLOP_CONVENTIONS,
    PRESETS,
    REMAT_POLICIES,
    ModelDims,
    custom,
    flops_per_token,
    human,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    mesh_choice,
    min_chips_for_memory,
    param_counts,
    preset,
    training_memory,
    training_seconds,
)


def _dims_from_args(args) -> ModelDims:
    custom_given = [
        args.layers,
        args.d_model,
        args.d_ff,
        args.heads,
        args.kv_heads,
        args.head_dim,
        args.vocab,
    ]
    if args.model and any(v is not None for v in custom_given):
        raise BadInput("give either --model PRESET or the custom dimensions, not both")
    if args.model:
        return preset(args.model)
    if any(v is None for v in custom_given):
        raise BadInput(
            "custom dimensions need all of --layers --d-model --d-ff --heads "
            f"--kv-heads --head-dim --vocab (or --model, one of: {', '.join(PRESETS)})"
        )
    return custom(
        L=args.layers,
        D=args.d_model,
        F=args.d_ff,
        N=args.heads,
        K=args.kv_heads,
        H=args.head_dim,
        V=args.vocab,
        tied=not args.untied,
        T=args.seq,
    )


def _report_params(dims: ModelDims, args) -> dict:
    return {"model": dims.name, **param_counts(dims)}


def _report_kv(dims: ModelDims, args) -> dict:
    per_token = kv_cache_bytes_per_token(dims, args.bytes_per_element)
    total = kv_cache_bytes(dims, args.batch, args.cache_len, args.bytes_per_element)
    report = {
        "model": dims.name,
        "batch": args.batch,
        "cache_len": args.cache_len,
        "bytes_per_token": per_token,
        "kv_cache_bytes": total,
    }
    if args.hardware:
        target = parse_target(args.hardware)
        if target.hbm_bytes_total is None:
            raise BadInput(f"{target.name} has no fixed memory size to compare against")
        weights = param_counts(dims)["total"] * 2
        report.update(
            target=target.name,
            hbm_bytes_total=target.hbm_bytes_total,
            params_bf16_bytes=weights,
            fits_weights_plus_cache=weights + total <= target.hbm_bytes_total,
        )
    return report


def _report_train(dims: ModelDims, args) -> dict:
    target = parse_target(args.hardware)
    chips = target.chips if args.chips is None else args.chips
    peak = target.chip.peak_bf16_flops
    if peak is None or target.chip.hbm_bytes is None:
        raise BadInput(f"train sizing needs a chip with a known peak and HBM, not {target.name}")
    fpt = flops_per_token(dims, args.seq, args.convention)
    memory = training_memory(dims, args.batch_tokens, chips=chips, remat=args.remat)
    seconds = training_seconds(args.tokens, fpt, peak * chips, args.mfu)
    report = {
        "model": dims.name,
        "hardware": target.chip.name,
        "chips": chips,
        "params": param_counts(dims)["total"],
        "flop_convention": args.convention,
        "flops_per_token": fpt,
        "total_flops": fpt * args.tokens,
        "memory_bytes": memory,
        "min_chips_for_memory": min_chips_for_memory(memory["total"], target.chip.hbm_bytes),
        "fits_per_chip": memory["per_chip"] <= target.chip.hbm_bytes,
        "training_days": seconds / 86400,
        "mfu": args.mfu,
    }
    if target.chip.ici_link_bandwidth is not None and chips > 1:
        report["mesh"] = mesh_choice(dims, args.batch_tokens, chips, target.chip)
    return report


def _print_table(report: dict, prefix: str = "") -> None:
    for key, value in report.items():
        name = prefix + key
        if isinstance(value, dict):
            _print_table(value, prefix=f"{name}.")
        elif isinstance(value, bool | str):
            print(f"{name:<38} {value}")
        elif "bytes" in name:
            print(f"{name:<38} {human(value, 'B')}")
        elif isinstance(value, int) and value >= 1e6:
            print(f"{name:<38} {human(value)}  ({value:,})")
        elif isinstance(value, int):
            print(f"{name:<38} {value:,}")
        else:
            print(f"{name:<38} {value:.4g}")


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(prog="python -m shared.sizing", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", help=f"preset: {', '.join(PRESETS)}")
    for flag in ("layers", "d-model", "d-ff", "heads", "kv-heads", "head-dim", "vocab"):
        common.add_argument(f"--{flag}", type=int)
    common.add_argument("--untied", action="store_true", help="custom model: separate LM head")
    common.add_argument("--seq", type=int, help="sequence length T (attention FLOPs)")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub.add_parser("params", parents=[common], help="parameter counts by part")
    kv = sub.add_parser("kv", parents=[common], help="KV-cache bytes")
    kv.add_argument("--batch", type=int, default=1)
    kv.add_argument("--cache-len", type=int, default=1024)
    kv.add_argument("--bytes-per-element", type=int, default=2)
    kv.add_argument("--hardware", help="target, e.g. v5e-1: do weights + cache fit?")
    train = sub.add_parser("train", parents=[common], help="FLOPs, memory, chips, days, mesh")
    train.add_argument("--tokens", type=float, required=True, help="training tokens")
    train.add_argument("--batch-tokens", type=float, required=True, help="tokens per step")
    train.add_argument("--hardware", required=True, help="chip or target: v5p, v5e-8, h100")
    train.add_argument("--chips", type=int, help="chip count (default: the target's)")
    train.add_argument("--mfu", type=float, default=0.4)
    train.add_argument("--remat", default="book3", help=f"one of {', '.join(REMAT_POLICIES)}")
    train.add_argument("--convention", default="maxtext", help=", ".join(FLOP_CONVENTIONS))
    args = parser.parse_args(argv)
    dims = _dims_from_args(args)
    build = {"params": _report_params, "kv": _report_kv, "train": _report_train}[args.command]
    report = build(dims, args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    return 0
