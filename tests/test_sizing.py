"""Sizing formulas against hand-worked values, and the command line."""

import dataclasses
import json
import math
import re
import subprocess
import sys

import pytest
from conftest import cli_exit

from shared import report, sizing
from shared.errors import BadInput
from shared.findings import scaling as findings
from shared.hardware import CHIPS
from shared.sizing import cli as sizing_cli
from shared.sizing.settings import ScalingPlan

LLAMA70 = sizing.preset("llama3-70b")


def test_llama3_70b_params_by_part():
    p = sizing.param_counts(LLAMA70)
    assert p["attention"] == 80 * 2 * 8192 * 128 * (64 + 8) == 12_079_595_520
    assert p["mlp"] == 80 * 3 * 8192 * 28672 == 56_371_445_760
    assert p["embedding"] == p["lm_head"] == 128256 * 8192
    assert p["norms"] == 80 * 2 * 8192 + 8192
    assert p["total"] == 70_553_706_496  # the book's "70.4e9 ~ 70.5B"


def test_gemma3_1b_is_tied_with_qk_norm():
    p = sizing.param_counts(sizing.preset("gemma3-1b"))
    assert p["lm_head"] == 0
    assert p["attention"] == 26 * 2 * 1152 * 256 * 5
    assert p["norms"] == 26 * (4 * 1152 + 2 * 256) + 1152
    assert p["total"] == 999_885_952


def test_pretrain_130m_matches_the_reference_run():
    p = sizing.param_counts(sizing.preset("pretrain-130m"))
    assert round(p["total"] / 1e6, 1) == 163.6
    assert round(p["non_embedding"] / 1e6, 1) == 130.0


def test_kv_cache_bytes():
    gemma = sizing.preset("gemma3-1b")
    assert sizing.kv_cache_bytes_per_token(gemma) == 2 * 26 * 1 * 256 * 2 == 26_624
    assert sizing.kv_cache_bytes(gemma, batch=64, cache_len=1312) == 64 * 1312 * 26_624


def test_flops_conventions():
    matmul = 12_079_595_520 + 56_371_445_760 + 128256 * 8192  # no norms, no input gather
    attention = 6 * 80 * 8192 * 64 * 128
    assert sizing.flops_per_token(LLAMA70, 8192) == 6 * matmul + attention
    assert sizing.flops_per_token(LLAMA70, 8192, "palm") == 6 * matmul + 2 * attention
    assert sizing.flops_per_token(LLAMA70, convention="params") == 6 * 70_553_706_496


def test_book_total_flops_and_days():
    per_token = sizing.flops_per_token(LLAMA70, convention="params")
    assert per_token * 15e12 == pytest.approx(6.3e24, rel=0.01)
    days = sizing.training_seconds(15e12, per_token, 8960 * 459e12, 0.4) / 86400
    assert days == pytest.approx(44, abs=1)  # the book: "about 44 days"


def test_tpuchat_mfu_reproduces_under_palm_convention():
    # tpuchat: 130M model, 434k tok/s on one v6e at T=2048, "46.5% MFU" counting non-causal
    # attention: our PaLM convention gives the same number from the same inputs.
    per_token = sizing.flops_per_token(sizing.preset("pretrain-130m"), 2048, "palm")
    assert sizing.mfu(434e3, per_token, CHIPS["v6e"].peak_bf16_flops) == pytest.approx(
        0.465, abs=0.002
    )


def test_training_memory_book_example():
    mem = sizing.training_memory(LLAMA70, 4e6, grad_bytes=None)
    assert mem["params"] == 2 * 70_553_706_496
    assert mem["optimizer"] == 8 * 70_553_706_496
    assert mem["activations"] == 2 * 8192 * 4e6 * 3 * 80  # the book's 15.8 TB of checkpoints
    assert mem["total"] == pytest.approx(16.5e12, rel=0.01)
    assert sizing.min_chips_for_memory(mem["total"], 96e9) == 172  # book: 16.5e12/96e9 ~ 171
    per_chip = sizing.training_memory(LLAMA70, 4e6, chips=8960, grad_bytes=None)["per_chip"]
    assert per_chip == pytest.approx(1.8e9, rel=0.05)  # the book: "about 1.8GB per chip"


