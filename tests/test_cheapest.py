"""shared.plan.slices.cheapest: the cheapest rented slice for a whole job. Slices that cannot hold
the model are excluded by arithmetic, candidates are compiled in the order of a FLOP bound, a
candidate whose bound cannot beat the best is never compiled, and the answer is a compiled
verdict with hours, dollars and the commands that rent it."""

import dataclasses
import re
import time

import pytest
from conftest import cli_exit

from shared import report
from shared.errors import BadInput
from shared.findings import which_slice
from shared.hardware import parse_target, rent
from shared.plan import Request
from shared.plan.__main__ import main as plan_cli
from shared.plan.slices import candidate, cheapest, jobs, view
from shared.plan.slices import job as slice_job

TINY = Request("lora-train", "gemma3-tiny", "v5e-1", seq=128, lora_rank=4)


def test_the_commands_name_slices_as_cloud_tpu_rents_them():
    assert rent.accelerator_type("v5e-8") == "v5litepod-8"
    assert rent.accelerator_type("v5p-16") == "v5p-16" and rent.accelerator_type("v6e-4") == "v6e-4"
    spot = rent.create_command("v6e-8", spot=True)
    assert "--accelerator-type=v6e-8 --version=v2-alpha-tpuv6e --spot" in spot
    assert "--spot" not in rent.create_command("v5e-256", spot=False)
    assert rent.run_command("02").startswith("make tpu-execute") and "NB=02" in rent.run_command(
        "02"
    )


def test_a_job_is_counted_in_its_workloads_unit():
    assert slice_job.job_for("lora-train", 1e6) == slice_job.Job(1e6, "tokens")
    assert slice_job.job_for("rollout", 100).unit == "sequences"
    with pytest.raises(BadInput, match="workload with a job to price"):
        slice_job.job_for("forward", 10)
    with pytest.raises(BadInput, match="tokens"):
        slice_job.job_for("sft", 0)
    point = {"batch": 8, "seq": 1000}
    assert slice_job.runs(point, slice_job.Job(16_001, "tokens")) == 3  # a partly filled last step
    assert slice_job.runs(point, slice_job.Job(17, "sequences")) == 3


def _point(batch, flops, bytes_):
    return {
        "target": "v5e-1",
        "batch": batch,
        "flops_per_device": flops,
        "bytes_accessed_per_device": bytes_,
    }


def test_large_enough_is_the_least_batch_within_the_tolerance_of_the_best_cost():
    """Per run: FLOPs b*f, bytes w + b*a on a v5e (197 TFLOP/s, 819 GB/s). The batch returned
    costs at most 10% over the floor per sequence and is a multiple of the unit (4 here, as a
    4-chip fsdp mesh steps); one unit less costs more."""
    peak, bandwidth = 197e12, 819e9
    f, a, w = 2e9, 1e6, 8e9  # memory-bound at every batch: a/bw > f/peak
    small, double = _point(4, 4 * f, w + 4 * a), _point(8, 8 * f, w + 8 * a)
    b = candidate.large_enough(small, double)

    def per_seq(batch):
        return max(f / peak, (w / batch + a) / bandwidth)

    least = max(f / peak, a / bandwidth)
    assert b % 4 == 0
    assert per_seq(b) <= 1.1 * least * (1 + 1e-9) < per_seq(b - 4)


def _fake_compile(costs, *, compute_bound=True):
    """compile_candidate replaced: each slice's dollars from `costs` (None: it does not fit,
    with remat none nor block), compute-bound or not."""
    compiled = []

    def compile_candidate(request, job, kind, *, use_cache, lightest_first=False, deadline=None):
        compiled.append(request.target)
        dollars = costs[request.target]
        if dollars is None:
            tried = {"block": False} if lightest_first else {"none": False, "block": False}
            return {"status": "does not fit", "why": "test", "compiles": 2, "remats_tried": tried}
        return {
            "status": "fits",
            "compute_bound": compute_bound,
            "compiles": 1,
            "remats_tried": {"none": True},
            "flops_per_unit": 1e9,
            "bytes_per_unit": 1e6,
            "batch": request.batch,
            "remat": "none",
            "mesh_shape": {"fsdp": 1, "tp": 1},
            "hosts": 1,
            "bytes_per_device": 1,
            "hbm_bytes": 2,
            "runs": 1,
            "roofline_hours": dollars / 10,
            "hours": dollars / 4,
            "dollars_at_roofline": dollars,
            "dollars": dollars * 2.5,
            "assumed_efficiency": 0.4,
            "efficiency_source": "test",
            "price_read": "test",
        }

    return compile_candidate, compiled


