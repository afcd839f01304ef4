"""Every tunix model by one name: configs, dimensions, abstract models, random weights.

Names are ours and stable (`gemma3-1b`, `gemma2-2b`, `gemma4-31b`, `llama3.1-8b`,
`qwen3-8b`, and `<family>-tiny`, a small config of each real architecture for CPU runs). All of
it is family-agnostic: the adapters in this package (`Family`) say what differs.

Weights default to bf16 (what every family's checkpoints hold); `dtype=` overrides it, and every
verdict states it. Families whose tunix config has no dtype field (Gemma 2, Llama 3) build
float32 weights, cast here in the abstract state before anything is allocated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import qwix
from flax import nnx
from jax._src.interpreters import partial_eval

from shared import sizing
from shared.errors import BadInput, choose
from shared.hardware.sharding import make_mesh, on_mesh
from shared.models import gemma2, gemma3, gemma4, hf_config, llama3, qwen3
from shared.models.family import WEIGHT_DTYPE, Family

TINY_VOCAB = 4096  # the local SentencePiece tokenizer's size (shared.data)
FAMILIES: dict[str, Family] = {
    f.name: f for f in (gemma2.FAMILY, gemma3.FAMILY, gemma4.FAMILY, llama3.FAMILY, qwen3.FAMILY)
}
_BY_NAME = (
    {f"{f.name}-tiny": f for f in FAMILIES.values()}
    | {f"{f.name}-moe-tiny": f for f in FAMILIES.values() if f.tiny_moe}
    | {name: f for f in FAMILIES.values() for name in f.presets}
)
MODEL_NAMES = tuple(_BY_NAME)
REMATS = ("none", "block", "decoder")


def family_of(name: str) -> Family:
    """The family adapter for a model name (a preset, or a Hugging Face config.json's path:
    shared.models.hf_config); BadInput naming the valid ones otherwise."""
    if hf_config.is_config(name):
        return FAMILIES[hf_config.family_name(name)]
    return _BY_NAME[choose("model", name, MODEL_NAMES)]


def is_tiny(name: str) -> bool:
    return name.endswith("-tiny")


def model_config(
    name: str,
    *,
    vocab_size: int | None = None,
    is_sampling: bool = False,
    dtype=WEIGHT_DTYPE,
    remat: str = "none",
    layers: int | None = None,
):
    """tunix's config for `name`.

    `is_sampling=True` is tunix's sampling layout (weights not sharded over "fsdp", which
    becomes data parallelism); default is the training layout (FSDP x TP). `vocab_size` applies
    to the tiny configs only (match the local tokenizer). `remat`: none | block | decoder.
    `layers` cuts the model to its first decoder layers (a plan search's cheap probe).
    """
    family = family_of(name)
    choose("remat policy", remat, REMATS)
    if not is_tiny(name) and vocab_size is not None:
        real = family.vocab_size(family.base_config(name))
        if vocab_size != real:
            raise BadInput(
                f"{name} has a fixed vocabulary of {real}; vocab_size is for the *-tiny models"
            )
    cfg = family.config(
        name, vocab_size or TINY_VOCAB, is_sampling=is_sampling, dtype=dtype, remat=remat
    )
    if layers is None:
        return cfg
    if type(layers) is not int or not 1 <= layers <= cfg.num_layers:
        raise BadInput(f"{name} has {cfg.num_layers} decoder layers; cannot cut it to {layers}")
    return family.truncated(cfg, layers)


def attention_period(name: str) -> int:
    """Decoder layers in one repeat of `name`'s attention pattern (see Family)."""
    return family_of(name).attention_period(model_config(name))


def dims(name: str, cfg) -> sizing.ModelDims:
    """The closed-form view of a config (shared.sizing). Exact for dense models with one KV
    layout; for Gemma 4 (wider global KV heads, shared caches) and mixtures of experts it is
    the dense approximation, so plan mode reads bytes from the compiler and KV bytes from the
    cache tunix allocates (see shared.rollout.sampler), never from this."""
    family = family_of(name)
    return sizing.ModelDims(
        name,
        L=cfg.num_layers,
        D=cfg.embed_dim,
        F=cfg.hidden_dim,
        N=cfg.num_heads,
        K=cfg.num_kv_heads,
        H=cfg.head_dim,
        V=family.vocab_size(cfg),
        tied=family.tied(cfg),
        norms_per_layer=family.norms_per_layer,
        qk_norm=family.qk_norm,
    )


def model_dims(name: str, *, vocab_size: int | None = None) -> sizing.ModelDims:
    return dims(name, model_config(name, vocab_size=vocab_size))


def _cast(model, dtype) -> None:
    """Floating-point state of `model` to `dtype`, in place (traced inside eval_shape)."""
    state = nnx.state(model)
    nnx.update(
        model,
        jax.tree.map(
            lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, state
        ),
    )


def lora_provider(family: Family, rank: int, alpha: float):
    """qwix's LoRA provider on the family's attention projections and dense MLP."""
    if rank is None or alpha is None or rank < 1:
        raise BadInput(f"LoRA needs rank >= 1 and an alpha, got rank={rank}, alpha={alpha}")
    return qwix.LoraProvider(module_path=family.lora_module_path, rank=rank, alpha=alpha)


def build(
    name: str,
    cfg,
    *,
    rngs: nnx.Rngs,
    dtype=WEIGHT_DTYPE,
    lora_rank: int | None = None,
    lora_alpha: float | None = None,
):
    """The tunix model for `cfg` with weights in `dtype` (and qwix LoRA when a rank is given).
    Call it under nnx.eval_shape for shapes only.

    qwix creates the adapters during one forward pass; inside Gemma 4's nnx.remat
    (graph_updates=False) they would be created and dropped, so LoRA is applied to the model
    without remat and `cfg.remat_config` switched on afterwards (set_remat)."""
    family = family_of(name)
    remat = cfg.remat_config
    model = family.model_class(
        dataclasses.replace(cfg, remat_config=family.remat["none"]), rngs=rngs
    )
    if family.casts_weights():
        _cast(model, dtype)
    if lora_rank is not None:
        width = dims(name, cfg).D
        if lora_rank > width:  # A [D, r] @ B [r, ...] would not be low rank: a typo, surely
            raise BadInput(f"LoRA rank {lora_rank} exceeds {name}'s model width D={width}")
        model = qwix.apply_lora_to_model(
            model,
            lora_provider(family, lora_rank, lora_alpha),
            rngs=nnx.Rngs(0),
            **model.get_model_input(),
        )
    set_remat(model, remat)
    return model


def set_remat(model, remat) -> None:
    """Switch a built model's remat policy (a tunix RematConfig). tunix reads it at call time
    from `module.config.remat_config`, or (Gemma 3's attention) from `module.remat_config`.
    The config is the one model_config made for this model alone; some families freeze it, so
    its field is set with object.__setattr__."""
    for _, module in nnx.iter_modules(model):
        if hasattr(module, "remat_config"):
            module.remat_config = remat
        config = getattr(module, "config", None)
        if hasattr(config, "remat_config"):
            object.__setattr__(config, "remat_config", remat)


def abstract_model(
    name: str,
    *,
    vocab_size: int | None = None,
    is_sampling: bool = False,
    lora_rank: int | None = None,
    lora_alpha: float | None = None,
    dtype=WEIGHT_DTYPE,
    remat: str = "none",
    layers: int | None = None,
):
    """The model from nnx.eval_shape: shapes and sharding annotations, no memory. The LoRA
    graph comes from the real `qwix.apply_lora_to_model`, traced abstractly. `layers`: see
    model_config."""
    return nnx.merge(
        *_abstract_parts(name, vocab_size, is_sampling, lora_rank, lora_alpha, dtype, remat, layers)
    )


@functools.lru_cache(maxsize=16)
def _abstract_parts(name, vocab_size, is_sampling, lora_rank, lora_alpha, dtype, remat, layers):
    """(graphdef, abstract state), kept: a plan search builds the same model at every batch,
    and tracing a 60-layer model with qwix's LoRA takes tens of seconds."""
    cfg = model_config(
        name,
        vocab_size=vocab_size,
        is_sampling=is_sampling,
        dtype=dtype,
        remat=remat,
        layers=layers,
    )
    with _terse_tracer_errors():
        return nnx.split(
            nnx.eval_shape(
                lambda: build(
                    name,
                    cfg,
                    rngs=nnx.Rngs(0),
                    dtype=dtype,
                    lora_rank=lora_rank,
                    lora_alpha=lora_alpha,
                )
            )
        )


@contextlib.contextmanager
def _terse_tracer_errors():
    """Tracer error messages without their origin story, while an abstract model is built.

    qwix draws each adapter's initial value from an nnx.Rngs, and flax's Variable.set_value
    probes `getattr(value, "sharding", None)` on the traced counter. On a tracer that raises an
    AttributeError whose message jax builds eagerly by walking the whole trace
    (`_origin_msg` -> `find_progenitors`): quadratic in the model's depth. For gemma4-31b with
    LoRA that was 180 of 199 seconds; without the walk the build takes 4 s. Only the text of
    errors nobody reads changes; jax restores the method on exit.
    """
    tracer = partial_eval.DynamicJaxprTracer
    original = tracer._origin_msg
    tracer._origin_msg = lambda self: ""
    try:
        yield
    finally:
        tracer._origin_msg = original


def check_divisible(abstract, mesh, name: str = "this model") -> None:
    """One line instead of a deep IndivisibleError when a mesh axis does not divide a weight.

    Reads every parameter's own partition annotation, so it holds for any family."""
    sizes = dict(mesh.shape)
    bad = []
    state = nnx.state(abstract)
    specs = nnx.get_partition_spec(state)
    for (path, leaf), spec in zip(
        jax.tree_util.tree_flatten_with_path(state)[0],
        jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec)),
        strict=True,
    ):
        for dim, axes in zip(leaf.shape, spec, strict=False):
            axes = (axes,) if isinstance(axes, str) else axes or ()
            ways = math.prod(sizes.get(a, 1) for a in axes)
            if dim % ways:
                where = ".".join(
                    str(getattr(k, "key", getattr(k, "name", k)))
                    for k in path
                    if getattr(k, "name", None) != "value"
                )
                bad.append(f"{where} has {dim} by {'x'.join(axes)}={ways}")
    if bad:
        raise BadInput(
            f"mesh {sizes} cannot shard {name} ({'; '.join(sorted(set(bad))[:3])}); "
            "pick a mesh whose axes divide the dimensions"
        )


