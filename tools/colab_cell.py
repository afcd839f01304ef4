"""The one Colab/Kaggle install cell every notebook starts with, as a template.

Colab and Kaggle open a notebook without this repository, so the cell must be in each notebook
(it installs the project before the first `import shared`). It is written once, here:
`make sync` (`python -m tools.notebooks colab`) puts it into every notebook's first code cell and
`make check-sync` fails on a notebook whose cell differs.
"""

COLAB_CELL = """\
# On Colab or Kaggle: install this project as a package, with its pinned requirements (and
# jax's CUDA plugin on a GPU runtime). In a clone set up with `make setup` this does nothing.
import os
import shutil
import subprocess
import sys

if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
    from importlib import metadata

    REPO = "tpu-budget-lab/tpu-budget-lab"
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-r", f"https://raw.githubusercontent.com/{REPO}/main/requirements.txt",
                    f"git+https://github.com/{REPO}"], check=True)
    if shutil.which("nvidia-smi"):
        subprocess.run([*pip, f"jax[cuda12]=={metadata.version('jax')}"], check=True)"""
