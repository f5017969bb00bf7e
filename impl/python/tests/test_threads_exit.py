"""What a PyTorch/DGL user hit from trainer threads and at the interpreter's
exit (each failed before its fix): the first pulls of several threads of a
program that had not imported torch yet, a Python pull handler that calls
its client, a program that exits with its servers still running in daemon
threads. Each runs in a fresh interpreter (torch not imported, an exit of
its own), its servers in threads of it."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# A cluster of machines x servers servers in daemon threads of the script,
# its shared memory under prefix.
PRELUDE = """
import os, sys, threading
sys.path.insert(0, %r)
import rkv
from launch import free_ports, write_cluster

def cluster(tmp, machines, servers, workers, prefix, setup=None):
    path = write_cluster(os.path.join(tmp, "ip.txt"), free_ports(machines * servers),
                         machines, servers)
    cfg = rkv.Config(cluster=path, num_workers=workers, timeout_ms=10000,
                     connect_retry_ms=10000, shm_prefix=prefix)
    srvs = [rkv.Server(cfg, server_id=i) for i in range(machines * servers)]
    for s in srvs:
        if setup is not None:
            setup(s)
        s.thread = threading.Thread(target=s.run, daemon=True)
        s.thread.start()
    return cfg, srvs

def stop(c, srvs):
    c.shut_down()
    c.close()
    for s in srvs:
        s.thread.join(30)
        s.close()
""" % os.path.join(HERE, "..", "examples")


def _run(tmp_path, body, prefix, timeout=90):
    """body after PRELUDE in a fresh python; (returncode, stdout, stderr).
    A run past timeout is killed and fails the test (a hang); the shared
    memory it left under prefix is removed."""
    p = subprocess.Popen([sys.executable, "-c", PRELUDE + body, str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        for f in _left(prefix):
            os.unlink(os.path.join("/dev/shm", f))
        raise AssertionError("hung (killed after %d s); stdout %r stderr %r"
                             % (timeout, out[-2000:], err[-2000:]))
    return p.returncode, out.decode(), err.decode()


def _left(prefix):
    return [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]


def test_first_pulls_of_threads_while_torch_is_imported(tmp_path):
    # rkv imports torch at the first pull that returns a tensor. sys.modules
    # holds it half made while one thread imports it: the other threads'
    # pulls took that module and raised AttributeError ("partially
    # initialized module 'torch' has no attribute 'from_numpy'"), not even
    # an rkv.Error, and their rows were lost.
    prefix = "rkv-pytest-torch-%d" % os.getpid()
    rc, out, err = _run(tmp_path, """
cfg, srvs = cluster(sys.argv[1], 2, 1, 1, %r)
c = rkv.Client(cfg)
c.init_data("e", (100, 4), "float32")
c.push("e", list(range(100)), [[i] * 4 for i in range(100)], op="assign")
assert "torch" not in sys.modules
go = threading.Barrier(8)
got = [None] * 8

def pull(i):
    go.wait()
    try:
        r = c.pull("e", [i, 99 - i])
        got[i] = "%%s %%s" %% (type(r).__module__, r[:, 0].tolist())
    except BaseException as e:
        got[i] = repr(e)

