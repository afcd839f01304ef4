"""Gemma 3 on tunix: load (dummy | kaggle) onto a mesh, tokenizer, sampler, rollouts, qwix LoRA.

Built on tunix 0.1.7, qwix 0.1.8 and kagglehub 1.0.2. One code path for the three modes: device
mode runs the tunix Sampler's own jitted `_compiled_prefill_fn` / `_compiled_decode_fn` on real
arrays, plan mode lowers exactly those functions with `abstract_rollout(...)` (ShapeDtypeStructs
carrying the model's shardings, nothing allocated). The same holds for `lora_train_step`.

Typical use (notebook 01)::

    mesh = make_mesh()                                   # all devices on "fsdp"
    model, tok = load("gemma3-1b", "kaggle", mesh=mesh)  # or "dummy": random weights
    sampler = make_sampler(model, tok, cache_size=1312)
    prompts = random_prompts(64, 256, model_dims("gemma3-1b").V)
    result = rollout(sampler, prompts, steps=1024, mesh=mesh)   # prefill_s, decode_s, tokens

LoRA (notebook 02)::

    lora = apply_lora(model, rank=8, alpha=16.0, mesh=mesh)
    # qwix clones the module graph; with flax 0.12 the clone shares the base weight buffers
    # (nnx.clone(arrays=False)), so nothing is doubled. `free_base` deletes only base arrays the
    # LoRA model does not share and returns the bytes freed; afterwards do not use `model`.
    free_base(model, keep=lora); del model
    merged = merge_lora(lora, rank=8, alpha=16.0)
    export_safetensors(merged, "results/02/merged"); reloaded = load_safetensors(...)

Known tunix 0.1.7 behaviours handled here: prompts are padded to exactly `prompt_len` (tunix pads
to a power of two unless told); `Sampler.eos_ids` is only set inside `Sampler.__call__`, so
`make_sampler` sets it, once: the jitted functions capture it as a constant at first trace;
the default tokenizer path is on GCS, never used here.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # `import tunix` imports its wandb logger

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import qwix
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tunix.generate import sampler as sampler_lib
from tunix.generate import utils as gen_utils
from tunix.models.gemma3 import model as gemma3_lib
from tunix.models.gemma3 import params as gemma3_params

from shared import sizing
from shared.errors import BadInput, choose
from shared.logits import top_k_logits
from shared.model import count_params
from shared.sharding import (  # ("fsdp", "tp"): the axis names tunix's Gemma 3 uses
    batch_sharding,
    check_batch,
    make_mesh,
)

# ---------------------------------------------------------------------------- names and configs

PAD_ID, EOS_ID, BOS_ID = 0, 1, 2  # Gemma's SentencePiece layout; local tokenizers must match
TINY_VOCAB = 4096

_PRESETS: dict[str, Callable[..., gemma3_lib.ModelConfig]] = {
    "gemma3-270m": gemma3_lib.ModelConfig.gemma3_270m,
    "gemma3-1b": gemma3_lib.ModelConfig.gemma3_1b_it,
    "gemma3-4b": gemma3_lib.ModelConfig.gemma3_4b_it,  # text only
    "gemma3-12b": gemma3_lib.ModelConfig.gemma3_12b_it,
    "gemma3-27b": gemma3_lib.ModelConfig.gemma3_27b_it,
}
# A small Gemma 3 of the real architecture for CPU runs: 6 layers so the 5-local-1-global
# pattern has its global layer, GQA with one KV head as in 270m/1b, a window shorter than
# typical local prompts+rollouts so the sliding mask matters. D and F divide 8-way meshes.
_TINY = dict(num_layers=6, embed_dim=128, hidden_dim=512, num_heads=4, head_dim=32,
             num_kv_heads=1, sliding_window_size=32, local_base_frequency=10_000,
             global_base_frequency=1_000_000)
MODEL_NAMES = ("gemma3-tiny", *_PRESETS)

# `kagglehub.model_download("google/gemma-3/flax/<variant>")`; instruction-tuned by default.
KAGGLE_VARIANTS = {
    "gemma3-270m": "gemma-3-270m-it",
    "gemma3-1b": "gemma3-1b-it",
    "gemma3-4b": "gemma3-4b-it",
    "gemma3-12b": "gemma3-12b-it",
    "gemma3-27b": "gemma3-27b-it",
}
WEIGHTS = ("dummy", "kaggle")

# The module-path regex tunix's Gemma examples give qwix: q, kv, attention output, MLP.
LORA_MODULE_PATH = ".*q_einsum|.*kv_einsum|.*gate_proj|.*down_proj|.*up_proj|.*attn_vec_einsum"


def model_config(name: str, *, vocab_size: int | None = None, is_sampling: bool = False,
                 param_dtype=jnp.bfloat16) -> gemma3_lib.ModelConfig:
    """tunix `ModelConfig` for one of MODEL_NAMES.

    `is_sampling=True` uses tunix's sampling layout (weights not sharded over "fsdp", which
    becomes pure data parallelism); default is the training layout (FSDP x TP).
    `vocab_size` applies to gemma3-tiny only (match your local tokenizer).
    """
    choose("Gemma 3 model", name, MODEL_NAMES)
    shd = gemma3_lib.ShardingConfig.get_default_sharding(is_sampling=is_sampling)
    if name == "gemma3-tiny":
        return gemma3_lib.ModelConfig(**_TINY, num_embed=vocab_size or TINY_VOCAB,
                                      shd_config=shd, param_dtype=param_dtype)
    if vocab_size not in (None, 262144):
        raise BadInput(f"{name} has a fixed vocabulary of 262144; vocab_size is for gemma3-tiny")
    return dataclasses.replace(_PRESETS[name](sharding_config=shd), param_dtype=param_dtype)


def dims_from_config(name: str, cfg: gemma3_lib.ModelConfig) -> sizing.ModelDims:
    """The sizing view of a tunix config (tied embedding, GeGLU, 4 norms + q/k norms)."""
    return sizing.ModelDims(name, L=cfg.num_layers, D=cfg.embed_dim, F=cfg.hidden_dim,
                            N=cfg.num_heads, K=cfg.num_kv_heads, H=cfg.head_dim, V=cfg.num_embed,
                            tied=True, mlp_matrices=3, norms_per_layer=4, qk_norm=True,
                            T=None if name == "gemma3-tiny" else 1024)


def model_dims(name: str, *, vocab_size: int | None = None) -> sizing.ModelDims:
    """sizing.ModelDims for any of MODEL_NAMES (the real presets come from sizing.PRESETS)."""
    choose("Gemma 3 model", name, MODEL_NAMES)
    if name == "gemma3-tiny":
        return dims_from_config(name, model_config(name, vocab_size=vocab_size))
    return sizing.preset(name)


def kv_cache_bytes(name: str, batch: int, cache_size: int, *,
                   vocab_size: int | None = None) -> int:
    """Bytes of the bf16 KV cache the tunix Sampler allocates: every layer, full cache_size."""
    return sizing.kv_cache_bytes(model_dims(name, vocab_size=vocab_size), batch, cache_size, 2)


# ---------------------------------------------------------------------------- mesh and shardings


def with_shardings(abs_tree, mesh):
    """ShapeDtypeStructs (inside their nnx Variables) that carry the model's NamedShardings."""
    shardings = nnx.get_named_sharding(abs_tree, mesh)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abs_tree, shardings)


