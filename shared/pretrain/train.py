"""Pretraining loop for notebook 04's model: train step, evaluation, checkpoints, metrics.

- The train step is one jitted function with donated state: the chunked loss of
  `shared.logits.cross_entropy` (no [B, T, V] logits), gradients accumulated over
  micro-batches in fp32 (`shared.pretrain.optim`), one AdamW update. Plan mode compiles this same
  function for a TPU target (shared.plan.workloads.train).
- Evaluation covers the whole held-out split, every token once: loss and bits per byte.
- Checkpoints (`shared.pretrain.checkpoints`, orbax) every N steps and on SIGTERM hold parameters,
  optimizer state, the step and the data position. Batch i is a pure function of (seed, i)
  (`shared.data`), so a run killed at any moment and restarted from its latest checkpoint
  repeats the uninterrupted run's per-step losses exactly; metrics lines past the checkpoint
  are dropped on resume. An unreadable newest checkpoint is set aside, with one line, and the
  run resumes from the newest readable one (or starts fresh).
- Metrics: one JSON line per step (`step`, `loss`, `tok_per_s`, `mfu`, ...) in `--metrics`,
  wandb when WANDB_MODE allows, a progress bar. MFU uses shared.sizing's MaxText convention
  (causal attention halved) against the chips' bf16 peak; on CPU against a measured matmul
  peak, labelled `mfu_peak: cpu-measured`.

    python -m shared.pretrain.train --config tiny --steps 200 --batch 8 --seq 256 \\
        --ckpt-dir /tmp/ckpt --ckpt-every 20 --metrics /tmp/metrics.jsonl --seed 0
"""

import contextlib
import dataclasses
import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from shared import data, hardware, logits, sizing
from shared.errors import BadInput, run_cli
from shared.hardware import measure, sharding
from shared.paths import writable_folder
from shared.pretrain import model, optim
from shared.pretrain.checkpoints import Checkpoints, checkpoint_folder
from shared.pretrain.config import TrainConfig, parse_args
from shared.pretrain.records import Metrics, Preemption, metrics_folder, wandb_run
from shared.report import ledger

# Columns that measure the machine, not the maths: they differ between two identical runs.
TIMING_KEYS = ("tok_per_s", "mfu", "step_s", "time")


# ---------------------------------------------------------------------------- the step


def make_loss(graphdef, config: model.ModelConfig):
    """loss(params, tokens [b, T+1]) -> mean next-token loss; targets < 0 are ignored."""

    def loss(params, tokens):
        net = nnx.merge(graphdef, params)
        hidden = net.hidden(tokens[:, :-1])
        return logits.cross_entropy(
            hidden, net.lm_head_weight(), tokens[:, 1:], softcap=config.logit_softcap
        )

    return loss


def make_train_step(
    graphdef, config: model.ModelConfig, tx: optax.GradientTransformation, microbatches: int
):
    """jit(step)(params, opt_state, tokens [B, T+1]) -> (params, opt_state, metrics); donated."""
    loss_fn = make_loss(graphdef, config)

    def step(params, opt_state, tokens):
        loss, grads = optim.accumulate_gradients(
            loss_fn, params, optim.split_microbatches(tokens, microbatches)
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss, "grad_norm": optax.global_norm(grads)}

    return jax.jit(step, donate_argnums=(0, 1))


def make_eval_step(graphdef, config: model.ModelConfig):
    """jit(eval)(params, tokens [B, T+1], mask [B, T]) -> (summed loss, counted targets)."""
    loss_fn = make_loss(graphdef, config)

    def evaluate(params, tokens, mask):
        masked = jnp.concatenate([tokens[:, :1], jnp.where(mask, tokens[:, 1:], -1)], axis=1)
        count = mask.sum()
        return loss_fn(params, masked) * count, count

    return jax.jit(evaluate)


def evaluate(eval_step, params, batches: data.EvalBatches, sharding_, limit: int = 0) -> dict:
    """Loss and bits per byte over the whole held-out split (or loss over its first `limit`
    batches: bits per byte need the byte count of exactly the text scored, so it is None)."""
    total, count = 0.0, 0
    for i, batch in enumerate(batches.iterate(sharding=sharding_)):
        if limit and i == limit:
            break
        loss_sum, n = eval_step(params, batch.tokens, batch.mask)
        total, count = total + float(loss_sum), count + int(n)
    mean = total / max(count, 1)
    whole = count == batches.n_targets
    return {
        "val_loss": mean,
        "val_bpb": batches.bits_per_byte(mean) if whole else None,
        "val_tokens": count,
    }


