#!/bin/sh
# Scratch (73rd session): ../zen5-b8-s72/rejudge_cost.py on the code before the StepPricer (a worktree of dba0570 at
# $1) and on this checkout, alternating, five rounds. usage: sh bench/results/pricer-s73/ab.sh /tmp/old > ab.txt
for round in 1 2 3 4 5; do
  printf 'round %s before: ' "$round"; PYTHONPATH="$1" .venv/bin/python "$1/bench/results/zen5-b8-s72/rejudge_cost.py" 2>/dev/null | head -1
  printf 'round %s after:  ' "$round"; PYTHONPATH=. .venv/bin/python bench/results/zen5-b8-s72/rejudge_cost.py 2>/dev/null | head -1
done
