"""Notebook 05's setting (shared.sweep.settings.HparamSweep) and its findings
(shared.findings.sweep): the presets pin the sweep config, bad values fail in one line, the real
sweep's price and the checks against the committed trials."""

import pytest

from shared import report, sweep
from shared.errors import BadInput
from shared.sweep import config as sweep_config


def test_hparam_sweep_presets_pin_the_config_and_a_bad_value_is_one_line():
    import dataclasses

    from shared.sweep.settings import HparamSweep

    local, field = HparamSweep.local(), HparamSweep.field().resolved()
    assert (local.model, local.steps, local.batch, local.seq) == ("tiny", 30, 8, 128)
    assert (field.model, field.steps, field.batch, field.seq) == ("130m", 2000, 32, 2048)
    # The local preset pins exactly the YAML's fixed values: the same trials, the same ids.
    ids = [sweep_config.trial_id(t) for t in sweep.expand(local.load())]
    assert ids == [sweep_config.trial_id(t) for t in sweep.expand(sweep_config.NOTEBOOK_05)]
    pinned = field.pinned()
    assert (pinned["config"], pinned["warmup"], pinned["vocab-size"]) == ("130m", 200, 32768)
    arm = report.setting("local", HparamSweep, ARM={"mlp": "relu2"}, COUNT=None)
    assert arm.load()["parameters"]["mlp"] == {"value": "relu2"} and arm.count is None
    for bad in (
        {"steps": 0},
        {"model": "13m"},
        {"count": 0},
        {"basin_tolerance": 0},
        {"price_kind": "cheap"},
        {"target": "v9z-1"},
        {"arm": ["mlp"]},
        {"real_trial": {"model": "130m", "steps": 10}},
    ):
        with pytest.raises(BadInput) as err:
            dataclasses.replace(local, **bad)
        assert "\n" not in str(err.value)


def test_sweep_findings_price_the_real_sweep_and_check_the_committed_trials(capsys):
    from shared.findings import sweep as findings
    from shared.sweep.settings import HparamSweep

    if report.committed(findings.SWEEP) is None:
        pytest.skip("no committed results here (a package install)")
    setting = HparamSweep.local()
    point = findings.real_point(setting, "local")  # notebook 04's committed v6e-1 verdict
    est = findings.sweep_cost(setting, point, trials=14)
    assert est["runs"] == 28000 and round(est["dollars_estimated"], 2) == 0.87
    trials = findings.quoted("trials")
    done = sweep.usable(trials)
    advice = sweep.recommend(trials, tolerance=setting.basin_tolerance)
    assert findings.check_trials(done, advice["best"], "val_loss", "minimize")
    printed = capsys.readouterr().out
    assert printed.count("agrees with") == 2 and "DIFFERS" not in printed
    answers = findings.summary(setting, advice, "val_loss", len(done), len(trials), est)
    committed = findings.quoted("summary")
    assert [a["question"] for a in answers] == [c["question"] for c in committed]
    assert answers[:-1] == committed[:-1]  # 05_sweep_cpu.json holds no price for the real sweep
    assert answers[-1]["answer"] == "$0.87, about 1.59 h"
    assert findings.check_trials([], None, "val_loss", "minimize") is False


def test_a_real_trials_shape_follows_the_real_trial_the_user_sets():
    from shared.sweep.settings import HparamSweep

    trial = {"model": "tiny", "steps": 50, "batch": 4, "seq": 64}
    setting = report.setting("device", HparamSweep, REAL_TRIAL=trial, STEPS=None)
    assert (setting.model, setting.steps, setting.batch, setting.seq) == ("tiny", 50, 4, 64)
