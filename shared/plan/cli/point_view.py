"""A verdict and a search as text: what `python -m shared.plan` prints (the JSON is the same
dicts), kept apart from the command line that parses flags and chooses what to run."""

import json

from shared.hardware.sharding import mesh_name
from shared.plan.cli.flags import flag_for
from shared.plan.compiler import buffers
from shared.plan.search.view import describe
from shared.plan.slices.candidate import roofline_terms
from shared.sizing import human

BUFFERS_SHOWN = 4  # largest per-device buffers printed under each executable (JSON keeps 6)


def _size(n: float) -> str:
    return human(n, "B")


def print_point(point: dict) -> None:
    """A verdict with its evidence: resident and transient bytes, each executable, versions."""
    failed = point.get("compiler_errors")
    verdict = "FITS" if point["fits"] else "THE COMPILER FAILS" if failed else "DOES NOT FIT"
    v = point["versions"]
    print(
        f"{'[fast compile: bytes approximate] ' if point['fast'] else ''}"
        f"{point['workload']} {point['model']} ({point['dtype']} weights) batch "
        f"{point['batch']} on {point['target']} ("
        f"{str(point['hosts']) + ' hosts, ' if point.get('hosts', 1) > 1 else ''}"
        f"mesh {point['mesh_shape']}): {verdict}, "
        f"{_size(point['bytes_per_device'])} of {_size(point['hbm_bytes'])} per device, "
        f"margin {_size(point['margin_bytes'])}{_cached_note(point)}"
    )
    resident = ", ".join(f"{name} {_size(b)}" for name, b in point["resident"].items())
    print(
        f"  = resident {_size(point['resident_bytes'])} ({resident or 'none'}) + transient "
        f"{_size(point['transient_bytes'][point['worst']])} of the worst executable, "
        f"{point['worst']}"
    )
    print(
        f"  {'executable':<16}{'args':>11}{'outputs':>11}{'temps':>11}{'aliased':>11}"
        f"{'transient':>11}{'GFLOP':>9}{'x':>6}{'compile':>9}"
    )
    for label, e in point["executables"].items():
        print(
            f"  {label:<16}{_size(e['argument_bytes']):>11}{_size(e['output_bytes']):>11}"
            f"{_size(e['temp_bytes']):>11}{_size(e['alias_bytes']):>11}"
            f"{_size(point['transient_bytes'][label]):>11}{e['flops'] / 1e9:>9.1f}"
            f"{e['repeats']:>6}{e['compile_s']:>8.1f}s"
        )
        if e["note"]:
            print(f"      {e['note']}")
        if e["refused"]:
            print(f"      refused by the compiler: {e['refused']}")
        if e.get("compiler_error"):
            print(f"      the compiler failed on it (not for lack of HBM): {e['compiler_error']}")
        if e.get("kernels"):  # which path a model took: megablox's gmm, a ragged all-to-all
            print("      kernels: " + ", ".join(f"{k} x{n}" for k, n in e["kernels"].items()))
        for buffer in e.get("largest_buffers", [])[:BUFFERS_SHOWN]:
            print(f"      {buffers.line(buffer)}")
    for note in point["notes"]:
        print(f"  note: {note}")
    gpu = "gpu_memory_fraction" in v  # compiled by jax's CUDA plugin (cache_entries.gpu_compiler)
    allows = (
        f"jax's allocator allows {_size(point['hbm_bytes'])} per GPU "
        f"(XLA_PYTHON_CLIENT_MEM_FRACTION {v['gpu_memory_fraction']} of the memory CUDA reports)"
        if gpu
        else f"the compiler allows {_size(point['hbm_bytes'])} per device"
    )
    plugins = ("jax-cuda12-plugin", "jax-cuda13-plugin", "nvidia-cuda-nvcc-cu12")
    compiler = (
        ", ".join(f"{name} {v[name]}" for name in plugins if v.get(name)) + ", without a GPU"
        if gpu
        else f"libtpu {v['libtpu']}"
    )
    print(
        f"  {allows} (datasheet {_size(point['datasheet_hbm_bytes'])}); compiled with jax "
        f"{v['jax']}, {compiler}, tunix {v['google-tunix']} (Sampler semantics "
        f"{point['tunix']}), qwix {v['qwix']}, flax {v['flax']}"
        + (f", LIBTPU_INIT_ARGS={v['libtpu_init_args']}" if v.get("libtpu_init_args") else "")
    )
    if point["fits"] and not point["roofline_lower_bound_s"]:  # a GPU compile of an own step
        print(
            "  roofline: n/a (a deviceless CUDA compile counts no FLOPs or bytes, and a step of "
            "your own names no weights the plan could count)"
        )
    elif point["fits"]:
        print(
            f"  roofline (a lower bound, not a prediction): "
            f"{point['roofline_lower_bound_s'] * 1e3:.2f} ms per workload run"
        )
        if hint := wider_mesh_hint(point):
            print(f"  {hint}")
    elif failed:  # no program: these versions cannot run this batch, whatever its bytes
        print(
            f"  roofline: n/a (libtpu {v['libtpu']} fails to compile it, so no run has a time; "
            "a smaller batch, or another libtpu, may compile)"
        )
    else:  # a refused or uncompiled executable reports no FLOPs: a roofline would read 0
        print("  roofline: n/a (the workload does not fit, so no run has a time)")