def check_divisible(cfg: gemma3_lib.ModelConfig, mesh) -> None:
    """One line instead of a deep IndivisibleError when a mesh axis does not divide a weight."""
    fsdp, tp = mesh.shape["fsdp"], mesh.shape["tp"]
    checks = [("V", cfg.num_embed, "tp", tp), ("F", cfg.hidden_dim, "tp", tp),
              ("N", cfg.num_heads, "tp", tp), ("D", cfg.embed_dim, "tp", tp),
              ("D", cfg.embed_dim, "fsdp", fsdp)]  # K=1 kv weights shard D over fsdp always
    if cfg.num_kv_heads > 1:
        checks.append(("K", cfg.num_kv_heads, "tp", tp))
    bad = [f"{what}={n} by {axis}={k}" for what, n, axis, k in checks if n % k]
    if bad:
        raise BadInput(f"mesh {dict(mesh.shape)} cannot shard this model ({', '.join(bad)}); "
                       "pick a mesh whose axes divide the dimensions")


# ---------------------------------------------------------------------------- models


def abstract_model(name: str, *, vocab_size: int | None = None, is_sampling: bool = False,
                   lora_rank: int | None = None, lora_alpha: float | None = None):
    """The model (optionally with qwix LoRA) from nnx.eval_shape: shapes and sharding metadata,
    no memory. The LoRA graph comes from the real `qwix.apply_lora_to_model`, traced abstractly.
    """
    cfg = model_config(name, vocab_size=vocab_size, is_sampling=is_sampling)

    def build():
        model = gemma3_lib.Gemma3(cfg, rngs=nnx.Rngs(0))
        if lora_rank is not None:
            model = qwix.apply_lora_to_model(model, lora_provider(lora_rank, lora_alpha),
                                             rngs=nnx.Rngs(0), **model.get_model_input())
        return model

    return nnx.eval_shape(build)


