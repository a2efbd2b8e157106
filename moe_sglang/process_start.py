"""How SGLang starts the CPU engine's scheduler and detokenizer processes: forked from the launcher (setting
`process_start=fork`, the default) instead of spawned.

SGLang sets the `spawn` start method unconditionally while it configures the launch (`_set_envs_and_config`): right
for GPUs, where a forked CUDA context is unusable, but on the CPU engine each spawned process then imports SGLang,
torch and transformers again and loads this plugin again before its own work starts, while the launcher holds all
of that already. Forked, the processes inherit the launcher's modules, the plugin's registrations (SGLang's
`load_plugins` is idempotent per process and finds them done) and the compiled kernels. The launcher has a single
thread when it forks (SGLang starts its threads after the processes), so no lock is copied held.

The launcher's objects are moved to the collector's permanent generation just before each fork (`gc.freeze`; the
launcher unfreezes its own right after): otherwise the child's full collections walk and write every inherited
object, copying its pages. Measured with two engines up side by side (moe-fine x48, batch 1, requests alternating
between them, 2-core AMD EPYC with AVX-512, 2026-11-28): forked / spawned decode TPOT 1.07 (0.99-1.15, 8 rounds,
scratch) without the freeze; with it 1.01 and 1.00 (scratch), then 1.07 (0.74-1.28, 10 rounds) and 1.01 (0.92-1.18,
12 rounds) in `bench.engine_start --side-by-side` (README): a few percent slower is not ruled out.

Nothing else changes: the processes run the functions SGLang gives them, with the arguments it gives them. What it
saves is measured by `bench.engine_start` (README).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os

logger = logging.getLogger(__name__)

FORKED = "scheduler and detokenizer processes: forked from the launcher"  # the engine log's line
TARGET = "sglang.srt.entrypoints.engine._set_envs_and_config"


def fork_after_config(original, server_args):
    """AROUND hook of SGLang's launch configuration: its settings, then the start method `fork`."""
    result = original(server_args)
    multiprocessing.set_start_method("fork", force=True)
    logger.info("%s (moe_sglang/process_start.py)", FORKED)
    return result


def install() -> None:
    """Once per process (the plugin loads once per process): the hook, and the freeze around every fork."""
    from moe_sglang.touchpoints import hook

    hook(TARGET, fork_after_config, "around")
    os.register_at_fork(before=gc.freeze, after_in_parent=gc.unfreeze)
