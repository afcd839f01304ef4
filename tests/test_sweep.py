"""The sweep: config expansion (shared.sweep.config), the local runner's restarts and records,
the wandb path.

The runner tests use a stand-in training program (a few lines of Python that write what
shared.pretrain.train writes), so they count launches in milliseconds; the real
notebooks/05_sweep.yaml runs through shared.pretrain.train in notebook 05's local smoke
(tests/test_notebooks.py).
"""

import csv
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import cli_exit

from shared import sweep
from shared.errors import BadInput
from shared.paths import ROOT
from shared.sweep import config as sweep_config
from shared.sweep import runner as sweep_runner

NOTEBOOK_CONFIG = ROOT / "notebooks" / "05_sweep.yaml"

STAND_IN = """
import argparse, json, math, os, sys
p = argparse.ArgumentParser()
for name in ("--lr", "--wd"):
    p.add_argument(name, type=float)
for name in ("--steps",):
    p.add_argument(name, type=int)
for name in ("--mlp", "--metrics", "--summary", "--wandb-group", "--wandb-tags"):
    p.add_argument(name)
a = p.parse_args()
with open(os.environ["LAUNCHES"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "wandb_mode": os.environ.get("WANDB_MODE")}) + "\\n")
if a.lr > 0.05:
    raise ValueError("loss is nan")
loss = (math.log10(a.lr) + 2) ** 2 + a.wd + 5
with open(a.metrics, "w") as f:
    for s in range(1, a.steps + 1):
        f.write(json.dumps({"step": s, "loss": loss + 1 / s}) + "\\n")
    f.write(json.dumps({"step": a.steps, "final": True, "val_loss": loss}) + "\\n")
with open(a.summary, "w") as f:
    json.dump({"val_loss": loss, "val_bpb": loss / 2, "final_loss": loss + 0.1,
               "tok_per_s": 1000.0, "mfu": 0.1}, f)
"""