def _hash_uniform(shape: tuple[int, ...], salt) -> jax.Array:
    """Uniform [-1, 1) from a counter hash of the element index (lowbias32).

    Cheap to compile (threefry/normal costs ~1 s of XLA CPU compile per distinct shape here)
    and, inside jit with out_shardings, each device computes only its own shard.
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
def _random_leaf_fn(shape, dtype, sharding, scale):
    def make(salt):
        return (scale * math.sqrt(3.0) * _hash_uniform(shape, salt)).astype(dtype)

    return jax.jit(make, out_shardings=sharding)


def dummy_model(name: str, *, mesh=None, seed: int = 0, vocab_size: int | None = None,
                is_sampling: bool = False, scale: float = 0.02, param_dtype=jnp.bfloat16):
    """Random weights of the real architecture, created sharded on `mesh`.

    Equivalent of tunix's `dummy_model_creator.create_dummy_model` (random values of std
    `scale` for every parameter), which we do not use: with a mesh it draws a fresh key for
    every device in `jax.make_array_from_callback`, so replicas of one shard disagree (a
    replicated norm scale differs per device) and it runs one nnx.jit per shard (8 s for the
    tiny model). Here: nnx.eval_shape -> the model's partition specs -> one jitted generator per
    (shape, dtype, sharding) with out_shardings, so no device holds a whole table and replicas
    agree. Values are uniform with std `scale` (a counter hash; see _hash_uniform).
    """
    mesh = mesh if mesh is not None else make_mesh()
    cfg = model_config(name, vocab_size=vocab_size, is_sampling=is_sampling,
                       param_dtype=param_dtype)
    check_divisible(cfg, mesh)
    abstract = nnx.eval_shape(lambda: gemma3_lib.Gemma3(cfg, rngs=nnx.Rngs(0)))
    graphdef, abs_state = nnx.split(abstract)
    leaves, treedef = jax.tree.flatten(abs_state)
    shardings = jax.tree.leaves(nnx.get_named_sharding(abs_state, mesh))
    values = [
        _random_leaf_fn(leaf.shape, leaf.dtype, sharding, scale)(
            np.uint32((seed * 0x9E3779B9 + (i + 1) * 0x85EBCA6B) % 2**32))
        for i, (leaf, sharding) in enumerate(zip(leaves, shardings, strict=True))
    ]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, values))


def check_kaggle_credentials() -> None:
    """BadInput (one line) unless kagglehub will find credentials. Reads env/files only."""
    from kagglehub import config as kaggle_config
    from kagglesdk.kaggle_env import is_in_kaggle_notebook

    # kagglehub 1.0.2 order: KAGGLE_API_TOKEN (value or file path) or ~/.kaggle/access_token,
    # then KAGGLE_USERNAME + KAGGLE_KEY, then $KAGGLE_CONFIG_DIR or ~/.kaggle/kaggle.json,
    # then Colab secrets; inside a Kaggle notebook attached models need none.
    try:
        found = kaggle_config.get_kaggle_credentials() is not None
    except ValueError as err:  # a malformed kaggle.json
        raise BadInput(f"Kaggle credentials are unreadable: {err}") from None
    if not found and not is_in_kaggle_notebook():
        raise BadInput(
            "real Gemma weights need Kaggle credentials: set KAGGLE_API_TOKEN (or KAGGLE_USERNAME"
            " and KAGGLE_KEY, or put kaggle.json / access_token in ~/.kaggle), and accept the"
            " Gemma licence on https://www.kaggle.com/models/google/gemma-3 first;"
            " or use weights='dummy'")


def kaggle_handle(name: str, variant: str | None = None) -> str:
    choose("Gemma 3 model with Kaggle weights", name, KAGGLE_VARIANTS)
    return f"google/gemma-3/flax/{variant or KAGGLE_VARIANTS[name]}"


def kaggle_download(name: str, variant: str | None = None) -> Path:
    """Download (or find in the kagglehub cache) the Flax checkpoint; credentials first."""
    handle = kaggle_handle(name, variant)
    check_kaggle_credentials()
    import kagglehub

    return Path(kagglehub.model_download(handle))


def _orbax_dir(ckpt_dir: Path, variant: str | None) -> Path:
    """The orbax checkpoint folder inside a Kaggle download (e.g. <dl>/gemma3-1b-it)."""
    ckpt_dir = Path(ckpt_dir)
    if variant and (ckpt_dir / variant / "_METADATA").exists():
        return ckpt_dir / variant
    found = [p.parent for p in ckpt_dir.rglob("_METADATA")]
    if not found:
        raise BadInput(f"no orbax checkpoint (a folder with _METADATA) under {ckpt_dir}")
    return min(found, key=lambda p: (len(p.parts), str(p)))


def load_checkpoint(ckpt_dir: str | Path, name: str, *, mesh=None, is_sampling: bool = False,
                    variant: str | None = None, vocab_size: int | None = None):
    """Real weights from a downloaded Flax checkpoint folder via tunix's gemma3 params loader.

    The step after the download, separate so it runs on local folders (tests, pre-fetched
    checkpoints). tunix restores to host numpy, maps upstream names, then device_puts each
    array with the model's sharding.
    """
    mesh = mesh if mesh is not None else make_mesh()
    cfg = model_config(name, vocab_size=vocab_size, is_sampling=is_sampling)
    check_divisible(cfg, mesh)
    path = _orbax_dir(Path(ckpt_dir), variant or KAGGLE_VARIANTS.get(name))
    return gemma3_params.create_model_from_checkpoint(str(path), cfg, mesh)


# ---------------------------------------------------------------------------- tokenizers


class IdsOnlyTokenizer:
    """Special ids without a vocabulary: enough for samplers fed token ids (plan mode)."""

    def __init__(self, pad_id: int = PAD_ID, eos_id: int = EOS_ID, bos_id: int = BOS_ID):
        self._ids = (pad_id, eos_id, bos_id)

    def pad_id(self) -> int:
        return self._ids[0]

    def eos_id(self) -> int:
        return self._ids[1]

    def bos_id(self) -> int:
        return self._ids[2]

    def encode(self, text, **kwargs):
        raise BadInput("this sampler has no vocabulary; pass token ids (random_prompts)")

    decode = encode


def _check_tokenizer(tok):
    if tok.pad_id() < 0:
        raise BadInput("the tokenizer has no pad id (tunix needs one); train it with pad_id=0,"
                       " eos_id=1, bos_id=2, unk_id=3 like Gemma's")
    return tok


def checkpoint_tokenizer(ckpt_dir: str | Path):
    """The SentencePiece model shipped with a Kaggle checkpoint (tokenizer.model)."""
    import sentencepiece as spm

    found = sorted(Path(ckpt_dir).rglob("tokenizer.model"))
    if not found:
        raise BadInput(f"no tokenizer.model under {ckpt_dir}")
    return _check_tokenizer(spm.SentencePieceProcessor(model_file=str(found[0])))


def local_tokenizer(vocab_size: int = TINY_VOCAB, data_dir: str | Path | None = None):
    """The small SentencePiece tokenizer trained on the embedded Shakespeare (shared.data)."""
    from shared import data

    kwargs = {} if data_dir is None else {"data_dir": data_dir}
    return _check_tokenizer(data.tokenizer(vocab_size=vocab_size, **kwargs))


def load(name: str, weights: str = "dummy", *, mesh=None, seed: int = 0,
         vocab_size: int | None = None, is_sampling: bool = False, variant: str | None = None,
         data_dir: str | Path | None = None,
         download: Callable[[str, str | None], Path] = kaggle_download):
    """(model, tokenizer) on `mesh`.

    weights="dummy": random weights of the real architecture and the local tokenizer (its ids
    fit every Gemma vocabulary). weights="kaggle": `download(name, variant)` then the
    checkpoint's own tokenizer.model; missing credentials raise BadInput, no fallback.
    """
    choose("weights", weights, WEIGHTS)
    choose("Gemma 3 model", name, MODEL_NAMES)
    if weights == "kaggle":  # kaggle_download rejects gemma3-tiny (no checkpoint) by name
        ckpt = download(name, variant)
        model = load_checkpoint(ckpt, name, mesh=mesh, is_sampling=is_sampling, variant=variant,
                                vocab_size=vocab_size)
        return model, checkpoint_tokenizer(ckpt)
    tok = local_tokenizer(vocab_size or TINY_VOCAB, data_dir)
    if name == "gemma3-tiny":
        vocab_size = vocab_size or tok.get_piece_size()
    model = dummy_model(name, mesh=mesh, seed=seed, vocab_size=vocab_size,
                        is_sampling=is_sampling)
    return model, tok


def param_count(model) -> int:
    return count_params(model)


def param_bytes(model) -> int:
    return sum(int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
               for x in jax.tree.leaves(nnx.state(model)))


# ---------------------------------------------------------------------------- sampler, rollouts


def make_sampler(model, tokenizer, cache_size: int, *, stop_at_eos: bool = True):
    """tunix Sampler with CacheConfig from the model config; `eos_ids` set here.

    stop_at_eos=False never stops early (EOS id -1), for timing fixed step counts on random
    weights. Set once: tunix's jitted functions bake `eos_ids` in at their first trace.
    """
    cfg = model.config
    sampler = sampler_lib.Sampler(
        model, tokenizer,
        sampler_lib.CacheConfig(cache_size=cache_size, num_layers=cfg.num_layers,
                                num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim))
    sampler.eos_ids = jnp.array([sampler.tokenizer.eos_id() if stop_at_eos else -1], jnp.int32)
    return sampler


def random_prompts(batch: int, prompt_len: int, vocab_size: int, seed: int = 0,
                   low: int = 4) -> np.ndarray:
    """[batch, prompt_len] int32 token ids in [low, vocab_size): no pad/eos/bos/unk."""
    rng = np.random.default_rng(seed)
    return rng.integers(low, vocab_size, (batch, prompt_len), dtype=np.int32)


def text_prompts(sampler, texts: Sequence[str], prompt_len: int) -> np.ndarray:
    """Tokenize like tunix (BOS first), keep the last prompt_len ids, left-pad to prompt_len."""
    rows = [np.asarray(sampler.tokenize(t))[-prompt_len:] for t in texts]
    pad = sampler.tokenizer.pad_id()
    return np.stack([gen_utils.pad_to_length(r, prompt_len, pad, left=True) for r in rows]
                    ).astype(np.int32)


def _check_rollout(batch, prompt_len, steps, cache_size, mesh):
    if min(batch, prompt_len, steps) < 1:
        raise BadInput(f"batch, prompt length and steps must be >= 1, got {batch}, "
                       f"{prompt_len}, {steps}")
    if prompt_len + steps > cache_size:
        raise BadInput(f"prompt length {prompt_len} + steps {steps} exceeds the cache size "
                       f"{cache_size}; raise cache_size to at least {prompt_len + steps}")
    check_batch(batch, mesh)


def state_shardings(state, mesh):
    """Shardings of a sampling state: batch over "fsdp", KV heads over "tp" when they divide,
    scalars and the seed replicated. Used for the real state and the abstract one alike."""
    tp = mesh.shape["tp"]

    def spec(path, x):
        names = [getattr(k, "name", getattr(k, "key", None)) for k in path]
        top, last = names[0], names[-1]
        if top == "cache" and last in ("k", "v"):
            return P("fsdp", None, "tp" if x.shape[2] % tp == 0 else None, None)
        if top in ("token_buffer", "positions", "done", "logits_buffer", "logprobs_buffer") or (
                top == "cache" and last == "end_index"):
            return P("fsdp")
        return P()

    return jax.tree_util.tree_map_with_path(lambda p, x: NamedSharding(mesh, spec(p, x)), state)


def _init_fn(sampler, steps_total, temperature, top_p, top_k, seed):
    def init(prompt_ids):
        state = sampler.init_sample_state(
            prompt_ids, total_sampling_steps=steps_total, include_logits=False,
            forbidden_token_ids=None, temperature=temperature, top_p=top_p, top_k=top_k,
            seed=jax.random.PRNGKey(seed), beam_size=None)
        # tunix keeps num_input_tokens as a *static* jnp scalar; traced, it would leak.
        return state.replace(num_input_tokens=None)
    return init


def _abstract_state(sampler, batch, prompt_len, steps, temperature, top_p, top_k, seed):
    init = _init_fn(sampler, prompt_len + steps, temperature, top_p, top_k, seed)
    return jax.eval_shape(init, jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32))


def init_rollout_state(sampler, prompt_ids, steps: int, *, mesh, temperature: float = 0.0,
                       top_p: float | None = None, top_k: int | None = None, seed: int = 0):
    """The Sampler's initial state (`init_sample_state`) built sharded by one jit: the KV cache
    is never whole on one device. Greedy by default; top_p/temperature switch to sampling."""
    batch, prompt_len = np.shape(prompt_ids)
    _check_rollout(batch, prompt_len, steps, sampler.cache_config.cache_size, mesh)
    key = (batch, prompt_len, steps, temperature, top_p, top_k, seed, mesh)
    jitted = sampler.__dict__.setdefault("_shared_gemma_init", {})  # one compile per shape
    if key not in jitted:
        abs_state = _abstract_state(sampler, batch, prompt_len, steps, temperature, top_p,
                                    top_k, seed)
        init = _init_fn(sampler, prompt_len + steps, temperature, top_p, top_k, seed)
        jitted[key] = jax.jit(init, out_shardings=state_shardings(abs_state, mesh))
    state = jitted[key](jnp.asarray(prompt_ids, jnp.int32))
    return state.replace(num_input_tokens=int(prompt_len))


def prefill(sampler, state):
    """tunix's jitted prefill (echo=False, as Sampler.__call__ by default): one token out."""
    return sampler._compiled_prefill_fn(sampler._flattened_transformer_state, state, None,
                                        echo=False)


