"""qwix LoRA on any tunix family: apply, count, merge, export to safetensors.

- `apply_lora`: qwix `LoraProvider` on the family's attention projections and dense MLP (the
  adapter's `lora_module_path`), rank and alpha as parameters, resharded onto the mesh. qwix's
  `apply_lora_to_model` clones the module graph; with flax 0.12 the clone shares the base weight
  buffers, so HBM does not double (the known trap of older versions); `free_base` deletes what
  is not shared.
- `merge_lora` folds W + (alpha/r)·A@B back into a plain model; `export_safetensors` writes it
  under the family's Hugging Face names and `load_safetensors` reloads it through tunix's own
  loader for that family.
"""

import functools
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import qwix
from flax import nnx
from tunix.rl import reshard

from shared import models, sizing
from shared.errors import BadInput
from shared.hardware.sharding import make_mesh


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
