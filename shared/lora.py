"""qwix LoRA on any tunix family: apply, count, merge, export to safetensors, train the adapters.

- `apply_lora`: qwix `LoraProvider` on the family's attention projections and dense MLP (the
  adapter's `lora_module_path`), rank and alpha as parameters, resharded onto the mesh. qwix's
  `apply_lora_to_model` clones the module graph; with flax 0.12 the clone shares the base weight
  buffers, so HBM does not double (the known trap of older versions); `free_base` deletes what
  is not shared.
- `merge_lora` folds W + (alpha/r)·A@B back into a plain model; `export_safetensors` writes it
  under the family's Hugging Face names and `load_safetensors` reloads it through tunix's own
  loader for that family.
- `lora_train_step`: one jitted optax step on the LoRA parameters only, with the chunked loss
  of shared.logits (no [B, T, V] logits); plan mode lowers the same function with
  `abstract_lora_train_args`.
"""

import functools
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import qwix
from flax import nnx
from tunix.rl import reshard

from shared import logits, models, optim, sizing
from shared.errors import BadInput, choose
from shared.measure import Executable
from shared.models import PAD_ID, StaticGraph
from shared.sharding import (
    abstract_like,
    batch_sharding,
    check_batch,
    make_mesh,
    on_mesh,
    opt_state_shardings,
)

# ---------------------------------------------------------------------------- adapters


def default_alpha(rank: int) -> float:
    """LoRA's scale numerator: alpha = 2 x rank, the common choice, shared by the notebooks'
    runs and plan mode's LoRA workloads so a prediction describes the model that ran."""
    return 2.0 * rank


def apply_lora(model, rank: int, alpha: float, *, mesh=None, seed: int = 0):
    """qwix LoRA on the family's attention projections and dense MLP, resharded onto `mesh`
    (tunix's reshard).

    qwix runs one eager forward pass on `model.get_model_input()` to create lora_a (he_uniform)
    and lora_b (zeros), each sharded like its base weight. The result shares the base weight
    buffers with `model` (nnx.clone default); see free_base for deleting the base.
    """
    provider = models.lora_provider(models.family_of_model(model), rank, alpha)
    lora = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed), **model.get_model_input())
    return reshard.reshard_model_to_mesh(lora, mesh) if mesh is not None else lora


def _array_ids(model) -> set[int]:
    return {id(x) for x in jax.tree.leaves(nnx.state(model))}


def shared_base_arrays(base, adapted) -> tuple[int, int]:
    """How many of the base model's arrays the LoRA model holds as the very same buffers, of how
    many. All of them with flax 0.12's `nnx.clone`: LoRA then costs its adapters' bytes only."""
    kept = _array_ids(adapted)
    leaves = jax.tree.leaves(nnx.state(base))
    return sum(id(x) in kept for x in leaves), len(leaves)


def free_base(base, keep) -> int:
    """Delete the base model's arrays that `keep` (the LoRA model) does not share; returns the
    bytes freed (0 when qwix's clone shares every buffer). `base` is unusable afterwards."""
    kept = _array_ids(keep)
    freed = 0
    for x in jax.tree.leaves(nnx.state(base)):
        if id(x) not in kept and isinstance(x, jax.Array) and not x.is_deleted():
            freed += x.nbytes
            x.delete()
    return freed


def lora_param_count(model) -> int:
    return models.param_count(nnx.state(model, nnx.LoRAParam))


def expected_lora_param_count(dims: sizing.ModelDims, rank: int, *, fused_kv: bool) -> int:
    """r·(in+out) per adapted matrix of a dense model with one attention layout: q D→N·H,
    k and v D→K·H each (or one fused kv D→2·K·H: Gemma 2 and 3), the attention output
    N·H→D, gate/up D→F, down F→D, in every layer."""
    D, F, NH, KH = dims.D, dims.F, dims.N * dims.H, dims.K * dims.H
    kv = (D + 2 * KH) if fused_kv else 2 * (D + KH)
    per_layer = (D + NH) + kv + (NH + D) + 2 * (D + F) + (F + D)
    return dims.L * rank * per_layer


def _lora_modules(model):
    """(module, weight attribute) for every module qwix gave lora_a/lora_b."""
    for _, module in nnx.iter_modules(model):
        for attr in ("w", "kernel"):
            if hasattr(module, f"{attr}_lora_a"):
                yield module, attr


def _lora_einsum(module, attr: str) -> str:
    """The einsum that turns lora_a and lora_b into a delta in the base weight's layout.

    qwix layouts: nnx.Linear kernel [in, out] has A [in, r], B [r, out]; an Einsum weight has
    A over the dims it shares with the input and B over the rest, e.g. q_einsum "BTD,NDH" ->
    A [D, r], B [r, N, H] with lora einsum "BTD,Dr,rNH->BTNH"; the merged weight is
    einsum("Dr,rNH->NDH").
    """
    if attr == "kernel":
        return "ir,ro->io"
    rhs = module.einsum_str.split("->")[0].split(",")[1]
    a_str, b_str = module.w_lora_einsum_str.split("->")[0].split(",")[1:]
    return f"{a_str},{b_str}->{rhs}"


