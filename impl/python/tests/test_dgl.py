"""The rest of DGL's KVStore in the binding, on real loopback TCP clusters (2
machines x 2 servers; the client is on machine 0, so machine 1's rows go
over TCP and machine 0's through shared memory): the tensor list and the
observer client, a user-given global-to-local map, and pull handlers (the
built-in with_state, C ones by address, Python ones on in-process servers)."""
import ctypes
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import rkv

# ---- the tensor list ----

def test_list_names_and_metas(cluster):
    c = cluster.client(output="numpy")
    assert c.list() == []
    assert c.data_name_list() == []
    c.init_data("emb", (10, 4), "float32", with_state=True)
    c.init_data("ids", (7,), "int64", part_policy="hash")
    c.init_data("b", (3, 2, 2), "float64", part_policy=[1, 0, 1])
    assert c.data_name_list() == ["emb", "ids", "b"]
    assert c.get_data_name_list() == ["emb", "ids", "b"]
    assert c.list() == [
        rkv.TensorMeta("emb", np.dtype("float32"), (10, 4), "range", True),
        rkv.TensorMeta("ids", np.dtype("int64"), (7,), "hash", False),
        rkv.TensorMeta("b", np.dtype("float64"), (3, 4), "explicit", False),
    ]
    # A refused init_data leaves nothing behind.
    with pytest.raises(rkv.Error) as e:
        c.init_data("emb", (11, 4), "float32")
    assert e.value.code == -rkv.EEXIST
    assert len(c.list()) == 3


def test_list_many(cluster):
    """More tensors than a first guess holds: the list grows to the total."""
    c = cluster.client(output="numpy")
    names = ["t%02d" % i for i in range(40)]
    for i, n in enumerate(names):
        c.init_data(n, (i + 1, 2), "int32")
    assert c.data_name_list() == names
    assert [m.shape for m in c.list()] == [(i + 1, 2) for i in range(40)]


def test_observer_joins_later(cluster):
    """A process joining a running job sees what exists without being a worker:
    with num_workers=1 taken, a second ordinary client could not join."""
    w = cluster.client(output="numpy")
    w.init_data("emb", (20, 3), "float32", init="uniform", seed=5)
    obs = rkv.Client(cluster.config, observer=True, output="numpy")
    try:
        assert obs.observer and obs.client_id is None
        assert w.client_id == 0
        assert obs.data_name_list() == ["emb"]
        assert obs.get_data_meta("emb") == (np.dtype("float32"), (20, 3), "range")
        for call in (lambda: obs.pull("emb", [1]), lambda: obs.push("emb", [1], [[1, 2, 3]]),
                     obs.barrier):
            with pytest.raises(rkv.Error) as e:
                call()
            assert e.value.code == -rkv.EINVAL
            assert "observer" in e.value.message
        # The worker is unaffected, and the observer sees what it adds.
        assert w.pull("emb", [0, 19]).shape == (2, 3)
        w.init_data("late", (2,), "int32")
        assert obs.data_name_list() == ["emb", "late"]
    finally:
        obs.close()


OBSERVER = r"""
import sys, rkv
cfg = rkv.Config(cluster=sys.argv[1], timeout_ms=10000)
obs = rkv.Client(cfg, observer=True, output="numpy")
for m in obs.list():
    print(m.name, m.dtype, m.shape, m.part_policy, m.with_state)
"""


