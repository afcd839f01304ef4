"""shared.plan.mesh.choice: the mesh a verdict compiles on when none is given. All fsdp while it
works; on a big slice, the smallest tp that divides the weights and the batch, and for a model
too big to sit whole on each chip the smallest that holds it, said in the verdict; a given mesh
is kept as given."""

import pytest

from shared.errors import BadInput
from shared.hardware import parse_target
from shared.plan import Request, max_batch, plan_point
from shared.plan.cli import point_view
from shared.plan.compiler.target import target_devices
from shared.plan.mesh import faster as faster_meshes
from shared.plan.mesh.choice import auto_shape, mesh_for, search_shape
from shared.plan.verdict import floor_verdict

pytestmark = pytest.mark.usefixtures("empty_plan_cache")


def _devices(target):
    return target_devices(parse_target(target))


def test_all_fsdp_while_it_shards_the_model_and_the_batch():
    request = Request("rollout", "gemma3-1b", "v5e-8", batch=64)
    mesh, note = mesh_for(request, _devices("v5e-8"))
    assert dict(mesh.shape) == {"fsdp": 8, "tp": 1} and note is None


def test_a_256_chip_slice_takes_the_smallest_tp_that_shards_gemma3_1b():
    """1152 (gemma3-1b's width) is 2^7 x 9: 256 fsdp ways do not divide it, 128 do."""
    request = Request("rollout", "gemma3-1b", "v5e-256", batch=256)
    mesh, note = mesh_for(request, _devices("v5e-256"))
    assert dict(mesh.shape) == {"fsdp": 128, "tp": 2}
    assert "mesh 128x2 chosen: the smallest tp" in note and "256x1 does not" in note
    assert search_shape(request, _devices("v5e-256")) == (128, 2)


def test_a_batch_smaller_than_the_slice_moves_devices_to_tp():
    request = Request("lora-train", "gemma3-1b", "v5e-16", batch=8, seq=128)
    assert auto_shape(request, _devices("v5e-16"))[0] == (8, 2)
    assert search_shape(request, _devices("v5e-16")) == (16, 1)  # a search steps in 16s


def test_a_model_too_big_to_sample_whole_on_each_chip_is_split_over_tp():
    """A sampled model's weights are whole on every fsdp device: gemma3-12b's 22.4 GiB cannot
    sit on a v5e's 15.75 GiB, so all fsdp would answer "does not fit" for a slice whose eight
    chips hold it easily split in two (by arithmetic: nothing compiles here)."""
    request = Request(
        "rollout", "gemma3-12b", "v5e-8", batch=8, prompt_len=256, steps=1024, cache_size=1312
    )
    mesh, note = mesh_for(request, _devices("v5e-8"))
    assert dict(mesh.shape) == {"fsdp": 4, "tp": 2}
    assert "the smallest tp that holds the weights" in note and "needs 22.4 GiB" in note
    assert search_shape(request, _devices("v5e-8")) == (4, 2)
    assert floor_verdict(request)["fits"]


def test_a_given_mesh_is_kept_and_checked():
    request = Request("rollout", "gemma3-1b", "v5e-8", batch=4, mesh="8x1")
    with pytest.raises(BadInput, match="batch 4 does not divide the mesh's fsdp axis of 8"):
        mesh_for(request, _devices("v5e-8"))


def test_a_multi_host_verdict_names_its_hosts_and_mesh():
    point = plan_point(
        Request(
            "rollout", "gemma3-tiny", "v5e-16", batch=4, prompt_len=8, steps=8, fast=True, layers=1
        )
    )
    assert point["hosts"] == 4 and point["mesh_shape"] == {"fsdp": 4, "tp": 4}
    assert any("4 hosts, one slice" in note for note in point["notes"])
    assert any("mesh 4x4 chosen" in note for note in point["notes"])


