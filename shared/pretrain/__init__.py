"""Pretraining the ~130M model of notebooks 04 and 05 (our own flax nnx decoder, not a tunix one).

- `model`: the decoder, its configs and partition rules; `attention`: the attention kernels it
  can use (XLA, Pallas/splash on TPU, cuDNN on GPU); `sample`: text from a trained model;
- `optim`: AdamW, its schedule, fp32 gradient accumulation over micro-batches;
- `config`: a run's settings and the `python -m shared.pretrain.train` flags;
- `train`: the loop (resumes exactly after a kill), `checkpoints` (orbax), `records` (metrics,
  wandb, preemption);
- `settings`: notebook 04's setting (`Ablations`: its arms, `local()` and `field()` presets).
"""
