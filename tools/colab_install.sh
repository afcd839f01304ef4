#!/usr/bin/env bash
# Install tpu-budget-lab on a Colab or Kaggle runtime: what every notebook's first cell runs
# there (a clone uses `make setup` instead). The pinned requirements first, then the project as
# a package, then jax's CUDA plugin at the installed jax's version when the runtime has a GPU.
#   curl -sSL https://raw.githubusercontent.com/tpu-budget-lab/tpu-budget-lab/main/tools/colab_install.sh \
#     | bash -s -- "$(which python)"
set -euo pipefail
PYTHON="${1:-python3}"
REPO="${TPU_BUDGET_LAB_REPO:-tpu-budget-lab/tpu-budget-lab}"
"$PYTHON" -m pip install -q -r "https://raw.githubusercontent.com/${REPO}/main/requirements.txt" \
  "git+https://github.com/${REPO}"
if command -v nvidia-smi >/dev/null 2>&1; then
  JAX_VERSION="$("$PYTHON" -c 'from importlib import metadata; print(metadata.version("jax"))')"
  "$PYTHON" -m pip install -q "jax[cuda12]==${JAX_VERSION}"
fi
