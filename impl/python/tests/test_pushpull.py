"""Push and pull against a real cluster (2 machines x 2 servers on loopback TCP):
every dtype, torch and numpy, ids of any integer type, non-contiguous input,
pulls into caller memory, the optimizer ops, async pushes."""
import threading

import numpy as np
import pytest
import torch

import rkv

DTYPES = [np.float32, np.float64, np.int32, np.int64]
ROWS = 64


def as_torch(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_assign_sum_pull_each_dtype(client, dt, kind):
    name = "t_%s_%s" % (np.dtype(dt).name, kind)
    client.init_data(name, (ROWS, 3), np.dtype(dt).name)
    ids = np.array([0, 17, 31, 32, 63], dtype=np.int64)  # both machines' rows
    vals = (np.arange(15).reshape(5, 3) * 3 + 1).astype(dt)
    data = as_torch(vals) if kind == "torch" else vals
    client.push(name, as_torch(ids) if kind == "torch" else ids, data, op="assign")
    client.push(name, ids[:2], np.ones((2, 3), dtype=dt), op="sum")
    got = client.pull(name, ids)
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (5, 3)
    assert got.dtype == getattr(torch, np.dtype(dt).name)
    want = vals.copy()
    want[:2] += 1
    np.testing.assert_array_equal(got.numpy(), want)
    assert client.get_data_meta(name) == (got.dtype, (ROWS, 3), "range")


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_push_sums_by_default_and_integer_sums_wrap_as_numpys(client, dt):
    # What push's docstring and the README say: op defaults to "sum" (as
    # ps-lite's push; DGL's default handler assigns), and an integer sum
    # wraps around on overflow as numpy's does, on this machine's rows (the
    # client's own) and machine 1's (a server's) alike.
    name = "w_%s" % np.dtype(dt).name
    client.init_data(name, (ROWS, 2), np.dtype(dt).name)
    ids = np.array([0, ROWS - 1])
    top = np.iinfo(dt).max
    half = np.full((2, 2), (top >> 1) + 1, dtype=dt)  # 2**62 for int64
    client.push(name, ids, half)
    client.push(name, ids, half)
    want = half + half  # numpy's wrap: -2**63 for int64
    assert (want == np.iinfo(dt).min).all()
    np.testing.assert_array_equal(client.pull(name, ids).numpy(), want)
    client.push(name, ids, np.full((2, 2), -1, dtype=dt))  # and back, past the minimum
    np.testing.assert_array_equal(client.pull(name, ids).numpy(), np.full((2, 2), top, dt))


@pytest.mark.parametrize("idt", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                 np.int64, np.uint64])
def test_ids_of_every_integer_type(client, idt):
    client.init_data("ids", (ROWS, 2), "float64")
    ids = np.array([5, 40, 5], dtype=idt)  # duplicates: pulled in the caller's order
    client.push("ids", np.array([5, 40]), np.array([[1, 2], [3, 4]], dtype=np.float64),
                op="assign")
    np.testing.assert_array_equal(client.pull("ids", ids).numpy(), [[1, 2], [3, 4], [1, 2]])
    np.testing.assert_array_equal(client.pull("ids", torch.from_numpy(ids.astype(np.int64))),
                                  [[1, 2], [3, 4], [1, 2]])


def test_non_contiguous_ids_and_data(client):
    client.init_data("nc", (ROWS, 4), torch.float32)
    ids = np.arange(ROWS, dtype=np.int64)[::3]  # strided view
    data = np.arange(4 * len(ids), dtype=np.float32).reshape(4, len(ids)).T  # transposed
    assert not ids.flags.c_contiguous and not data.flags.c_contiguous
    client.push("nc", ids, data, op="assign")
    np.testing.assert_array_equal(client.pull("nc", ids).numpy(), data)
    tdata = torch.arange(8 * len(ids), dtype=torch.float32).reshape(len(ids), 8)[:, ::2]
    tids = torch.arange(ROWS)[::3]
    assert not tdata.is_contiguous() and not tids.is_contiguous()
    client.push("nc", tids, tdata, op="assign")
    assert torch.equal(client.pull("nc", tids), tdata)


def test_data_converts_within_its_kind(client):
    client.init_data("conv", (ROWS, 2), "float32")
    client.push("conv", [1], np.array([[0.5, 1.5]], dtype=np.float64), op="assign")
    client.push("conv", [2], torch.tensor([[1, 2]], dtype=torch.int16), op="assign")
    np.testing.assert_array_equal(client.pull("conv", [1, 2]).numpy(), [[0.5, 1.5], [1, 2]])