ts = [threading.Thread(target=pull, args=(i,)) for i in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
for g in got:
    print(g)
stop(c, srvs)
""" % prefix, prefix)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines == ["torch [%d.0, %d.0]" % (i, 99 - i) for i in range(8)], out
    assert not _left(prefix)


def test_a_pull_handler_that_calls_its_client_is_refused(tmp_path):
    # A Python pull handler runs while its client's pull waits for its rows:
    # the client runs it itself for its machine's rows, in the pulling
    # thread, which held the binding's lock, and a client call there waited
    # for that lock for good (Ctrl-C was swallowed by the handler); a server
    # of this process runs it for the other machine's, and a call there
    # waited for the pull (timeout_ms). rkv.h: a call made from a handler the
    # client runs is refused with -RKV_EINVAL.
    prefix = "rkv-pytest-reenter-%d" % os.getpid()
    rc, out, err = _run(tmp_path, """
seen = []
box = {}

def h(row, state, out, param):
    try:
        box["c"].list()
        seen.append("called")
    except rkv.Error as e:
        seen.append("%%s %%s" %% (e.name, "pull handler" in e.message))
    return row * 2

def setup(s):
    s.register_pull_handler(rkv.PULL_CUSTOM, h)

cfg, srvs = cluster(sys.argv[1], 2, 1, 1, %r, setup)
c = box["c"] = rkv.Client(cfg, output="numpy")
c.register_pull_handler(rkv.PULL_CUSTOM, h)
c.init_data("e", (10,), "float32")
c.push("e", list(range(10)), [float(i) for i in range(10)], op="assign")
print(c.pull("e", [1, 9], handler=rkv.PULL_CUSTOM).tolist())  # machine 0's row, machine 1's
print(sorted(seen))
print([d.name for d in c.list()])  # the client is fine afterwards
stop(c, srvs)
""" % prefix, prefix)
    assert rc == 0, err
    assert out.splitlines() == ["[2.0, 18.0]", "['RKV_EINVAL True', 'RKV_EINVAL True']",
                                "['e']"], out
    assert not _left(prefix)


def test_exit_with_servers_running_removes_their_shared_memory(tmp_path):
    # Servers run by daemon threads (a test, a notebook, a trainer that
    # raised before shut_down()) were killed at the interpreter's exit, and
    # each machine's shared memory, a shard's worth, stayed in /dev/shm.
    prefix = "rkv-pytest-exit-%d" % os.getpid()
    for ending in ("pass", "raise RuntimeError('the training loop failed')"):
        rc, out, err = _run(tmp_path, """
cfg, srvs = cluster(sys.argv[1], 2, 2, 1, %r)
c = rkv.Client(cfg)
c.init_data("e", (100000, 8), "float32")
for _ in range(4):
    c.push("e", list(range(0, 100000, 7)), [[1.0] * 8] * len(range(0, 100000, 7)), async_=True)
print("made", len([f for f in os.listdir("/dev/shm") if f.startswith(%r)]) > 0, flush=True)
%s
""" % (prefix, prefix, ending), prefix)
        left = _left(prefix)
        for f in left:  # RAM until reboot otherwise
            os.unlink(os.path.join("/dev/shm", f))
        assert out == "made True\n", (out, err)
        assert rc == (0 if ending == "pass" else 1), err
        assert not left, (ending, left)


def test_ctrl_c_in_a_pull_handler_interrupts_the_pull(tmp_path):
    # A client runs Python pull handlers for its machine's rows in the
    # pulling thread, the main one here, where Ctrl-C is raised: inside the
    # handler (or as it starts, before its try, where Python runs the signal
    # handlers due). It was swallowed as a handler error, or printed as
    # "Exception ignored from cffi callback", and the pull went on and
    # returned, with a NaN row (or one of np.empty's bytes) among its data.
    prefix = "rkv-pytest-sigint-%d" % os.getpid()
    rc, out, err = _run(tmp_path, """
import signal
import numpy as np
calls = [0]

def h(row, state, out, param):
    calls[0] += 1
    if calls[0] == 2000:
        os.kill(os.getpid(), signal.SIGINT)
    return row * 2

def setup(s):
    s.register_pull_handler(rkv.PULL_CUSTOM, h)

cfg, srvs = cluster(sys.argv[1], 1, 1, 1, %r, setup)
c = rkv.Client(cfg, output="numpy")
c.register_pull_handler(rkv.PULL_CUSTOM, h)
n = 300000
c.init_data("e", (n,), "float32")
c.push("e", np.arange(n), np.ones(n, np.float32), op="assign")
for how in ("in the handler", "from another thread"):
    calls[0] = 0 if how == "in the handler" else -10**9
    if how == "from another thread":
        # Mostly raised as a handler starts: the signal came while this
        # thread was in C, between two rows.
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        r = c.pull("e", np.arange(n), handler=rkv.PULL_CUSTOM)
        print("returned", int(np.isnan(r).sum()), int((r == 2).sum()))
    except KeyboardInterrupt:
        print("KeyboardInterrupt", 0 < calls[0] + (how != "in the handler") * 10**9 < n)
    r = c.pull("e", np.arange(0, n, 97), handler=rkv.PULL_CUSTOM)  # the client is fine
    print(bool((r == 2).all()), c.pull_handler_errors(rkv.PULL_CUSTOM))
stop(c, srvs)
""" % prefix, prefix)
    assert rc == 0, err
    assert out.splitlines() == ["KeyboardInterrupt True", "True 0"] * 2, (out, err)
    assert "Exception ignored" not in err, err
    assert not _left(prefix)
