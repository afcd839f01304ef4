"""Every notebook runs headless with tiny parameters, through the code path of `make execute`.

Also: the pairing check catches a stale .ipynb or one with outputs, parameters are typed like
papermill's CLI, and a failing notebook leaves its partial copy, traceback included, beside the
last successful run instead of over it.
"""

import csv
import json
import math
from unittest import mock

import nbformat
import papermill
import pytest
import yaml

from shared import sweep
from shared.errors import BadInput
from shared.paths import ROOT
from shared.plan.slices.jobs import WhichSlice
from tools.colab_cell import COLAB_CELL
from tools.notebooks import (
    colab_problems,
    execute,
    main,
    notebook_sources,
    pairing_problems,
    parse_parameters,
    story_problems,
    write_colab_cell,
)

# Tiny parameters per notebook: enough to exercise every cell on 2 CPU cores in CI. One arm,
# one trial, one family and a two-point frontier: more of each reruns the same code.
SMOKE = {
    "01_rollout_sizing": [
        {
            "MODEL": "gemma2-tiny",
            "BATCH_SIZES": [1, 4],
            "STEPS": [4, 8],
            "PROMPT_LEN": 8,
            "TRIALS": 1,
        },
        {
            "MODE": "plan",
            "MODEL": "gemma2-tiny",
            "PLAN_BATCHES": [8],
            "STEPS": [8],
            "PROMPT_LEN": 8,
            "CACHE_SIZE": 64,
        },
    ],
    "02_lora_overhead": [
        {
            "MODEL": "gemma2-tiny",
            "RANK": 4,
            "BATCH_SIZES": [2],
            "STEPS": 4,
            "PROMPT_LEN": 8,
            "TRIALS": 1,
            "TRAIN_STEPS": 4,
            "TRAIN_BATCH": 2,
            "TRAIN_SEQ": 32,
        },
        {
            "MODE": "plan",
            "MODEL": "gemma2-tiny",
            "RANK": 4,
            "STEPS": 8,
            "PROMPT_LEN": 8,
            "BATCH_SIZES": [8],
            "TRAIN_BATCH": 2,
            "TRAIN_SEQ": 64,
            "FRONTIER_GRID": {"microbatches": [1]},  # its exact compile is section 5's, cached
        },
    ],
    "03_sparse_logits_exactness": [
        {
            "EXACT_SHAPE": [2, 40, 32, 3000],
            "EXACT_CHUNKS": [12, 1000],
            "MODEL_SHAPE": [2, 16],
            "TIME_SHAPE": [2, 32, 64, 8192],
            "ROUNDS": 1,
        }
    ],
    "03_sparse_logits_fit": [
        {
            "MODE": "plan",
            "MODEL": "gemma3-tiny",
            "SEQ": 64,
            "MEM_BATCHES": [2],
            "MAX_BATCH": False,
            "PLAN_BATCHES": [8],
        }
    ],
    "04_pretrain_ablations": [
        {
            "STEPS": 3,
            "BATCH": 16,
            "SEQ": 64,
            "VOCAB_SIZE": 512,
            "ARMS": ["microbatches"],
        },
        {
            "MODE": "plan",
            "MODEL": "tiny",
            "SEQ": 128,
            "PLAN_BATCHES": [8],
            "PLAN_SEARCH": False,
            "COST_TARGETS": ["v5e-8"],
            "REAL_ARM": {"model": "tiny", "batch": 8, "seq": 128},
        },
    ],
    "05_hparam_sweep": [
        {"COUNT": 1, "STEPS": 3, "SEQ": 64, "VOCAB_SIZE": 512},
        {
            "MODE": "plan",
            "TARGET": "v5e-8",
            "REAL_TRIAL": {"model": "tiny", "steps": 30, "batch": 8, "seq": 128},
        },
    ],
    "06_scaling_plan": [
        {
            "EMBED_V": 16384,
            "EMBED_D": 256,
            "PROBE_SEQ": 64,
            "PROBE_BATCHES": [4, 8],
            "PROBE_REMATS": ["none"],
        },
        {
            "MODE": "plan",
            "TARGET": "v5p-8",
            "EMBED_V": 16384,
            "EMBED_D": 256,
            "PROBE_MODEL": "llama3-tiny",
            "PROBE_SEQ": 64,
            "PROBE_BATCHES": [4, 8],
            "PROBE_REMATS": ["decoder"],
        },
    ],
    "07_grpo_budget": [
        {"MODEL": "gemma2-tiny", "TRAIN_STEPS": 2, "OTHER_MODEL": None},
        {
            "MODE": "plan",
            "MODEL": "gemma2-tiny",
            "PROMPT_LEN": 8,
            "COMPLETION_LEN": 4,
            "NUM_GENERATIONS": 2,
            "LORA_RANK": 4,
            "SEARCH": False,
        },
    ],
    "08_which_slice": [{"SLICES": ["v6e-1"], "MAX_SLICES": 1}],
    "09_your_own_step": [{"STEPS": 3, "MULTIPLE_OF": 64}],
}


