#!/usr/bin/env bash
# bench/gpu.py on a lent GPU machine (the device tool runs this from the repository's root, with .gpu carried:
# bench/gpu_prepare.py's folder). Installs the wheels the image lacks, where it lacks them, then writes $OUT/gpu/.
set -u
cd "$(dirname "$0")/.."
if ! python3 -c "import datasets" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv
mkdir -p "$OUT/gpu"
PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles python3 bench/gpu.py --prepared .gpu --output "$OUT/gpu" "$@" > "$OUT/gpu/log.txt" 2>&1
status=$?
tail -c 6000 "$OUT/gpu/report.md" 2>/dev/null || tail -50 "$OUT/gpu/log.txt"
exit $status
