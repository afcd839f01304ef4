"""The one Colab/Kaggle install cell every notebook starts with, as a template.

Colab and Kaggle open a notebook without this repository, so the cell must be in each notebook
(it installs the project before the first `import shared`); what it installs is one script,
tools/colab_install.sh, so the cell stays a few lines. It is written once, here:
`make sync` (`python -m tools.notebooks colab`) puts it into every notebook's first code cell and
`make check-sync` fails on a notebook whose cell differs.
"""

COLAB_CELL = """\
# On Colab or Kaggle: install this project (tools/colab_install.sh); in a clone, `make setup`.
import os
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    script = "raw.githubusercontent.com/tpu-budget-lab/tpu-budget-lab/main/tools/colab_install.sh"
    if os.system(f"curl -sSL https://{script} | bash -s -- {sys.executable}"):
        raise RuntimeError("installing tpu-budget-lab failed: see the output above")"""
