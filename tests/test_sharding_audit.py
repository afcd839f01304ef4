"""The sharding audit in shared/plan/workloads.py's docstring, line by line, on gemma3-tiny and a
4 x 2 ("fsdp", "tp") mesh of CPU devices: each workload's layout is tunix's, or differs where
and as the audit says. (Activations: test_activation_sharding; LoRA parameters and the GRPO
phases' inputs: test_lora and test_grpo.)"""

import re

import jax
from conftest import TEST_VOCAB as V
from flax import nnx
from jax.sharding import PartitionSpec as P

from shared import models
from shared.plan import workloads
from shared.plan.workloads import lora_train
from shared.plan.workloads import rollout as rollout_workload

NAME = "gemma3-tiny"


def _spec(variable):
    return tuple(variable.get_metadata()["out_sharding"])


def test_the_audit_names_every_sharding_it_promises():
    doc = workloads.__doc__
    for topic in ("weights", "activations", "LoRA parameters", "optimizer state", "KV cache",
                  "rollout layout", "GRPO", "micro-batches"):  # fmt: skip
        assert f"- {topic}" in doc, topic


def test_weights_follow_tunixs_sharding_config_in_both_layouts():
    train = models.abstract_model(NAME, vocab_size=V)
    sample = models.abstract_model(NAME, vocab_size=V, is_sampling=True)
    rules = train.config.shd_config
    attn = train.layers[0].attn
    assert _spec(attn.q_einsum.w) == tuple(rules.q_weight_ndh) == ("tp", "fsdp", None)
    assert _spec(train.layers[0].mlp.down_proj.kernel) == tuple(rules.ffw_weight_fd)
    # sampling: nothing over fsdp (it becomes data parallelism), except what tunix hard-codes:
    # Gemma 3's kv_einsum with one KV head (gemma3-1b's too) stays over fsdp in both layouts
    over_fsdp = {
        "/".join(map(str, path))
        for path, spec in jax.tree_util.tree_flatten_with_path(
            nnx.get_partition_spec(nnx.state(sample)), is_leaf=lambda x: isinstance(x, P)
        )[0]
        if "fsdp" in tuple(spec)
    }
    assert sample.config.num_kv_heads == 1
    assert over_fsdp and all("kv_einsum" in path for path in over_fsdp), over_fsdp


def test_optimizer_moments_mirror_the_adapters_and_the_count_is_replicated(mesh42):
    exe = lora_train.lora_train_executable(NAME, 8, 16, 4, mesh=mesh42, vocab_size=V)
    adapters = {x.shape: x.sharding for x in jax.tree.leaves(exe.args[2])}
    for x in jax.tree.leaves(exe.args[4]):
        if x.ndim == 0:  # Adam's step count
            assert x.sharding.spec == P()
        else:
            assert x.dtype == jax.numpy.float32 and x.sharding == adapters[x.shape]


def test_the_kv_cache_is_split_over_the_batch_and_over_tp_when_heads_divide(mesh42):
    ar = rollout_workload.abstract_rollout(NAME, 8, 12, 20, 40, mesh=mesh42, vocab_size=V)
    caches = [x for x in jax.tree.leaves(ar.state.cache) if x.ndim == 4]
    assert caches
    for x in caches:  # [B, S, K, H]; tiny has K = 1, which tp = 2 does not divide
        assert x.sharding.spec == P("fsdp", None, None, None)
    assert ar.state.token_buffer.sharding.spec == P("fsdp")


def test_each_micro_batch_is_spread_over_every_fsdp_device(mesh42):
    exe = lora_train.lora_train_executable(
        NAME, 16, 16, 4, mesh=mesh42, vocab_size=V, microbatches=2
    )
    with jax.set_mesh(mesh42):
        lowered = exe.fn.lower(*exe.args, **exe.kwargs).as_text()
    # 16 sequences in 2 micro-batches of 8: the embedding's output of each micro-batch is
    # constrained batch over fsdp, model dimension over tp
    constraint = r'sdy\.sharding_constraint %\S+ <@mesh, \[\{"fsdp"\}, \{\}, \{"tp"\}\]>'
    assert re.search(constraint + " : tensor<8x16x128xbf16>", lowered)