def test_a_slice_whose_bound_cannot_beat_the_best_is_never_compiled(monkeypatch):
    """v6e (cheapest per FLOP) is compiled first; v5e's bound is below v6e's dollars, so it is
    compiled too; v5p's bound is above the best and is not. A compute-bound v6e-1 settles v6e:
    its larger slices are not compiled."""
    slices = ("v5e-1", "v6e-1", "v6e-4", "v5p-8")
    bounds = {
        t: slice_job.bound(TINY, slice_job.Job(1e9, "tokens"), t, "on-demand") for t in slices
    }
    assert bounds["v6e-1"]["bound_dollars"] < bounds["v5e-1"]["bound_dollars"]
    assert bounds["v5e-1"]["bound_dollars"] < bounds["v5p-8"]["bound_dollars"]
    costs = {
        "v6e-1": bounds["v5p-8"]["bound_dollars"] * 0.9,
        "v5e-1": bounds["v5e-1"]["bound_dollars"] * 1.01,
    }
    fake, compiled = _fake_compile(costs)
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=slices, progress=False)
    assert compiled == ["v6e-1", "v5e-1"]
    rows = {r["target"]: r for r in result["rows"]}
    assert rows["v6e-4"]["status"] == "not needed" and "compute-bound" in rows["v6e-4"]["why"]
    assert rows["v5p-8"]["status"] == "cannot win"
    assert result["choice"]["target"] == "v5e-1"  # the cheaper of the two compiled
    assert [r["target"] for r in result["frontier"]] == ["v5e-1"]  # faster and cheaper
    assert "--accelerator-type=v5litepod-1" in result["commands"]["create"]
    assert result["commands"]["run"].endswith("NB=02 PARAMS='-p MODE device -p MESH 1x1'")
    assert not any(r["gpu"] for r in result["rows"])  # only the slices asked for
    assert "cheapest for lora-train gemma3-tiny" in view.describe(result)


def test_a_gpu_machine_is_a_candidate_like_a_slice_and_can_win(monkeypatch):
    """An L4 (g2-standard-4) compiled as a candidate beside a v5e-1, cheaper, is the answer,
    with the gcloud command that creates that machine and the set-up that runs on its GPU."""
    fake, compiled = _fake_compile({"v5e-1": 5.0, "l4-1": 1.0})
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=("v5e-1", "l4-1"), progress=False)
    assert sorted(compiled) == ["l4-1", "v5e-1"]
    assert result["choice"]["target"] == "l4-1" and result["choice"]["gpu"]
    assert "--machine-type=g2-standard-4" in result["commands"]["create"]
    assert result["commands"]["run"].startswith("make setup JAX_EXTRA=cuda12 && make execute")
    t4 = rent.create_command("t4-2", spot=True)
    assert "--accelerator=type=nvidia-tesla-t4,count=2" in t4 and "SPOT" in t4


def test_a_deadline_skips_what_cannot_meet_it(monkeypatch):
    fake, compiled = _fake_compile({"v6e-1": 100.0})
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=("v6e-1",), within_hours=1.0, progress=False)
    (row,) = [r for r in result["rows"] if r["target"] == "v6e-1"]
    assert row["why"] == "misses 1 h" and result["choice"] is None
    assert "no rented slice fits" in view.describe(result)


def test_a_slice_too_small_for_the_weights_is_excluded_without_compiling(monkeypatch):
    """gemma3-4b in bf16 with fp32 AdamW moments needs ~40 GB: no v5e-1 holds it."""
    fake, compiled = _fake_compile({})
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    sft = Request("sft", "gemma3-4b", "v5e-1", seq=128)
    result = cheapest.cheapest(sft, 1e6, slices=("v5e-1",), progress=False)
    (row,) = [r for r in result["rows"] if r["target"] == "v5e-1"]
    assert row["status"] == "excluded" and "arithmetic, no compile" in row["why"]
    assert compiled == [] and result["choice"] is None


