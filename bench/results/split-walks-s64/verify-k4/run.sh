#!/bin/bash
# old (8102750 worktree) / new step_profile of the x48 copy with a STANDALONE verify stage at static K = 4, 1 thread
for i in 1 2; do
  (cd /tmp/wt-old && PYTHONPATH=/tmp/wt-old MOE_SERVE_EXTENSIONS_DIR=/tmp/ext-old MOE_SERVE_PLAN_DIR=/tmp/plans-old /work/main/.venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 4 --draft-model /work/main/service/models/assets/moe-fine-draft --batches 1,8 --steps 16 --out /tmp/ab5/old-$i > /tmp/ab5/old-$i.log 2>&1)
  (cd /work/main && .venv/bin/python -m bench.step_profile --model /tmp/x48 --inflate 0 --verify-k 4 --draft-model /work/main/service/models/assets/moe-fine-draft --batches 1,8 --steps 16 --out /tmp/ab5/new-$i > /tmp/ab5/new-$i.log 2>&1)
done
echo done
