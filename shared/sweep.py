"""Notebook 05's hyper-parameter sweep: one wandb sweep config, run by wandb or locally.

The sweep is a wandb sweep config in wandb's own YAML form (`notebooks/05_sweep.yaml`):
method, metric, parameters and the command that runs one trial (`python -m shared.train
${args}`). Two ways to run it:

- With a wandb account: `wandb.sweep` creates the sweep on the wandb server (which picks the
  trials, bayes included) and the `wandb agent` command line runs them, each trial in its own
  process, so HBM and in-process compile caches start empty every time. The runs are then
  read back through wandb's API into the same `trials.csv` and per-trial metrics files.
- Without one (the default: wandb's sweep controller lives on its server, even for offline
  runs), `run_local` expands the same config itself: grid = cartesian product of the
  `values`; random = seeded draws from wandb's distributions; bayes -> random with a note.
  Each trial runs the config's command in its own process with `WANDB_MODE=offline` (unless
  wandb is disabled) and the sweep's name as wandb group, so `wandb sync` can upload the runs
  later. Per-trial files live in `OUT/trials/<trial_id>/` (metrics, summary, log); the id is
  a hash of the trial's parameters, so a restarted sweep skips the trials whose summary holds
  the metric and runs only the missing ones. `OUT/trials.csv` lists every trial.

Trials share a persistent JAX compilation cache (`OUT/jax_cache`, unless
JAX_COMPILATION_CACHE_DIR is set): programs that do not depend on the learning rate or weight
decay (the initialiser, the evaluation step) are read from disk instead of compiled again,
about a third of a short CPU trial. It holds compiled programs only: no
device memory or in-process state carries over between trials.

    python -m shared.sweep --config notebooks/05_sweep.yaml --count 6 --set steps=30 seq=128
"""

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from shared import report
from shared.errors import BadInput, run_cli

DEFAULT_OUT = "results/05_hparam_sweep"
DEFAULT_PROJECT = "tpu-budget-lab"
METHODS = ("grid", "random", "bayes")
GOALS = ("minimize", "maximize")
# The wandb distributions the local runner samples (wandb also has normal, beta and their
# variants; a config using those runs on the wandb server only). `log_uniform` takes natural-
# log bounds, `log_uniform_values` the values themselves.
DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "uniform", "q_uniform",
                 "log_uniform", "log_uniform_values", "q_log_uniform_values")
GRID_DISTRIBUTIONS = ("constant", "categorical", "int_uniform", "q_uniform")
# shared.train's architecture knobs: those fixed in a sweep name its ablation arm.
ARM_KNOBS = ("mlp", "qk-norm", "tied", "embed-norm", "logit-softcap")
# What a trial's summary contributes to trials.csv (shared.train prints these).
SUMMARY_KEYS = ("val_loss", "val_bpb", "final_loss", "tok_per_s", "mfu")
SIGNIFICANT_DIGITS = 4  # sampled floats are rounded so trial ids and arguments stay readable


# ---------------------------------------------------------------------------- the config


