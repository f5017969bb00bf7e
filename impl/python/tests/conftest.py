"""Real clusters for the tests: servers on loopback TCP, in threads of the test
process (rkv.Server.run releases the GIL) or in child processes."""
import os
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))  # launch.py: shared with the example

import rkv  # noqa: E402
from launch import free_ports, write_cluster  # noqa: E402


class Cluster:
    """machines x servers_per_machine servers in threads, and `workers` clients.
    setup(server), when given, runs on each server before it serves (to
    register pull handlers)."""

    def __init__(self, tmp_path, machines=2, servers_per_machine=2, workers=1, setup=None,
                 **settings):
        base = free_ports(machines * servers_per_machine)
        self.path = write_cluster(str(tmp_path / "ip_config.txt"), base, machines,
                                  servers_per_machine)
        self.config = rkv.Config(cluster=self.path, num_workers=workers, timeout_ms=10000,
                                 connect_retry_ms=10000, **settings)
        self.servers = [rkv.Server(self.config, server_id=i)
                        for i in range(machines * servers_per_machine)]
        if setup is not None:
            for s in self.servers:
                setup(s)
        self.errors = []
        self.threads = [threading.Thread(target=self._run, args=(s,), daemon=True)
                        for s in self.servers]
        for t in self.threads:
            t.start()
        self.clients = []

    def _run(self, srv):
        try:
            srv.run()
        except rkv.Error as e:
            self.errors.append(e)

    def client(self, **kw):
        c = rkv.Client(self.config, **kw)
        self.clients.append(c)
        return c

    def stop(self):
        if self.clients and self.clients[0]._cli is not None:
            self.clients[0].shut_down()
        for t in self.threads:
            t.join(20)
        alive = [t for t in self.threads if t.is_alive()]
        for c in self.clients:
            c.close()
        if not alive:
            for s in self.servers:
                s.close()
        assert not alive, "servers still running after shut_down"
        assert not self.errors, self.errors


@pytest.fixture
def make_cluster(tmp_path):
    made = []

    def make(**kw):
        c = Cluster(tmp_path, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def cluster(make_cluster):
    """2 machines x 2 servers, one client on machine 0 (machine 1's rows go over TCP)."""
    return make_cluster()


@pytest.fixture
def client(cluster):
    return cluster.client()
