"""`MOE_SERVE_STANDALONE`: SGLang's STANDALONE draft model under moe-serve's name (per-request step: next commit)."""

from __future__ import annotations


def worker_class():
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

    class MoeServeStandaloneWorker(StandaloneWorkerV2):
        pass

    return MoeServeStandaloneWorker