def test_observer_process(cluster):
    """Another process, joining once the job runs, lists its tensors."""
    w = cluster.client(output="numpy")
    w.init_data("emb", (20, 3), "float32")
    w.init_data("ids", (5,), "int64", part_policy=[1, 1, 0, 0, 1], local_index=[0, 1, 0, 1, 2],
                with_state=True)
    here = os.path.dirname(rkv.__file__)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(here))
    out = subprocess.run([sys.executable, "-c", OBSERVER, cluster.path], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["emb float32 (20, 3) range False",
                                       "ids int64 (5,) explicit True"]


def test_list_torch_dtypes(cluster):
    t = pytest.importorskip("torch")
    c = cluster.client(output="torch")
    c.init_data("x", (4, 2), "float64")
    assert c.list()[0].dtype == t.float64
    assert c.get_data_meta("x")[0] == t.float64


# ---- a user-given global-to-local map (DGL's set_global2local) ----

BOOK = [0, 1, 0, 1, 0, 1, 0, 1, 1]  # machine 0: rows 0 2 4 6; machine 1: 1 3 5 7 8
LOCAL = [3, 4, 0, 1, 2, 0, 1, 3, 2]


@pytest.mark.parametrize("kind", ["list", "numpy", "torch"])
def test_local_index_round_trip(cluster, kind):
    if kind == "torch":
        t = pytest.importorskip("torch")
        book, local = t.tensor(BOOK, dtype=t.int64), t.tensor(LOCAL, dtype=t.int64)
    elif kind == "numpy":
        book, local = np.array(BOOK, dtype=np.int32), np.array(LOCAL, dtype=np.uint64)
    else:
        book, local = BOOK, LOCAL
    c = cluster.client(output="numpy")
    c.init_data("rel", (9, 2), "float32", part_policy=book, local_index=local)
    c.init_data("rel", (9, 2), "float32", part_policy=book, local_index=local)  # idempotent
    ids = np.arange(8, -1, -1)
    rows = np.stack([100.0 + ids, -1.0 * ids], axis=1).astype(np.float32)
    c.push("rel", ids, rows, op="assign")
    np.testing.assert_array_equal(c.pull("rel", ids), rows)
    np.testing.assert_array_equal(c.pull("rel", [4, 5]), [[104, -4], [105, -5]])
    # The map reached the store: the same book with another map, or none, is
    # another tensor.
    other = [0, 0, 1, 1, 2, 2, 3, 3, 4]
    for li in (other, None):
        with pytest.raises(rkv.Error) as e:
            c.init_data("rel", (9, 2), "float32", part_policy=book, local_index=li)
        assert e.value.code == -rkv.EEXIST


def test_local_index_refused(cluster):
    c = cluster.client(output="numpy")

    def refused(msg, local, policy=BOOK, code=-rkv.EINVAL):
        with pytest.raises(rkv.Error) as e:
            c.init_data("bad", (9,), "int64", part_policy=policy, local_index=local)
        assert e.value.code == code
        assert msg in e.value.message, e.value.message

    # The store's checks, naming the first bad row.
    refused("row 6 has index 1 on machine 0, as row 2", [0, 0, 1, 1, 2, 2, 1, 3, 4])
    refused("row 8 has index 5 but machine 1 holds 5", [0, 0, 1, 1, 2, 2, 3, 3, 5])
    refused("needs the EXPLICIT policy", LOCAL, policy="range")
    # The binding's: what a cast would wrap or truncate.
    refused("local_index: row 2 has -1", [3, 4, -1, 1, 2, 0, 1, 3, 2])
    refused("local_index: 3 entries for 9 rows", [0, 1, 2])
    refused("local_index: expected integers, got float64", np.array(LOCAL, dtype=np.float64))
    refused("part_policy (the book): row 1 has -1", LOCAL, policy=[0, -1] + BOOK[2:])
    refused("part_policy (the book): row 0 has 4294967296", LOCAL,
            policy=np.array([1 << 32] + BOOK[1:], dtype=np.int64))
    assert c.data_name_list() == []


# ---- pull handlers ----

def test_pull_with_state(cluster):
    c = cluster.client(output="numpy")
    c.init_data("opt", (100, 4), "float32", with_state=True)
    c.init_data("plain", (100, 4), "float32")
    ids = np.array([90, 10, 90])  # machine 1 (remote), machine 0 (local), again
    g = np.array([[2, 2, 2, 2], [1, 2, 3, 4]], dtype=np.float32)
    c.push("opt", ids[:2], g, op="adagrad", lr=0.5)
    assert c.pull_len("opt", "with_state") == 8
    ws = c.pull("opt", ids, handler="with_state")
    assert ws.shape == (3, 8) and ws.dtype == np.float32
    rows = c.pull("opt", ids)
    np.testing.assert_array_equal(ws[:, :4], rows)
    np.testing.assert_allclose(ws[:, 4:], g[[0, 1, 0]] ** 2, rtol=1e-6)  # adagrad's state
    assert rows[1, 0] != 0  # the push did something
    # by id, and into out
    out = np.zeros((3, 8), dtype=np.float32)
    assert c.pull("opt", ids, out=out, handler=rkv.PULL_WITH_STATE) is out
    np.testing.assert_array_equal(out, ws)
    np.testing.assert_array_equal(c.pull("opt", ids, handler="rows"), rows)
    with pytest.raises(rkv.Error) as e:
        c.pull("opt", ids, out=np.zeros((3, 4), dtype=np.float32), handler="with_state")
    assert e.value.code == -rkv.EDTYPE
    with pytest.raises(rkv.Error) as e:
        c.pull("plain", ids, handler="with_state")
    assert e.value.code == -rkv.EINVAL and "has no optimizer state" in e.value.message
    for h in (rkv.PULL_CUSTOM, rkv.PULL_CUSTOM + 3, -1, rkv.PULL_MAX, "bogus"):
        with pytest.raises(rkv.Error) as e:
            c.pull("opt", ids, handler=h)
        assert e.value.code == -rkv.ENOHANDLER, h
    with pytest.raises(rkv.Error) as e:
        c.pull("opt", ids, handler=1.5)
    assert e.value.code == -rkv.EINVAL


class Calls:
    """Counts a handler's calls per thread kind (the test's own threads are
    the client's; the servers' are C threads)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def add(self):
        with self.lock:
            self.n += 1


def _row_sum(calls):
    def fn(row, state, out, param):
        calls.add()
        out[:] = row.sum() + param
    return fn


def _row_and_twice(row, state, out, param):
    return np.concatenate([row, 2 * row])


def _huge(row, state, out, param):
    return 1e300


def _raises(row, state, out, param):
    raise ValueError("handler bug")


def test_python_pull_handlers(make_cluster, capfd):
    """Python handlers on servers in this process (their C threads take the
    GIL) and in the client for its machine's rows."""
    srv_calls = Calls()

    def setup(s):
        s.register_pull_handler(rkv.PULL_CUSTOM, _row_sum(srv_calls), out_mult=0, out_add=1)
        s.register_pull_handler(rkv.PULL_CUSTOM + 1, _row_and_twice, out_mult=2)
        s.register_pull_handler(rkv.PULL_CUSTOM + 2, _raises)
        if s.machine_id == 1:  # another reply shape on machine 1 only
            s.register_pull_handler(rkv.PULL_CUSTOM + 3, _row_and_twice, out_mult=1, out_add=2)

    cl = make_cluster(setup=setup)
    c = cl.client(output="numpy")
    cli_calls = Calls()
    c.register_pull_handler(rkv.PULL_CUSTOM, _row_sum(cli_calls), out_mult=0, out_add=1)
    c.register_pull_handler(rkv.PULL_CUSTOM + 1, _row_and_twice, out_mult=2)
    c.register_pull_handler(rkv.PULL_CUSTOM + 2, _raises)
    c.register_pull_handler(rkv.PULL_CUSTOM + 3, _row_and_twice, out_mult=1)
    c.register_pull_handler(rkv.PULL_CUSTOM + 4, _row_sum(Calls()))  # on no server

    c.init_data("emb", (100, 4), "float32", init="uniform", seed=3)
    ids = np.array([90, 10, 90, 55])  # 90, 55 on machine 1; 10 on machine 0
    rows = c.pull("emb", ids)
    sums = c.pull("emb", ids, handler=rkv.PULL_CUSTOM, param=10.0)
    assert sums.shape == (4,)
    np.testing.assert_allclose(sums, rows.sum(axis=1) + 10, rtol=1e-5)
    assert srv_calls.n == 3 and cli_calls.n == 1  # remote rows on servers, local in client

    both = c.pull("emb", ids, handler=rkv.PULL_CUSTOM + 1)
    assert both.shape == (4, 8)
    np.testing.assert_array_equal(both, np.concatenate([rows, 2 * rows], axis=1))

    # A handler that raises: its rows are poisoned, never left as they were.
    out = np.zeros((4, 4), dtype=np.float32)  # out_mult=1: rows as long as the tensor's
    c.pull("emb", ids, out=out, handler=rkv.PULL_CUSTOM + 2)
    assert np.isnan(out).all()
    assert c.pull_handler_errors(rkv.PULL_CUSTOM + 2) == 1
    assert sum(s.pull_handler_errors(rkv.PULL_CUSTOM + 2) for s in cl.servers) == 3
    assert "handler bug" in capfd.readouterr().err

    # A value the reply's dtype cannot hold is the handler's error, as it
    # would be a push's: poisoned and said, not inf (1e300 in float32).
    c.register_pull_handler(rkv.PULL_CUSTOM + 5, _huge)
    assert np.isnan(c.pull("emb", [10], handler=rkv.PULL_CUSTOM + 5)).all()
    assert c.pull_handler_errors(rkv.PULL_CUSTOM + 5) == 1
    err = capfd.readouterr().err
    assert "returned a value for a float32 reply: value 1e+300 is out of range for float32" in err
    assert "RuntimeWarning" not in err
    c.init_data("ints", (100, 2), "int32")
    got = c.pull("ints", [10], handler=rkv.PULL_CUSTOM + 5)
    assert (got == np.iinfo(np.int32).min).all()  # not the integer 1e300 wrapped to
    assert c.pull_handler_errors(rkv.PULL_CUSTOM + 5) == 2
    assert "int32 reply; cannot take float64 data" in capfd.readouterr().err

    # A server that disagrees on the reply length, or lacks the handler.
    with pytest.raises(rkv.Error) as e:
        c.pull("emb", [90], handler=rkv.PULL_CUSTOM + 3)
    assert e.value.code == -rkv.EPROTO
    with pytest.raises(rkv.Error) as e:
        c.pull("emb", [90], handler=rkv.PULL_CUSTOM + 4)
    assert e.value.code == -rkv.ENOHANDLER and "is not registered" in e.value.message

    # Unregistered in the client: refused before anything is sent.
    c.register_pull_handler(rkv.PULL_CUSTOM + 1, None)
    with pytest.raises(rkv.Error) as e:
        c.pull("emb", ids, handler=rkv.PULL_CUSTOM + 1)
    assert e.value.code == -rkv.ENOHANDLER
    np.testing.assert_array_equal(c.pull("emb", ids), rows)  # still fine


def test_python_pull_handler_threads(make_cluster):
    """Several Python threads pulling through a Python handler while the
    servers' threads run it too: every thread gets its rows, nothing hangs."""
    def setup(s):
        s.register_pull_handler(rkv.PULL_CUSTOM, _row_sum(Calls()), out_mult=0, out_add=1)

    cl = make_cluster(setup=setup)
    c = cl.client(output="numpy")
    c.register_pull_handler(rkv.PULL_CUSTOM, _row_sum(Calls()), out_mult=0, out_add=1)
    c.init_data("emb", (64, 8), "float64", init="uniform", seed=1)
    want = c.pull("emb", np.arange(64)).sum(axis=1)
    bad = []

    def work(k):
        for _ in range(20):
            ids = np.random.default_rng(k).integers(0, 64, 50)
            got = c.pull("emb", ids, handler=rkv.PULL_CUSTOM)
            if not np.allclose(got, want[ids]):
                bad.append(k)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts)
    assert not bad


