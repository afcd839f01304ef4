"""Plan mode: "will it fit on that TPU?" answered on a laptop by the real TPU compiler.

libtpu from PyPI compiles for TPU topologies on a machine without a TPU
(`jax.experimental.topologies.get_topology_desc`). We lower the SAME jitted functions that
device mode runs, with abstract arguments (ShapeDtypeStructs carrying the model's own
shardings on a mesh of the target's devices), compile them, and read per-device bytes from
`memory_analysis()` and FLOPs / bytes accessed from `cost_analysis()`.

    python -m shared.plan rollout --model gemma3-1b --target v5e-1 --max-batch \\
        --cache-size 1312 --prompt-len 256 --steps 1024

Results are cached on disk, keyed by the workload, its arguments, the versions of jax/libtpu/
tunix/qwix and the source of shared/, because a compile of gemma3-1b takes tens of seconds.
"""

import os

if __name__ == "__main__":  # plan mode never needs the local accelerator
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses
import glob
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import jax
from jax.sharding import Mesh

from shared.errors import BadInput, choose, run_cli
from shared.hardware import Target, parse_target
from shared.measure import Executable, compiled_cost, compiled_memory, is_out_of_memory
from shared.sharding import make_mesh, mesh_shape
from shared.sizing import human

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("TPU_BUDGET_LAB_PLAN_CACHE", REPO / ".cache" / "plan"))


# ---------------------------------------------------------------------------- target -> mesh


