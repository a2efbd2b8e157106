"""Fixtures shared with the engine tests: one SGLang server per configuration (EnginePool) and tiny checkpoints."""

from tests.moe_sglang.conftest import engine_pool, tiny_models  # noqa: F401 - re-exported as fixtures
