"""rkv.Config: the CLI's setting names, env vars and cluster file, through rkv_settings_*."""
import os
import pathlib

import numpy as np
import pytest

import rkv


def test_settings_reach_the_config():
    cfg, local = rkv.Config(num_workers=3, machines=2, servers_per_machine=2,
                            base_port=41000).build()
    assert (cfg.n_workers, cfg.n_machines, cfg.machine_id, local) == (3, 2, 0, 0)


def test_env_vars_and_their_aliases_are_read(monkeypatch):
    monkeypatch.setenv("DMLC_NUM_WORKER", "5")
    assert rkv.Config().build()[0].n_workers == 5
    monkeypatch.setenv("RKV_NUM_WORKERS", "6")  # RKV_* is looked up before the alias
    assert rkv.Config().build()[0].n_workers == 6
    assert rkv.Config(num_workers=7).build()[0].n_workers == 7  # settings beat env


def test_unknown_setting_is_an_error():
    with pytest.raises(rkv.Error) as e:
        rkv.Config(rx_deep=3)
    assert e.value.code == -rkv.ECONFIG
    assert "rx-deep" in e.value.message or "rx_deep" in e.value.message


def test_bad_value_names_the_setting():
    with pytest.raises(rkv.Error) as e:
        rkv.Config(timeout_ms="soon").build()
    assert e.value.code == -rkv.ECONFIG and "timeout-ms" in e.value.message


def test_cluster_file_and_server_id(tmp_path):
    p = tmp_path / "ip.txt"
    p.write_text("# two machines\n127.0.0.1 41000 2\n127.0.0.1 41002 3\n")
    cfg, local = rkv.Config(cluster=str(p)).copy(server_id=3).build()
    assert (cfg.n_machines, cfg.machine_id, local) == (2, 1, 1)
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster=str(p), server_id=5).build()
    assert e.value.code == -rkv.ECONFIG and "server-id" in e.value.message


def test_client_on_no_machines_host_is_refused(tmp_path):
    # DGL's clients find their machine in ip_config.txt; on a host that is
    # none of its machines they took machine 0 without a word.
    p = tmp_path / "ip.txt"
    p.write_text("192.0.2.9 41000 1\n192.0.2.8 41000 1\n")
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster=str(p)).build()
    assert e.value.code == -rkv.ECONFIG and "no machine's host" in e.value.message
    cfg, _ = rkv.Config(cluster=str(p), machine_id=1).build()  # told: as told
    assert cfg.machine_id == 1
    cfg, local = rkv.Config(cluster=str(p)).copy(server_id=1).build()  # a server's is its id's
    assert (cfg.machine_id, local) == (1, 0)
    # An observer has no machine: it is not refused for that (here it then
    # finds no server 0 to talk to).
    with pytest.raises(rkv.Error) as e:
        rkv.Client(rkv.Config(cluster=str(p), connect_retry_ms=100, timeout_ms=100),
                   observer=True)
    assert "no machine's host" not in e.value.message, e.value.message


def test_server_told_no_id_is_refused(tmp_path, monkeypatch):
    # It became server 0 and the real server 0 was refused for a "machine
    # segment in use": as `rkv server`, it asks which server it is.
    for k in ("RKV_SERVER_ID", "DGL_SERVER_ID", "RKV_MACHINE_ID"):
        monkeypatch.delenv(k, raising=False)
    p = tmp_path / "ip.txt"
    p.write_text("127.0.0.1 41000 2\n")
    with pytest.raises(rkv.Error) as e:
        rkv.Server(rkv.Config(cluster=str(p)))
    assert e.value.code == -rkv.ECONFIG and "which server is this?" in e.value.message
    monkeypatch.setenv("DGL_SERVER_ID", "")  # empty is none
    with pytest.raises(rkv.Error):
        rkv.Server(rkv.Config(cluster=str(p)))


def test_cluster_file_error_names_the_line(tmp_path):
    p = tmp_path / "ip.txt"
    p.write_text("127.0.0.1 41000 2\n127.0.0.1 port 2\n")
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster=str(p)).build()
    assert e.value.code == -rkv.ECONFIG and "ip.txt:2" in e.value.message


