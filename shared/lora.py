"""qwix LoRA on tunix Gemma 3: apply, count, merge, export to safetensors, train the adapters.

- `apply_lora`: qwix `LoraProvider` on q/kv/attn_vec/gate/up/down (`gemma.LORA_MODULE_PATH`),
  rank and alpha as parameters, resharded onto the mesh. qwix's `apply_lora_to_model` clones
  the module graph; with flax 0.12 the clone shares the base weight buffers, so HBM does not
  double (the known trap of older versions); `free_base` deletes what is not shared.
- `merge_lora` folds W + (alpha/r)·A@B back into a plain Gemma3; `export_safetensors` writes it
  under Hugging Face Gemma 3 names and `load_safetensors` reloads it through tunix's loader.
- `lora_train_step`: one jitted optax step on the LoRA parameters only, with the chunked loss
  of shared.logits (no [B, T, V] logits at V = 262,144); plan mode lowers the same function
  with `abstract_lora_train_args`.
"""

import functools
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import qwix
from flax import nnx
from tunix.models.gemma3 import model as gemma3_lib
from tunix.models.gemma3 import params_safetensors as gemma3_safetensors
from tunix.rl import reshard

from shared import gemma, logits, sizing
from shared.errors import BadInput
from shared.gemma import LORA_MODULE_PATH, PAD_ID, StaticGraph
from shared.model import count_params
from shared.sharding import batch_sharding, check_batch, make_mesh, opt_state_shardings

# ---------------------------------------------------------------------------- adapters


def default_alpha(rank: int) -> float:
    """LoRA's scale numerator: alpha = 2 x rank, the common choice, shared by the notebooks'
    runs and plan mode's LoRA workloads so a prediction describes the model that ran."""
    return 2.0 * rank


def apply_lora(model, rank: int, alpha: float, *, mesh=None, seed: int = 0,
               module_path: str = LORA_MODULE_PATH):
    """qwix LoRA on q/kv/attn_vec/gate/up/down, resharded onto `mesh` (tunix's reshard).

    qwix runs one eager forward pass on `model.get_model_input()` to create lora_a (he_uniform)
    and lora_b (zeros), each sharded like its base weight. The result shares the base weight
    buffers with `model` (nnx.clone default); see free_base for deleting the base.
    """
    lora = qwix.apply_lora_to_model(model, gemma.lora_provider(rank, alpha, module_path),
                                    rngs=nnx.Rngs(seed), **model.get_model_input())
    return reshard.reshard_model_to_mesh(lora, mesh) if mesh is not None else lora


def free_base(base, keep) -> int:
    """Delete the base model's arrays that `keep` (the LoRA model) does not share; returns the
    bytes freed (0 when qwix's clone shares every buffer). `base` is unusable afterwards."""
    kept = {id(x) for x in jax.tree.leaves(nnx.state(keep))}
    freed = 0
    for x in jax.tree.leaves(nnx.state(base)):
        if id(x) not in kept and isinstance(x, jax.Array) and not x.is_deleted():
            freed += x.nbytes
            x.delete()
    return freed


def lora_param_count(model) -> int:
    return count_params(nnx.state(model, nnx.LoRAParam))


def expected_lora_param_count(dims: sizing.ModelDims, rank: int) -> int:
    """r·(in+out) per adapted matrix: q D→N·H, kv D→2·K·H, attn_vec N·H→D, gate/up D→F,
    down F→D, in every layer."""
    D, F, NH, KH = dims.D, dims.F, dims.N * dims.H, dims.K * dims.H
    per_layer = (D + NH) + (D + 2 * KH) + (NH + D) + 2 * (D + F) + (F + D)
    return dims.L * rank * per_layer


def _lora_modules(model):
    """(module, weight attribute) for every module qwix gave lora_a/lora_b."""
    for _, module in model.iter_modules():
        for attr in ("w", "kernel"):
            if hasattr(module, f"{attr}_lora_a"):
                yield module, attr


def _lora_delta(module, attr: str, rank: int, alpha: float) -> jax.Array:
    """(alpha/r)·A@B in the base weight's layout, in f32.

    qwix layouts: nnx.Linear kernel [in, out] has A [in, r], B [r, out]; an Einsum weight has
    A over the dims it shares with the input and B over the rest, e.g. q_einsum "BTD,NDH" ->
    A [D, r], B [r, N, H] with lora einsum "BTD,Dr,rNH->BTNH"; the merged weight is
    einsum("Dr,rNH->NDH").
    """
    a = getattr(module, f"{attr}_lora_a").get_value().astype(jnp.float32)
    b = getattr(module, f"{attr}_lora_b").get_value().astype(jnp.float32)
    if attr == "kernel":
        delta = a @ b
    else:
        rhs = module.einsum_str.split("->")[0].split(",")[1]
        a_str, b_str = module.w_lora_einsum_str.split("->")[0].split(",")[1:]
        delta = jnp.einsum(f"{a_str},{b_str}->{rhs}", a, b)
    return delta * (alpha / rank)


