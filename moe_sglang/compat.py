"""The SGLang surface moe-serve relies on, checked once at plugin load with a clear message when it moved."""

from __future__ import annotations

import importlib

SGLANG_VERSION = "0.5.23"

# (module, attribute) pairs our adaptations use; each comment says which adaptation needs it.
REQUIRED = (
    ("sglang.srt.runtime_context", "override_platform"),  # keep the intel_amx backend on CPU (plugin.py)
    ("sglang.srt.plugins.hook_registry", "HookRegistry"),  # per-request policy hooks
    ("sglang.srt.layers.attention.intel_amx_backend", "IntelAMXAttnBackend"),  # CPU attention incl. target-verify
    # per-request speculation (spec_hooks.py): the step, verify, draft and routing functions it wraps
    ("sglang.srt.speculative.ngram_worker", "NGRAMWorker"),
    ("sglang.srt.speculative.ngram_worker", "eagle_sample"),
    ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"),
    ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker"),
    ("sglang.srt.speculative.eagle_worker_common", "eagle_sample"),
    ("sglang.srt.managers.tp_worker", "TpModelWorker"),
    ("sglang.srt.layers.moe.topk", "TopK"),
)


class SGLangCompatError(RuntimeError):
    pass


def check_sglang() -> None:
    import sglang

    problems = []
    if sglang.__version__ != SGLANG_VERSION:
        problems.append(f"sglang {sglang.__version__} is installed, moe-serve is built against {SGLANG_VERSION}")
    for module_name, attribute in REQUIRED:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            problems.append(f"cannot import {module_name}: {err}")
            continue
        if not hasattr(module, attribute):
            problems.append(f"{module_name}.{attribute} is missing")
    if problems:
        raise SGLangCompatError("moe-serve's SGLang integration cannot load:\n- " + "\n- ".join(problems))