def decode(sampler, state, *, mesh):
    """tunix's jitted decode loop; the state is put on `state_shardings` first (a no-op when
    prefill kept them) so it matches what plan mode compiles."""
    state = jax.device_put(state, state_shardings(state, mesh))
    return sampler._compiled_decode_fn(sampler._flattened_transformer_state, state)


def generated_tokens(sampler, state, prompt_len: int) -> np.ndarray:
    """Tokens each row actually generated: non-pad ids after the prompt, up to and including
    the first EOS (tunix's text output drops that EOS; it still cost a step)."""
    buf = np.asarray(jax.device_get(state.token_buffer))[:, prompt_len:]
    eos = np.asarray(jax.device_get(sampler.eos_ids))
    hit = np.isin(buf, eos)
    end = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, buf.shape[1])
    keep = np.arange(buf.shape[1])[None, :] < end[:, None]
    return (keep & (buf != sampler.tokenizer.pad_id())).sum(axis=1)


@dataclasses.dataclass
class RolloutResult:
    prefill_s: float  # wall time of the prefill call, including compile on a first call
    # wall time of the decode loop: `steps` forward passes at most, the last of which tunix
    # writes past the token buffer (dropped), so a full row keeps steps - 1 decoded tokens
    decode_s: float
    tokens: np.ndarray  # [B] tokens generated per row (prefill's token included)
    state: Any  # the final sampling state (token_buffer holds prompt + generation)

    @property
    def total_tokens(self) -> int:
        return int(self.tokens.sum())

    @property
    def decode_s_per_token(self) -> float:
        """Decode seconds per generated token, batch-wide (prefill's token not counted)."""
        decoded = self.total_tokens - len(self.tokens)
        return self.decode_s / decoded if decoded > 0 else float("nan")


