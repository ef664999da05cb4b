"""tpu_dist across two hosts: a 2x2 job (2 hosts x 2 processes) over Gloo
TCP. The hosts are two network namespaces of this machine joined by a veth
pair, each with its own hostname (a UTS namespace), so neither the
addresses nor the host identity are shared; the job's ranks must then talk
TCP between hosts. Where namespaces cannot be made (no root), the same job
runs on loopback with VTPU_DIST_SHM=0, which checks the TCP path but not
the host split."""

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True)


@pytest.fixture
def two_hosts():
    """Two namespaces ns0/ns1 at 10.77.x.1/.2, or None when they cannot be made."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        yield None
        return
    tag = uuid.uuid4().hex[:6]
    ns = [f"vtpu{tag}h0", f"vtpu{tag}h1"]
    dev = [f"vt{tag}a", f"vt{tag}b"]
    subnet = 64 + int(tag[:2], 16) % 128
    addr = [f"10.77.{subnet}.1", f"10.77.{subnet}.2"]
    made = []
    try:
        for n in ns:
            if sh("ip", "netns", "add", n).returncode != 0:
                yield None
                return
            made.append(n)
        steps = [
            ("ip", "link", "add", dev[0], "type", "veth", "peer", "name", dev[1]),
            ("ip", "link", "set", dev[0], "netns", ns[0]),
            ("ip", "link", "set", dev[1], "netns", ns[1]),
        ]
        for i in range(2):
            steps += [
                ("ip", "-n", ns[i], "addr", "add", f"{addr[i]}/24", "dev", dev[i]),
                ("ip", "-n", ns[i], "link", "set", dev[i], "up"),
                ("ip", "-n", ns[i], "link", "set", "lo", "up"),
            ]
        for s in steps:
            if sh(*s).returncode != 0:
                yield None
                return
        yield list(zip(ns, dev, addr))
    finally:
        for n in made:
            sh("ip", "netns", "del", n)


def test_a_2x2_job_across_two_hosts_over_tcp(two_hosts, tmp_path):
    port = free_port()  # in the namespaces any port is free; on loopback, one that is
    procs = []
    base = dict(os.environ, PYTHONWARNINGS="ignore")
    if two_hosts is None:
        master = "127.0.0.1"
        hosts = [(None, None, master)] * 2
        base["VTPU_DIST_SHM"] = "0"
    else:
        master = two_hosts[0][2]
        hosts = two_hosts
    for node, (ns, dev, _) in enumerate(hosts):
        run = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
               "--nproc-per-node", "2", "--master-addr", master, "--master-port", str(port), WORKER, "collectives"]
        env = dict(base)
        if ns:
            env["GLOO_SOCKET_IFNAME"] = dev
            # its own hostname: the processes of the two hosts must not see one host
            run = ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
                   f'hostname "{ns}" && exec "$0" "$@"', *run]
        procs.append(subprocess.Popen(run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=300)
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    results = [json.loads(x) for out in outs for x in out.splitlines() if x.startswith("{")]
    assert len(results) == 4 and all(r["ok"] for r in results), outs
    # ranks on two hosts: the group cannot use one host's shared memory
    assert not any(r["shared_memory"] for r in results)
    if two_hosts is not None:
        assert sorted(r["host"] for r in results) == sorted([two_hosts[0][0]] * 2 + [two_hosts[1][0]] * 2)
