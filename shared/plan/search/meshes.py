"""The meshes a batch search compares (docs/search.md, "Several meshes"; the search is
shared.plan.search.max_batch): which to ask, in what order, whether each fits more than the
answer so far, and the answer they make together. The atlas completes a stored answer that left a
mesh unasked with the same loop (shared.plan.atlas.run.mesh_row)."""

from __future__ import annotations

from shared.hardware.sharding import mesh_name
from shared.plan.mesh.choice import batch_ceiling, search_shape, wider_shapes
from shared.plan.search.result import mesh_answer, worst_at_answer
from shared.plan.workloads.request import Request


def meshes_by_ceiling(request: Request, devices: list) -> dict[tuple[int, int], int]:
    """The meshes a search without --mesh asks (the rule's and every wider tp the weights
    divide), each with its batch_ceiling, the highest first (fewer tp on a tie)."""
    shape = search_shape(request, devices)
    meshes = [shape, *(wider_shapes(request, devices, than=shape) if request.mesh is None else [])]
    ceilings = {m: batch_ceiling(request, m, devices) for m in meshes}
    return dict(sorted(ceilings.items(), key=lambda item: (-item[1], item[0][1])))


def beat_on_other_meshes(
    answers: dict,
    best: tuple[int, int],
    others: list[tuple[int, int]],
    worst: str | None,
    search,
    cap: int,
) -> tuple[int, int]:
    """max_batch's step 2: each mesh of `others`, in order, asked whether it fits more than the
    answer on `best` (as many, where it has fewer tp), the executable `worst` at that answer
    compiled alone first; where one does, `search` (shared.plan.search.max_batch.MeshSearch) goes on
    above it there, up to the search's ceiling `cap`. Each question compiles beside the next
    mesh's, asked for the same answer (search.ask): most are refusals, one executable each, so
    two meshes are asked in the time of one; where the first does fit more, the next is asked
    again for its new answer. Adds each mesh's search to `answers` (mesh -> its search) and
    returns the best mesh."""
    asked: dict[tuple[int, int], dict] = {}
    for i, other in enumerate(others):
        fitted = answers[best]["max_batch"]
        least = _least_to_beat(other, best, fitted)
        if least > cap:
            break  # the answer is the search's ceiling: no mesh can beat it
        if other not in asked:
            # most likely a failure; a mesh whose ceiling is under `least` is answered by
            # arithmetic (its verdict's floor)
            pair = [m for m in others[i : i + 2] if _least_to_beat(m, best, fitted) <= cap]
            questions = [(m, fitted and _least_to_beat(m, best, fitted)) for m in pair]
            asked.update(zip(pair, search.ask(questions, worst), strict=True))
        answers[other] = search(other, fitted and least, worst, asked.pop(other))
        found = answers[other]["max_batch"]
        if found > fitted or (found and found == fitted and _wins_a_tie(other, best)):
            best, worst = other, worst_at_answer(answers[other])
    return best


def _wins_a_tie(mesh: tuple[int, int], best: tuple[int, int]) -> bool:
    """Whether `mesh` is the answer where it fits as many as `best`: it has fewer tp."""
    return mesh[1] < best[1]


def _least_to_beat(mesh: tuple[int, int], best: tuple[int, int], fitted: int) -> int:
    """The least batch `mesh` must fit to be the answer over `best`, which fits `fitted`."""
    return fitted if _wins_a_tie(mesh, best) and fitted else fitted + 1


def meshes_result(answers: dict, best: tuple[int, int], ceilings: dict) -> dict:
    """max_batch's answer from each mesh's search (`answers`, mesh -> search): the `best`
    mesh's, with every mesh's step, ceiling and answer, and the probes and compiles of all."""
    result = {
        **answers[best],
        "mesh_shape": {"fsdp": best[0], "tp": best[1]},
        "units": {mesh_name(m): s["multiple_of"] for m, s in answers.items()},
    }
    if len(ceilings) > 1:
        result["mesh_ceilings"] = {mesh_name(m): c for m, c in ceilings.items()}
    if len(answers) > 1:
        by_tp = sorted(answers.items(), key=lambda item: item[0][1])
        for key in ("probes", "assigned_probes"):
            result[key] = [p for _, s in by_tp for p in s[key]]
        for key in ("compiles", "wall_s"):
            result[key] = sum(s[key] for _, s in by_tp)
        result["mesh_answers"] = {mesh_name(m): mesh_answer(s) for m, s in by_tp}
        # every mesh's: where another mesh's compiler failed, its "<N" is no failure for bytes
        result["compiler_errors"] = [
            {**e, "mesh": mesh_name(m)} for m, s in by_tp for e in s.get("compiler_errors", [])
        ]
    return result
