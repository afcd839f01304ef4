"""The meshes a batch search compares (shared.plan.search.max_batch): which to ask, in what
order, whether each fits more than the answer so far, and the answer they make together. The
atlas completes a stored answer that left a mesh unasked with the same loop
(shared.plan.atlas.run.mesh_row)."""

from __future__ import annotations

from shared.plan.mesh import batch_ceiling, search_shape, wider_shapes
from shared.plan.search_result import mesh_answer, worst_at_answer
from shared.plan.verdict import Request


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
    compiled alone first; where one does, `search` (a mesh's search: shape, exact_from,
    first_worst) goes on above it there, up to the search's ceiling `cap`. Adds each mesh's
    search to `answers` (mesh -> its search) and returns the best mesh."""
    for other in others:
        fitted = answers[best]["max_batch"]
        wins_a_tie = other[1] < best[1]
        least = fitted if wins_a_tie and fitted else fitted + 1  # the least that beats it
        if least > cap:
            break  # the answer is the search's ceiling: no mesh can beat it
        # most likely a failure; a mesh whose ceiling is under `least` is answered by
        # arithmetic (its verdict's floor)
        answers[other] = search(other, fitted and least, worst)
        found = answers[other]["max_batch"]
        if found > fitted or (found and found == fitted and wins_a_tie):
            best, worst = other, worst_at_answer(answers[other])
    return best


def meshes_result(answers: dict, best: tuple[int, int], ceilings: dict) -> dict:
    """max_batch's answer from each mesh's search (`answers`, mesh -> search): the `best`
    mesh's, with every mesh's step, ceiling and answer, and the probes and compiles of all."""
    result = {
        **answers[best],
        "mesh_shape": {"fsdp": best[0], "tp": best[1]},
        "units": {f"{f}x{t}": s["multiple_of"] for (f, t), s in answers.items()},
    }
    if len(ceilings) > 1:
        result["mesh_ceilings"] = {f"{f}x{t}": c for (f, t), c in ceilings.items()}
    if len(answers) > 1:
        by_tp = sorted(answers.items(), key=lambda item: item[0][1])
        for key in ("probes", "assigned_probes"):
            result[key] = [p for _, s in by_tp for p in s[key]]
        for key in ("compiles", "wall_s"):
            result[key] = sum(s[key] for _, s in by_tp)
        result["mesh_answers"] = {f"{f}x{t}": mesh_answer(s) for (f, t), s in by_tp}
    return result
