"""A table of hostile requests: each must get the right 4xx with an OpenAI-shaped error, quickly,
and the server must stay healthy and keep generating afterwards."""
import http.client
import json
import socket
import time

import pytest

from conftest import MODEL

C = "/v1/completions"
CHAT = "/v1/chat/completions"
OK = {"model": MODEL, "prompt": "Once", "max_tokens": 2}
MSG = [{"role": "user", "content": "hi"}]


def body(**kw):
    b = dict(OK)
    b.update(kw)
    return json.dumps(b).encode()


def raw(**kw):
    return json.dumps(kw).encode()


# (name, method, path, body bytes, status, error code or None)
CASES = [
    ("malformed json", "POST", C, b'{"model": "stories260k", "prompt": ', 400, "invalid_json"),
    ("empty body", "POST", C, b"", 400, "invalid_json"),
    ("not an object", "POST", C, b'[1, 2, 3]', 400, "invalid_json"),
    ("duplicate keys", "POST", C, b'{"model":"stories260k","model":"x","prompt":"a"}', 400,
     "invalid_json"),
    ("NUL in a string", "POST", C, b'{"model":"stories260k","prompt":"a\\u0000b"}', 400,
     "invalid_json"),
    ("invalid utf-8", "POST", C, b'{"model":"stories260k","prompt":"\xff\xfe\xfd"}', 400,
     "invalid_json"),
    ("deep nesting", "POST", C, b"[" * 100000 + b"]" * 100000, 400, "invalid_json"),
    ("prompt wrong type", "POST", C, body(prompt=5), 400, "invalid_type"),
    ("prompt object", "POST", C, body(prompt={"a": 1}), 400, "invalid_type"),
    ("prompt empty array", "POST", C, body(prompt=[]), 400, "invalid_value"),
    ("prompt mixed array", "POST", C, body(prompt=["a", 3]), 400, "invalid_type"),
    ("token out of vocab", "POST", C, body(prompt=[1, 512]), 400, "invalid_value"),
    ("negative token", "POST", C, body(prompt=[-1]), 400, "invalid_value"),
    ("too many prompts", "POST", C, body(prompt=["a"] * 65), 400, "invalid_value"),
    ("prompt too long", "POST", C, body(prompt=[1] * 600), 400, "context_length_exceeded"),
    ("max_tokens string", "POST", C, body(max_tokens="10"), 400, "invalid_type"),
    ("max_tokens real", "POST", C, body(max_tokens=1e30), 400, "invalid_type"),
    ("max_tokens huge int", "POST", C, body(max_tokens=2**62), 400, "invalid_value"),
    ("integer overflow", "POST", C, b'{"model":"stories260k","prompt":"a","max_tokens":'
     b'99999999999999999999999999}', 400, "invalid_json"),
    ("max_tokens negative", "POST", C, body(max_tokens=-5), 400, "invalid_value"),
    ("max_tokens zero", "POST", C, body(max_tokens=0), 400, "invalid_value"),
    ("max_tokens over context", "POST", C, body(max_tokens=512), 400, "context_length_exceeded"),
    ("temperature string", "POST", C, body(temperature="hot"), 400, "invalid_type"),
    ("temperature negative", "POST", C, body(temperature=-1), 400, "invalid_value"),
    ("temperature huge", "POST", C, body(temperature=1e308), 400, "invalid_value"),
    ("top_p zero", "POST", C, body(top_p=0), 400, "invalid_value"),
    ("top_p negative", "POST", C, body(top_p=-0.5), 400, "invalid_value"),
    ("top_k huge", "POST", C, body(top_k=10**9), 400, "invalid_value"),
    ("min_p above one", "POST", C, body(min_p=2), 400, "invalid_value"),
    ("presence_penalty", "POST", C, body(presence_penalty=3), 400, "invalid_value"),
    ("repetition_penalty zero", "POST", C, body(repetition_penalty=0), 400, "invalid_value"),
    ("seed negative", "POST", C, body(seed=-1), 400, "invalid_value"),
    ("seed real", "POST", C, body(seed=1.5), 400, "invalid_type"),
    ("n zero", "POST", C, body(n=0), 400, "invalid_value"),
    ("n huge", "POST", C, body(n=10000), 400, "invalid_value"),
    ("n real", "POST", C, body(n=1.5), 400, "invalid_type"),
    ("prompts x n", "POST", C, body(prompt=["a"] * 8, n=9), 400, "invalid_value"),
    ("best_of differs", "POST", C, body(best_of=3), 400, "unsupported_parameter"),
    ("logprobs too many", "POST", C, body(logprobs=21), 400, "invalid_value"),
    ("echo with logprobs", "POST", C, body(echo=True, logprobs=1), 400, "unsupported_parameter"),
    ("stream string", "POST", C, body(stream="yes"), 400, "invalid_type"),
    ("stream_options without stream", "POST", C, body(stream_options={"include_usage": True}),
     400, "invalid_value"),
    ("stream_options unknown", "POST", C, body(stream=True, stream_options={"x": 1}), 400,
     "unknown_parameter"),
    ("stop too many", "POST", C, body(stop=["a"] * 17), 400, "invalid_value"),
    ("stop too long", "POST", C, body(stop=["a" * 257]), 400, "invalid_value"),
    ("stop empty", "POST", C, body(stop=[""]), 400, "invalid_value"),
    ("stop wrong type", "POST", C, body(stop=[1]), 400, "invalid_type"),
    ("stop ids out of vocab", "POST", C, body(stop_token_ids=[99999]), 400, "invalid_value"),
    ("logit_bias too many", "POST", C, body(logit_bias={str(i % 512) + " " * (i // 512): 1
                                                         for i in range(1025)}), 400,
     "invalid_value"),
    ("logit_bias value", "POST", C, body(logit_bias={"5": 1000}), 400, "invalid_value"),
    ("logit_bias key", "POST", C, body(logit_bias={"dog": 1}), 400, "invalid_value"),
    ("logit_bias key out of vocab", "POST", C, body(logit_bias={"100000": 1}), 400,
     "invalid_value"),
    ("logit_bias array", "POST", C, body(logit_bias=[1, 2]), 400, "invalid_type"),
    ("user too long", "POST", C, body(user="u" * 1000), 400, "invalid_value"),
    ("unknown field", "POST", C, body(frobnicate=1), 400, "unknown_parameter"),
    ("suffix unsupported", "POST", C, body(suffix="x"), 400, "unsupported_parameter"),
    ("unknown model", "POST", C, body(model="gpt-4"), 404, "model_not_found"),
    ("missing model", "POST", C, raw(prompt="a"), 400, "missing_required_parameter"),
    ("missing prompt", "POST", C, raw(model=MODEL), 400, "missing_required_parameter"),
    ("chat missing messages", "POST", CHAT, raw(model=MODEL), 400, "missing_required_parameter"),
    ("chat empty messages", "POST", CHAT, raw(model=MODEL, messages=[]), 400, "invalid_value"),
    ("chat bad role", "POST", CHAT, raw(model=MODEL, messages=[{"role": "wizard",
                                                                 "content": "x"}]), 400,
     "invalid_value"),
    ("chat content number", "POST", CHAT, raw(model=MODEL, messages=[{"role": "user",
                                                                      "content": 5}]), 400,
     "invalid_type"),
    ("chat image part", "POST", CHAT, raw(model=MODEL, messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]),
     400, "unsupported_parameter"),
    ("chat tools", "POST", CHAT, raw(model=MODEL, messages=MSG, tools=[{"type": "function"}]),
     400, "unsupported_parameter"),
    ("chat response_format", "POST", CHAT, raw(model=MODEL, messages=MSG,
                                                response_format={"type": "json_object"}), 400,
     "unsupported_parameter"),
    ("chat top_logprobs without logprobs", "POST", CHAT, raw(model=MODEL, messages=MSG,
                                                              top_logprobs=2), 400,
     "invalid_value"),
    ("chat echo", "POST", CHAT, raw(model=MODEL, messages=MSG, echo=True), 400,
     "unsupported_parameter"),
    ("chat template override", "POST", CHAT, raw(model=MODEL, messages=MSG,
                                                  chat_template="{% include '/etc/passwd' %}"),
     400, "unsupported_parameter"),
    ("score both inputs", "POST", "/v1/score", raw(prompt="a", tokens=[1]), 400, "invalid_value"),
    ("score bad tokens", "POST", "/v1/score", raw(tokens=["a"]), 400, "invalid_type"),
    ("score long", "POST", "/v1/score", raw(tokens=[1] * 600), 400, "context_length_exceeded"),
    ("tokenize no input", "POST", "/tokenize", raw(), 400, "missing_required_parameter"),
    ("detokenize bad id", "POST", "/detokenize", raw(tokens=[1, 99999]), 400, "invalid_value"),
    ("detokenize string", "POST", "/detokenize", raw(tokens="abc"), 400, "invalid_type"),
    ("unknown path", "GET", "/v1/secret", b"", 404, "not_found"),
    ("path traversal", "GET", "/../../etc/passwd", b"", 404, "not_found"),
    ("wrong method", "GET", C, b"", 405, "method_not_allowed"),
    ("wrong method models", "POST", "/v1/models", b"{}", 405, "method_not_allowed"),
]