def test_a_path_is_a_cluster_file(tmp_path):
    with pytest.raises(rkv.Error) as e:
        rkv.Client(str(tmp_path / "missing.txt"))
    assert e.value.code == -rkv.ECONFIG and "cannot open" in e.value.message


def test_error_carries_code_name_and_message():
    e = rkv.Error(-rkv.ETIMEDOUT, "pull timed out")
    assert e.code == -3 and e.name == "RKV_ETIMEDOUT" and "pull timed out" in str(e)
    assert rkv.strerror(-rkv.ETIMEDOUT) == "request timed out"


def test_pslite_environment_is_not_taken_for_a_cluster(monkeypatch, tmp_path):
    # Under ps-lite's launch (DMLC_ROLE, no cluster file) DMLC_PS_ROOT_PORT
    # is the scheduler's port: rkv.Server() built a one-machine cluster and
    # listened on it, never registering with the scheduler.
    for k in ("RKV_ROLE", "RKV_CLUSTER", "DGL_IP_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DMLC_ROLE", "server")
    monkeypatch.setenv("DMLC_PS_ROOT_PORT", "41900")
    monkeypatch.setenv("DMLC_NUM_SERVER", "2")
    with pytest.raises(rkv.Error) as e:
        rkv.Server()
    assert e.value.code == -rkv.ECONFIG and "ps-lite's launch" in e.value.message
    assert "rkv node" in e.value.message
    # rkv's own convention given here, or a cluster file, builds as before.
    assert rkv.Config(role="server").build()[0].n_machines == 1
    p = tmp_path / "ip.txt"
    p.write_text("127.0.0.1 41000 1\n127.0.0.1 41002 1\n")  # DMLC_NUM_SERVER=2 servers
    assert rkv.Config(cluster=str(p)).build()[0].n_machines == 2


def test_a_dgl_trainer_finds_its_machine(monkeypatch, tmp_path):
    # DGL's launch tells a trainer no machine: the first line of ip_config.txt
    # naming an address of its host is its machine, as `rkv worker` finds it.
    # rkv.Client() under DGL_ROLE=client was machine 0 on every host, and a
    # trainer on machine 1's host mapped machine 0's shard.
    for k in ("RKV_MACHINE_ID", "RKV_SERVER_ID", "DGL_SERVER_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DGL_ROLE", "client")
    p = tmp_path / "ip_config.txt"
    p.write_text("192.0.2.1 41000\n127.0.0.1 41000\n")  # 192.0.2.1: no host's (RFC 5737)
    monkeypatch.setenv("DGL_IP_CONFIG", str(p))
    assert rkv.Config().build()[0].machine_id == 1
    assert rkv.Config(machine_id=0).build()[0].machine_id == 0


def test_a_role_typo_is_refused(monkeypatch):
    # DMLC_ROLE=sever built a config as if no role had been given.
    for k in ("RKV_ROLE", "DGL_ROLE", "DMLC_ROLE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DMLC_ROLE", "sever")
    with pytest.raises(rkv.Error) as e:
        rkv.Config().build()
    assert e.value.code == -rkv.ECONFIG
    assert 'role: unknown "sever" (env DMLC_ROLE)' in e.value.message
    assert "server, worker, client" in e.value.message and "scheduler" in e.value.message
    monkeypatch.delenv("DMLC_ROLE")
    monkeypatch.setenv("DGL_ROLE", "trainer")
    with pytest.raises(rkv.Error) as e:
        rkv.Config().build()
    assert '"trainer" (env DGL_ROLE)' in e.value.message
    assert rkv.Config(role="client").build()[0].n_machines == 1  # DGL's word


