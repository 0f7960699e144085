"""Fixtures for the weft serve tests: a running server per lock on a free loopback port.

The environment comes from tests/integration/serve_setup.sh (WEFT_BIN, WEFT_SERVE_LOCK,
WEFT_SERVE_CHAT_LOCK, WEFT_SERVE_MODEL_DIR, WEFT_REFERENCE_DIR).
"""
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

MODEL = "stories260k"


class Server:
    """One `weft serve` process; port 0 lets the kernel pick, the log line tells which."""

    def __init__(self, lock, *args, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix="weft-serve-", suffix=".log", delete=False)
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(
            [os.environ["WEFT_BIN"], "serve", lock, "--port", "0", *args],
            stdout=subprocess.DEVNULL, stderr=self.log, env=e)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError("weft serve exited early:\n" + self.text())
            else:
                time.sleep(0.02)
        assert self.port, "weft serve did not report a port:\n" + self.text()
        self.url = f"http://127.0.0.1:{self.port}"

    def text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("weft serve exited:\n" + self.text())
            time.sleep(0.02)
        raise TimeoutError("weft serve not ready:\n" + self.text())

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def metric(self, name, labels=None):
        """The value of one sample of /metrics (labels: a substring the sample must contain)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            body = r.read().decode()
        for line in body.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key.split("{")[0] == name and (labels is None or labels in key):
                return float(value)
        raise KeyError(name)


@pytest.fixture(scope="session")
def server():
    s = Server(os.environ["WEFT_SERVE_CHAT_LOCK"])
    s.wait_ready()
    yield s
    assert s.stop() == 0, s.text()


@pytest.fixture(scope="session")
def plain_server():
    """The model without a chat template."""
    s = Server(os.environ["WEFT_SERVE_LOCK"])
    s.wait_ready()
    yield s
    assert s.stop() == 0, s.text()


@pytest.fixture()
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)