def load_config(path: str | Path, overrides: dict | None = None) -> dict:
    """Read and check a sweep YAML; `overrides` pin parameters to fixed values (steps=20)."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"sweep config {path} not found") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInput(f"{path} is not valid YAML ({getattr(err, 'problem', None) or err}"
                       f"{where})") from None
    if not isinstance(config, dict) or not isinstance(config.get("parameters"), dict):
        raise BadInput(f"{path}: a sweep config is a mapping with `parameters:` (wandb's form)")
    for name, value in (overrides or {}).items():
        config["parameters"][name] = {"value": value}
    return validate(config, source=str(path))


def validate(config: dict, source: str = "sweep config") -> dict:
    """Check what both runners need: method, metric, parameters, a command that passes them."""
    from wandb.sdk.launch.sweeps.utils import DEFAULT_SWEEP_COMMAND

    if config.get("method") not in METHODS:
        raise BadInput(f"{source}: unknown sweep method {config.get('method')!r}; valid: "
                       f"{', '.join(METHODS)}")
    metric = config.get("metric")
    if not isinstance(metric, dict) or not metric.get("name"):
        raise BadInput(f"{source}: `metric:` is missing; e.g. metric: {{name: val_loss, "
                       "goal: minimize}")
    if metric.get("goal", "minimize") not in GOALS:
        raise BadInput(f"{source}: unknown metric goal {metric['goal']!r}; valid: "
                       f"{', '.join(GOALS)}")
    if not config["parameters"]:
        raise BadInput(f"{source}: `parameters:` is empty")
    for name, spec in config["parameters"].items():
        kind = parameter_kind(name, spec)
        if config["method"] == "grid" and kind not in GRID_DISTRIBUTIONS:
            raise BadInput(f"{source}: grid search needs `values` (or int_uniform/q_uniform) for "
                           f"{name!r}, which has distribution {kind}; use method random")
    command = [str(c) for c in config.get("command") or DEFAULT_SWEEP_COMMAND]
    if "${program}" in command and not config.get("program"):
        raise BadInput(f"{source}: the command runs ${{program}} but `program:` is missing")
    if not any(c.startswith("${args") for c in command):
        raise BadInput(f"{source}: the command never passes the trial's parameters; add ${{args}}")
    return config


def parameter_kind(name: str, spec) -> str:
    """The wandb distribution a parameter spec means (`value` -> constant, `values` ->
    categorical, min/max without a distribution -> int_uniform or uniform, as wandb infers)."""
    if not isinstance(spec, dict):
        raise BadInput(f"parameter {name!r}: expected a mapping like {{value: 3}}, "
                       f"{{values: [1, 2]}} or {{distribution: uniform, min: 0, max: 1}}")
    if "value" in spec:
        return "constant"
    if "values" in spec:
        if not isinstance(spec["values"], list) or not spec["values"]:
            raise BadInput(f"parameter {name!r}: `values` must be a non-empty list")
        return "categorical"
    if "min" not in spec or "max" not in spec:
        raise BadInput(f"parameter {name!r} needs `value`, `values`, or min and max")
    lo, hi = spec["min"], spec["max"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi)):
        raise BadInput(f"parameter {name!r}: min and max must be numbers, got {lo!r}, {hi!r}"
                       " (YAML reads 3e-4 as text: write 3.0e-4)")
    ints = isinstance(lo, int) and isinstance(hi, int)
    kind = spec.get("distribution") or ("int_uniform" if ints else "uniform")
    if kind not in DISTRIBUTIONS:
        raise BadInput(f"parameter {name!r}: unknown distribution {kind!r}; valid here: "
                       f"{', '.join(DISTRIBUTIONS)} (wandb's others run on its server only)")
    if kind in ("constant", "categorical"):
        raise BadInput(f"parameter {name!r}: distribution {kind} needs `value`/`values`")
    if lo > hi:
        raise BadInput(f"parameter {name!r}: min {lo} is above max {hi}")
    if kind in ("log_uniform_values", "q_log_uniform_values") and lo <= 0:
        raise BadInput(f"parameter {name!r}: {kind} needs min > 0, got {lo}")
    return kind


def search_space(config: dict) -> list[dict]:
    """One row per parameter: its kind and its values or range, for a table."""
    rows = []
    for name, spec in config["parameters"].items():
        kind = parameter_kind(name, spec)
        values = (spec["value"] if kind == "constant" else spec["values"]
                  if kind == "categorical" else f"[{spec['min']}, {spec['max']}]")
        rows.append({"parameter": name, "kind": kind, "values": values})
    return rows


def sweep_name(config: dict) -> str:
    return str(config.get("name") or "sweep")


def arm(config: dict) -> str:
    """The ablation arm: the architecture knobs the sweep fixes, e.g. 'mlp=swiglu+qk-norm=False'."""
    params = config["parameters"]
    fixed = [f"{k}={params[k]['value']}" for k in ARM_KNOBS if "value" in params.get(k, {})]
    return "+".join(fixed) or "default-arm"


def search_bounds(config: dict, name: str) -> tuple[float, float] | None:
    """The searched range of a parameter: its min/max, or its smallest and largest value."""
    spec = config["parameters"].get(name)
    if spec is None:
        return None
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return spec["value"], spec["value"]
    if kind == "categorical":
        return min(spec["values"]), max(spec["values"])
    if kind == "log_uniform":
        return math.exp(spec["min"]), math.exp(spec["max"])
    return spec["min"], spec["max"]


# ---------------------------------------------------------------------------- trials


def trial_id(params: dict) -> str:
    """A stable name for a trial: the same parameters always give the same id."""
    return hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def _grid_values(name: str, spec: dict) -> list:
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return [spec["value"]]
    if kind == "categorical":
        return list(spec["values"])
    if kind == "int_uniform":
        return list(range(spec["min"], spec["max"] + 1))
    q = spec.get("q", 1)
    count = int(math.floor((spec["max"] - spec["min"]) / q + 1e-9)) + 1
    return [_quantised(spec["min"] + i * q, spec) for i in range(count)]


def _quantised(x: float, spec: dict):
    q = spec.get("q", 1)
    value = round(x / q) * q
    return int(value) if all(isinstance(spec.get(k, 1), int) for k in ("min", "max", "q")) \
        else _round(value)


def _sample(name: str, spec: dict, rng: np.random.Generator):
    """One draw from a parameter, with wandb's meaning of each distribution."""
    kind = parameter_kind(name, spec)
    if kind == "constant":
        return spec["value"]
    if kind == "categorical":
        return spec["values"][int(rng.integers(len(spec["values"])))]
    lo, hi = spec["min"], spec["max"]
    if kind == "int_uniform":
        return int(rng.integers(lo, hi + 1))
    if kind == "uniform":
        return _round(rng.uniform(lo, hi))
    if kind == "q_uniform":
        return _quantised(rng.uniform(lo, hi), spec)
    if kind == "log_uniform":
        return _round(math.exp(rng.uniform(lo, hi)))
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return _round(value) if kind == "log_uniform_values" else _quantised(value, spec)


