"""shared.plan.frontier and shared.plan.slices.budget: what to change, and what it costs."""

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from shared import plan
from shared.errors import BadInput
from shared.plan import frontier, verdict
from shared.plan.compiler.executable import Executable, Workload
from shared.plan.slices import budget

GIB = 2**30


def _rows(request, mesh):
    """`batch` rows of 1 GiB bf16 in, doubled, out: bytes and time grow with the batch."""
    x = jax.ShapeDtypeStruct(
        (request.batch, 4096, 131072),
        jnp.bfloat16,
        sharding=NamedSharding(mesh, PartitionSpec("fsdp")),
    )
    return Workload([Executable("scale", jax.jit(lambda a: a * 2), (x,))])


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "plan-cache")
    monkeypatch.setitem(plan.WORKLOADS, "rows", _rows)


def _point(name, bytes_, seconds, batch=1, fits=True):
    return {
        "name": name,
        "bytes_per_device": bytes_,
        "roofline_lower_bound_s": seconds,
        "batch": batch,
        "fits": fits,
    }


def test_pareto_keeps_only_settings_nothing_beats_on_both():
    points = [
        _point("small slow", 1, 4),
        _point("big fast", 4, 1),
        _point("beaten", 4, 4),
        _point("middle", 2, 2),
        _point("too big", 0.5, 0.5, fits=False),
        _point("per sample", 8, 4, batch=4),
    ]  # 1 s a sample like "big fast", 2x the bytes
    assert {p["name"] for p in frontier.pareto(points)} == {"small slow", "big fast", "middle"}


def test_frontier_compiles_survivors_exactly_and_names_a_setting():
    request = plan.Request("rows", "none", "v5e-1", batch=1)
    result = frontier.frontier(request, {"batch": [1, 2, 4, 8, 16]}, progress=False)
    assert [p["batch"] for p in result["fast"]] == [1, 2, 4, 8, 16]
    assert all(not p["fast"] for p in result["exact"])
    fitting = [p["batch"] for p in result["exact"] if p["fits"]]
    assert 16 not in fitting  # 32 GiB in and out: beyond the 15.75 GiB of a v5e
    assert result["choice"] is not None and result["choice"] in result["frontier"]
    assert frontier.describe(result).startswith("use batch=")
    fig, ax = plt.subplots()
    frontier.plot(result, ax)
    plt.close(fig)
    again = frontier.frontier(request, {"batch": [1, 2, 4, 8, 16]}, progress=False)
    assert again["compiles"] == 0  # cached


def test_frontier_without_knobs_is_one_line():
    with pytest.raises(BadInput, match="no knobs"):
        frontier.frontier(plan.Request("rows", "none", "v5e-1"), progress=False)


def test_estimate_states_its_assumption_and_prices_the_slice():
    point = {"workload": "lora-train", "target": "v5e-8", "roofline_lower_bound_s": 0.9}
    est = budget.estimate(point, runs=4000, kind="on-demand")
    assert est["roofline_s"] == pytest.approx(3600) and est["assumed_efficiency"] == 0.4
    assert est["estimated_s"] == pytest.approx(9000) and "MFU" in est["efficiency_source"]
    assert est["dollars_per_hour"] == pytest.approx(8 * 1.20)  # v5e on-demand, us-central1
    assert est["dollars_estimated"] == pytest.approx(8 * 1.20 * 2.5)
    text = budget.describe(est)
    assert "lower bound" in text and "40%" in text and est["price_read"] in text
    runs = budget.runs_in(point, 9)
    assert runs["at_most"] == 36000 and runs["estimated"] == 14400


def test_a_token_budget_becomes_whole_steps_then_an_estimate():
    point = {
        "workload": "lora-train",
        "target": "v5e-8",
        "roofline_lower_bound_s": 0.9,
        "batch": 4,
        "seq": 2048,
    }
    bill = budget.for_tokens(point, 1e6, kind="spot")
    assert bill["steps"] == 123  # 1e6 / 8192 = 122.07: the partly filled last step counts
    assert bill["roofline_s"] == pytest.approx(123 * 0.9) and bill["price_kind"] == "spot"
    with pytest.raises(BadInput, match="tokens"):
        budget.for_tokens(point, 0)


def test_a_slice_without_a_price_keeps_its_times():
    est = budget.estimate(
        {"workload": "rollout", "target": "tpu7x-8", "roofline_lower_bound_s": 1.0}
    )
    assert est["dollars_per_hour"] is None and "no dollars" in budget.describe(est)


def test_a_session_counts_steps_and_their_price_and_says_kaggle_is_free():
    point = {"workload": "grpo", "target": "v5e-8", "roofline_lower_bound_s": 9.0}
    s = budget.session(point, sequences_per_step=32, hours=9)
    assert s["steps_at_most"] == 3600 and s["steps_estimated"] < s["steps_at_most"]
    assert s["completions_estimated"] == 32 * s["steps_estimated"]
    assert s["steps_per_dollar_spot"] > s["steps_per_dollar_on-demand"] > 0
    assert s["kaggle"].startswith("free: $0 within Kaggle's quota")
    assert "kaggle" not in budget.session({**point, "target": "v5p-8"}, sequences_per_step=32)


def test_every_workload_has_a_named_efficiency():
    from shared import plan

    assert set(plan.READS) <= set(budget.EFFICIENCY)  # READS: the real workloads, by name