def _quiet_libtpu_without_tpu() -> None:
    """On a host with no TPU, tell libtpu what it would otherwise probe for (and complain about),
    and let several processes load it: compiling needs no chip, so libtpu's one-process
    lockfile (/tmp/libtpu_lockfile) would only stop a second notebook or CLI from planning.

    Only defaults are set, and only when no TPU device node exists, so a real TPU VM is untouched.
    """
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    for key, value in (("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"),
                       ("TPU_WORKER_ID", "0"), ("TPU_ACCELERATOR_TYPE", "v5litepod-8"),
                       ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")):
        os.environ.setdefault(key, value)


def topology_devices(target: Target) -> list:
    """The abstract TPU devices of `target`, for ahead-of-time compilation."""
    if not target.chip.is_tpu:
        raise BadInput(f"plan mode compiles for TPU targets; {target.name} is not one "
                       "(try v5e-1, v5e-8, v6e-1, v6e-8, v5p-8)")
    if target.topology is None:
        raise BadInput(f"no TPU topology for {target.name}: use a power-of-two chip count "
                       f"such as {target.chip.name}-8")
    try:
        from jax.experimental import topologies
    except ImportError as err:
        raise BadInput(f"plan mode needs jax.experimental.topologies: {err}") from err
    try:
        import libtpu  # noqa: F401
    except ImportError as err:
        raise BadInput("plan mode needs libtpu: pip install -r requirements.txt "
                       "(it pins jax[tpu], which brings libtpu)") from err
    _quiet_libtpu_without_tpu()
    kwargs = {}
    if target.single_host_bounds is not None:
        kwargs["chips_per_host_bounds"] = target.single_host_bounds
    try:
        topology = topologies.get_topology_desc(platform="tpu", topology_name=target.topology,
                                                **kwargs)
    except Exception as err:  # libtpu raises plain RuntimeErrors for unknown topologies
        raise BadInput(f"libtpu could not make topology {target.topology} for {target.name}: "
                       f"{str(err).splitlines()[0]}") from err
    return list(topology.devices)


def target_mesh(target: Target, mesh: str | None = None) -> Mesh:
    """An ("fsdp", "tp") mesh over the target's devices; default all on fsdp."""
    return make_mesh(mesh, topology_devices(target))


# ---------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Request:
    """Everything that decides what gets compiled: the cache key."""

    workload: str
    model: str
    target: str
    batch: int = 8
    seq: int = 1024
    prompt_len: int = 256
    steps: int = 1024
    cache_size: int | None = None
    logits: str = "full"
    k: int = 128
    lora_rank: int = 8
    mesh: str | None = None
    microbatches: int = 1
    remat: str = "none"
    fast: bool = False  # compile with the least optimisation effort: see FAST_COMPILE

    def key(self) -> str:
        versions = {name: _version(name) for name in ("jax", "jaxlib", "libtpu", "google-tunix",
                                                      "qwix", "flax")}
        sources = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(
            (REPO / "shared").glob("*.py")))).hexdigest()
        blob = json.dumps({"request": dataclasses.asdict(self), "versions": versions,
                           "sources": sources}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _rollout(request: Request, mesh: Mesh, lora: bool = False) -> list[Executable]:
    """tunix Sampler prefill and decode, in tunix's sampling layout (weights not FSDP-sharded:
    each fsdp slice of the mesh generates for its own share of the batch)."""
    from shared import gemma
    from shared.lora import default_alpha

    cache = request.cache_size or request.prompt_len + request.steps
    rollout = gemma.abstract_rollout(
        request.model, request.batch, request.prompt_len, request.steps, cache, mesh=mesh,
        is_sampling=True, lora_rank=request.lora_rank if lora else None,
        lora_alpha=default_alpha(request.lora_rank) if lora else None)
    (prefill_args, prefill_kwargs), (decode_args, decode_kwargs) = (rollout.prefill_args(),
                                                                    rollout.decode_args())
    return [
        Executable("prefill", rollout.sampler._compiled_prefill_fn, prefill_args,
                   prefill_kwargs, note=f"prompt {request.prompt_len}, cache {cache}"),
        Executable("decode", rollout.sampler._compiled_decode_fn, decode_args, decode_kwargs,
                   repeats=request.steps,
                   note="XLA counts the decode while-loop body once: FLOPs and bytes x steps"),
    ]


def _forward(request: Request, mesh: Mesh) -> list[Executable]:
    """A teacher-forced pass returning top-k logits: full [B, T, V] then top-k, or chunked."""
    from shared import gemma

    args, kwargs = gemma.abstract_forward_args(request.model, request.batch, request.seq,
                                               mesh=mesh)
    return [Executable(f"forward-{request.logits}", gemma.teacher_forced_top_k, args,
                       {**kwargs, "mode": request.logits, "k": request.k})]


def _lora_train(request: Request, mesh: Mesh) -> list[Executable]:
    """One optax step on the LoRA parameters of Gemma 3 (lora.lora_train_step)."""
    import optax

    from shared import lora

    args = lora.abstract_lora_train_args(request.model, request.batch, request.seq,
                                         request.lora_rank, lora.default_alpha(request.lora_rank),
                                         mesh=mesh, optimizer=optax.adamw(1e-4))
    return [Executable("lora_train_step", lora.lora_train_step, args,
                       note=f"rank {request.lora_rank}, adamw on the adapters only")]


def _train(request: Request, mesh: Mesh) -> list[Executable]:
    from shared import train

    return train.train_executables(request.model, mesh, batch=request.batch, seq=request.seq,
                                   microbatches=request.microbatches, remat=request.remat)


WORKLOADS: dict[str, Callable[[Request, Mesh], list[Executable]]] = {
    "rollout": _rollout,
    "lora-rollout": lambda request, mesh: _rollout(request, mesh, lora=True),
    "forward": _forward,
    "lora-train": _lora_train,
    "train": _train,
}


# ---------------------------------------------------------------------------- one point

# A fast compile (exec_time_optimization_effort -1) cuts XLA:TPU's compile time about 5x for
# Gemma 3 (gemma3-270m prefill: 94 s -> 20 s on 2 cores) but schedules buffers differently, so
# its bytes per device differ from the real compile's, in either direction (temporaries
# 77 -> 124 MB for that prefill; gemma3-1b rollouts fit at batch 375 fast but not exactly):
# a quick estimate, not a verdict near the boundary. Device mode compiles at the default
# effort, which `fast=False` reproduces exactly.
FAST_COMPILE = {"exec_time_optimization_effort": -1.0}


def cache_path(request: Request) -> Path:
    """Where plan_point keeps this request's result."""
    return CACHE_DIR / f"{request.key()}.json"


def is_cached(request: Request) -> bool:
    """Whether plan_point would answer from disk, without compiling (notebooks show cached
    predictions outside plan mode for free)."""
    return cache_path(request).exists()


def plan_point(request: Request, *, use_cache: bool = True) -> dict:
    """Compile the request's executables for its target and report bytes, FLOPs and a verdict.

    `bytes_per_device` is the largest executable's arguments + outputs + temps − aliased: the
    executables of one workload run one after another, so the worst one decides the fit.
    """
    choose("workload", request.workload, WORKLOADS)
    target = parse_target(request.target)
    cache_file = cache_path(request)
    if use_cache and cache_file.exists():
        return {**json.loads(cache_file.read_text()), "cached": True}

    mesh = target_mesh(target, request.mesh)
    if request.batch % mesh.shape["fsdp"]:
        raise BadInput(f"batch {request.batch} does not divide the mesh's fsdp axis of "
                       f"{mesh.shape['fsdp']}: use a multiple of {mesh.shape['fsdp']} "
                       f"or --mesh 1x{mesh.size}")
    hbm = target.chip.hbm_bytes * target.chips // len(mesh.devices.flat)
    executables = {}
    for exe in WORKLOADS[request.workload](request, mesh):
        start = time.perf_counter()
        try:
            with jax.set_mesh(mesh):
                lowered = exe.fn.lower(*exe.args, **exe.kwargs)
                compiled = lowered.compile(FAST_COMPILE) if request.fast else lowered.compile()
            summary = {**compiled_memory(compiled), **compiled_cost(compiled), "refused": None,
                       "compiler_hbm_bytes": None}
        except Exception as err:  # the TPU compiler refuses programs that cannot fit
            summary = refusal(err)
        executables[exe.label] = {**summary, "repeats": exe.repeats, "note": exe.note,
                                  "compile_s": time.perf_counter() - start}
    worst = max(executables, key=lambda label: executables[label]["total_bytes"])
    flops = sum(e["flops"] * e["repeats"] for e in executables.values())
    accessed = sum(e["bytes_accessed"] * e["repeats"] for e in executables.values())
    needed = executables[worst]["total_bytes"]
    refused = any(e["refused"] for e in executables.values())
    usable = [e["compiler_hbm_bytes"] for e in executables.values() if e["compiler_hbm_bytes"]]
    result = {
        **dataclasses.asdict(request),
        "target_chip": target.chip.name, "devices": len(mesh.devices.flat),
        "mesh_shape": dict(mesh.shape), "executables": executables, "worst": worst,
        "bytes_per_device": needed, "hbm_bytes": hbm, "fits": needed <= hbm and not refused,
        "margin_bytes": hbm - needed, "compiler_hbm_bytes": min(usable, default=None),
        "flops_per_device": flops,
        "bytes_accessed_per_device": accessed,
        "roofline_lower_bound_s": max(flops / target.chip.peak_bf16_flops,
                                      accessed / target.chip.hbm_bandwidth),
        "compile_s": sum(e["compile_s"] for e in executables.values()),
    }
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(result, indent=1))
    return {**result, "cached": False}


