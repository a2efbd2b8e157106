#!/bin/bash
# alternate old (HEAD worktree) and new (working tree) step_profile runs on the x48 copy only, batch 1 and 8
for i in 1 2 3 4; do
  (cd /tmp/wt-old && PYTHONPATH=/tmp/wt-old MOE_SERVE_EXTENSIONS_DIR=/tmp/ext-old /work/main/.venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 0 --steps 16 --out /tmp/ab3/old-$i > /tmp/ab3/old-$i.log 2>&1)
  (cd /work/main && .venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 0 --steps 16 --out /tmp/ab3/new-$i > /tmp/ab3/new-$i.log 2>&1)
done
echo done