def test_register_pull_handler_refused(make_cluster):
    cl = make_cluster(machines=1, servers_per_machine=1)
    c = cl.client()
    s = cl.servers[0]
    for reg in (c.register_pull_handler, s.register_pull_handler):
        for hid in (rkv.PULL_ROWS, rkv.PULL_WITH_STATE, rkv.PULL_CUSTOM - 1, rkv.PULL_MAX, "x"):
            with pytest.raises(rkv.Error) as e:
                reg(hid, _raises)
            assert e.value.code == -rkv.EINVAL, hid
        # A bool is no length: out_mult=True was taken as 1.
        for kw in ({"out_mult": 0, "out_add": 0}, {"out_mult": -1}, {"out_add": 1 << 32},
                   {"out_mult": True}, {"out_mult": 0, "out_add": np.True_}):
            with pytest.raises(rkv.Error) as e:
                reg(rkv.PULL_CUSTOM, _raises, **kw)
            assert e.value.code == -rkv.EINVAL, kw
        # A bare small int was taken as an address: SIGSEGV at the next pull.
        for fn in ("not a function", 0, 5, 4095, True, rkv.ffi.NULL, rkv.lib._rkv_py_pull):
            with pytest.raises(rkv.Error) as e:
                reg(rkv.PULL_CUSTOM, fn)
            assert e.value.code == -rkv.EINVAL, fn
        with pytest.raises(rkv.Error) as e:
            reg(rkv.PULL_CUSTOM, "not a function")
        assert e.value.code == -rkv.EINVAL
        with pytest.raises(rkv.Error) as e:
            reg(rkv.PULL_CUSTOM, _raises, user=5)
        assert e.value.code == -rkv.EINVAL


