#!/usr/bin/env bash
# One call on a lent GPU machine that has CUDA PyTorch but none of recipelab's other
# dependencies and no network: install the wheels carried in .whl/, then run bench/transfer.py's
# arms on CUDA at 20× the top rung's tokens, `recipelab gpu-check`, and the arms at 5×. The campaigns
# are trained beforehand and carried in bench-transfer/ (the bench reuses a finished one).
# Everything to read afterwards lands in $OUT. See docs/gpu.md.
#
#     bash bench/on_gpu.sh            # OUT=dir to choose where the figures go
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv"
date +"start %T" > "$OUT/times.txt"
lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-400 > "$OUT/cpu.txt"

for horizon in 20 5; do
    where=bench-transfer-$horizon
    mkdir -p "$where"
    cp -r bench-transfer/campaign-* "$where/"
    ship=$([ "$horizon" = 20 ] && echo --ship)
    python3 bench/transfer.py --device cuda --parallel "${PARALLEL:-12}" --horizon "$horizon" \
        --out "$where" $ship > "$OUT/transfer-$horizon.txt" 2>&1
    echo "transfer exit $?" >> "$OUT/transfer-$horizon.txt"
    [ -n "$ship" ] && cp src/recipelab/transfer/verified_transfer.json "$OUT/" 2>/dev/null
    tar czf "$OUT/transfer-$horizon.tgz" "$where"/summary.json "$where"/*.log \
        "$where"/campaign-*/runs/*/metrics.csv "$where"/campaign-*/runs/*/pretrain.log \
        "$where"/campaign-*/export-*/prediction.json "$where"/campaign-*/export-*/transfer.md \
        2>/dev/null
    date +"transfer $horizon done %T" >> "$OUT/times.txt"
    if [ "$horizon" = 20 ]; then  # the longest arms first: the device's time may run out
        timeout 180 python3 -m recipelab gpu-check --out /tmp/gpu-check > "$OUT/gpu-check.txt" 2>&1
        echo "gpu-check exit $?" >> "$OUT/gpu-check.txt"
        cp /tmp/gpu-check/gpu-check.json "$OUT/" 2>/dev/null
        date +"gpu-check done %T" >> "$OUT/times.txt"
    fi
done