def _hash_uniform(shape: tuple[int, ...], salt) -> jax.Array:
    """Uniform [-1, 1) from a counter hash of the element index (lowbias32).

    Cheap to compile (threefry/normal costs ~1 s of XLA CPU compile per distinct shape) and,
    inside jit with out_shardings, each device computes only its own shard.
    """
    x = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        x = x + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
        stride *= shape[axis]
    x = x ^ salt
    x = (x ^ (x >> 16)) * jnp.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * jnp.uint32(0x846CA68B)
    x = x ^ (x >> 16)
    return (x >> 8).astype(jnp.float32) * (2.0 / 2**24) - 1.0


@functools.cache
def _random_leaf_fn(shape, dtype, sharding, scale, center):
    def make(salt):
        return (center + scale * math.sqrt(3.0) * _hash_uniform(shape, salt)).astype(dtype)

    return jax.jit(make, out_shardings=sharding)


def dummy_model(
    name: str,
    *,
    mesh=None,
    seed: int = 0,
    vocab_size: int | None = None,
    is_sampling: bool = False,
    scale: float = 0.02,
    dtype=WEIGHT_DTYPE,
    remat: str = "none",
):
    """Random weights of the real architecture, created sharded on `mesh`.

    tunix ships `dummy_model_creator.create_dummy_model`, which we do not use: with a mesh it
    draws a fresh key for every device in `jax.make_array_from_callback`, so replicas of one
    shard disagree (a replicated norm scale differs per device), and it runs one nnx.jit per
    shard (8 s for a tiny model). Here: nnx.eval_shape -> the model's partition specs -> one
    jitted generator per (shape, dtype, sharding) with out_shardings, so no device holds a whole
    table and replicas agree. Values are uniform with std `scale` (a counter hash), around the
    family's `norm_center` for 1-D weights (norm scales).
    """
    mesh = mesh if mesh is not None else make_mesh()
    abstract = abstract_model(
        name, vocab_size=vocab_size, is_sampling=is_sampling, dtype=dtype, remat=remat
    )
    check_divisible(abstract, mesh, name)
    graphdef, abs_state = nnx.split(abstract)
    leaves, treedef = jax.tree.flatten(on_mesh(abs_state, mesh))
    center = family_of(name).norm_center
    values = [
        _random_leaf_fn(
            leaf.shape, leaf.dtype, leaf.sharding, scale, center if len(leaf.shape) == 1 else 0.0
        )(np.uint32((seed * 0x9E3779B9 + (i + 1) * 0x85EBCA6B) % 2**32))
        for i, leaf in enumerate(leaves)
    ]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, values))