C_HANDLER = r"""
#include <stddef.h>
/* rkv_pull_fn for f32 rows: the row's largest element times param, and
 * *(float *)user when user is given. */
void row_max(int dt, const void *row, const void *state, size_t row_len, void *out,
             size_t out_len, double param, void *user)
{
    (void)dt, (void)state;
    const float *r = row;
    float m = r[0];
    for (size_t j = 1; j < row_len; j++)
        m = r[j] > m ? r[j] : m;
    for (size_t k = 0; k < out_len; k++)
        ((float *)out)[k] = m * (float)param + (user ? *(const float *)user : 0.0f);
}
"""


def test_c_pull_handler(make_cluster, tmp_path):
    """A C handler registered by address (from ctypes), with a user pointer."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "h.c"
    src.write_text(C_HANDLER)
    so = tmp_path / "h.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    dll = ctypes.CDLL(str(so))
    addr = ctypes.cast(dll.row_max, ctypes.c_void_p).value
    bias = ctypes.c_float(0.5)
    user = ctypes.addressof(bias)

    def setup(s):
        s.register_pull_handler(rkv.PULL_CUSTOM + 7, addr, out_mult=0, out_add=2, user=user)

    cl = make_cluster(setup=setup)
    c = cl.client(output="numpy")
    c.register_pull_handler(rkv.PULL_CUSTOM + 7, addr, out_mult=0, out_add=2, user=user)
    c.init_data("emb", (100, 5), "float32", init="uniform", seed=9)
    ids = [99, 0, 51, 3]
    rows = c.pull("emb", ids)
    got = c.pull("emb", ids, handler=rkv.PULL_CUSTOM + 7, param=3.0)
    assert got.shape == (4, 2)
    want = rows.max(axis=1) * 3 + 0.5
    np.testing.assert_allclose(got, np.stack([want, want], axis=1), rtol=1e-6)


C_PUSH_HANDLER = r"""
#include <stddef.h>
/* rkv_handler_fn for f32 rows: row = row * 2 + in * param + *(float *)user. */
void twice_plus(int dt, void *row, void *state, const void *in, size_t n, double param,
                void *user)
{
    (void)dt, (void)state;
    float *r = row;
    const float *x = in;
    for (size_t j = 0; j < n; j++)
        r[j] = r[j] * 2 + x[j] * (float)param + (user ? *(const float *)user : 0.0f);
}
"""


def test_c_push_handler(make_cluster, tmp_path):
    """A custom push op written in C, registered from Python by address on
    every server and on the client: push(op=...) was refused ENOHANDLER,
    with nothing in Python to register one with (an outside tester)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "p.c"
    src.write_text(C_PUSH_HANDLER)
    so = tmp_path / "p.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so), str(src)], check=True)
    dll = ctypes.CDLL(str(so))
    addr = ctypes.cast(dll.twice_plus, ctypes.c_void_p).value
    bias = ctypes.c_float(0.25)
    user = ctypes.addressof(bias)
    op = rkv.OP_CUSTOM + 3

    def setup(s):
        s.register_handler(op, addr, user=user)

    cl = make_cluster(setup=setup)
    c = cl.client(output="numpy")
    c.init_data("emb", (100, 3), "float32")
    ids = [99, 0, 51]  # rows of both machines: local ones applied here, the others by servers
    c.push("emb", ids, np.ones((3, 3), np.float32))
    with pytest.raises(rkv.Error) as e:  # not registered in this client yet
        c.push("emb", ids, np.ones((3, 3), np.float32), op=op)
    assert e.value.code == -rkv.ENOHANDLER
    c.register_handler(op, addr, user=user)
    c.push("emb", ids, np.full((3, 3), 2, np.float32), op=op, lr=0.5)
    np.testing.assert_allclose(c.pull("emb", ids), np.full((3, 3), 1 * 2 + 2 * 0.5 + 0.25))
    for bad, why in ((5, "no function's address"), (lambda *a: None, "are C functions"),
                     ("x", "expected a C function")):
        with pytest.raises(rkv.Error) as e:
            c.register_handler(op, bad)
        assert why in e.value.message
    with pytest.raises(rkv.Error) as e:
        c.register_handler(2, addr)
    assert "custom ones are 16.." in e.value.message


