"""Plan-mode benchmark: where a verdict's time goes, and what a search costs, as JSON.

Parts (`--parts`, comma-separated):
- `search`: for each target, the largest gemma3-1b rollout batch (the search's compiles, fast
  and exact, its wall time from an empty cache and, second by second, how many cores it kept
  busy), and one exact and one fast verdict at a fixed batch;
- `command`: the `search` part's `--max-batch` as a reader types it, `python -m shared.plan
  rollout ...` in a fresh process `--command-runs` times, start-up included, each from an empty
  plan cache: each one's wall, answer and compiles (the other parts time searches inside this
  process, warmed by the searches before);
- `deep-search`: `--max-batch` for gemma3-27b's LoRA step on a v5p-8 (sequence 2048, rank 16),
  its compiles, the process's peak memory and, second by second, which of its processes kept
  which cores busy (shared.report.cpu_timeline);
- `near-pair`: the deep search twice from an empty cache, in one run: its second located
  point alone (as before 2026-12-03), then with the unit above it located beside it
  (shared.plan.search.locate.BESIDE_AIM): each one's wall and CPU timeline, and their ratio;
- `above-first`: rollout `--max-batch` on one device for each of `--above-cells`, twice from an
  empty cache, in one run: the exact candidate alone (as before 2026-12-03), then with the unit
  above it beside it, its worst executable first (shared.plan.search.lines.ABOVE_WORST_FIRST): each
  one's answer, wall and CPU timeline, and their ratio;
- `floor-aim`: rollout `--max-batch` on one device for each of `--floor-cells`,
  `--setting-pairs` times in one run, alternating: its second located point at 8 units, then a
  third far up (as before 2026-12-04), then along the floor's slope from the located unit
  (shared.plan.search.locate.FLOOR_AIM): each one's answer, wall and CPU timeline, and the
  ratio of the medians;
- `breakdown`: build, lower and compile seconds of each executable, fast and exact, at full
  depth and cut to one and two repeats of the attention pattern (shared.plan.compiler.timing), for
  the 1B rollout near its v5e-1 boundary and a 27B LoRA step on a v5p-8; with the straight line
  through the cut depths against the full model's compiled bytes;
- `big-lora`: gemma4-31b LoRA verdicts (fast compiles) on a v5p-8, with and without remat;
- `stages`: where an exact compile's seconds go (HLO passes, buffer assignment, code
  generation; read from XLA's dump files), for the 1B rollout on a v5e-1 and the 1B full
  fine-tune step on a v5e-8;
- `locate`: what each way of locating a boundary costs and how near it comes, in one run and
  nothing cached: for a full fine-tune step of `--model` on a v5e-8 (batch 8) and a LoRA step of
  `--locate-deep-model` on a v5e-8 (`--locate-deep-batch` on `--locate-deep-mesh`), the bytes at
  buffer assignment (shared.plan.compiler.assigned), a fast compile, the cut depths' line where the
  model is deep enough to be cut, and the exact verdict they all aim at: seconds and bytes of each,
  and each one's ratio to the exact verdict's;
- `locate-rollout`: the same for rollouts (256-token prompts, 1024 steps), on one device and on
  meshes of several: `--model` at its v5e-1 boundary (`--breakdown-batch`) and at 1024 rows on
  a v5e-8, qwen3-8b at 32 rows on a v6e-1, and `--locate-deep-model` at 128 rows on a 4x2
  v5e-8;
- `mesh-search`: `--max-batch` for the two mesh cases of `locate-rollout` (`--model` on an 8x1
  v5e-8, `--locate-deep-model` on a 4x2), nothing cached: their compiles and wall time;
- `builds`: what a deep LoRA search pays before and between its compiles, nothing compiled: the
  meshes it compares and their ceilings (shared.plan.search.meshes.meshes_by_ceiling) for
  `--breakdown-lora-model`'s step on `--lora-target`, then its workload built at four batches
  on one mesh, each build's seconds;
- `rollout-builds`: what a rollout search pays on one core between its compiles, nothing
  compiled: the 1B rollout on a v5e-1 built at the batches its search compiles, each build's
  seconds and its prefill's lowering, as a verdict lowers it (the build's trace kept) and
  after a fresh trace (jax.clear_caches(): as before 2026-12-03), and their ratio;
- `sparsecore`: the 1B LoRA step on a tpu7x-8 (batch 8, sequence 2048, rank 16) compiled fast
  with the SparseCore collective offload (as fast compiles were until 2026-11-26), fast as
  now (without it: shared.plan.compiler.compiled.fast_options) and exact: seconds and bytes of each;
- `pairing`: what compiling a second exact verdict beside a one-executable step's costs (the
  search's partner, shared.plan.search.max_batch._partner): a LoRA step (`--pair-model` on
  `--pair-target`) at one batch exact alone, then at that batch and one unit up at once,
  nothing cached: the two walls in one run, their ratio the pair's price;
- `grpo-order`: a GRPO step that does not fit (`--grpo-model` on `--grpo-target` at
  `--grpo-batch`) compiled exact twice, nothing cached: the policy update first (the workload's
  `likely_worst`, as verdicts compile it) and every executable in the order the step runs them
  (as before 2026-11-27): the walls in one run, their ratio what the order saves;
- `phase-reuse`: a GRPO step that fits (`--grpo-model` on `--grpo-target` at
  `--grpo-fit-batch`) compiled whole from nothing, against its update alone and then the whole
  step, which takes the update's compile, as a search compiles them at its answer: the walls in
  one run;
- `refusals`: the 1B rollout's executables compiled exact, one at a time, at its v5e-1
  boundary and the two batches above it: a refusal just over the HBM against one further over;
- `compiler`: this process's libtpu on its own: the 1B rollout's executables compiled exact and
  fast at its v5e-1 boundary, and the field's tunix 0.1.6 bracket (batch 200 ran, 256 ran out
  of HBM). To compare a newer libtpu without changing the project's pins:
  `pip install --target DIR libtpu==X` and run with `PYTHONPATH=DIR`.
- `climb`: `--max-batch` for GRPO of `--climb-model` on `--climb-target`, pinned to
  `--climb-mesh` (by default the atlas's gemma3-1b cell on the 8x1 mesh of a v6e-8, where the
  compiler squeezes near the HBM), twice from an empty cache in one run: the exact rounds
  aimed by lines alone (search_climb.MAX_LOCATED = 0, as before 2026-11-30), then with probes
  at buffer assignment climbing between them (shared.plan.search.climb): each search's answer,
  exact compiles that fit and that fail, probes, wall, and the ratio.
Runs on any machine with libtpu, no TPU needed. Compile times say something about the engine
only on a quiet machine: the JSON records the load average before and after each part and
flags a part that started above results.QUIET_LOAD (run nothing else beside it).

    python benchmarks/bench_plan.py --parts search,breakdown --out benchmarks/results/plan_cpu.json
"""

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import plan_compiles  # noqa: E402
import plan_searches  # noqa: E402

