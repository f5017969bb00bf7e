"""Client.stats(): the C client's counters per call and per server, from
Python, against a real cluster (2 machines x 2 servers on loopback TCP; the
client on machine 0, whose rows it applies itself)."""
import numpy as np

import rkv


def test_counts_per_call_and_server(client):
    client.init_data("s", (64, 4), "float32")
    client.stats(reset=True)
    ids = np.array([0, 1, 40, 41, 42], dtype=np.int64)  # 2 local rows, 3 of machine 1
    client.push("s", ids, np.ones((5, 4), dtype=np.float32), op="sum")
    client.pull("s", ids[2:])
    client.push("s", ids, np.ones((5, 4), dtype=np.float32), async_=True).wait()
    client.barrier()
    st = client.stats()
    assert set(st["ops"]) == {"push", "pull", "barrier", "init", "other"}
    push = st["ops"]["push"]
    assert (push["count"], push["errors"], push["rows"], push["bytes"]) == (2, 0, 10, 160)
    assert len(push["hist"]) == 40 and sum(push["hist"]) == 2
    assert push["timed"] == 2  # both sent requests: timed, not sampled
    assert 0 < push["p50_us"] <= push["p99_us"] <= push["max_ns"] / 1e3
    assert abs(push["mean_us"] * 2e3 - push["total_ns"]) < 1
    pull = st["ops"]["pull"]
    assert (pull["count"], pull["rows"], pull["bytes"]) == (1, 3, 48)
    assert st["ops"]["barrier"]["count"] == 1 and st["ops"]["init"]["count"] == 0
    # Machine 1's rows went to one of its servers (2 or 3) per call; the
    # barrier to server 0; machine 0's rows to no server.
    remote = [st["servers"].get(s, {}).get("push", {}).get("count", 0) for s in (2, 3)]
    assert sum(remote) == 2
    assert sum(st["servers"].get(s, {}).get("push", {}).get("rows", 0) for s in (2, 3)) == 6
    assert "push" not in st["servers"].get(0, {}) and "push" not in st["servers"].get(1, {})
    assert st["servers"][0]["barrier"]["count"] == 1
    assert sum(st["servers"].get(s, {}).get("pull", {}).get("count", 0) for s in (2, 3)) == 1


def test_failures_count_and_reset(client):
    client.init_data("f", (8, 2), "float64")
    try:
        client.push("f", np.array([8]), np.zeros((1, 2)))  # row 8 of 8: out of range
    except rkv.Error as e:
        assert e.code == -rkv.ERANGE
    else:
        raise AssertionError("an out-of-range push succeeded")
    st = client.stats(reset=True)
    assert st["ops"]["push"]["count"] == 1 and st["ops"]["push"]["errors"] == 1
    assert st["ops"]["push"]["rows"] == 0
    after = client.stats()
    assert all(after["ops"][op]["count"] == 0 for op in after["ops"])
    assert after["servers"] == {}
