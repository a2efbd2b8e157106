#!/bin/bash
# scratch: outside-forward time per decode step of each engine, code trees interleaved
cd /work/main
for round in 1 2; do
for spec in "plain-sync /tmp/dev" "ngram /work/main" "ngram /tmp/dev" "standalone /work/main" "standalone /tmp/dev" "plain /tmp/dev"; do
  set -- $spec
  tag=$(basename $2)
  PYTHONPATH=/tmp/instmod:$2 .venv/bin/python /tmp/prof/instx.py $1 /tmp/prof/z-$1-$tag-$round.log 2 > /dev/null 2>&1
  for bs in 1 8; do echo "$round $1 $tag $(grep "INSTX bs=$bs " /tmp/prof/z-$1-$tag-$round.log | tail -1 | sed 's/.*INSTX//')"; done
done
done
