"""Notebook 04's decoder-only transformer in flax nnx, its configs and sharded initialisation.

Token embedding (optionally RMS-normed), L pre-norm blocks (RMSNorm, RoPE attention with
GQA/MQA and optional QK-norm, SwiGLU or ReLU² MLP), a final RMSNorm and a tied or untied LM
head with an optional logit softcap. Weights are stored in head shape so every einsum is
written with the dimension letters and needs no reshape: wq [D,N,H], wk/wv [D,K,H],
wo [N,H,D], MLP [D,F] and [F,D], embedding and LM head [V,D]. The blocks' weights are
stacked on a leading L axis (`model.layers.wq` is [L,D,N,H]) and run with lax.scan or an
unrolled loop (`scan_layers`).

Dtypes: parameters are float32 by default (AdamW's per-step updates, ~lr ≈ 1e-3 of a
weight, sit below bf16's 2^-8 relative resolution, so bf16 weights would drop them; at 164M
parameters fp32 weights cost 0.65 GB, small beside a 16-32 GB chip). Compute is bf16: every
weight is cast to `dtype` where it is used and activations are bf16 (TPU/GPU matmuls
accumulate in fp32 inside); norms, RoPE and the softmax run in fp32 and the logits are fp32.

Parameter count equals `sizing.param_counts(config.dims())` exactly; the embedding norm has
no learnable scale, so it adds no parameters (sizing counts none for it).

Sharding: every parameter carries `out_sharding` metadata for an ("fsdp", "tp") mesh: the
model dimension D over "fsdp", heads / F / V over "tp", the layer axis unsharded. A mesh
axis that does not divide a dimension (K=1 kv heads over tp=2, say) is dropped for that
parameter, which is then replicated along it. `init_sharded` compiles the initialiser with
those shardings as `out_shardings`, so every device generates only its own shard.

Init: fan-in normal (std = fan_in^-0.5) for wq/wk/wv and the MLP input matrices; the two
residual-output matrices (wo, w_down) also divided by sqrt(2L) (GPT-2); the embedding
N(0, 1) when untied (the residual stream starts at unit RMS) and N(0, D^-0.5) when tied (so
the LM head's logits start at unit scale); the untied LM head N(0, D^-0.5); norm scales 1.
"""

import functools
import math
from dataclasses import dataclass, fields, replace

import jax
import jax.numpy as jnp
from flax import nnx

from shared import sizing
from shared.errors import BadInput, choose
from shared.pretrain.attention import IMPLS, PLATFORMS, attention

MLPS = ("swiglu", "relu2")
DTYPES = ("float32", "bfloat16")
# 'block' rematerialises each block from its input; 'dots' keeps the matmul outputs that have
# no batch dimension (the projections) and recomputes the rest (attention, activations).
REMATS = ("none", "block", "dots")
DIM_NAMES = ("L", "D", "F", "N", "K", "H", "V", "T")
VOCAB_MULTIPLE = 256