def test_cli_bad_input_for_cheapest_is_one_line(empty_plan_cache, capsys):
    """Through the CLI's handler in this process (test_plan runs one bad input as its own)."""
    for args, message in (
        (["lora-train", "--model", "gemma3-tiny", "--cheapest"], "needs the job's size: --tokens"),
        (["forward", "--model", "gemma3-tiny", "--cheapest", "--tokens", "5"], "not forward"),
        (["lora-train", "--model", "gemma3-tiny"], "--target is required"),
    ):
        code, stderr = cli_exit(plan_cli, args, capsys)
        assert code == 2 and message in stderr, stderr
        assert stderr.strip().count("\n") == 0


def test_every_rented_slice_has_a_topology_to_compile_for():
    """Every TPU slice names a libtpu topology; every GPU machine makes compile-only CUDA
    devices of its GPU, as many as it holds (jax's CUDA plugin, no GPU here)."""
    from shared.hardware import gpus, parse_target
    from shared.plan.compiler.target import target_devices

    for target in rent.ALL_TPU_SLICES:
        assert parse_target(target).topology is not None, target
    for slices in rent.GPU_SLICES.values():
        for target in slices:
            slice_ = parse_target(target)
            devices = target_devices(slice_)
            assert len(devices) == slice_.chips, target
            assert devices[0].device_kind == gpus.SPECS[slice_.chip.name].device_name


def test_the_bound_counts_the_passes_a_job_cannot_avoid():
    """Forward once per token; a LoRA backward through every layer but the first; a full
    fine-tune also forms every weight's gradient; block remat runs the forward again; GRPO's
    step sums its phases."""
    from shared import models

    layers = models.model_config("gemma3-tiny").num_layers
    tokens = slice_job.Job(1000, "tokens")
    assert slice_job.matmul_passes(TINY, tokens) == pytest.approx(1000 * (2 - 1 / layers))
    sft = Request("sft", "gemma3-tiny", "v5e-1", seq=128)
    assert slice_job.matmul_passes(sft, tokens) == pytest.approx(1000 * (3 - 1 / layers))
    remat = dataclasses.replace(TINY, remat="block")  # every block's forward again
    assert slice_job.matmul_passes(remat, tokens) == pytest.approx(1000 * (3 - 1 / layers))
    rollout = Request("rollout", "gemma3-tiny", "v5e-1", prompt_len=16, steps=48)
    assert slice_job.matmul_passes(rollout, slice_job.Job(10, "sequences")) == 10 * 64
    grpo = Request("grpo", "gemma3-tiny", "v5e-1", prompt_len=16, steps=48, batch=8, beta=0.08)
    # 8 sequences a step: the rollout, the reference, one LoRA update
    expected = 3 * 8 * 64 * (1 + 1 + (2 - 1 / layers))
    assert slice_job.matmul_passes(grpo, slice_job.Job(3, "steps")) == pytest.approx(expected)


def test_a_mixture_of_experts_counts_the_experts_a_token_is_routed_to():
    """qwen3-30b-a3b routes each token to 8 of 128 experts: its matmul weights a token are
    about its 3B active parameters, not its 30B (the bound, and every roofline's floor)."""
    from shared import models

    assert 2e9 < models.matmul_weights("qwen3-30b-a3b") < 3.3e9
    assert models.matmul_weights("qwen3-8b") > 6e9  # dense: every weight


def test_chips_are_visited_breadth_first(monkeypatch):
    """Every slice of a chip shares one bound: by the bound alone the search would climb v6e's
    sizes first. Breadth first, v5e-4 comes before any larger v6e, and then the chip whose
    fitting slice costs least grows first."""
    slices = ("v6e-4", "v6e-8", "v5e-4", "v5e-8")
    job = slice_job.Job(1e9, "tokens")
    bounds = {t: slice_job.bound(TINY, job, t, "on-demand")["bound_dollars"] for t in slices}
    cheap = bounds["v5e-4"] * 1.5  # above v5e's bound, so v5e is still worth a compile
    costs = {"v6e-4": cheap, "v5e-4": cheap * 1.2, "v6e-8": cheap * 0.8, "v5e-8": cheap * 0.9}
    fake, compiled = _fake_compile(costs, compute_bound=False)
    monkeypatch.setattr(cheapest, "compile_candidate", fake)
    result = cheapest.cheapest(TINY, 1e9, slices=slices, progress=False)
    assert compiled[:3] == ["v6e-4", "v5e-4", "v6e-8"]
    assert result["choice"]["target"] == "v6e-8"


