#!/usr/bin/env python3
"""A real local HTTP server for tests/unit/test_pull.c (the real hub is not reachable in tests).

usage: pull_http_server.py ROOT PORT_FILE LOG_FILE

Binds 127.0.0.1 on a free port, writes the port to PORT_FILE, logs one line per request to
LOG_FILE ("GET <path> range=<Range header or -> status=<code>", written before the answer is
sent) and serves ROOT:
  /<path>                      static files with byte ranges ("bytes=N-" and "bytes=N-M"),
                               the layout of a URL mirror
  /norange/<path>              the same files, ignoring Range (a server without range support)
  /private/<path>              401, like a gated repository
  /flaky/<N>/<path>            503 without Retry-After for the first N requests of <path>, then
                               the file (a busy server)
  /ratelimit/<N>/<path>        429 with "Retry-After: 0" for the first N requests, then the file
  /drop/<path>                 the first request of <path> gets a 200 whose body stops halfway
                               and the connection closed; later ones get the file, with ranges
  /api/models/<org>/<name>/revision/<rev>
                               the hub's model-info answer for ROOT/<org>/<name>: "sha" and
                               "siblings" with rfilename, size, blobId (git blob id) and, for
                               *.safetensors and *.bin, lfs {sha256, size}
  /<org>/<name>/resolve/<rev>/<file>
                               like the hub: *.safetensors and *.bin answer 302 with
                               X-Linked-Etag: "<sha256>" and X-Linked-Size, redirecting to
                               /cdn/<org>/<name>/<file>; other files are served directly
Stops on SIGTERM.
"""
import hashlib
import http.server
import json
import os
import re
import signal
import sys
import threading

ROOT, PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2], sys.argv[3]
LFS = (".safetensors", ".bin")
SEEN = {}  # requests so far per (mode, N, path) or ("drop", path)
SEEN_LOCK = threading.Lock()


def seen(key):
    with SEEN_LOCK:
        SEEN[key] = SEEN.get(key, 0) + 1
        return SEEN[key]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def git_blob_id(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def log(self, status):
        with open(LOG_FILE, "a") as f:
            f.write("GET %s range=%s status=%d\n" % (self.path, self.headers.get("Range", "-"),
                                                     status))

    def reply(self, status, body=b"", headers=()):
        # logged before the answer goes out, so a client that has its answer finds the line
        self.log(status)
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def serve_file(self, path, ranges=True):
        if not os.path.isfile(path):
            return self.reply(404, b"Entry not found")
        size = os.path.getsize(path)
        data = open(path, "rb").read()
        rng = self.headers.get("Range") if ranges else None
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if m:
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else size - 1
            if start >= size:
                return self.reply(416, b"", [("Content-Range", "bytes */%d" % size)])
            end = min(end, size - 1)
            return self.reply(206, data[start:end + 1],
                              [("Content-Range", "bytes %d-%d/%d" % (start, end, size))])
        return self.reply(200, data)

    def do_GET(self):
        path = self.path.split("?")[0]
        parts = [p for p in path.split("/") if p]
        if any(p in ("..", ".") for p in parts):
            return self.reply(400, b"bad path")
        if parts[:1] == ["private"]:
            return self.reply(401, b"Invalid credentials in Authorization header")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            repo = os.path.join(ROOT, parts[2], parts[3])
            if not os.path.isdir(repo):
                return self.reply(404, json.dumps({"error": "Repository not found"}).encode())
            siblings = []
            for dirpath, _, files in os.walk(repo):
                for fn in sorted(files):
                    full = os.path.join(dirpath, fn)
                    rel = os.path.relpath(full, repo)
                    s = {"rfilename": rel, "size": os.path.getsize(full),
                         "blobId": git_blob_id(full)}
                    if fn.endswith(LFS):
                        s["lfs"] = {"sha256": sha256_of(full), "size": os.path.getsize(full),
                                    "pointerSize": 134}
                    siblings.append(s)
            body = {"id": parts[2] + "/" + parts[3], "sha": hashlib.sha1(parts[5].encode())
                    .hexdigest(), "siblings": siblings}
            return self.reply(200, json.dumps(body).encode(),
                              [("Content-Type", "application/json")])
        if len(parts) >= 5 and parts[2] == "resolve":
            rel = "/".join(parts[4:])
            full = os.path.join(ROOT, parts[0], parts[1], rel)
            if not os.path.isfile(full):
                return self.reply(404, b"Entry not found")
            if rel.endswith(LFS):
                return self.reply(302, b"", [
                    ("Location", "/cdn/%s/%s/%s" % (parts[0], parts[1], rel)),
                    ("X-Linked-Etag", '"%s"' % sha256_of(full)),
                    ("X-Linked-Size", str(os.path.getsize(full)))])
            return self.serve_file(full)
        if parts[:1] == ["cdn"]:
            return self.serve_file(os.path.join(ROOT, *parts[1:]))
        if parts[:1] == ["norange"]:
            return self.serve_file(os.path.join(ROOT, *parts[1:]), ranges=False)
        if parts[:1] in (["flaky"], ["ratelimit"]) and len(parts) > 2 and parts[1].isdigit():
            if seen((parts[0], parts[1], "/".join(parts[2:]))) <= int(parts[1]):
                if parts[0] == "flaky":
                    return self.reply(503, b"Service temporarily unavailable")
                return self.reply(429, b"Too many requests", [("Retry-After", "0")])
            return self.serve_file(os.path.join(ROOT, *parts[2:]))
        if parts[:1] == ["drop"]:
            full = os.path.join(ROOT, *parts[1:])
            if os.path.isfile(full) and seen(("drop", "/".join(parts[1:]))) == 1:
                data = open(full, "rb").read()
                self.log(200)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            return self.serve_file(full)
        return self.serve_file(os.path.join(ROOT, *parts))


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tmp = PORT_FILE + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
