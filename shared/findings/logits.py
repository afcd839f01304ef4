"""What notebook 03's two halves do with their numbers besides computing them.

`compare` computes (bytes, time, exactness); this module is the plumbing around it that a
reader of the notebooks need not scroll through: which number to show (this run's, or the
committed one its answer quotes when this run did not compute it), whether this run's numbers
still agree with the committed ones (`report.agree`, one printed line each), the tables built
from the results, and device mode's measured sweep with its ledger rows.
"""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from shared import models, report
from shared.errors import BadInput
from shared.hardware import measure, parse_target, prices
from shared.hardware.sharding import batch_sharding
from shared.logits import compare
from shared.logits.settings import FitSearch
from shared.plan import describe, target_devices
from shared.plan.slices import budget
from shared.report import ledger
from shared.rollout.sampler import random_prompts

# -- 03_sparse_logits_exactness ---------------------------------------------------------------


def agree_exactness(topk_rows, loss_rows, params: dict, quoted: dict) -> bool | None:
    """Check this run's bf16 index mismatches at ties and d-table errors against the committed
    benchmark's (`quoted`: 03_logits_cpu.json), row by row, when this run repeated its check
    (`params` as ExactnessCheck.exactness_params). fp32 and the reference's own rows are not
    compared: they are exact by construction. Returns whether all agree; None when there was
    nothing to compare with."""
    committed = quoted.get("exactness", {})
    if committed.get("params") != params:
        print("EXACT_SHAPE / EXACT_CHUNKS / K differ from the benchmark's: nothing to compare")
        return None
    checks = (
        ("index_mismatch_tied", topk_rows, committed["top_k"], "index mismatches"),
        ("d_embedding_rel_err", loss_rows, committed["loss"], "d table relative error"),
    )
    same = True
    for key, rows, old, what in checks:
        for live, then in zip(rows, old, strict=True):
            if live["dtype"] == "bfloat16" and live["method"] != "full logits":
                label = f"{live['method']}, bf16, softcap {live.get('softcap')}: {what}"
                same &= report.agree(label, live[key], then[key], rel=0.01)
    return same


def top_k_table(case: str, outputs: dict, ref, hidden, table) -> list[dict]:
    """One row per method of `outputs` ({method: (values, indices)}): its agreement with the
    reference top-(k+1) `ref` (compare.top_k_agreement, ties counted), labelled with `case`."""
    return [
        {"case": case, "method": method, **compare.top_k_agreement(*out, *ref, hidden, table)}
        for method, out in outputs.items()
    ]


def model_exactness(model, tokens, k: int, case: str) -> tuple[list[dict], list[dict]]:
    """Exactness on a real model's own hidden states: `models.teacher_forced_top_k` in mode
    "full" (materialise, then lax.top_k, as tunix's forward does) against mode "topk" (chunked),
    and the naive and chunked losses on the model's head with the next token as the target and
    its own soft-cap (Gemma 2 and 4 have one). Returns (top-k rows, loss rows)."""
    graphdef, state = nnx.split(model)
    graph = models.StaticGraph(graphdef)
    hidden = jax.jit(lambda s, t: models.hidden_states(nnx.merge(graphdef, s), t))(state, tokens)
    table = models.head_table(model)
    ref = models.teacher_forced_top_k(graph, state, tokens, mode="full", k=k + 1)
    ours = models.teacher_forced_top_k(graph, state, tokens, mode="topk", k=k)
    outputs = {
        "full logits": (ref[0][..., :k], ref[1][..., :k]),
        "chunked (teacher_forced_top_k)": ours,
    }
    top_rows = top_k_table(case, outputs, ref, hidden, table)
    ignored = jnp.full((tokens.shape[0], 1), -1, tokens.dtype)  # the last step has no target
    targets = jnp.concatenate([tokens[:, 1:], ignored], axis=1)
    cap = models.final_softcap(model)
    loss_rows = [
        {"case": case, "softcap": cap, **row}
        for row in compare.loss_errors(hidden, table, targets, softcap=cap)
    ]
    return top_rows, loss_rows


def timing_value(backend: str) -> str:
    """The time of compare.time_rows a run compares: on a CPU the CPU seconds each call used
    (other jobs' load on a shared machine inflates wall time, not those); on a device the wall
    time (the host's CPU time means nothing there)."""
    return "min_cpu_s" if backend == "cpu" else "min_s"


