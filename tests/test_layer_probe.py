"""The layer probe: a tiny Llama 3 cut to 1 and 2 layers, compiled for a v5p-8 (deviceless)."""

import pytest

from shared import models
from shared.errors import BadInput
from shared.hardware import parse_target
from shared.plan import target_mesh
from shared.plan.compiler import layer_probe
from shared.plan.compiler.compiled import compile_executable


@pytest.fixture(scope="module")
def v5p8():
    return target_mesh(parse_target("v5p-8"))


def test_probe_config_cuts_layers_and_vocab():
    cfg = layer_probe.probe_config("llama3.1-70b", layers=2, remat="decoder")
    assert cfg.num_layers == 2 and cfg.vocab_size == layer_probe.PROBE_VOCAB
    assert (cfg.embed_dim, cfg.hidden_dim, cfg.num_heads) == (8192, 28672, 64)
    assert cfg.remat_config == models.family_of("llama3.1-70b").remat["decoder"]


def test_one_layer_compiles_for_v5p8_with_weights_as_arguments(v5p8):
    exe = layer_probe.probe_executable("llama3-tiny", v5p8, batch=4, seq=64)
    summary = compile_executable(exe)
    assert summary["refused"] is None and summary["temp_bytes"] > 0
    # gradients of every weight come out: outputs carry the loss and one grad per parameter
    assert summary["output_bytes"] >= summary["argument_bytes"] - 4 * 65 * 4  # minus tokens


def test_probe_reads_a_slope_from_four_compiles(v5p8):
    result = layer_probe.probe("llama3-tiny", v5p8, batches=(4, 8), seq=128)
    assert set(result["temps"]) == {"1L_b4", "1L_b8", "2L_b4", "2L_b8"}
    assert result["tokens_per_device"] == [128, 256] and result["devices"] == 4
    small, large = result["layer_bytes"]
    slope = (large - small) / 128
    assert result["kept_bytes_per_token_layer"] == pytest.approx(slope)
    assert result["per_layer_fixed_bytes"] == pytest.approx(small - slope * 128)


def test_bad_batches_fail_early(v5p8):
    with pytest.raises(BadInput, match="divide"):
        layer_probe.probe_executable("llama3-tiny", v5p8, batch=6, seq=64)
    with pytest.raises(BadInput, match="growing"):
        layer_probe.probe("llama3-tiny", v5p8, batches=(8, 4), seq=64)