def test_dgl_num_server_disagreeing_with_the_cluster_file(monkeypatch, tmp_path):
    # DGL_NUM_SERVER is DGL's servers per machine; the file's column won silently.
    monkeypatch.delenv("RKV_SERVERS_PER_MACHINE", raising=False)
    monkeypatch.setenv("DGL_NUM_SERVER", "1")
    p = tmp_path / "ip_config.txt"
    p.write_text("127.0.0.1 41000 2\n127.0.0.1 41002 2\n")
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster=str(p)).build()
    assert e.value.code == -rkv.ECONFIG
    assert "DGL_NUM_SERVER=1" in e.value.message and "2 servers" in e.value.message
    monkeypatch.setenv("DGL_NUM_SERVER", "2")
    assert rkv.Config(cluster=str(p)).build()[0].n_machines == 2
    p.write_text("127.0.0.1 41000\n127.0.0.1 41002\n")  # DGL's own form: the count is DGL's
    assert rkv.Config(cluster=str(p)).build()[0].n_machines == 2


def test_dmlc_num_server_disagreeing_with_the_cluster_file(monkeypatch, tmp_path):
    # ps-lite's DMLC_NUM_SERVER counts every server; beside a cluster file
    # that says otherwise it was ignored.
    for k in ("RKV_NUM_SERVERS", "RKV_ROLE", "DMLC_ROLE", "DGL_NUM_SERVER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DMLC_NUM_SERVER", "3")
    p = tmp_path / "ip_config.txt"
    p.write_text("127.0.0.1 41000 2\n127.0.0.1 41002 2\n")
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster=str(p)).build()
    assert e.value.code == -rkv.ECONFIG
    assert "num-servers 3 (env DMLC_NUM_SERVER)" in e.value.message
    assert "has 4 servers on 2 machines" in e.value.message
    monkeypatch.setenv("DMLC_NUM_SERVER", "4")
    assert rkv.Config(cluster=str(p)).build()[0].n_machines == 2


def test_a_setting_of_none_is_refused():
    # Config(cluster=None) read a cluster file named "None"; num_workers=None
    # said 'expected a non-negative integer, got "None"'.
    for kw in ({"cluster": None}, {"num_workers": None}):
        with pytest.raises(rkv.Error) as e:
            rkv.Config(**kw)
        assert isinstance(e.value, TypeError) and "= None" in e.value.message
    assert rkv.Config(num_workers=2).copy(cluster=None).get("cluster") is None  # copy skips it


def test_a_bool_is_the_value_of_a_0_1_setting_only(tmp_path):
    # A bool became an int: machine_id=True was machine 1, server_id=True
    # server 1 (Client's and Server's too), while local_id=True was refused.
    p = tmp_path / "ip.txt"
    p.write_text("127.0.0.1 41000 2\n127.0.0.1 41002 2\n")
    for key in ("machine_id", "server_id", "num_workers", "rx_depth", "cluster"):
        for v in (True, np.bool_(False)):
            with pytest.raises(rkv.Error) as e:
                rkv.Config(dict({"cluster": str(p)}, **{key: v}))
            assert isinstance(e.value, TypeError) and e.value.code == -rkv.EINVAL
            assert "%r = %r" % (key.replace("_", "-"), v) in e.value.message, e.value.message
    for make, kw in ((rkv.Client, {"machine_id": True}), (rkv.Server, {"server_id": True})):
        with pytest.raises(rkv.Error) as e:
            make(str(p), **kw)
        assert isinstance(e.value, TypeError) and "not a bool" in e.value.message
    # The 0/1 settings take one, numpy's too; the ids take ints.
    for v, text in ((True, "1"), (np.bool_(False), "0")):
        c = rkv.Config(busy_poll=v, discover=v)
        assert c.get("busy_poll") == c.get("discover") == text
        c.build()  # both read as 0/1
    cfg, local = rkv.Config(cluster=str(p), server_id=1).build()
    assert (cfg.machine_id, local) == (0, 1)
    assert rkv.Config(cluster=str(p), machine_id=1).build()[0].machine_id == 1


