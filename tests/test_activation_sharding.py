"""benchmarks/bench_activation_sharding.py: tunix's activation shardings are dropped under our
mesh context, and honouring them shrinks a multi-chip LoRA step (gemma3-tiny, short sequence)."""

import importlib

from benchmarks import bench_activation_sharding as bench
from shared import plan
from shared.plan import verdict


def test_every_listed_module_has_the_shard_helper_the_models_call():
    for name in bench.SHARD_HELPERS:
        assert callable(importlib.import_module(name).shard), name


def test_honouring_tunix_activation_shardings_shrinks_the_v5e_8_step(tmp_path, monkeypatch):
    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path)
    request = plan.Request(
        "lora-train", "gemma3-tiny", "v5e-8", batch=64, seq=256, lora_rank=4, fast=True
    )
    dropped = bench.compile_point(request)
    with bench.honoured_activation_sharding():
        honoured = bench.compile_point(request)
    # the finding: today's step gathers activations of the whole batch on every chip; if tunix
    # starts honouring jax.set_mesh the two become equal and this test says the finding is gone
    assert honoured["temp_bytes"] < 0.8 * dropped["temp_bytes"], (dropped, honoured)
