"""Model weights on transparent huge pages (Linux): fewer TLB misses while a memory-bound step streams them.

Why: a decode step of a memory-bound MoE (moe-fine-x48) is its expert weights streamed from memory, and those sit in
the 4 KiB pages the allocator got from the kernel: one TLB entry, and on a virtual machine one nested page walk, per
4 KiB read. Linux backs memory with 2 MiB pages where asked to (`transparent_hugepage=madvise`, the setting seen on
the machines here) or always (`always`). A one-thread read of 512 MiB on such a machine (2-core AMD EPYC VM, kernel
6.18): 24-29 GB/s on 4 KiB pages, 29-31 GB/s on 2 MiB pages.

`advise(tensors)` asks for huge pages over the memory of the given tensors: `MADV_HUGEPAGE` (later faults and
khugepaged take 2 MiB pages there) and `MADV_COLLAPSE` (Linux >= 6.1: the pages already there are copied into huge
pages now, synchronously; the tensors keep their addresses and contents). Only whole aligned 2 MiB ranges can be huge,
so a tensor's ends are left as they are, and small tensors not at all. Anything the kernel refuses (no THP, an older
kernel, no memory to compact) is reported, never raised: the weights stay where and what they were.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

HUGE = 2 << 20  # bytes of an x86-64 / arm64 transparent huge page (PMD size)
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True)
class Advised:
    """What `advise` did: bytes of the tensors, bytes in whole aligned huge-page ranges asked for, bytes of this
    process's anonymous huge pages before and after, seconds taken, and why nothing or not all was done ("" when
    every range was collapsed)."""

    tensor_bytes: int
    range_bytes: int
    huge_before: int
    huge_after: int
    seconds: float
    why: str = ""

    def describe(self) -> str:
        mib = 1 << 20
        done = (
            f"{self.range_bytes / mib:.0f} of {self.tensor_bytes / mib:.0f} MiB of weights asked for, "
            f"this process's anonymous huge pages {self.huge_before / mib:.0f} -> {self.huge_after / mib:.0f} MiB "
            f"in {self.seconds:.2f} s"
        )
        return done + (f" ({self.why})" if self.why else "")


def thp_mode(setting: Path = THP_SETTING) -> str:
    """The kernel's transparent huge page mode (`always`, `madvise` or `never`; "" where there is none to read)."""
    try:
        text = setting.read_text()
    except OSError:
        return ""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return ""


def ranges(spans: Iterable[tuple[int, int]], page: int = HUGE) -> list[tuple[int, int]]:
    """The whole `page`-aligned ranges (start, length) inside the (address, bytes) spans, overlapping and adjacent
    ones merged first (views of one storage, parameters packed next to each other)."""
    merged: list[list[int]] = []
    for start, length in sorted((s, n) for s, n in spans if n > 0):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + length)
        else:
            merged.append([start, start + length])
    out = []
    for start, end in merged:
        lo, hi = -(-start // page) * page, end // page * page
        if hi > lo:
            out.append((lo, hi - lo))
    return out


def anon_huge_bytes() -> int:
    """This process's anonymous huge-page bytes (/proc/self/smaps_rollup; 0 where it cannot be read)."""
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def advise(tensors: Iterable[torch.Tensor]) -> Advised:
    """Ask for huge pages over the CPU memory of `tensors` (their storages, each once); see the module docstring."""
    spans: dict[int, int] = {}
    for t in tensors:
        if t.device.type != "cpu" or t.is_sparse:
            continue
        storage = t.untyped_storage()
        spans[storage.data_ptr()] = max(spans.get(storage.data_ptr(), 0), storage.nbytes())
    tensor_bytes = sum(spans.values())
    todo = ranges(spans.items())
    range_bytes = sum(n for _, n in todo)
    before = anon_huge_bytes()
    why = _unavailable()
    if why or not todo:
        return Advised(tensor_bytes, range_bytes, before, before, 0.0, why or "no whole 2 MiB range in the tensors")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    failed: dict[str, int] = {}
    start = time.perf_counter()
    for address, length in todo:
        for advice, name in ((MADV_HUGEPAGE, "MADV_HUGEPAGE"), (MADV_COLLAPSE, "MADV_COLLAPSE")):
            if libc.madvise(address, length, advice) != 0:
                key = f"{name}: {os.strerror(ctypes.get_errno())}"
                failed[key] = failed.get(key, 0) + 1
    seconds = time.perf_counter() - start
    why = "; ".join(f"{key} on {n} of {len(todo)} ranges" for key, n in sorted(failed.items()))
    return Advised(tensor_bytes, range_bytes, before, anon_huge_bytes(), seconds, why)


def _unavailable() -> str:
    """Why huge pages cannot be asked for here ("" when they can)."""
    if not sys.platform.startswith("linux"):
        return f"not on Linux ({sys.platform})"
    mode = thp_mode()
    if mode not in ("always", "madvise"):
        return f"transparent huge pages {mode or 'not offered'} ({THP_SETTING})"
    return ""