def test_a_chip_that_misses_twice_is_left_and_tries_the_lighter_remat_first(monkeypatch):
    seen = []
    fake, compiled = _fake_compile({"v6e-1": None, "v6e-4": None, "v6e-8": 1.0})

    def recording(request, job, kind, *, use_cache, lightest_first=False, deadline=None):
        seen.append((request.target, lightest_first))
        return fake(request, job, kind, use_cache=use_cache, lightest_first=lightest_first)

    monkeypatch.setattr(cheapest, "compile_candidate", recording)
    result = cheapest.cheapest(TINY, 1e9, slices=("v6e-1", "v6e-4", "v6e-8"), progress=False)
    assert seen == [("v6e-1", False), ("v6e-4", True)]  # remat none failed on v6e-1
    (row,) = [r for r in result["rows"] if r["target"] == "v6e-8"]
    assert row["status"] == "not compiled" and "v6e-1 and v6e-4 did not fit" in row["why"]
    assert result["choice"] is None


def test_the_time_budget_stops_before_a_slice_it_cannot_finish(monkeypatch):
    """Each compiled slice takes 400 s of a 12-minute budget: a second would end at 800 s."""
    clock = [0.0]
    fake, compiled = _fake_compile({"v6e-1": 1.0, "v5e-1": 1.0}, compute_bound=False)

    def slow(request, job, kind, *, use_cache, lightest_first=False, deadline=None):
        clock[0] += 400
        return fake(request, job, kind, use_cache=use_cache, lightest_first=lightest_first)

    monkeypatch.setattr(cheapest, "compile_candidate", slow)
    monkeypatch.setattr(cheapest.time, "monotonic", lambda: clock[0])
    result = cheapest.cheapest(TINY, 1e9, slices=("v6e-1", "v5e-1"), minutes=12, progress=False)
    assert compiled == ["v6e-1"]
    (row,) = [r for r in result["rows"] if r["target"] == "v5e-1"]
    assert row["status"] == "not compiled" and "12-minute budget" in row["why"]
    assert "not compiled though their FLOP bound is below" in view.describe(result)


def test_a_job_that_needs_longer_keeps_its_own_budget_unless_the_reader_names_one():
    """Notebook 08's 31B LoRA and gemma3-4b GRPO searches reached their answers only after
    27-31 minutes of compiles: in the default 12 each answered a dearer slice or mesh."""
    field = jobs.WhichSlice.field()
    longer = {j.model: field.minutes_for(j) for j in field.jobs if j.minutes}
    assert longer == {"gemma4-31b": 40, "gemma3-4b": 40}
    others = [j for j in field.jobs if not j.minutes]
    assert others and {field.minutes_for(j) for j in others} == {cheapest.SEARCH_MINUTES}
    chosen = dataclasses.replace(field, minutes=5)
    assert {chosen.minutes_for(j) for j in field.jobs} == {5}
    with pytest.raises(BadInput, match="minutes"):
        jobs.job("a job", "rollout", "gemma3-1b", 10, minutes=0)


def test_a_plan_run_says_where_its_answer_differs_from_the_takeaways(capsys):
    """The GRPO job's 12-minute search answered the v6e-4, its committed one the v5p-8: a run
    like that says so; one that asked another question (other slices) compares nothing."""
    quoted = report.committed(which_slice.QUOTED)
    title = "GRPO on gemma3-4b, 2,000 steps"
    committed = quoted["jobs"][title]["result"]
    which_slice.check_answer(title, committed, quoted)
    assert "the cheapest: v5p-8 on 1x4 at batch 8, $62.67 on-demand agrees" in (
        capsys.readouterr().out
    )
    (v6e4,) = [r for r in committed["rows"] if r["target"] == "v6e-4"]
    shorter = {**committed, "choice": v6e4}
    which_slice.check_answer(title, shorter, quoted)
    out = capsys.readouterr().out
    assert "v6e-4 on 1x4 at batch 8, $72.08 on-demand DIFFERS from the committed v5p-8" in out
    assert "a shorter MINUTES" in out
    fewer = {**shorter, "rows": [r for r in committed["rows"] if r["target"] != "v5p-8"]}
    which_slice.check_answer(title, fewer, quoted)
    which_slice.check_answer("a job nobody committed", committed, quoted)
    assert capsys.readouterr().out == ""


