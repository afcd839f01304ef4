"""tunix's activation shardings, applied under whatever mesh is in context, on any host.

Every tunix family pins its activations' layout inside the model: `shard(x, act_btd)` after the
embedding and each block, `shard(q, act_btnh)` for the attention projections, `act_btf` for the
MLP's hidden layer (batch over "fsdp", the wide dimension over "tp"). tunix 0.1.7's helpers
(`tunix.utils.sharding_utils.shard`, and a `shard` of its own in the gemma, llama3, qwen2 and
qwen3 model modules) do two things that make a multi-chip program we compile differ from the one
tunix runs on a TPU:

- they read only the legacy mesh (`pxla.thread_resources`, set by `with mesh:`), which
  `jax.set_mesh` (what shared/ enters, and what JAX 0.10 asks for: `with mesh:` is deprecated)
  leaves empty; and
- they return `x` untouched whenever `jax.devices()[0]` is a CPU, which it always is when plan
  mode compiles deviceless for a TPU topology.

Without the constraints XLA is free to gather the whole batch on every chip: gemma3-1b's LoRA
step at sequence 2048 on a v5e-8 held 14.44 GB of temporaries at batch 8 and did not fit 16
(`benchmarks/results/activation_sharding.json`). tunix's own RL cluster enters each role's mesh
with `with mesh:` on a TPU, so its GRPO does keep them: a verdict without them describes a
program nobody runs.

`install()` (called once when `shared.models` is imported) replaces each of those helpers with
`constrain`, which reads the mesh `jax.set_mesh` put in context, or failing that the legacy
one, and constrains on every platform. So plan mode (a CPU host compiling for TPU devices),
device mode (a TPU or GPU) and the CPU tests with 8 virtual devices all trace the same
constraints, which is what tunix's models declare for a TPU. With no mesh in context (a
one-device local run), the helper does what tunix's does: nothing. We patch rather than copy the
models because the constraint sites are tunix's, not ours: a tunix release that moves or adds one
keeps working, and `shard_sites()` lets a test notice a helper that disappeared.

What this does not reach: `use_flash_attention` in gemma4, qwen2 and qwen3 reads the legacy
mesh itself for its shard_map (no config we build enables it); qwen3's MoE layer, which picks
its megablox path by the legacy mesh and the host's platform, has its own wrapper
(shared.models.expert_routing); `tunix.sft.sharding_utils.shard` belongs to PeftTrainer, which
we do not run.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings

import jax
import jax.numpy as jnp
from jax.interpreters import pxla
from jax.sharding import NamedSharding, PartitionSpec

# Every tunix module whose models call a `shard(x, spec)` at run time, as a global name of that
# module (gemma, gemma4, llama3, qwen2, qwen3) or as `sharding_utils.shard` (gemma3, its vision
# tower), so replacing the module attribute reaches every call site.
SHARD_HELPER_MODULES = (
    "tunix.utils.sharding_utils",
    "tunix.models.gemma.model",
    "tunix.models.gemma4.model",
    "tunix.models.llama3.model",
    "tunix.models.qwen2.model",
    "tunix.models.qwen3.model",
)


def mesh_in_context():
    """The mesh `jax.set_mesh` entered (abstract: it is what a trace may read), else the legacy
    `with mesh:` one, else None."""
    abstract = jax.sharding.get_abstract_mesh()
    if not abstract.empty:
        return abstract
    with warnings.catch_warnings():  # deprecated in JAX 0.8.2, and what tunix enters
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy = pxla.thread_resources.env.physical_mesh
    return None if legacy.empty else legacy


def constrain(x, spec: tuple, eager: bool = False):
    """tunix's `shard(x, spec, eager)` without its two blind spots: constrain `x` to
    PartitionSpec(*spec) on the mesh in context, whatever the host's platform is.

    `eager` (gemma4's KV-cache initialisation) needs no branch of its own: outside a trace
    with_sharding_constraint places the array in that sharding, as tunix's device_put does."""
    mesh = mesh_in_context()
    if mesh is None:
        return jnp.asarray(x)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))


def shard_sites() -> dict[str, object]:
    """Each helper module's current `shard`, by module name."""
    return {name: importlib.import_module(name).shard for name in SHARD_HELPER_MODULES}


_AS_SHIPPED: dict[str, object] = {}  # tunix's own helpers, kept for as_tunix_ships


def install() -> None:
    """Point every tunix `shard` helper at `constrain`; idempotent."""
    for name, fn in shard_sites().items():
        if fn is not constrain:
            _AS_SHIPPED[name] = fn
        importlib.import_module(name).shard = constrain


def installed() -> bool:
    return all(fn is constrain for fn in shard_sites().values())


@contextlib.contextmanager
def as_tunix_ships():
    """tunix's own helpers back for the duration: what a program compiles to without this
    module (benchmarks/bench_activation_sharding.py measures the difference). Not for runs.

    JAX caches traces by function and arguments, not by the helpers a trace called, so the
    caches are cleared on the way in and out: neither side may reuse the other's program."""
    jax.clear_caches()
    for name, fn in _AS_SHIPPED.items():
        importlib.import_module(name).shard = fn
    try:
        yield
    finally:
        install()
        jax.clear_caches()