def wider_mesh_hint(point: dict) -> str | None:
    """Where a fitting verdict on several devices is memory-bound and its mesh has room for more
    tp, what to try: fsdp gathers every weight whole onto each chip for its matmuls, tp reads a
    share (GRPO of gemma3-4b at 8 on a v5e-8: 37.4 s a step at the roofline on 8x1, 18.2 on
    2x4: benchmarks/results/08_grpo_v5e8.json). None where the FLOPs term is the larger."""
    mesh = point["mesh_shape"]
    if mesh["tp"] >= point["devices"]:
        return None
    flops_s, bytes_s = roofline_terms(point)
    if bytes_s <= flops_s:
        return None
    return (
        f"memory-bound on {mesh_name(mesh)} (bytes {bytes_s * 1e3:.0f} ms > FLOPs "
        f"{flops_s * 1e3:.0f} ms a run): each chip reads every weight fsdp gathers, where a "
        "mesh with more tp reads a share; --mesh FSDPxTP compiles one, --cheapest compares them"
    )


def describe_committed(row: dict, as_json: bool) -> str:
    """A committed atlas cell as the search's answer, saying where it comes from."""
    if as_json:
        return json.dumps({**row, "from_atlas": True}, indent=1)
    at = (
        f"; {_size(row['bytes_per_device'])} of {_size(row['hbm_bytes'])} per device at "
        f"{row['max_batch']}"
        if row["bytes_per_device"]
        else ""
    )
    return (
        f"{row['summary']}{at}\n  from the committed atlas (benchmarks/results/atlas.jsonl: "
        f"{row['compiles']} compiles on {row['date'][:10]}, the same versions and settings); "
        "--no-cache compiles it again"
    )


def describe_nearby(row: dict, differences: dict) -> str:
    """A committed atlas cell near a search's settings (atlas.answer.nearby_cell), shown
    before the search compiles: the reader may take the atlas's settings instead."""

    def setting(name: str, value) -> str:
        return f"{flag_for(name)} {value}" if value is not None else f"{flag_for(name)} unset"

    where = " and ".join(setting(name, cell) for name, (cell, _) in differences.items())
    asked = " and ".join(setting(name, asked) for name, (_, asked) in differences.items())
    return (
        f"note: the committed atlas answers at once with {where} (you asked {asked}): "
        f"{row['summary']}\n  python -m shared.plan lookup {row['model']} {row['target']} "
        f"{row['recipe']}; compiling your settings now"
    )


def print_search(result: dict) -> None:
    """--max-batch: the located points, every exact verdict, and the answer in one line."""
    fast = [p for p in result["probes"] if p["fast"]]
    if fast:
        print(
            "fast compiles (locate, bytes approximate): "
            + ", ".join(f"{p['batch']}: {_size(p['bytes_per_device'])}" for p in fast)
        )
    if result["assigned_probes"]:
        print(
            "at buffer assignment (locate, bytes before code generation): "
            + ", ".join(
                f"{p['batch']}: {_size(p['bytes_per_device'])}" for p in result["assigned_probes"]
            )
        )
    for point in result["probes"]:
        if not point["fast"]:
            print_point(point)
    cached = sum(p["cached"] for p in (*result["probes"], *result["assigned_probes"]))
    print(
        f"\n{describe(result)}; {result['compiles']} compiles ({cached} cached), "
        f"{result['wall_s']:.0f} s"
    )


def _cached_note(point: dict) -> str:
    """Where a verdict read from the plan cache came from, and how old it is."""
    if not point.get("cached"):
        return ""
    return f" [from the plan cache (compiled {point.get('compiled_on', 'earlier')})]"