def test_a_search_keeps_one_mesh_for_every_probe(monkeypatch):
    from shared.plan.search import max_batch as search

    monkeypatch.setattr(search, "CEILING", 256)
    request = Request("rollout", "gemma3-tiny", "v5e-256", prompt_len=8, steps=8, layers=1)
    found = max_batch(request, progress=False)  # 256 fsdp ways do not divide tiny's 128 width
    assert found["mesh"] == "128x2" and found["multiple_of"] == 128
    # a rollout on a mesh of several devices is located at buffer assignment
    assert [p["batch"] for p in found["assigned_probes"]] == [128, 256]
    assert all(p["mesh"] == "128x2" for p in found["assigned_probes"])
    assert [p["batch"] for p in found["probes"]] == [256]
    assert all(p["mesh_shape"] == {"fsdp": 128, "tp": 2} for p in found["probes"])


def test_a_memory_bound_verdict_on_fsdp_names_the_wider_meshes_and_a_compute_bound_one_not():
    """The verdict's printout says what to try where the bytes term is the larger and the mesh
    has room for more tp (a decode on 8x1 reads every weight on every chip), and nothing where
    the FLOPs term is, or where every device is on tp already."""
    point = {
        "target": "v5e-8",
        "devices": 8,
        "mesh_shape": {"fsdp": 8, "tp": 1},
        "flops_per_device": 1e12,  # 5 ms at a v5e's 197 TFLOP/s
        "bytes_accessed_per_device": 1e11,  # 122 ms at its 819 GB/s
    }
    hint = point_view.wider_mesh_hint(point)
    assert hint.startswith("memory-bound on 8x1 (bytes 122 ms > FLOPs 5 ms a run)")
    assert "--cheapest compares them" in hint
    assert point_view.wider_mesh_hint({**point, "flops_per_device": 1e14}) is None
    assert point_view.wider_mesh_hint({**point, "mesh_shape": {"fsdp": 1, "tp": 8}}) is None


@pytest.mark.parametrize(
    "case", ["memory-bound", "compute-bound", "mesh named", "4x2 too full", "4x2 slower"]
)
def test_a_memory_bound_recipe_is_compiled_on_more_tp_while_it_gets_faster(case, monkeypatch):
    """faster_meshes.on_wider_meshes (notebook 07's session on the layout a run would use): a
    step reading 8, 4, 3.9 and 1.9 TB a chip on 8x1, 4x2, 2x4 and 1x8 is compiled on each wider
    mesh while the fastest so far is memory-bound and each is faster, by any margin (2x4 saves
    2.5% on 4x2, and 1x8 half again). A compute-bound step, or a mesh the reader named,
    compiles nothing more; a wider mesh that does not fit is passed over, and one slower than
    the fastest so far ends the climb."""
    reads = {"4x2": 9e12 if case == "4x2 slower" else 4e12, "2x4": 3.9e12, "1x8": 1.9e12}
    chip = parse_target("v5e-8").chip

    def verdict(mesh, accessed, flops=1e9, fits=True):
        return {
            "target": "v5e-8",
            "mesh_shape": dict(zip(("fsdp", "tp"), map(int, mesh.split("x")), strict=True)),
            "fits": fits,
            "flops_per_device": flops,
            "bytes_accessed_per_device": accessed,
            "roofline_lower_bound_s": max(chip.roofline_terms(flops, accessed)),
        }

    asked = []

    def compiled(request, use_cache):
        asked.append(request.mesh)
        return verdict(
            request.mesh,
            reads[request.mesh],
            fits=not (case == "4x2 too full" and request.mesh == "4x2"),
        )

    monkeypatch.setattr(faster_meshes, "plan_point", compiled)
    monkeypatch.setattr(faster_meshes, "wider_shapes", lambda *_: [(4, 2), (2, 4), (1, 8)])
    request = Request("grpo", "gemma3-1b", "v5e-8", mesh="8x1" if case == "mesh named" else None)
    first = verdict("8x1", 8e12, flops=1e17 if case == "compute-bound" else 1e9)
    found = faster_meshes.on_wider_meshes(request, first)
    if case in ("compute-bound", "mesh named"):
        assert found == {} and asked == []
        return
    if case == "4x2 slower":
        assert asked == ["4x2"]
        return
    assert asked == ["4x2", "2x4", "1x8"]
    assert [v["fits"] for v in found.values()] == [case != "4x2 too full", True, True]
