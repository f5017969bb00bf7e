#!/usr/bin/env python3
"""Python binding against the C API on the same cluster, in the same run.

    PYTHONPATH=build/python python3 impl/python/bench/bench.py [--build build] [--reps 3]
        [--sizes 65536 262144 1048576]

Starts a 2-machine cluster of `rkv server` processes (one server each) on
loopback TCP and two clients on machine 0: build/impl/python/rkv_pybench_c
(C, rkv.h) and this process (rkv.Client). They take turns between barriers
(who goes first alternates),
each running the same loops on machine 1's rows: pushes (assign) and pulls
of 1 MiB batches, and 200 one-row pushes and pulls (p50). The Python side
pulls into a reused buffer (out=) as the C side does, and also into a new
tensor per call (pull() without out). Prints each figure, the medians over
--reps rounds, and Python/C ratios (throughput: higher is better; latency:
lower is better). It measures; it asserts nothing.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from launch import free_ports, write_cluster  # noqa: E402

import rkv  # noqa: E402

ROWS, LAT_N = 64, 200


def batch_of(vb):
    return max(1, min(ROWS // 2, (1 << 20) // vb))


class Draw:  # the C side's generator, so both touch the same rows
    def __init__(self):
        self.seed = 1

    def __call__(self, n):
        ids = np.empty(n, dtype=np.uint64)
        for i in range(n):
            self.seed = (self.seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            ids[i] = ROWS // 2 + (self.seed >> 33) % (ROWS // 2)
        return ids


def run(c, name, vb, figures):
    batch = batch_of(vb)
    ops = max(16, (128 << 20) // (batch * vb))
    buf = np.zeros((batch, vb // 4), dtype=np.float32)
    draw = Draw()
    # Ids drawn before the timed loop: drawing them in Python costs more than
    # in C and is not the binding's cost.
    passes = {"push": lambda ids: c.push(name, ids, buf, op="assign"),
              "pull": lambda ids: c.pull(name, ids, out=buf),
              "pullnew": lambda ids: c.pull(name, ids)}
    for kind, fn in passes.items():
        idss = [draw(batch) for _ in range(ops)]
        for timed in (0, 1):
            t0 = time.perf_counter()
            for ids in idss:
                fn(ids)
            if timed:
                figures.setdefault("%s.%d" % (kind, vb), []).append(
                    ops * batch * vb / (time.perf_counter() - t0) / 1e9)
    one = buf[:1]
    lat = {"push1": lambda ids: c.push(name, ids, one, op="assign"),
           "pull1": lambda ids: c.pull(name, ids, out=one),
           "pull1new": lambda ids: c.pull(name, ids)}
    for kind, fn in lat.items():
        idss = [draw(1) for _ in range(LAT_N)]
        ts = []
        for ids in idss:
            t0 = time.perf_counter()
            fn(ids)
            ts.append((time.perf_counter() - t0) * 1e6)
        figures.setdefault("%s.p50.%d" % (kind, vb), []).append(statistics.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "..", "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[65536, 262144, 1048576])
    a = ap.parse_args()
    rkv_bin = os.path.join(a.build, "rkv")
    c_bench = os.path.join(a.build, "impl", "python", "rkv_pybench_c")
    tmp = tempfile.mkdtemp(prefix="rkv-pybench-")
    path = write_cluster(os.path.join(tmp, "ip_config.txt"), free_ports(2), 2, 1)
    env = dict(os.environ, RKV_CLUSTER=path, RKV_NUM_WORKERS="2", RKV_LOG_LEVEL="0")
    servers = [subprocess.Popen([rkv_bin, "server", "--server-id", str(i)], env=env)
               for i in range(2)]
    sizes = [s for _ in range(a.reps) for s in a.sizes]
    cb = subprocess.Popen([c_bench, "0"] + [str(s) for s in sizes], env=env,
                          stdout=subprocess.PIPE, text=True)
    py, cfig = {}, {}
    try:
        c = rkv.Client(rkv.Config(cluster=path, num_workers=2, machine_id=0))
        for k, vb in enumerate(sizes):
            name = "bench%d" % vb
            c.init_data(name, (ROWS, vb // 4), "float32")
            for turn in (0, 1):  # C first for even k, then the other way round
                c.barrier()
                if turn != k % 2:
                    run(c, name, vb, py)
            c.barrier()
        c.shut_down()
        c.close()
        out, _ = cb.communicate(timeout=60)
    finally:
        for p in servers + [cb]:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        os.unlink(path)
        os.rmdir(tmp)
    for line in out.splitlines():
        if line.startswith("figure "):
            _, k, v, _unit = line.split()
            cfig.setdefault(k[2:], []).append(float(v))
    med = {k: statistics.median(v) for k, v in py.items()}
    cmed = {k: statistics.median(v) for k, v in cfig.items()}
    for k in sorted(med):
        print("figure py.%s %.3f %s" % (k, med[k], "us" if ".p50." in k else "GB/s"))
    for k in sorted(cmed):
        print("figure c.%s %.3f %s" % (k, cmed[k], "us" if ".p50." in k else "GB/s"))
    print("\n| size | push py/C | pull(out=) py/C | pull() py/C | 1-row push p50 py/C "
          "| 1-row pull(out=) p50 py/C | 1-row pull() p50 py/C |")
    print("|---|---|---|---|---|---|---|")
    for vb in a.sizes:
        def r(pk, ck):
            return "%.2f" % (med["%s.%d" % (pk, vb)] / cmed["%s.%d" % (ck, vb)])
        print("| %d KiB | %s | %s | %s | %s | %s | %s |" % (
            vb // 1024, r("push", "push"), r("pull", "pull"), r("pullnew", "pull"),
            r("push1.p50", "push1.p50"), r("pull1.p50", "pull1.p50"),
            r("pull1new.p50", "pull1.p50")))
    print("(figures: medians of %d rounds; C: %s)" % (a.reps, c_bench))
    return 0 if cb.returncode == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
