"""Each notebook opens as a chapter: a title, then a short Takeaway that states the answer.

And every number a Takeaway quotes from a committed result (benchmarks/results/*.json, the
atlas in docs/atlas.csv) is read from that file here and looked for in the Takeaway's text, so
a result that is computed again with other numbers fails the test of the sentence that quotes
it instead of leaving that sentence stale. Numbers that are settings (100,000 rollouts, 8,960
chips) or closed forms are the notebook's own; the detail behind each answer lives in the
sections below the Takeaway, which the notebooks check against the same files as they run.
"""

import json
import math

import jupytext
import pytest

from shared.findings import sweep
from shared.hardware import parse_target
from shared.plan.atlas.lookup import find, read_table
from shared.plan.slices import budget
from shared.report.committed import committed
from shared.sweep.settings import HparamSweep
from tools.notebooks import notebook_sources

MAX_TAKEAWAY_LINES = 10  # prose lines of the Takeaway itself, its figure not counted
MAX_FIRST_CELL_LINES = 16  # prose lines of the whole first cell: title, Takeaway, figure
GiB, MiB = 2**30, 2**20


def _first_cell(stem: str) -> list[str]:
    """The non-blank lines of notebook `stem`'s first markdown cell."""
    (source,) = notebook_sources(stem)
    cell = next(c for c in jupytext.read(source).cells if c.cell_type == "markdown")
    return [line.strip() for line in cell.source.splitlines() if line.strip()]


def _takeaway_lines(lines: list[str]) -> list[str]:
    """The lines under "## Takeaway", up to the next heading, without figures."""
    start = lines.index("## Takeaway") + 1
    rest = lines[start:]
    end = next((i for i, line in enumerate(rest) if line.startswith("#")), len(rest))
    return [line for line in rest[:end] if not line.startswith("![")]


def takeaway(stem: str) -> str:
    """Notebook `stem`'s Takeaway as one line of text: a number wrapped at a line's end reads
    as it does in the rendered notebook."""
    return " ".join(_takeaway_lines(_first_cell(stem)))


def assert_quotes(stem: str, *phrases: str) -> None:
    text = takeaway(stem)
    missing = [p for p in phrases if p not in text]
    assert not missing, (
        f"{stem}'s Takeaway does not say {missing}, what its committed results say now: "
        "rewrite the sentence from the file (or the file was not meant to change)"
    )


def _gib(n: float) -> str:
    return f"{n / GiB:.2f}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h"


def _bill(estimate: dict) -> str:
    """A budget estimate as a Takeaway rounds it: "5.0 h and $84"."""
    return f"{estimate['estimated_s'] / 3600:.1f} h and ${estimate['dollars_estimated']:.0f}"


@pytest.mark.parametrize("source", notebook_sources(), ids=lambda p: p.stem)
def test_a_notebook_opens_with_a_title_and_a_short_takeaway(source):
    """The first cell is a chapter's opening: its title, the answer in at most 10 lines, its
    key figure; how the notebook answers (modes, pieces) goes in the next cell."""
    lines = _first_cell(source.stem)
    assert lines[0].startswith(f"# {source.stem[:2]} · "), lines[0]
    assert "## Takeaway" in lines, f"{source.name}: its first cell has no '## Takeaway'"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## Takeaway"], (
        f"{source.name}: {headings[1:]} belong in the next cell, after the Takeaway's"
    )
    said = _takeaway_lines(lines)
    assert len(said) <= MAX_TAKEAWAY_LINES, (
        f"{source.name}: a Takeaway of {len(said)} lines, over {MAX_TAKEAWAY_LINES}: state the "
        "answer, move the detail to the section that shows it"
    )
    assert len(lines) <= MAX_FIRST_CELL_LINES, (
        f"{source.name}: a first cell of {len(lines)} prose lines, over {MAX_FIRST_CELL_LINES}"
    )


def test_the_checker_reads_a_wrapped_number_whole():
    lines = ["# 99 · Q?", "## Takeaway", "fits **4", "sequences** on 2x2", "![f](f.png)", "## Next"]
    assert " ".join(_takeaway_lines(lines)) == "fits **4 sequences** on 2x2"