def merge_lora(lora_model, rank: int, alpha: float):
    """A plain tunix Gemma3 with W + (alpha/r)·A@B in every adapted weight (same shardings)."""
    cfg = lora_model.config
    graphdef, abs_state = nnx.split(nnx.eval_shape(lambda: gemma3_lib.Gemma3(cfg,
                                                                            rngs=nnx.Rngs(0))))
    merged = nnx.state(lora_model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))).to_pure_dict()
    for module, attr in _lora_modules(lora_model):
        path = module.qwix_path  # set by qwix on every module
        node = merged
        for key in path:
            node = node[key]
        w = node[attr]
        new = (w.astype(jnp.float32) + _lora_delta(module, attr, rank, alpha)).astype(w.dtype)
        node[attr] = jax.device_put(new, w.sharding)
    model = nnx.merge(graphdef, abs_state)
    nnx.update(model, merged)
    if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(nnx.state(model))):
        raise RuntimeError("merge_lora: the LoRA model lacks some base parameters")
    return model


# ---------------------------------------------------------------------------- safetensors


def hf_state_dict(model) -> dict[str, np.ndarray]:
    """The model's weights under Hugging Face Gemma 3 names and layouts, inverse of tunix's
    params_safetensors mapping (q/k/v/o_proj [out, in], MLP [out, in], tied embedding)."""
    cfg = model.config
    N, K, D, H = cfg.num_heads, cfg.num_kv_heads, cfg.embed_dim, cfg.head_dim

    def arr(x):
        return np.asarray(jax.device_get(x.get_value() if isinstance(x, nnx.Variable) else x))

    out = {"model.embed_tokens.weight": arr(model.embedder.input_embedding),
           "model.norm.weight": arr(model.final_norm.scale)}
    for i, layer in enumerate(model.layers):
        p, attn = f"model.layers.{i}.", layer.attn
        if attn.use_qkv_einsum:
            q, k, v = arr(attn.qkv_einsum.w)  # [3, N, D, H]
        else:
            q = arr(attn.q_einsum.w)  # [N, D, H]
            k, v = arr(attn.kv_einsum.w)  # [2, K, D, H]
        out[p + "self_attn.q_proj.weight"] = q.transpose(1, 0, 2).reshape(D, N * H).T
        out[p + "self_attn.k_proj.weight"] = k.transpose(1, 0, 2).reshape(D, K * H).T
        out[p + "self_attn.v_proj.weight"] = v.transpose(1, 0, 2).reshape(D, K * H).T
        out[p + "self_attn.o_proj.weight"] = arr(attn.attn_vec_einsum.w).reshape(N * H, D).T
        out[p + "self_attn.q_norm.weight"] = arr(attn._query_norm.scale)
        out[p + "self_attn.k_norm.weight"] = arr(attn._key_norm.scale)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{proj}.weight"] = arr(getattr(layer.mlp, proj).kernel).T
        out[p + "input_layernorm.weight"] = arr(layer.pre_attention_norm.scale)
        out[p + "post_attention_layernorm.weight"] = arr(layer.post_attention_norm.scale)
        out[p + "pre_feedforward_layernorm.weight"] = arr(layer.pre_ffw_norm.scale)
        out[p + "post_feedforward_layernorm.weight"] = arr(layer.post_ffw_norm.scale)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def export_safetensors(model, out_dir: str | Path) -> Path:
    """model.safetensors (+ a minimal config.json) in out_dir, written to a temporary name and
    renamed, so a failed export leaves an earlier one intact. All tensors in one dtype (bf16):
    tunix's fast safetensors loader assumes a single dtype per file.

    tunix's `safetensors_saver.save_lora_merged_model_as_safetensors` does not fit: it needs
    the base model as an HF safetensors checkpoint on disk, and Kaggle ships Flax/orbax.
    """
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    tensors = hf_state_dict(model)
    dtypes = {v.dtype for v in tensors.values()}
    if len(dtypes) != 1:
        raise BadInput(f"export expects one parameter dtype, found {sorted(map(str, dtypes))}")
    tmp = out_dir / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out_dir / "model.safetensors")
    config = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
              "num_hidden_layers": cfg.num_layers, "hidden_size": cfg.embed_dim,
              "intermediate_size": cfg.hidden_dim, "num_attention_heads": cfg.num_heads,
              "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
              "vocab_size": cfg.num_embed, "sliding_window": cfg.sliding_window_size,
              "rope_theta": cfg.global_base_frequency,
              "rope_local_base_freq": cfg.local_base_frequency, "torch_dtype": str(dtypes.pop())}
    (out_dir / "config.json").write_text(json.dumps(config, indent=1))
    return out_dir / "model.safetensors"