def test_fwide_policy_reproduces_the_writeups_110_tb():
    # The write-up (yashjayswal24.github.io/portfolio/blog/2026/training-llama3): 4M-token
    # batch, bf16 params, fp32 Adam, no gradients, "Total ~110 TB", "111 TB / 96 GB = 1,156
    # chips". Its total is 6·B·F·L·2 bytes; fwide's 7·D + 4·F equals 6·F when F = 3.5·D.
    per_layer = sizing.activation_elements_per_token_layer(LLAMA70, "fwide")
    assert per_layer == 3 * 8192 + 4 * 8192 + 4 * 28672 == 6 * 28672
    mem = sizing.training_memory(LLAMA70, 4e6, remat="fwide", grad_bytes=None)
    assert mem["activations"] == pytest.approx(110.1e12, rel=0.001)
    assert mem["total"] == pytest.approx(110.8e12, rel=0.001)
    chips = sizing.min_chips_for_memory(mem["total"], 96e9)
    assert chips == 1155 and chips == pytest.approx(1156, rel=0.01)
    # Our accounting (2**22 tokens, bf16 gradients, 95 GiB a chip) gives 105.8 TiB, 1141 chips.
    ours = sizing.training_memory(LLAMA70, 4194304, remat="fwide")
    assert sizing.min_chips_for_memory(ours["total"], CHIPS["v5p"].hbm_bytes) == 1141


def test_remat_policies_are_ordered_and_have_formulas():
    kept = {
        r: sizing.activation_elements_per_token_layer(LLAMA70, r) for r in sizing.REMAT_POLICIES
    }
    assert kept["fwide"] > kept["none"] > kept["book3"] > kept["block"] == 8192
    assert set(sizing.REMAT_FORMULAS) == set(sizing.REMAT_POLICIES)
    none = sizing.training_memory(LLAMA70, 4194304, remat="none")
    assert none["activations"] / 2**40 == pytest.approx(83.75, abs=0.01)
    assert sizing.min_chips_for_memory(none["total"], CHIPS["v5p"].hbm_bytes) == 912


def test_training_memory_parts():
    mem = sizing.training_memory(
        LLAMA70, 1000, remat="block", master_fp32=True, grad_bytes=4, logits="full"
    )
    total_params = 70_553_706_496
    assert mem["master_weights"] == 4 * total_params and mem["gradients"] == 4 * total_params
    assert mem["activations"] == 1000 * 80 * 2 * 8192
    assert mem["logits"] == 1000 * 128256 * 4
    none = sizing.activation_elements_per_token_layer(LLAMA70, "none")
    assert none == 4 * 8192 + 2 * 64 * 128 + 2 * 8 * 128 + 3 * 28672
    with pytest.raises(BadInput):
        sizing.training_memory(LLAMA70, 1000, remat="selective")


def test_mesh_choice_llama3_70b_on_a_v5p_pod():
    mesh = sizing.mesh_choice(LLAMA70, 4.19e6, 8960, CHIPS["v5p"])
    assert mesh["alpha"] == 2550
    assert mesh["fsdp_threshold"] == 850 and not mesh["fsdp_compute_bound"]
    assert mesh["mixed_threshold"] == pytest.approx(2 * 2550**2 / 28672)  # the book's 453
    assert mesh["mixed_compute_bound"]
    assert mesh["x_opt"] == pytest.approx(1618, abs=1)
    assert mesh["x_compute_bound_high"] == pytest.approx(1927, abs=2)  # LLaMA chapter's 1643+284
    assert mesh["tp_max"] == pytest.approx(11.2, abs=0.1)
    assert mesh["fsdp"] * mesh["tp"] == 8960 and mesh["tp"] == 4


def test_mesh_choice_at_the_optimum_is_compute_bound():
    mesh = sizing.mesh_choice(LLAMA70, 4.19e6, 8960, CHIPS["v5p"])
    at_opt = sizing.comms_to_compute(LLAMA70, 4.19e6, 8960, mesh["alpha"], mesh["x_opt"], 2, 1)
    assert at_opt < 1
    big_batch = sizing.mesh_choice(LLAMA70, 64e6, 8960, CHIPS["v5p"])
    assert big_batch["fsdp_compute_bound"] and big_batch["fsdp"] == 8960


def test_chips_for_deadline():
    per_token = sizing.flops_per_token(LLAMA70, convention="params")
    chips = sizing.chips_for_deadline(15e12, per_token, 459e12, 0.4, 44.67 * 86400)
    assert abs(chips - 8960) <= 2


