"""Scratch (66th session): ../chain-verify-s63/sample_spec.py (py-spy of a STANDALONE engine's scheduler under
batch-1 prose at a static K or a policy) with the engine at one thread instead of two, as the deciding benches run it.
Usage: PYTHONPATH=. python sample_spec_1thread.py OUT [hint-json]"""

import runpy
from pathlib import Path

import bench._models as models

two_threads = models.bench_engine
models.bench_engine = lambda model, spec, threads, *args, **kwargs: two_threads(model, spec, 1, *args, **kwargs)
runpy.run_path(str(Path(__file__).resolve().parents[1] / "chain-verify-s63" / "sample_spec.py"), run_name="__main__")
