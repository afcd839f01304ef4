"""Agreement with the field: every published setting of shared.plan.field compiled as a plan
request by the TPU compiler (deviceless), its verdict beside the outcome the source reports.

The JSON is rewritten after every point, so an interrupted run keeps what it finished;
`tests/test_field.py` holds the committed file to the table and every row to agreement.

    nice python benchmarks/bench_field.py --out benchmarks/results/field_validation.json
"""

import argparse
import dataclasses
import os
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")

from tqdm import tqdm  # noqa: E402

from shared import plan  # noqa: E402
from shared.errors import run_cli  # noqa: E402
from shared.plan import field  # noqa: E402
from shared.plan.compiler import buffers  # noqa: E402
from shared.report import results  # noqa: E402


def row(point: field.FieldPoint, verdict: dict) -> dict:
    worst = verdict["executables"][verdict["worst"]]
    return {
        "source": point.source,
        "tunix": point.tunix,
        "setting": point.setting,
        "field_fits": point.fits,
        "request": dataclasses.asdict(point.request),
        "differs": point.differs,
        "plan_fits": verdict["fits"],
        "agrees": verdict["fits"] == point.fits,
        "bytes_per_device": verdict["bytes_per_device"],
        "hbm_bytes": verdict["hbm_bytes"],
        "worst": verdict["worst"],
        "largest_buffers": [buffers.line(b) for b in worst["largest_buffers"][:3]],
        "compile_s": verdict["compile_s"],
        "cached": verdict["cached"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    started = time.perf_counter()
    report = {
        **results.header("benchmarks/bench_field.py", argv),
        "points": [],
    }
    for point in tqdm(field.POINTS, desc="field points", unit="point"):
        verdict = plan.plan_point(point.request)
        report["points"].append(row(point, verdict))
        report["wall_s"] = time.perf_counter() - started
        results.write(a.out, report)
        tqdm.write(
            f"{point.setting}: field {'fits' if point.fits else 'does not fit'}, plan "
            f"{'fits' if verdict['fits'] else 'does not fit'} "
            f"({verdict['bytes_per_device'] / 2**30:.2f} of {verdict['hbm_bytes'] / 2**30:.2f} GiB)"
        )
    disagree = [r["setting"] for r in report["points"] if not r["agrees"]]
    print(f"{len(report['points']) - len(disagree)} of {len(report['points'])} agree")
    return 1 if disagree else 0


if __name__ == "__main__":
    run_cli(main)