_SIZE = r"([0-9.]+)([KMGT])"
# The two ways libtpu words a refusal (sizes in binary units):
_OVER_TEMPS = re.compile(rf"required for [^(]*\({_SIZE}\) exceeds available HBM \({_SIZE}\)")
_OVER_USED = re.compile(rf"Used {_SIZE} of {_SIZE} hbm\. Exceeded hbm capacity by {_SIZE}")


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * 1024 ** ("KMGT".index(unit) + 1))


def refusal(err: Exception) -> dict:
    """An executable the TPU compiler refused for lack of HBM, kept as a data point.

    libtpu names what it needed and what it has ("HLO temporaries (15.78G) exceeds available
    HBM (15.75G)", or "Used 15.75G of 15.75G hbm. Exceeded hbm capacity by 5.19M"): the needed
    bytes stand in for the total (a lower bound) and the available bytes are the chip's usable
    HBM, a little under the datasheet's (15.75 of 16 GiB on v5e).
    """
    if not is_out_of_memory(err):
        raise err
    message = str(err).strip().splitlines()[0]
    needed = available = 0
    if match := _OVER_TEMPS.search(message):
        needed, available = _bytes(*match.group(1, 2)), _bytes(*match.group(3, 4))
    elif match := _OVER_USED.search(message):
        available = _bytes(*match.group(3, 4))
        needed = _bytes(*match.group(1, 2)) + _bytes(*match.group(5, 6))
    return {"argument_bytes": 0, "output_bytes": 0, "temp_bytes": needed, "alias_bytes": 0,
            "generated_code_bytes": 0, "total_bytes": needed, "flops": 0.0,
            "bytes_accessed": 0.0, "refused": message[:300],
            "compiler_hbm_bytes": available or None}


# ---------------------------------------------------------------------------- largest batch


