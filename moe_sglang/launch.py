"""Launching SGLang's HTTP server with moe-serve's defaults: the command line and environment, built from one config.

CPU (the embedded default): `--device cpu` with SGLang's `intel_amx` attention backend, which our plugin backs with
torch ops (see plugin.py), fp32 by default (bf16 matmuls are slower than fp32 on this path and greedy comparisons
against transformers need the same dtype). GPU: SGLang's own defaults (its kernels, FlashInfer, CUDA graphs).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from moe_sglang.settings import EngineSettings

ASSETS = Path(__file__).resolve().parent.parent / "service" / "models" / "assets"
DEFAULT_MODEL = ASSETS / "moe-tiny"
DEFAULT_DRAFT_MODEL = ASSETS / "moe-tiny-draft"
# The fine-grained sparse bundled model (issue 16: 32 experts top-4) and its dense STANDALONE draft; not the default.
FINE_MODEL = ASSETS / "moe-fine"
FINE_DRAFT_MODEL = ASSETS / "moe-fine-draft"

SPEC_ALGORITHMS = ("none", "ngram", "standalone")


@dataclass(frozen=True)
class SpeculationConfig:
    algorithm: str = "none"  # one of SPEC_ALGORITHMS
    draft_model_path: str | None = None  # STANDALONE only: a model with the target's tokenizer
    num_steps: int = 3  # draft forward passes per step (depth of the draft chain/tree)
    topk: int = 1  # branches per draft step (NGRAM: max BFS breadth): 1 = chain, > 1 = tree
    num_draft_tokens: int = 4  # tokens verified per request per step (tree size incl. the root)

    def __post_init__(self) -> None:
        if self.algorithm not in SPEC_ALGORITHMS:
            raise ValueError(f"speculative algorithm {self.algorithm!r}: expected one of {SPEC_ALGORITHMS}")
        if self.algorithm == "standalone" and not self.draft_model_path:
            raise ValueError("STANDALONE speculation needs a draft model path")
        if min(self.num_steps, self.topk, self.num_draft_tokens) < 1:
            raise ValueError("num_steps, topk and num_draft_tokens must be >= 1")


@dataclass(frozen=True)
class EngineConfig:
    model_path: str = str(DEFAULT_MODEL)  # HF checkpoint folder
    host: str = "127.0.0.1"
    port: int = 30000
    device: str = "auto"  # auto | cpu | cuda
    dtype: str | None = None  # None: float32 on CPU, SGLang's "auto" on GPU
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    max_total_tokens: int | None = None  # KV-cache size in tokens; None: 65536 on CPU, SGLang's choice on GPU
    max_running_requests: int | None = None
    threads: int | None = None  # torch/OpenMP threads of the engine (OMP_NUM_THREADS); None: inherited / torch's own
    settings: EngineSettings = field(default_factory=EngineSettings)  # moe-serve's own engine settings
    extra_args: tuple[str, ...] = ()  # passed to SGLang as they are

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"engine threads must be >= 1, got {self.threads}")

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        try:
            import torch
        except ImportError:
            return "cpu"
        return "cuda" if torch.cuda.is_available() else "cpu"


def server_argv(config: EngineConfig) -> list[str]:
    device = config.resolved_device()
    argv = ["--model-path", config.model_path, "--host", config.host, "--port", str(config.port)]
    if "--served-model-name" not in config.extra_args:
        # clients name the model by its folder ("moe-tiny"), not by a path on the server
        argv += ["--served-model-name", Path(config.model_path.rstrip("/")).name]
    if device == "cpu":
        argv += ["--device", "cpu", "--attention-backend", "intel_amx"]
        argv += ["--dtype", config.dtype or "float32"]
        argv += ["--max-total-tokens", str(config.max_total_tokens or 65536)]
        # Without it an idle scheduler busy-polls its sockets and burns a whole core: on a laptop, a CI box or a
        # test session holding engines between tests, that starves everything else.
        argv += ["--sleep-on-idle"]
    else:
        argv += ["--dtype", config.dtype or "auto"]
        if config.max_total_tokens:
            argv += ["--max-total-tokens", str(config.max_total_tokens)]
    if config.max_running_requests:
        argv += ["--max-running-requests", str(config.max_running_requests)]
    argv += _speculation_argv(config.speculation)
    return argv + list(config.extra_args)


def _speculation_argv(spec: SpeculationConfig) -> list[str]:
    if spec.algorithm == "none":
        return []
    from moe_sglang.algorithm import ALGORITHMS  # moe-serve's registered algorithms (per-request steps)

    argv = ["--speculative-algorithm", ALGORITHMS[spec.algorithm]]
    argv += ["--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    if spec.algorithm == "ngram":
        # SGLang's NGRAM drafts a BFS tree over its n-gram trie; breadth 1 makes it a chain.
        argv += ["--speculative-ngram-max-bfs-breadth", str(spec.topk)]
    if spec.algorithm == "standalone":
        argv += ["--speculative-draft-model-path", str(spec.draft_model_path)]
        argv += ["--speculative-num-steps", str(spec.num_steps), "--speculative-eagle-topk", str(spec.topk)]
    return argv


def server_env(config: EngineConfig, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if config.resolved_device() == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        # spec_utils.py compiles one helper with torch.compile(dynamic=True); on CPU that runs Inductor's C++ build
        # (17-30 s at the first draft, STANDALONE 10-30x slower) for identical output.
        env.setdefault("TORCH_COMPILE_DISABLE", "1")
        # SGLang's eager runner copies every forward's inputs into the static buffers CUDA graphs replay from
        # (EagerRunner.load_batch); a CPU engine captures none, so the copy is pure cost (~4 % of a batch-1 moe-fine
        # decode step's samples, README, issue 15). SGLang's own switch hands the model the batch's tensors instead.
        env.setdefault("SGLANG_EAGER_INPUT_NO_COPY", "1")
    if config.threads is not None:
        env["OMP_NUM_THREADS"] = str(config.threads)
    env.update(config.settings.to_env())  # the channel into SGLang's scheduler process (settings.py)
    return env


def server_command(config: EngineConfig) -> tuple[list[str], dict[str, str]]:
    """The full command (this interpreter running sglang.launch_server) and its environment."""
    return [sys.executable, "-m", "sglang.launch_server", *server_argv(config)], server_env(config)