from shared.errors import choose, run_cli  # noqa: E402
from shared.plan import verdict  # noqa: E402
from shared.report import results  # noqa: E402

PARTS = (
    "search",
    "command",
    "deep-search",
    "near-pair",
    "above-first",
    "floor-aim",
    "pairing",
    "grpo-order",
    "phase-reuse",
    "breakdown",
    "big-lora",
    "compiler",
    "refusals",
    "stages",
    "sparsecore",
    "locate",
    "locate-rollout",
    "mesh-search",
    "builds",
    "rollout-builds",
    "climb",
)


def _part(report: dict, name: str, run, out: Path) -> None:
    """Run one part between two load readings; keep what finished, whatever happens next.
    Quiet means the load before the first part (later parts' loads include this benchmark's
    own earlier compiles, which a one-minute average remembers)."""
    before = os.getloadavg()
    report[name] = run()
    report["loads"][name] = {"before": before, "after": os.getloadavg()}
    results.write(out, report)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--parts", default="search,breakdown", help=f"of {', '.join(PARTS)}")
    p.add_argument("--model", default="gemma3-1b")
    p.add_argument("--targets", default="v5e-1", help="the search part's targets")
    p.add_argument("--batch", type=int, default=64, help="batch of the single verdicts")
    p.add_argument("--breakdown-batch", type=int, default=374, help="the 1B's v5e-1 boundary")
    p.add_argument("--breakdown-lora-model", default="gemma3-27b")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--cache-size", type=int, default=1312)
    p.add_argument("--lora-model", default="gemma4-31b")
    p.add_argument("--lora-target", default="v5p-8")
    p.add_argument("--lora-seq", type=int, default=2048)
    p.add_argument("--lora-batches", default="4,8", help="the big-lora part's, comma-separated")
    p.add_argument("--pair-model", default="gemma3-4b")
    p.add_argument("--pair-target", default="v5e-8")
    p.add_argument("--pair-batch", type=int, default=8, help="one unit of the pair's target")
    p.add_argument("--grpo-model", default="gemma3-1b")
    p.add_argument("--grpo-target", default="v5e-1")
    p.add_argument("--grpo-batch", type=int, default=8, help="a batch that does not fit")
    p.add_argument("--grpo-fit-batch", type=int, default=4, help="a batch that fits")
    p.add_argument("--locate-deep-model", default="llama3.1-8b")
    p.add_argument("--locate-deep-batch", type=int, default=4)
    p.add_argument("--locate-deep-mesh", default="2x4")
    p.add_argument("--climb-model", default="gemma3-1b")
    p.add_argument("--climb-target", default="v6e-8")
    p.add_argument("--climb-mesh", default="8x1")
    p.add_argument(
        "--above-cells",
        default="qwen3-8b:v6e-1,gemma3-1b:v5e-1",
        help="the above-first part's model:target pairs, comma-separated",
    )
    p.add_argument(
        "--floor-cells",
        default="gemma3-1b:v5e-1",
        help="the floor-aim part's model:target pairs, comma-separated",
    )
    p.add_argument("--setting-pairs", type=int, default=3, help="the floor-aim part's alternations")
    p.add_argument("--command-runs", type=int, default=3, help="the command part's fresh processes")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    parts = [choose("part", name, PARTS) for name in filter(None, args.parts.split(","))]
    args.lora_batches = [int(b) for b in args.lora_batches.split(",") if b]
    report = {**results.header("benchmarks/bench_plan.py", argv), "loads": {}}
    report.update(results.start_conditions())
    results.warn_unless_quiet(report)
    with tempfile.TemporaryDirectory() as empty:  # every number from an empty cache
        verdict.CACHE_DIR = Path(empty)
        if "search" in parts:
            targets = list(filter(None, args.targets.split(",")))
            _part(
                report,
                "rollout",
                lambda: {t: plan_searches.rollout_target(t, args) for t in targets},
                args.out,
            )
            for target, entry in report["rollout"].items():
                print(
                    f"{target}: {entry['summary']}; {entry['compiles']} compiles, "
                    f"{entry['search_wall_s']:.0f} s; one exact verdict "
                    f"{entry['exact_verdict']['wall_s']:.0f} s, fast "
                    f"{entry['fast_verdict']['wall_s']:.0f} s",
                    flush=True,
                )
        if "command" in parts:
            _part(report, "command", lambda: plan_searches.command_search(args), args.out)
        if "deep-search" in parts:
            _part(report, "deep_search", lambda: plan_searches.deep_search(args), args.out)
            print(f"deep search: {report['deep_search']['summary']}", flush=True)
        if "near-pair" in parts:
            _part(report, "near_pair", lambda: plan_searches.near_pair(args), args.out)
            print(f"near pair: {report['near_pair']['beside_over_alone']:.2f}x", flush=True)
        if "above-first" in parts:
            _part(report, "above_first", lambda: plan_searches.above_first(args), args.out)
            for cell, runs in report["above_first"].items():
                print(f"above first, {cell}: {runs['above_over_alone']:.2f}x", flush=True)
        if "floor-aim" in parts:
            _part(report, "floor_aim", lambda: plan_searches.floor_aim(args), args.out)
            for cell, runs in report["floor_aim"].items():
                print(
                    f"floor aim, {cell}: {runs['floor_over_eight']:.2f}x "
                    f"(medians {runs['median_wall_s']})",
                    flush=True,
                )
        if "pairing" in parts:
            _part(report, "pairing", lambda: plan_searches.pairing(args), args.out)
            print(
                f"pairing: {report['pairing']['pair_over_alone']:.2f}x one compile's wall",
                flush=True,
            )
        if "grpo-order" in parts:
            _part(report, "grpo_order", lambda: plan_searches.grpo_order(args), args.out)
            print(
                f"grpo order: {report['grpo_order']['first_over_run_order']:.2f}x the run "
                "order's wall",
                flush=True,
            )
        if "phase-reuse" in parts:
            _part(report, "phase_reuse", lambda: plan_searches.phase_reuse(args), args.out)
            print(
                f"phase reuse: the whole step after its update alone took "
                f"{report['phase_reuse']['whole_after_over_whole']:.2f}x one from nothing",
                flush=True,
            )
        if "breakdown" in parts:
            _part(report, "breakdown", lambda: plan_compiles.breakdown(args), args.out)
        if "big-lora" in parts:
            _part(report, "big_lora", lambda: plan_compiles.big_lora(args), args.out)
        if "compiler" in parts:
            _part(report, "compiler", lambda: plan_compiles.compiler(args), args.out)
        if "refusals" in parts:
            _part(report, "refusals", lambda: plan_compiles.refusals(args), args.out)
        if "stages" in parts:
            _part(report, "stages", lambda: plan_compiles.stages(args), args.out)
        if "sparsecore" in parts:
            _part(report, "sparsecore", lambda: plan_compiles.sparsecore(args), args.out)
        if "locate" in parts:
            _part(report, "locate", lambda: plan_compiles.locate(args), args.out)
        if "locate-rollout" in parts:
            _part(report, "locate_rollout", lambda: plan_compiles.locate_rollout(args), args.out)
        if "mesh-search" in parts:
            _part(report, "mesh_search", lambda: plan_searches.mesh_search(args), args.out)
        if "builds" in parts:
            _part(report, "builds", lambda: plan_compiles.builds(args), args.out)
        if "rollout-builds" in parts:
            _part(report, "rollout_builds", lambda: plan_compiles.rollout_builds(args), args.out)
        if "climb" in parts:
            _part(report, "climb", lambda: plan_searches.climb(args), args.out)
            print(f"climb: {report['climb']['climb_over_lines_only']:.2f}x the wall", flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
