"""The MoE layer the GPU benches measure (bench/gpu_evidence.py, bench/gpu_breakdown.py): shapes and run plans, weights
and skewed routing, the kernel under test and its torch baselines, the budget mask and expert counters a CUDA graph can
capture, and the timing (CUDA-graph capture, CUDA events with the L2 flushed, the measured copy bandwidth).

Routers are random but skewed (a fixed per-expert bias plus Gumbel noise per token), so some experts are popular and a
budget bites; `router_skew = 0` gives uniform routing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from service.kernels import moe_ref

REL_TOL = 2e-2  # max |got - want| / max |want|: the kernel stores the activation in bf16 (eps 2^-8), the oracle in fp32
FLUSH_BYTES = 256 * 2**20  # zeroed before each timed rep: larger than an H100/H200 L2 (50 / 60 MB)


@dataclass(frozen=True)
class Shape:
    name: str
    experts: int  # E
    top_k: int  # k
    hidden: int  # H
    inter: int  # I, one expert's intermediate size
    renormalize: bool  # the router rescales the top-k weights to sum 1 (Mixtral) or not (OLMoE)
    router_skew: float = 1.0  # std of each expert's fixed router bias: 0 = uniform routing (MoESD's N(t) assumption)

    def expert_bytes(self, itemsize: int) -> int:
        """Bytes of one expert's weights: w13 [2I, H] + w2 [H, I]."""
        return 3 * self.hidden * self.inter * itemsize


@dataclass(frozen=True)
class Plan:
    device: torch.device
    dtype: torch.dtype  # bf16 on CUDA; fp32 on CPU, where the dry run only checks the plumbing
    shapes: tuple[Shape, ...]  # the goals are stated for shapes[0]
    tokens: tuple[int, ...]  # verify batch sizes T
    int4_shapes: tuple[tuple[int, int], ...]  # (N, K) of draft-like INT4 weights
    int4_rows: tuple[int, ...]  # M, rows of x
    block_configs: tuple[tuple[int, ...], ...]  # (block_m, block_n, block_k[, num_warps, num_stages]) swept at T <= 8
    graph_tokens: int  # T of the captured verify step
    draws: int  # router-logit draws replayed through the graph
    reps: int  # timed reps of our kernel (median); the torch baselines get a third
    graphs: bool  # time our kernel path as CUDA-graph replays (CUDA only, and only where capture works)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


FULL_PLAN = Plan(
    device=torch.device("cuda"),
    dtype=torch.bfloat16,
    shapes=(
        Shape("olmoe", 64, 8, 2048, 1024, False),
        Shape("mixtral", 8, 2, 4096, 14336, True),
        Shape("olmoe-uniform", 64, 8, 2048, 1024, False, router_skew=0.0),
    ),
    tokens=(1, 2, 4, 8, 16, 32, 64),
    int4_shapes=((2048, 2048), (1024, 2048), (4096, 14336)),
    int4_rows=(1, 4, 16, 64),
    block_configs=(
        (16, 64, 64),
        (16, 32, 128),
        (16, 64, 128),
        (16, 64, 256),
        (16, 64, 128, 4, 4),
        (16, 64, 256, 4, 3),
        (16, 64, 128, 8, 4),
        (16, 128, 128, 4, 3),
        (16, 32, 256, 4, 4),
    ),
    graph_tokens=16,
    draws=3,
    reps=30,
    graphs=True,
)
QUICK_PLAN = replace(
    FULL_PLAN,
    shapes=(Shape("olmoe-tiny", 16, 4, 64, 32, False), Shape("mixtral-tiny", 8, 2, 64, 64, True)),
    tokens=(1, 2, 4, 8, 16),
    int4_shapes=((64, 128), (32, 256)),
    int4_rows=(1, 4),
    block_configs=((16, 16, 32), (16, 32, 64)),
    graph_tokens=8,
    draws=2,
    reps=3,
)


def make_plan(device: str, quick: bool) -> Plan:
    device = torch.device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return replace(QUICK_PLAN if quick else FULL_PLAN, device=device, dtype=dtype, graphs=device.type == "cuda")


@dataclass(frozen=True)
class Layer:
    shape: Shape
    w13: torch.Tensor  # [E, 2I, H]
    w2: torch.Tensor  # [E, H, I]
    bias: torch.Tensor  # [E] float32, each expert's fixed router preference: makes some experts popular


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor  # [T, H]
    logits: torch.Tensor  # [T, E] float32 router logits
    ids: torch.Tensor  # [T, k] int64
    weights: torch.Tensor  # [T, k] float32
    mask: torch.Tensor  # [E] bool, the MoE-Spec budget B = E/2 over these tokens' router mass


def make_layer(shape: Shape, plan: Plan, seed: int = 0) -> Layer:
    gen = torch.Generator(device=plan.device).manual_seed(seed)

    def weight(*size: int) -> torch.Tensor:  # ~1/sqrt(fan_in), so every activation stays O(1)
        return torch.randn(*size, generator=gen, device=plan.device, dtype=plan.dtype).mul_(size[-1] ** -0.5)

    bias = torch.randn(shape.experts, generator=torch.Generator().manual_seed(seed)).mul_(shape.router_skew)
    w13 = weight(shape.experts, 2 * shape.inter, shape.hidden)  # [E, 2I, H]
    return Layer(shape, w13, weight(shape.experts, shape.hidden, shape.inter), bias.to(plan.device))


def router_logits(layer: Layer, tokens: int, seed: int) -> torch.Tensor:
    """[T, E]: the layer's per-expert bias plus standard Gumbel noise per token."""
    u = torch.rand(tokens, layer.shape.experts, generator=torch.Generator().manual_seed(seed)).clamp_(1e-9, 1 - 1e-7)
    return layer.bias + (-torch.log(-torch.log(u))).to(layer.bias.device)


