"""Agreement with the field: the committed verdicts of every published setting in
shared.plan.field (benchmarks/bench_field.py compiles them; a full-size model takes minutes, so
the test reads the committed file) are for today's table and versions, and all agree."""

import json

from shared import plan
from shared.paths import ROOT
from shared.plan import field
from shared.plan.workloads.request import same_request

COMMITTED = ROOT / "benchmarks" / "results" / "field_validation.json"


def test_the_committed_verdicts_answer_todays_table_with_todays_versions():
    report = json.loads(COMMITTED.read_text())
    recorded = [p["request"] for p in report["points"]]
    assert len(recorded) == len(field.POINTS) and all(
        same_request(r, p.request) for r, p in zip(recorded, field.POINTS, strict=True)
    ), "field table changed: rerun benchmarks/bench_field.py"
    assert report["versions"] == plan.versions(), "versions changed: rerun bench_field.py"


def test_every_field_point_agrees_with_its_plan_verdict():
    report = json.loads(COMMITTED.read_text())
    for point in report["points"]:
        assert point["plan_fits"] == point["field_fits"] and point["agrees"], point["setting"]
        # the evidence is listed (a program the compiler refused has no buffers to list)
        assert point["largest_buffers"] or not point["plan_fits"], point["setting"]


def test_the_field_brackets_the_tunix_0_1_6_rollout_boundary():
    outcomes = {
        p.request.batch: p.fits
        for p in field.POINTS
        if p.request.workload == "rollout" and p.request.tunix == "0.1.6"
    }
    assert outcomes == {200: True, 256: False}