def max_batch(request: Request, *, limit: int = 4096, use_cache: bool = True,
              progress: bool = True) -> dict:
    """The largest batch that fits, with every compiled probe recorded as evidence.

    Bytes per device grow close to linearly with the batch (KV cache, activations), so after
    two probes each next batch is where the line through the two probes nearest the boundary
    crosses the usable-HBM line (a secant step), kept strictly inside the bracket of known fit
    and known misfit, stepping by the mesh's fsdp size (the batch must divide it). The answer
    is always the compiler's verdict, never the line's: the search stops only when a fitting
    batch and a failing one are one step apart.

    Unless the request is already `fast`, the search runs on fast compiles first and then
    continues from their boundary with exact ones (stepping down by the fast probes' bytes
    per batch element if the exact compile needs more), so only the last few compiles pay
    the full compile time; both sets of probes are returned.
    """
    from tqdm.auto import tqdm

    target = parse_target(request.target)
    step, _ = mesh_shape(request.mesh, len(topology_devices(target)))
    bar = tqdm(desc=f"max batch {request.workload} {request.model} on {request.target}",
               unit="compile", disable=not progress)
    fast_probes: dict[int, dict] = {}
    start, slope = [step], None
    if not request.fast:
        fast_probes = _search(dataclasses.replace(request, fast=True), [step], step, limit,
                              use_cache, bar)
        low, _ = _bracket(fast_probes)
        start = [low, low + step] if 0 < low < limit else [max(low, step)]
        slope = _slope(fast_probes)
    probes = _search(request, start, step, limit, use_cache, bar, slope)
    bar.close()
    low, high = _bracket(probes)
    return {**dataclasses.asdict(request), "max_batch": low, "first_not_fitting": high,
            "limit": limit, "probes": [probes[b] for b in sorted(probes)],
            "fast_probes": [fast_probes[b] for b in sorted(fast_probes)]}


def _bracket(probes: dict[int, dict]) -> tuple[int, int | None]:
    """(largest batch known to fit, or 0; smallest known not to, or None)."""
    fitting = [b for b, p in probes.items() if p["fits"]]
    failing = [b for b, p in probes.items() if not p["fits"]]
    return max(fitting, default=0), min(failing, default=None)


def _slope(probes: dict[int, dict]) -> float | None:
    """Bytes per device per batch element, from the two largest probes with known bytes."""
    known = sorted(b for b, p in probes.items() if p["bytes_per_device"] > 0)
    if len(known) < 2:
        return None
    a, b = known[-2:]
    return (probes[b]["bytes_per_device"] - probes[a]["bytes_per_device"]) / (b - a) or None