def test_book_and_local_index_are_1d(cluster):
    # A 2-D book (or a list of (row, machine) pairs) was flattened and taken
    # for rows in its C order.
    c = cluster.client()
    for kw in ({"part_policy": [[0, 1], [0, 1]]},
               {"part_policy": np.array([[0], [1], [0], [1]])},
               {"part_policy": [0, 1, 0, 1], "local_index": [[0, 0], [1, 1]]}):
        with pytest.raises(rkv.Error) as e:
            c.init_data("b", (4, 2), "float32", **kw)
        assert isinstance(e.value, ValueError) and "1-D" in e.value.message
    assert "b" not in c.data_name_list()
    c.init_data("b", (4, 2), "float32", part_policy=np.array([0, 1, 0, 1]))


def test_book_and_local_index_past_64_bits_name_the_row(cluster):
    # A book or local_index holding a Python int past 64 bits (numpy makes
    # the list an object array) was refused as "expected integers, got
    # object", naming neither the row nor the value.
    c = cluster.client()
    for kw, want in (({"part_policy": [0, 2**64]}, "part_policy (the book): row 1 has "
                      "18446744073709551616 (over 4294967295)"),
                     ({"part_policy": [-2**64, 0]}, "part_policy (the book): row 0 has "
                      "-18446744073709551616"),
                     ({"part_policy": [0, 1], "local_index": [0, 2**64]},
                      "local_index: row 1 has 18446744073709551616 (over 18446744073709551615)"),
                     ({"part_policy": [0, None]}, "row 1 has None: expected integers"),
                     ({"part_policy": [True, 2**64]}, "row 0 has True: expected integers")):
        with pytest.raises(rkv.Error) as e:
            c.init_data("b", (2, 2), "float32", **kw)
        assert e.value.code == -rkv.EINVAL and want in e.value.message, e.value.message
    assert "b" not in c.data_name_list()
    c.init_data("b", (2, 2), "float32", part_policy=np.array([0, 1], dtype=object),
                local_index=np.array([0, 0], dtype=object))
    assert c.get_data_meta("b")[2] == "explicit"