def test_a_remat_that_keeps_more_is_not_compiled_where_a_lighter_one_does_not_fit(monkeypatch):
    remats = []

    def plan_point(request, use_cache):
        remats.append(request.remat)
        return {
            "fits": False,
            "batch": request.batch,
            "remat": request.remat,
            "cached": False,
            "bytes_per_device": 3 * 2**30,
            "hbm_bytes": 2**30,
        }

    monkeypatch.setattr(candidate, "plan_point", plan_point)
    job = slice_job.Job(1e6, "tokens")
    row = candidate.compile_candidate(TINY, job, "on-demand", use_cache=False, lightest_first=True)
    assert remats == ["block"] and row["status"] == "does not fit"
    assert row["remats_tried"] == {"block": False}
    assert "remat none, which keeps more, not compiled" in row["why"]


def test_a_slice_whose_compiler_fails_says_so_not_that_it_needs_zero_bytes(monkeypatch):
    """A verdict the compiler failed on has no bytes (compiled.compiler_failure): its row says
    the compiler failed, with libtpu's message, where it had said 'needs 0.00 GiB'."""
    message = "INTERNAL: RET_CHECK failure (gather_emitter.cc:5360)"

    def plan_point(request, use_cache):
        return {
            "fits": False,
            "batch": request.batch,
            "remat": request.remat,
            "cached": False,
            "bytes_per_device": 0,
            "hbm_bytes": 2**30,
            "compiler_errors": {"update": message},
            "versions": {"libtpu": "0.0.42.1"},
        }

    monkeypatch.setattr(candidate, "plan_point", plan_point)
    job = slice_job.Job(1e6, "tokens")
    row = candidate.compile_candidate(TINY, job, "on-demand", use_cache=False, lightest_first=True)
    assert row["status"] == "does not fit" and "0.00 GiB" not in row["why"]
    assert f"libtpu 0.0.42.1 fails to compile batch {TINY.batch}" in row["why"]
    assert message in row["why"]


def _verdict_on(request, fits: bool) -> dict:
    """A compute-bound verdict of `request` (so no larger batch is compiled), on its mesh."""
    fsdp, tp = map(int, (request.mesh or "8x1").split("x"))
    chip = parse_target(request.target).chip
    flops, accessed = 1e15 * request.batch, 1e6
    return {
        "fits": fits,
        **{"batch": request.batch, "seq": request.seq, "remat": request.remat},
        **{"target": request.target, "workload": request.workload, "cached": False},
        **{"devices": 8, "hosts": 1, "mesh_shape": {"fsdp": fsdp, "tp": tp}},
        **{"bytes_per_device": 2 if not fits else 1, "hbm_bytes": 1, "compile_s": 1.0},
        **{"flops_per_device": flops, "bytes_accessed_per_device": accessed},
        "roofline_lower_bound_s": max(chip.roofline_terms(flops, accessed)),
    }