def _search(request: Request, start: list[int], step: int, limit: int, use_cache: bool,
            bar, slope_hint: float | None = None) -> dict[int, dict]:
    """Secant search from the `start` batches; see max_batch. `slope_hint` (bytes per batch
    element, from the fast search) steers down when even the start batches do not fit."""
    probes: dict[int, dict] = {}

    def probe(batch: int) -> None:
        bar.set_postfix(batch=batch, fast=request.fast)
        probes[batch] = plan_point(dataclasses.replace(request, batch=batch), use_cache=use_cache)
        bar.update()

    for batch in start:
        probe(batch)
    edge_probes = 0
    while True:
        low, high = _bracket(probes)
        usable = min(p["compiler_hbm_bytes"] or p["hbm_bytes"] for p in probes.values())
        if low == 0:  # nothing fits yet: step down by the known slope, else halve
            if high == step:
                break
            over = probes[high]["bytes_per_device"] - usable
            guess = high - over / slope_hint if slope_hint and over > 0 else high / 2
            probe(min(max(int(guess) // step * step, step), high - step))
            continue
        ceiling = limit if high is None else high - step
        if low >= ceiling:
            break
        below = sorted(b for b in probes if b < low)
        a, b = (low, high) if high is not None else (below[-1], low) if below else (low, None)
        slope = 0.0 if b is None else (
            (probes[b]["bytes_per_device"] - probes[a]["bytes_per_device"]) / (b - a))
        guess = low + (usable - probes[low]["bytes_per_device"]) / slope if slope > 0 else 2 * low
        guess = min(guess, 8 * low)  # far-off probes extrapolate poorly
        guess = min(max(int(guess) // step * step, low + step), ceiling)
        at_edge = high is not None and guess in (low + step, ceiling) and high - low > 2 * step
        edge_probes = edge_probes + 1 if at_edge else 0
        if edge_probes > 1:  # the line keeps landing on an edge: it is not straight here
            guess, edge_probes = (low + high) // 2 // step * step, 0
        probe(guess)
    return probes


# ---------------------------------------------------------------------------- command line


def _size(n: float) -> str:
    return human(n, "B")


def print_point(point: dict) -> None:
    """A human-readable verdict with the evidence: bytes per executable, FLOPs, roofline."""
    verdict = "FITS" if point["fits"] else "DOES NOT FIT"
    print(f"{'[fast compile: bytes approximate] ' if point['fast'] else ''}"
          f"{point['workload']} {point['model']} batch {point['batch']} on {point['target']} "
          f"(mesh {point['mesh_shape']}): {verdict}, {_size(point['bytes_per_device'])} of "
          f"{_size(point['hbm_bytes'])} per device, margin {_size(point['margin_bytes'])}"
          f"{' [cached]' if point.get('cached') else ''}")
    print(f"  {'executable':<12}{'args':>12}{'outputs':>12}{'temps':>12}{'aliased':>12}"
          f"{'total':>12}{'GFLOP':>10}{'x':>6}{'compile':>9}")
    for label, e in point["executables"].items():
        print(f"  {label:<12}{_size(e['argument_bytes']):>12}{_size(e['output_bytes']):>12}"
              f"{_size(e['temp_bytes']):>12}{_size(e['alias_bytes']):>12}"
              f"{_size(e['total_bytes']):>12}{e['flops'] / 1e9:>10.1f}{e['repeats']:>6}"
              f"{e['compile_s']:>8.1f}s")
        if e["note"]:
            print(f"      {e['note']}")
        if e["refused"]:
            print(f"      refused by the compiler: {e['refused']}")
    if point.get("compiler_hbm_bytes"):
        print(f"  the compiler allows {_size(point['compiler_hbm_bytes'])} of the chip's "
              f"{_size(point['hbm_bytes'])} (the rest is reserved by the runtime)")
    print(f"  roofline (a lower bound, not a prediction): "
          f"{point['roofline_lower_bound_s'] * 1e3:.2f} ms per workload run")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shared.plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", help=", ".join(WORKLOADS))
    parser.add_argument("--model", required=True, help="gemma3-1b, gemma3-tiny, 130m, tiny ...")
    parser.add_argument("--target", required=True, help="v5e-1, v5e-8, v6e-1, v6e-8, v5p-8 ...")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--batch", type=int, default=8)
    size.add_argument("--max-batch", action="store_true", help="search the largest batch")
    parser.add_argument("--limit", type=int, default=4096, help="largest batch to try")
    parser.add_argument("--seq", type=int, default=1024, help="forward/train sequence length")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1024, help="generation steps")
    parser.add_argument("--cache-size", type=int, help="KV cache slots (default prompt+steps)")
    parser.add_argument("--logits", default="full", help="forward: full | topk")
    parser.add_argument("--k", type=int, default=128, help="forward --logits topk: k")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=1, help="train: accumulation steps")
    parser.add_argument("--remat", default="none", help="train: none | block")
    parser.add_argument("--mesh", help="FSDPxTP, e.g. 1x8 (default: all devices on fsdp)")
    parser.add_argument("--fast", action="store_true",
                        help="least compile effort: ~5x quicker, bytes approximate")
    parser.add_argument("--no-cache", action="store_true", help="recompile even if cached")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    request = Request(workload=choose("workload", args.workload, WORKLOADS), model=args.model,
                      target=args.target, batch=args.batch, seq=args.seq,
                      prompt_len=args.prompt_len, steps=args.steps, cache_size=args.cache_size,
                      logits=choose("logits mode", args.logits, ("full", "topk")), k=args.k,
                      lora_rank=args.lora_rank, mesh=args.mesh, microbatches=args.microbatches,
                      remat=args.remat, fast=args.fast)
    if args.max_batch:
        result = max_batch(request, limit=args.limit, use_cache=not args.no_cache,
                           progress=not args.json)
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        if result["fast_probes"]:
            print("fast-compile search (bytes approximate): " + ", ".join(
                f"{p['batch']}: {_size(p['bytes_per_device'])} {'fits' if p['fits'] else 'no'}"
                for p in result["fast_probes"]))
        for point in result["probes"]:
            print_point(point)
        print(f"\nlargest batch that fits: {result['max_batch']}"
              + (f" (batch {result['first_not_fitting']} does not)"
                 if result["first_not_fitting"] else f" (searched up to {args.limit})"))
        return 0
    point = plan_point(request, use_cache=not args.no_cache)
    if args.json:
        print(json.dumps(point, indent=1))
    else:
        print_point(point)
    return 0


if __name__ == "__main__":
    run_cli(main)
