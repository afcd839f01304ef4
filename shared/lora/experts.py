"""qwix LoRA on a mixture of experts: which weights get adapters, and a short fine-tune of each
tiny mixture (notebook 02).

qwix adapts the modules whose path matches the family's `lora_module_path` (shared.models):
it intercepts the matmuls a matching module makes with its own weight. Read from the model
qwix returns, not from the pattern: `adapted_weights` lists the weights that got adapters,
`expert_weights` the stacked expert weights (a leading axis of `num_experts`), and
`experts_adapted` says whether any adapter sits in a module that holds them. tunix's Qwen 3
MoE layer keeps its experts as raw stacks named `gate_proj`, `up_proj`, `down_proj` inside the
`mlp` module, so the pattern's MLP names match no module there; Gemma 4 keeps them in `moe`
beside a dense `mlp` the pattern does match.
"""

from __future__ import annotations

import gc

import jax
from flax import nnx

from shared import data, models
from shared.lora.adapters import apply_lora, lora_param_count
from shared.lora.settings import LoraOverhead
from shared.lora.train import fine_tune, play_tokens
from shared.rollout import moe as rollout_moe
from shared.rollout.moe import does_not_run, experts

MODELS = ("qwen3-moe-tiny", "gemma4-moe-tiny")
PRESETS = rollout_moe.PRESETS  # the real mixtures these scale down
# a table's columns; which weights got adapters, too long for one, `describe` says in words
COLUMNS = ["model", "experts", "status", "lora_params", "loss_first", "loss_last", "step_ms"]


def _paths(state) -> list[tuple[str, ...]]:
    return [
        tuple(str(getattr(k, "key", k)) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(state.to_pure_dict())[0]
    ]


def _without_layer(path: tuple[str, ...]) -> str:
    """'layers/0/attn/q_proj' -> 'attn/q_proj': one name for every layer's copy."""
    return "/".join(p for p in path if p != "layers" and not p.isdigit())


def adapted_weights(model) -> list[str]:
    """The weights qwix gave adapters (module path and weight, layer index dropped):
    'attn/q_proj/w' for q_proj's lora_a and lora_b in every layer."""
    paths = _paths(nnx.state(model, nnx.LoRAParam))
    return sorted({_without_layer(p[:-1]) + "/" + p[-1].rsplit("_lora_", 1)[0] for p in paths})


def expert_weights(model) -> list[str]:
    """The stacked expert weights (a leading axis of the config's `num_experts`, a matrix per
    expert), layer index dropped; empty for a dense model."""
    count = getattr(model.config, "num_experts", None)
    if not count:
        return []
    state = nnx.state(model, nnx.Param)
    leaves = jax.tree.leaves(state.to_pure_dict())
    return sorted(
        {
            _without_layer(path)
            for path, x in zip(_paths(state), leaves, strict=True)
            if x.ndim >= 3 and x.shape[0] == count
        }
    )


def experts_adapted(model) -> bool:
    """Whether any adapter sits in a module holding expert weights (where qwix would put
    the adapters of a matmul with an expert stack)."""
    holders = {w.rsplit("/", 1)[0] for w in expert_weights(model)}
    return any(w.rsplit("/", 1)[0] in holders for w in adapted_weights(model))


def fine_tunes(
    mesh, setting: LoraOverhead, *, seed: int = 0, names=MODELS, load=None
) -> list[dict]:
    """Per model: qwix LoRA at the setting's rank and alpha, what it adapted, and the
    setting's fine-tune (`train_steps` steps of `fine_tune` at `lr` on the spoken lines of
    Macbeth, `train_batch` x `train_seq` tokens a step): the loss at the first and last step.
    The setting's model and weights are not read: these are tiny configs, random weights. One
    model in memory at a time; `load(name) -> (model, tokenizer)` defaults to models.load in
    the training layout."""
    if load is None:

        def load(name):
            return models.load(name, "dummy", mesh=mesh, seed=seed)

    rows = []
    for name in names:
        if why := does_not_run(name, mesh):
            rows.append({"model": name, "status": "does not run", "error": why})
            continue
        base, tok = load(name)
        adapted = apply_lora(base, setting.rank, setting.alpha, mesh=mesh)
        tokens = play_tokens(tok, adapted)
        batches = data.TrainBatches(tokens, setting.train_batch, setting.train_seq, seed=seed)
        losses, step_s = fine_tune(
            adapted, batches, steps=setting.train_steps, lr=setting.lr, mesh=mesh, desc=name
        )
        rows.append(
            {
                "model": name,
                "experts": experts(adapted.config),
                "status": "ok",
                "adapted": " ".join(adapted_weights(adapted)),
                "expert_weights": " ".join(expert_weights(adapted)),
                "experts_adapted": experts_adapted(adapted),
                "lora_params": lora_param_count(adapted),
                "loss_first": losses[0],
                "loss_last": losses[-1],
                "step_ms": 1e3 * step_s,
            }
        )
        del base, adapted, tok
        gc.collect()
    return rows


def describe(rows: list[dict]) -> str:
    """`fine_tunes`' rows in words, one line a model: its loss before and after, the weights
    that got adapters and the expert weights that did not."""
    lines = []
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['model']}: {r['status']} ({r['error']})")
            continue
        experts = "ALSO on" if r["experts_adapted"] else "none on"
        lines.append(
            f"{r['model']} ({r['experts']}): loss {r['loss_first']:.3f} -> {r['loss_last']:.3f}; "
            f"adapters on {r['adapted']}; {experts} its experts ({r['expert_weights']})"
        )
    return "\n".join(lines)
