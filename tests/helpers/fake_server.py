#!/usr/bin/env python3
"""A tiny stand-in for llama-server, for process-lifecycle tests only.

Behaviour from FAKE_MODE: ``crash`` (exit 3 at once), ``ignore-term`` (serve, ignore SIGTERM),
``slow-health`` (answer /health 503 forever), ``wedge`` (/health ok, /slots never answers),
``ok`` (serve /health and /slots), ``segv-start`` (killed by SIGSEGV while "loading"), ``segv-answer``
(/health ok, killed by SIGSEGV once asked to answer: what an AMX build does on an AMX CPU),
``segv-after-first`` (serves on its first start, counted in FAKE_COUNTER; every later start dies by SIGSEGV).
``--version`` prints a llama-server-like version line.
"""

import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if "--version" in sys.argv:
    print("version: 0.0.0-fake (build 1, commit abcdef0)")
    sys.exit(0)

mode = os.environ.get("FAKE_MODE", "ok")
port = int(sys.argv[sys.argv.index("--port") + 1])
print(f"fake llama-server mode={mode} port={port}", flush=True)

if mode == "segv-after-first":
    counter = os.environ["FAKE_COUNTER"]
    with open(counter, "a") as handle:
        handle.write("start\n")
    with open(counter) as handle:
        mode = "ok" if len(handle.readlines()) == 1 else "segv-start"
if mode == "segv-start":
    print("load_tensors: loading model (fake)", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "crash":
    print("error: failed to load model (fake crash)", flush=True)
    sys.exit(3)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            code = 503 if mode == "slow-health" else 200
        elif self.path == "/slots":
            if mode == "wedge":
                time.sleep(3600)
            code = 200
        else:
            code = 404
        body = b'{"status": "ok"}' if code == 200 else b'{"error": {"message": "loading"}}'
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


    def do_POST(self):
        if mode == "segv-answer":
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(60)  # the signal lands asynchronously: this thread must not answer 404 meanwhile
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
