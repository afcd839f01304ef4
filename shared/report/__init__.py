"""What every notebook does with its answers: check the mode, show and save tables and figures,
check its live numbers against the committed ones its answer quotes, and keep measured runs
beside their predictions.

- `modes`: MODE (local | plan | device) and the values each mode runs with;
- `tables`: tables and figures shown, saved under results/, key figures under docs/figures/;
- `committed`: the committed numbers (benchmarks/results/) and `agree`;
- `evidence`: the provenance of the committed numbers a notebook quotes (its last cell);
- `results`: the header and atomic writer every benchmark's results file shares;
- `ledger`: every device run's measurement beside the plan's prediction (results/ledger.csv).

The names below are the package's API: `from shared import report; report.show(...)`.
"""

from shared.report.committed import (
    RESULTS,
    STALE,
    VERDICT_KEY,
    agree,
    committed,
    committed_verdict,
)
from shared.report.evidence import evidence
from shared.report.modes import MODES, by_mode, check_mode, setting, use_mode
from shared.report.tables import (
    FIGURES,
    byte_table,
    bytes_text,
    results_dir,
    save_figure,
    save_table,
    show,
    table,
)

__all__ = [
    "FIGURES",
    "MODES",
    "RESULTS",
    "STALE",
    "VERDICT_KEY",
    "agree",
    "by_mode",
    "byte_table",
    "bytes_text",
    "check_mode",
    "committed",
    "committed_verdict",
    "evidence",
    "results_dir",
    "save_figure",
    "save_table",
    "setting",
    "show",
    "table",
    "use_mode",
]
