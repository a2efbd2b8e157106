"""`x @ w.T` for 1-16 rows that reads the weight once at any row count: a small C++ kernel (csrc/stream_gemm.cpp),
built on the machine that runs it with torch's extension builder (g++ and ninja), registered as
`torch.ops.moe_serve.stream_linear`.

Why: the expert products of a decode or verify step give each expert 1-16 rows, and BLAS leaves the memory-bound
regime as the rows grow. Measured on a 2-core Intel Xeon (AVX-512 + AMX, MKL, 1 thread; 96 experts shaped like
moe-fine x48's, visited in random order so each weight comes from memory; ms per product):

    w13 [9216, 256]   rows 1     4     8     16
    F.linear             0.70  1.33  1.76  1.45
    stream (AVX-512)     0.57  0.69  0.88  1.05
    w2 [256, 4608]
    F.linear             0.30  0.58  0.75  0.64
    stream (AVX-512)     0.33  0.34  0.46  0.76

Each output feature is a dot product of a weight row with every x row (the x rows stay in cache), R features at a
time so each weight vector is loaded once and each x vector reused R times; software prefetch 8 KB ahead of each
weight row keeps enough of the weight in flight (without it the 4-row product took 1.1 ms, no faster than BLAS).
That walk (`lockstep`) read a short-rowed weight (w13, 1 KB rows) at a third of the memory's rate on a 2-core AMD
EPYC, where reading it in address order (`sequential`) or prefetching into L2 ran 1.5-2.7x faster (the C++ file's
table): the walk is one of `KINDS`, and small_gemm's plan times each on the weights it will multiply. The CPU
differs between machines: the kernel is compiled for AVX-512F, AVX2 + FMA and SSE2 and `best_isa()` asks the CPU
which it runs. Sums run in another order than BLAS's: results agree with F.linear to float rounding.

`stream_moe` is a MoE layer's whole expert forward in one call (rows grouped by expert, each expert's two products in
the form a plan chose for its row count, the activation, the weighted sum over a token's experts): at a decode's few
rows the per-expert Python of small_gemm.moe_experts (a dozen dispatched ops per expert hit) was about a millisecond
of a ~16 ms step on moe-fine x48.

`load()` builds once per checkout (about 35 s; setup.sh does it ahead) into build/extensions/ and loads the library
from there afterwards; where it cannot be built (no compiler) it returns False with the reason, and small_gemm
keeps its torch forms.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
# the library's sources (the other ops of torch.ops.moe_serve share its products: decode_attention.py) and the
# header they share
SOURCES = (CSRC / "stream_gemm.cpp", CSRC / "amx_gemm.cpp", CSRC / "decode_attention.cpp", CSRC / "decode_moe.cpp")
HEADERS = (CSRC / "stream_gemm.h",)
NAME = "moe_serve_stream_gemm"
MAX_ROWS = 16
# how the weight is walked and prefetched, the op's `kind` (csrc/stream_gemm.cpp's Kind, its table): R features side
# by side with a prefetch into L1 / into L2 / into L2 nearer ahead, one feature after another (address order) with
# and without software prefetch, or the features cut into 4 / 8 ranges walked side by side, each in address order
KINDS = ("lockstep", "lockstep_l2", "lockstep_l2_near", "sequential", "sequential_hw", "split4", "split8")
# the AMX tile forms of a bfloat16 weight (csrc/amx_gemm.cpp: the float32 rows split into three exact bfloat16
# parts), numbered after the walks: the hardware prefetchers alone / a software prefetch into L2
AMX_KINDS = ("amx", "amx_prefetch")
AMX_KIND, AMX_PREFETCH_KIND = len(KINDS), len(KINDS) + 1
# no -march: the ISA variants are compiled by target attributes and chosen at run time. -fopenmp: the products,
# attention and AMX forms split their work with ATen's parallel_for, which runs on torch's intra-op threads only in
# code compiled with OpenMP (without it every range ran on the calling thread: an engine given 2 threads multiplied
# its experts on one; `threads()`). The library then needs libgomp.so.1, which torch's wheel carries and has loaded:
# the loader reuses it by name, so the ops and torch share one OpenMP runtime and its thread count.
CFLAGS = ("-O3", "-fopenmp")
LDFLAGS = ("-fopenmp",)
ISAS = ("avx512", "avx2", "base")  # widest first

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}  # "loaded": bool, "error": str


def load() -> bool:
    """Build (first time in this checkout) and load the op; False where it cannot be built here (`error()` says
    why)."""
    with _LOCK:
        if "loaded" not in _STATE:
            try:
                _build_and_register()
                _STATE["loaded"] = True
            except Exception as exc:  # no compiler, no ninja, no headers: the torch forms remain
                _STATE["loaded"], _STATE["error"] = False, f"{type(exc).__name__}: {exc}"
                logger.warning("moe-serve stream GEMM not available: %s", _STATE["error"])
        return bool(_STATE["loaded"])


def available() -> bool:
    """load(), without its lock once it has answered (called at every MoE layer of a step)."""
    loaded = _STATE.get("loaded")
    return load() if loaded is None else bool(loaded)


def error() -> str | None:
    return _STATE.get("error")  # type: ignore[return-value]


def best_isa() -> str:
    """The widest ISA of ISAS this CPU runs (asked of the CPU once, not assumed; the ops ask at every call)."""
    isa = _STATE.get("isa")
    if isa is None:
        _require()
        isa = _STATE["isa"] = torch.ops.moe_serve.stream_best_isa()
    return isa  # type: ignore[return-value]


def amx_ready() -> bool:
    """Whether the AMX forms run here: the CPU has AMX-TILE and AMX-BF16 and the kernel let this process use the
    tiles (asked once per process, not assumed)."""
    ready = _STATE.get("amx")
    if ready is None:
        ready = _STATE["amx"] = bool(load() and torch.ops.moe_serve.stream_amx_ready())
    return ready  # type: ignore[return-value]


def threads() -> int:
    """The threads the library's ops split a product over now: torch's intra-op thread count (set_num_threads,
    OMP_NUM_THREADS) where it was compiled with OpenMP, else 1."""
    _require()
    return int(torch.ops.moe_serve.stream_threads())


def supported_isas() -> list[str]:
    """Every ISA of ISAS this CPU runs, widest first."""
    return list(ISAS[ISAS.index(best_isa()) :])


def stream_linear(x: torch.Tensor, w: torch.Tensor, isa: str | None = None, kind: int = 0) -> torch.Tensor:
    """x [m, in] @ w [out, in].T -> [m, out], CPU tensors, x float32, w float32 or bfloat16 (each weight widened to
    float32 before it multiplies: half the bytes read), 1 <= m <= MAX_ROWS (the op checks and says; any m >= 1 in the
    AMX forms); `kind` indexes KINDS, or is AMX_KIND / AMX_PREFETCH_KIND for a bfloat16 weight where amx_ready().
    Called for every expert product of a step: once loaded, no lock and no overload resolution."""
    if not _STATE.get("loaded"):
        _require()
    return torch.ops.moe_serve.stream_linear.default(x, w, isa or best_isa(), kind)


# stream_moe's forms other than the stream walks (csrc/stream_gemm.cpp: kLinear, kWeightMajor)
LINEAR_KIND, WEIGHT_MAJOR_KIND = -1, -2


def stream_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    kinds13: list[int],
    kinds2: list[int],
    isa: str | None = None,
) -> torch.Tensor:
    """`out[t] = Σ_j topk_weights[t, j] · expert_{topk_ids[t, j]}(x[t])` (SiLU gating; x [T, H], w13 [E, 2I, H], w2
    [E, H, I], CPU; x float32, the weights both float32 or both bfloat16, multiplied in float32) with expert e's m rows multiplied by w13[e] as kinds13[m - 1] and by w2[e] as
    kinds2[m - 1]: a KINDS index, LINEAR_KIND or WEIGHT_MAJOR_KIND (F.linear beyond the lists' length)."""
    if not _STATE.get("loaded"):
        _require()
    return torch.ops.moe_serve.stream_moe.default(
        x, w13, w2, topk_ids, topk_weights, isa or best_isa(), kinds13, kinds2
    )


def _require() -> None:
    if not load():
        raise RuntimeError(f"moe-serve stream GEMM is not available: {error()}")


def build_dir() -> Path:
    """Where the library is built and kept: $MOE_SERVE_EXTENSIONS_DIR, else the checkout's build/ folder (inside the
    CPU image's /app, so an image built by setup.sh carries it)."""
    root = os.environ.get("MOE_SERVE_EXTENSIONS_DIR") or Path(__file__).resolve().parents[2] / "build" / "extensions"
    return Path(root) / NAME


def _build_and_register() -> None:
    """Load the library built for this source, compiler flags and torch; build it first where there is none. A
    current build is loaded without writing anything (a read-only install, such as the CPU image's, still loads)."""
    folder = build_dir()
    library, stamp = folder / f"{NAME}.so", folder / "stamp"
    want = _stamp()
    if not (library.exists() and stamp.exists() and stamp.read_text() == want):
        from torch.utils import cpp_extension

        folder.mkdir(parents=True, exist_ok=True)
        # is_python_module=False: a plain library whose TORCH_LIBRARY block registers torch.ops.moe_serve.*
        cpp_extension.load(
            name=NAME,
            sources=[str(source) for source in SOURCES],
            extra_cflags=list(CFLAGS),
            extra_ldflags=list(LDFLAGS),
            build_directory=str(folder),
            is_python_module=False,
            verbose=False,
        )
        stamp.write_text(want)
        return  # cpp_extension.load has loaded it
    torch.ops.load_library(str(library))


def build_stamp() -> str:
    """What the library was built from: its sources and header, compiler flags and torch (a digest)."""
    return _stamp()


def _stamp() -> str:
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    digest.update(" ".join((*CFLAGS, *LDFLAGS, torch.__version__)).encode())
    return digest.hexdigest()[:16]