def rollout(sampler, prompt_ids, steps: int, *, mesh, **sampling) -> RolloutResult:
    """Init (untimed), prefill and decode timed separately with block_until_ready."""
    prompt_len = np.shape(prompt_ids)[1]
    state = jax.block_until_ready(init_rollout_state(sampler, prompt_ids, steps, mesh=mesh,
                                                     **sampling))
    t0 = time.perf_counter()
    state = jax.block_until_ready(prefill(sampler, state))
    t1 = time.perf_counter()
    state = jax.block_until_ready(decode(sampler, state, mesh=mesh))
    t2 = time.perf_counter()
    return RolloutResult(t1 - t0, t2 - t1, generated_tokens(sampler, state, prompt_len), state)


def cache_bytes(state) -> int:
    """Bytes of the K and V arrays in a sampling state (what the sampler allocated)."""
    return sum(int(np.prod(layer[kv].shape)) * jnp.dtype(layer[kv].dtype).itemsize
               for layer in state.cache.values() for kv in ("k", "v"))


@dataclasses.dataclass
class AbstractRollout:
    """Abstract arguments for the Sampler's jitted prefill and decode on `mesh`.

    Plan mode: `ar.lower_prefill().compile()`, `ar.lower_decode().compile()` — the SAME jitted
    functions `prefill`/`decode` call, with the same argument shardings.
    """

    sampler: Any
    params: list  # the Sampler's flattened nnx Variables holding sharded ShapeDtypeStructs
    state: Any  # initial sampling state (prefill input)
    decode_state: Any  # prefill output (decode input)

    def prefill_args(self) -> tuple[tuple, dict]:
        return (self.params, self.state, None), {"echo": False}

    def decode_args(self) -> tuple[tuple, dict]:
        return (self.params, self.decode_state), {}

    def lower_prefill(self):
        args, kwargs = self.prefill_args()
        return self.sampler._compiled_prefill_fn.lower(*args, **kwargs)

    def lower_decode(self):
        args, kwargs = self.decode_args()
        return self.sampler._compiled_decode_fn.lower(*args, **kwargs)


