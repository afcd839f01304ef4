"""How many compiles run at once on this machine's memory (shared.plan.compiler.host_memory): two
exact compiles of gemma3-27b's LoRA step side by side took a 23 GiB machine to 20.7 GB, and the
kernel killed the search. Free memory and compile sizes are made up here; the compiles real."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from shared import plan
from shared.errors import BadInput
from shared.plan import verdict
from shared.plan.compiler import host_memory

pytestmark = pytest.mark.usefixtures("empty_plan_cache")
GIB = 2**30
BIG = plan.Request("lora-train", "gemma3-27b", "v6e-4")


@pytest.fixture
def free(monkeypatch) -> dict:
    """The free memory the kernel reports (MemAvailable), as the test sets it."""
    memory = {"bytes": 22 * GIB}
    monkeypatch.setattr(host_memory, "available_bytes", lambda: memory["bytes"])
    return memory


def test_compiles_go_side_by_side_only_where_each_ones_measured_peak_fits(free):
    folder = verdict.CACHE_DIR
    folder.mkdir(parents=True)
    assert host_memory.compiles_at_once([BIG, BIG], 2, folder) == 2  # nothing measured yet
    host_memory.record(BIG, 6 * GIB, folder)
    assert host_memory.compiles_at_once([BIG, BIG], 2, folder) == 2
    host_memory.record(BIG, 10 * GIB, folder)
    host_memory.record(BIG, 8 * GIB, folder)  # the most seen is kept
    free["bytes"] = 19 * GIB
    assert host_memory.compiles_at_once([BIG, BIG], 2, folder) == 1
    free["bytes"] = 3 * GIB
    assert host_memory.compiles_at_once([BIG], 1, folder) == 1  # one at least, always
    # the next process knows it from the plan cache's folder before its first compile
    host_memory._ONE_COMPILE.clear()
    assert host_memory.one_compile_bytes(BIG, folder) == 10 * GIB
    assert host_memory.one_compile_bytes(BIG, None) == 0


def test_the_line_said_names_what_a_short_memory_does(free, monkeypatch, capsys):
    """One line a key: fewer at once, or (nothing else to wait for) one that may not fit. The
    line said "1 compile(s) at once, not 1" where one compile went ahead with too little free
    (a tpu7x-8 atlas run beside another, 2026-12-02)."""
    monkeypatch.setattr(host_memory, "_SAID", set())
    host_memory.record(BIG, 10 * GIB, None)
    free["bytes"] = 15 * GIB
    assert host_memory.compiles_at_once([BIG, BIG], 2, None) == 1
    assert "plan: 1 compile(s) at once, not 2: " in capsys.readouterr().err
    monkeypatch.setattr(host_memory, "_SAID", set())
    free["bytes"] = 3 * GIB
    assert host_memory.compiles_at_once([BIG], 1, None) == 1
    said = capsys.readouterr().err
    assert "plan: one compile, with less memory free than it may take: " in said
    assert "10.0 GiB of this machine's memory, 3.0 GiB free" in said


def test_a_corrupt_or_unwritable_store_measures_again(free, tmp_path):
    (tmp_path / host_memory.STORE).write_text("{not json")
    assert host_memory.one_compile_bytes(BIG, tmp_path) == 0
    host_memory.record(BIG, 10 * GIB, tmp_path)  # written over
    host_memory._ONE_COMPILE.clear()
    assert host_memory.one_compile_bytes(BIG, tmp_path) == 10 * GIB
    host_memory.record(BIG, 11 * GIB, tmp_path / "missing")  # kept in this process only
    assert host_memory.one_compile_bytes(BIG, None) == 11 * GIB


def test_a_compile_waits_while_a_child_compiling_elsewhere_holds_its_room(free):
    """A probe child finishing its compile (shared.plan.compiler.assigned) may still take what it
    has
    not taken yet; where that leaves no room for one more, the next compile waits for it."""
    host_memory.record(BIG, 12 * GIB, None)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    host_memory.compiling_elsewhere(child.pid, BIG)
    try:
        threading.Timer(1.0, child.kill).start()
        started = time.perf_counter()
        assert host_memory.compiles_at_once([BIG], 1, None) == 1
        assert time.perf_counter() - started >= 1.0  # it returned once the child was gone
        assert not host_memory._ELSEWHERE
    finally:
        child.kill()
        child.wait()
        host_memory.done_elsewhere(child.pid)


def test_a_compile_waits_while_another_process_sharing_the_cache_compiles(free, tmp_path):
    """Two atlas runs sharing a plan cache each saw only what the other held (MemAvailable), not
    what its compile would still take, and started exact compiles side by side that the
    machine could not hold (2026-12-02): what one announces, the other waits for."""
    host_memory.record(BIG, 12 * GIB, tmp_path)
    announcing = (
        "import sys, time; from shared import plan; from shared.plan.compiler import host_memory; "
        "from pathlib import Path; request = plan.Request('lora-train', 'gemma3-27b', 'v6e-4'); "
        "context = host_memory.compiling_here([request], 1, Path(sys.argv[1])); "
        "context.__enter__(); time.sleep(60)"
    )
    other = subprocess.Popen([sys.executable, "-c", announcing, str(tmp_path)])
    announced = tmp_path / host_memory.COMPILING / f"{other.pid}.json"
    try:
        while not announced.exists():
            assert other.poll() is None, "the announcing process ended early"
            time.sleep(0.1)
        threading.Timer(1.0, other.kill).start()
        started = time.perf_counter()
        assert host_memory.compiles_at_once([BIG], 1, tmp_path) == 1
        assert time.perf_counter() - started >= 1.0  # it returned once the other had ended
        assert not announced.exists()  # a killed process's announcement is cleared
        # (_fitting: 0 would be a wait, which compiles_at_once would never end)
        with host_memory.compiling_here([BIG], 1, tmp_path):  # this one's own is passed over
            assert host_memory._fitting([BIG], 1, tmp_path) == 1
            assert (tmp_path / host_memory.COMPILING / f"{os.getpid()}.json").exists()
        assert not list((tmp_path / host_memory.COMPILING).iterdir())
        # a killed run's announcement whose pid the kernel has since given to another process
        reused = tmp_path / host_memory.COMPILING / f"{os.getppid()}.json"
        key = "lora-train gemma3-27b"
        reused.write_text(
            json.dumps({"key": key, "compiles": 1, "resident_before": 0, "started": 1})
        )
        assert host_memory._fitting([BIG], 1, tmp_path) == 1
        assert not reused.exists()
    finally:
        other.kill()
        other.wait()


def test_a_compile_never_measured_starts_beside_no_other_processs(free, tmp_path):
    """Two atlas runs' first exact compiles (qwen3-8b's and gemma3-12b's LoRA steps on a
    tpu7x-8), neither measured, each counted the other's as taking nothing more, and ran side
    by side until the second was killed (alone they took 17.0 and 23.3 GB of a 23 GiB machine;
    2026-12-02): where this compile or the one beside it was never measured, it waits; once
    both are, the measures decide."""
    small = plan.Request("rollout", "gemma3-1b", "v5e-1")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    announced = tmp_path / host_memory.COMPILING / f"{other.pid}.json"
    announced.parent.mkdir()
    started = host_memory.started_at(other.pid)
    announced.write_text(
        json.dumps(
            {
                "key": "lora-train gemma3-27b",
                "compiles": 1,
                "resident_before": 0,
                "started": started,
            }
        )
    )
    try:
        assert host_memory._fitting([small], 2, tmp_path) == 0  # neither is measured
        host_memory.record(small, 1 * GIB, tmp_path)
        assert host_memory._fitting([small], 2, tmp_path) == 0  # the one beside is not
        host_memory.record(BIG, 12 * GIB, tmp_path)
        assert host_memory._fitting([small], 2, tmp_path) == 2  # 22 GiB free, 12 of it theirs
        free["bytes"] = 12 * GIB
        assert host_memory._fitting([small], 2, tmp_path) == 0  # theirs may take it all
    finally:
        other.kill()
        other.wait()
    # with nobody beside it, a compile never measured goes ahead, as many as asked
    assert host_memory._fitting([plan.Request("sft", "gemma3-4b", "v5e-8")], 3, tmp_path) == 3
    assert not announced.exists()


def test_a_round_of_compiles_records_this_processs_growth(monkeypatch):
    peaks = iter([3 * GIB])
    monkeypatch.setattr(host_memory, "peak_resident_bytes", lambda: next(peaks))
    host_memory.record_round([BIG, BIG], 1 * GIB, None)  # 2 GiB over two compiles
    assert host_memory.one_compile_bytes(BIG, None) == GIB


def test_the_benchmark_measures_a_probe_child_and_this_processs_compiles():
    """shared.plan.compiler.compile_footprint (benchmarks/bench_host_memory.py) on a tiny model:
    every measure is there and the child's whole compile took at least what it had at its
    reports; the plan cache's folder is put back after its scratch one, and a request it cannot
    read is one line."""
    from shared.plan.compiler import compile_footprint

    cache = verdict.CACHE_DIR
    (measured,) = compile_footprint.measure_requests(["lora-train gemma3-tiny v5e-1 1 64"])
    assert measured["child_whole_compile_gib"] >= measured["child_at_reports_gib"]
    assert [e["batch"] for e in measured["exact_in_process"]] == [1, 2]
    assert all(e["fits"] and e["growth_gib"] >= 0 for e in measured["exact_in_process"])
    assert verdict.CACHE_DIR == cache
    with pytest.raises(BadInput, match="give 'workload model target batch seq'"):
        compile_footprint.parse_request("lora-train gemma3-tiny v5e-1 1")


def test_giving_back_freed_memory_keeps_what_is_in_use(free, monkeypatch):
    """malloc_trim returns only free pages: what this process holds stays readable; jax's
    caches are cleared only where the free memory would not hold the compiles wanted."""
    cleared = []
    monkeypatch.setattr(host_memory.jax, "clear_caches", lambda: cleared.append(1))
    held = bytearray(64 * 2**20)
    held[::4096] = b"x" * len(held[::4096])
    host_memory.give_back_freed([BIG, BIG], 2, None)  # nothing measured: room for both
    host_memory.record(BIG, 12 * GIB, None)
    host_memory.give_back_freed([BIG, BIG], 2, None)  # 22 GiB free: room for one
    assert len(cleared) == 1
    assert held[::4096] == b"x" * len(held[::4096])
    assert host_memory.resident_bytes() >= len(held)
