"""Load on the served model: C concurrent clients on loopback, N requests of B admissions each.

    .venv/bin/python -m benchmarks.serve_load --model RUN_ID --features FEATURES/test.parquet
        [--clients 1 2 4 8] [--requests 40] [--batch 64] [--server workers=1] [--server workers=2,threads=1]
        [--port 5090] [--distinct 8] [--samples S] [--timeout 120] [--out PATH]

Each ``--server`` spec (``workers=W,threads=T``: ``cli.py serve`` options) starts ``cli.py serve``
on 127.0.0.1 in a child process, waits for /ping, runs the load and stops it, so the benchmark
stops by itself (every request has a client timeout; the server is stopped in ``finally``).
Requests are ``--distinct`` different bodies of ``--batch`` admissions of the features file
(dataframe_split JSON with the observed_hours column, default params), sent in turn.

Per server: every distinct body is first served alone (one client, nothing else running): its
answer is the reference. Then for each C in ``--clients``, C client threads (one keep-alive
connection each) send ``--requests`` requests in all, as fast as answers come back (a closed
loop). Reported per C: throughput (admissions answered per second), latency p50 / p99 (ms),
errors (non-200 or a broken connection), lost rows (answers without one row per admission),
whether every answer is byte-identical to its body's answer alone, and the CPU time the server's
processes spent per request (user + system, from /proc; the clients' own beside it). On a shared
machine the wall-clock figures depend on the other load; the CPU time per request much less: on P
dedicated cores, C >= P clients in a closed loop wait about C x (that CPU time) / P per request. The ratios are against
C = 1 of the same server, measured in the same process run. The clients share the machine's
cores with the server (on 2 cores they take part of the CPU), which the figures include.

Writes benchmarks/results/serve_load.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import report
from benchmarks.harness import ROOT

COLUMNS = ["key", "context", "bag_hours", "bags", "n_events", "observed_hours"]


def bodies(path: Path, batch: int, distinct: int, params: dict | None = None) -> list[bytes]:
    """``distinct`` JSON request bodies of ``batch`` admissions each (rows of ``path`` in turn), with
    ``params`` (none: the model's defaults)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=[c for c in COLUMNS if c in pq.read_schema(path).names]).to_pylist()
    if not table:
        raise SystemExit(f"{path}: no admissions")
    out = []
    for i in range(distinct):
        rows = [table[(i * batch + j) % len(table)] for j in range(batch)]
        data = [[r["key"], r["context"], [float(h) for h in r["bag_hours"]], r["bags"], int(r["n_events"]),
                 r.get("observed_hours")] for r in rows]
        out.append(json.dumps({"dataframe_split": {"columns": COLUMNS, "data": data},
                               **({"params": params} if params else {})}).encode())
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, spec: dict, port: int, log_path: Path, timeout: float) -> subprocess.Popen:
    cmd = [sys.executable, str(ROOT / "cli.py"), "serve", "--model", model, "--port", str(port)]
    for k, v in spec.items():
        cmd += [f"--{k.replace('_', '-')}"] + ([str(v)] if v != "" else [])  # a bare name is a flag
    proc = subprocess.Popen(cmd, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}); its log: {log_path}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/ping")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise SystemExit(f"the server did not answer /ping within {timeout:.0f} s; its log: {log_path}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every process in process group ``pgid`` (the server and its workers)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ..., utime (12), stime (13)
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/invocations", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def load(port: int, reqs: list[bytes], clients: int, n: int, timeout: float) -> list[dict]:
    """``n`` requests (bodies ``reqs`` in turn) from ``clients`` threads; one record per request."""
    nxt, lock, records = [0], threading.Lock(), []

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n:
                break
            t0 = time.perf_counter()
            try:
                status, answer = post(conn, reqs[i % len(reqs)])
            except (OSError, http.client.HTTPException) as exc:
                status, answer = -1, repr(exc).encode()
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            records.append({"body": i % len(reqs), "status": status, "ms": 1e3 * (time.perf_counter() - t0),
                            "answer": answer})
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    for r in records:
        r["wall"] = wall
    return records


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(records: list[dict], alone: list[bytes], batch: int) -> dict:
    ok = [r for r in records if r["status"] == 200]
    lost = 0
    for r in ok:
        rows = len(json.loads(r["answer"])["predictions"])
        lost += abs(batch - rows)
    wall = records[0]["wall"] if records else float("nan")
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "error_statuses": sorted({r["status"] for r in records if r["status"] != 200}),
        "lost_rows": lost,
        "identical": sum(r["answer"] == alone[r["body"]] for r in ok),
        "admissions_per_s": len(ok) * batch / wall,
        "p50_ms": percentile([r["ms"] for r in records], 50),
        "p99_ms": percentile([r["ms"] for r in records], 99),
        "wall_s": wall,
    }