def test_pull_into_out_uses_its_memory(client):
    client.init_data("out", (ROWS, 8), "float32", init="uniform", seed=7)
    ids = [3, 60]
    want = client.pull("out", ids)
    out = np.full((2, 8), -5, dtype=np.float32)
    before = out.ctypes.data
    assert client.pull("out", ids, out=out) is out and out.ctypes.data == before
    np.testing.assert_array_equal(out, want.numpy())
    tout = torch.zeros(16)  # any shape with the right number of elements
    ptr = tout.data_ptr()
    assert client.pull("out", ids, out=tout) is tout and tout.data_ptr() == ptr
    assert torch.equal(tout.view(2, 8), want)
    # Memory that cannot take the rows as they come gets a copy: a strided view,
    # another dtype.
    big = torch.zeros(2, 16)
    client.pull("out", ids, out=big[:, ::2])
    assert torch.equal(big[:, ::2], want) and big[:, 1::2].abs().sum() == 0
    f64 = np.zeros((2, 8))
    client.pull("out", ids, out=f64)
    np.testing.assert_array_equal(f64, want.numpy())


def test_sgd_and_adagrad(client):
    client.init_data("w", (ROWS, 2), "float64", init="zeros", with_state=True)
    client.push("w", [10, 50], np.ones((2, 2)), op="assign")
    client.push("w", [10, 50], np.array([[1.0, 2.0], [3.0, 4.0]]), op="sgd", lr=0.5)
    np.testing.assert_allclose(client.pull("w", [10, 50]).numpy(), [[0.5, 0.0], [-0.5, -1.0]])
    client.push("w", [10], np.array([[2.0, 2.0]]), op="adagrad", lr=0.1)
    # state = 4; row -= 0.1 * 2 / (sqrt(4) + 1e-10)
    np.testing.assert_allclose(client.pull("w", [10]).numpy(), [[0.4, -0.1]])


def test_init_uniform_is_seeded_and_init_function_fills(client):
    client.init_data("u1", (ROWS, 4), "float32", init="uniform", seed=11)
    client.init_data("u2", (ROWS, 4), "float32", init="uniform", seed=11)
    a, b = client.pull("u1", range(ROWS)), client.pull("u2", range(ROWS))
    assert torch.equal(a, b) and a.abs().max() <= 1 and a.std() > 0.3
    client.init_data("f", (ROWS,), "int64", init=lambda shape, dt: np.arange(shape[0], dtype=dt))
    assert torch.equal(client.pull("f", [0, 5, 63]), torch.tensor([0, 5, 63]))
    assert client.get_data_meta("f")[1] == (ROWS,)


