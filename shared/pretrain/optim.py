"""AdamW with a warm-up / constant / warm-down schedule, and gradient accumulation.

- `make_optimizer`: optax AdamW (b1 0.9, b2 0.95) whose weight decay skips norm scales,
  biases and scalars, the learning rate from `schedule`, optional global-norm clipping.
- `schedule`: linear warm-up to `lr`, constant, linear warm-down to `final_fraction · lr`
  at `total_steps` (the "trapezoid" / WSD schedule).
- `accumulate_gradients`: mean loss and fp32 gradients over M micro-batches with lax.scan,
  so a batch too big for memory costs one micro-batch of activations; accumulating in fp32
  (the field's reference run accumulated in bf16) keeps the sum exact to fp32 rounding.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from shared.errors import BadInput

# Path fragments whose parameters get no weight decay, whatever their rank. Stacked layers
# give norm scales a leading L axis ([L, D]), so rank alone cannot tell a norm from a matrix.
NO_DECAY_NAMES = ("norm", "scale", "bias")


def _path_text(path) -> str:
    return "/".join(
        str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path
    ).lower()


def decay_mask(params):
    """True where weight decay applies: rank >= 2 and no norm/scale/bias in the path."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: (
            jnp.ndim(x) >= 2 and not any(name in _path_text(path) for name in NO_DECAY_NAMES)
        ),
        params,
    )


def warmdown_steps(total_steps: int, warmdown: int | float) -> int:
    """`warmdown` as steps: an int is a step count, a float in [0, 1] a fraction of total."""
    if isinstance(warmdown, bool) or not isinstance(warmdown, int | float):
        raise BadInput(
            f"warmdown must be a step count (int) or a fraction (float), got {warmdown!r}"
        )
    if isinstance(warmdown, float):
        if not 0.0 <= warmdown <= 1.0:
            raise BadInput(f"warmdown fraction must be in [0, 1], got {warmdown}")
        return round(warmdown * total_steps)
    return warmdown


def schedule(
    lr: float,
    total_steps: int,
    warmup_steps: int = 0,
    warmdown: int | float = 0,
    final_fraction: float = 0.0,
) -> optax.Schedule:
    """Learning rate at step s (0-based, the step whose update it scales).

    s < warmup:               lr · (s+1)/warmup  (the first step already moves)
    warmup <= s < total-wd:   lr
    s >= total-wd:            lr · (f + (1-f)·(total-s)/wd), reaching f·lr at s = total
    """
    wd = warmdown_steps(total_steps, warmdown)
    if total_steps < 1 or warmup_steps < 0 or wd < 0 or warmup_steps + wd > total_steps:
        raise BadInput(
            f"schedule needs total_steps >= 1 and warmup ({warmup_steps}) + warmdown "
            f"({wd}) <= total_steps ({total_steps})"
        )
    if not 0.0 <= final_fraction <= 1.0:
        raise BadInput(f"final_fraction must be in [0, 1], got {final_fraction}")
    start_down = total_steps - wd

    def fn(step):
        s = jnp.asarray(step, jnp.float32)
        up = (s + 1) / warmup_steps if warmup_steps else 1.0
        down = (final_fraction + (1 - final_fraction) * (total_steps - s) / wd) if wd else 1.0
        frac = jnp.where(s < warmup_steps, up, jnp.where(s >= start_down, down, 1.0))
        return lr * jnp.clip(frac, 0.0, 1.0)

    return fn


def make_optimizer(
    lr: float,
    weight_decay: float,
    total_steps: int,
    warmup_steps: int = 0,
    warmdown: int | float = 0.2,
    clip: float | None = None,
    *,
    b1: float = 0.9,
    b2: float = 0.95,
    eps: float = 1e-8,
    final_fraction: float = 0.0,
    mask: Callable | None = decay_mask,
) -> optax.GradientTransformation:
    """AdamW on the schedule above; decay only where `mask` says; clip the global norm first."""
    if lr <= 0 or weight_decay < 0:
        raise BadInput(f"need lr > 0 and weight_decay >= 0, got lr={lr}, wd={weight_decay}")
    if clip is not None and clip <= 0:
        raise BadInput(f"clip must be a positive global norm or None, got {clip}")
    sched = schedule(lr, total_steps, warmup_steps, warmdown, final_fraction)
    adamw = optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=mask)
    return adamw if clip is None else optax.chain(optax.clip_by_global_norm(clip), adamw)


def split_microbatches(batch, micro: int):
    """[B, ...] -> [micro, B/micro, ...] for every leaf of `batch`."""

    def split(x):
        if x.shape[0] % micro:
            raise BadInput(f"batch of {x.shape[0]} does not split into {micro} micro-batches")
        return x.reshape(micro, x.shape[0] // micro, *x.shape[1:])

    if micro < 1:
        raise BadInput(f"micro-batch count must be >= 1, got {micro}")
    return jax.tree.map(split, batch)


def accumulate_gradients(loss_fn: Callable, params, batch):
    """Mean loss and fp32 mean gradients of loss_fn(params, micro_batch) over axis 0 of batch.

    `batch` (an array or pytree) has a leading micro-batch axis M, e.g. tokens [M, b, T+1].
    Equal-sized micro-batches with a per-micro-batch mean loss make this exactly the full
    batch's mean loss and gradient. The sum runs in fp32 whatever the parameters' dtype.
    """
    grad_fn = jax.value_and_grad(loss_fn)

    def f32(tree):
        return jax.tree.map(lambda g: g.astype(jnp.float32), tree)

    leaves = jax.tree.leaves(batch)
    M = leaves[0].shape[0]
    if M == 1:
        loss, grads = grad_fn(params, jax.tree.map(lambda x: x[0], batch))
        return loss.astype(jnp.float32), f32(grads)

    def body(carry, micro):
        loss_sum, grad_sum = carry
        loss, grads = grad_fn(params, micro)
        grad_sum = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grad_sum, grads)
        return (loss_sum + loss.astype(jnp.float32), grad_sum), None

    zeros = jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
    (loss_sum, grad_sum), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), batch)
    return loss_sum / M, jax.tree.map(lambda g: g / M, grad_sum)