@functools.partial(jax.jit, static_argnames=("spec", "scale"))
def _merged_weight(w, a, b, *, spec: str, scale: float):
    """W + scale·einsum(spec, A, B), computed in f32 and returned in W's dtype: one fused
    program per weight shape, so no f32 copy of a weight outlives it."""
    delta = jnp.einsum(spec, a.astype(jnp.float32), b.astype(jnp.float32))
    return (w.astype(jnp.float32) + scale * delta).astype(w.dtype)


def merge_lora(lora_model, rank: int, alpha: float):
    """A plain tunix model with W + (alpha/r)·A@B in every adapted weight (same shardings)."""
    model_class = models.family_of_model(lora_model).model_class
    cfg = lora_model.config
    graphdef, abs_state = nnx.split(nnx.eval_shape(lambda: model_class(cfg, rngs=nnx.Rngs(0))))
    merged = nnx.state(lora_model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))).to_pure_dict()
    for module, attr in _lora_modules(lora_model):
        path = module.qwix_path  # set by qwix on every module
        node = merged
        for key in path:
            node = node[key]
        w = node[attr]
        new = _merged_weight(
            w,
            getattr(module, f"{attr}_lora_a").get_value(),
            getattr(module, f"{attr}_lora_b").get_value(),
            spec=_lora_einsum(module, attr),
            scale=alpha / rank,
        )
        node[attr] = jax.device_put(new, w.sharding)
    model = nnx.merge(graphdef, abs_state)
    nnx.update(model, merged)
    if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(nnx.state(model))):
        raise RuntimeError("merge_lora: the LoRA model lacks some base parameters")
    return model


# ---------------------------------------------------------------------------- safetensors


def export_safetensors(model, out_dir: str | Path) -> Path:
    """model.safetensors (+ a minimal config.json) in out_dir under the family's Hugging Face
    names, written to a temporary name and renamed, so a failed export leaves an earlier one
    intact. All tensors in one dtype (bf16): tunix's fast safetensors loader assumes a single
    dtype per file.

    tunix's `safetensors_saver.save_lora_merged_model_as_safetensors` does not fit: it needs
    the base model as an HF safetensors checkpoint on disk, and Kaggle ships Flax/orbax, and
    dummy weights have no file at all.
    """
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    family = models.family_of_model(model)
    tensors = family.hf_state_dict(model)
    dtypes = {v.dtype for v in tensors.values()}
    if len(dtypes) != 1:
        raise BadInput(f"export expects one parameter dtype, found {sorted(map(str, dtypes))}")
    tmp = out_dir / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out_dir / "model.safetensors")
    config = {**family.hf_config(model.config), "torch_dtype": str(dtypes.pop())}
    (out_dir / "config.json").write_text(json.dumps(config, indent=1))
    return out_dir / "model.safetensors"


def load_safetensors(folder: str | Path, name: str, *, mesh=None, vocab_size: int | None = None):
    """A tunix model from Hugging Face-layout safetensors via the family's own tunix loader."""
    cfg = models.model_config(name, vocab_size=vocab_size)
    mesh = mesh if mesh is not None else make_mesh()
    return models.family_of(name).load_safetensors(Path(folder), cfg, mesh)


# ---------------------------------------------------------------------------- training


LOSSES = ("chunked", "full")


def _lm_loss(model, tokens, pad_id, loss: str = "chunked"):
    """Mean next-token loss over non-pad targets, tokens [B, T+1].

    "chunked": shared.logits' cross-entropy from the hidden states, never forming [B, T, V];
    "full": the model's own [B, T, V] logits then log-softmax, as tunix's trainers compute it
    (the comparison plan mode makes)."""
    targets = jnp.where(tokens[:, 1:] == pad_id, -1, tokens[:, 1:])
    if loss == "full":
        logp = jax.nn.log_softmax(
            models.forward_logits(model, tokens[:, :-1], pad_id).astype(jnp.float32)
        )
        picked = jnp.take_along_axis(logp, jnp.maximum(targets, 0)[..., None], axis=-1)[..., 0]
        keep = targets >= 0
        return -(picked * keep).sum() / jnp.maximum(keep.sum(), 1)
    hidden = models.hidden_states(model, tokens[:, :-1], pad_id)
    return logits.cross_entropy(
        hidden, models.head_table(model), targets, softcap=models.final_softcap(model)
    )