@pytest.mark.parametrize("fitting_mesh", ["2x4", "none"])
def test_a_slice_that_fits_nothing_on_its_mesh_tries_the_wider_meshes(fitting_mesh, monkeypatch):
    """A tiny LoRA step on a v5e-8 whose one sequence a chip fits no remat on 8x1: each mesh
    with more tp, tp rising, at its own least batch (4 on 4x2, 2 on 2x4), the remat that keeps
    least first; the first that fits is the slice's answer, on that mesh. Where none fits, the
    row says why on every mesh."""
    asked = []

    def plan_point(request, use_cache):
        asked.append((request.mesh, request.batch, request.remat))
        return _verdict_on(request, fits=request.mesh == fitting_mesh)

    monkeypatch.setattr(candidate, "plan_point", plan_point)
    small = cheapest._smallest(TINY, "v5e-8")
    row = candidate.compile_candidate(
        small, slice_job.Job(1e6, "tokens"), "on-demand", use_cache=False
    )
    chosen = [(None, 8, "none"), (None, 8, "block"), ("4x2", 4, "block")]
    if fitting_mesh == "2x4":
        assert asked == [*chosen, ("2x4", 2, "block"), ("2x4", 2, "none")]
        assert row["status"] == "fits" and row["mesh_shape"] == {"fsdp": 2, "tp": 4}
        assert row["batch"] == 2 and row["compiles"] == 5
        assert row["why"].startswith("fits on 2x4, not on 8x1: batch 8 needs")
    else:
        assert asked == [*chosen, ("2x4", 2, "block")]
        assert row["status"] == "does not fit" and row["compiles"] == 4
        assert re.findall(r"(\dx\d): ", row["why"]) == ["8x1", "4x2", "2x4"]


@pytest.mark.parametrize(
    "wider",
    ["faster", "a little faster", "slower", "after the deadline", "before it but as long again"],
)
def test_a_memory_bound_slice_is_priced_on_its_fastest_mesh(wider, monkeypatch):
    """A memory-bound tiny LoRA step on a v5e-8 that fits its least batch on every mesh (not
    two): each chip reads fewer bytes with more tp, as a decode reads each chip's share of the
    weights where fsdp gathers them whole. Each wider mesh is compiled while it is faster, by
    any margin (4x2 5% faster: small steps add up), and the slice is priced on the fastest
    (here 2x4); where 4x2 is slower than 8x1, the climb stops there, 2x4 not compiled, and 8x1
    prices it; past the search's deadline, or where a mesh compiling as long as 8x1 did (2 s
    here) would pass it, none is compiled for speed, and the row names them. Before, a slice
    that fit on its chosen mesh was priced there: GRPO of gemma3-4b on a v5e-8 at twice 2x4's
    hours."""
    # bytes a chip reads a step at each mesh's least batch (8, 4, 2): per sequence 1e12 on
    # 8x1, then 0.4e12 and 0.15e12 (4x2: 0.95e12 a little faster, 1.1e12 slower)
    on_4x2 = {"a little faster": 3.8e12, "slower": 4.4e12}.get(wider, 1.6e12)
    reads = {None: 8e12, "4x2": on_4x2, "2x4": 0.3e12}
    asked = []

    def plan_point(request, use_cache):
        asked.append((request.mesh, request.batch))
        fsdp = int((request.mesh or "8x1").split("x")[0])
        verdict = _verdict_on(request, fits=request.batch <= fsdp)
        chip = parse_target(request.target).chip
        accessed = reads[request.mesh]
        verdict.update(flops_per_device=1e6, bytes_accessed_per_device=accessed)
        return {**verdict, "roofline_lower_bound_s": max(chip.roofline_terms(1e6, accessed))}

    monkeypatch.setattr(candidate, "plan_point", plan_point)
    small = cheapest._smallest(TINY, "v5e-8")
    row = candidate.compile_candidate(
        small,
        slice_job.Job(1e6, "tokens"),
        "on-demand",
        use_cache=False,
        deadline={
            "after the deadline": 0.0,
            "before it but as long again": time.monotonic() + 1,
        }.get(wider),
    )
    on_8x1, on_4x2 = [(None, 8), (None, 16)], [("4x2", 4), ("4x2", 8)]
    if wider in ("faster", "a little faster"):
        assert asked == [*on_8x1, *on_4x2, ("2x4", 2), ("2x4", 4)]
        assert row["mesh_shape"] == {"fsdp": 2, "tp": 4} and row["compiles"] == 6
        assert re.match(r"fastest on 2x4, not on 8x1: [\d.]+ h; 4x2: [\d.]+ h$", row["why"])
    elif wider == "slower":
        assert asked == [*on_8x1, *on_4x2]
        assert row["mesh_shape"] == {"fsdp": 8, "tp": 1} and row["compiles"] == 4
        assert re.match(r"fastest on 8x1, not on 4x2: [\d.]+ h$", row["why"])
    else:  # 8x1's two verdicts took 1 s each (_verdict_on)
        assert asked == on_8x1 and row["mesh_shape"] == {"fsdp": 8, "tp": 1}
        assert row["why"] == (
            "4x2, 2x4 not compiled (the search's time budget: --minutes to go further), "
            "where it may run faster"
        )
    assert row["status"] == "fits" and not row["compute_bound"]