def test_a_path_object_or_bytes_is_a_cluster_file(tmp_path):
    # rkv.Client(pathlib.Path("ip.txt")) (and bytes) was refused as "expected
    # rkv.Config, a dict of settings or a cluster file path".
    for path in (tmp_path / "missing.txt", os.fsencode(tmp_path / "missing.txt")):
        for make in (rkv.Client, rkv.Server):
            with pytest.raises(rkv.Error) as e:
                make(path)
            assert e.value.code == -rkv.ECONFIG and "missing.txt: cannot open" in e.value.message
    p = tmp_path / "ip.txt"
    p.write_text("127.0.0.1 41000 2\n127.0.0.1 41002 3\n")
    cfg, local = rkv.Config(cluster=p, server_id=3).build()  # a Path as a setting's value
    assert (cfg.n_machines, cfg.machine_id, local) == (2, 1, 1)
    with pytest.raises(rkv.Error) as e:
        rkv.Client(3.5)
    assert isinstance(e.value, TypeError) and "got float" in e.value.message


def test_settings_that_are_no_dict_are_rkv_errors():
    # rkv.Config("ip.txt") raised dict()'s bare ValueError "dictionary update
    # sequence element #0 has length 1; 2 is required", a Path a TypeError
    # "not iterable"; Config().get(None) an AttributeError.
    for bad in ("ip.txt", pathlib.Path("ip.txt"), b"ip.txt", [1, 2], 5):
        with pytest.raises(rkv.Error) as e:
            rkv.Config(bad)
        assert isinstance(e.value, TypeError) and e.value.code == -rkv.EINVAL
        assert "expected a dict of settings" in e.value.message
    assert "Config(cluster='ip.txt')" in str(pytest.raises(rkv.Error, rkv.Config, "ip.txt").value)
    assert rkv.Config([("num_workers", 2)]).get("num_workers") == "2"
    with pytest.raises(rkv.Error) as e:
        rkv.Config().get(None)
    assert isinstance(e.value, TypeError) and "expected a str" in e.value.message


def test_a_path_that_is_not_utf8_reaches_the_file(tmp_path):
    # A cluster path of bytes that are not UTF-8 (as bytes, or os.fsdecode'd
    # to a str with U+DC80..U+DCFF) raised a bare UnicodeEncodeError.
    d = os.fsencode(tmp_path)
    p = os.path.join(d, b"ip\xff.txt")
    with open(p, "w") as f:
        f.write("127.0.0.1 41000 2\n")
    for path in (p, os.fsdecode(p)):
        cfg, _ = rkv.Config(cluster=path).build()
        assert cfg.n_machines == 1
    with pytest.raises(rkv.Error) as e:
        rkv.Config(cluster="ip\ud800.txt")
    assert isinstance(e.value, ValueError) and "not valid UTF-8" in e.value.message


def test_strerror_of_any_int():
    assert rkv.strerror(-rkv.ETIMEDOUT) == rkv.strerror(rkv.ETIMEDOUT) == "request timed out"
    assert rkv.strerror(2**40) == rkv.strerror(999)  # cffi raised OverflowError


def test_a_number_setting_in_words_is_refused_where_it_is_given():
    # num_workers="two" was taken, and refused only by the create that
    # built the config (an outside tester).
    with pytest.raises(rkv.Error) as e:
        rkv.Config(num_workers="two")
    assert e.value.code == -rkv.ECONFIG
    assert 'num-workers: expected a non-negative integer, got "two"' in e.value.message
    c = rkv.Config(num_workers=3)
    with pytest.raises(rkv.Error):
        c.set("rx_depth", "1.5")
    assert c.get("rx-depth") is None and c.get("num-workers") == "3"  # nothing kept
    assert rkv.Config(backend="tcp", discover=1, server_id="").get("server-id") == ""


def test_one_setting_given_twice_is_refused():
    # {"num_workers": 3, "num-workers": 5} built 5 workers in silence.
    for args, kw in (({"num_workers": 3, "num-workers": 5}, {}),
                     ({"num_workers": 3}, {"num_workers": 5})):
        with pytest.raises(rkv.Error) as e:
            rkv.Config(args, **kw)
        assert isinstance(e.value, ValueError) and "'num-workers' given twice" in e.value.message
    assert rkv.Config({"num_workers": 3}, rx_depth=8).get("num-workers") == "3"
