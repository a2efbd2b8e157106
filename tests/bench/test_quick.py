"""Every decision benchmark of issue 9 runs in --quick mode on the bundled model (inflated as the deciding setup says)
and writes well-formed JSON and PNG; run_all's results block renders from what they wrote, and run_all hands the
setup overrides to every bench. Sizes are tiny: this checks plumbing, not numbers."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from bench._models import QUICK_INFLATE, deciding_setup
from moe_sglang.launch import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL

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
    assert {r["model"] for r in data["rows"]} == {"moe-tiny", f"moe-tiny-x{QUICK_INFLATE}"}
    assert data["setup"]["inflate"] == QUICK_INFLATE  # quick runs: a small copy of the model given
    assert {r["sweep"] for r in data["rows"]} == {"natural", "forced"}
    for r in data["rows"]:
        assert r["time_ms"] > 0 and finite(r["pred_fit_ms"]) and r["bw_limit_ms"] > 0
        assert (r["sweep"] == "natural") == finite(r.get("pred_moesd_ms"))
        assert 1 <= r["unique_per_layer"] <= 8


def test_budget_takes_the_inflation_from_the_command_line(bundled_model, results):
    from bench import budget

    folder = results / "budget-x2"
    assert budget.main(["--quick", "--model", str(bundled_model), "--inflate", "2", "--out", str(folder)]) == 0
    data = json.loads((folder / "budget.json").read_text())
    assert data["setup"]["inflate"] == 2
    assert {r["model"] for r in data["rows"]} == {"moe-tiny", "moe-tiny-x2"}


def test_budget(bundled_model, results):
    data = run_quick("budget", bundled_model, results)
    assert data["batches"] == [1, 2]
    for batch in (1, 2):
        quality = [r for r in data["rows"] if r["model"] == "moe-tiny" and r["batch"] == batch]
        assert {r["mode"] for r in quality} == {"none", "truncation", "substitution"}
        assert next(r for r in quality if r["mode"] == "none")["greedy_agreement"] == 1.0
        for r in quality:
            assert 0.0 <= r["greedy_agreement"] <= 1.0 and finite(r["heldout_loss"])
            assert r["unique_per_layer"] <= r["budget"]


def test_budget_batched_verify_is_the_requests_verifies_side_by_side(bundled_model):
    """A group's one forward gives each window the logits of its own verify (the cache cropped back between
    forwards), and a budget over the group keeps B experts per layer over all its tokens."""
    import torch
    import transformers

    from bench import budget
    from bench._models import read_checkpoint
    from bench._routing import probed_routers

    ckpt = read_checkpoint(bundled_model)
    wins = budget.windows(ckpt, 1, 16)[:2]
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32).eval()
    with probed_routers(model) as probe:
        alone = [budget.CachedGroup(model, probe, ids, 16) for ids in budget.groups(wins, 1)]
        together = budget.CachedGroup(model, probe, budget.groups(wins, 2)[0], 16)
        expected = torch.cat([group.verify()[0] for group in alone])
        for _ in range(2):  # the second forward runs on the cropped cache
            got, _ = together.verify()
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        assert torch.equal(together.targets(), torch.cat([group.targets() for group in alone]))
        full = list(probe.unique)  # the last unbudgeted forward of the group
        probe.budget, probe.mode = ckpt.top_k, "truncation"
        together.verify()
        assert max(probe.unique) <= ckpt.top_k < max(full)  # the budget bound, over both windows' tokens
    with pytest.raises(ValueError, match="batch 3"):
        budget.groups(wins, 3)


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SGLANG, reason="SGLang is not installed (run scripts/setup.sh)")
def test_policies(bundled_model, results):
    from bench.policies import POLICY_NAMES

    data = run_quick("policies", bundled_model, results)
    assert {r["policy"] for r in data["rows"]} == set(POLICY_NAMES)
    assert {"none", "static-1", "static-4", "sglang-adaptive", "cascade", "adaspec", "moe-serve"} <= set(POLICY_NAMES)
    assert {r["drafter"] for r in data["rows"]} == {"standalone"}  # --quick: the last drafter, one engine start
    for r in data["rows"]:
        assert r["rounds"] == data["repeats"] == len(r["tpot_ms_rounds"]) == 2
        assert 0 < r["tpot_ms_min"] <= r["tpot_ms"] <= r["tpot_ms_max"] and r["tokens_per_s"] > 0
    assert {s["policy"] for s in data["summary"] if s["drafter"] == "all"} == set(POLICY_NAMES)
    assert [g["goal"] for g in data["goals"]][0].startswith("worst-case TPOT slowdown")
    assert all(isinstance(g["met"], bool) for g in data["goals"])
    assert len(data["spread"]) == len(data["cell_seconds"]) == 1
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
    assert {r["variant"] for r in data["k0_rows"]} == {"plain", "plain-sync", "ngram-k0", "standalone-k0"}
    assert all(r["verify_tokens"] == 0 for r in data["k0_rows"]), "K = 0 for everyone must run no verify"
    assert {(s["variant"], s["metric"]) for s in data["k0_summary"]} == {
        (v, m) for v in ("plain-sync", "ngram-k0", "standalone-k0") for m in ("tpot_ms", "itl_ms", "cpu_ms_per_token")
    }
    for s in data["layout_summary"]:
        # the same greedy steps on both layouts: ragged can only verify fewer tokens
        assert 0 < s["ragged_verify_tokens"] <= s["rectangular_verify_tokens"], s
    assert data["cpu"]["model"]


def test_spread_and_goals_are_computed_from_rounds():
    from bench._policy_report import goals, separated, spread_report

    def row(policy, prompts, values):
        return {
            "drafter": "ngram",
            "prompts": prompts,
            "batch": 1,
            "policy": policy,
            "tpot_ms": sorted(values)[1],
            "tpot_ms_min": min(values),
            "tpot_ms_max": max(values),
        }

    rows = []
    for prompts, none in (("code", (20, 21, 22)), ("prose", (20, 21, 22))):
        rows += [
            row("none", prompts, none),
            row("static-1", prompts, (18, 19, 20)),  # overlaps none (20): within the spread
            row("static-2", prompts, (15, 16, 17)),
            row("static-3", prompts, (30, 31, 32)),
            row("static-4", prompts, (30, 31, 32)),
            row("sglang-adaptive", prompts, (16, 17, 18)),
            row("cascade", prompts, (10, 11, 12)),
            row("adaspec", prompts, (20, 21, 22)),
            row("moe-serve", prompts, (13, 14, 15)),
        ]
    code = next(s for s in separated(rows) if s["prompts"] == "code")
    pairs = {(p["faster"], p["slower"]) for p in code["pairs"]}
    assert ("moe-serve", "none") in pairs and ("cascade", "moe-serve") in pairs
    assert ("static-1", "none") not in pairs and ("moe-serve", "static-2") not in pairs  # 15 = 15: touching ranges
    report = next(r for r in spread_report(separated(rows)) if r["prompts"] == "code")
    assert "cascade" in report["beats_moe-serve"] and "none" in report["moe-serve_beats"]
    got = {g["goal"].split(" (")[0]: g for g in goals(rows)}
    assert got["worst-case TPOT slowdown vs none"]["value"] == pytest.approx(14 / 21)
    assert got["mean TPOT gain vs best static K"]["value"] == pytest.approx(16 / 14 - 1)  # static-2: the best K
    assert (
        got["cells behind cascade beyond the spread"]["value"] == 2
        and not got["cells behind cascade beyond the spread"]["met"]
    )
    assert (
        got["best code speedup vs none"]["value"] == pytest.approx(21 / 14)
        and not got["best code speedup vs none"]["met"]
    )
    # a development run of a subset (--policies) has no goals: they compare against policies it left out
    assert goals([r for r in rows if r["policy"] in ("none", "static-2", "moe-serve")]) == []
    assert goals([r for r in rows if r["policy"] != "static-1"])  # any static K will do
    # against the plain engine scheduled as the speculative ones are (none-sync): the goals that depend on the
    # baseline, each named by it; none without such rows
    assert goals(rows, baseline="none-sync") == []
    sync = [{**r, "policy": "none-sync", "tpot_ms": 2 * r["tpot_ms"]} for r in rows if r["policy"] == "none"]
    got = {g["goal"]: g for g in goals(rows + sync, baseline="none-sync")}
    assert set(got) == {
        "worst-case TPOT slowdown vs none (none-sync)",
        "mean TPOT gain vs best static K (static-2) (none-sync)",
        "best code speedup vs none (none-sync)",
    }
    assert got["best code speedup vs none (none-sync)"]["value"] == pytest.approx(42 / 14)


def test_run_all_hands_the_setup_to_every_bench(monkeypatch, tmp_path):
    from bench import run_all

    seen = {}

    def fake_run(name, argv):
        seen[name] = argv
        return {"bench": name, "exit_code": 0, "seconds": 0.0, "error": None, "argv": argv}

    monkeypatch.setattr(run_all, "run_bench", fake_run)
    monkeypatch.setattr(run_all, "render", lambda *a, **k: "report\n")
    argv = ["--quick", "--out", str(tmp_path), "--model", "/m", "--inflate", "3", "--draft-model", "/d"]
    assert run_all.main(argv) == 0
    assert set(seen) == set(run_all.BENCHES)
    for name, got in seen.items():
        assert got[:3] == ["--out", str(tmp_path / name), "--quick"]
        assert "--model" in got and "/m" in got and got[got.index("--inflate") + 1] == "3"
        assert ("--draft-model" in got) == (name in ("policies", "replay"))
    assert run_all.dry_estimate(list(run_all.BENCHES), quick=False)["policies"] > 0


def test_deciding_setup_names_existing_checkpoints():
    setup = deciding_setup()
    assert (setup.model / "config.json").exists() and (setup.draft_model / "config.json").exists()
    assert setup.inflate >= 1 and set(setup.drafters) <= {"ngram", "standalone"}
    assert DEFAULT_DRAFT_MODEL.exists()


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
    for name in ("policies", "replay"):  # each section says when its JSON was measured (runs may differ)
        path = results / name / f"{name}.json"
        if path.exists():
            assert f"measured {json.loads(path.read_text())['machine']['at']}" in block
    readme = f"intro\n{README_START}\nold numbers\n{README_END}\noutro\n"
    updated = update_readme(readme, block)
    assert "old numbers" not in updated and block in updated
    assert updated.startswith("intro\n") and updated.endswith(f"{README_END}\noutro\n")
    with pytest.raises(ValueError, match="results block"):
        update_readme("no markers", block)


def test_run_all_runs_each_bench_in_its_own_process_and_reports_its_exit():
    from bench import run_all

    got = run_all.run_bench("verify_cost", ["--no-such-flag"])  # argparse refuses it in the child: exit 2
    assert got["exit_code"] == 2 and "bench.verify_cost exited with 2" in got["error"]
    assert got["argv"] == ["--no-such-flag"] and got["seconds"] > 0
    assert not run_all._CHILD


def test_run_all_stops_the_running_bench_on_sigterm():
    import subprocess
    import sys

    from bench import run_all

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    run_all._CHILD.append(child)
    try:
        with pytest.raises(SystemExit) as stopped:
            run_all._terminate()
        assert stopped.value.code == 143 and child.poll() is not None
    finally:
        run_all._CHILD.remove(child)
        child.kill()


def test_the_static_rows_get_their_k_on_the_drafter_engines():
    """A `static` request with `max_k` = K gets K drafts on bench.policies' drafter engines for every K up to MAX_K
    (the hint caps the static policy's own K, 3 by default: static-4 was static-3 before)."""
    from bench.policies import HINTED, MAX_K, drafter_settings
    from moe_sglang.hints import parse_hints
    from moe_sglang.policies import PolicySet
    from service.policy import RequestView

    shape = {"num_experts": 32, "top_k": 4, "num_layers": 8}
    views = [RequestView(f"r{i}", tokens_so_far=4, tokens_left=20) for i in range(1, MAX_K + 1)]
    statics = [v for v in HINTED if v.name.startswith("static-")]
    hints = [parse_hints({"moe_serve": v.hints}) for v in statics]
    got = PolicySet(shape, drafter_settings().policy_params).plan(0.0, views, hints, MAX_K).ks
    assert got == tuple(range(1, MAX_K + 1))
    assert PolicySet(shape).plan(0.0, views, hints, MAX_K).ks[-1] == 3  # the engine default the rows had
