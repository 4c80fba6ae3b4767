#!/usr/bin/env bash
# Issue 38's whole GPU measurement in one command, each part in its own process under its own time limit
# (the limits sum to 395 s, 416 s with the rest: the run ends within 7 minutes whatever a part does):
#
#     BENCH_COMMIT=<commit> OUT=<dir> bash benchmarks/gpu_run.sh
#
# writes into OUT (default ./gpu-out): env.txt (nvidia-smi, torch and triton versions), one log per part
# (train.log, fullscale.log, score.log, layer.log, vision.log, kernel.log), one results JSON per part
# (dm_<part>.json, fused_wide.json; a part killed by its limit writes none), status.txt (each part's exit
# status and seconds; 124: its limit) and device_mortality.json, the parts that finished merged (`benchmarks.device_mortality --merge`). Copy that
# file to benchmarks/results/device_mortality.json and run `python -m benchmarks.report device_mortality` to
# render docs/performance.md's figures:device_mortality section from it.
#
# Parts, most needed first (benchmarks/device_mortality.py says what each measures): train (whole training
# steps, default and GPU preset, collated and on the device data path), fullscale (a full-scale rank-1 run at
# the GPU preset), score (58,976 admissions x 100 draws), layer (the rank-1 LSTM against cuDNN, 4,096 rows),
# vision (the image models in bf16), kernel (`benchmarks.fused_check --wide`: the wide tiled forward checked
# against the reference and timed against the default at 256 units; not merged, its own JSON). A smoke run on a
# machine without a GPU, toy sizes:
#     DEVICE=cpu SMALL=1 OUT=/tmp/gpu-smoke bash benchmarks/gpu_run.sh
# RUN is how a module is started (default `python3 -m`, else `python -m`).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
DEVICE=${DEVICE:-cuda}
RUN=${RUN:-$(command -v python3 || command -v python) -m}
export BENCH_COMMIT=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$OUT"
SCALE=${SCALE:-1}  # the limits' multiplier (a smoke run on a busy CPU is slower than the GPU run)
if [ -n "$SMALL" ]; then
    SCALE=${SCALE_SMALL:-4}
    LAYER="--hidden 8 --batch 4 --reps 2"
    TRAIN="--train-steps 4 --train-n 200 --gpu-rows 64"
    SCORE="--score-n 300 --cpu-score-n 60 --samples 2 --score-batch 16 --score-batch 64 --check-n 50"
    VISION="--vision-depth 10 --vision-width 1 --vision-size 8 --vision-images 4 --vision-bn-rows 4 --vision-steps 4"
    FULL="--full-train 300 --full-val 60 --full-epochs 1 --gpu-rows 64"
    KERNEL="--small"
else
    LAYER="--batch 1024"; TRAIN=""; SCORE=""; VISION="--vision-steps 8"; FULL=""; KERNEL=""
fi

part() {  # part NAME LIMIT COMMAND...: COMMAND under `timeout LIMIT` (times SCALE), its output in NAME.log
    local name=$1 limit=$(($2 * SCALE)) start=$SECONDS
    shift 2
    timeout -k 1 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - start)) s (limit $limit s)" | tee -a "$OUT/status.txt"
}
DM="$RUN benchmarks.device_mortality --device $DEVICE"  # a part of it: DM --parts PART ... --json dm_PART.json
INTERP=0
[ "$DEVICE" = cpu ] && INTERP=1  # fused_check on the CPU runs in Triton's interpreter

: > "$OUT/status.txt"
{ echo "commit $BENCH_COMMIT"; timeout 5 nvidia-smi; } > "$OUT/env.txt" 2>&1
part train 65 $DM --parts train $TRAIN --json "$OUT/dm_train.json"
part fullscale 80 $DM --parts fullscale $FULL --json "$OUT/dm_fullscale.json"
part score 80 $DM --parts score $SCORE --json "$OUT/dm_score.json"
part layer 75 $DM --parts layer $LAYER --json "$OUT/dm_layer.json"
part vision 55 $DM --parts vision $VISION --json "$OUT/dm_vision.json"
part kernel 40 env TRITON_INTERPRET=$INTERP $RUN benchmarks.fused_check --device "$DEVICE" --wide $KERNEL \
    --json "$OUT/fused_wide.json"
merged=$(ls "$OUT"/dm_*.json 2>/dev/null)
if [ -n "$merged" ]; then
    timeout 10 $RUN benchmarks.device_mortality --merge $merged --json "$OUT/device_mortality.json" \
        --command "bash benchmarks/gpu_run.sh" > "$OUT/merge.log" 2>&1
    echo "merge rc=$?" | tee -a "$OUT/status.txt"
fi
