"""The largest buffers a compiled program allocates on one device, with their shapes and what
they are: the evidence behind a verdict's bytes that a reader can check at a glance.

`memory_analysis()` gives totals only. The optimised HLO (`compiled.as_text()`) is the program
after SPMD partitioning, so every shape in it is per device: a batch split over 8 chips shows
as B/8 there, a batch gathered on every chip as B. Each instruction of a computation the
program runs (the entry, loop bodies, called computations; not the insides of fusions, which
live in registers and VMEM) is a buffer XLA allocates, unless it only renames another one
(bitcast, get-tuple-element, tuple, parameter). Shapes are logical: the compiler's tile padding
of small minor dimensions is not in them. Which of these are alive at the same moment is the
compiler's schedule, which only the totals reflect.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Bytes per element of the HLO element types a model program uses.
_ITEM_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
    "f32": 4, "s32": 4, "u32": 4,
    "f64": 8, "s64": 8, "u64": 8,
}  # fmt: skip
_RENAMES = {"bitcast", "get-tuple-element", "tuple", "parameter", "constant", "while", "call"}
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = (\(.*?\)|\w+\[[\d,]*\])\S* ([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_FUSED = re.compile(r"calls=%?([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
# Names of JAX's own transformations and control flow: they say how, not what.
_PLUMBING = {"jvp", "transpose", "vmap", "while", "body", "cond", "closed_call", "checkpoint"}
_PLUMBING |= {"remat", "pjit", "branch_0_fun", "branch_1_fun", "scan", "shard_map"}
_UNNAMED = "(no source op)"
_LAYER = re.compile(r"layers?[_.\[](\d+)")


def describe(op_name: str) -> tuple[str, int | None]:
    """A short reading of an op's JAX name path, and its layer if it belongs to one:
    ('attention/BTNH,BSNH->BTNS, backward', 3)."""
    if not op_name:
        return _UNNAMED, None
    path = op_name.split("/", 1)[1] if op_name.startswith("jit(") and "/" in op_name else op_name
    layer = _LAYER.search(path)
    parts = [
        p for p in re.split(r"[/()]", path) if p and p not in _PLUMBING and not _LAYER.fullmatch(p)
    ]
    if len(parts) > 1:  # the last is the primitive (dot_general, add): the module says more
        parts = parts[:-1]
    what = "/".join(parts[-2:]) + (", backward" if "transpose(" in op_name else "")
    return what, int(layer.group(1)) if layer else None


def largest(hlo_text: str, n: int = 6) -> list[dict]:
    """The `n` largest buffers of a compiled program's HLO text, largest first. Buffers of one
    shape and type are one row: the source that makes most of them names it (`what`), with
    the layers they appear in, how many there are, and how many other sources make that shape
    too (a gathered weight is made once per layer that reads it)."""
    fused: set[str] = set()
    for text in hlo_text.splitlines():
        if " fusion(" in text:
            fused.update(_FUSED.findall(text))
    found: dict[tuple, dict] = {}
    computation = None
    for text in hlo_text.splitlines():
        if not text.startswith(" ") and (header := _COMPUTATION.match(text)):
            computation = header.group(1)  # a computation's header; its instructions indent
            continue
        if computation in fused or not (inst := _INSTRUCTION.match(text)):
            continue
        shape, opcode, rest = inst.groups()
        if opcode in _RENAMES:
            continue
        source = _OP_NAME.search(rest)
        what, layer = describe(source.group(1) if source else "")
        for dtype, dims in _ARRAY.findall(shape):
            if dtype not in _ITEM_BYTES:
                continue
            dims = [int(d) for d in dims.split(",") if d]
            row = found.setdefault(
                (dtype, tuple(dims)),
                {
                    "shape": dims,
                    "dtype": dtype,
                    "bytes": math.prod(dims) * _ITEM_BYTES[dtype],
                    "sources": Counter(),
                    "layers": set(),
                },
            )
            row["sources"][what] += 1
            if layer is not None:
                row["layers"].add(layer)
    rows = []
    for row in found.values():
        sources = row.pop("sources")
        # a source op names it when any does: copies and layout changes carry no metadata
        (what, _), *others = sorted(sources.items(), key=lambda kv: (kv[0] == _UNNAMED, -kv[1]))
        rows.append(
            {
                **row,
                "what": what,
                "layers": sorted(row["layers"]),
                "count": sum(sources.values()),
                "other_sources": len(others),
            }
        )
    rows.sort(key=lambda r: (-r["bytes"], -r["count"], r["what"]))
    return rows[:n]


def line(buffer: dict) -> str:
    """'[8, 2048, 6912] bf16 108.0 MiB: mlp, layers 0-25 (x52)'."""
    layers = sorted(buffer["layers"])
    where = (
        f", layer {layers[0]}"
        if len(layers) == 1
        else f", layers {layers[0]}-{layers[-1]}"
        if layers
        else ""
    )
    others = buffer.get("other_sources", 0)
    times = ", ".join(
        ([f"x{buffer['count']}"] if buffer["count"] > 1 else [])
        + ([f"{others} other source{'s' if others > 1 else ''}"] if others else [])
    )
    times = f" ({times})" if times else ""
    return (
        f"[{', '.join(map(str, buffer['shape']))}] {buffer['dtype']} "
        f"{buffer['bytes'] / 2**20:.1f} MiB: {buffer['what']}{where}{times}"
    )


_PALLAS = re.compile(r'op_name="[^"]*?jit\((\w+)\)/pallas_call')
_RAGGED_KERNEL = re.compile(r'op_name="[^"]*/(ragged-dot)[\w\-]*"')  # XLA:TPU's own kernel for it
_RAGGED = re.compile(r"\b(ragged-all-to-all|ragged-dot)\(")


def kernels(hlo_text: str) -> dict[str, int]:
    """The hand-written kernels and ragged ops a compiled program runs, by name, with how many
    instructions call each: {'gmm (Pallas)': 12, 'ragged-all-to-all': 8}. Which path a mixture
    of experts took is visible only here: qwen3's layer runs megablox's `gmm` on a TPU and a
    dense einsum per expert elsewhere (shared.models.expert_routing); gemma4's `ragged_dot`
    becomes a kernel XLA:TPU writes itself ('ragged-dot (XLA kernel)')."""
    found: Counter = Counter()
    for text in hlo_text.splitlines():
        if "custom-call(" in text and (pallas := _PALLAS.search(text)):
            found[f"{pallas.group(1)} (Pallas)"] += 1
        elif "custom-call(" in text and _RAGGED_KERNEL.search(text):
            found["ragged-dot (XLA kernel)"] += 1
        found.update(_RAGGED.findall(text))
    return dict(found)