# ---------------------------------------------------------------------------- state


def init_state(config: model.ModelConfig, tx, mesh, seed: int):
    """Sharded parameters and optimizer state: nothing is ever whole on one device."""
    net = model.init_sharded(config, mesh, seed)
    graphdef, params = nnx.split(net, nnx.Param)
    shardings = sharding.opt_state_shardings(tx, params, mesh)
    with jax.set_mesh(mesh):
        opt_state = jax.jit(tx.init, out_shardings=shardings)(params)
    return graphdef, params, opt_state


def abstract_state(config: model.ModelConfig, tx, mesh):
    """Parameters and optimizer state as ShapeDtypeStructs with their shardings (plan mode)."""
    graphdef, abstract = model.abstract_model(config, mesh)
    params = nnx.split(nnx.merge(graphdef, abstract), nnx.Param)[1]
    opt_state = jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
        jax.eval_shape(tx.init, params),
        sharding.opt_state_shardings(tx, params, mesh),
    )
    return graphdef, params, opt_state


# ---------------------------------------------------------------------------- the loop


@functools.cache  # measuring the CPU peak compiles and runs a large matmul: once per process
def peak_flops() -> tuple[float, str]:
    """The devices' total bf16 peak, or a measured matmul peak on CPU (and which it is)."""
    chip = hardware.current_chip()
    n = jax.device_count()
    if chip is not None and chip.peak_bf16_flops is not None:
        return chip.peak_bf16_flops * n, f"{chip.name} bf16 peak x {n}"
    return measure.matmul_peak_flops() * n, "cpu-measured"


@dataclass
class Run:
    """What `train` leaves behind: the summary, and the trained model and tokenizer to sample."""

    summary: dict
    model: model.Transformer
    tokenizer: object


def lr_schedule(cfg: TrainConfig):
    """The learning rate `make_optimizer` applies at each step, for the metrics."""
    return optim.schedule(cfg.lr, cfg.steps, cfg.warmup, cfg.warmdown)