# --------------------------------------------------------------------- 01_rollout_sizing


def test_01_quotes_both_tunix_searches_their_bills_and_the_h200():
    quoted = committed("01_rollout_tunix_semantics")
    target = quoted["setting"]["target"]
    new, old = quoted["semantics"]["0.1.7"], quoted["semantics"]["0.1.6"]
    bills = []
    for entry in (new, old):
        point = {**entry["at_max"], "workload": "rollout", "target": target}
        bills.append(budget.estimate(point, runs=math.ceil(100_000 / point["batch"])))
    measured = committed("rollout_h200")["summary"]
    untuned = committed("rollout_h200_autotune_off")["batch_sweep"]
    peak = next(r for r in untuned if r["batch"] == measured["best_batch"])
    planned = committed("plan_rollout_h200")
    assert planned["batch"] == measured["best_batch"]
    assert_quotes(
        "01_rollout_sizing",
        f"**{new['max_batch']} rows**",
        f"**{old['max_batch']}** with 0.1.6's",
        f"at {new['max_batch']} take about {_hours(bills[0]['estimated_s'])}",
        f"${bills[0]['dollars_estimated']:.2f} on a {target}",
        f"at {old['max_batch']}, {_hours(bills[1]['estimated_s'])} and "
        f"${bills[1]['dollars_estimated']:.2f}",
        f"{measured['best_tokens_per_s'] / 1e3:.1f}k tokens/s (batch {measured['best_batch']})",
        f"peak {peak['peak_bytes_per_device'] / 1e9:.2f} GB",
        f"said {planned['bytes_per_device'] / 1e9:.2f}",
    )


# --------------------------------------------------------------------- 02_lora_overhead


def test_02_quotes_the_adapters_bytes_and_gemma4_31b_on_every_mesh():
    """The 31B boundary comes from two files: 02_lora_scale.json searched the default mesh with
    and without remat, the atlas every mesh without remat. The atlas's 6 on 2x2 is what the
    Takeaway's advice on remat turns on (it once said 4, the default mesh's answer)."""
    quoted = committed("02_lora_scale")
    local, setting = quoted["local"], quoted["setting"]
    bounds = {b["remat"]: b for b in quoted["boundaries"] if b["seq"] == 2048}
    bills = {}
    for remat, bound in bounds.items():
        (point,) = [p for p in bound["exact"] if p["batch"] == bound["largest_batch"]]
        bills[remat] = budget.for_tokens(point, 1e8)
    cell = find(read_table(), setting["model"], setting["target"], "lora-train")
    assert cell["status"] == "ok", cell
    same = {"lora_rank": setting["rank"], "seq": 2048, "remat": "none"}
    settings = json.loads(cell["settings"])
    assert {k: settings[k] for k in same} == same, "the atlas's cell is another recipe"
    default_mesh = f"{parse_target(setting['target']).chips}x1"  # every chip on fsdp
    assert_quotes(
        "02_lora_overhead",
        f"`free_base` frees {local['freed_bytes']} bytes",
        f"adds {local['lora_bytes'] / MiB:.2f} MiB",
        f"{local['base_bytes'] / MiB:.2f} MiB",
        f"fits {bounds['none']['largest_batch']} sequences on the default mesh ({default_mesh})",
        f"and {cell['max_batch']} on {cell['mesh']} ({_gib(int(cell['bytes_per_device']))} of "
        f"{_gib(int(cell['hbm_bytes']))} GiB a chip)",
        f"with block remat {bounds['block']['largest_batch']} on {default_mesh}",
        f"about {_bill(bills['none'])} on demand at {bounds['none']['largest_batch']} sequences "
        "without remat",
        f"{_bill(bills['block'])} at {bounds['block']['largest_batch']} with block remat",
        f"more than {cell['max_batch']} sequences a step",
    )


# --------------------------------------------------------------------- 03_sparse_logits_*