def parse_spec(text: str) -> dict:
    spec = {}
    for part in filter(None, text.split(",")):
        k, _, v = part.partition("=")  # "via-mlflow": a flag (empty value)
        spec[k.strip()] = v.strip()
    return spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="run id, runs:/<id>/model or model directory")
    ap.add_argument("--features", type=Path, required=True, help="features Parquet file the requests come from")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--requests", type=int, default=40, help="requests per client count")
    ap.add_argument("--batch", type=int, default=64, help="admissions per request")
    ap.add_argument("--distinct", type=int, default=8, help="distinct request bodies")
    ap.add_argument("--samples", type=int, default=None, help="the requests' samples param (default: the model's)")
    ap.add_argument("--server", action="append", default=None,
                    help="cli.py serve options, e.g. workers=2,threads=1 or threads=1,via-mlflow (a flag)")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per request and for the server start")
    ap.add_argument("--out", type=Path, default=report.results_path("serve_load"))
    args = ap.parse_args()

    started = report.provenance()  # the commit the run starts at
    reqs = bodies(args.features, args.batch, args.distinct, {"samples": args.samples} if args.samples else None)
    print(f"{len(reqs)} distinct requests of {args.batch} admissions ({sum(map(len, reqs)) / len(reqs) / 1e3:.0f} kB "
          f"each); {args.requests} requests per client count; {os.cpu_count()} CPUs", flush=True)
    results = []
    for text in args.server or ["workers=1"]:
        spec = parse_spec(text)
        port = args.port or free_port()
        log_path = Path(tempfile.gettempdir()) / f"serve_load-{os.getpid()}-{len(results)}.log"  # the server's log
        proc = start_server(args.model, spec, port, log_path, args.timeout)
        try:
            alone = []
            for body in reqs:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=args.timeout)
                status, answer = post(conn, body)
                conn.close()
                if status != 200:
                    raise SystemExit(f"a request alone answered {status}: {answer[:300]!r}")
                alone.append(answer)
            rows = []
            for c in args.clients:
                cpu0, own0 = cpu_seconds(proc.pid), time.process_time()
                s = summary(load(port, reqs, c, args.requests, args.timeout), alone, args.batch)
                s["server_cpu_ms_per_request"] = 1e3 * (cpu_seconds(proc.pid) - cpu0) / s["requests"]
                s["client_cpu_ms_per_request"] = 1e3 * (time.process_time() - own0) / s["requests"]
                rows.append({"clients": c, **s})
                base = rows[0]
                print(f"server {text:24s} clients {c:2d}: {s['admissions_per_s']:6.0f} admissions/s "
                      f"({s['admissions_per_s'] / base['admissions_per_s']:.2f}x of {base['clients']} client), "
                      f"p50 {s['p50_ms']:6.0f} ms, p99 {s['p99_ms']:6.0f} ms, errors {s['errors']}, lost rows "
                      f"{s['lost_rows']}, identical to alone {s['identical']}/{s['requests']}; server CPU "
                      f"{s['server_cpu_ms_per_request']:.0f} ms per request (clients "
                      f"{s['client_cpu_ms_per_request']:.0f})",
                      flush=True)
        finally:
            stop_server(proc)
        results.append({"server": spec, "rows": rows})
    result = {"command": report.command(__spec__.name), "model": str(args.model),
              "features": args.features.name, "batch": args.batch, "samples": args.samples, "requests": args.requests,
              "distinct": args.distinct, "cpus": os.cpu_count(), "load_average": os.getloadavg(), "servers": results}
    report.write_results(args.out.stem, {**started, **result}, path=args.out)  # docs/scoring.md's figures:<stem>


def _server_label(server: dict) -> str:
    """'workers 1, threads 1, via MLflow' / 'direct' (the serve defaults: one worker, one thread, direct)."""
    workers, threads = server.get("workers", "1"), server.get("threads", "1")
    path = "via MLflow" if "via-mlflow" in server else "direct"
    default = workers == "1" and threads == "1" and path == "direct"
    return f"workers {workers}, threads {threads}, {path}{' (default)' if default else ''}"


def render(r: dict) -> str:
    """docs/scoring.md's figures:serve_load* sections: one row per server configuration and number of clients."""
    samples = r.get("samples")
    samples = "the model's score_samples" if samples is None else samples
    head = (f"{r['batch']}-admission requests ({r['distinct']} distinct bodies) from `{r['features']}`, "
            f"{r['requests']} requests per row, samples per component "
            f"{samples}; {r['cpus']} CPUs, "
            f"shared; load average {r['load_average'][0]:.1f} at the start, {r['load_average'][-1]:.1f} at the end.")
    rows = []
    for server in r["servers"]:
        for i, row in enumerate(server["rows"]):
            rows.append([_server_label(server["server"]) if i == 0 else "", str(row["clients"]),
                         f"{row['admissions_per_s']:,.0f}", f"{row['p50_ms']:,.0f}", f"{row['p99_ms']:,.0f}",
                         str(row["errors"]), str(row["lost_rows"]), f"{row['identical']}/{row['requests']}",
                         f"{row['server_cpu_ms_per_request']:,.0f}"])
    return head + "\n\n" + report.table(["server", "clients", "admissions/s", "p50 ms", "p99 ms", "errors", "lost rows",
                                   "identical to alone", "server CPU ms per request"], rows)


if __name__ == "__main__":
    main()
