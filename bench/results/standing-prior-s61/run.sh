#!/bin/bash
cd /work/main
for run in base1 m2a base2 m2b; do
  case $run in m2*) export STANDING_PRIOR=2;; *) unset STANDING_PRIOR;; esac
  PYTHONPATH=/tmp/sp-site:. .venv/bin/python -m bench.policies --no-peer --drafters standalone --tasks math,prose \
    --policies static-4,moe-serve --engine-threads 2 --repeats 3 --out /tmp/spab-$run > /tmp/spab-$run.log 2>&1
done
