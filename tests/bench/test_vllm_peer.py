"""bench._vllm_peer.vllm_argv: the vLLM server command line the peer benchmarks start."""

from pathlib import Path

from bench._vllm_peer import vllm_argv


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_the_peer_runs_float32_unless_asked_for_bfloat16():
    argv = vllm_argv(Path("/py"), Path("/m"), 8000, 0, 256)
    assert _flag(argv, "--dtype") == "float32" and _flag(argv, "--max-model-len") == "256"
    assert "--speculative-config" not in argv
    assert _flag(vllm_argv(Path("/py"), Path("/m"), 8000, 0, 256, "bfloat16"), "--dtype") == "bfloat16"
    assert '"num_speculative_tokens": 3' in _flag(
        vllm_argv(Path("/py"), Path("/m"), 8000, 3, 256), "--speculative-config"
    )