def expand(config: dict, count: int | None = None, seed: int = 0) -> list[dict]:
    """The trials the local runner runs, in order: a restart with the same arguments (or a
    larger count) repeats them, so finished ones are recognised and skipped."""
    params = config["parameters"]
    count = count or config.get("run_cap")
    if config["method"] == "grid":
        axes = [_grid_values(name, spec) for name, spec in params.items()]
        trials = [dict(zip(params, combo, strict=True)) for combo in itertools.product(*axes)]
        return trials[:count] if count else trials
    if config["method"] == "bayes":
        print(f"note: bayes search needs the wandb sweep server; sampling at random instead "
              f"(seed {seed})")
    if not count:
        raise BadInput("random search needs a trial count: --count N, or run_cap in the config")
    rng = np.random.default_rng(seed)
    trials, seen = [], set()
    for _ in range(100 * count):  # a small discrete space runs out of distinct trials
        trial = {name: _sample(name, spec, rng) for name, spec in params.items()}
        if (tid := trial_id(trial)) not in seen:
            seen.add(tid)
            trials.append(trial)
        if len(trials) == count:
            break
    if len(trials) < count:
        print(f"note: the search space holds only {len(trials)} distinct trials")
    return trials


def trial_command(config: dict, params: dict) -> list[str]:
    """The config's command with wandb's macros filled in as `wandb agent` fills them, except
    ${interpreter} (this Python, not the first `python` on PATH) and ${env} (dropped: the
    environment is passed directly)."""
    from wandb.sdk.launch.sweeps.utils import (
        DEFAULT_SWEEP_COMMAND,
        create_sweep_command,
        create_sweep_command_args,
    )

    macros = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    macros.pop("args_dict")  # a dict, not command words
    macros.update(env=[], interpreter=[sys.executable], program=[str(config.get("program"))])
    command = []
    for part in create_sweep_command(list(config.get("command") or DEFAULT_SWEEP_COMMAND)):
        part = str(part)
        if part.startswith("${") and part.endswith("}"):
            if part[2:-1] not in macros:
                raise BadInput(f"the sweep command's {part} is not supported locally; valid: "
                               + ", ".join(f"${{{m}}}" for m in macros))
            command += macros[part[2:-1]]
        else:
            command.append(part)
    return command