def test_unknown_preset_names_the_valid_ones():
    with pytest.raises(BadInput, match="llama3-70b"):
        sizing.preset("lama3-70b")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "shared.sizing", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_train_table_answers_the_70b_example():
    run = _cli(
        "train",
        "--model",
        "llama3-70b",
        "--tokens",
        "15e12",
        "--batch-tokens",
        "4194304",
        "--chips",
        "8960",
        "--hardware",
        "v5p",
        "--mfu",
        "0.4",
    )
    assert run.returncode == 0, run.stderr
    assert "mesh.x_opt" in run.stdout and "training_days" in run.stdout


def test_cli_json_and_custom_dims():
    run = _cli(
        "params",
        "--layers",
        "8",
        "--d-model",
        "1024",
        "--d-ff",
        "3072",
        "--heads",
        "4",
        "--kv-heads",
        "1",
        "--head-dim",
        "256",
        "--vocab",
        "32768",
        "--untied",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert (
        json.loads(run.stdout)["total"]
        == sizing.param_counts(sizing.preset("pretrain-130m"))["total"]
    )
    kv = json.loads(
        _cli(
            "kv",
            "--model",
            "gemma3-1b",
            "--batch",
            "64",
            "--cache-len",
            "1312",
            "--hardware",
            "v5e-1",
            "--json",
        ).stdout
    )
    assert kv["kv_cache_bytes"] == 64 * 1312 * 26_624 and kv["fits_weights_plus_cache"]


@pytest.mark.parametrize(
    "args",
    [
        ("params", "--model", "lama3-70b"),
        (
            "train",
            "--model",
            "llama3-70b",
            "--tokens",
            "1e9",
            "--batch-tokens",
            "1e6",
            "--hardware",
            "v9z",
        ),
        ("params", "--layers", "2"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args):
    run = _cli(*args)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: ")
    assert "Traceback" not in run.stderr


def test_days_scale_inversely_with_mfu():
    per_token = sizing.flops_per_token(LLAMA70, convention="params")
    a = sizing.training_seconds(1e12, per_token, 1e15, 0.2)
    b = sizing.training_seconds(1e12, per_token, 1e15, 0.4)
    assert math.isclose(a, 2 * b)


_TRAIN = (
    "train",
    "--model",
    "llama3-70b",
    "--tokens",
    "1e12",
    "--batch-tokens",
    "4e6",
    "--hardware",
    "v5p",
)


@pytest.mark.parametrize(
    "args, message",
    [
        (("kv", "--model", "gemma3-1b", "--batch", "0"), "batch must be positive, got 0"),
        (("kv", "--model", "gemma3-1b", "--cache-len", "-1"), "cache-len must be positive"),
        (("kv", "--model", "gemma3-1b", "--bytes-per-element", "0"), "bytes-per-element"),
        (("kv", "--model", "gemma3-1b", "--hardware", "v5e-0"), "at least one chip"),
        ((*_TRAIN, "--chips", "0"), "chips must be positive"),  # 0 is not "the target's count"
        (
            (
                "train",
                "--model",
                "llama3-70b",
                "--tokens",
                "0",
                "--batch-tokens",
                "4e6",
                "--hardware",
                "v5p",
            ),
            "tokens must be positive",
        ),
        (
            (
                "train",
                "--model",
                "llama3-70b",
                "--tokens",
                "1e12",
                "--batch-tokens",
                "-4",
                "--hardware",
                "v5p",
            ),
            "batch-tokens must be positive",
        ),
        ((*_TRAIN, "--mfu", "0"), "mfu is a fraction of peak in (0, 1]"),
        ((*_TRAIN, "--mfu", "1.5"), "mfu is a fraction of peak in (0, 1]"),
        ((*_TRAIN, "--seq", "0"), "seq must be positive"),
        (
            (
                "params",
                "--layers",
                "0",
                "--d-model",
                "1024",
                "--d-ff",
                "3072",
                "--heads",
                "4",
                "--kv-heads",
                "1",
                "--head-dim",
                "256",
                "--vocab",
                "32768",
            ),
            "layers must be positive",
        ),
    ],
)
def test_zero_or_negative_sizes_are_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(BadInput, match=re.escape(message)):
        sizing_cli.main(list(args))
    code, err = cli_exit(sizing_cli.main, list(args), capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert message in err


def test_library_refuses_zero_sizes_too():
    with pytest.raises(BadInput, match="cache-len"):
        sizing.kv_cache_bytes(LLAMA70, batch=1, cache_len=0)
    with pytest.raises(BadInput, match="mfu"):
        sizing.training_seconds(1e12, 1e9, 1e15, 0.0)
    with pytest.raises(BadInput, match="d-model"):
        sizing.custom(L=1, D=0, F=1, N=1, K=1, H=1, V=1)


# ---------------------------------------------------------------------------- notebook 06


def test_scaling_plan_presets_plan_the_books_example():
    field, local = ScalingPlan.field(), ScalingPlan.local()
    assert field.dims == LLAMA70 and field.chip == CHIPS["v5p"] and field.target == "v5p-8"
    assert (field.chips, field.tokens, field.batch_tokens, field.mfu) == (8960, 15e12, 2**22, 0.4)
    probe = (field.probe_model, field.probe_seq, field.probe_batches, field.probe_remats)
    assert probe == ("llama3.1-70b", 2048, (4, 8), ("none", "decoder"))
    # local mode plans the same run; only the layer probe is tiny
    differences = {k: v for k, v in dataclasses.asdict(local).items() if getattr(field, k) != v}
    assert differences == {"probe_model": "llama3-tiny", "probe_seq": 256, "probe_batches": (8, 16)}


def test_scaling_plan_takes_the_notebooks_parameters():
    setting = report.setting(
        "plan", ScalingPlan, PROBE_MODEL=None, PROBE_BATCHES=[2, 4], PROBE_REMATS=["none"]
    )
    assert setting.probe_model == "llama3.1-70b"  # None keeps the preset's
    assert setting.probe_batches == (2, 4) and setting.probe_remats == ("none",)  # tuples
    assert report.setting("local", ScalingPlan, CHIPS=64).chips == 64


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"model": "llama9"}, "unknown model preset 'llama9'"),
        ({"hardware": "v9z"}, "unknown target 'v9z'"),
        ({"chips": 0}, "CHIPS must be positive, got 0"),
        ({"batch_tokens": -1}, "BATCH_TOKENS must be positive"),
        ({"mfu": 1.5}, "MFU is a fraction of peak in (0, 1]"),
        ({"probe_batches": (8, 4)}, "PROBE_BATCHES must be two growing global batches"),
        ({"probe_batches": (4,)}, "PROBE_BATCHES must be two growing global batches"),
        ({"probe_remats": ()}, "PROBE_REMATS needs at least one"),
        ({"embed_v": 0}, "EMBED_V must be positive"),
    ],
)
def test_scaling_plan_refuses_bad_values_in_one_line(bad, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        dataclasses.replace(ScalingPlan.field(), **bad)


def test_probe_rows_name_the_nearest_closed_form():
    dims = sizing.preset("pretrain-130m")
    book3 = 2 * sizing.activation_elements_per_token_layer(dims, "book3")
    probe = {"model": "m", "seq": 64, "tokens_per_device": [8, 16], "per_layer_fixed_bytes": 1}
    probes = {
        "none": {**probe, "kept_bytes_per_token_layer": book3 * 1.1, "compile_s": 1.0},
        "decoder": {**probe, "kept_bytes_per_token_layer": -5.0, "compile_s": 1.0},
    }
    rows = findings.probe_rows(probes, dims, "v5p-8")
    assert [r["closest_policy"] for r in rows] == ["book3", "block"]  # <= 0: the least
    assert rows[0]["in_D"] == pytest.approx(3.3) and rows[0]["target"] == "v5p-8"
    assert findings.compiled_totals(probes, dims, LLAMA70, 0.0) == []  # not 70B's width
    (total, _) = findings.compiled_totals(probes, dims, dims, 1e12)
    assert total["book_TB"] == pytest.approx(1 + 4e6 * dims.L * book3 * 1.1 / 1e12)


def test_the_committed_answer_agrees_with_itself_and_not_with_a_change(capsys):
    committed = report.committed(findings.COMMITTED)
    if committed is None:
        pytest.skip("benchmarks/results/06_scaling_plan.json is not here")
    summary = committed["tables"]["summary"]
    probes = committed["tables"]["layer_probe"]
    assert findings.agree_with_committed(summary, probes)
    changed = [
        {**row, "answer": row["answer"] * 2} if row["question"] == "fwide: book_TB" else row
        for row in summary
    ]
    assert not findings.agree_with_committed(changed, [])
    assert "fwide: book_TB" in capsys.readouterr().out
    params = {"total": 70.553706496e9}
    rows = findings.summary(params, [], [], {"x_opt": 1619.0})
    assert rows == [
        {"question": "parameters (B)", "answer": 70.553706496},
        {"question": "X_opt", "answer": 1619.0},
    ]
