#!/usr/bin/env python3
"""Independent judge for the e2e suites: the Python `valkey` cluster client.

It talks to the cluster the way an application would (slot-aware routing,
MOVED handling, topology refresh) and knows nothing of the operator.

    judge.py fill   --host IP --password P --count N [--prefix K]
    judge.py load   --host IP --password P --out FILE [--seconds S] [--stop-file F]
                    [--wait-replicas N] [--prefix K]
    judge.py verify --host IP --password P --in FILE

A --host may be IP:PORT (a member's external address); --port is for the
others. `fill` also says which addresses the client learnt (`nodes`) and how
many primaries its keys went to (`primaries`).

`--client glide` (before or after the verb) runs the verb with valkey-glide
instead (glide_judge.py): same verbs, same JSON.

Every verb takes --tls-ca FILE (before the verb) to connect with TLS,
verifying the members' certificate chain against that CA (and, with
--tls-check-hostname, that the certificate names the address connected to).

`load` writes keys until --seconds pass or --stop-file appears, and appends
every key whose write was acknowledged (and, with --wait-replicas, confirmed by
WAIT) to FILE. It prints one JSON line: writes, acked, errors, longest gap
between two acknowledged writes in ms. `verify` reads every key of FILE back
and exits 1 if any is missing or wrong.
"""

import argparse
import json
import os
import sys
import time

try:
    from valkey.cluster import ClusterNode, ValkeyCluster
    from valkey.exceptions import ValkeyClusterException, ValkeyError
except ImportError:  # --client glide needs only GLIDE
    ClusterNode = ValkeyCluster = None
    ValkeyClusterException = ValkeyError = OSError

# What a client raises when a command or a (re)connection fails. The cluster
# client's "no startup node reachable" error is not a ValkeyError.
FAILURES = (ValkeyError, ValkeyClusterException, OSError)


def connect(args, known=None):
    """A new client; `known`, an old client, adds the nodes it learnt (the
    members' IPs change when their pods are re-created)."""
    hosts = [address(h, args.port) for h in args.host]
    if getattr(args, "standalone", False):
        # One server (a replication set's Service): no cluster client.
        import valkey
        host, port = hosts[0]
        return valkey.Valkey(
            host=host,
            port=port,
            username=args.username or None,
            password=current_password(args),
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            decode_responses=True,
            **tls_options(args),
        )
    if known is not None:
        try:
            hosts += [(n.host, n.port) for n in known.get_nodes()
                      if (n.host, n.port) not in hosts]
        except Exception:  # noqa: BLE001 - a broken client knows nothing
            pass
    # Retries inside the client are kept small: the judge must see outages.
    return ValkeyCluster(
        startup_nodes=[ClusterNode(h, p) for h, p in hosts],
        username=args.username or None,
        password=current_password(args),
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        cluster_error_retry_attempts=3,
        decode_responses=True,
        **tls_options(args),
    )


def address(host, default_port):
    """`IP` or `IP:PORT` as (host, port)."""
    if host.count(":") == 1:
        h, p = host.split(":")
        return h, int(p)
    return host, default_port


def current_password(args):
    """The password to log in with: with `load --password-file`, what that
    file holds now (as an application reading a mounted Secret would, at
    each reconnection), else --password."""
    path = getattr(args, "password_file", None)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            pass
    return args.password or None


# `load --plaintext-first`: set once the members refused plaintext.
ON_TLS = {"yes": False}


def tls_options(args):
    """With --tls-ca, TLS that verifies the members' chain to that CA
    (with `load --plaintext-first`, only once plaintext was refused)."""
    if not args.tls_ca:
        return {}
    if getattr(args, "plaintext_first", False) and not ON_TLS["yes"]:
        return {}
    return {"ssl": True, "ssl_ca_certs": args.tls_ca, "ssl_cert_reqs": "required"}


def check_hostnames():
    """Makes every TLS connection check that the certificate names the
    address connected to: the cluster client does not pass
    ssl_check_hostname on to the connections it makes per node."""
    import valkey.connection

    plain_init = valkey.connection.SSLConnection.__init__

    def init(self, *a, **kw):
        kw["ssl_check_hostname"] = True
        plain_init(self, *a, **kw)

    valkey.connection.SSLConnection.__init__ = init


def connect_retrying(args, deadline_s=60.0):
    start = time.monotonic()
    while True:
        try:
            client = connect(args)
            client.ping()
            return client
        except FAILURES as err:
            if time.monotonic() - start > deadline_s:
                print(f"judge: cannot connect: {err}", file=sys.stderr)
                sys.exit(2)
            time.sleep(0.5)