def check_train_args(command: list[str]) -> None:
    """A misspelled parameter fails here, once, instead of in every trial."""
    if "shared.train" not in command:
        return
    from shared import train

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            train.parse_args(command[command.index("shared.train") + 1:])
    except SystemExit:
        reason = (stderr.getvalue().strip().splitlines() or ["bad arguments"])[-1]
        raise BadInput(f"shared.train rejects the sweep's parameters ({reason}); parameter "
                       "names are its flags without the dashes") from None


def _trial_env(out: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(report.REPO), env.get("PYTHONPATH")]))
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
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()
             if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _row(tid: str, params: dict, status: str, summary: dict | None, metric: str,
         seconds: float | None, reused: bool, error: str | None) -> dict:
    keys = dict.fromkeys((metric, *SUMMARY_KEYS))
    return {"trial_id": tid, "status": status, **params,
            **{k: (summary or {}).get(k) for k in keys},
            "seconds": seconds, "reused": reused, "error": error}


def run_trial(config: dict, params: dict, out: Path, env: dict) -> dict:
    """Run one trial in its own process (or reuse its finished summary); return its row."""
    metric, tid = config["metric"]["name"], trial_id(params)
    folder = out / "trials" / tid
    summary = _finished(folder, metric)
    if summary is not None:
        record = json.loads((folder / "trial.json").read_text()) \
            if (folder / "trial.json").exists() else {}
        return _row(tid, params, "done", summary, metric, record.get("seconds"), True, None)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").unlink(missing_ok=True)
    command = trial_command(config, params) + [
        "--metrics", str(folder / "metrics.jsonl"), "--summary", str(folder / "summary.json"),
        "--wandb-group", sweep_name(config), "--wandb-tags", f"sweep,{arm(config)}"]
    start = time.perf_counter()
    with (folder / "log.txt").open("w") as log:
        code = subprocess.run(command, cwd=report.REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    summary = _finished(folder, metric)
    error = None
    if code != 0:
        error = f"exit {code}: {_last_line(folder / 'log.txt')}"
    elif summary is None:
        error = f"no {metric} in {folder / 'summary.json'} (preempted?)"
    status = "failed" if error else "done"
    (folder / "trial.json").write_text(json.dumps(
        {"params": params, "command": command, "status": status, "seconds": seconds,
         "error": error}, indent=1))
    return _row(tid, params, status, summary if not error else None, metric, seconds, False,
                error)


def run_local(config: dict, out: str | Path = DEFAULT_OUT, count: int | None = None,
              seed: int = 0, progress: bool = True) -> list[dict]:
    """Run the config's trials one process each; skip finished ones; write OUT/trials.csv."""
    from tqdm.auto import tqdm

    out = report.results_dir(out)
    trials = expand(config, count, seed)
    check_train_args(trial_command(config, trials[0]))
    env, metric = _trial_env(out), config["metric"]["name"]
    sign = 1 if config["metric"].get("goal", "minimize") == "minimize" else -1
    rows = []
    bar = tqdm(trials, desc=f"sweep {sweep_name(config)}", unit="trial", disable=not progress)
    for params in bar:
        rows.append(run_trial(config, params, out, env))
        report.save_table(rows, out, "trials")  # current after every trial: safe to interrupt
        scores = [r[metric] for r in rows if r["status"] == "done" and _finite(r[metric])]
        if scores:
            bar.set_postfix({f"best {metric}": f"{sign * min(sign * s for s in scores):.4f}"},
                            refresh=False)
    bar.close()
    failed = sum(r["status"] == "failed" for r in rows)
    print(f"{len(rows)} trials ({sum(r['reused'] for r in rows)} reused, {failed} failed) in "
          f"{out / 'trials.csv'}" + (f"; upload the offline runs: wandb sync "
                                     f"{env['WANDB_DIR']}/wandb/offline-run-*"
                                     if env["WANDB_MODE"] == "offline" else ""))
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


def run_wandb(config: dict, out: str | Path = DEFAULT_OUT, count: int | None = None,
              project: str | None = None) -> list[dict]:
    """Create the sweep on wandb, run `wandb agent` (one process per trial), read the runs."""
    import wandb

    project = project or config.get("project") or DEFAULT_PROJECT
    rng = np.random.default_rng(0)  # any one trial, to check the arguments
    check_train_args(trial_command(config, {n: _sample(n, s, rng)
                                            for n, s in config["parameters"].items()}))
    count = count or config.get("run_cap") or (len(expand(config)) if config["method"] == "grid"
                                               else None)
    sweep_id = wandb.sweep(config, project=project)  # prints the sweep's URL
    bin_dir = os.path.dirname(sys.executable)  # the agent runs `python` from PATH: this one
    env = {**os.environ, "WANDB_MODE": "online", "PATH": bin_dir + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": os.pathsep.join(filter(None, [str(report.REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    agent = [sys.executable, "-m", "wandb", "agent", "--project", project,
             *(["--count", str(count)] if count else []), sweep_id]
    code = subprocess.run(agent, cwd=report.REPO, env=env).returncode
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
        curve = [{"step": r["step"], "loss": r["loss"]}
                 for r in run.scan_history(keys=["step", "loss"])]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
        params = {name: run.config.get(name) for name in config["parameters"]}
        summary = run.summary_metrics  # a plain dict (run.summary is a lazy wrapper)
        done = run.state == "finished" and metric in summary
        rows.append(_row(run.id, params, "done" if done else "failed", summary if done else None,
                         metric, None, False, None if done else f"wandb state {run.state}"))
    report.save_table(rows, out, "trials")
    return rows


def run(config: dict, out: str | Path = DEFAULT_OUT, count: int | None = None, seed: int = 0,
        use_wandb: bool | None = None, project: str | None = None,
        progress: bool = True) -> list[dict]:
    """Run the sweep with wandb when asked (or, if `use_wandb` is None, when an account exists
    and WANDB_MODE is not offline/disabled), else locally."""
    if use_wandb is None:
        use_wandb = (os.environ.get("WANDB_MODE", "online") not in ("offline", "disabled",
                                                                    "dryrun")
                     and has_wandb_account())
    elif use_wandb and not has_wandb_account():
        raise BadInput("no wandb account: set WANDB_API_KEY or run `wandb login`, or run the "
                       "sweep locally")
    if use_wandb:
        return run_wandb(config, out, count, project)
    return run_local(config, out, count, seed, progress)


# ---------------------------------------------------------------------------- reading results


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def usable(rows: list[dict], metric: str = "val_loss") -> list[dict]:
    """The finished trials with a finite score (a diverged run's loss is NaN)."""
    return [r for r in rows if r.get("status") == "done" and _finite(r.get(metric))]


def _order(item):
    """Sort key: numbers by value before anything else by its text."""
    return (0, item[0], "") if _finite(item[0]) else (1, 0, str(item[0]))


def read_curve(out: str | Path, tid: str) -> list[dict]:
    """A trial's per-step metrics lines (training loss and so on), final evaluation left out."""
    path = report.results_dir(out) / "trials" / tid / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if not r.get("final")]


