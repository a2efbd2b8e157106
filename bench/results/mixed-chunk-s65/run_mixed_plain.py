"""Scratch (65th session): bench.replay with SGLang's mixed chunked prefill on the plain engines (none, none-sync:
`--enable-mixed-chunk --chunked-prefill-size N`), the drafter engine as it is (its algorithm turns mixing off), to
see what running requests decoding inside other requests' prefills does to the replay's TPOT.
Usage: PYTHONPATH=. python run_mixed_plain.py CHUNK [bench.replay args]"""

import sys

from bench import replay

chunk = sys.argv[1]
plain_engine = replay.bench_engine


def mixed_engine(model, spec, threads, settings=None, extra=()):
    if spec.algorithm == "none":
        extra = (*extra, "--enable-mixed-chunk", "--chunked-prefill-size", chunk)
    return plain_engine(model, spec, threads, settings, extra)


replay.bench_engine = mixed_engine
sys.exit(replay.main(sys.argv[2:]))
