"""bench.decode_peer.settle: a turn starts once the engines' processes are quiet, not while one still spins."""

import subprocess
import sys
import time

import psutil


def test_settle_waits_while_a_process_spins_and_not_once_it_is_idle():
    from bench.decode_peer import settle

    spin = "import time\nend = time.time() + 0.8\nwhile time.time() < end:\n    pass\ntime.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.1)
        waited = settle([psutil.Process(proc.pid)], window_s=0.1)
        assert 0.5 <= waited < 5.0  # it spun for 0.8 s from its start, then sleeps
        assert settle([psutil.Process(proc.pid)], window_s=0.1) < 0.5  # asleep: one window
    finally:
        proc.kill()
        proc.wait()


def test_settle_gives_up_after_max_s():
    from bench.decode_peer import settle

    proc = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
    try:
        time.sleep(0.1)
        assert 0.6 <= settle([psutil.Process(proc.pid)], window_s=0.1, max_s=0.6) < 1.5
    finally:
        proc.kill()
        proc.wait()