def abstract_like(tree, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s,
                                                          weak_type=getattr(x, "weak_type", False)),
                        tree, shardings)


def abstract_rollout(name: str, batch: int, prompt_len: int, steps: int, cache_size: int, *,
                     mesh, vocab_size: int | None = None, is_sampling: bool = False,
                     lora_rank: int | None = None, lora_alpha: float | None = None,
                     tokenizer=None, stop_at_eos: bool = True, temperature: float = 0.0,
                     top_p: float | None = None, top_k: int | None = None,
                     seed: int = 0) -> AbstractRollout:
    """Abstract prefill/decode arguments, built with nnx.eval_shape / jax.eval_shape only.

    The Sampler is built on the abstract model (its graphdef and variable list are all it
    needs). `tokenizer` only supplies pad/eos ids (Gemma's 0/1 by default).
    """
    _check_rollout(batch, prompt_len, steps, cache_size, mesh)
    abs_model = abstract_model(name, vocab_size=vocab_size, is_sampling=is_sampling,
                               lora_rank=lora_rank, lora_alpha=lora_alpha)
    check_divisible(abs_model.config, mesh)
    sampler = make_sampler(abs_model, tokenizer or IdsOnlyTokenizer(), cache_size,
                           stop_at_eos=stop_at_eos)
    named = jax.tree.leaves(nnx.get_named_sharding(sampler._transformer_state, mesh))
    params = [v.replace(jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s))
              for v, s in zip(sampler._flattened_transformer_state, named, strict=True)]
    state = _abstract_state(sampler, batch, prompt_len, steps, temperature, top_p, top_k, seed)
    state = abstract_like(state, state_shardings(state, mesh))
    state = state.replace(num_input_tokens=int(prompt_len))
    out = jax.eval_shape(lambda p, s: sampler._prefill_fn(p, s, None, echo=False), params, state)
    decode_state = abstract_like(out, state_shardings(out, mesh))
    return AbstractRollout(sampler, params, state, decode_state)