def _config(method="grid", program="train.py", **parameters) -> dict:
    """A checked config; the default command is wandb's: ${env} ${interpreter} ${program} ..."""
    return sweep_config.validate(
        {
            "name": "test-sweep",
            "program": program,
            "method": method,
            "metric": {"name": "val_loss", "goal": "minimize"},
            "parameters": parameters
            or {
                "lr": {"values": [1e-3, 1e-2]},
                "wd": {"values": [0.0, 0.1]},
                "steps": {"value": 3},
            },
        }
    )


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A config whose trials run the stand-in program; returns (config, launches())."""
    program = tmp_path / "fake_train.py"
    program.write_text(STAND_IN)
    launches = tmp_path / "launches.jsonl"
    monkeypatch.setenv("LAUNCHES", str(launches))
    config = _config(
        program=str(program),
        lr={"values": [1e-3, 1e-2, 1e-1]},
        wd={"value": 0.0},
        mlp={"value": "swiglu"},
        steps={"value": 3},
    )

    def read():
        if not launches.exists():
            return []
        return [json.loads(line) for line in launches.read_text().splitlines()]

    return config, read


def _argv_lr(launch: dict) -> float:
    return float(next(a for a in launch["argv"] if a.startswith("--lr=")).split("=")[1])


def _csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------------------- expansion


def test_grid_is_the_cartesian_product():
    trials = sweep_config.expand(_config())
    assert trials == [{"lr": lr, "wd": wd, "steps": 3} for lr in (1e-3, 1e-2) for wd in (0.0, 0.1)]
    assert sweep_config.expand(_config(), count=3) == trials[:3]
    grid = sweep_config.expand(
        _config(
            layers={"distribution": "int_uniform", "min": 2, "max": 4},
            warmdown={"distribution": "q_uniform", "min": 0.1, "max": 0.3, "q": 0.1},
        )
    )
    assert [t["layers"] for t in grid[::3]] == [2, 3, 4]
    assert [t["warmdown"] for t in grid[:3]] == [0.1, 0.2, 0.3]


def test_random_is_seeded_log_uniform_and_within_bounds():
    config = _config(
        "random",
        lr={"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
        wd={"values": [0.0, 0.1]},
        warmup={"min": 1, "max": 5},
        clip={"distribution": "q_uniform", "min": 0.5, "max": 2.0, "q": 0.5},
    )
    trials = sweep_config.expand(config, 200, seed=1)
    assert trials == sweep_config.expand(config, 200, seed=1)
    assert trials != sweep_config.expand(config, 200, seed=2)
    assert sweep_config.expand(config, 5, seed=1) == trials[:5]  # a larger count extends the sweep
    lrs = [t["lr"] for t in trials]
    assert all(1e-4 <= lr <= 1e-1 for lr in lrs)
    below_geometric_mean = sum(lr < math.sqrt(1e-4 * 1e-1) for lr in lrs) / len(lrs)
    assert 0.35 < below_geometric_mean < 0.65  # uniform in lr would put ~3% there
    assert {t["wd"] for t in trials} == {0.0, 0.1}
    assert {t["warmup"] for t in trials} == {1, 2, 3, 4, 5}
    assert {t["clip"] for t in trials} <= {0.5, 1.0, 1.5, 2.0}
    assert len({sweep_config.trial_id(t) for t in trials}) == 200


def test_random_count_comes_from_run_cap_and_a_small_space_runs_out(capsys):
    config = {**_config("random"), "run_cap": 3}
    assert len(sweep_config.expand(config)) == 3
    assert len(sweep_config.expand(config, count=10)) == 4  # 2 lr x 2 wd distinct trials
    assert "only 4 distinct trials" in capsys.readouterr().out
    with pytest.raises(BadInput, match="--count"):
        sweep_config.expand(_config("random"))


def test_bayes_falls_back_to_random_with_a_one_line_note(capsys):
    config = _config("bayes", lr={"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1})
    trials = sweep_config.expand(config, 4, seed=3)
    note = capsys.readouterr().out
    assert note.count("\n") == 1 and "bayes" in note and "random" in note
    assert trials == sweep_config.expand({**config, "method": "random"}, 4, seed=3)


@pytest.mark.parametrize(
    "text, message",
    [
        ("method: grid\nparameters: {lr: {values: [1, 2]}\n", "not valid YAML"),
        (
            "method: evolution\nmetric: {name: val_loss}\nparameters: {lr: {value: 1}}\n",
            "unknown sweep method 'evolution'",
        ),
        ("method: grid\nparameters: {lr: {value: 1}}\n", "`metric:` is missing"),
        ("method: grid\nmetric: {name: val_loss}\n", "`parameters:`"),
        (
            "method: grid\nmetric: {name: val_loss}\nparameters:\n  lr: {distribution: "
            "log_uniform_values, min: 1.0e-4, max: 1.0e-2}\n",
            "grid search needs `values`",
        ),
        (
            "method: random\nmetric: {name: val_loss}\nparameters:\n  lr: {distribution: cauchy, "
            "min: 0, max: 1}\n",
            "unknown distribution 'cauchy'",
        ),
        (
            "method: random\nmetric: {name: val_loss}\nparameters:\n  lr: {min: 3e-4, max: 1.0}\n",
            "write 3.0e-4",
        ),
        (
            "method: random\nmetric: {name: val_loss}\nparameters:\n  lr: {min: 2.0, max: 1.0}\n",
            "above max",
        ),
        (
            "method: grid\nmetric: {name: val_loss}\ncommand: [python, train.py]\n"
            "parameters: {lr: {value: 1}}\n",
            "${args}",
        ),
    ],
)
def test_bad_configs_fail_in_one_line(tmp_path, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(BadInput) as err:
        sweep_config.load_config(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_command_line_reports_bad_input_in_one_line(tmp_path, capsys):
    code, err = cli_exit(sweep.main, ["--config", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2
    assert err.strip().count("\n") == 0
    # a count of 0 ran the whole grid, as no count does, before one trial was checked
    argv = ["--config", str(NOTEBOOK_CONFIG), "--count", "0", "--out", str(tmp_path / "out")]
    code, err = cli_exit(sweep.main, argv, capsys)
    assert code == 2 and err.strip() == "error: count must be positive, got 0"
    assert not (tmp_path / "out").exists()


def test_trial_arguments_are_the_wandb_agents_and_typos_fail_early():
    config = sweep_config.load_config(
        NOTEBOOK_CONFIG,
        sweep_config.parse_overrides(["steps=3", "qk-norm=true", "lr=3e-4", "mlp=relu2"]),
    )
    params = sweep_config.expand(config, 1)[0]
    assert params["lr"] == 3e-4 and params["qk-norm"] is True and params["mlp"] == "relu2"
    command = sweep_config.trial_command(config, params)
    assert command[:3] == [sys.executable, "-m", "shared.pretrain.train"]
    assert "--lr=0.0003" in command and "--qk-norm=True" in command
    assert command[-1] == "--no-progress"
    assert sweep_config.arm(config) == "mlp=relu2+qk-norm=True"
    sweep_config.check_train_args(command)
    with pytest.raises(BadInput, match="learning_rate"):
        sweep_config.check_train_args(command + ["--learning_rate=1"])


# ---------------------------------------------------------------------------- the runner


def test_restart_runs_only_the_missing_trials(stand_in, tmp_path):
    config, launches = stand_in
    out = tmp_path / "out"
    first = sweep.run_local(config, out, count=2, progress=False)  # "interrupted" after two
    assert [r["status"] for r in first] == ["done", "done"] and len(launches()) == 2
    rows = sweep.run_local(config, out, progress=False)
    assert len(launches()) == 3 and _argv_lr(launches()[-1]) == 0.1
    assert [r["reused"] for r in rows] == [True, True, False]

    (out / "trials" / rows[1]["trial_id"] / "summary.json").unlink()
    sweep.run_local(config, out, progress=False)
    assert [_argv_lr(x) for x in launches()[3:]] == [0.01, 0.1]  # lost summary; failed trial


def test_trials_csv_records_every_trial_and_failures_do_not_stop_the_sweep(
    stand_in, tmp_path, monkeypatch
):
    config, launches = stand_in
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "out"
    sweep.run_local(config, out, progress=False)
    rows = _csv(out / "trials.csv")
    assert [(r["lr"], r["status"]) for r in rows] == [
        ("0.001", "done"),
        ("0.01", "done"),
        ("0.1", "failed"),
    ]
    assert float(rows[0]["val_loss"]) == pytest.approx(6.0)
    assert float(rows[1]["val_loss"]) == pytest.approx(5.0)
    assert float(rows[1]["val_bpb"]) == pytest.approx(2.5)
    assert float(rows[1]["final_loss"]) == pytest.approx(5.1)
    assert float(rows[1]["tok_per_s"]) == 1000.0
    assert rows[2]["val_loss"] == "" and "ValueError: loss is nan" in rows[2]["error"]
    expected = {sweep_config.trial_id(t) for t in sweep_config.expand(config)}
    assert {r["trial_id"] for r in rows} == expected

    argv = launches()[0]["argv"]
    assert argv[argv.index("--wandb-group") + 1] == "test-sweep"
    assert argv[argv.index("--wandb-tags") + 1] == "sweep,mlp=swiglu"
    assert launches()[0]["wandb_mode"] == "disabled"  # tests disable wandb; else offline
    curve = sweep.read_curve(out, rows[1]["trial_id"])
    assert [c["step"] for c in curve] == [1, 2, 3]


def test_trials_run_offline_unless_wandb_is_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")
    env = sweep_runner._trial_env(tmp_path)
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path)
    assert env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")  # the project is installed
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert sweep_runner._trial_env(tmp_path)["WANDB_MODE"] == "disabled"


def test_the_command_line_runs_pinned_trials_once(stand_in, tmp_path):
    """`python -m shared.sweep` end to end on the stand-in: --set pins a parameter, --count
    caps the trials, and a second run reads the finished trial back. The real training program
    runs notebooks/05_sweep.yaml in notebook 05's local smoke (tests/test_notebooks.py checks
    its trial there), so it is not run a second time here."""
    config, launches = stand_in
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    argv = ["--config", str(path), "--local", "--count", "1", "--out", str(out)]
    argv += ["--no-progress", "--set", "steps=2"]
    assert sweep.main(argv) == 0
    (row,) = _csv(out / "trials.csv")
    assert row["status"] == "done" and row["steps"] == "2", row
    (launch,) = launches()
    assert "--steps=2" in launch["argv"]
    assert [c["step"] for c in sweep.read_curve(out, row["trial_id"])] == [1, 2]
    assert sweep.main(argv) == 0  # finished: nothing runs again
    assert len(launches()) == 1 and _csv(out / "trials.csv")[0]["reused"] == "True"


# ---------------------------------------------------------------------------- reading results


def _rows(losses: dict, wd=0.0) -> list[dict]:
    return [{"status": "done", "lr": lr, "wd": wd, "val_loss": loss} for lr, loss in losses.items()]


def test_recommendation_finds_the_best_edge_and_basin():
    inside = sweep.recommend(_rows({1e-3: 5.0, 3e-3: 4.5, 1e-2: 4.55, 3e-2: 6.0}))
    assert inside["best"]["lr"] == 3e-3 and inside["edge"] is None
    assert inside["basin"] == (3e-3, 1e-2) and "factor 3.3" in inside["text"]
    edge = sweep.recommend(
        _rows({1e-3: 6.0, 3e-3: 5.5, 1e-2: 5.0})
        + [{"status": "done", "lr": 3e-2, "wd": 0.1, "val_loss": 5.2}]
    )
    assert edge["edge"] is None  # 3e-2 was tried: the basin's high side is found
    high = sweep.recommend(_rows({1e-3: 6.0, 3e-3: 5.5, 1e-2: 5.0}))
    assert high["edge"] == "high" and "widen the range above 0.01" in high["text"]
    assert high["basin"] == (1e-2, 1e-2) and "sample more finely" in high["text"]
    diverged = sweep.recommend(_rows({1e-3: 5.0, 3e-3: 4.9, 1e-1: float("nan")}))
    assert diverged["edge"] is None and "diverged" in diverged["text"]
    assert sweep.recommend([{"status": "failed", "lr": 1e-3}])["best"] is None


# ---------------------------------------------------------------------------- wandb


def test_account_is_read_from_the_environment_or_netrc(tmp_path, monkeypatch):
    from wandb.sdk import wandb_setup

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setattr(wandb_setup.singleton().settings, "api_key", None)
    assert not sweep.has_wandb_account()
    host = wandb_setup.singleton().settings.base_url.split("//")[1]
    (tmp_path / "netrc").write_text(f"machine {host}\n  login user\n  password {'a' * 40}\n")
    assert sweep.has_wandb_account()
    (tmp_path / "netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    assert sweep.has_wandb_account()


def test_the_wandb_path_is_taken_only_with_an_account(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(sweep_runner, "run_wandb", lambda *a, **k: calls.append("wandb") or [])
    monkeypatch.setattr(sweep_runner, "run_local", lambda *a, **k: calls.append("local") or [])
    monkeypatch.setenv("WANDB_MODE", "online")
    for account, use_wandb, expected in [
        (False, None, "local"),
        (True, None, "wandb"),
        (True, False, "local"),
        (True, True, "wandb"),
    ]:
        monkeypatch.setattr(sweep_runner, "has_wandb_account", lambda account=account: account)
        sweep.run(_config(), tmp_path, use_wandb=use_wandb)
        assert calls[-1] == expected
    monkeypatch.setenv("WANDB_MODE", "offline")  # an account, but the user asked for offline
    sweep.run(_config(), tmp_path)
    assert calls[-1] == "local"
    monkeypatch.setattr(sweep_runner, "has_wandb_account", lambda: False)
    with pytest.raises(BadInput, match="WANDB_API_KEY"):
        sweep.run(_config(), tmp_path, use_wandb=True)


class _Run:
    def __init__(self, run_id, state, lr, loss):
        self.id, self.state = run_id, state
        self.config = {"lr": lr, "wd": 0.0, "steps": 3, "batch": 8}
        self.summary_metrics = {"val_loss": loss, "val_bpb": loss / 2} if loss else {}

    def scan_history(self, keys):
        return [{"step": s, "loss": 7.0 - s, "_step": s} for s in (1, 2, 3)]


def test_wandb_sweep_creates_runs_an_agent_and_reads_back_the_runs(monkeypatch, tmp_path):
    import wandb

    created, launched = [], []
    monkeypatch.setattr(
        wandb, "sweep", lambda config, project: created.append((config, project)) or "abc123"
    )
    monkeypatch.setattr(
        sweep_runner,
        "subprocess",
        SimpleNamespace(
            run=lambda cmd, cwd, env: launched.append((cmd, env)) or SimpleNamespace(returncode=0)
        ),
    )
    runs = [_Run("r1", "finished", 1e-3, 5.5), _Run("r2", "crashed", 1e-2, None)]
    api = SimpleNamespace(
        sweep=lambda path: SimpleNamespace(url=f"https://wandb/{path}", runs=runs)
    )
    monkeypatch.setattr(wandb, "Api", lambda: api)

    rows = sweep.run_wandb(_config(), tmp_path, project="proj")
    assert created == [(_config(), "proj")]
    ((cmd, env),) = launched
    assert cmd == [
        sys.executable,
        "-m",
        "wandb",
        "agent",
        "--project",
        "proj",
        "--count",
        "4",
        "abc123",
    ]
    assert env["WANDB_MODE"] == "online"  # the agent's trials must report to the sweep
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert [(r["trial_id"], r["status"], r["lr"], r["val_loss"]) for r in rows] == [
        ("r1", "done", 1e-3, 5.5),
        ("r2", "failed", 1e-2, None),
    ]
    assert [c["loss"] for c in sweep.read_curve(tmp_path, "r1")] == [6.0, 5.0, 4.0]
    assert len(_csv(tmp_path / "trials.csv")) == 2


# ---------------------------------------------------------------------------- notebook 05's setting
