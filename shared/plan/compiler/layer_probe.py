"""What a real training step keeps per token per layer, read from the compiler, not assumed.

Why: shared.sizing sizes activation memory from a remat policy, an assumption (the scaling
book's three D-wide checkpoints a layer, every intermediate, or F-wide ones), and the
assumptions disagree by 20x for LLaMA-3 70B. The compiler decides what a step really keeps.
Compiling the whole 80-layer step is slow and says nothing per layer, so we compile the same
tunix model cut to 1 and to 2 decoder layers (tiny vocabulary, so the embedding, LM head and
logits weigh nothing) with the training layout (FSDP) and the real TPU compiler (deviceless),
at two batch sizes. In `memory_analysis()` the weights are arguments and the gradients outputs;
temporaries hold the activations, plus what does not grow with the batch (each layer's weights
all-gathered for the matmuls). So

    kept per token per layer = d/d tokens [temps(2 layers) - temps(1 layer)]

the difference of the two batches: with one layer, the backward starts right after the
forward and remat has nothing to save, so only the second layer shows what is *kept*.

The step is loss and gradient over every parameter (no optimizer update: Adam's state is
sized by shared.sizing and is not an activation). Notebook 06 compares the result with
`sizing.REMAT_POLICIES`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import nnx

from shared import logits, models
from shared.errors import BadInput
from shared.hardware.sharding import batch_sharding, check_batch, on_mesh
from shared.models import PAD_ID, StaticGraph
from shared.plan.compiler.compiled import compile_executable
from shared.plan.compiler.executable import Executable

PROBE_VOCAB = 256  # a tiny vocabulary: embedding, LM head and logits become negligible


def probe_config(name: str, *, layers: int, remat: str = "none", vocab: int = PROBE_VOCAB):
    """tunix's config for `name` (training layout, bf16) cut to `layers` decoder layers."""
    cfg = models.model_config(name, remat=remat)
    field = models.family_of(name).vocab_field
    return dataclasses.replace(cfg, num_layers=layers, **{field: vocab})


@functools.partial(jax.jit, static_argnames=("graph",))
def loss_and_grad(graph, params, tokens):
    """Mean next-token loss over tokens [B, T+1] and its gradient for every parameter."""

    def loss(p):
        model = nnx.merge(graph.graphdef, p, copy=True)
        targets = jnp.where(tokens[:, 1:] == PAD_ID, -1, tokens[:, 1:])
        hidden = models.hidden_states(model, tokens[:, :-1])
        return logits.cross_entropy(hidden, models.head_table(model), targets)

    return jax.value_and_grad(loss)(params)


def probe_executable(
    name: str,
    mesh,
    *,
    batch: int,
    seq: int,
    layers: int = 1,
    remat: str = "none",
    vocab: int = PROBE_VOCAB,
) -> Executable:
    """`loss_and_grad` for `name` cut to `layers` layers, with abstract arguments on `mesh`:
    weights laid out by the model's partition rules, tokens [batch, seq + 1] over "fsdp"."""
    check_batch(batch, mesh)
    cfg = probe_config(name, layers=layers, remat=remat, vocab=vocab)
    abstract = nnx.eval_shape(lambda: models.build(name, cfg, rngs=nnx.Rngs(0)))
    models.check_divisible(abstract, mesh, name)
    graphdef, params = nnx.split(abstract)
    tokens = jax.ShapeDtypeStruct((batch, seq + 1), jnp.int32, sharding=batch_sharding(mesh))
    return Executable(
        f"{name}-{layers}L-{remat}",
        loss_and_grad,
        (StaticGraph(graphdef), on_mesh(params, mesh), tokens),
        note=f"{layers} layer(s) of {name}, remat {remat}, vocab {vocab}, "
        f"{batch}x{seq} tokens, loss + grad, no optimizer",
    )


def probe(
    name: str,
    mesh,
    *,
    batches: tuple[int, int],
    seq: int,
    remat: str = "none",
    vocab: int = PROBE_VOCAB,
) -> dict:
    """Compile 1 and 2 layers at two batch sizes; bytes kept per token per layer, per device.

    Returns the four compiles' temporaries (`temps[(layers, batch)]`), the tokens per device,
    `kept_bytes_per_token_layer` (the slope above), `per_layer_fixed_bytes` (what the second
    layer adds whatever the batch: its gathered weights) and the compile seconds.
    """
    small, large = batches
    if large <= small:
        raise BadInput(
            f"probe batches must be two growing global batches, e.g. (4, 8); got {batches}"
        )
    temps, seconds = {}, 0.0
    with jax.set_mesh(mesh):
        for layers in (1, 2):
            for batch in batches:
                exe = probe_executable(
                    name, mesh, batch=batch, seq=seq, layers=layers, remat=remat, vocab=vocab
                )
                summary = compile_executable(exe)
                temps[(layers, batch)] = summary["temp_bytes"]
                seconds += summary["compile_s"]
    tokens = {b: b * seq // mesh.shape["fsdp"] for b in batches}
    layer = {b: temps[(2, b)] - temps[(1, b)] for b in batches}
    slope = (layer[large] - layer[small]) / (tokens[large] - tokens[small])
    return {
        "model": name,
        "remat": remat,
        "seq": seq,
        "batches": list(batches),
        "tokens_per_device": [tokens[b] for b in batches],
        "devices": mesh.size,
        "temps": {f"{layers}L_b{b}": v for (layers, b), v in temps.items()},
        "layer_bytes": [layer[b] for b in batches],
        "kept_bytes_per_token_layer": slope,
        "per_layer_fixed_bytes": layer[small] - slope * tokens[small],
        "compile_s": seconds,
    }
