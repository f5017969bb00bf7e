"""Helpers to start an rkv cluster on this host: free ports and the cluster
file the C tools read ("host base_port servers" per machine)."""
import random
import socket


def free_ports(n, lo=24000, hi=32700):
    """The first of n consecutive TCP ports free on loopback now: above the range
    the rkv tools pick from (20000..23999), below the kernel's ephemeral ports
    (32768..), which outgoing connections may take at any time."""
    for _ in range(500):
        base = random.randrange(lo, hi - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d consecutive free ports in %d..%d" % (n, lo, hi))


def write_cluster(path, base_port, machines, servers_per_machine, host="127.0.0.1"):
    """A cluster file of `machines` machines on this host, consecutive ports."""
    with open(path, "w") as f:
        f.write("# host base_port servers\n")
        for m in range(machines):
            f.write("%s %d %d\n" % (host, base_port + m * servers_per_machine,
                                    servers_per_machine))
    return path