# Local smoke runs bound by compiling many small CPU programs (the tunix Sampler, qwix's eager
# LoRA pass, GRPO's phases, the logits checks): their kernels compile without XLA's LLVM
# optimisations, as the pytest process does (conftest). Measured per run on 2 busy cores:
# 01 34 -> 27 s, 02 66 -> 52 s, 03 exactness 45 -> 32 s, 07 67 -> 45 s. The training runs of
# 04 and 05 are bound by their steps instead (04: 38 -> 50 s with it), and plan runs by TPU
# compiles, which it does not touch: those keep the defaults.
UNOPTIMISED_CPU = {
    "01_rollout_sizing",
    "02_lora_overhead",
    "03_sparse_logits_exactness",
    "07_grpo_budget",
}


def _which_slice_answers_with_an_exact_compile(results) -> None:
    """08's local LoRA job is `--cheapest`'s whole path on one slice, the compiler's verdicts
    included: checked here rather than searched a second time in test_cheapest (~50 s)."""
    (job,) = [j for j in WhichSlice.local().jobs if j.workload == "lora-train"]
    result = json.loads((results / f"job_{job.model}_{job.workload}.json").read_text())
    choice = result["choice"]
    assert choice["target"] == "v6e-1" and choice["bytes_per_device"] <= choice["hbm_bytes"]
    assert choice["runs"] == math.ceil(job.amount / (choice["batch"] * job.request().seq))
    assert choice["hours"] == pytest.approx(choice["roofline_hours"] / 0.4)
    assert result["compiles"] >= 1


def _sweep_trial_is_a_real_training_run(results) -> None:
    """05's local trial is notebooks/05_sweep.yaml through shared.pretrain.train (the tests of
    shared.sweep run a stand-in program): its row is the trial's own summary and curve."""
    with (results / "trials.csv").open() as handle:
        (row,) = csv.DictReader(handle)
    assert row["status"] == "done", row
    summary = json.loads((results / "trials" / row["trial_id"] / "summary.json").read_text())
    assert float(row["val_loss"]) == summary["val_loss"] and summary["steps_done"] == 3
    assert float(row["tok_per_s"]) == summary["tok_per_s"] and summary["config"] == "tiny"
    config = yaml.safe_load((ROOT / "notebooks" / "05_sweep.yaml").read_text())
    assert float(row["lr"]) in config["parameters"]["lr"]["values"] and row["mlp"] == "swiglu"
    assert [c["step"] for c in sweep.read_curve(results, row["trial_id"])] == [1, 2, 3]


# What a smoke run's results must say, beyond running, by (notebook, mode): for a path whose
# smoke is its only real run in the suite.
RESULT_CHECKS = {
    ("05_hparam_sweep", "local"): _sweep_trial_is_a_real_training_run,
    ("08_which_slice", "local"): _which_slice_answers_with_an_exact_compile,
}


def test_every_notebook_has_smoke_parameters():
    missing = [s.stem for s in notebook_sources() if s.stem not in SMOKE]
    assert not missing, f"add tiny smoke parameters for {missing} to SMOKE in this file"


@pytest.fixture(scope="session")
def _session_plan_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("plan-cache")