def cmd_fill(args):
    client = connect_retrying(args)
    for i in range(args.count):
        client.set(f"{args.prefix}:{i}", str(i))
    bad = [i for i in range(args.count) if client.get(f"{args.prefix}:{i}") != str(i)]
    if args.standalone:
        primaries, nodes = {"standalone"}, []
    else:
        primaries = {client.get_node_from_key(f"{args.prefix}:{i}").name for i in range(args.count)}
        nodes = sorted(n.name for n in client.get_nodes())
    print(json.dumps({"written": args.count, "missing_or_wrong": len(bad),
                      "primaries": len(primaries), "nodes": nodes}))
    return 1 if bad else 0


def cmd_load(args):
    client = connect_retrying(args)
    deadline = time.monotonic() + args.seconds
    writes = acked = errors = 0
    longest_gap = 0.0
    last_ack = time.monotonic()
    i = 0
    with open(args.out, "a", encoding="utf-8") as out:
        while time.monotonic() < deadline:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            key = f"{args.prefix}:{i}"
            i += 1
            writes += 1
            try:
                client.set(key, key)
                if args.wait_replicas and args.standalone:
                    got = client.execute_command("WAIT", args.wait_replicas, 1000)
                    if int(got) < args.wait_replicas:
                        continue
                elif args.wait_replicas:
                    node = client.get_node_from_key(key)
                    got = client.execute_command(
                        "WAIT", args.wait_replicas, 1000, target_nodes=node
                    )
                    if int(got) < args.wait_replicas:
                        # Not confirmed by a replica: not counted as durable.
                        continue
                now = time.monotonic()
                longest_gap = max(longest_gap, now - last_ack)
                last_ack = now
                acked += 1
                out.write(key + "\n")
                out.flush()
            except FAILURES:
                errors += 1
                time.sleep(0.05)
                try:
                    client = connect(args, client)
                    if args.plaintext_first and not ON_TLS["yes"]:
                        client.ping()
                except FAILURES:
                    if args.plaintext_first and not ON_TLS["yes"]:
                        # Plaintext refused: if the members speak TLS now,
                        # follow them (a member merely restarting refuses
                        # both).
                        ON_TLS["yes"] = True
                        try:
                            client = connect(args, client)
                            client.ping()
                            print("judge: plaintext refused, moved to TLS", file=sys.stderr)
                        except FAILURES:
                            ON_TLS["yes"] = False
            if args.interval_ms:
                time.sleep(args.interval_ms / 1000.0)
    print(json.dumps({
        "writes": writes,
        "acked": acked,
        "errors": errors,
        "longest_gap_ms": round(longest_gap * 1000.0, 1),
    }))
    return 0


def cmd_verify(args):
    client = connect_retrying(args)
    with open(args.infile, encoding="utf-8") as f:
        keys = [line.strip() for line in f if line.strip()]
    missing = []
    for key in keys:
        for attempt in range(20):
            try:
                if client.get(key) != key:
                    missing.append(key)
                break
            except FAILURES:
                time.sleep(0.25)
                try:
                    client = connect(args)
                except FAILURES:
                    pass
        else:
            missing.append(key)
    print(json.dumps({"checked": len(keys), "missing": len(missing), "first_missing": missing[:5]}))
    return 1 if missing else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", action="append", required=True, help="a member's IP (repeatable)")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--standalone", action="store_true",
                        help="one server (a replication set), not a cluster")
    parser.add_argument("--password", default="")
    parser.add_argument("--username", default="", help="an ACL user (default: the default user)")
    parser.add_argument("--tls-ca", help="connect with TLS, trusting this CA file (PEM)")
    parser.add_argument("--tls-check-hostname", action="store_true",
                        help="with --tls-ca, check that the certificate names the address")
    parser.add_argument("--client", choices=("valkey", "glide"), default="valkey",
                        help="the client library: valkey-py's cluster client or valkey-glide")
    sub = parser.add_subparsers(dest="cmd", required=True)
    fill = sub.add_parser("fill")
    fill.add_argument("--count", type=int, default=10000)
    fill.add_argument("--prefix", default="fill")
    load = sub.add_parser("load")
    load.add_argument("--out", required=True)
    load.add_argument("--seconds", type=float, default=60.0)
    load.add_argument("--stop-file")
    load.add_argument("--wait-replicas", type=int, default=0)
    load.add_argument("--interval-ms", type=float, default=2.0)
    load.add_argument("--prefix", default="load")
    load.add_argument("--password-file",
                      help="read the password from this file at each (re)connection")
    load.add_argument("--plaintext-first", action="store_true",
                      help="with --tls-ca: plaintext until the members refuse it, then TLS")
    verify = sub.add_parser("verify")
    verify.add_argument("--in", dest="infile", required=True)
    # --username also after the verb (the harness appends a load's options).
    for p in (fill, load, verify):
        p.add_argument("--username", default=argparse.SUPPRESS)
        p.add_argument("--client", choices=("valkey", "glide"), default=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client == "glide":
        import glide_judge  # noqa: PLC0415 - only this client needs it

        return glide_judge.run(args, address)
    if args.tls_check_hostname:
        check_hostnames()
    return {"fill": cmd_fill, "load": cmd_load, "verify": cmd_verify}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
