"""The price table: every row dated and sourced, slice arithmetic, and one-line bad input."""

import datetime

import pytest

from shared.errors import BadInput
from shared.hardware import prices


def test_every_row_has_a_date_a_source_and_a_reason_when_empty():
    rows = prices.table()
    assert rows and len({(r["item"], r["kind"]) for r in rows}) == len(rows)  # one fact, once
    for row in rows:
        datetime.date.fromisoformat(row["read"])
        assert row["source"].startswith("https://"), row
        assert row["unit"], row
        assert row["value"] is not None or row["note"], row  # unpublished says why


def test_slice_arithmetic():
    v5e = prices.lookup("v5e", "on-demand").value
    assert prices.price_per_hour("v5e-8") == pytest.approx(8 * v5e)  # v5e-8: 8 chips
    assert prices.price_per_hour("v5litepod-8") == prices.price_per_hour("v5e-8")
    v5p = prices.lookup("v5p", "spot").value
    assert prices.price_per_hour("v5p-8", "spot") == pytest.approx(4 * v5p)  # v5p-8: 4 chips
    assert prices.price_per_hour("h100") == prices.lookup("h100", "on-demand").value  # 1 GPU
    assert prices.cost("v6e-8", 10, "spot") == pytest.approx(10 * 8 * 0.54421)
    assert (
        prices.price_per_hour("v6e-4", "3y")
        < prices.price_per_hour("v6e-4", "1y")
        < prices.price_per_hour("v6e-4")
    )


def test_us_central1_list_prices():
    assert prices.REGION == "us-central1"
    assert prices.price_per_hour("v5e-1") == pytest.approx(1.20)
    assert prices.price_per_hour("v5p-8") == pytest.approx(4 * 4.20)
    assert prices.price_per_hour("v6e-1") == pytest.approx(2.70)


def test_budget_in_kaggle_sessions_and_weeks():
    nine = prices.budget(9)
    assert nine["kaggle_sessions"] == 1 and nine["fits_one_kaggle_session"]
    assert nine["kaggle_dollars"] == 0 and nine["dollars"] == pytest.approx(9 * 8 * 1.20)
    thirty = prices.budget(30, "v6e-8", "spot")
    assert (thirty["kaggle_sessions"], thirty["kaggle_weeks"]) == (4, 2)
    assert not thirty["fits_one_kaggle_week"]


def test_colab_hours_from_the_rate_the_ui_shows():
    pro = prices.colab_hours("colab-pro", units_per_hour=2.0)
    assert pro["hours_per_month"] == pytest.approx(50)
    assert pro["dollars_per_hour"] == pytest.approx(9.99 / 100 * 2)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: prices.price_per_hour("v9z-8"), "unknown target"),
        (lambda: prices.price_per_hour("v5e-8", "reserved"), "on-demand, spot, 1y, 3y"),
        (lambda: prices.price_per_hour("v4-8"), "priced chip"),
        (lambda: prices.price_per_hour("h100", "1y"), "on-demand, spot"),
        (lambda: prices.price_per_hour("tpu7x-8"), "contact your account team"),  # unpublished
        (lambda: prices.price_per_hour("v5e-8", "3y"), "no 3y price for v5e"),
        (lambda: prices.price_per_hour("h100", "spot"), "no spot price for h100"),
        (lambda: prices.cost("v5e-8", 0), "hours must be positive"),
        (lambda: prices.budget(-1), "hours must be positive"),
        (lambda: prices.colab_hours("colab-max", 2), "colab-pro, colab-pro+"),
        (lambda: prices.colab_hours("colab-pro", 0), "units-per-hour must be positive"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(BadInput) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_rented_gpu_machine_is_priced_per_gpu_with_its_host():
    """A GPU machine on GCP is its accelerators plus the host machine type they come with,
    which the billing catalog prices apart: a T4 pair is twice (T4 + n1-standard-4)."""
    from shared.hardware import rent

    for slices in rent.GPU_SLICES.values():
        for target in slices:
            assert prices.price_per_hour(target) > 0, target
    assert prices.price_per_hour("t4-2") == pytest.approx(2 * (0.35 + 0.19))
    assert prices.lookup("kaggle-gpu", "on-demand").value == 0.0
    row = prices.lookup("l4", "spot")
    assert row.read == "2026-12-07" and "g2-standard-4" in row.note