def recommend(rows: list[dict], metric: str = "val_loss", goal: str = "minimize",
              tolerance: float = 0.02, lr: str = "lr", wd: str = "wd") -> dict:
    """What the trials say: the best lr/wd, whether the best lr is at the edge of what was
    tried (then widen the range), and how wide the basin is (lrs within `tolerance` of the
    best score). Returns the facts and a few lines of text."""
    sign = 1 if goal == "minimize" else -1
    done = usable(rows, metric)
    if not done:
        return {"best": None, "edge": None, "basin": None,
                "text": f"no trial finished with a finite {metric}: nothing to recommend"}
    best = min(done, key=lambda r: sign * r[metric])
    lines = [f"best: {lr}={best.get(lr)}, {wd}={best.get(wd)} with {metric} "
             f"{best[metric]:.4f} ({len(done)} of {len(rows)} trials usable)"]
    edge = basin = None
    tried = sorted({r[lr] for r in rows if _finite(r.get(lr))})
    if _finite(best.get(lr)) and len(tried) > 1:
        if best[lr] in (tried[0], tried[-1]):
            edge = "low" if best[lr] == tried[0] else "high"
            lines.append(f"the best {lr} is the {'smallest' if edge == 'low' else 'largest'} "
                         f"tried: the basin's edge was not found; widen the range "
                         f"{'below' if edge == 'low' else 'above'} {best[lr]:.3g}")
        near = [r[lr] for r in done if sign * (r[metric] - best[metric])
                <= tolerance * abs(best[metric])]
        basin = (min(near), max(near))
        if basin[1] > basin[0]:
            lines.append(f"{len(near)} trials within {tolerance:.0%} of the best {metric}: "
                         f"{lr} {basin[0]:.3g} to {basin[1]:.3g} (a factor "
                         f"{basin[1] / basin[0]:.1f}); within it the exact value matters little")
        else:
            lines.append(f"no other {lr} within {tolerance:.0%} of the best: a narrow basin or "
                         f"too coarse a search; sample more finely around {best[lr]:.3g}")
    by_wd = {}  # each weight decay's best trial: their lrs show whether the comparison is fair
    for r in done:
        key = r.get(wd)
        if key not in by_wd or sign * r[metric] < sign * by_wd[key][metric]:
            by_wd[key] = r
    if len(by_wd) > 1:
        lines.append(f"best {metric} per {wd}: " + ", ".join(
            f"{wd}={k}: {r[metric]:.4f} (at {lr} {r.get(lr)})"
            for k, r in sorted(by_wd.items(), key=_order)))
    diverged = sorted(r[lr] for r in rows if r.get("status") == "done"
                      and not _finite(r.get(metric)) and _finite(r.get(lr)))
    if diverged:
        lines.append(f"diverged (non-finite {metric}) at {lr} = "
                     + ", ".join(f"{v:.3g}" for v in diverged))
    return {"best": best, "edge": edge, "basin": basin, "text": "\n".join(lines)}


