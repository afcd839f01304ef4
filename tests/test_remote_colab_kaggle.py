"""make colab-execute and kaggle-push / kaggle-pull against stand-in colab and kaggle programs
(tests/remote_lab.py)."""

import json
import shlex
import shutil
from pathlib import Path

import pytest
import remote_lab


def _colab_session(lab, accelerator: list[str]) -> str:
    """The session name, after checking the calls were new, exec and stop of that session."""
    new, run, stop = lab.calls("colab")
    session = new[2]
    assert new == ["new", "-s", session, *accelerator] and stop == ["stop", "-s", session]
    assert run[:3] == ["exec", "-s", session] and run[run.index("--timeout") + 1] == "86400"
    return session


def test_colab_execute_runs_the_prepared_notebook_and_keeps_the_executed_copy(lab):
    params = f"PARAMS=-p MODE device -p NOTE {shlex.quote(remote_lab.NASTY)}"
    result = lab.make("colab-execute", "NB=06", params)
    assert result.returncode == 0, result.stderr
    staged = lab.root / "runs" / "colab" / "06_scaling_plan.ipynb"
    assert _colab_session(lab, ["--tpu", "v6e1"]).startswith("tpu-budget-lab-06-")
    assert lab.calls("colab")[1][3:5] == ["-f", str(staged)]
    notebook = json.loads(staged.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert remote_lab.injected(staged) == {"MODE": "device", "NOTE": remote_lab.NASTY}
    assert (staged.with_name("06_scaling_plan_output.ipynb")).exists()


@pytest.mark.parametrize(
    "make_args, accelerator",
    [
        (["TPU=v5e1"], ["--tpu", "v5e1"]),
        (["GPU=T4"], ["--gpu", "T4"]),
        (["GPU=h100"], ["--gpu", "H100"]),
        (["GPU=G4"], ["--gpu", "G4"]),
    ],
    ids=["tpu-v5e1", "gpu-t4", "gpu-lowercase", "gpu-g4"],
)
def test_colab_runtime_is_the_tpu_or_gpu_asked_for(lab, make_args, accelerator):
    result = lab.make("colab-execute", "NB=06", *make_args)
    assert result.returncode == 0, result.stderr
    _colab_session(lab, accelerator)


def test_colab_errors(lab, tmp_path):
    lab.scenario(cell_error=True)
    failed = lab.make("colab-execute", "NB=06", "TPU=v5e1")
    assert failed.returncode != 0 and "ValueError: boom" in failed.stderr
    _colab_session(lab, ["--tpu", "v5e1"])  # the runtime is released after a failed cell too
    lab.scenario(cell_error=False, colab_refuses=True)
    refused = lab.make("colab-execute", "NB=06", "GPU=H100")
    assert refused.returncode != 0 and "Backend rejected" in refused.stderr
    assert [call[0] for call in lab.calls("colab")[3:]] == ["new"]  # no exec, nothing to stop
    for args, expected in (
        (["--tpu", "v4"], "valid: v5e1, v6e1"),
        (["--gpu", "V100"], "valid: T4, L4, G4, H100, A100"),
        (["--gpu", "T4", "--tpu", "v6e1"], "GPU=T4 and TPU=v6e1"),
    ):
        wrong = lab.cli("colab-execute", "--nb", "06", *args)
        assert wrong.returncode == 2 and expected in remote_lab.one_line(wrong.stderr)
    both = lab.make("colab-execute", "NB=06", "GPU=T4", "TPU=v6e1")
    assert both.returncode == 2 and "give only one of them" in remote_lab.one_line(both.stderr)
    assert len(lab.calls("colab")) == 4


def test_missing_colab_says_how_to_install_it_in_one_line(lab, tmp_path):
    (tmp_path / "empty").mkdir()
    env = {**lab.env, "PATH": str(tmp_path / "empty")}
    missing = lab.cli("colab-execute", "--nb", "06", env=env)
    assert missing.returncode == 2
    assert "uv tool install --python 3.12 google-colab-cli" in remote_lab.one_line(missing.stderr)
    local_bin = Path(lab.env["HOME"]) / ".local" / "bin"
    local_bin.mkdir(parents=True)
    shutil.copy2(shutil.which("colab", path=lab.env["PATH"]), local_bin / "colab")
    off_path = lab.cli("colab-execute", "--nb", "06", env=env)
    assert off_path.returncode == 2 and "not on PATH" in remote_lab.one_line(off_path.stderr)
    assert lab.calls("colab") == []


def test_kaggle_push_writes_tpu_kernel_metadata_and_pushes(lab):
    result = lab.make(
        "kaggle-push",
        "NB=06",
        "KAGGLE_USER=alice",
        "PARAMS=-p MODE device",
        env={**lab.env, "KAGGLE_API_TOKEN": "stand-in"},
    )
    assert result.returncode == 0, result.stderr
    folder = lab.root / "runs" / "kaggle" / "tpu-budget-lab-06-scaling-plan" / "push"
    assert lab.calls("kaggle") == [
        ["kernels", "push", "-p", str(folder), "--accelerator", "TpuV5E8"]
    ]
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    assert meta["id"] == "alice/tpu-budget-lab-06-scaling-plan"
    assert meta["title"] == "tpu-budget-lab-06-scaling-plan"
    assert (meta["code_file"], meta["kernel_type"], meta["language"]) == (
        "06_scaling_plan.ipynb",
        "notebook",
        "python",
    )
    assert meta["enable_tpu"] and meta["machine_shape"] == "TpuV5E8" and not meta["enable_gpu"]
    assert meta["is_private"] and meta["enable_internet"]
    assert remote_lab.injected(folder / "06_scaling_plan.ipynb") == {"MODE": "device"}


@pytest.mark.parametrize(
    "status, code",
    [
        ("KernelWorkerStatus.COMPLETE", 0),
        ("KernelWorkerStatus.ERROR", 1),
        ("KernelWorkerStatus.RUNNING", 2),
    ],
)
def test_kaggle_pull_fetches_output_and_reports_the_run(lab, status, code):
    lab.scenario(kaggle=status)
    (Path(lab.env["HOME"]) / ".kaggle").mkdir(parents=True)
    (Path(lab.env["HOME"]) / ".kaggle" / "kaggle.json").write_text(
        json.dumps({"username": "bob", "key": "stand-in"})
    )
    result = lab.cli("kaggle-pull", "--nb", "06")
    assert result.returncode == code, result.stderr
    out = lab.root / "runs" / "kaggle" / "tpu-budget-lab-06-scaling-plan" / "output"
    if code == 2:
        assert "not finished" in remote_lab.one_line(result.stderr) and not out.exists()
    else:
        assert lab.calls("kaggle")[-1] == [
            "kernels",
            "output",
            "bob/tpu-budget-lab-06-scaling-plan",
            "-p",
            str(out),
            "-o",
        ]
        assert (out / "tpu-budget-lab-06-scaling-plan.log").exists()


def test_kaggle_without_credentials_or_user_is_one_line(lab):
    result = lab.cli("kaggle-push", "--nb", "06")
    assert result.returncode == 2 and "~/.kaggle/access_token" in remote_lab.one_line(result.stderr)
    result = lab.cli("kaggle-pull", "--nb", "06", env={**lab.env, "KAGGLE_API_TOKEN": "x"})
    assert result.returncode == 2 and "KAGGLE_USER=" in remote_lab.one_line(result.stderr)
    assert lab.calls("kaggle") == []