# Training the LoRA parameters: an optax step on the nnx.LoRAParam state only, rather than
# tunix's PeftTrainer. The trainer wants a TrainingConfig, checkpoint and metrics managers and
# an input pipeline of TrainingInput, and its step is internal, so plan mode could not lower it
# with abstract arguments; this is one plain jitted function of explicit pytrees.
@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "optimizer", "pad_id", "microbatches", "loss"),
    donate_argnames=("lora_params", "opt_state"),
)
def lora_train_step(
    graphdef,
    optimizer,
    lora_params,
    base_params,
    opt_state,
    tokens,
    pad_id: int = PAD_ID,
    microbatches: int = 1,
    loss: str = "chunked",
):
    """One optimizer step on the LoRA parameters; base weights frozen (no gradient taken).

    graphdef, lora_params, base_params = split_lora(model) (graphdef is a StaticGraph);
    tokens [B, T+1] int32 from shard_batch, split into `microbatches` whose fp32 gradients are
    accumulated (shared.optim) so activations are held for B/microbatches rows at a time.
    Returns (lora_params, opt_state, loss). lora_params and opt_state are donated: the
    arrays passed in (including the model's own, straight from split_lora) are invalid
    afterwards, so rebind them and finish with nnx.update(model, lora_params).
    """

    def loss_fn(lp, micro):
        # copy=True: fresh Variables at this trace level. Merged in place, the base weights would
        # keep their Variables from the jit level, and tunix's nnx.remat (remat="block") writes
        # back into them from inside the gradient trace, which flax refuses.
        model = nnx.merge(graphdef.graphdef, lp, base_params, copy=True)
        return _lm_loss(model, micro, pad_id, loss)

    mean_loss, grads = optim.accumulate_gradients(
        loss_fn, lora_params, optim.split_microbatches(tokens, microbatches)
    )
    updates, opt_state = optimizer.update(grads, opt_state, lora_params)
    return optax.apply_updates(lora_params, updates), opt_state, mean_loss


def split_lora(model):
    """(StaticGraph, lora_params, base_params); write trained params back with
    nnx.update(model, lora_params)."""
    graphdef, lora_params, base_params = nnx.split(model, nnx.LoRAParam, ...)
    return StaticGraph(graphdef), lora_params, base_params


def shard_batch(tokens, mesh) -> jax.Array:
    """Int32 token batch [B, T] on `mesh`, batch over "fsdp" (the layout plan mode assumes)."""
    tokens = jnp.asarray(tokens, jnp.int32)
    return jax.device_put(tokens, batch_sharding(mesh, tokens.ndim))


def init_opt_state(optimizer, lora_params, *, mesh):
    """`fp32_opt_init` laid out by opt_state_shardings (the same layout plan mode compiles)."""
    return jax.jit(
        functools.partial(fp32_opt_init, optimizer),
        out_shardings=opt_state_shardings(optimizer, lora_params, mesh),
    )(lora_params)


def fp32_opt_init(optimizer, lora_params):
    """optimizer.init on fp32 views of the (bf16) adapters.

    The step hands the optimizer fp32 gradients (shared.optim accumulates in fp32), so Adam's
    moments are fp32 from the first update on, whatever dtype they start in. Initialised from
    the bf16 adapters they would start bf16: the optimizer state would double after step one,
    the step would compile a second time for the new dtype, and plan mode would count half
    the state the run holds.
    """
    return optimizer.init(jax.tree.map(lambda x: x.astype(jnp.float32), lora_params))


def lora_train_executable(
    name: str,
    batch: int,
    seq_len: int,
    rank: int,
    *,
    mesh,
    optimizer=None,
    vocab_size: int | None = None,
    remat: str = "none",
    microbatches: int = 1,
    loss: str = "chunked",
) -> Executable:
    """`lora_train_step` with abstract arguments on `mesh`, for plan mode: tokens
    [batch, seq_len + 1] sharded over "fsdp", optimizer state laid out as init_opt_state; the
    base weights, adapters and optimizer state are the run's resident buffers."""
    check_batch(batch, mesh)
    choose("loss", loss, LOSSES)
    if batch % (mesh.shape["fsdp"] * microbatches):
        raise BadInput(
            f"batch {batch} does not split into {microbatches} micro-batches that "
            f"each divide the fsdp axis of {mesh.shape['fsdp']}"
        )
    optimizer = optimizer or optax.adamw(1e-4)
    abstract = models.abstract_model(
        name, vocab_size=vocab_size, lora_rank=rank, lora_alpha=default_alpha(rank), remat=remat
    )
    models.check_divisible(abstract, mesh, name)
    graphdef, lora_abs, base_abs = split_lora(abstract)
    lora_abs, base_abs = on_mesh(lora_abs, mesh), on_mesh(base_abs, mesh)
    opt_abs = abstract_like(
        jax.eval_shape(functools.partial(fp32_opt_init, optimizer), lora_abs),
        opt_state_shardings(optimizer, lora_abs, mesh),
    )
    tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return Executable(
        "lora_train_step",
        lora_train_step,
        (graphdef, optimizer, lora_abs, base_abs, opt_abs, tokens),
        {"microbatches": microbatches, "loss": loss},
        note=f"rank {rank}, adamw on the adapters, remat {remat}, {microbatches} micro-batches, "
        f"{loss} loss, {models.dtype_name(base_abs)} weights",
        resident_args={2: "adapters", 3: "weights", 4: "optimizer state"},
    )
