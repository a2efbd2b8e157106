"""A spare core for the STANDALONE draft model's forwards that a step does not wait on: the catch-up of a new
request's prompt, run while the target prefills it, and a judgement (draft_judge.py), run while the target
decodes or verifies the step.

Why: the CPU engine runs its forwards on one thread (bench/_common.py: two engines share a 2-core machine without
stalling each other), and the draft model's lazy catch-up was paid on that thread: a first judgement ran the dense
draft over a ~130-token context (~6 ms against a 4.6 ms plain forward of moe-fine x48 at batch 1 on a Zen 5 host,
bench/results/standalone-b1-s56), ~4 % of a 32-token request, also where drafts then did not pay. The draft's work
for a judgement depends only on tokens already committed, so it can run beside the target's forward: PyTorch's ops
and ours (TORCH_LIBRARY ops, called through the dispatcher) release the GIL while they compute, and the draft's
KV pool, weights and slots are its own.

The rule that keeps it safe: work started here is joined before the step (or prefill) that started it returns, so
no draft forward outlives the batch it was built from (a finished request's slots are freed between steps, never
during one), and everything it reads from the batch is copied on the scheduler's thread before it starts (the
target's forward swaps the batch's fields for its own view while it runs: plain_decode._DecodeView).

`auto` (the default) runs it on a thread where the process may run on more CPUs than torch's intra-op threads
(os.sched_getaffinity), else where it was: at once, on the scheduler's thread. `on` / `off` force either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from moe_sglang.settings import DRAFT_THREAD

T = TypeVar("T")


def spare_core() -> bool:
    """Whether this process may run on more CPUs than torch's intra-op threads use."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return cpus > torch.get_num_threads()


class Beside:
    """Runs a function beside the caller (one worker thread, in submission order) or at once; either way the caller
    gets a join that returns its value or raises its exception."""

    def __init__(self, threaded: bool) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="moe-serve-draft") if threaded else None

    @classmethod
    def for_setting(cls, setting: str) -> Beside:
        if setting not in DRAFT_THREAD:
            raise ValueError(f"draft thread {setting!r}: expected one of {DRAFT_THREAD}")
        return cls(setting == "on" or (setting == "auto" and spare_core()))

    @property
    def threaded(self) -> bool:
        return self._pool is not None

    def __call__(self, fn: Callable[[], T]) -> Callable[[], T]:
        if self._pool is None:
            value = fn()
            return lambda: value
        return self._pool.submit(fn).result


AT_ONCE = Beside(threaded=False)