@pytest.fixture
def notebook_plan_cache(_session_plan_cache, monkeypatch):
    """Notebook kernels share one plan cache per test process, not the checkout's .cache/plan:
    what a smoke run compiles does not depend on what the developer planned before, and the
    smoke runs still reuse each other's verdicts as in CI."""
    monkeypatch.setenv("TPU_BUDGET_LAB_PLAN_CACHE", str(_session_plan_cache))


@pytest.mark.parametrize(
    "stem, params",
    [(stem, p) for stem, runs in SMOKE.items() for p in runs],
    ids=lambda v: v if isinstance(v, str) else v.get("MODE", "local"),
)
@pytest.mark.usefixtures("one_cpu_device", "notebook_plan_cache")
def test_notebook_runs_headless(stem, params, tmp_path, monkeypatch):
    (source,) = [s for s in notebook_sources() if s.stem == stem]
    if stem in UNOPTIMISED_CPU and params.get("MODE", "local") == "local":
        monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    results = tmp_path / "results"
    output = execute(source, {**params, "RESULTS_DIR": str(results)}, tmp_path / "runs")
    executed = nbformat.read(output, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(results.glob("*.csv")), "a notebook writes its tables under RESULTS_DIR"
    if check := RESULT_CHECKS.get((stem, params.get("MODE", "local"))):
        check(results)
    if any(results.glob("*.png")):  # a saved figure is also shown in the executed notebook
        assert any(
            "image/png" in o.get("data", {}) for c in executed.cells for o in c.get("outputs", [])
        ), "figures missing: is MPLBACKEND=Agg set?"


def test_committed_notebooks_are_paired_and_clean():
    problems = [p for s in notebook_sources() for p in pairing_problems(s)]
    assert not problems, problems


def test_committed_notebooks_read_as_stories():
    problems = [p for s in notebook_sources() for p in story_problems(s)]
    assert not problems, problems


def test_every_notebook_starts_with_the_colab_template():
    problems = [p for s in notebook_sources() for p in colab_problems(s)]
    assert not problems, problems


def test_a_drifted_colab_cell_is_found_and_rewritten_from_the_template(tmp_path):
    source = tmp_path / "99_demo.py"
    intro = "# %% [markdown]\n# A question.\n\n"
    rest = "\n\n# %%\nx = 1\n"
    drifted = COLAB_CELL.split("\n", 1)[1]  # the template without its first line
    source.write_text(f"{intro}# %%\n{drifted}{rest}")
    (problem,) = colab_problems(source)
    assert "make sync" in problem
    assert write_colab_cell(source) and colab_problems(source) == []
    assert source.read_text() == f"{intro}# %%\n{COLAB_CELL}{rest}"
    assert not write_colab_cell(source)  # already the template: the file is left alone


def test_story_check_counts_code_against_prose(tmp_path):
    source = tmp_path / "99_demo.py"
    source.write_text("# %% [markdown]\n# One line of prose.\n\n# %%\n# a comment\nx = 1\ny = 2\n")
    assert story_problems(source) == []  # 2 code lines for 1 of prose; the comment is neither
    source.write_text(source.read_text() + "z = 3\n")
    (problem,) = story_problems(source)
    assert "3 code lines for 1 of prose" in problem


def _pair(tmp_path, code="x = 1\n"):
    import jupytext

    source = tmp_path / "99_demo.py"
    source.write_text(f"# %%\n{code}")
    jupytext.write(jupytext.read(source), tmp_path / "99_demo.ipynb")
    return source


def test_pairing_check_finds_drift_and_outputs(tmp_path):
    source = _pair(tmp_path)
    assert pairing_problems(source) == []
    source.write_text("# %%\nx = 2\n")
    assert any("differ" in p for p in pairing_problems(source))
    source = _pair(tmp_path)
    twin = nbformat.read(tmp_path / "99_demo.ipynb", as_version=4)
    twin.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    twin.cells[0].execution_count = 1
    nbformat.write(twin, tmp_path / "99_demo.ipynb")
    assert any("outputs" in p for p in pairing_problems(source))
    (tmp_path / "99_demo.ipynb").unlink()
    assert any("missing" in p for p in pairing_problems(source))


def test_parameters_are_typed_like_papermill():
    params = parse_parameters(
        [
            "-p",
            "MODE",
            "plan",
            "-p",
            "BATCH",
            "8",
            "-p",
            "LR",
            "3e-4",
            "-p",
            "SIZES",
            "[1, 2]",
            "-p",
            "FLAG",
            "False",
        ]
    )
    assert params == {"MODE": "plan", "BATCH": 8, "LR": 3e-4, "SIZES": [1, 2], "FLAG": False}
    with pytest.raises(BadInput):
        parse_parameters(["MODE", "plan"])


def test_a_failed_run_keeps_its_partial_notebook_beside_the_last_good_one(tmp_path):
    source = tmp_path / "98_demo.py"
    source.write_text('# %%\nprint("good run")\n')
    runs = tmp_path / "runs"
    good = execute(source, {}, runs)
    assert good == runs / "98_demo.ipynb" and "good run" in good.read_text()

    source.write_text('# %%\nprint("before")\n\n# %%\nraise ValueError("boom")\n')
    with pytest.raises(papermill.PapermillExecutionError):
        execute(source, {}, runs)
    assert "good run" in good.read_text() and "boom" not in good.read_text()
    failed = runs / "98_demo.failed.ipynb"
    assert "before" in failed.read_text() and "boom" in failed.read_text()
    assert sorted(p.name for p in runs.iterdir()) == ["98_demo.failed.ipynb", "98_demo.ipynb"]

    source.write_text('# %%\nprint("fixed")\n')
    execute(source, {}, runs)
    assert "fixed" in good.read_text() and not failed.exists()


def test_a_failed_run_says_where_its_partial_notebook_is_in_one_line(tmp_path, capsys):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    (folder / "98_demo.py").write_text('# %%\nraise ValueError("boom")\n')
    with mock.patch("tools.notebooks.NOTEBOOK_DIR", folder):
        code = main(["execute", "--select", "98", "--out", str(tmp_path / "runs")])
    assert code == 1
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "FAILED" in ln]
    assert "ValueError: boom" in line and line.endswith(str(tmp_path / "runs/98_demo.failed.ipynb"))
    assert not (tmp_path / "runs" / "98_demo.ipynb").exists()