def train(cfg: TrainConfig, *, progress: bool = True) -> Run:
    """Train (or resume from cfg.ckpt_dir) and return the summary, model and tokenizer."""
    from tqdm.auto import tqdm

    # where the run writes: checked now, not after the data is tokenized and the model built
    if cfg.ckpt_dir:
        checkpoint_folder(cfg.ckpt_dir)
    if cfg.metrics:
        metrics_folder(cfg.metrics)
    hardware.initialize_distributed()
    sp = data.tokenizer(cfg.vocab_size, corpus=cfg.corpus, parquet_dir=cfg.parquet_dir)
    splits = data.prepare(
        cfg.corpus, cfg.vocab_size, parquet_dir=cfg.parquet_dir, progress=progress
    )
    config = cfg.model_config(sp.get_piece_size())
    mesh = sharding.make_mesh(cfg.mesh)
    if cfg.microbatches < 1 or cfg.batch % cfg.microbatches:
        raise BadInput(f"batch {cfg.batch} does not split into {cfg.microbatches} micro-batches")
    sharding.check_batch(cfg.batch // cfg.microbatches, mesh)
    tx = optim.make_optimizer(cfg.lr, cfg.wd, cfg.steps, cfg.warmup, cfg.warmdown, cfg.clip)
    graphdef, params, opt_state = init_state(config, tx, mesh, cfg.seed)

    # What must match for a checkpoint to continue this run (not where outputs go).
    fingerprint = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k
        not in (
            "ckpt_dir",
            "ckpt_every",
            "metrics",
            "eval_every",
            "eval_batches",
            "wandb_project",
            "wandb_group",
            "wandb_tags",
        )
    }
    fingerprint = json.loads(json.dumps(fingerprint))  # tuples -> lists, as JSON restores them
    step_fn = make_train_step(graphdef, config, tx, cfg.microbatches)
    eval_fn = make_eval_step(graphdef, config)
    batch_sharding = sharding.batch_sharding(mesh)
    train_batches = data.TrainBatches(splits["train"], cfg.batch, cfg.seq, seed=cfg.seed)
    eval_batches = data.EvalBatches(splits["val"], cfg.batch, cfg.seq)
    flops_per_token = sizing.flops_per_token(config.dims(), cfg.seq)
    peak, peak_label = peak_flops()
    # every step's learning rate in one call, not a device round trip inside the loop
    lrs = jax.device_get(jax.vmap(lr_schedule(cfg))(jnp.arange(cfg.steps)))
    # The checkpoints close (orbax's threads joined) however the run ends.
    checkpoints = Checkpoints(cfg.ckpt_dir, fingerprint) if cfg.ckpt_dir else None
    with (
        checkpoints or contextlib.nullcontext() as ckpt,
        Preemption() as preemption,
        jax.set_mesh(mesh),
    ):
        start = 0
        if ckpt is not None:
            params, opt_state, start = ckpt.resume(params, opt_state)
        metrics = Metrics(cfg.metrics, start)
        run = wandb_run(
            cfg.wandb_project,
            cfg.wandb_group,
            cfg.wandb_tags,
            {**dataclasses.asdict(cfg), "params": sizing.param_counts(config.dims())["total"]},
        )
        bar = tqdm(
            total=cfg.steps, initial=start, desc=f"train {config.name}", disable=not progress
        )
        last, evals = {"step": start}, {}
        tick = time.perf_counter()
        batches = train_batches.iterate(start, cfg.steps, sharding=batch_sharding)
        for step, tokens in enumerate(batches, start=start + 1):
            params, opt_state, out = step_fn(params, opt_state, tokens)
            loss = float(out["loss"])  # waits for the step, so per-step timing is honest
            now = time.perf_counter()
            tok_per_s = cfg.batch * cfg.seq / (now - tick)
            tick = now
            last = {
                "step": step,
                "loss": loss,
                "grad_norm": float(out["grad_norm"]),
                "lr": float(lrs[step - 1]),
                "tok_per_s": tok_per_s,
                "mfu": sizing.mfu(tok_per_s, flops_per_token, peak),
                "time": time.time(),
            }
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                last.update(
                    evaluate(eval_fn, params, eval_batches, batch_sharding, cfg.eval_batches)
                )
            metrics.write(last)
            if run is not None:
                run.log(last, step=step)
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_per_s:,.0f}")
            if ckpt is not None and (
                preemption.requested
                or step == cfg.steps
                or (cfg.ckpt_every and step % cfg.ckpt_every == 0)
            ):
                ckpt.save(step, params, opt_state)
            if preemption.requested:
                break
        if last["step"] == cfg.steps:
            evals = evaluate(eval_fn, params, eval_batches, batch_sharding, cfg.eval_batches)
            metrics.write({"step": cfg.steps, "final": True, **evals})
        bar.close()
    if run is not None:
        run.summary.update(evals)
        run.finish()
    if peak_label != "cpu-measured" and last.get("tok_per_s"):  # a device run: the ledger
        ledger.append(
            [
                ledger.row(
                    "shared.pretrain.train",
                    workload="train",
                    model=config.name,
                    batch=cfg.batch,
                    shape=f"seq {cfg.seq}, {cfg.microbatches} micro-batches",
                    status="ok",
                    peak_bytes=measure.peak_bytes_per_device(),
                    seconds=cfg.batch * cfg.seq / last["tok_per_s"],
                )
            ]
        )
    summary = {
        "config": config.name,
        "params": sizing.param_counts(config.dims())["total"],
        "steps_done": last["step"],
        "preempted": preemption.requested,
        **evals,
        "final_loss": last.get("loss"),
        "tok_per_s": last.get("tok_per_s"),
        "mfu": last.get("mfu"),
        "mfu_peak": peak_label,
        "flop_convention": "maxtext (causal attention halved)",
    }
    return Run(summary, nnx.merge(graphdef, params), sp)


# ---------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv, description=__doc__)
    if args.summary:  # checked first: a summary that cannot be written would lose the run
        writable_folder(Path(args.summary).parent, what="the summary", fix="pass another --summary")
    text = json.dumps(train(cfg, progress=not args.no_progress).summary)
    if args.summary:
        Path(args.summary).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    run_cli(main)
