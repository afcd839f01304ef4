# tpu-budget-lab: set up, sync, check and execute the notebooks headless.
# `make help` lists the targets. Everything runs from the virtual environment in .venv/.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KERNEL := tpu-budget-lab
NB ?=
PARAMS ?=
# On a CUDA GPU machine: make setup JAX_EXTRA=cuda12 (or cuda13) adds what jax needs to run on
# it (requirements.txt already holds the CUDA 12 plugin that compiles GPU plans without a GPU;
# cuda13 replaces it, as two CUDA plugins cannot load in one process).
JAX_EXTRA ?=
STAMP := $(VENV)/.installed$(if $(JAX_EXTRA),-$(JAX_EXTRA))
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

# On a machine with neither a TPU nor an NVIDIA GPU, keep jax on the CPU: libtpu is installed
# for plan mode and would otherwise print TPU-initialisation noise. Plan mode still works.
ifeq ($(origin JAX_PLATFORMS),undefined)
  ifeq ($(strip $(wildcard /dev/accel0 /dev/vfio/0)$(shell command -v nvidia-smi 2>/dev/null)),)
    export JAX_PLATFORMS := cpu
  endif
endif
export WANDB_MODE ?= offline
export WANDB_SILENT ?= true

.PHONY: help setup sync check-sync execute test lint lab clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
	@echo "  variables: NB=06 (pick notebooks by prefix)  PARAMS='-p MODE plan -p TARGET v5e-8'"

setup: $(STAMP) ## create .venv, install requirements.txt and this project (editable), register the kernel

# Pinned requirements first, then the project itself, editable and without dependencies, so
# `import shared` works from any folder (JupyterLab, papermill, a command line). Re-runs when
# requirements.txt or pyproject.toml changes.
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(if $(filter cuda13,$(JAX_EXTRA)),$(PY) -m pip uninstall --quiet -y jax-cuda12-plugin jax-cuda12-pjrt)
	$(if $(JAX_EXTRA),$(PY) -m pip install --quiet "jax[$(JAX_EXTRA)]==$$($(PY) -c 'import jax; print(jax.__version__)')")
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python (tpu-budget-lab)"
	touch $@

sync: setup ## write the Colab cell (tools/colab_cell.py) into every notebook, then pair each .py with its .ipynb (jupytext --sync)
	$(PY) -m tools.notebooks colab $(NOTEBOOKS)
	$(VENV)/bin/jupytext --quiet --sync $(NOTEBOOKS)

check-sync: setup ## fail if a .py and its .ipynb disagree, an .ipynb holds outputs, a Colab cell differs from the template, or a notebook outgrows a story (350 lines, 2.5 code lines per prose line)
	$(PY) -m tools.notebooks check $(NOTEBOOKS)

execute: setup ## run notebooks headless into runs/ (NB=06 picks one, PARAMS='-p MODE plan')
	$(PY) -m tools.notebooks execute --kernel $(KERNEL) $(if $(NB),--select $(NB)) -- $(PARAMS)

# --reruns 1 --rerun-except . : a test whose worker crashed (SIGABRT/SIGSEGV inside jaxlib, seen
# once in CI in a test that passes alone) is run once more on a fresh worker; a test that fails
# in Python is never re-run (every error matches '.'), and a test that crashes twice fails.
test: setup ## run the test suite (unit tests + a smoke run of every notebook) on up to 4 cores
	$(PY) -m pytest -q --numprocesses auto --maxprocesses 4 --dist worksteal --reruns 1 --rerun-except .

lint: setup ## ruff over shared/, tools/, tests/, notebooks/, data/ and benchmarks/, and their formatting
	$(VENV)/bin/ruff check shared tools tests notebooks data benchmarks
	$(VENV)/bin/ruff format --check shared tools tests notebooks data benchmarks

# As root (a container, a rented VM's default user) Jupyter refuses to start without
# --allow-root; it serves the paired notebooks and the project kernel fine once allowed.
lab: setup ## open JupyterLab on the notebooks with the project kernel (as root too)
	$(VENV)/bin/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

clean: ## remove executed notebooks, results and caches (keeps .venv and data/)
	rm -rf runs results .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

# ---- remote execution: a GCP TPU VM (gcloud), a Colab runtime (colab), a Kaggle kernel (kaggle).
# Thin wrappers over tools/remote.py; PARAMS are the same papermill `-p NAME VALUE` pairs.
# TPU= names the TPU VM for tpu-*, and the Colab TPU (v5e1, v6e1) for colab-execute.
TPU ?=
GPU ?=
ZONE ?=
PROJECT ?=
WORKER ?=
WAIT ?= 1
KAGGLE_USER ?=
KAGGLE_ACCELERATOR ?= TpuV5E8
REMOTE := $(PY) -m tools.remote
TPU_VM = --tpu '$(TPU)' --zone '$(ZONE)' $(if $(PROJECT),--project '$(PROJECT)') $(if $(WORKER),--worker '$(WORKER)')

.PHONY: tpu-execute tpu-fetch tpu-logs tpu-stop colab-execute kaggle-push kaggle-pull

tpu-execute: setup ## run make execute on a TPU VM, copy runs/ results/ back (TPU= ZONE= [WAIT=0])
	$(REMOTE) tpu-execute $(TPU_VM) $(if $(NB),--nb '$(NB)') $(if $(filter 0 no false,$(WAIT)),--no-wait) -- $(PARAMS)

tpu-fetch: setup ## wait for the TPU VM's job, copy runs/ results/ back (TPU= ZONE=)
	$(REMOTE) tpu-fetch $(TPU_VM)

tpu-logs: setup ## show the TPU VM job's log, following it while it runs (TPU= ZONE=)
	$(REMOTE) tpu-logs $(TPU_VM)

tpu-stop: setup ## stop the TPU VM's job and clear a stale libtpu lock file (TPU= ZONE=)
	$(REMOTE) tpu-stop $(TPU_VM)

colab-execute: setup ## run one notebook on a Colab runtime into runs/colab/ (NB= [TPU=v6e1|GPU=T4])
	$(REMOTE) colab-execute $(if $(TPU),--tpu '$(TPU)') $(if $(GPU),--gpu '$(GPU)') $(if $(NB),--nb '$(NB)') -- $(PARAMS)

kaggle-push: setup ## push one notebook as a Kaggle TPU v5e-8 kernel (NB= [KAGGLE_USER=])
	$(REMOTE) kaggle-push $(if $(NB),--nb '$(NB)') $(if $(KAGGLE_USER),--user '$(KAGGLE_USER)') --accelerator '$(KAGGLE_ACCELERATOR)' -- $(PARAMS)

kaggle-pull: setup ## fetch that kernel's output into runs/kaggle/ (NB= [KAGGLE_USER=])
	$(REMOTE) kaggle-pull $(if $(NB),--nb '$(NB)') $(if $(KAGGLE_USER),--user '$(KAGGLE_USER)')
