"""tunix's Qwen 3 mixture-of-experts layer, routed by the platform the program is compiled for.

tunix 0.1.7's `qwen3.model.MoELayer` has two paths. Its "Distributed Megablox Execution Path"
is what it runs on a TPU: a shard_map over the mesh, the experts split over "fsdp" (the expert
axis it reads from `exp_weight_edf[0]`), tokens sent to their experts' chips with
`ragged_all_to_all`, and three `megablox.gmm` grouped matmuls (Pallas TPU kernels). The other
is a dense fallback for a CPU: every token through all 128 experts, one einsum per expert, 16x
the FLOPs of the 8 it is routed to. The layer takes the fallback whenever the legacy mesh
(`pxla.thread_resources`, set by `with mesh:`) is empty or `jax.devices()[0]` is a CPU.

Plan mode meets both conditions: it enters `jax.set_mesh`, and it compiles for a TPU slice from
a CPU host. So a plan compiled the fallback, a program no TPU runs: qwen3-30b-a3b cut to 2 layers
held 1,623 dot_generals and 10.3 GB of temporaries for a LoRA step at batch 8, sequence 2048 on
a v5e-8, and the whole model did not compile within this project's 23 GiB host.

`install()` (called once when `shared.models` is imported) wraps the layer's `__call__` so that,
under a mesh in context, it sees that mesh as tunix's RL cluster shows it on a TPU: entered with
`with mesh:`, and `jax.devices()` (as the layer's module reads it) answering with the mesh's own
devices. The platform is then the target's: a TPU slice takes megablox, as a TPU run does; a
CPU mesh (the tests' 8 virtual devices) takes the fallback, as tunix does there; a GPU takes
megablox too, a TPU kernel, which is why tunix's Qwen 3 MoE does not compile for a GPU (the plan
says so). With no mesh in context (a one-device local run) the layer runs as shipped. We wrap
rather than copy the layer because the routing is tunix's: a release that changes it keeps
being what we compile.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import warnings

import jax

# The concrete mesh `jax.set_mesh` entered, readable inside a trace: jax's public
# `jax.sharding.get_mesh` refuses to answer under `jax.jit`, and the layer traces there.
from jax._src.mesh import get_concrete_mesh

MOE_MODULE = "tunix.models.qwen3.model"


class _JaxOnMeshDevices:
    """The `jax` module as the layer's module sees it while a mesh is traced: `devices()` is the
    mesh's devices (their platform is the target's), everything else is jax's own."""

    def __init__(self, devices: list):
        self._devices = devices

    def devices(self, backend=None):
        return list(self._devices) if backend is None else jax.devices(backend)

    def __getattr__(self, name: str):
        return getattr(jax, name)


@contextlib.contextmanager
def _as_on_mesh(module, mesh):
    """`mesh` entered the legacy way and the module's `jax.devices()` answering with its devices,
    for the duration."""
    with warnings.catch_warnings():  # `with mesh:` is deprecated, and what tunix enters
        warnings.simplefilter("ignore", DeprecationWarning)
        with mesh:
            module.jax = _JaxOnMeshDevices(list(mesh.devices.flat))
            try:
                yield
            finally:
                module.jax = jax


def routed_on_target(call):
    """`MoELayer.__call__`, routed as on the platform of the mesh in context (module doc)."""

    @functools.wraps(call)
    def wrapped(self, x, *args, **kwargs):
        mesh = get_concrete_mesh()
        if mesh.empty:
            return call(self, x, *args, **kwargs)
        with _as_on_mesh(importlib.import_module(MOE_MODULE), mesh):
            return call(self, x, *args, **kwargs)

    wrapped.routed_on_target = True
    return wrapped


def install() -> None:
    """Wrap tunix's MoE layer once (idempotent)."""
    layer = importlib.import_module(MOE_MODULE).MoELayer
    if not getattr(layer.__call__, "routed_on_target", False):
        layer.__call__ = routed_on_target(layer.__call__)


def installed() -> bool:
    return getattr(importlib.import_module(MOE_MODULE).MoELayer.__call__, "routed_on_target", False)


def runs_megablox(cfg) -> bool:
    """Whether tunix runs this model config's experts through megablox on a mesh: a Qwen 3
    mixture of experts (the layer this module routes)."""
    from tunix.models.qwen3 import model as qwen3_lib

    return isinstance(cfg, qwen3_lib.ModelConfig) and bool(getattr(cfg, "num_experts", None))


def expert_layout(cfg, mesh_shape: dict[str, int]) -> str | None:
    """How tunix lays a mixture of experts out on a (fsdp, tp) mesh and which path computes it,
    in one line; None for a dense model. Both families declare the expert stacks split on
    their expert axis over fsdp and one matrix dimension over tp (`exp_weight_edf`,
    `exp_weight_efd`); what each device then gathers is the compiler's, in the verdict's
    largest buffers."""
    experts = getattr(cfg, "num_experts", None)
    if not experts:
        return None
    routed = cfg.num_experts_per_tok
    fsdp, tp = mesh_shape.get("fsdp", 1), mesh_shape.get("tp", 1)
    stored = (
        f"experts: {experts} a layer, {routed} per token, stored {experts // fsdp} per device "
        f"(the expert axis over fsdp={fsdp}, their matrices over tp={tp})"
    )
    if runs_megablox(cfg):
        return (
            f"{stored}; tunix's megablox path: tokens travel to their experts' devices by "
            "ragged all-to-all over fsdp and three Pallas grouped matmuls (gmm) run the local "
            "experts, as on a TPU"
        )
    return (
        f"{stored}; tunix's ragged_dot path, partitioned by XLA (no expert-parallel "
        "all-to-all): the largest buffers show what each device gathers"
    )