def load_safetensors(file_dir: str | Path, name: str | None = None, *, mesh=None,
                     config: gemma3_lib.ModelConfig | None = None, vocab_size: int | None = None):
    """A tunix Gemma3 from HF-layout safetensors via tunix's params_safetensors loader."""
    if config is None:
        if name is None:
            raise BadInput("load_safetensors needs a model name or a ModelConfig")
        config = gemma.model_config(name, vocab_size=vocab_size)
    mesh = mesh if mesh is not None else make_mesh()
    return gemma3_safetensors.create_model_from_safe_tensors(str(file_dir), config, mesh,
                                                             dtype=config.param_dtype)


# ---------------------------------------------------------------------------- training


def _lm_loss(model, tokens, pad_id):
    """Mean next-token loss over non-pad targets, tokens [B, T+1], never forming [B, T, V]."""
    hidden = gemma.hidden_states(model, tokens[:, :-1], pad_id)
    targets = jnp.where(tokens[:, 1:] == pad_id, -1, tokens[:, 1:])
    return logits.cross_entropy(hidden, gemma.embedding_table(model), targets)


# Training the LoRA parameters: an optax step on the nnx.LoRAParam state only, rather than
# tunix's PeftTrainer. The trainer wants a TrainingConfig, checkpoint and metrics managers and
# an input pipeline of TrainingInput, and its step is internal, so plan mode could not lower it
# with abstract arguments; this is one plain jitted function of explicit pytrees.
@functools.partial(jax.jit, static_argnames=("graphdef", "optimizer", "pad_id"),
                   donate_argnames=("lora_params", "opt_state"))
def lora_train_step(graphdef, optimizer, lora_params, base_params, opt_state, tokens,
                    pad_id: int = PAD_ID):
    """One optimizer step on the LoRA parameters; base weights frozen (no gradient taken).

    graphdef, lora_params, base_params = split_lora(model) (graphdef is a StaticGraph);
    tokens [B, T+1] int32 from shard_batch.
    Returns (lora_params, opt_state, loss). lora_params and opt_state are donated: the
    arrays passed in (including the model's own, straight from split_lora) are invalid
    afterwards, so rebind them and finish with nnx.update(model, lora_params).
    """
    def loss_fn(lp):
        return _lm_loss(nnx.merge(graphdef.graphdef, lp, base_params), tokens, pad_id)

    loss, grads = jax.value_and_grad(loss_fn)(lora_params)
    updates, opt_state = optimizer.update(grads, opt_state, lora_params)
    return optax.apply_updates(lora_params, updates), opt_state, loss


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
    """optimizer.init laid out by opt_state_shardings (the same layout plan mode compiles)."""
    return jax.jit(optimizer.init,
                   out_shardings=opt_state_shardings(optimizer, lora_params, mesh))(lora_params)


def abstract_lora_train_args(name: str, batch: int, seq_len: int, rank: int, alpha: float, *,
                             mesh, optimizer, vocab_size: int | None = None) -> tuple:
    """Abstract positional arguments for `lora_train_step.lower(*args)` on `mesh`.

    Tokens are [batch, seq_len + 1] sharded over "fsdp"; optimizer state as init_opt_state.
    """
    check_batch(batch, mesh)
    abs_model = gemma.abstract_model(name, vocab_size=vocab_size, lora_rank=rank,
                                     lora_alpha=alpha)
    gemma.check_divisible(abs_model.config, mesh)
    graphdef, lora_abs, base_abs = split_lora(abs_model)
    lora_abs, base_abs = gemma.with_shardings(lora_abs, mesh), gemma.with_shardings(base_abs, mesh)
    opt_abs = gemma.abstract_like(jax.eval_shape(optimizer.init, lora_abs),
                   opt_state_shardings(optimizer, lora_abs, mesh))
    tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jnp.int32, sharding=batch_sharding(mesh))
    return graphdef, optimizer, lora_abs, base_abs, opt_abs, tokens
