#!/usr/bin/env python3
"""Matrix factorisation with sparse embeddings in rkv, on 2 machines x (2 servers
+ 2 trainers) on this host.

    python3 mf.py                 # launches the whole cluster, exits 0 if the loss fell

The launcher writes a cluster file in the C tools' format ("host base_port
servers" per machine, as `rkv server --cluster` reads it) and starts every
process with the same environment variables the rkv binary reads
(RKV_CLUSTER, RKV_NUM_WORKERS, RKV_SERVER_ID, RKV_MACHINE_ID; RKV_ROLE says
which part of this file a process runs). Each trainer pulls the user and
item rows of a minibatch, computes the squared error with torch autograd and
pushes the gradients with op="sgd": the servers apply row -= lr * grad.
The mean squared error over all ratings, before and after, is summed in the
store itself ("loss" tensor) and checked by trainer 0: it must fall below a
third of where it started, or the example exits 1.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MACHINES, SERVERS_PER_MACHINE, TRAINERS_PER_MACHINE = 2, 2, 2
USERS, ITEMS, DIM, RANK = 2000, 1000, 16, 4
RATINGS, BATCH, EPOCHS, LR = 40000, 256, 8, 0.05


def ratings(seed=1):
    """Observed (user, item, rating) triples of a random rank-RANK matrix."""
    rng = np.random.default_rng(seed)
    u_true = rng.normal(0, 1, (USERS, RANK)) / RANK ** 0.25
    v_true = rng.normal(0, 1, (ITEMS, RANK)) / RANK ** 0.25
    users = rng.integers(0, USERS, RATINGS)
    items = rng.integers(0, ITEMS, RATINGS)
    r = np.einsum("ij,ij->i", u_true[users], v_true[items])
    return users, items, r.astype(np.float32)


def squared_error(c, users, items, r):
    import torch
    sse = 0.0
    for s in range(0, len(r), 4096):
        pred = (c.pull("user", users[s:s + 4096]) * c.pull("item", items[s:s + 4096])).sum(1)
        sse += float(((pred - torch.from_numpy(r[s:s + 4096])) ** 2).sum())
    return sse


def trainer():
    import torch

    import rkv
    c = rkv.Client(rkv.Config())  # everything from the environment
    rank = c.client_id
    workers = c.num_workers
    users, items, r = ratings()
    mine = np.arange(rank, RATINGS, workers)  # this trainer's share of the ratings
    users, items, r = users[mine], items[mine], r[mine]
    if rank == 0:
        small = np.random.default_rng(2)

        def init(shape, dtype):
            return small.normal(0, 0.1, shape).astype(dtype)
        c.init_data("user", (USERS, DIM), "float32", init=init)
        c.init_data("item", (ITEMS, DIM), "float32", init=init)
        c.init_data("loss", (2, 2), "float64")  # (sum of squared errors, count) before, after
    c.barrier()
    c.push("loss", [0], np.array([[squared_error(c, users, items, r), len(r)]]), op="sum")
    rng = np.random.default_rng(100 + rank)
    for epoch in range(EPOCHS):
        order = rng.permutation(len(r))
        for s in range(0, len(r), BATCH):
            b = order[s:s + BATCH]
            u = c.pull("user", users[b]).requires_grad_()
            v = c.pull("item", items[b]).requires_grad_()
            loss = 0.5 * (((u * v).sum(1) - torch.from_numpy(r[b])) ** 2).sum()
            loss.backward()
            hu = c.push("user", users[b], u.grad, op="sgd", lr=LR, async_=True)
            c.push("item", items[b], v.grad, op="sgd", lr=LR)
            hu.wait()
        c.barrier()
    c.push("loss", [1], np.array([[squared_error(c, users, items, r), len(r)]]), op="sum")
    c.barrier()
    ok = True
    if rank == 0:
        (before, n0), (after, n1) = c.pull("loss", [0, 1]).tolist()
        before, after = before / n0, after / n1
        ok = n0 == n1 == RATINGS and after < before / 3
        print("mf: %d trainers, %d epochs: mean squared error %.4f -> %.4f (%s)"
              % (workers, EPOCHS, before, after, "ok" if ok else "did NOT fall enough"))
        c.shut_down()
    c.close()
    return 0 if ok else 1


def server():
    import rkv
    rkv.Server(rkv.Config()).run()  # RKV_SERVER_ID picks which one
    return 0


def launch():
    sys.path.insert(0, HERE)
    from launch import free_ports, write_cluster
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="rkv-mf-")
    path = write_cluster(os.path.join(tmp, "ip_config.txt"),
                         free_ports(MACHINES * SERVERS_PER_MACHINE), MACHINES,
                         SERVERS_PER_MACHINE)
    env = dict(os.environ, RKV_CLUSTER=path,
               RKV_NUM_WORKERS=str(MACHINES * TRAINERS_PER_MACHINE))
    procs = []
    for sid in range(MACHINES * SERVERS_PER_MACHINE):
        procs.append(subprocess.Popen([sys.executable, __file__],
                                      env=dict(env, RKV_ROLE="server", RKV_SERVER_ID=str(sid))))
    for m in range(MACHINES):
        for _ in range(TRAINERS_PER_MACHINE):
            procs.append(subprocess.Popen([sys.executable, __file__],
                                          env=dict(env, RKV_ROLE="worker",
                                                   RKV_MACHINE_ID=str(m))))
    rc = 0
    deadline = time.time() + 120
    for p in procs:
        try:
            rc = max(rc, p.wait(max(1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            print("mf: a process did not finish in time", file=sys.stderr)
            rc = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    os.unlink(path)
    os.rmdir(tmp)
    print("mf: %s in %.1f s" % ("passed" if rc == 0 else "FAILED", time.time() - t0))
    return rc


if __name__ == "__main__":
    role = os.environ.get("RKV_ROLE", "")
    sys.exit(server() if role == "server" else trainer() if role == "worker" else launch())
