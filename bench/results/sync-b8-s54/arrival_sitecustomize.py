"""Scratch (54th session): wall-clock times of each generation request's way into an engine, to find a signal that a
burst is still arriving: HTTP process (TokenizerManager.generate_request entered, _send_one_request called, with the
number of requests entered and not yet sent) and scheduler (generation requests returned by ingest_requests). Usage:
cp this file DIR/sitecustomize.py; ARRIVAL_LOG=/tmp/a.jsonl PYTHONPATH=DIR:. python ..."""

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time

OUT = os.environ.get("ARRIVAL_LOG")
_T = {"sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.scheduler"}
_state = {"entered": 0, "sent": 0}


def _w(rec: dict) -> None:
    with open(OUT, "a") as f:
        f.write(json.dumps({"t": time.time(), "pid": os.getpid(), **rec}) + "\n")


def _patch(mod) -> None:
    if mod.__name__.endswith("tokenizer_manager"):
        tm = mod.TokenizerManager
        gen, send = tm.generate_request, tm._send_one_request

        @functools.wraps(gen)
        async def generate_request(self, obj, request=None):
            _state["entered"] += 1
            _w({"ev": "enter", "inflight": _state["entered"] - _state["sent"]})
            async for out in gen(self, obj, request):
                yield out

        @functools.wraps(send)
        async def _send_one_request(self, tokenized_obj):
            _state["sent"] += 1
            _w({"ev": "send", "inflight": _state["entered"] - _state["sent"]})
            return await send(self, tokenized_obj)

        tm.generate_request, tm._send_one_request = generate_request, _send_one_request
    else:
        sch = mod.Scheduler
        ingest = sch.ingest_requests

        @functools.wraps(ingest)
        def ingest_requests(self, *a, **k):
            got = ingest(self, *a, **k)
            n = sum(type(r).__name__ == "TokenizedGenerateReqInput" for r in got or ())
            if n:
                _w({"ev": "recv", "n": n})
            return got

        sch.ingest_requests = ingest_requests


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _T:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        ex = spec.loader.exec_module

        def exec_and_patch(module):
            ex(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