def _rows(table: dict, key: str = "rows") -> dict:
    return {(r["what"], r["method"]): r for r in table[key]}


def test_03_exactness_quotes_the_benchmark_and_times_from_a_device_not_a_cpu():
    """Exactness is the CPU benchmark's (the same bits on any backend); time is the H200's. The
    CPU times once were the Takeaway's (chunked 1.6-2x slower), from a run beside other jobs;
    rerun alone the chunked loss was the faster: a shared CPU cannot rank them."""
    cpu = committed("03_logits_cpu")
    loss = {(r["softcap"], r["dtype"], r["method"]): r for r in cpu["exactness"]["loss"]}
    plain = [
        loss[None, "bfloat16", m]["d_embedding_rel_err"] for m in ("naive loss", "chunked loss")
    ]
    capped = [loss[30.0, "bfloat16", m]["loss_abs_err"] for m in ("chunked loss", "naive loss")]
    top_k = [r for r in cpu["exactness"]["top_k"] if r["method"] == "chunked"]
    assert {r["dtype"] for r in top_k} == {"float32", "bfloat16"}  # bit for bit, ties included:
    assert all(r["values_equal"] == 1 and not r["index_mismatch_untied"] for r in top_k)
    assert not any(r["index_mismatch_tied"] for r in top_k)
    gpu = committed("logits_h200")
    assert gpu["device_kind"] == "NVIDIA H200"
    time, shape = _rows(gpu["time"]), gpu["time_shape"]
    full, chunked = time["top-k", "full logits"]["min_s"], time["top-k", "chunked"]["min_s"]
    scan = time["top-k", "per-step scan"]["min_s"]
    naive, chunked_loss = (time["loss fwd+bwd", m]["min_s"] for m in ("naive loss", "chunked loss"))
    assert_quotes(
        "03_sparse_logits_exactness",
        f"d table off by {plain[0]:.2%} in bf16 for both",
        f"loss error {capped[0]:.0f} against {capped[1]:.1e}".replace("e-0", "e-"),
        f"B={shape['B']}, T={shape['T']} and Gemma 3's V = {shape['V']:,}",
        f"chunked top-k runs {full / chunked:.2f}x faster than materialising",
        f"({chunked * 1e3:.0f} ms against {full * 1e3:.0f})",
        f"the chunked loss takes {chunked_loss / naive:.1f}x the naive loss's time",
        f"({chunked_loss * 1e3:.0f} ms against {naive * 1e3:.0f})",
        f"the per-step scan {scan / chunked:.1f}x the chunked top-k's",
    )
    assert f"{plain[1]:.2%}" == f"{plain[0]:.2%}"
    text = takeaway("03_sparse_logits_exactness")
    stale = [f"{v:.2f}x" for v in cpu["time"]["ratios"].values() if f"{v:.2f}x" in text]
    assert not stale and "CPU" not in text, f"the Takeaway quotes CPU timings again: {stale}"
    (source,) = notebook_sources("03_sparse_logits_exactness")
    prose = " ".join(line.lstrip("# ").strip() for line in source.read_text().splitlines())
    ratios, load = cpu["time"]["ratios"], cpu["load_average"][0]
    for quote in (
        f"(load {load:.1f})",
        f"per-step scan took {ratios['per_step_over_chunked']:.2f}x the chunked top-k's time",
        f"full materialisation {ratios['full_over_chunked']:.2f}x",
        f"the naive loss {ratios['naive_loss_over_chunked']:.2f}x the chunked loss's",
    ):
        assert quote in prose, f"section 3 does not say {quote!r}, what 03_logits_cpu.json says"


