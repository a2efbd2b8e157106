"""The engine command line and environment built from EngineConfig (no SGLang needed)."""

import pytest

from moe_sglang.launch import EngineConfig, SpeculationConfig, server_argv, server_env


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_cpu_defaults_keep_intel_amx_backend_fp32_and_cpu_env():
    config = EngineConfig(model_path="/m", device="cpu", port=1234)
    argv = server_argv(config)
    assert flag(argv, "--device") == "cpu"
    assert flag(argv, "--attention-backend") == "intel_amx"
    assert flag(argv, "--dtype") == "float32"
    assert flag(argv, "--port") == "1234"
    assert "--speculative-algorithm" not in argv
    assert "--sleep-on-idle" in argv, "an idle CPU engine must not spin a core"
    env = server_env(config, base={"TORCH_COMPILE_DISABLE": "0"})
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["TORCH_COMPILE_DISABLE"] == "0", "an explicit user setting wins"
    assert env["SGLANG_EAGER_INPUT_NO_COPY"] == "1", "no copy into CUDA-graph buffers on CPU"
    assert server_env(config, base={"SGLANG_EAGER_INPUT_NO_COPY": "0"})["SGLANG_EAGER_INPUT_NO_COPY"] == "0"


def test_gpu_leaves_backends_to_sglang():
    argv = server_argv(EngineConfig(model_path="/m", device="cuda"))
    assert "--attention-backend" not in argv and flag(argv, "--device") is None
    env = server_env(EngineConfig(device="cuda"), base={})
    assert "SGLANG_USE_CPU_ENGINE" not in env and "SGLANG_EAGER_INPUT_NO_COPY" not in env


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            SpeculationConfig("ngram", topk=1, num_draft_tokens=4),
            {
                "--speculative-algorithm": "MOE_SERVE_NGRAM",
                "--speculative-ngram-max-bfs-breadth": "1",
                "--speculative-num-draft-tokens": "4",
            },
        ),
        (SpeculationConfig("ngram", topk=4, num_draft_tokens=8), {"--speculative-ngram-max-bfs-breadth": "4"}),
        (
            SpeculationConfig("standalone", draft_model_path="/d", num_steps=3, topk=2, num_draft_tokens=6),
            {
                "--speculative-algorithm": "MOE_SERVE_STANDALONE",
                "--speculative-draft-model-path": "/d",
                "--speculative-eagle-topk": "2",
                "--speculative-num-steps": "3",
            },
        ),
    ],
)
def test_speculation_flags(spec, expected):
    argv = server_argv(EngineConfig(model_path="/m", device="cpu", speculation=spec))
    for name, value in expected.items():
        assert flag(argv, name) == value


def test_extra_args_are_passed_last_and_unchanged():
    argv = server_argv(
        EngineConfig(model_path="/m", device="cpu", extra_args=("--enable-metrics", "--log-level", "debug"))
    )
    assert argv[-3:] == ["--enable-metrics", "--log-level", "debug"]


@pytest.mark.parametrize(
    "kwargs",
    [dict(algorithm="eagle9"), dict(algorithm="standalone"), dict(algorithm="ngram", topk=0), dict(num_draft_tokens=0)],
)
def test_bad_speculation_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        SpeculationConfig(**kwargs)


def test_cli_builds_the_same_config():
    from service.cli import build_parser

    args = build_parser().parse_args(
        [
            "engine",
            "--model",
            "/m",
            "--speculative",
            "standalone",
            "--draft-model",
            "/d",
            "--spec-topk",
            "2",
            "--",
            "--enable-metrics",
        ]
    )
    config = args._module.engine_config(args)
    assert config.model_path == "/m" and config.speculation.draft_model_path == "/d" and config.speculation.topk == 2
    assert config.extra_args == ("--enable-metrics",)


@pytest.mark.parametrize("command", ["engine", "up"])
def test_metrics_are_on_unless_asked_off(command):
    from service.cli import build_parser

    parse = build_parser().parse_args
    assert parse([command])._module.engine_config(parse([command])).extra_args == ("--enable-metrics",)
    off = parse([command, "--no-metrics", "--", "--log-level", "debug"])
    assert off._module.engine_config(off).extra_args == ("--log-level", "debug")


def test_engine_threads_reach_the_server_environment():
    assert server_env(EngineConfig(device="cpu", threads=2), base={})["OMP_NUM_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in server_env(EngineConfig(device="cpu"), base={})
    with pytest.raises(ValueError, match="threads"):
        EngineConfig(threads=0)


def test_engine_settings_are_flags_config_fields_and_the_scheduler_environment():
    from moe_sglang.settings import EngineSettings
    from service.cli import build_parser

    args = build_parser().parse_args(
        ["engine", "--default-policy", "cascade", "--verify-layout", "rectangular", "--budget-mode", "substitution"]
        + ["--cpu-attention", "loop", "--cpu-gemm", "linear", "--draft-forward", "sglang", "--target-forward", "sglang"]
        + ["--draft-thread", "on", "--process-start", "spawn", "--gemm-plan", "tune", "--arrival-gather-ms", "25"]
        + ["--plain-burst", "2", "--step-log", "/tmp/steps.jsonl"]
    )
    config = args._module.engine_config(args)
    assert config.settings == EngineSettings(
        default_policy="cascade",
        verify_layout="rectangular",
        budget_mode="substitution",
        cpu_attention="loop",
        cpu_gemm="linear",
        draft_forward="sglang",
        draft_thread="on",
        target_forward="sglang",
        process_start="spawn",
        gemm_plan="tune",
        arrival_gather_ms=25.0,
        plain_burst=2,
        step_log="/tmp/steps.jsonl",
    )
    env = server_env(config, base={})
    assert EngineSettings.from_env(env) == config.settings, "the scheduler process reads back what the CLI set"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["engine", "--verify-layout", "diagonal"])


def test_fork_hook_runs_sglang_configuration_then_sets_fork():
    import multiprocessing

    from moe_sglang.process_start import fork_after_config

    before = multiprocessing.get_start_method(allow_none=True)
    seen = []

    def configure(server_args):
        seen.append(server_args)
        multiprocessing.set_start_method("spawn", force=True)  # what SGLang's configuration does
        return "configured"

    try:
        assert fork_after_config(configure, "args") == "configured"
        assert seen == ["args"]
        assert multiprocessing.get_start_method() == "fork"
    finally:
        multiprocessing.set_start_method(before, force=True)
