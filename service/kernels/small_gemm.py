"""`x @ w.T` for the few rows of a decode or verify step, in the form the CPU's BLAS runs fastest for that shape.

A decode step multiplies 1 row per request by each weight, a verify 2-5; at such sizes the product is memory-bound
(the weight is read once) and its time depends on which BLAS routine the call lands in, not on the arithmetic.
Measured on a 2-core AMD EPYC (AVX-512, no AMX; MKL, 1 thread, moe-fine x48's experts: w13 [9216, 256], w2 [256,
4608], four experts per layer, weights from DRAM), ms per layer:

    w13, m rows      1      2      3      4      8
    F.linear       2.96   4.39   5.14   3.93   4.65
    w @ x.T        2.96   1.60   2.11   1.92   3.52
    same, m = 1 as two rows: 1.48
    w2: F.linear is the faster (0.78 at m = 1, ~bandwidth).

The same product in eleven forms (`FORMS`):
    linear        F.linear(x, w): the reference
    weight_major  (w @ x.T).T: BLAS sees the weight as the left operand; a single row is doubled first (the
                  two-column product ran at twice the speed of the one-row one above)
    stream        our C++ kernel that reads the weight once at any row count (stream_gemm.py, where it builds:
                  on a 2-core Intel Xeon with AVX-512 it took 0.69 ms for 4 rows of w13 where F.linear took 1.33)
    stream_l2, stream_l2_near, stream_seq, stream_seq_hw, stream_split4, stream_split8
                  the same kernel walking the weight another way (stream_gemm.KINDS: prefetching into L2, nearer
                  ahead, in address order, in address order without software prefetch, or in 4 / 8 ranges side
                  by side, each in address order); on a 2-core AMD EPYC w13 at 1 row read 10.4 GB/s as `stream`
                  and 28.4 as `stream_seq`, w2 21.5 and 27.4 as `stream_l2_near`; on one with AVX2 only both read
                  ~17 GB/s as `stream_seq_hw`, 12-14 as `stream_seq`; on a Zen 4 EPYC, bfloat16 w13 at 1 row
                  22.4-24.4 as `stream_seq` and 25.3-28.3 as `stream_split4`
    stream_amx, stream_amx_pf
                  for bfloat16 weights on a CPU with AMX (stream_gemm.amx_ready): the weight as AMX tiles, the
                  float32 rows split into three exact bfloat16 parts (csrc/amx_gemm.cpp), with the hardware
                  prefetchers alone / a software prefetch into L2; on a 2-core Intel Xeon with AMX, x48's w13 at 8
                  rows read 17.9 GB/s where the best walk read 9.8 (bench/results/amx-s47)
Which form wins depends on the CPU, its BLAS and the shape, so nothing is assumed: `GemmPlan.tune` times every form
available here on the weights themselves (best of interleaved repeats) for each row count up to `max_rows` and keeps
the fastest; larger products use `linear`. The forms compute the same sums in different orders, so results agree to
float rounding, not bit for bit (tests/kernels/test_small_gemm.py).

`moe_experts` is the CPU engine's MoE expert forward with planned products (tokens sorted by expert, as SGLang's
`moe_forward_native` does, so only the experts hit are visited), tested against moe_ref.moe_forward.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from service.kernels import stream_gemm
from service.kernels.plan_cache import PlanCache, engine_cache, machine_key

FORMS = (
    "linear",
    "weight_major",
    "stream",
    "stream_l2",
    "stream_l2_near",
    "stream_seq",
    "stream_seq_hw",
    "stream_split4",
    "stream_split8",
    "stream_amx",
    "stream_amx_pf",
)
STREAM_FORMS = FORMS[2:]  # our kernel's: one per stream_gemm.KINDS entry, then its AMX_KINDS
AMX_FORMS = STREAM_FORMS[len(stream_gemm.KINDS) :]  # bfloat16 weights only, where stream_gemm.amx_ready()
MARGIN = 0.05  # a form other than `linear` is kept only where it timed at least this much faster
COLD_CACHE_BYTES = 32 << 20  # the last-level cache assumed where the OS does not say (timed_matrices)
MAX_ROWS = 16  # row counts tuned per shape; beyond, F.linear (BLAS's GEMM path is the fast one there)
# the weight dtypes the stream walks read (x is float32): bfloat16 widened to float32 in registers; torch's forms get
# a float32 copy of a bfloat16 weight, so a plan for bfloat16 weights times the stream forms only
WEIGHT_DTYPES = (torch.float32, torch.bfloat16)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The reference: x [m, in] @ w [out, in].T -> [m, out]."""
    return F.linear(x, w)