def test_03_fit_quotes_the_tpu_compiler_and_the_h200():
    cpu = committed("03_logits_cpu")
    tpu = cpu["memory_tpu"]
    rows = _rows(tpu)
    full, chunked = rows["top-k", "full logits"], rows["top-k", "chunked"]
    naive, chunked_loss = rows["loss fwd+bwd", "naive loss"], rows["loss fwd+bwd", "chunked loss"]
    usable = parse_target(tpu["target"]).chip.compiler_hbm_bytes
    assert full["refused"] and full["temp_bytes"] > usable
    assert chunked_loss["temp_bytes"] == 0  # "no HBM scratch at all"
    shape = cpu["memory_shape"]
    gpu = committed("logits_h200")
    memory, time = _rows(gpu["memory"]), _rows(gpu["time"])

    def gb(what, method, digits):
        return f"{memory[what, method]['total_bytes'] / 1e9:.{digits}f}"

    def ms(what, method):
        return f"{time[what, method]['min_s'] * 1e3:.0f}"

    assert_quotes(
        "03_sparse_logits_fit",
        f"At B = {shape['B']}, T = {shape['T']} and D = {shape['D']}",
        f"V = {shape['V']:,} logits **{full['temp_bytes'] / GiB:.1f} GiB**",
        f"the {usable / GiB:.2f} GiB a program may use",
        f"needs **{chunked['temp_bytes'] / MiB:.0f} MiB**, "
        f"{tpu['ratios']['full_over_chunked']:.0f}x less",
        f"backward needs **{naive['temp_bytes'] / GiB:.1f} GiB**",
        f"the chunked top-k took {gb('top-k', 'chunked', 2)} GB against "
        f"{gb('top-k', 'full logits', 1)}",
        f"{ms('top-k', 'chunked')} ms against {ms('top-k', 'full logits')} at "
        f"B = {gpu['time_shape']['B']}",
        f"the chunked loss {gb('loss fwd+bwd', 'chunked loss', 2)} GB against "
        f"{gb('loss fwd+bwd', 'naive loss', 1)}",
        f"{ms('loss fwd+bwd', 'chunked loss')} ms against {ms('loss fwd+bwd', 'naive loss')}",
    )
    if committed("logits_fit") is not None:  # bench_logits.py --fit: the whole-model search
        assert "not recorded yet" not in takeaway("03_sparse_logits_fit"), (
            "logits_fit.json is committed now: quote its largest batches in the Takeaway"
        )


# --------------------------------------------------------------------- 04_pretrain_ablations

WORDS = dict(enumerate(("no", "one", "two", "three", "four", "five", "six", "seven", "eight")))


def test_04_quotes_the_compiled_step_the_arms_cost_and_the_h200():
    tables = committed("04_pretrain_plan")["tables"]
    params = {r["part"]: r["params"] for r in tables["params"]}["total"]
    (step,) = [
        v for v in tables["verdicts"] if (v["target"], v["batch"], v["seq"]) == ("v6e-1", 32, 2048)
    ]
    (fit,) = tables["fit"]
    cost = {r["target"]: r for r in tables["arm_cost"]}
    v6e, kaggle = cost["v6e-1"], cost["v5e-8"]
    assert round(v6e["tokens"] / params) == 20 and v6e["price_kind"] == "spot"
    h200 = committed("train_h200")["best"]
    assert (h200["batch"], h200["seq"]) == (32, 2048)
    assert_quotes(
        "04_pretrain_ablations",
        f"({params / 1e6:.1f}M parameters",
        f"**{_gib(step['bytes_per_device'])} GiB** per device for 32 sequences of 2048",
        f"of the {_gib(step['hbm_bytes'])} GiB it allows",
        f"**{fit['max_batch']} sequences** fit",
        f"{fit['frontier_batch']} in {fit['choice_microbatches']} micro-batches "
        f"({_gib(fit['choice_bytes_per_device'])} GiB)",
        f"about {v6e['estimated_h']:.2f} h and ${v6e['dollars']:.2f} there at spot prices",
        f"need {WORDS[kaggle['kaggle_sessions_all_arms']]} 9-hour sessions",
        f"{h200['tok_per_s'] / 1e3:.1f}k tokens/s, {h200['mfu']:.1%} MFU",
    )


# --------------------------------------------------------------------- 05_hparam_sweep