def test_unknown_notebook_prefix_names_the_valid_ones():
    with pytest.raises(BadInput, match="06_scaling_plan"):
        notebook_sources("99")


def test_papermill_reads_every_parameter():
    """papermill infers parameters line by line and skips a line with a second "=" (in its
    comment, say): passing that parameter then warns "Passed unknown parameter"."""
    for source in notebook_sources():
        twin = source.with_suffix(".ipynb")
        cell = next(
            c
            for c in nbformat.read(twin, as_version=4).cells
            if "parameters" in c.metadata.get("tags", [])
        )
        assigned = {
            line.split("=")[0].strip()
            for line in cell.source.splitlines()
            if "=" in line and not line.startswith((" ", "#"))
        }
        assert set(papermill.inspect_notebook(str(twin))) == assigned, source.name


def test_the_colab_install_script_installs_the_pins_the_project_and_cuda_on_a_gpu(tmp_path):
    """tools/colab_install.sh, run with a stand-in python (and nvidia-smi) that record calls."""
    import shutil
    import subprocess

    from shared.paths import ROOT

    log = tmp_path / "calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {log}\n[ "$1" = -c ] && echo 0.10.2\nexit 0\n')
    python.chmod(0o755)
    script = [shutil.which("bash"), str(ROOT / "tools" / "colab_install.sh"), str(python)]
    (tmp_path / "bin").mkdir()  # a PATH without nvidia-smi, whatever this machine has
    env = {"PATH": str(tmp_path / "bin"), "TPU_BUDGET_LAB_REPO": "me/lab"}
    subprocess.run(script, check=True, env=env)
    (install,) = log.read_text().splitlines()
    assert "-r https://raw.githubusercontent.com/me/lab/main/requirements.txt" in install
    assert install.endswith("git+https://github.com/me/lab")
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    log.unlink()
    subprocess.run(script, check=True, env=env)
    assert log.read_text().splitlines()[-1] == "-m pip install -q jax[cuda12]==0.10.2"