@pytest.mark.parametrize(
    ("fits_up_to", "search_below", "searched"),
    [(10**6, True, False), (60, True, True), (60, False, False)],
)
def test_the_large_enough_batch_is_compiled_before_any_search_below_it(
    fits_up_to, search_below, searched, monkeypatch
):
    """A memory-bound step (weights 1e9 bytes, 1e6 a sequence): 1 and 2 are compiled, then the
    batch large_enough names. Where that fits it is the answer and nothing below it is searched
    (the search's fast locating compiles were 2 of the 5 a tiny LoRA slice took); where it does
    not, the largest batch that fits is searched for under it, but on a mesh tried for speed
    (`search_below` False: a search compiles two programs at once), where the cheaper of 1 and
    2 prices it."""
    compiled, searches = [], []

    def plan_point(request, use_cache):
        compiled.append(request.batch)
        chip = parse_target("v6e-1").chip
        flops, accessed = request.batch * 1e6, 1e9 + request.batch * 1e6
        return {
            "fits": request.batch <= fits_up_to,
            **{"batch": request.batch, "seq": request.seq, "remat": request.remat},
            **{"target": "v6e-1", "workload": "lora-train", "cached": False, "devices": 1},
            **{"mesh_shape": {"fsdp": 1, "tp": 1}, "hosts": 1},
            **{"bytes_per_device": 1, "hbm_bytes": 2, "compile_s": 1.0},
            **{"flops_per_device": flops, "bytes_accessed_per_device": accessed},
            "roofline_lower_bound_s": max(chip.roofline_terms(flops, accessed)),
        }

    def max_batch(request, *, ceiling, use_cache, progress):
        searches.append(ceiling)
        point = plan_point(dataclasses.replace(request, batch=fits_up_to), use_cache)
        return {
            "compiles": 1,
            "probes": [{**point, "fast": False}],
            "assigned_probes": [],
        }

    monkeypatch.setattr(candidate, "plan_point", plan_point)
    monkeypatch.setattr(candidate, "max_batch", max_batch)
    enough = candidate.large_enough(plan_point(_tiny_at(1), False), plan_point(_tiny_at(2), False))
    compiled.clear()
    row = candidate._on_one_mesh(
        _tiny_at(1),
        slice_job.Job(1e9, "tokens"),
        "on-demand",
        use_cache=False,
        search_below=search_below,
    )
    assert compiled[:3] == [1, 2, enough] and enough > 2
    assert searches == ([enough] if searched else [])
    expected = fits_up_to if searched else enough if enough <= fits_up_to else 2
    assert row["batch"] == expected


def _tiny_at(batch: int) -> Request:
    return dataclasses.replace(TINY, batch=batch)


def test_a_grpo_floor_compiles_nothing_and_holds_no_more_than_the_verdict(monkeypatch, tmp_path):
    """GRPO's decode takes prefill's compiled output layout; a floor (22 s a slice for gemma3-4b
    when building it compiled prefill: 13 of the 22 minutes of a --cheapest search) compiles
    nothing, and splits decode's arguments as far as the mesh allows, so it holds no more
    bytes than the compiled verdict."""
    from jax import stages

    from shared.plan import verdict

    monkeypatch.setattr(verdict, "CACHE_DIR", tmp_path / "plan-cache")
    grpo = Request(
        "grpo", "gemma3-tiny", "v5e-8", prompt_len=16, steps=16, batch=8, lora_rank=4, layers=1
    )

    def refuse(*args, **kwargs):
        raise AssertionError("a floor verdict compiled")

    with monkeypatch.context() as patched:
        patched.setattr(stages.Lowered, "compile", refuse)
        floor = verdict.floor_verdict(grpo)
    point = verdict.plan_point(dataclasses.replace(grpo, fast=True))
    assert 0 < floor["floor_bytes"] <= point["bytes_per_device"]
    assert not point["skipped"] and "rollout_decode" in point["executables"]