def weight_major(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T computed as (w @ x.T).T; a single row is doubled (and the copy dropped)."""
    if x.shape[0] == 1:
        return torch.mm(w, torch.cat((x, x)).t())[:, :1].t().contiguous()
    return torch.mm(w, x.t()).t().contiguous()


def stream(x: torch.Tensor, w: torch.Tensor, kind: int = 0) -> torch.Tensor:
    """x @ w.T by stream_gemm's kernel (1..stream_gemm.MAX_ROWS rows, float32), walking the weight as
    stream_gemm.KINDS[kind]."""
    return stream_gemm.stream_linear(x, w, None, kind)


_FORM_FN: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "linear": linear,
    "weight_major": weight_major,
    **{form: functools.partial(stream, kind=kind) for kind, form in enumerate(STREAM_FORMS)},
}


_KIND = {  # form -> stream_gemm.stream_moe's kind
    "linear": stream_gemm.LINEAR_KIND,
    "weight_major": stream_gemm.WEIGHT_MAJOR_KIND,
    **{form: kind for kind, form in enumerate(STREAM_FORMS)},
}


def available_forms() -> tuple[str, ...]:
    """The forms this machine can run: the stream forms only where their kernel built (stream_gemm.load), the AMX
    forms only where the CPU and its kernel let this process use the tiles (stream_gemm.amx_ready)."""
    return tuple(
        f
        for f in FORMS
        if f not in STREAM_FORMS or (stream_gemm.load() and (f not in AMX_FORMS or stream_gemm.amx_ready()))
    )


@dataclass
class GemmPlan:
    """Per weight shape (out, in) and row count m <= max_rows, the form to use; `linear` for anything untuned."""

    forms: dict[tuple[int, int, int], str] = field(default_factory=dict)  # (out, in, m) -> form
    max_rows: int = MAX_ROWS
    candidates: tuple[str, ...] = FORMS  # the forms `tune` may choose (where available here)
    # where tuned shapes are kept per machine and read back (plan_cache.py); None: this engine process's, if any
    cache: PlanCache | None = None
    cached: set[tuple[int, int]] = field(default_factory=set, compare=False)  # shapes whose forms the cache gave
    _kinds: dict[tuple[int, int, int, int], list[int]] = field(default_factory=dict, repr=False, compare=False)

    def form(self, out_features: int, in_features: int, rows: int) -> str:
        return self.forms.get((out_features, in_features, rows), "linear")

    def mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x [m, in] @ w [out, in].T in the planned form (x float32, 2-D, contiguous rows expected; w float32, or
        bfloat16 that the stream forms read as it is and torch's get widened to float32)."""
        form = self.form(w.shape[0], w.shape[1], x.shape[0])
        if form in AMX_FORMS and w.dtype != torch.bfloat16:
            form = "stream"  # forms are kept per shape: a float32 weight shaped like bfloat16 ones takes the first walk
        if w.dtype == torch.bfloat16 and (form not in STREAM_FORMS or x.shape[0] > stream_gemm.MAX_ROWS):
            return _FORM_FN[form](x, w.to(torch.float32))
        return _FORM_FN[form](x, w)

    def tune(
        self,
        weights: Iterable[torch.Tensor],
        repeats: int = 5,
        timer: Callable[[torch.Tensor, int], dict[str, float]] | None = None,
        inputs: torch.dtype | None = None,
    ) -> GemmPlan:
        """Time every form for each distinct shape among `weights` ([n, out, in] stacks, e.g. a MoE layer's
        experts, or single [out, in] matrices) and each m in 1..max_rows; keep the fastest (ties: the earlier form
        in FORMS), `linear` unless another form beats it by MARGIN (on the un-inflated moe-fine, whose experts sit
        in cache, the forms timed within a few percent of each other and the choice flipped from row count to row
        count). `timer(stack, m)` returns seconds per form it timed (default: `time_forms`, the forms available
        here); tests inject one. `inputs`: the rows' dtype where it is not the weights' (float32 rows by bfloat16
        expert weights: stream forms only). With a `cache`, a shape it holds for this machine is read instead of
        timed, and a shape timed here is written to it.

        One row, the form of every batch-1 decode, is timed first and again after the other row counts, each form
        keeping its best of both: in an engine's first forward the first timing misjudged it. On a 2-core AMD EPYC
        (Zen 4), moe-fine x48's w13 [9216, 256] in bfloat16: three of four engine starts kept `stream_seq` or
        `stream_seq_hw` for one row and `stream_split4` for 2-6 rows, where a process timing the same weights
        alone ranked `stream_split4` first in 8 of 8 timings (26.2-29.8 GB/s against 20.4-22.4); timed again
        last, four engine starts of four kept it (bench/results/split-walks-s64: engine_tunes.txt, alone.json)."""
        timer = timer or (lambda stack, m: time_forms(stack, m, repeats, self.candidates, inputs))
        cache = self.cache or engine_cache()
        self._kinds.clear()
        seen: set[tuple[int, int]] = set()
        for weight in weights:
            stack = weight if weight.dim() == 3 else weight.unsqueeze(0)
            shape = (stack.shape[1], stack.shape[2])
            if shape in seen:
                continue
            seen.add(shape)
            key = self._cache_key(stack.dtype, inputs or stack.dtype) if cache is not None else None
            kept = cache.get(key, shape, self.max_rows) if key is not None else None
            if kept is not None and all(f in FORMS for f in kept):
                self.forms.update({(*shape, m): form for m, form in enumerate(kept, start=1)})
                self.cached.add(shape)
                continue
            timed = {m: timer(stack, m) for m in range(1, self.max_rows + 1)}
            if self.max_rows > 1:  # one row again, last (see above)
                again = timer(stack, 1)
                timed[1] = {f: min(t, again.get(f, t)) for f, t in timed[1].items()}
            for m, times in timed.items():
                best = min(times, key=lambda f: (times[f], FORMS.index(f)))
                if "linear" in times and times[best] > (1.0 - MARGIN) * times["linear"]:
                    best = "linear"  # within the timing noise of the reference: keep the reference
                self.forms[(*shape, m)] = best
            if key is not None:
                cache.put(key, shape, [self.forms[(*shape, m)] for m in range(1, self.max_rows + 1)])
        return self

    def _cache_key(self, dtype: torch.dtype, inputs: torch.dtype) -> str:
        """The machine key (plan_cache.machine_key) with what this plan's timing also depends on (the rows' dtype
        only where it differs from the weights', so the float32 plans cached so far keep their keys)."""
        what = {"candidates": list(self.candidates), "max_rows": self.max_rows, "margin": MARGIN, "dtype": str(dtype)}
        if inputs != dtype:
            what["inputs"] = str(inputs)
        return machine_key(what)

    def kinds(self, out_features: int, in_features: int) -> list[int]:
        """stream_gemm.stream_moe's form per row count 1..max_rows for this shape: a stream walk's KINDS index, or
        torch's (LINEAR_KIND, WEIGHT_MAJOR_KIND). Kept until the forms change (asked at every MoE layer of a step)."""
        key = (out_features, in_features, self.max_rows, len(self.forms))  # tune clears it; len: forms set by hand
        if key not in self._kinds:
            self._kinds[key] = [_KIND[self.form(out_features, in_features, m)] for m in range(1, self.max_rows + 1)]
        return self._kinds[key]

    def describe(self) -> dict[str, list[str]]:
        """{"out x in": [form for m = 1..max_rows]}: what was chosen, for logs and bench JSON."""
        shapes = sorted({(o, i) for o, i, _ in self.forms})
        return {f"{o}x{i}": [self.form(o, i, m) for m in range(1, self.max_rows + 1)] for o, i in shapes}


def moe_experts(
    plan: GemmPlan, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, topk_weights
) -> torch.Tensor:
    """`out[t] = Σ_j w[t, j] · expert_{ids[t, j]}(x[t])` (moe_ref.moe_forward's semantics, SiLU gating, no mask) with
    each expert's two products in `plan`'s form. x [T, H], w13 [E, 2I, H], w2 [E, H, I], topk [T, k]. In one call of
    the stream kernel's library (stream_gemm.stream_moe) where it is loaded and the tensors are float32, else expert
    by expert from Python (`moe_experts_python`). The weights may be bfloat16 (WEIGHT_DTYPES: multiplied in
    float32, the stream walks reading half the bytes)."""
    if x.dtype == torch.float32 and w13.dtype == w2.dtype in WEIGHT_DTYPES and stream_gemm.available():
        kinds13, kinds2 = plan.kinds(w13.shape[1], w13.shape[2]), plan.kinds(w2.shape[1], w2.shape[2])
        return stream_gemm.stream_moe(x, w13, w2, topk_ids, topk_weights, kinds13, kinds2)
    return moe_experts_python(plan, x, w13, w2, topk_ids, topk_weights)


def moe_experts_python(
    plan: GemmPlan, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, topk_weights
) -> torch.Tensor:
    """moe_experts expert by expert: sort, per expert hit the two planned products and the activation, combine."""
    cnts = topk_ids.new_zeros((topk_ids.shape[0], w13.shape[0]))
    cnts.scatter_(1, topk_ids.to(torch.int64), 1)
    tokens_per_expert = cnts.sum(dim=0).tolist()
    idxs = topk_ids.reshape(-1).argsort()
    sorted_tokens = x[idxs // topk_ids.shape[1]]
    half = w13.shape[1] // 2
    outputs, start = [], 0
    for expert, count in enumerate(tokens_per_expert):
        if count == 0:
            continue
        rows = sorted_tokens[start : start + count]
        gate_up = plan.mm(rows, w13[expert])
        outputs.append(plan.mm(F.silu(gate_up[:, :half]) * gate_up[:, half:], w2[expert]))
        start += count
    outs = torch.cat(outputs, dim=0) if outputs else sorted_tokens.new_empty(0)
    new_x = torch.empty_like(outs)
    new_x[idxs] = outs
    return (
        new_x.view(*topk_ids.shape, -1)
        .type(topk_weights.dtype)
        .mul_(topk_weights.unsqueeze(dim=-1))
        .sum(dim=1)
        .type(new_x.dtype)
    )


@functools.cache
def last_level_cache_bytes() -> int:
    """The size of CPU 0's largest cache as Linux reports it (sysfs, read once), COLD_CACHE_BYTES where it cannot be
    read."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=COLD_CACHE_BYTES)


def timed_matrices(stack: torch.Tensor) -> int:
    """How many of `stack`'s matrices a timing pass multiplies in turn: enough that together they hold twice the
    last-level cache, so that each product reads its weight from memory as a decode step does on a model larger
    than the cache (at least 8, at most all of them). On a 2-core AMD EPYC with a 32 MiB L3, 8 of moe-fine x48's
    w2 [256, 4608] in bfloat16 (19 MB) stayed in the cache from pass to pass, and an engine's plan kept
    `stream_l2_near` for one row, which read them at 18.5 GB/s from memory where `stream_seq` read 22.0
    (bench/results/plan-cold-s53/walks_cold.txt). A stack that fits in the cache whole (moe-fine's) is timed warm,
    as its step reads it."""
    per_matrix = stack[0].numel() * stack.element_size()
    wanted = -(-2 * last_level_cache_bytes() // max(per_matrix, 1))
    return min(stack.shape[0], max(8, wanted))


def timing_passes(repeats: int, matrices: int) -> int:
    """Passes of `matrices` products that time about as many products per form as `repeats` passes of 8 did, at least
    2 (at most `repeats`): timing from memory multiplies 15 of moe-fine x48's w13 and 29 of its w2 per pass on a 32
    MiB L3, and 5 passes of those took the tuning of its two expert shapes from 3.9-4.3 to 10.4-10.6 s on a 2-core
    AMD EPYC, these passes 5.2 s (bench/results/plan-cold-s53/tune_time.txt)."""
    return max(min(2, repeats), min(repeats, round(repeats * 8 / max(matrices, 1))))


def time_forms(
    stack: torch.Tensor,
    rows: int,
    repeats: int = 5,
    candidates: tuple[str, ...] = FORMS,
    inputs: torch.dtype | None = None,
) -> dict[str, float]:
    """Seconds per form of `candidates` available for `stack` and `rows` (stream forms: float32 rows, up to their row
    limit; torch's: rows of the weights' dtype) against the matrices of `stack` (`timed_matrices` of them, one product
    each), rows of dtype `inputs` (default: the weights'): the best of `repeats` passes, the forms taking turns pass
    by pass; where a pass multiplies more than 8 matrices, fewer passes (`timing_passes`)."""
    inputs = inputs or stack.dtype
    x = torch.randn(rows, stack.shape[2], dtype=inputs)
    mats = [stack[i] for i in range(timed_matrices(stack))]
    streams = inputs == torch.float32 and stack.dtype in WEIGHT_DTYPES and rows <= stream_gemm.MAX_ROWS
    torch_forms = stack.dtype == inputs  # float32 rows by a bfloat16 weight: torch's forms would copy it each product
    amx = stack.dtype == torch.bfloat16  # the AMX forms multiply bfloat16 weights only
    forms = [
        f
        for f in available_forms()
        if f in candidates and (streams and (amx or f not in AMX_FORMS) if f in STREAM_FORMS else torch_forms)
    ]
    best = {}
    for form in forms:
        _FORM_FN[form](x, mats[0])  # warm the BLAS path
        best[form] = float("inf")
    for _ in range(timing_passes(repeats, len(mats))):
        for form in forms:
            fn = _FORM_FN[form]
            start = time.perf_counter()
            for w in mats:
                fn(x, w)
            best[form] = min(best[form], time.perf_counter() - start)
    return best