# Key/value projections, left out of matmul_weights: a Gemma 4 layer that shares an earlier
# layer's KV cache keeps its own projection weights, unused.
_KV_PROJECTIONS = {"kv_einsum", "k_proj", "v_proj"}


def matmul_weights(name: str) -> int:
    """Weights every token is multiplied by on its way through the decoder: each parameter of
    two or more dimensions except the vocabulary-sized tables (gathered, or used once as the
    LM head) and the key/value projections, exact from the model's shapes. A forward pass costs
    at least two FLOPs per such weight per token whatever the compiler does. A mixture of
    experts multiplies each token by the experts it is routed to only: an expert weight
    [E, ...] counts num_experts_per_tok / E of its size (qwen3-30b-a3b: 8 of 128), or the
    bound would exceed what the model computes."""
    cfg = model_config(name)
    vocab = family_of(name).vocab_size(cfg)
    experts, routed = getattr(cfg, "num_experts", None), getattr(cfg, "num_experts_per_tok", None)
    state = nnx.state(abstract_model(name))
    total = 0.0
    for path, x in jax.tree_util.tree_flatten_with_path(state)[0]:
        keys = {str(getattr(key, "key", key)) for key in path}
        if len(x.shape) < 2 or vocab in x.shape or _KV_PROJECTIONS & keys:
            continue
        expert = experts and "mlp" in keys and len(x.shape) == 3 and x.shape[0] == experts
        total += int(np.prod(x.shape)) * (routed / experts if expert else 1)
    return int(total)


def param_count(model) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model)))


def param_bytes(model) -> int:
    return sum(
        int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
        for x in jax.tree.leaves(nnx.state(model))
    )


def dtype_name(model_or_config) -> str:
    """The weight dtype a verdict states ('bfloat16'), read from the weights themselves."""
    state = nnx.state(model_or_config)
    dtypes = {
        str(jnp.dtype(x.dtype))
        for x in jax.tree.leaves(state)
        if jnp.issubdtype(x.dtype, jnp.floating)
    }
    return "/".join(sorted(dtypes))
