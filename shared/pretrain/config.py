"""One training run's settings (`TrainConfig`) and the `python -m shared.pretrain.train` flags
that set them. Kept apart from `shared.pretrain.train`, which runs them; the sweep runner checks
a trial's arguments with the same parser before it starts a process."""

import argparse
from dataclasses import dataclass, field

from shared import data
from shared.pretrain import model


@dataclass(frozen=True)
class TrainConfig:
    """One training run. `model_overrides` are model.config(...) knobs (mlp, qk_norm, ...)."""

    config: str = "tiny"
    model_overrides: dict = field(default_factory=dict)
    steps: int = 200
    batch: int = 8
    seq: int = 256
    microbatches: int = 1
    lr: float = 3e-3
    wd: float = 0.1
    warmup: int = 10
    warmdown: float = 0.2
    clip: float | None = 1.0
    seed: int = 0
    vocab_size: int = data.DEFAULT_VOCAB
    corpus: str = "shakespeare"
    parquet_dir: str | None = None
    mesh: str | None = None
    eval_every: int = 0  # 0: only at the end
    eval_batches: int = 0  # 0: the whole held-out split; N: its first N batches (no bits/byte)
    ckpt_dir: str | None = None
    ckpt_every: int = 0  # 0: only at the end and on SIGTERM
    metrics: str | None = None
    wandb_project: str = "tpu-budget-lab"
    wandb_group: str | None = None
    wandb_tags: tuple[str, ...] = ()

    def model_config(self, vocab: int) -> model.ModelConfig:
        """The model config with V from the tokenizer (padded to 256) and T = seq."""
        return model.config(
            self.config, V=model.padded_vocab(vocab), T=self.seq, **self.model_overrides
        )


# ---------------------------------------------------------------------------- command line


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The command line's flags (also what the sweep runner validates trial arguments with);
    `description` is what --help prints above them (shared.pretrain.train's docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m shared.pretrain.train",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = TrainConfig()
    p.add_argument("--config", default=d.config, help=", ".join(model.CONFIGS))
    for name in (
        "steps",
        "batch",
        "seq",
        "microbatches",
        "seed",
        "warmup",
        "eval_every",
        "eval_batches",
        "ckpt_every",
        "vocab_size",
    ):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    for name in ("lr", "wd", "warmdown"):
        p.add_argument(f"--{name}", type=float, default=getattr(d, name))
    p.add_argument("--clip", type=float, default=d.clip, help="global-norm clip; 0 turns it off")
    p.add_argument("--corpus", default=d.corpus, help="shakespeare | parquet")
    p.add_argument("--parquet-dir")
    p.add_argument("--mesh", help="FSDPxTP, e.g. 4x2 (default: all devices on fsdp)")
    p.add_argument("--ckpt-dir")
    p.add_argument("--metrics", help="append per-step JSON lines here")
    p.add_argument("--summary", help="write the final summary JSON here too")
    p.add_argument("--wandb-project", default=d.wandb_project)
    p.add_argument("--wandb-group")
    p.add_argument("--wandb-tags", default="", help="comma-separated")
    # Ablation knobs: model.config overrides.
    p.add_argument("--attention", help="xla | cudnn | splash | pallas_gpu (default: by backend)")
    p.add_argument("--mlp", help="swiglu | relu2")
    p.add_argument("--qk-norm", type=_bool)
    p.add_argument("--tied", type=_bool)
    p.add_argument("--embed-norm", type=_bool)
    p.add_argument("--logit-softcap", type=float)
    p.add_argument("--remat", help="none | block | dots")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_args(
    argv: list[str] | None = None, description: str | None = None
) -> tuple[TrainConfig, argparse.Namespace]:
    """`python -m shared.pretrain.train`'s arguments as a TrainConfig, and the flags it does not
    hold."""
    args = build_parser(description).parse_args(argv)
    overrides = {
        k: getattr(args, k)
        for k in ("attention", "mlp", "qk_norm", "tied", "embed_norm", "logit_softcap", "remat")
        if getattr(args, k) is not None
    }
    cfg = TrainConfig(
        config=args.config,
        model_overrides=overrides,
        steps=args.steps,
        batch=args.batch,
        seq=args.seq,
        microbatches=args.microbatches,
        lr=args.lr,
        wd=args.wd,
        warmup=args.warmup,
        warmdown=args.warmdown,
        clip=args.clip or None,
        seed=args.seed,
        vocab_size=args.vocab_size,
        corpus=args.corpus,
        parquet_dir=args.parquet_dir,
        mesh=args.mesh,
        eval_every=args.eval_every,
        eval_batches=args.eval_batches,
        ckpt_dir=args.ckpt_dir,
        ckpt_every=args.ckpt_every,
        metrics=args.metrics,
        wandb_project=args.wandb_project,
        wandb_group=args.wandb_group,
        wandb_tags=tuple(t for t in args.wandb_tags.split(",") if t),
    )
    return cfg, args


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")