def padded_vocab(n: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """A tokenizer's vocabulary size rounded up to a multiple of 256 (tile-friendly V)."""
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class ModelConfig:
    """Architecture numbers (`sizes`: L D F N K H V T from shared.sizing) plus the knobs."""

    name: str
    sizes: sizing.ModelDims
    mlp: str = "swiglu"  # 'swiglu' (3 matrices) or 'relu2' (2 matrices)
    qk_norm: bool = False  # RMS-norm queries and keys per head (learnable [H] scales)
    tied: bool = False  # one [V,D] table for the embedding and the LM head
    embed_norm: bool = False  # RMS-norm the token embedding (no learnable scale)
    logit_softcap: float | None = None  # logits -> c·tanh(logits/c)
    param_dtype: str = "float32"
    dtype: str = "bfloat16"  # compute dtype
    attention: str | None = None  # shared.pretrain.attention implementation; None: platform default
    attn_block_q: int | None = None  # Pallas kernel tile sizes (None: attention's defaults)
    attn_block_kv: int | None = None
    attn_block_bwd: int | None = None
    platform: str | None = None  # 'tpu'/'gpu'/'cpu' to compile for; None: jax's default
    rope_base: float = 10000.0
    remat: str = "none"
    # lax.scan over the stacked layers, or an unrolled loop over them. cost_analysis() counts
    # a scan body once, so FLOP estimates from a compiled scan see 1 of L layers.
    scan_layers: bool = True
    norm_eps: float = 1e-6

    def __post_init__(self):
        s = self.sizes
        for letter in ("L", "D", "F", "N", "K", "H", "V"):
            value = getattr(s, letter)
            if not isinstance(value, int) or value < 1:
                raise BadInput(f"model {self.name}: {letter} must be a positive int, got {value!r}")
        if s.N % s.K:
            raise BadInput(
                f"model {self.name}: N={s.N} query heads must be a multiple of K={s.K} kv heads"
            )
        if s.H % 2:
            raise BadInput(f"model {self.name}: head dim H={s.H} must be even for RoPE")
        choose("mlp", self.mlp, MLPS)
        choose("remat policy", self.remat, REMATS)
        choose("param_dtype", self.param_dtype, DTYPES)
        choose("dtype", self.dtype, DTYPES)
        if self.attention is not None:
            choose("attention implementation", self.attention, IMPLS)
        if self.platform is not None:
            choose("platform", self.platform, PLATFORMS)
        if self.logit_softcap is not None and not self.logit_softcap > 0:
            raise BadInput(f"logit_softcap must be positive or None, got {self.logit_softcap}")

    # The letters, so code can write config.D rather than config.sizes.D.
    L = property(lambda self: self.sizes.L)
    D = property(lambda self: self.sizes.D)
    F = property(lambda self: self.sizes.F)
    N = property(lambda self: self.sizes.N)
    K = property(lambda self: self.sizes.K)
    H = property(lambda self: self.sizes.H)
    V = property(lambda self: self.sizes.V)
    T = property(lambda self: self.sizes.T)

    def dims(self) -> sizing.ModelDims:
        """The sizing view of this exact architecture (params, FLOPs, MFU use it)."""
        return replace(
            self.sizes,
            name=self.name,
            tied=self.tied,
            mlp_matrices=3 if self.mlp == "swiglu" else 2,
            norms_per_layer=2,
            qk_norm=self.qk_norm,
        )

    def replace(self, **overrides) -> "ModelConfig":
        """A copy with dimension letters (L D F N K H V T) and/or knobs changed."""
        knobs = [f.name for f in fields(self) if f.name not in ("name", "sizes")]
        unknown = [k for k in overrides if k not in DIM_NAMES and k not in knobs]
        if unknown:
            raise BadInput(
                f"unknown model override {', '.join(unknown)}; valid: "
                f"{', '.join(DIM_NAMES + tuple(knobs))}"
            )
        dims = {k: v for k, v in overrides.items() if k in DIM_NAMES}
        rest = {k: v for k, v in overrides.items() if k not in DIM_NAMES}
        return replace(self, sizes=replace(self.sizes, **dims), **rest)


CONFIGS: dict[str, ModelConfig] = {
    # The field's reference model: 163.6M parameters, 130.0M without the embedding.
    # Unrolled layers: XLA's cost_analysis counts a scan body once, so plan mode's roofline
    # needs the unrolled program to see all L layers' FLOPs.
    "130m": ModelConfig(
        "130m",
        sizing.PRESETS["pretrain-130m"],
        tied=sizing.PRESETS["pretrain-130m"].tied,
        scan_layers=False,
    ),
    # About a second per 8x256-token training step on 2 CPU cores (scan runs faster there
    # than the unrolled loop); the trainer sets V from its tokenizer.
    "tiny": ModelConfig(
        "tiny",
        sizing.ModelDims("tiny", L=4, D=128, F=384, N=4, K=2, H=32, V=4096, tied=False, T=256),
    ),
}


def config(name: str, **overrides) -> ModelConfig:
    """A named config with overrides, e.g. config('tiny', V=8192, mlp='relu2')."""
    base = CONFIGS[choose("model config", name, CONFIGS)]
    return base.replace(**overrides) if overrides else base


# ---------------------------------------------------------------------------- layers

_dtype = jnp.dtype


def _fit(spec: tuple, shape: tuple, mesh) -> tuple:
    """Drop mesh axes that the mesh lacks or that do not divide their dimension."""
    if mesh is None:
        return spec
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    return tuple(
        a if a in sizes and n % sizes[a] == 0 else None for a, n in zip(spec, shape, strict=True)
    )


def _param(rngs, shape, std, spec, config, mesh) -> nnx.Param:
    value = std * jax.random.normal(rngs.params(), shape, _dtype(config.param_dtype))
    return nnx.Param(value, out_sharding=_fit(spec, shape, mesh), eager_sharding=False)


def _ones(shape, config) -> nnx.Param:
    return nnx.Param(
        jnp.ones(shape, _dtype(config.param_dtype)),
        out_sharding=(None,) * len(shape),
        eager_sharding=False,
    )


def _rms(x: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)


def rms_norm(x: jax.Array, scale: jax.Array | None, eps: float) -> jax.Array:
    """RMSNorm over the last axis in fp32 (scale None: no learnable scale); x's dtype out."""
    y = _rms(x, eps)
    if scale is not None:
        y = y * scale.astype(jnp.float32)
    return y.astype(x.dtype)


def rope_tables(T: int, H: int, base: float) -> tuple[jax.Array, jax.Array]:
    """cos, sin [T, H/2] for rotary embeddings (half-split layout)."""
    inv_freq = base ** (-jnp.arange(0, H, 2, dtype=jnp.float32) / H)
    angles = jnp.arange(T, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate x [B,T,heads,H] by position; fp32 inside, x's dtype out."""
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


def block(config: ModelConfig, p: dict, x: jax.Array, cos: jax.Array, sin: jax.Array):
    """One pre-norm block on x [B,T,D] with one layer's weights `p` (no L axis)."""
    c, dt = config, x.dtype

    def w(name):
        return p[name].astype(dt)

    h = rms_norm(x, p["attn_norm"], c.norm_eps)
    q = jnp.einsum("BTD,DNH->BTNH", h, w("wq"))
    k = jnp.einsum("BTD,DKH->BTKH", h, w("wk"))
    v = jnp.einsum("BTD,DKH->BTKH", h, w("wv"))
    if c.qk_norm:
        q, k = rms_norm(q, p["q_norm"], c.norm_eps), rms_norm(k, p["k_norm"], c.norm_eps)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = attention(
        q,
        k,
        v,
        impl=c.attention,
        causal=True,
        block_q=c.attn_block_q,
        block_kv=c.attn_block_kv,
        block_bwd=c.attn_block_bwd,
        platform=c.platform,
    )
    x = x + jnp.einsum("BTNH,NHD->BTD", o, w("wo"))
    h = rms_norm(x, p["mlp_norm"], c.norm_eps)
    up = jnp.einsum("BTD,DF->BTF", h, w("w_up"))
    if c.mlp == "swiglu":
        act = jax.nn.silu(jnp.einsum("BTD,DF->BTF", h, w("w_gate"))) * up
    else:
        act = jnp.square(jax.nn.relu(up))
    return x + jnp.einsum("BTF,FD->BTD", act, w("w_down"))


_REMAT_POLICY = {
    "block": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Layers(nnx.Module):
    """All L blocks' weights stacked on a leading L axis, run with lax.scan or unrolled.

    One stacked array per weight keeps compile time flat in L and initialises each kind of
    weight with one random draw. Shapes: attn_norm/mlp_norm [L,D], wq [L,D,N,H],
    wk/wv [L,D,K,H], wo [L,N,H,D], w_gate/w_up [L,D,F], w_down [L,F,D], q_norm/k_norm [L,H].
    """

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs, mesh=None):
        c = config
        L, D, F, N, K, H = c.L, c.D, c.F, c.N, c.K, c.H
        self.config = c
        resid_scale = 1 / math.sqrt(2 * L)

        def param(shape, std, spec):
            return _param(rngs, (L, *shape), std, (None, *spec), c, mesh)

        self.attn_norm = _ones((L, D), c)
        self.wq = param((D, N, H), D**-0.5, ("fsdp", "tp", None))
        self.wk = param((D, K, H), D**-0.5, ("fsdp", "tp", None))
        self.wv = param((D, K, H), D**-0.5, ("fsdp", "tp", None))
        self.wo = param((N, H, D), (N * H) ** -0.5 * resid_scale, ("tp", None, "fsdp"))
        self.q_norm = _ones((L, H), c) if c.qk_norm else None
        self.k_norm = _ones((L, H), c) if c.qk_norm else None
        self.mlp_norm = _ones((L, D), c)
        self.w_gate = param((D, F), D**-0.5, ("fsdp", "tp")) if c.mlp == "swiglu" else None
        self.w_up = param((D, F), D**-0.5, ("fsdp", "tp"))
        self.w_down = param((F, D), F**-0.5 * resid_scale, ("tp", "fsdp"))

    def weights(self) -> dict[str, jax.Array]:
        names = ["attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_up", "w_down"]
        names += ["w_gate"] if self.config.mlp == "swiglu" else []
        names += ["q_norm", "k_norm"] if self.config.qk_norm else []
        return {name: getattr(self, name)[...] for name in names}

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        c = self.config

        def body(x, p):
            return block(c, p, x, cos, sin), None

        if c.remat != "none":
            body = jax.checkpoint(body, policy=_REMAT_POLICY[c.remat], prevent_cse=False)
        weights = self.weights()
        if c.scan_layers:
            return jax.lax.scan(body, x, weights)[0]
        for i in range(c.L):
            x = body(x, {name: w[i] for name, w in weights.items()})[0]
        return x


class Transformer(nnx.Module):
    """The decoder. `hidden` for the chunked loss, `__call__` for full logits."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, mesh=None):
        c = config
        self.config = c
        embed_std = c.D**-0.5 if c.tied else 1.0
        self.embed = _param(rngs, (c.V, c.D), embed_std, ("tp", "fsdp"), c, mesh)
        self.layers = Layers(c, rngs, mesh)
        self.final_norm = _ones((c.D,), c)
        self.lm_head = (
            None if c.tied else _param(rngs, (c.V, c.D), c.D**-0.5, ("tp", "fsdp"), c, mesh)
        )

    def hidden(self, tokens: jax.Array) -> jax.Array:
        """tokens [B,T] int -> final-normed hidden states [B,T,D] in the compute dtype."""
        c = self.config
        dt = _dtype(c.dtype)
        x = jnp.take(self.embed[...], tokens, axis=0).astype(dt)
        if c.embed_norm:
            x = rms_norm(x, None, c.norm_eps)
        cos, sin = rope_tables(tokens.shape[1], c.H, c.rope_base)
        x = self.layers(x, cos, sin)
        return rms_norm(x, self.final_norm[...], c.norm_eps)

    def lm_head_weight(self) -> jax.Array:
        """[V,D] LM head in the compute dtype (the embedding table when tied)."""
        w = self.embed if self.config.tied else self.lm_head
        return w[...].astype(_dtype(self.config.dtype))

    def logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [B,T,D] -> fp32 logits [B,T,V], softcapped if configured."""
        out = jnp.einsum(
            "BTD,VD->BTV", hidden, self.lm_head_weight(), preferred_element_type=jnp.float32
        )
        cap = self.config.logit_softcap
        return out if cap is None else cap * jnp.tanh(out / cap)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.logits(self.hidden(tokens))


def count_params(tree) -> int:
    """Number of parameter elements in a model, a State or any pytree of arrays."""
    if isinstance(tree, nnx.Module):
        tree = nnx.state(tree, nnx.Param)
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


# ---------------------------------------------------------------------------- sharded init


def abstract_model(config: ModelConfig, mesh=None):
    """(graphdef, abstract state): ShapeDtypeStructs carrying NamedShardings when a mesh is given.

    Nothing is allocated; plan mode compiles the train step against this state.
    """
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0), mesh=mesh))
    graphdef, state = nnx.split(abstract)
    if mesh is None:
        return graphdef, state
    shardings = nnx.get_named_sharding(state, mesh)
    state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state, shardings
    )
    return graphdef, state


def sharded_initializer(config: ModelConfig, mesh):
    """(jitted init(seed) -> state, graphdef); the jit's out_shardings are the param shardings."""
    graphdef, abstract = abstract_model(config, mesh)
    out_shardings = jax.tree.map(lambda a: a.sharding, abstract)

    @functools.partial(jax.jit, out_shardings=out_shardings)
    def init(seed):
        return nnx.state(Transformer(config, rngs=nnx.Rngs(jax.random.key(seed)), mesh=mesh))

    return init, graphdef


def init_sharded(config: ModelConfig, mesh, seed: int = 0) -> Transformer:
    """Initialise straight into shards: no device or host ever holds a whole table."""
    init, graphdef = sharded_initializer(config, mesh)
    return nnx.merge(graphdef, init(jnp.asarray(seed, jnp.int32)))


def init(config: ModelConfig, seed: int = 0) -> Transformer:
    """Initialise on the default device (no mesh), jitted."""
    graphdef, _ = abstract_model(config)
    state = jax.jit(lambda s: nnx.state(Transformer(config, rngs=nnx.Rngs(jax.random.key(s)))))(
        jnp.asarray(seed, jnp.int32)
    )
    return nnx.merge(graphdef, state)
