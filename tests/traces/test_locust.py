"""The locust driver: its trace shape against a schedule, and a short headless run against the scripted TEST DOUBLE.

locust monkey-patches the process with gevent on import, so everything that imports it runs in a subprocess.
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loadtest.trace_shape import PoolSize, TraceClock
from service.traces.mooncake import load_mooncake
from service.traces.schedule import window

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_locust = pytest.mark.skipif(
    importlib.util.find_spec("locust") is None, reason="locust not installed (extra: loadtest)"
)


@pytest.fixture(scope="module")
def scripted_url():
    server = subprocess.Popen(
        [sys.executable, "-m", "loadtest.scripted_server", "--port", "0", "--ttft-ms", "5", "--itl-ms", "1"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_pool_size_hand_computed():
    # Arrivals at 0, 0, 1, 5, 5, 5.2 with requests assumed to take 2 s: at most 3 in any (t-2, t] span up to t=1,
    # then 3 (5, 5, 5.2) later; a 1 s lookahead sees arrivals before they happen.
    pool = PoolSize([0.0, 0.0, 1.0, 5.0, 5.0, 5.2], e2e_guess_s=2.0, lookahead_s=1.0)
    assert [pool.users_needed(t) for t in (-2.0, 0.0, 2.0, 3.5, 4.0, 10.0)] == [1, 3, 3, 3, 3, 3]
    pool = PoolSize([0.0, 3.0, 3.1, 3.2, 3.3], e2e_guess_s=1.0, lookahead_s=0.0)
    assert [pool.users_needed(t) for t in (0.0, 3.0, 3.15, 3.3)] == [1, 1, 2, 4]


def test_clock_hands_out_due_times_in_order():
    fake_now = iter([100.0]).__next__
    clock = TraceClock([0.0, 0.5, 2.0], lead_s=0.1, now=fake_now)
    assert [clock.take(), clock.take(), clock.take(), clock.take()] == [(0, 100.1), (1, 100.6), (2, 102.1), None]


@needs_locust
def test_locustfile_shape_follows_the_schedule(traces_dir):
    s = window(load_mooncake(traces_dir / "mooncake_conversation_trace.jsonl"), 0, 30)
    arrivals = [r.arrival_s for r in s.requests]
    expected = [PoolSize(arrivals, 5.0).users_needed(t) for t in (0.0, 10.0, 29.0)]
    script = textwrap.dedent(
        f"""
        import loadtest.locustfile as lf
        from loadtest.trace_shape import PoolSize, TraceClock
        lf.RUN = lf.TraceRun(requests=[type("R", (), {{"arrival_s": a}})() for a in {arrivals!r}],
                             prompts=None, model="m", e2e_guess_s=5.0)
        shape = lf.TraceShape()
        ticks = []
        for t in (0.0, 10.0, 29.0, 29.0 + shape.drain_s + 1):
            shape.get_run_time = lambda t=t: t
            ticks.append(shape.tick())
        print(ticks)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr([(n, 100) for n in expected] + [None])


def _locust(url: str, tokenizer: Path, tmp_path: Path, *trace_args: str) -> dict[str, dict]:
    """A headless locust run against the scripted double; its stats rows by name."""
    run = subprocess.run(
        [
            *(sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"), "--headless"),
            *("-t", "20s", "--host", url, *trace_args),
            *("--tokenizer", str(tokenizer), "--model", "m", "--e2e-guess-s", "2"),
            *("--csv", str(tmp_path / "run"), "--only-summary"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return {row["Name"]: row for row in csv.DictReader((tmp_path / "run_stats.csv").open())}


@needs_locust
def test_headless_locust_run(traces_dir, tiny_tokenizer_file, scripted_url, tmp_path):
    trace = traces_dir / "mooncake_conversation_trace.jsonl"
    args = ("--trace", str(trace), "--trace-window", "0:7", "--time-scale", "4")
    stats = _locust(scripted_url, tiny_tokenizer_file, tmp_path, *args)
    n = len(window(load_mooncake(trace), 0, 7))
    for name in ("TTFT", "TPOT", "lateness", "completions"):
        assert int(stats[name]["Request Count"]) == n, name
        assert int(stats[name]["Failure Count"]) == 0
    assert float(stats["TTFT"]["Min Response Time"]) >= 5.0  # the double waits 5 ms before its first token


@needs_locust
def test_headless_locust_run_on_an_arrival_only_trace(tiny_tokenizer_file, scripted_url, tmp_path):
    trace = tmp_path / "arrivals.csv"
    trace.write_text("Timestamp\n0\n0.5\n1.0\n")  # SYNTHETIC arrival times
    args = ("--trace", str(trace), "--input-tokens", "40", "--output-tokens", "3")
    stats = _locust(scripted_url, tiny_tokenizer_file, tmp_path, *args)
    assert int(stats["completions"]["Request Count"]) == 3 and int(stats["completions"]["Failure Count"]) == 0
