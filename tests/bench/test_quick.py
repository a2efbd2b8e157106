"""Every decision benchmark of issue 9 runs in --quick mode on the bundled model and writes well-formed JSON and PNG;
run_all's results block renders from what they wrote. Sizes are tiny: this checks plumbing, not numbers."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from moe_sglang.launch import DEFAULT_MODEL

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRACES = Path(os.environ.get("MOE_SERVE_TRACES_DIR") or Path(__file__).resolve().parents[3] / "shared" / "traces")


@pytest.fixture(scope="module")
def bundled_model() -> Path:
    if not (DEFAULT_MODEL / "config.json").exists():
        pytest.skip(f"bundled model missing at {DEFAULT_MODEL}")
    return DEFAULT_MODEL


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-results")


def run_quick(name: str, model: Path, folder: Path) -> dict:
    module = importlib.import_module(f"bench.{name}")
    assert module.main(["--quick", "--model", str(model), "--out", str(folder / name)]) == 0
    data = json.loads((folder / name / f"{name}.json").read_text())
    assert data["machine"]["cpus"] >= 1
    assert data["rows"], f"{name} wrote no rows"
    assert (folder / name / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    return data


def finite(value) -> bool:
    return isinstance(value, int | float) and value == value and abs(value) != float("inf")


def test_verify_cost(bundled_model, results):
    data = run_quick("verify_cost", bundled_model, results)
    assert data["bandwidth_bytes_per_s"] > 0
    assert {r["model"] for r in data["rows"]} == {"moe-tiny", "moe-tiny-x4"}
    assert {r["sweep"] for r in data["rows"]} == {"natural", "forced"}
    for r in data["rows"]:
        assert r["time_ms"] > 0 and finite(r["pred_fit_ms"]) and r["bw_limit_ms"] > 0
        assert (r["sweep"] == "natural") == finite(r.get("pred_moesd_ms"))
        assert 1 <= r["unique_per_layer"] <= 8


def test_budget(bundled_model, results):
    data = run_quick("budget", bundled_model, results)
    quality = [r for r in data["rows"] if r["model"] == "moe-tiny"]
    assert {r["mode"] for r in quality} == {"none", "truncation", "substitution"}
    assert next(r for r in quality if r["mode"] == "none")["greedy_agreement"] == 1.0
    for r in quality:
        assert 0.0 <= r["greedy_agreement"] <= 1.0 and finite(r["heldout_loss"])
        assert r["unique_per_layer"] <= r["budget"]


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed (run scripts/setup.sh)")
def test_policies(bundled_model, results):
    data = run_quick("policies", bundled_model, results)
    policies = {r["policy"] for r in data["rows"]}
    assert {"none", "static-1", "static-3", "sglang-adaptive", "cascade", "adaspec", "moe-serve"} <= policies
    assert all(r["tpot_ms"] > 0 and r["tokens_per_s"] > 0 for r in data["rows"])
    assert {s["policy"] for s in data["summary"]} == policies
    assert data["vllm_skipped"]


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed (run scripts/setup.sh)")
@pytest.mark.skipif(not TRACES.exists(), reason=f"no traces in {TRACES}")
def test_replay(bundled_model, results):
    data = run_quick("replay", bundled_model, results)
    assert {r["policy"] for r in data["rows"]} >= {"none", "moe-serve"}
    for r in data["rows"]:
        assert r["failed"] == 0
        assert all(0.0 <= r[f"slo_x{s}"] <= 1.0 for s in ("0.8", "1", "1.2"))
        assert r["tpot_p50_ms"] > 0


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed (run scripts/setup.sh)")
def test_spec_overhead(bundled_model, results):
    from bench import spec_overhead

    folder = results / "spec_overhead"
    assert spec_overhead.main(["--quick", "--model", str(bundled_model), "--out", str(folder)]) == 0
    data = json.loads((folder / "spec_overhead.json").read_text())
    assert {r["variant"] for r in data["k0_rows"]} == {"plain", "ngram-k0", "standalone-k0"}
    assert all(r["verify_tokens"] == 0 for r in data["k0_rows"]), "K = 0 for everyone must run no verify"
    assert {(s["variant"], s["metric"]) for s in data["k0_summary"]} == {
        (v, m) for v in ("ngram-k0", "standalone-k0") for m in ("tpot_ms", "cpu_ms_per_token")
    }
    for s in data["layout_summary"]:
        # the same greedy steps on both layouts: ragged can only verify fewer tokens
        assert 0 < s["ragged_verify_tokens"] <= s["rectangular_verify_tokens"], s
    assert data["cpu"]["model"]


def test_results_block_renders_from_bench_json(bundled_model, results):
    from bench._markdown import md_table
    from bench.run_all import COLUMNS, machine_facts, render

    done = [n for n in ("verify_cost", "budget", "policies", "replay") if (results / n / f"{n}.json").exists()]
    if not done:
        run_quick("verify_cost", bundled_model, results)
        done = ["verify_cost"]
    runs = [{"bench": n, "exit_code": 0, "seconds": 1.0, "error": None} for n in done]
    text = render(results, results / "RESULTS.md", runs, machine_facts(), "python -m bench.run_all --quick")
    for name in done:
        rows = json.loads((results / name / f"{name}.json").read_text())["rows"]
        assert md_table(rows, COLUMNS[name]) in text, f"{name}'s table is not the one its JSON gives"
        assert f"![{name}](plots/{name}.png)" in text
        assert (results / "plots" / f"{name}.png").read_bytes()[:8] == PNG_MAGIC


def test_readme_block_is_rebuilt_from_the_json(bundled_model, results):
    from bench.run_all import README_END, README_START, machine_facts, readme_block, update_readme

    block = readme_block(results, machine_facts(), "python -m bench.run_all", "bench/plots")
    assert "python -m bench.run_all" in block
    policies = results / "policies" / "policies.json"
    if policies.exists():
        for row in json.loads(policies.read_text())["summary"]:
            assert f"| {row['policy']} |" in block
    readme = f"intro\n{README_START}\nold numbers\n{README_END}\noutro\n"
    updated = update_readme(readme, block)
    assert "old numbers" not in updated and block in updated
    assert updated.startswith("intro\n") and updated.endswith(f"{README_END}\noutro\n")
    with pytest.raises(ValueError, match="results block"):
        update_readme("no markers", block)
