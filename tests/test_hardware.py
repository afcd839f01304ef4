"""Target parsing, the chip table and device-kind detection."""

import pytest

from shared.errors import BadInput
from shared.hardware import CHIPS, GiB, chip_for_device_kind, parse_target


@pytest.mark.parametrize("name, chip, chips, topology", [
    ("v5e-1", "v5e", 1, "v5e:1x1"),
    ("v5e-8", "v5e", 8, "v5e:2x4"),
    ("v6e-1", "v6e", 1, "v6e:1x1"),
    ("v6e-16", "v6e", 16, "v6e:4x4"),
    ("v5p-8", "v5p", 4, "v5p:2x2x1"),  # v5p names count TensorCores: 8 cores = 4 chips
    ("v5p-16", "v5p", 8, "v5p:2x2x2"),
    ("v4-8", "v4", 4, "v4:2x2x1"),
    ("v5litepod-8", "v5e", 8, "v5e:2x4"),
    ("h100", "h100", 1, None),
    ("H200", "h200", 1, None),
    ("cpu", "cpu", 1, None),
])
def test_parse_target(name, chip, chips, topology):
    target = parse_target(name)
    assert (target.chip.name, target.chips, target.topology) == (chip, chips, topology)


def test_single_host_bounds_only_for_small_2d_slices():
    assert parse_target("v5e-1").single_host_bounds == (1, 1, 1)
    assert parse_target("v5e-8").single_host_bounds == (2, 4, 1)
    assert parse_target("v5e-16").single_host_bounds is None
    assert parse_target("v5p-8").single_host_bounds is None


@pytest.mark.parametrize("bad", ["v7x-8", "tpu", "v5e-", "v5p-3", "a100"])
def test_bad_target_names_the_valid_ones(bad):
    with pytest.raises(BadInput) as err:
        parse_target(bad)
    assert "v5e-8" in str(err.value) or "multiple of" in str(err.value)


def test_table_matches_design_facts():
    assert CHIPS["v5e"].peak_bf16_flops == 197e12 and CHIPS["v5e"].hbm_bytes == 16 * GiB
    assert CHIPS["v5p"].ici_bidirectional_bandwidth == 180e9
    assert CHIPS["v5p"].peak_bf16_flops / CHIPS["v5p"].ici_bidirectional_bandwidth == 2550
    assert parse_target("v5e-8").hbm_bytes_total == 8 * 16 * GiB


@pytest.mark.parametrize("kind, name", [
    ("TPU v5 lite", "v5e"), ("TPU v5", "v5p"), ("TPU v6 lite", "v6e"), ("TPU v4", "v4"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("cpu", "cpu"),
])
def test_device_kind(kind, name):
    assert chip_for_device_kind(kind).name == name


def test_unknown_device_kind_is_none():
    assert chip_for_device_kind("NVIDIA GeForce RTX 4090") is None


def test_distributed_initialize_only_on_multi_host_slices(monkeypatch):
    import jax

    from shared import hardware

    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda: calls.append(True))
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2")
    assert hardware.tpu_worker_count() == 1
    hardware.initialize_distributed()
    assert calls == []
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5")
    assert hardware.tpu_worker_count() == 4
    hardware.initialize_distributed()
    assert calls == [True]
