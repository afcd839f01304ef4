"""Notebook 02's answer beside the committed one: this run's LoRA facts checked against those
its Takeaway quotes (benchmarks/results/02_lora_scale.json), and LoRA's rollout speed against the
base model's.

The committed file's `local` entry holds the facts measured on a CPU (adapter bytes, what
`free_base` frees) for one model and rank; a run with that model and rank must reproduce them,
any other run has nothing to compare with.
"""

from __future__ import annotations

import math

from shared import report

QUOTED = "02_lora_scale"  # bench_lora_scale.py: the local facts and gemma4-31b's boundaries


def check_local(quoted: dict, model: str, rank: int, lora_bytes: int, freed_bytes: int) -> None:
    """The adapters' bytes and the bytes `free_base` freed, against the committed run's where
    this run has its model and rank (else printed with nothing to compare)."""
    local = quoted.get("local", {})
    same = (local.get("model"), local.get("rank")) == (model, rank)
    report.agree("adapter bytes", lora_bytes, local["lora_bytes"] if same else None)
    report.agree("bytes free_base frees", freed_bytes, local["freed_bytes"] if same else None)


def against_base(rows: list[dict]) -> list[dict]:
    """Each rollout row with `decode_vs_base`: its decode time per token over the base model's
    at the same batch, minus 1 (NaN where either did not run). The base rows ("rollout") get 0."""
    base = {r["batch"]: r for r in rows if r["workload"] == "rollout"}
    compared = []
    for row in rows:
        ref = base.get(row["batch"], {})
        ratio = row.get("decode_ms_per_token", math.nan) / ref.get("decode_ms_per_token", math.nan)
        compared.append({**row, "decode_vs_base": ratio - 1})
    return compared