def make_batch(layer: Layer, tokens: int, seed: int = 1) -> Batch:
    shape = layer.shape
    x = torch.randn(tokens, shape.hidden, generator=torch.Generator().manual_seed(seed))
    logits = router_logits(layer, tokens, seed)
    ids, weights = moe_ref.route_topk(logits, shape.top_k, renormalize=shape.renormalize)
    mask = moe_ref.select_budget_experts(torch.softmax(logits, -1), shape.experts // 2)
    return Batch(x.to(layer.w13.device, layer.w13.dtype), logits, ids, weights, mask)


def fused(layer: Layer, x, ids, weights, mask=None, blocks: tuple[int, ...] = ()) -> torch.Tensor:
    from service.kernels.triton.fused_moe_masked import fused_moe_masked  # imports triton: only once a kernel runs

    block_m, block_n, block_k, num_warps, num_stages = (*blocks, None, None, None, None, None)[:5]
    return fused_moe_masked(
        x, layer.w13, layer.w2, ids, weights, mask, block_m=block_m, block_n=block_n, block_k=block_k
    )


def torch_loop(layer: Layer, x, ids, weights, mask=None) -> torch.Tensor:
    """A faster plain-torch baseline than the oracle: slots grouped by expert with one host read of the counts, then one
    GEMM pair per touched expert in the weights' dtype, reading each weight in place (no fp32 copy, no gather)."""
    num_experts, top_k = layer.shape.experts, ids.shape[1]
    flat = ids.reshape(-1)  # [T*k]
    if mask is not None:
        flat = torch.where(mask[flat], flat, num_experts)  # masked slots become the sentinel E, sorted last
    order = torch.argsort(flat, stable=True)  # [T*k] slots in expert order
    counts = torch.bincount(flat, minlength=num_experts + 1)[:num_experts].tolist()
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)  # [T, H]
    for expert, end in enumerate(torch.tensor(counts).cumsum(0).tolist()):
        slots = order[end - counts[expert] : end]  # [n]
        if slots.numel():
            gate_up = x[slots // top_k] @ layer.w13[expert].T  # [n, 2I]
            act = F.silu(gate_up[:, : layer.shape.inter]) * gate_up[:, layer.shape.inter :]
            out.index_add_(0, slots // top_k, (act @ layer.w2[expert].T).float() * weights.reshape(-1)[slots, None])
    return out.to(x.dtype)


def compare(got: torch.Tensor, want: torch.Tensor) -> dict:
    err = (got.float() - want.float()).abs().max().item()
    rel = err / max(want.float().abs().max().item(), 1e-30)
    return {"max_abs_err": err, "max_rel_err": rel, "ok": rel <= REL_TOL}


def budget_mask(probs: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """select_budget_experts with B read from a device tensor, so a graph replay can change it: probs [T, E], budget []
    int → mask [E], the B experts of largest router mass Σ_t p[t, e] (ties to the lower id, as in the oracle)."""
    order = torch.sort(probs.float().sum(0), descending=True, stable=True).indices  # [E]
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))  # [E]
    return rank < budget


def touched_experts(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[] int: experts with at least one slot in `ids [T, k]` that `mask [E]` keeps. No host read: capturable."""
    hit = torch.zeros(mask.shape, dtype=torch.int32, device=ids.device).scatter_(0, ids.reshape(-1), 1)  # [E]
    return (hit.bool() & mask).sum()


def kernel_experts(ids: torch.Tensor, mask: torch.Tensor, num_experts: int, block_m: int, layout=None) -> torch.Tensor:
    """[] int: distinct experts owning a block in the fused kernel's layout; no other expert's weights are read.
    `layout`: the layout builder, default the one the fused kernel runs (align_blocks.expert_blocks); its torch twin
    sort_slots_by_expert builds the same cells (tests/kernels/triton_cases.py) without Triton."""
    if layout is None:
        from service.kernels.triton.align_blocks import expert_blocks as layout

    blocks = layout(ids, num_experts, block_m, mask)
    block_expert = blocks.block_expert.long()  # [max_blocks], -1 = an unused block
    owned = torch.zeros(num_experts + 1, dtype=torch.int32, device=ids.device).scatter_(0, block_expert + 1, 1)
    return owned[1:].sum()


def capture(fn: Callable):
    """Warm `fn` up (compiling its kernels) on a side stream, capture it in a CUDA graph; replay() → its outputs."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()

    def replay():
        graph.replay()
        return outputs

    return replay


def median_ms(device: torch.device, fn: Callable, reps: int, flush: bool = True) -> float:
    """Median ms of `fn` after warm-up: on CUDA, events around each rep (L2 flushed first unless `flush` is off);
    elsewhere perf_counter."""
    cuda = device.type == "cuda"
    for _ in range(2 if cuda else 1):
        fn()
    if not cuda:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)
    scratch = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        if flush:
            scratch.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def hbm_bandwidth(plan: Plan) -> float | None:
    """Bytes per second of a 1 GiB device-to-device copy, each byte read once and written once; None off CUDA."""
    if not plan.cuda:
        return None
    src = torch.ones(2**30, dtype=torch.uint8, device=plan.device)
    dst = torch.empty_like(src)
    return 2 * src.numel() / (median_ms(plan.device, lambda: dst.copy_(src), 10, flush=False) * 1e-3)


def limit_ms(num_bytes: int, bandwidth: float | None) -> float | None:
    """Bandwidth limit: the time to read `num_bytes` of weights once at `bandwidth` bytes/s."""
    return None if bandwidth is None else num_bytes / bandwidth * 1e3


def ratio(ms: float, limit: float | None) -> float | None:
    return None if not limit else ms / limit
