"""The buffer-assignment probe (shared.plan.compiler.assigned): a child compile stopped at XLA's
memory-usage report, a locating point a search aims with, never a verdict."""

import pytest

from shared import plan
from shared.hardware import parse_target
from shared.plan import verdict
from shared.plan.compiler import assigned, host_memory
from shared.plan.compiler.assigned import assigned_points, locates_at_assignment
from shared.plan.compiler.workload_bytes import resident_bytes
from shared.plan.workloads import build_workload

pytestmark = pytest.mark.usefixtures("empty_plan_cache")


def test_bytes_at_buffer_assignment_hold_the_arguments_and_are_cached():
    """How near the report comes to the exact bytes is benchmarks/results/plan_locate.json's
    (2.4-2.8% under for 1B and 8B steps); a tiny model's few MB are no test of that (its exact
    bytes fall from 18.7 MB at batch 8 to 3.4 MB at 64), so here only what must hold: the
    arguments are in the HBM's memory space the report gives first."""
    requests = [
        plan.Request("sft", "gemma3-tiny", "v5e-8", batch=b, seq=64, layers=1) for b in (8, 64)
    ]
    probed = assigned_points(requests)
    for point, request in zip(probed, requests, strict=True):
        assert point["compiled"] and not point["cached"] and point["compile_s"] > 0
        floor = verdict.floor_verdict(request)
        assert floor["floor_bytes"] <= point["bytes_per_device"] <= point["hbm_bytes"]
        assert point["fits"] and point["hbm_bytes"] == floor["hbm_bytes"]
    again = assigned_points(requests)
    assert [p["cached"] for p in again] == [True, True]
    assert [p["bytes_per_device"] for p in again] == [p["bytes_per_device"] for p in probed]
    assert verdict.read_cache(requests[0]) is None  # a probe is never a cached verdict


def test_a_batch_whose_arguments_alone_exceed_the_hbm_starts_no_child():
    (point,) = assigned_points([plan.Request("sft", "gemma3-tiny", "v5e-1", batch=10**8)])
    assert not point["fits"] and not point["compiled"] and point["compile_s"] == 0
    assert point["bytes_per_device"] > point["hbm_bytes"]


def test_a_probe_child_is_announced_to_the_processes_sharing_the_cache_from_its_start():
    """A second atlas run started its probe beside one that was not announced until it was
    found finishing, and both went on into whole compiles the machine could not hold
    (2026-12-02): the child is announced as it starts, and withdrawn as it ends."""
    request = plan.Request("sft", "gemma3-tiny", "v5e-8", batch=8, seq=64, layers=1)
    child = assigned._Child(request, verdict.floor_verdict(request))
    announced = verdict.CACHE_DIR / host_memory.COMPILING / f"{child.process.pid}.json"
    try:
        assert announced.exists()
    finally:
        child.close()
    assert not announced.exists()


def test_grpo_is_probed_at_its_policy_update_with_the_resident_bytes_it_does_not_take():
    """GRPO's point: the update's report plus the buffers resident beside it (the reference
    model's weights), as a verdict would count them were the update the worst."""
    request = plan.Request("grpo", "gemma3-tiny", "v5e-1", batch=4, prompt_len=8, steps=8, layers=1)
    (point,) = assigned_points([request])
    assert list(point["probed"]) == ["policy_update"] and point["workload_executables"] > 1
    # the resident buffers a verdict counts (verdict._Compiling), known without compiling
    workload = build_workload(request, plan.target_mesh(parse_target("v5e-1")))
    resident = resident_bytes(workload)
    assert set(resident) > {"weights", "optimizer state"}  # the reference's, too
    assert point["bytes_per_device"] >= sum(resident.values())


def test_a_rollout_is_probed_at_prefill_and_decode_and_its_point_is_the_worst():
    """A rollout's executables each take only their own arguments (the weights both read are
    resident), so both are probed side by side, as a verdict compiles them, and the point is
    the larger: each report holds the weights already."""
    request = plan.Request(
        "rollout", "gemma3-tiny", "v5e-8", batch=64, prompt_len=8, steps=8, layers=1
    )
    (point,) = assigned_points([request])
    assert set(point["probed"]) == {"prefill", "decode"} and point["workload_executables"] == 2
    assert point["bytes_per_device"] == max(point["probed"].values())
    assert verdict.floor_verdict(request)["floor_bytes"] <= point["bytes_per_device"]


@pytest.mark.parametrize(
    "workload, shape, probed",
    [
        ("rollout", (1, 1), False),  # one device: a fast compile is as near, and cheaper
        ("rollout", (4, 2), True),
        ("lora-rollout", (8, 1), True),
        ("lora-train", (1, 1), True),
        ("grpo", (1, 1), True),
        ("train", (8, 1), False),  # compiles in seconds: a child costs as much
    ],
)
def test_which_searches_locate_at_buffer_assignment(workload, shape, probed):
    assert locates_at_assignment(plan.Request(workload, "gemma3-tiny", "v5e-8"), shape) is probed


def test_a_fine_tune_step_is_located_at_buffer_assignment_and_answered_exactly(monkeypatch):
    """max_batch on a LoRA step locates with the whole model's bytes at buffer assignment, not
    fast or cut compiles, and every verdict it answers with is exact. The point it aims at (8,
    the ceiling here) is where it compiles exactly first, and that verdict takes the compile
    the probe's child went on with past buffer assignment, rather than compiling it again;
    no child outlives the search."""
    request = plan.Request("lora-train", "gemma3-tiny", "v5e-1", seq=64, lora_rank=4, layers=1)
    found = plan.max_batch(request, ceiling=8, progress=False)
    assert [p["batch"] for p in found["assigned_probes"]] == [1, 8]
    assert all(not p["fast"] for p in found["probes"])
    assert found["max_batch"] == 8 and found["at_least"]
    assert found["compiles"] == len(found["assigned_probes"]) + len(found["probes"])
    (at_answer,) = [p for p in found["probes"] if p["batch"] == 8]
    assert [e.get("compiled_before") for e in at_answer["executables"].values()] == [True]
    assert not assigned._FINISHING
    # what the finished child's compile took of this machine's memory, kept for the next
    # process beside the plan cache
    assert not host_memory._ELSEWHERE
    monkeypatch.setattr(host_memory, "_ONE_COMPILE", {})
    assert host_memory.one_compile_bytes(request, None) == 0
    assert host_memory.one_compile_bytes(request, verdict.CACHE_DIR) > 0


def test_an_answer_at_the_located_low_end_takes_its_probes_compile():
    """Where the exact compiles start at the low end (here nothing above it to try), the
    verdict there takes the compile the first probe's child went on with."""
    request = plan.Request("lora-train", "gemma3-tiny", "v5e-1", seq=64, lora_rank=4, layers=1)
    found = plan.max_batch(request, ceiling=1, progress=False)
    assert [p["batch"] for p in found["assigned_probes"]] == [1]
    (exact,) = found["probes"]
    assert exact["batch"] == 1 and exact["fits"] and not exact["fast"]
    assert [e.get("compiled_before") for e in exact["executables"].values()] == [True]
    assert not assigned._FINISHING