def agree_times(rows, quoted: dict, *, shape: dict, backend: str) -> dict:
    """Check this run's timing ratios (compare.ratios) against the committed benchmark's when
    it timed the same `shape` (ExactnessCheck.time_params) on the same kind of backend, within
    50%: single timings move +-30% with the host, so a ratio may move further. Returns the
    ratios."""
    value = timing_value(backend)
    same = quoted.get("time_shape") == shape and quoted.get("backend") == backend
    committed = quoted["time"]["cpu_ratios" if value == "min_cpu_s" else "ratios"] if same else {}
    host = quoted.get("host", {})
    why = (
        f"a timing ratio, which moves with the host (the committed one ran on "
        f"{host.get('cpus')} {host.get('machine')} CPUs at a load of "
        f"{host.get('load_average')}); the exactness numbers above do not"
    )
    live = compare.ratios(rows, value)
    for key, ratio in live.items():
        report.agree(f"{key} ({value})", round(ratio, 2), committed.get(key), rel=0.5, why=why)
    return live


def price_lines(rows, target: str, kind: str, tokens_per_call: int) -> list[str]:
    """Per timed approach: milliseconds per call and dollars per billion tokens on `target`
    (the attached slice) at its `kind` price; a slice without a published price says why."""
    lines = []
    for r in rows:
        ms = f"{r['method']}: {r['min_s'] * 1e3:.1f} ms per call"
        try:
            per_hour = prices.price_per_hour(target, kind)
        except BadInput as err:
            lines.append(f"{ms}; no dollars: {err}")
            continue
        dollars = per_hour * r["min_s"] / 3600 / tokens_per_call * 1e9
        lines.append(f"{ms}, ${dollars:,.2f} per billion tokens on {target} ({kind})")
    return lines


# -- 03_sparse_logits_fit ---------------------------------------------------------------------


def compile_device(target: str) -> tuple[object | None, str]:
    """One chip of `target` to compile for (abstract: no TPU needed) and how tables name it.
    A TPU chip (libtpu) or a GPU (jax's CUDA plugin), both without the device; without either
    package, (None, the local backend): the programs then compile for this machine, and the
    notebook says so."""
    try:
        device = target_devices(parse_target(target))[0]
    except BadInput as err:
        where = jax.default_backend()
        print(f"not compiling for {target} ({err}): compiling for {where} instead")
        return None, where
    return device, f"{target} ({device.device_kind}, one chip)"


def agree_memory(rows, quoted: dict, *, target: str, shape: dict, on_target: bool) -> bool | None:
    """Check the temporaries this run compiled at B = 8 against the committed benchmark's TPU
    compile of the same programs (`quoted`: 03_logits_cpu.json), when it compiled the same `shape`
    for the same `target` (`on_target`: this run did compile for it). The compiler is
    deterministic, so 0.1% apart means it changed. None when there is nothing to compare."""
    tpu = quoted.get("memory_tpu", {})
    live = {(r["what"], r["method"]): r["temp_bytes"] for r in rows if r["B"] == 8}
    comparable = tpu.get("target") == target and quoted.get("memory_shape") == shape
    if not (live and comparable and on_target):
        where = rows[0]["where"] if rows else target
        print(f"no committed numbers for B=8 at this size on {where}: nothing to compare with")
        return None
    same = True
    for r in tpu["rows"]:
        if (r["what"], r["method"]) in live:
            label = f"{r['method']}, temporaries at B=8 (bytes)"
            same &= report.agree(label, live[r["what"], r["method"]], r["temp_bytes"], rel=0.001)
    return same


def committed_search(model: str, target: str, seq: int, k: int) -> dict | None:
    """The committed whole-model search (logits_fit.json) when it answered this question (same
    model, target, sequence length and k); None otherwise or where none is committed."""
    fitted = report.committed("logits_fit")
    if not fitted:
        return None
    answered = (fitted["model"], fitted["target"], fitted["seq"], fitted["k"])
    return fitted if answered == (model, target, seq, k) else None


def exact_answers(searches: dict) -> list[dict]:
    """Each search's exact (not fast) verdict at its answer, the largest batch that fits:
    what the scoring run is priced at."""
    return [
        next(p for p in s["probes"] if p["batch"] == s["max_batch"] and not p["fast"])
        for s in searches.values()
        if s["max_batch"]
    ]