# ---------------------------------------------------------------------------- command line


def parse_overrides(items: list[str]) -> dict:
    """`steps=20 qk-norm=true lr=3e-4` -> {'steps': 20, 'qk-norm': True, 'lr': 0.0003}."""
    overrides = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise BadInput(f"--set takes NAME=VALUE pairs, got {item!r}")
        for cast in (int, float):
            try:
                overrides[name] = cast(text)
                break
            except ValueError:
                pass
        else:
            overrides[name] = yaml.safe_load(text) if text else ""
    return overrides


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shared.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a wandb sweep YAML")
    p.add_argument("--count", type=int, help="trials (default: run_cap, or the whole grid)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_const", const=False, dest="use_wandb",
                       help="run locally even with a wandb account")
    where.add_argument("--wandb", action="store_const", const=True, dest="use_wandb",
                       help="create the sweep on wandb and run an agent (needs an account)")
    p.add_argument("--out", default=DEFAULT_OUT, help="results folder (local runner)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="NAME=VALUE",
                   help="pin parameters to fixed values, e.g. --set steps=20 seq=64")
    p.add_argument("--sample-seed", type=int, default=0, help="random search's seed")
    p.add_argument("--project", help=f"wandb project (default: the config's, or "
                                     f"{DEFAULT_PROJECT})")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    config = load_config(args.config, parse_overrides(args.set))
    rows = run(config, args.out, args.count, args.sample_seed, args.use_wandb, args.project,
               progress=not args.no_progress)
    print(recommend(rows, config["metric"]["name"], config["metric"].get("goal", "minimize"))
          ["text"])
    return 1 if rows and all(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    run_cli(main)