# ---------------------------------------------------------------------------- LoRA


def lora_provider(rank: int, alpha: float, module_path: str = LORA_MODULE_PATH):
    if rank is None or alpha is None or rank < 1:
        raise BadInput(f"LoRA needs rank >= 1 and an alpha, got rank={rank}, alpha={alpha}")
    return qwix.LoraProvider(module_path=module_path, rank=rank, alpha=alpha)


# ---------------------------------------------------------------------------- forward, training


def _forward(model, tokens, pad_id, **kwargs):
    mask = tokens != pad_id
    positions = gen_utils.build_positions_from_mask(mask)
    attention = model.get_attention_mask(tokens, inputs_mask=mask)
    logits, _ = model(tokens, positions, None, attention, **kwargs)
    return logits


def hidden_states(model, tokens, pad_id: int = PAD_ID) -> jax.Array:
    """Final-normed hidden states [B, T, D] of a teacher-forced pass, for a chunked top-k or
    loss (shared.logits) to take over from. Text only.

    It goes through Gemma3.__call__ (qwix's LoRA intercepts that call, so calling the layers
    one by one would skip the adapters) and reads the hidden states the model sows; the
    [B, T, V] logits that call also computes are unused, and XLA removes them under jit.
    """
    _forward(model, tokens, pad_id, output_hidden_states=True)
    (hidden,) = nnx.pop(model, nnx.Intermediate)["all_hidden_states"].get_value()
    return hidden


