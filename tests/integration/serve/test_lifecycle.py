"""Start-up, flags, auth, client disconnects and the SIGTERM drain of weft serve."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import MODEL, Server

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def decode(raw_body, ctype):
    return json.loads(raw_body or b"null") if "json" in (ctype or "") else raw_body.decode()


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, decode(r.read(), r.headers.get("Content-Type"))
    except urllib.error.HTTPError as e:
        return e.code, decode(e.read(), e.headers.get("Content-Type"))


def test_help_shows_defaults():
    out = subprocess.run([os.environ["WEFT_BIN"], "serve", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for needle in ("127.0.0.1", "8000", "WEFT_API_KEY", "--shutdown-timeout", "WEFT_MAX_MODEL_LEN",
                   "weft candidate freeze"):
        assert needle in out


def test_refuses_a_manifest_and_names_the_remedy():
    manifest = os.path.join(ROOT, "manifests", "baseline-cpu.yaml")
    p = subprocess.run([os.environ["WEFT_BIN"], "serve", manifest], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode != 0
    assert "not a lock" in p.stderr and "weft candidate freeze" in p.stderr


def test_refuses_a_lock_whose_model_changed(tmp_path):
    src = os.path.dirname(os.environ["WEFT_SERVE_MODEL_DIR"])  # .../cache/models
    cache = tmp_path / "cache"
    shutil.copytree(src, cache / "models")
    env = dict(os.environ, WEFT_CACHE=str(cache))
    lock = tmp_path / "c.lock"
    subprocess.run([os.environ["WEFT_BIN"], "candidate", "freeze",
                    os.path.join(ROOT, "manifests", "baseline-cpu.yaml"), "-o", str(lock)],
                   check=True, env=env, capture_output=True)
    cfg = cache / "models" / "stories260k" / "generation_config.json"
    cfg.write_text(cfg.read_text().replace("}", ', "temperature": 0.5}'))
    p = subprocess.run([os.environ["WEFT_BIN"], "serve", str(lock), "--port", "0"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0
    assert "generation_config.json" in p.stderr, p.stderr


def test_flags_from_environment_and_command_line_wins():
    s = Server(os.environ["WEFT_SERVE_LOCK"], "--served-model-name", "cli-name",
               env={"WEFT_SERVED_MODEL_NAME": "env-name", "WEFT_MAX_MODEL_LEN": "256",
                    "WEFT_API_KEY": "env-key"})
    try:
        s.wait_ready()
        status, models = get(s.url + "/v1/models", {"Authorization": "Bearer env-key"})
        assert status == 200
        assert models["data"][0]["id"] == "cli-name"
        assert models["data"][0]["max_model_len"] == 256
    finally:
        assert s.stop() == 0


def test_api_key_on_everything_but_health():
    s = Server(os.environ["WEFT_SERVE_LOCK"], "--api-key", "sekrit")
    try:
        s.wait_ready()
        assert get(s.url + "/health")[0] == 200
        for path in ("/v1/models", "/metrics"):
            status, body = get(s.url + path)
            assert status == 401 and body["error"]["code"] == "invalid_api_key"
            assert get(s.url + path, {"Authorization": "Bearer wrong"})[0] == 401
            assert get(s.url + path, {"Authorization": "Bearer sekrit"})[0] == 200
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model=MODEL, prompt="x", max_tokens=1)
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
        assert good.completions.create(model=MODEL, prompt="x", max_tokens=1).usage
    finally:
        assert s.stop() == 0


def stream_request(port, max_tokens, extra=None):
    """Opens a streaming completion and returns the socket after the first event arrived."""
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0}
    body.update(extra or {})
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    buf = b""
    while b"data: " not in buf:
        chunk = s.recv(4096)
        assert chunk, buf
        buf += chunk
    return s


def wait_metric(server, name, labels, pred, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = server.metric(name, labels)
        if pred(v):
            return v
        time.sleep(0.01)
    raise AssertionError(f"{name}{labels or ''} = {server.metric(name, labels)}")


def test_disconnect_cancels_and_frees_the_slot(server):
    aborted = server.metric("weft_request_success_total", 'finished_reason="abort"')
    gone = server.metric("weft_requests_cancelled_disconnect_total")
    gen0 = server.metric("weft_generation_tokens_total")
    s = stream_request(server.port, 480)
    s.close()
    wait_metric(server, "weft_request_success_total", 'finished_reason="abort"',
                lambda v: v == aborted + 1)
    assert server.metric("weft_requests_cancelled_disconnect_total") == gone + 1
    assert server.metric("weft_num_requests_running") == 0
    assert server.metric("weft_num_requests_waiting") == 0
    assert server.metric("weft_kv_cache_used_tokens") == 0
    # Cancelled long before its 480 tokens.
    assert server.metric("weft_generation_tokens_total") - gen0 < 480

    # A non-streaming request whose client leaves is cancelled too.
    data = json.dumps({"model": MODEL, "prompt": "Once", "max_tokens": 480, "ignore_eos": True,
                       "temperature": 0}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    wait_metric(server, "weft_num_requests_running", None, lambda v: v == 1)
    s.close()
    wait_metric(server, "weft_request_success_total", 'finished_reason="abort"',
                lambda v: v == aborted + 2)
    wait_metric(server, "weft_kv_cache_used_tokens", None, lambda v: v == 0)
    # The server goes on serving.
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    assert c.completions.create(model=MODEL, prompt="Hi", max_tokens=3).usage.completion_tokens


def read_stream(sock):
    buf = b""
    sock.settimeout(60)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        if b"data: [DONE]" in buf and buf.endswith(b"0\r\n\r\n"):
            break
    return buf


def events(raw_bytes):
    text = raw_bytes.decode("utf-8", "replace")
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def test_sigterm_drains_in_flight_requests():
    s = Server(os.environ["WEFT_SERVE_LOCK"], "--shutdown-timeout", "60")
    s.wait_ready()
    socks = [stream_request(s.port, 400) for _ in range(3)]  # one runs, two wait (serial)
    s.proc.send_signal(signal.SIGTERM)
    # New connections are refused (or answered 503) while the old ones finish.
    time.sleep(0.05)
    try:
        status, body = get(s.url + "/health")
        assert status == 503
    except (urllib.error.URLError, ConnectionError):
        pass
    outs = [read_stream(x) for x in socks]
    for o in outs:
        ev = events(o)
        assert ev[-1] == "[DONE]"
        finishes = [json.loads(e)["choices"][0]["finish_reason"] for e in ev[:-1]]
        assert finishes[-1] == "length"
    assert s.proc.wait(timeout=60) == 0, s.text()
    assert "draining" in s.text()


def test_sigterm_timeout_cancels_then_exits_zero():
    s = Server(os.environ["WEFT_SERVE_LOCK"], "--shutdown-timeout", "0")
    s.wait_ready()
    socks = [stream_request(s.port, 480) for _ in range(3)]
    s.proc.send_signal(signal.SIGTERM)
    outs = [read_stream(x) for x in socks]
    assert s.proc.wait(timeout=30) == 0, s.text()
    reasons = []
    for o in outs:
        ev = events(o)
        assert ev and ev[-1] == "[DONE]"
        reasons.append([json.loads(e)["choices"][0]["finish_reason"] for e in ev[:-1]][-1])
    assert "abort" in reasons
