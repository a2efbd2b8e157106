"""Starting an engine process: a free port picked for it but taken before the server binds it is picked again."""

import socket
import sys

import pytest

from moe_sglang import server
from moe_sglang.launch import EngineConfig

FAKE_SERVER = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"attention_backend": "intel_amx"}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
try:
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
except OSError as err:
    print(f"ERROR: error while attempting to bind: {err}", flush=True)
    sys.exit(1)
"""


def test_a_taken_port_is_picked_again(monkeypatch, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound, not listening: a bind fails, a connect is refused at once
    ports = iter([taken.getsockname()[1], server.free_port()])
    monkeypatch.setattr(server, "free_port", lambda: next(ports))
    monkeypatch.setattr(
        server, "server_command", lambda config: ([sys.executable, "-c", FAKE_SERVER, str(config.port)], None)
    )
    config = EngineConfig(model_path="/m", device="cpu", port=0)
    with server.running_engine(config, log_path=tmp_path / "engine.log", timeout=30) as url:
        assert not url.endswith(f":{taken.getsockname()[1]}")
    taken.close()


def test_an_explicit_port_is_never_changed(monkeypatch, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound, not listening: a bind fails, a connect is refused at once
    monkeypatch.setattr(
        server, "server_command", lambda config: ([sys.executable, "-c", FAKE_SERVER, str(config.port)], None)
    )
    config = EngineConfig(model_path="/m", device="cpu", port=taken.getsockname()[1])
    with (
        pytest.raises(server.EngineStartError, match="already in use"),
        server.running_engine(config, log_path=tmp_path / "engine.log", timeout=30),
    ):
        pass
    taken.close()