def _lr(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


def test_05_quotes_the_committed_sweep_and_the_real_sweeps_price():
    tables = committed("05_sweep_cpu")["tables"]
    trials = [t for t in tables["trials"] if t["status"] == "done"]
    fixed = {r["parameter"]: r["values"] for r in tables["search_space"] if r["kind"] == "constant"}
    best = min(trials, key=lambda t: t["val_loss"])
    default = next(t for t in trials if (t["lr"], t["wd"]) == (3e-4, best["wd"]))
    answers = {r["question"]: r["answer"] for r in tables["summary"]}
    low, high = map(float, answers["lr basin (within 2%)"].split(" to "))
    by_lr = {}
    for t in trials:
        by_lr.setdefault(t["lr"], []).append(t["val_loss"])
    assert max(max(v) - min(v) for v in by_lr.values()) < 0.01  # "weight decay does not matter"
    field = HparamSweep.field()
    point = sweep.real_point(field, "local")  # notebook 04's committed 130m step on a v6e-1
    steps = len(trials) * field.real_trial["steps"]
    bill = budget.estimate(point, runs=steps, kind=field.price_kind)
    assert (field.target, field.price_kind) == ("v6e-1", "spot")
    assert_quotes(
        "05_hparam_sweep",
        f"({len(trials)} trials of the tiny stand-in, {fixed['steps']} steps of "
        f"{fixed['batch']} × {fixed['seq']} tokens)",
        f"spans peak learning rates {_lr(low)} to {_lr(high)}",
        f"The best, lr {_lr(best['lr'])} with weight decay {best['wd']}, reaches "
        f"{best['val_loss']:.3f} nats/token",
        f"lands {default['val_loss'] / best['val_loss'] - 1:.0%} worse ({default['val_loss']:.3f})",
        f"the same {len(trials)} trials of {field.real_trial['steps']} steps",
        f"about {bill['estimated_s'] / 3600:.1f} h, ${bill['dollars_estimated']:.2f} at the spot",
    )


# --------------------------------------------------------------------- 06_scaling_plan


def test_06_quotes_the_committed_plan():
    tables = committed("06_scaling_plan")["tables"]
    answers = {r["question"]: r["answer"] for r in tables["summary"]}
    cost = {r["convention"]: r for r in tables["flops_days_dollars"]}["params"]
    chips = round(cost["chip_hours"] / (cost["days"] * 24))
    policy = {r["policy"]: r for r in tables["memory_policies"]}
    probe = {r["tunix_remat"]: r for r in tables["layer_probe"]}["none"]
    mesh = {r["quantity"]: r["value"] for r in tables["mesh_choice"]}
    assert policy["block"]["book_chips"] < 200 and mesh["fsdp_compute_bound"] is False
    assert_quotes(
        "06_scaling_plan",
        f"{answers['parameters (B)']:.2f}B parameters",
        f"**{cost['flops']:.2e} FLOPs: {cost['days']:.1f} days on {chips:,} v5p chips".replace(
            "e+", "e"
        ),
        f"${cost['dollars_on_demand'] / 1e6:.1f}M on demand or "
        f"${cost['dollars_spot'] / 1e6:.1f}M spot",
        f"need {policy['book3']['book_TB']:.1f} TB (**{policy['book3']['book_chips']} chips**)",
        f"{policy['fwide']['book_TB']:.1f} TB (**{policy['fwide']['book_chips']:,} chips**)",
        f"keeps **{probe['kept_bytes_per_token_layer'] / 1e6:.2f} MB a token "
        f"({probe['in_D']:.0f}·D)**",
        f"without remat it needs ~{round(policy['none']['book_chips'], -2)}",
        f"{float(mesh['per_chip_batch_tokens']):.0f} tokens a chip",
        f"pure FSDP ({mesh['fsdp_threshold']})",
        f"FSDP degree ≈ {answers['X_opt']:,.0f}",
    )


# --------------------------------------------------------------------- 07_grpo_budget


def test_07_quotes_the_verdict_the_log_prob_searches_and_the_2x4_session():
    quoted = committed("07_grpo_plan")
    recipe, verdict = quoted["recipe"], quoted["verdict"]
    wide = quoted["wider_meshes"]["2x4"]
    session = wide["session"]
    assert verdict["worst"] == "policy_update" and session["assumed_efficiency"] == 0.4
    assert session["hours"] == 9 and parse_target(recipe["target"]).chips == 8
    assert_quotes(
        "07_grpo_budget",
        f"on {recipe['model']} ({recipe['prompt_len']}-token prompts, {recipe['steps']}-token "
        f"completions, G = {recipe['num_generations']}, a rank-{recipe['lora_rank']} LoRA",
        f"**{_gib(verdict['bytes_per_device'])} GiB per chip of the "
        f"{_gib(verdict['hbm_bytes'])} GiB** a {recipe['target']}",
        f"at most **{quoted['logps_search']['tunix']['max_batch']:,} sequences**",
        f"fit **{quoted['logps_search']['chunked']['max_batch']:,}**",
        f"a roofline of {verdict['roofline_lower_bound_s']:.2f} s a step",
        f'on 2x4 (`MESH = "2x4"`) {wide["roofline_lower_bound_s"]:.2f} s',
        f"about **{session['steps_estimated']:,} steps** in a 9-hour session",
        f"{session['steps_per_dollar_on-demand']:.0f} steps a dollar on demand",
    )


# --------------------------------------------------------------------- 08_which_slice


def _mesh(shape: dict) -> str:
    return f"{shape['fsdp']}x{shape['tp']}"


def _slice_answer(result: dict, target: str | None = None) -> dict:
    """A job's chosen slice, or its row for `target`, as the Takeaway words it."""
    row = (
        result["choice"]
        if target is None
        else next(r for r in result["rows"] if r["target"] == target)
    )
    return {
        "on": f"on {_mesh(row['mesh_shape'])}",
        "batch": f"batch {row['batch']}",
        "hours": f"{row['hours']:.1f} h",
        "dollars": f"${row['dollars']:.0f}",
    }


def test_08_quotes_each_jobs_cheapest_slice():
    jobs = {
        (j["summary"]["workload"], j["summary"]["model"]): j
        for j in committed("08_which_slice")["jobs"].values()
    }
    lora27, lora31 = jobs["lora-train", "gemma3-27b"], jobs["lora-train", "gemma4-31b"]
    grpo, train = jobs["grpo", "gemma3-4b"], jobs["train", "130m"]
    for job in jobs.values():
        assert job["result"]["price_kind"] == "on-demand"
        assert job["result"]["choice"]["assumed_efficiency"] == 0.4
    a27, kaggle = _slice_answer(lora27["result"]), _slice_answer(lora27["result"], "v5e-8")
    a31, agrpo, a130 = (_slice_answer(j["result"]) for j in (lora31, grpo, train))
    assert lora27["result"]["choice"]["remat"] == "block"
    assert parse_target(train["summary"]["slice"]).chips == 1  # "one v6e chip"
    seq27, seq31 = (j["result"]["request"]["seq"] for j in (lora27, lora31))
    assert_quotes(
        "08_which_slice",
        f"gemma3-27b on {lora27['summary']['amount']:.0e} tokens at {seq27:,}".replace("e+0", "e"),
        f"a {lora27['summary']['slice']}** {a27['on']}, {a27['batch']} with block remat, "
        f"{a27['hours']} and {a27['dollars']}",
        f"v5e-8 holds it too: {kaggle['batch']} {kaggle['on']}, {kaggle['hours']}",
        f"{lora31['summary']['amount']:.0e} tokens at {seq31:,}".replace("e+0", "e"),
        f"a {lora31['summary']['slice']}** {a31['on']}, {a31['batch']}, {a31['hours']} and "
        f"{a31['dollars']}",
        f"GRPO on gemma3-4b for {grpo['summary']['amount']:,.0f} steps",
        f"a {grpo['summary']['slice']}** {agrpo['on']}, {agrpo['hours']}, {agrpo['dollars']}",
        f"({train['summary']['amount'] / 1e9:.1f}B tokens): one "
        f"{train['summary']['slice'].split('-')[0]} chip**, {a130['hours']} and {a130['dollars']}",
    )
