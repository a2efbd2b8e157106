#!/bin/bash
# old / new step_profile of the x48 copy with the engine at 2 threads, alternating
for i in 1 2; do
  (cd /tmp/wt-old && PYTHONPATH=/tmp/wt-old MOE_SERVE_EXTENSIONS_DIR=/tmp/ext-old /work/main/.venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 0 --steps 16 --engine-threads 2 --out /tmp/ab4/old-$i > /tmp/ab4/old-$i.log 2>&1)
  (cd /work/main && .venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 0 --steps 16 --engine-threads 2 --out /tmp/ab4/new-$i > /tmp/ab4/new-$i.log 2>&1)
done
echo done