def embedding_table(model) -> jax.Array:
    """The tied [V, D] table Gemma 3 uses as its LM head."""
    return model.embedder.input_embedding[...]


LOGITS_MODES = ("full", "topk")


@functools.partial(jax.jit, static_argnames=("graph", "mode", "k", "pad_id"))
def teacher_forced_top_k(graph, state, tokens, *, mode: str, k: int, pad_id: int = PAD_ID):
    """Top-k logits (values, indices) [B, T, k] of a teacher-forced pass over tokens [B, T].

    mode 'full' materialises the [B, T, V] logits and takes lax.top_k, as tunix's forward
    does; 'topk' stops at the hidden states and uses shared.logits.top_k_logits, chunked.
    Notebook 03 runs this function; plan mode's `forward` workload compiles it.
    """
    model = nnx.merge(graph.graphdef, state)
    if mode == "full":
        return jax.lax.top_k(_forward(model, tokens, pad_id), k)
    return top_k_logits(hidden_states(model, tokens, pad_id), embedding_table(model), k)


def abstract_forward_args(name: str, batch: int, seq_len: int, *, mesh,
                          vocab_size: int | None = None) -> tuple[tuple, dict]:
    """(args, kwargs) for `teacher_forced_top_k.lower` minus mode/k: graph, state, tokens."""
    abs_model = abstract_model(name, vocab_size=vocab_size)
    check_divisible(abs_model.config, mesh)
    graphdef, state = nnx.split(abs_model)
    tokens = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32,
                                  sharding=batch_sharding(mesh))
    return (StaticGraph(graphdef), with_shardings(state, mesh), tokens), {}


class StaticGraph:
    """An nnx GraphDef usable as a jit static argument.

    tunix's ModelConfig is a non-frozen dataclass, so a Gemma3 GraphDef (which holds it) is
    unhashable; this hashes on the leaf count and compares the GraphDefs themselves.
    """

    __slots__ = ("graphdef",)

    def __init__(self, graphdef):
        self.graphdef = graphdef

    def __hash__(self):
        return hash(getattr(self.graphdef, "num_leaves", 0))

    def __eq__(self, other):
        return isinstance(other, StaticGraph) and (
            self.graphdef is other.graphdef or self.graphdef == other.graphdef)


@functools.partial(jax.jit, static_argnames=("graph", "pad_id"))
def _logits_jit(graph, state, tokens, pad_id):
    return _forward(nnx.merge(graph.graphdef, state), tokens, pad_id)


def full_logits(model, tokens, pad_id: int = PAD_ID) -> jax.Array:
    """Teacher-forced logits [B, T, V] (the model's dtype) for int tokens [B, T]."""
    graphdef, state = nnx.split(model)
    return _logits_jit(StaticGraph(graphdef), state, jnp.asarray(tokens, jnp.int32), pad_id)
