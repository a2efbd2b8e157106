"""How SGLang starts the CPU engine's scheduler and detokenizer processes: forked from the launcher (setting
`process_start=fork`, the default) instead of spawned.

SGLang sets the `spawn` start method unconditionally while it configures the launch (`_set_envs_and_config`): right
for GPUs, where a forked CUDA context is unusable, but on the CPU engine each spawned process then imports SGLang,
torch and transformers again and loads this plugin again before its own work starts, while the launcher holds all
of that already. Forked, the processes inherit the launcher's modules, the plugin's registrations (SGLang's
`load_plugins` is idempotent per process and finds them done) and the compiled kernels. The launcher has a single
thread when it forks (SGLang starts its threads after the processes), so no lock is copied held.
vLLM's CPU workers start the same way (fork by default).

Nothing else changes: the processes run the functions SGLang gives them, with the arguments it gives them. What it
saves is measured by `bench.engine_start` (README).
"""

from __future__ import annotations

import logging
import multiprocessing

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
    from moe_sglang.touchpoints import hook

    hook(TARGET, fork_after_config, "around")
