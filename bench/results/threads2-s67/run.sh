#!/bin/bash
# Scratch (67th session): bench.step_profile of x48's plain decode at batch 1 and 8, one engine thread and two, the
# two-thread engine under libgomp's wait settings (its workers spin between parallel regions by default).
# Usage: bash run.sh OUTDIR ROUNDS   (from the repository root; first=N starts at round N)
set -u
out=$1
rounds=${2:-1}
mkdir -p "$out"
profile() {  # name, engine threads, env...
  local name=$1 threads=$2
  shift 2
  env "$@" .venv/bin/python -m bench.step_profile --inflated build/bench-models/moe-fine-x48 --inflate 0 \
    --verify-k 0 --steps 16 --batches 1,8 --engine-threads "$threads" --out "$out/$name" > "$out/$name.log" 2>&1
  grep -E "moe-fine-x48 .*decode" "$out/$name.log" | head -4
}
for r in $(seq "${first:-1}" "$rounds"); do
  echo "round $r $(date -u +%H:%M:%S)"
  profile "1thread-$r" 1 X=1
  profile "2threads-$r" 2 X=1
  profile "2threads-passive-$r" 2 OMP_WAIT_POLICY=PASSIVE
  profile "2threads-spin10k-$r" 2 GOMP_SPINCOUNT=10000
done
