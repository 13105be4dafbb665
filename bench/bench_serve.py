#!/usr/bin/env python3
"""bench_serve.py - server throughput: N concurrent streams against colossal-serve and llama-server on the
same model file, total generated tokens per second (issue 19).

    bench/bench_serve.py MODEL.gguf [--streams 1,4,16] [--tokens 32] [--runs 3]
        [--serve apps/colossal-serve] [--llama-server /path/to/llama-server] [--threads 2]

Each server is started with --parallel equal to the stream count (llama-server: -np N, -c N*CTX, -t THREADS;
colossal-serve: --parallel N --ctx CTX), warmed up with one request, then N clients each send one
/v1/completions request at the same moment (greedy, max_tokens TOKENS, a different prompt each; random
weights rarely end early) and the wall time from the first send to the last reply gives the total tokens
per second (usage.completion_tokens summed). Median of RUNS. Python's standard library only: the
servers speak OpenAI's API, so nothing else is needed. Prints one line per (server, streams) and the
ratio colossal / llama.cpp.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CTX = 256
PROMPTS = ["In the beginning", "And God said", "The quick brown fox", "Once upon a time", "It was the best of",
           "Call me", "All happy families", "Far out in the", "It is a truth", "Happy families are",
           "Whether I shall", "The sky above", "Mother died today", "Someone must have", "In my younger",
           "It was a bright"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, timeout=3600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(port, proc, limit=600):
    t0 = time.time()
    while time.time() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not become ready")


def one_run(port, n, tokens):
    results, errors = [None] * n, []
    start = threading.Barrier(n + 1)

    def client(i):
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": tokens, "temperature": 0}
        start.wait()
        try:
            results[i] = post(port, body)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError(errors[0])
    generated = sum(r["usage"]["completion_tokens"] for r in results)
    return generated / wall, generated


def bench(name, cmd, port, streams, tokens, runs):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_ready(port, proc)
        post(port, {"prompt": "warm up", "max_tokens": 4, "temperature": 0})
        rates = []
        for _ in range(runs):
            rate, gen = one_run(port, streams, tokens)
            rates.append(rate)
        med = statistics.median(rates)
        print(f"{name:14s} streams {streams:2d}: {med:7.2f} tok/s total (runs: "
              f"{', '.join(f'{r:.2f}' for r in rates)}; {gen} tokens a run)", flush=True)
        return med
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--serve", default="apps/colossal-serve")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER", ""))
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    for n in [int(x) for x in a.streams.split(",")]:
        port = free_port()
        ours = bench("colossal-serve", [a.serve, a.model, "--port", str(port), "--parallel", str(n), "--ctx", str(CTX),
                                        "--queue", str(2 * n)], port, n, a.tokens, a.runs)
        if a.llama_server:
            port = free_port()
            theirs = bench("llama-server", [a.llama_server, "-m", a.model, "--port", str(port), "-np", str(n), "-c",
                                            str(CTX * n), "-t", str(a.threads), "-tb", str(a.threads)],
                           port, n, a.tokens, a.runs)
            print(f"{'':14s} streams {n:2d}: colossal / llama.cpp = {ours / theirs:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