def test_explicit_book_and_hash(client):
    book = np.array([1] * (ROWS // 2) + [0] * (ROWS // 2))
    client.init_data("b", (ROWS, 1), "int32", part_policy=book)
    client.init_data("h", (ROWS, 1), "int32", part_policy="hash")
    for n in ("b", "h"):
        client.push(n, np.arange(ROWS), np.arange(ROWS, dtype=np.int32), op="assign")
        np.testing.assert_array_equal(client.pull(n, np.arange(ROWS)[::-1]).numpy().ravel(),
                                      np.arange(ROWS)[::-1])
    assert client.get_data_meta("b")[2] == "explicit"


def test_async_push(client):
    client.init_data("a", (ROWS, 1024), "float32")
    ids = np.arange(ROWS)
    handles = [client.push("a", ids, np.full((ROWS, 1024), i, dtype=np.float32), op="sum",
                           async_=True) for i in range(1, 5)]
    assert all(isinstance(h, rkv.PushHandle) for h in handles)
    for h in handles:
        h.wait()
        assert h.done
    assert torch.all(client.pull("a", ids) == 10)
    # Again: the same outcome, as a future's result() (it raised EINVAL,
    # "already waited for", and so did a second thread's wait() while the
    # first still waited: test_outside test_push_handle_waited_from_two_threads).
    assert handles[0].wait() is None
    # A pull sees every push issued before it, waited for or not.
    h = client.push("a", [0], np.ones((1, 1024), dtype=np.float32), op="sum", async_=True)
    assert torch.all(client.pull("a", [0]) == 11)
    h.wait()


def test_numpy_output(cluster):
    c = cluster.client(output="numpy")
    c.init_data("np", (ROWS, 2), "int64")
    got = c.pull("np", [1, 2])
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.shape == (2, 2)
    assert c.get_data_meta("np")[0] == np.int64


def test_two_clients_in_threads_barrier(make_cluster):
    """Both clients block in create until the other joins, and in barrier: only
    works if every wait releases the GIL."""
    cl = make_cluster(workers=2)
    clients, errors = [None, None], []
    ticks = []

    def join(i):
        try:
            clients[i] = rkv.Client(cl.config, machine_id=i)
        except rkv.Error as e:
            errors.append(e)

    ts = [threading.Thread(target=join, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors and all(clients)
    cl.clients.extend(clients)
    clients[0].init_data("s", (ROWS, 1), "int64")
    clients[0].barrier_done = False

    def worker(i):
        c = clients[i]
        if i == 1:
            c._m("s")  # after client 0 created it; ids below are on both machines
        c.push("s", np.arange(ROWS), np.full(ROWS, i + 1, dtype=np.int64), op="sum")
        c.barrier()
        clients[i].result = c.pull("s", np.arange(ROWS))

    t0 = threading.Thread(target=worker, args=(0,))
    t0.start()
    # Client 0 now waits in the barrier; this thread still runs Python.
    for _ in range(1000):
        ticks.append(1)
    worker(1)
    t0.join(30)
    assert len(ticks) == 1000
    for c in clients:
        assert torch.all(c.result == 3)


def test_servers_in_other_processes(tmp_path):
    import subprocess
    import sys
    from launch import free_ports, write_cluster
    base = free_ports(2)
    path = write_cluster(str(tmp_path / "ip.txt"), base, 2, 1)
    code = ("import rkv,sys; rkv.Server(rkv.Config(cluster=sys.argv[1], num_workers=1), "
            "server_id=int(sys.argv[2])).run()")
    procs = [subprocess.Popen([sys.executable, "-c", code, path, str(i)]) for i in range(2)]
    try:
        with rkv.Client(rkv.Config(cluster=path, num_workers=1, connect_retry_ms=10000)) as c:
            c.init_data("p", (10, 2), "float32")
            c.push("p", [0, 9], np.ones((2, 2)), op="sum")
            assert torch.equal(c.pull("p", [9, 0]), torch.ones(2, 2))
            c.shut_down()
        assert [p.wait(20) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_no_copy_of_memory_the_store_can_use(client):
    client.init_data("nocopy", (ROWS, 4), "float32")
    m = client._m("nocopy")
    ids = np.arange(4, dtype=np.uint64)
    assert rkv._ids_array(ids) is ids
    signed = np.arange(4, dtype=np.int64)
    assert np.shares_memory(rkv._ids_array(signed), signed)  # viewed as uint64
    t = torch.arange(4)
    assert rkv._ids_array(t).__array_interface__["data"][0] == t.data_ptr()
    rows = np.ones((4, 4), dtype=np.float32)
    assert client._rows(m, rows, 4) is rows
    trows = torch.ones(4, 4)
    assert client._rows(m, trows, 4).__array_interface__["data"][0] == trows.data_ptr()
    # Strided or of another dtype: a contiguous copy of the tensor's dtype.
    assert not np.shares_memory(client._rows(m, np.ones((4, 8), np.float32)[:, ::2], 4), rows)


def test_init_function_fills_only_a_tensor_it_creates(client):
    # A second init_data with the same arguments (a restarted trainer) is a
    # no-op for the store, but the function's values were assigned again
    # over every trained row.
    def ones(shape, dt):
        return np.ones(shape, dt)

    client.init_data("e", (ROWS, 2), "float32", init=ones)
    client.push("e", [1, ROWS - 1], np.full((2, 2), 5, np.float32))
    client.init_data("e", (ROWS, 2), "float32", init=ones)
    np.testing.assert_array_equal(client.pull("e", [0, 1, ROWS - 1]).numpy(),
                                  [[1, 1], [6, 6], [6, 6]])
    with pytest.raises(rkv.Error) as e:  # another desc: refused, rows kept
        client.init_data("e", (ROWS, 2), "float64", init=ones)
    assert e.value.code == -rkv.EEXIST
    np.testing.assert_array_equal(client.pull("e", [1]).numpy(), [[6, 6]])
