#!/usr/bin/env python3
"""Bootstrap orders, measured on 9 real valkey-servers on loopback (no testbed).

How long a 3x2 cluster takes from its first CLUSTER MEET to every replica
linked and every member cluster_state:ok, by the order of the admin commands:

  agree-first       MEET from one seed; slots and REPLICATE once every member
                    knows every other (what the operator's planner does today)
  mesh-agree-first  the same, but every member also MEETs every other at once
  slots-first       ADDSLOTSRANGE on the primaries before the MEETs, REPLICATE
                    as soon as a replica knows its primary
  slots-first-mesh  slots first and every pair met at once

Usage: python3 scripts/bootstrap-orders.py [MODE ...] (the valkey client from
`make setup`'s venv: ~/.cache/valkey-rs/venv/bin/python). Three runs a mode;
ports 7101-7109 on 127.0.0.1; servers and their folders are removed after.
"""
import os, shutil, subprocess, sys, tempfile, time

import valkey

BIN = os.environ.get("VALKEY_SERVER", os.path.expanduser("~/.cache/valkey-rs/bin/valkey-9.1.2/valkey-server"))
WORK = tempfile.mkdtemp(prefix="valkey-rs-bootstrap-")
N = 9
PORTS = [7101 + i for i in range(N)]
PRIMARIES = [0, 3, 6]  # node index of each shard's primary; replicas i+1, i+2
RANGES = [(0, 5461), (5462, 10922), (10923, 16383)]

def start():
    procs = []
    for p in PORTS:
        d = f"{WORK}/n{p}"
        shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
        procs.append(subprocess.Popen([BIN, "--port", str(p), "--cluster-enabled", "yes",
            "--cluster-config-file", f"{d}/nodes.conf", "--dir", d, "--save", "", "--appendonly", "no",
            "--cluster-node-timeout", "5000", "--repl-diskless-sync-delay", "1", "--bind", "127.0.0.1",
            "--cluster-require-full-coverage", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    cs = [valkey.Valkey(port=p, decode_responses=True) for p in PORTS]
    for c in cs:
        for _ in range(100):
            try:
                c.ping(); break
            except Exception:
                time.sleep(0.05)
    return procs, cs

def ids(cs):
    return [c.execute_command("CLUSTER", "MYID") for c in cs]

def known(c):
    txt = c.execute_command("CLUSTER", "NODES")
    return sum(1 for l in txt.splitlines() if "handshake" not in l and "noaddr" not in l)

def all_ok(cs):
    return all(c.execute_command("CLUSTER", "INFO").split("cluster_state:")[1][:2] == "ok" for c in cs)

def synced(cs):
    for i, c in enumerate(cs):
        if i in PRIMARIES: continue
        info = c.info("replication")
        if info.get("master_link_status") != "up": return False
    return True

def run(mode):
    procs, cs = start()
    t0 = time.monotonic()
    my = ids(cs)
    marks = {}
    if mode in ("slots-first", "slots-first-mesh"):
        for s, i in enumerate(PRIMARIES):
            cs[i].execute_command("CLUSTER", "ADDSLOTSRANGE", *RANGES[s])
    for j in range(1, N):
        cs[0].execute_command("CLUSTER", "MEET", "127.0.0.1", PORTS[j])
    if mode in ("slots-first-mesh", "mesh-agree-first"):
        for i in range(1, N):
            for j in range(1, N):
                if i != j:
                    cs[i].execute_command("CLUSTER", "MEET", "127.0.0.1", PORTS[j])
    replicated = set()
    slots_done = mode not in ("agree-first", "mesh-agree-first")
    while time.monotonic() - t0 < 60:
        if not slots_done and all(known(c) == N for c in cs):
            marks.setdefault("views agree", time.monotonic() - t0)
            for s, i in enumerate(PRIMARIES):
                cs[i].execute_command("CLUSTER", "ADDSLOTSRANGE", *RANGES[s])
            slots_done = True
        if slots_done:
            for s, i in enumerate(PRIMARIES):
                for r in (i + 1, i + 2):
                    if r in replicated: continue
                    try:
                        cs[r].execute_command("CLUSTER", "REPLICATE", my[i]); replicated.add(r)
                    except Exception:
                        pass
        if len(replicated) == 6:
            marks.setdefault("replicate sent", time.monotonic() - t0)
            if synced(cs): marks.setdefault("replicas linked", time.monotonic() - t0)
            if all_ok(cs): marks.setdefault("all cluster_state ok", time.monotonic() - t0)
            if "replicas linked" in marks and "all cluster_state ok" in marks: break
        time.sleep(0.05)
    for p in procs: p.kill()
    for p in procs: p.wait()
    return marks

MODES = ["agree-first", "mesh-agree-first", "slots-first", "slots-first-mesh"]
try:
    for mode in sys.argv[1:] or MODES:
        if mode not in MODES:
            sys.exit(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
        for k in range(3):
            m = run(mode)
            print(mode, k, {a: round(b, 2) for a, b in m.items()}, flush=True)
finally:
    shutil.rmtree(WORK, ignore_errors=True)
