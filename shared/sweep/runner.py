"""Running notebook 05's sweep: one wandb sweep config, run by wandb or locally.

The config is wandb's own YAML form (`notebooks/05_sweep.yaml`; read, checked and expanded by
`shared.sweep.config`). Two ways to run it:

- With a wandb account: `wandb.sweep` creates the sweep on the wandb server (which picks the
  trials, bayes included) and the `wandb agent` command line runs them, each trial in its own
  process, so HBM and in-process compile caches start empty every time. The runs are then
  read back through wandb's API into the same `trials.csv` and per-trial metrics files.
- Without one (the default: wandb's sweep controller lives on its server, even for offline
  runs), `run_local` expands the same config itself (grid, seeded random; bayes -> random).
  Each trial runs the config's command in its own process with `WANDB_MODE=offline` (unless
  wandb is disabled) and the sweep's name as wandb group, so `wandb sync` can upload the runs
  later. Per-trial files live in `OUT/trials/<trial_id>/` (metrics, summary, log); the id is
  a hash of the trial's parameters, so a restarted sweep skips the trials whose summary holds
  the metric and runs only the missing ones. `OUT/trials.csv` lists every trial.

Trials are `python -m shared.pretrain.train` processes in the repository root; the project is
installed, so they import `shared` with no PYTHONPATH. They share a persistent JAX compilation
cache (`OUT/jax_cache`, unless JAX_COMPILATION_CACHE_DIR is set): programs that do not depend
on the learning rate or weight decay (the initialiser, the evaluation step) are read from disk
instead of compiled again, about a third of a short CPU trial. It holds compiled programs only:
no device memory or in-process state carries over between trials.

`recommend` (shared.sweep.results) reads the trials back: the
best lr / wd, whether the best lr sits at the edge of the range tried, how wide the basin is.

    python -m shared.sweep --config notebooks/05_sweep.yaml --count 6 --set steps=30 seq=128
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from shared import report
from shared.errors import BadInput
from shared.paths import ROOT
from shared.sweep.config import (
    arm,
    check_train_args,
    expand,
    load_config,
    parse_overrides,
    sample,
    sweep_name,
    trial_command,
    trial_count,
    trial_id,
)
from shared.sweep.results import recommend, usable

__all__ = [
    "DEFAULT_OUT",
    "DEFAULT_PROJECT",
    "SUMMARY_KEYS",
    "fetch_wandb_trials",
    "has_wandb_account",
    "main",
    "run",
    "run_local",
    "run_trial",
    "run_wandb",
]

DEFAULT_OUT = "results/05_hparam_sweep"
DEFAULT_PROJECT = "tpu-budget-lab"
# What a trial's summary contributes to trials.csv (shared.pretrain.train prints these).
SUMMARY_KEYS = ("val_loss", "val_bpb", "final_loss", "tok_per_s", "mfu")


# ---------------------------------------------------------------------------- trials


def _trial_env(out: Path) -> dict:
    """The trials' environment: wandb offline (a headless trial cannot log in) unless
    disabled, its runs and the shared compilation cache under OUT; the user's settings win."""
    env = dict(os.environ)
    if env.get("WANDB_MODE") != "disabled":
        env["WANDB_MODE"] = "offline"
    env.setdefault("WANDB_DIR", str(out))  # offline runs land in OUT/wandb/offline-run-*
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(out / "jax_cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return env


def _finished(folder: Path, metric: str) -> dict | None:
    """The trial's summary if it completed (a preempted run's summary lacks the metric)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return summary if metric in summary and not summary.get("preempted") else None


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _row(
    tid: str,
    params: dict,
    status: str,
    summary: dict | None,
    metric: str,
    seconds: float | None,
    reused: bool,
    error: str | None,
) -> dict:
    keys = dict.fromkeys((metric, *SUMMARY_KEYS))
    return {
        "trial_id": tid,
        "status": status,
        **params,
        **{k: (summary or {}).get(k) for k in keys},
        "seconds": seconds,
        "reused": reused,
        "error": error,
    }


def run_trial(config: dict, params: dict, out: Path, env: dict) -> dict:
    """Run one trial in its own process (or reuse its finished summary); return its row."""
    metric, tid = config["metric"]["name"], trial_id(params)
    folder = out / "trials" / tid
    summary = _finished(folder, metric)
    if summary is not None:
        record = (
            json.loads((folder / "trial.json").read_text())
            if (folder / "trial.json").exists()
            else {}
        )
        return _row(tid, params, "done", summary, metric, record.get("seconds"), True, None)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").unlink(missing_ok=True)
    command = trial_command(config, params) + [
        "--metrics",
        str(folder / "metrics.jsonl"),
        "--summary",
        str(folder / "summary.json"),
        "--wandb-group",
        sweep_name(config),
        "--wandb-tags",
        f"sweep,{arm(config)}",
    ]
    start = time.perf_counter()
    with (folder / "log.txt").open("w") as log:
        code = subprocess.run(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        ).returncode
    seconds = time.perf_counter() - start
    summary = _finished(folder, metric)
    error = None
    if code != 0:
        error = f"exit {code}: {_last_line(folder / 'log.txt')}"
    elif summary is None:
        error = f"no {metric} in {folder / 'summary.json'} (preempted?)"
    status = "failed" if error else "done"
    (folder / "trial.json").write_text(
        json.dumps(
            {
                "params": params,
                "command": command,
                "status": status,
                "seconds": seconds,
                "error": error,
            },
            indent=1,
        )
    )
    return _row(tid, params, status, summary if not error else None, metric, seconds, False, error)


def run_local(
    config: dict,
    out: str | Path = DEFAULT_OUT,
    count: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> list[dict]:
    """Run the config's trials one process each; skip finished ones; write OUT/trials.csv."""
    from tqdm.auto import tqdm

    trials = expand(config, count, seed)  # bad input fails before the results folder is made
    out = report.results_dir(out)
    check_train_args(trial_command(config, trials[0]))
    env, metric = _trial_env(out), config["metric"]["name"]
    sign = 1 if config["metric"].get("goal", "minimize") == "minimize" else -1
    rows = []
    bar = tqdm(trials, desc=f"sweep {sweep_name(config)}", unit="trial", disable=not progress)
    for params in bar:
        rows.append(run_trial(config, params, out, env))
        report.save_table(rows, out, "trials")  # current after every trial: safe to interrupt
        scores = [r[metric] for r in usable(rows, metric)]
        if scores:
            bar.set_postfix(
                {f"best {metric}": f"{sign * min(sign * s for s in scores):.4f}"}, refresh=False
            )
    bar.close()
    failed = sum(r["status"] == "failed" for r in rows)
    print(
        f"{len(rows)} trials ({sum(r['reused'] for r in rows)} reused, {failed} failed) in "
        f"{out / 'trials.csv'}"
        + (
            f"; upload the offline runs: wandb sync {env['WANDB_DIR']}/wandb/offline-run-*"
            if env["WANDB_MODE"] == "offline"
            else ""
        )
    )
    return rows


# ---------------------------------------------------------------------------- with wandb


def has_wandb_account() -> bool:
    """True when wandb has credentials (env, ~/.netrc, settings); never asks the network."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    # wandb's own readers of `wandb login`'s files (no public function does this offline).
    from wandb.sdk import wandb_setup
    from wandb.sdk.lib.wbauth import read_netrc_auth

    settings = wandb_setup.singleton().settings
    try:
        return bool(settings.api_key or read_netrc_auth(host=settings.base_url))
    except Exception:  # wandb raises AuthenticationError for a malformed key: not usable
        return False


def run_wandb(
    config: dict,
    out: str | Path = DEFAULT_OUT,
    count: int | None = None,
    project: str | None = None,
) -> list[dict]:
    """Create the sweep on wandb, run `wandb agent` (one process per trial), read the runs."""
    import wandb

    project = project or config.get("project") or DEFAULT_PROJECT
    rng = np.random.default_rng(0)  # any one trial, to check the arguments
    check_train_args(
        trial_command(config, {n: sample(n, s, rng) for n, s in config["parameters"].items()})
    )
    count = trial_count(config, count) or (
        len(expand(config)) if config["method"] == "grid" else None
    )
    sweep_id = wandb.sweep(config, project=project)  # prints the sweep's URL
    bin_dir = os.path.dirname(sys.executable)  # the agent runs `python` from PATH: this one
    env = {**os.environ, "WANDB_MODE": "online", "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    agent = [
        sys.executable,
        "-m",
        "wandb",
        "agent",
        "--project",
        project,
        *(["--count", str(count)] if count else []),
        sweep_id,
    ]
    code = subprocess.run(agent, cwd=ROOT, env=env).returncode
    if code != 0:
        raise RuntimeError(f"wandb agent exited with status {code}")
    return fetch_wandb_trials(config, f"{project}/{sweep_id}", report.results_dir(out))


def fetch_wandb_trials(config: dict, sweep_path: str, out: Path, api=None) -> list[dict]:
    """The sweep's runs as trials.csv rows, and their loss curves as metrics files, in the
    same layout as the local runner's, so the notebook reads one format."""
    import wandb

    api = api or wandb.Api()
    sweep = api.sweep(sweep_path)
    print(f"sweep {sweep.url}")
    metric, rows = config["metric"]["name"], []
    for run in sweep.runs:
        folder = out / "trials" / run.id
        folder.mkdir(parents=True, exist_ok=True)
        curve = [
            {"step": r["step"], "loss": r["loss"]} for r in run.scan_history(keys=["step", "loss"])
        ]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
        params = {name: run.config.get(name) for name in config["parameters"]}
        summary = run.summary_metrics  # a plain dict (run.summary is a lazy wrapper)
        done = run.state == "finished" and metric in summary
        rows.append(
            _row(
                run.id,
                params,
                "done" if done else "failed",
                summary if done else None,
                metric,
                None,
                False,
                None if done else f"wandb state {run.state}",
            )
        )
    report.save_table(rows, out, "trials")
    return rows


def run(
    config: dict,
    out: str | Path = DEFAULT_OUT,
    count: int | None = None,
    seed: int = 0,
    use_wandb: bool | None = None,
    project: str | None = None,
    progress: bool = True,
) -> list[dict]:
    """Run the sweep with wandb when asked (or, if `use_wandb` is None, when an account exists
    and WANDB_MODE is not offline/disabled), else locally."""
    if use_wandb is None:
        use_wandb = (
            os.environ.get("WANDB_MODE", "online") not in ("offline", "disabled", "dryrun")
            and has_wandb_account()
        )
    elif use_wandb and not has_wandb_account():
        raise BadInput(
            "no wandb account: set WANDB_API_KEY or run `wandb login`, or run the sweep locally"
        )
    if use_wandb:
        return run_wandb(config, out, count, project)
    return run_local(config, out, count, seed, progress)


# ---------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m shared.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="a wandb sweep YAML")
    p.add_argument("--count", type=int, help="trials (default: run_cap, or the whole grid)")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--local",
        action="store_const",
        const=False,
        dest="use_wandb",
        help="run locally even with a wandb account",
    )
    where.add_argument(
        "--wandb",
        action="store_const",
        const=True,
        dest="use_wandb",
        help="create the sweep on wandb and run an agent (needs an account)",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help="results folder (local runner)")
    p.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=VALUE",
        help="pin parameters to fixed values, e.g. --set steps=20 seq=64",
    )
    p.add_argument("--sample-seed", type=int, default=0, help="random search's seed")
    p.add_argument("--project", help=f"wandb project (default: the config's, or {DEFAULT_PROJECT})")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    config = load_config(args.config, parse_overrides(args.set))
    rows = run(
        config,
        args.out,
        args.count,
        args.sample_seed,
        args.use_wandb,
        args.project,
        progress=not args.no_progress,
    )
    print(
        recommend(rows, config["metric"]["name"], config["metric"].get("goal", "minimize"))["text"]
    )
    return 1 if rows and all(r["status"] == "failed" for r in rows) else 0
