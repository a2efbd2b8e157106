"""Scratch (75th session): bench.policies with the variant of sitecustomize.py beside this file (every engine
process must load it: PYTHONPATH=bench/results/judge1-s75:.).
Usage: PYTHONPATH=bench/results/judge1-s75:. python bench/results/judge1-s75/run.py [bench.policies args]"""

import sys

from bench import policies

policies.HINTED = (*policies.HINTED, policies.Variant("moe-serve-j1", {"policy": "moe-serve-j1"}))
sys.exit(policies.main(sys.argv[1:]))