def request(server, method, path, data, headers=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request(method, path, body=data if method == "POST" else None, headers=h)
    r = conn.getresponse()
    out = r.status, r.read(), dict(r.getheaders())
    conn.close()
    return out


@pytest.mark.parametrize("name,method,path,data,status,code", CASES, ids=[c[0] for c in CASES])
def test_hostile_request(server, name, method, path, data, status, code):
    t0 = time.monotonic()
    got, payload, _ = request(server, method, path, data)
    elapsed = time.monotonic() - t0
    assert got == status, payload
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] == code, err
    # Refusals are decided before any generation: far below a generation's latency. The issue
    # asks for 100 ms; the bound here leaves room for a loaded CI machine.
    assert elapsed < 0.5, f"{name} took {elapsed:.3f} s"


def test_ten_megabyte_bodies(server):
    big = b'{"model":"stories260k","prompt":"' + b"a" * (10 << 20) + b'"}'
    # With Content-Length: refused from the headers alone; the server need not read the body,
    # so the client may see its upload cut short. The answer is still a 413.
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(big)).encode() + b"\r\n\r\n")
    try:
        s.sendall(big)
    except OSError:
        pass
    s.settimeout(10)
    reply = b""
    try:
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    except OSError:
        pass
    s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_too_large"
    # Chunked, without Content-Length: read up to the limit, then refused.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

    def chunks():
        for i in range(0, len(big), 1 << 16):
            yield big[i:i + (1 << 16)]
    conn.request("POST", C, body=chunks(), headers={"Content-Type": "application/json"},
                 encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 413
    assert json.loads(r.read())["error"]["code"] == "request_too_large"
    conn.close()


def test_garbage_and_half_requests_do_not_hurt(server):
    # Not HTTP at all.
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"\x00\x01\x02 hello there\r\n\r\n")
    s.settimeout(5)
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()
    # Headers, a promised body, then the client goes away.
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"mo")
    s.close()
    # A huge header.
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    s.settimeout(5)
    try:
        data = s.recv(4096)
        assert data.startswith(b"HTTP/1.1 4") or data == b""
    except OSError:
        pass
    s.close()


def test_still_healthy_and_generating(server):
    status, payload, _ = request(server, "GET", "/health", b"")
    assert status == 200 and json.loads(payload)["status"] == "ok"
    status, payload, _ = request(server, "POST", C, body(max_tokens=5, temperature=0))
    assert status == 200
    out = json.loads(payload)
    assert out["usage"]["completion_tokens"] >= 1