def agree_searches(searches: dict, fitted: dict | None) -> None:
    """Print each live search's answer, and whether it agrees with the committed search's."""
    for mode, search in searches.items():
        print(f"{mode}: {describe(search)}")
        quoted = fitted["modes"][mode]["max_batch"] if fitted else None
        report.agree(f"largest {mode} batch", search["max_batch"], quoted)


def scoring_costs(points, sequences: int, kind: str) -> list[str]:
    """For each verdict that fits: the time and dollars of scoring `sequences` sequences at
    its batch (plan.budget: a roofline lower bound and an estimate at a stated efficiency)."""
    lines = []
    for p in points:
        if p["fits"]:
            runs = math.ceil(sequences / p["batch"])  # a last, partly filled batch counts whole
            est = budget.estimate(p, runs=runs, kind=kind)
            lines.append(
                f"{p['logits']} at batch {p['batch']}, {sequences:,} sequences: "
                f"{budget.describe(est)}"
            )
    return lines


PROBE_KEYS = ("logits", "batch", "fast", "fits", "bytes_per_device")


def forward_probes(points, searches: dict, fitted: dict | None) -> tuple[list[dict], dict]:
    """The forward pass's verdicts to tabulate and draw, and each mode's largest batch: this
    run's (its `points` and its searches' probes), or where it searched nothing, the committed
    search's beside its points, the one the notebook's Takeaway quotes."""
    probes = [{k: p[k] for k in PROBE_KEYS} for p in points]
    probes += [{k: p[k] for k in PROBE_KEYS} for s in searches.values() for p in s["probes"]]
    if searches:
        return probes, {mode: s["max_batch"] for mode, s in searches.items()}
    committed = (fitted or {"modes": {}})["modes"]
    print(
        "no search in this run (MAX_BATCH is off; None turns it on in plan mode): "
        + ("the committed probes are drawn below" if fitted else "nothing committed to draw")
    )
    probes += [{"logits": mode, **p} for mode, v in committed.items() for p in v["probes"]]
    return probes, {mode: v["max_batch"] for mode, v in committed.items()}


def measure_forward(setting: FitSearch, mesh, predict, *, seed: int = 0) -> list[dict]:
    """Device mode: peak HBM and time of `models.teacher_forced_top_k` with random weights
    (their values do not change the bytes) at each of `setting.device_batches` that splits
    over the mesh, chunked ("topk") first, each mode in increasing batch order. The peak is a
    process-wide high-water mark, so a point whose peak does not rise above the mark before it
    has no peak of its own (left empty); out of memory is a data point and ends that mode's
    sweep. `predict(mode, batch)` gives the plan's verdict for the attached slice, or None.
    Returns one ledger row per point."""
    model = models.dummy_model(setting.model, mesh=mesh, seed=seed)
    graphdef, state = nnx.split(model)
    graph = models.StaticGraph(graphdef)
    vocab = models.model_dims(setting.model).V
    rows, high = [], 0
    batches = [b for b in setting.device_batches if b % jax.device_count() == 0]
    for mode in ("topk", "full"):
        for batch in batches:
            tokens = random_prompts(batch, setting.seq, vocab, seed=seed)
            tokens = jax.device_put(tokens, batch_sharding(mesh))
            with jax.set_mesh(mesh):  # as plan mode compiles it: tunix's activation shardings
                got, error = measure.run_or_oom(
                    measure.time_fn,
                    models.teacher_forced_top_k,
                    graph,
                    state,
                    tokens,
                    mode=mode,
                    k=setting.k,
                    warmup=0,
                    trials=setting.trials,
                )
            peak = measure.peak_bytes_per_device()
            rows.append(
                ledger.row(
                    "03_sparse_logits_fit",
                    workload="forward",
                    model=setting.model,
                    batch=batch,
                    shape=f"T={setting.seq} logits={mode} k={setting.k}",
                    prediction=predict(mode, batch),
                    status="ok" if error is None else "out of memory",
                    peak_bytes=peak if peak and peak > high else None,
                    seconds=got[1].median_s if got else None,
                )
            )
            high = max(high, peak or 0)
            if error:
                break
    return rows
