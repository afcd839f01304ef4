"""Notebook 07's setting (shared.grpo.settings.GRPOBudget) and its findings
(shared.findings.grpo): the presets, bad values in one line, the checks against the committed
plan."""

import dataclasses
import re

import pytest

from shared import plan, report
from shared.errors import BadInput
from shared.findings import grpo as findings
from shared.grpo.settings import GRPOBudget
from shared.plan.workloads import grpo as grpo_plan


def test_grpo_budget_field_is_the_committed_recipe():
    """The field preset is tunix's Gemma GRPO demo on a v5e-8: the recipe the committed plan
    (the Takeaway's numbers) answered, so plan mode checks itself against that file."""
    field = GRPOBudget.field()
    request = plan.Request(**field.request_fields())
    recipe = grpo_plan.settings(request)
    assert (recipe.prompt_len, recipe.completion_len, recipe.num_generations) == (256, 768, 4)
    assert (recipe.prompts_per_step, recipe.lora_rank, recipe.beta) == (2, 64, 0.08)
    assert (field.model, field.target, field.hours) == ("gemma3-1b", "v5e-8", 9.0)
    if report.committed(findings.QUOTED) is not None:
        assert findings.committed_plan(request) is not None


def test_grpo_budget_local_is_tiny_and_takes_the_notebooks_parameters():
    local = GRPOBudget.local()
    assert dataclasses.asdict(local) == {
        "model": "gemma3-tiny",
        "target": "v5e-8",
        "prompt_len": 8,
        "completion_len": 8,
        "num_generations": 2,
        "micro_batch": 8,
        "lora_rank": 4,
        "logps": "tunix",
        "beta": 0.08,
        "weights": "dummy",
        "train_steps": 3,
        "hours": 9.0,
    }
    request = plan.Request(**local.request_fields())
    assert findings.committed_plan(request) is None  # another recipe: nothing to compare
    setting = report.setting("local", GRPOBudget, MODEL=None, TRAIN_STEPS=2, LOGPS="chunked")
    assert (setting.model, setting.train_steps, setting.logps) == ("gemma3-tiny", 2, "chunked")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"model": "gemma9-1b"}, "unknown model 'gemma9-1b'"),
        ({"target": "v9-8"}, "unknown target 'v9-8'"),
        ({"logps": "fast"}, "unknown log-prob implementation (LOGPS) 'fast'"),
        ({"weights": "mine"}, "unknown weights 'mine'"),
        ({"completion_len": 0}, "COMPLETION_LEN must be positive, got 0"),
        ({"hours": -1.0}, "HOURS must be positive"),
        ({"micro_batch": 6}, "MICRO_BATCH (6) must be a multiple of NUM_GENERATIONS (4"),
        ({"num_generations": 1}, "at least 2"),
        ({"beta": -0.1}, "BETA is a KL weight, 0 or more"),
    ],
)
def test_grpo_budget_refuses_bad_values_in_one_line(bad, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        dataclasses.replace(GRPOBudget.field(), **bad)


def test_committed_checks_compare_only_the_same_recipe(capsys):
    quoted = {
        "verdict": {"bytes_per_device": 100},
        "logps_search": {"tunix": {"max_batch": 72}, "chunked": {"max_batch": 1744}},
        "session": {"steps_at_most": 3547},
        "wider_meshes": {"4x2": {"session": {"steps_at_most": 5000}}, "2x4": {"session": None}},
    }
    findings.check_verdict({"bytes_per_device": 100}, quoted)
    searches = {"log-probs, tunix": {"max_batch": 64}, "log-probs, chunked": {"max_batch": 1744}}
    findings.check_logps_searches(searches, quoted)
    findings.check_session({"steps_at_most": 3547}, quoted)
    rows = [  # the recipe on its own mesh, then on more tp (one did not fit when committed)
        {"config": "recipe", "mesh": "8x1", "steps_at_most": 3547},
        {"config": "recipe on 4x2", "mesh": "4x2", "steps_at_most": 4000},
        {"config": "recipe on 2x4", "mesh": "2x4", "steps_at_most": 9000},
    ]
    findings.check_wider_sessions(rows, quoted)
    lines = capsys.readouterr().out.splitlines()
    assert [("agrees" in line, "DIFFERS" in line) for line in lines] == [
        (True, False),
        (False, True),
        (True, False),
        (True, False),
        (False, True),  # 4x2's steps differ from the committed 5,000
    ]
    for check in (findings.check_verdict, findings.check_logps_searches, findings.check_session):
        check({}, None)  # no committed plan for this recipe: nothing to say
    findings.check_wider_sessions(rows, None)
    assert capsys.readouterr().out == ""


def test_base_copies_verdict_counts_the_reference():
    assert findings.base_copies_verdict("m", 2, 0.08).endswith("as the plan counts them")
    assert findings.base_copies_verdict("m", 1, 0.0).endswith("as the plan counts them")
    assert "NOT the 2x" in findings.base_copies_verdict("m", 1, 0.08)
