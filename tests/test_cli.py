"""The front door: `tpu-budget-lab QUESTION WORKLOAD ...` (shared.plan.cli.main). One
sub-command per question, each with only its workload's flags and a short help; names that
ignore case and typos that get a suggestion; the atlas's look-up pointing past its columns."""

import json

import pytest
from conftest import cli_exit

from shared.errors import BadInput, choose
from shared.plan.atlas import lookup
from shared.plan.cli import main as front
from shared.plan.workloads import READS


def _help(argv: list[str], capsys) -> list[str]:
    with pytest.raises(SystemExit):
        front.build_parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out.splitlines()


def test_every_help_is_under_40_lines_and_opens_with_an_example(capsys):
    from shared.plan.slices.job import JOB_UNITS

    pages = [[], *([q] for q in (*front.QUESTIONS, "lookup"))]
    pages += [
        [question, workload]
        for question in front.QUESTIONS
        for workload in READS
        if question != "cheapest" or workload in JOB_UNITS
    ]
    for argv in pages:
        lines = _help(argv, capsys)
        assert len(lines) < 40, (argv, len(lines))
        assert lines[0].startswith("usage: tpu-budget-lab"), argv
        assert lines[2].startswith(("example: tpu-budget-lab", "examples:")), (argv, lines[2])


def test_a_workload_takes_only_the_flags_it_reads(capsys):
    """`--beta` is GRPO's: a rollout's parser has no such flag, and argparse says so."""
    parser = front.build_parser()
    assert parser.parse_args(["fit", "grpo", "--model", "m", "--target", "v5e-1", "--beta", "0"])
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["fit", "rollout", "--model", "m", "--target", "v5e-1", "--beta", "0"])
    assert exit_.value.code == 2 and "unrecognized arguments: --beta" in capsys.readouterr().err
    rollout = "\n".join(_help(["max-batch", "rollout"], capsys))
    assert "--cache-size" in rollout and "--lora-rank" not in rollout and "--tokens" not in rollout
    cheapest = "\n".join(_help(["cheapest", "sft"], capsys))
    assert "--tokens" in cheapest and "--sequences" not in cheapest and "--target" not in cheapest


def test_the_sub_command_answers_as_the_flat_command_line_does(tmp_path, monkeypatch, capsys):
    """Same code behind both: one verdict, printed as the same JSON (the second from the
    plan cache the first wrote, so it also says when that verdict was compiled)."""
    from shared.plan import verdict
    from shared.plan.__main__ import main as flat

    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path)
    args = ["sft", "--model", "gemma3-tiny", "--target", "v5e-1", "--batch", "2", "--seq", "32"]
    assert flat([*args, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert front.main(["fit", *args, "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second.pop("cached") and not first.pop("cached")
    assert second.pop("compiled_on")[:2] == "20" and first == second
    # names ignore case: the same cached verdict
    assert front.main(["fit", "sft", "--model", "Gemma3-Tiny", "--target", "V5E-1"] + args[5:]) == 0
    assert "[from the plan cache (compiled 20" in capsys.readouterr().out


def test_a_typo_gets_the_closest_names_and_case_is_ignored():
    names = ["gemma3-1b", "gemma3-4b", "llama3.1-8b"]
    assert choose("model", "Gemma3-4B", names) == "gemma3-4b"
    with pytest.raises(BadInput, match=r"unknown model 'gema3-4b' \(did you mean 'gemma3-4b'"):
        choose("model", "gema3-4b", names)
    with pytest.raises(BadInput, match=r"unknown model 'zzz'; valid: gemma3-1b"):
        choose("model", "zzz", names)


def test_lookup_points_past_the_atlas_and_says_where_an_answer_came_from(capsys):
    rows = lookup.read_table()
    # a slice the planner knows but the atlas has no column for: the planner's command
    code, err = cli_exit(front.main, ["lookup", "gemma3-4b", "v5e-4", "lora-train"], capsys)
    assert code == 2 and "the atlas has no v5e-4 column" in err
    assert "python -m shared.plan lora-train --model gemma3-4b --target v5e-4 --max-batch" in err
    # case ignored, a typo suggested
    row = lookup.find(rows, "Gemma3-4B", "V5E-8", "Rollout")
    assert (row["model"], row["target"], row["recipe"]) == ("gemma3-4b", "v5e-8", "rollout")
    code, err = cli_exit(front.main, ["lookup", "gema3-4b", "v5e-8", "rollout"], capsys)
    assert code == 2 and "did you mean 'gemma3-4b'" in err
    code, err = cli_exit(front.main, ["lookup", "gemma3-4b", "v5x-8", "rollout"], capsys)
    assert code == 2 and "unknown target 'v5x-8' (did you mean" in err
    # an answer no compile produced this run: the plan cache's verdicts, dated
    cached = next(r for r in rows if r["compiles"] == "0" and int(r["max_batch"] or 0) > 0)
    assert "the compiler's verdict from the plan cache (compiled by 20" in lookup.describe(cached)
    compiled = next(r for r in rows if int(r["compiles"] or 0) > 0 and r["status"] == "ok")
    assert f"the compiler's verdict ({compiled['compiles']} compiles" in lookup.describe(compiled)
