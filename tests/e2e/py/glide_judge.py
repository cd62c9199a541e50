"""The judge's verbs with valkey-glide (`judge.py --client glide`).

GLIDE is the Valkey project's own client (a Rust core under a Python API):
slot-aware, following MOVED and ASK, refreshing its topology on its own. It
is a second, independent judge next to the `valkey` cluster client: same
verbs, same JSON, so a suite can run either.

With TLS GLIDE always verifies the certificate and that it names the address
connected to (there is no switch for the latter but "insecure"), so it is
used where members announce addresses their certificate names.
"""

import asyncio
import json
import os
import time

from glide import (
    AdvancedGlideClusterClientConfiguration,
    AllNodes,
    GlideClusterClient,
    GlideClusterClientConfiguration,
    NodeAddress,
    ServerCredentials,
    SlotKeyRoute,
    SlotType,
    TlsAdvancedConfiguration,
)
from glide.exceptions import GlideError


def _config(args, address):
    nodes = [NodeAddress(h, p) for h, p in (address(h, args.port) for h in args.host)]
    password = args.password or None
    credentials = None
    if password:
        credentials = ServerCredentials(password=password, username=args.username or None)
    advanced = None
    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            pem = f.read()
        advanced = AdvancedGlideClusterClientConfiguration(
            connection_timeout=2000,
            tls_config=TlsAdvancedConfiguration(root_pem_cacerts=pem),
        )
    return GlideClusterClientConfiguration(
        nodes,
        use_tls=bool(args.tls_ca),
        credentials=credentials,
        request_timeout=2000,
        advanced_config=advanced,
    )


async def _connect(args, address, deadline_s=60.0):
    start = time.monotonic()
    while True:
        try:
            client = await GlideClusterClient.create(_config(args, address))
            await client.ping()
            return client
        except GlideError as err:
            if time.monotonic() - start > deadline_s:
                raise SystemExit(f"judge (glide): cannot connect: {err}") from err
            await asyncio.sleep(0.5)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


async def _fill(args, address):
    client = await _connect(args, address)
    try:
        for i in range(args.count):
            await client.set(f"{args.prefix}:{i}", str(i))
        bad = [i for i in range(args.count)
               if _text(await client.get(f"{args.prefix}:{i}")) != str(i)]
        # Each member answers for itself, keyed by the address GLIDE used:
        # the addresses it learnt from the cluster.
        ids = await client.custom_command(["CLUSTER", "MYID"], AllNodes())
        nodes = sorted(_text(k) for k in ids)
        owners = set()
        for i in range(args.count):
            owner = await client.custom_command(
                ["CLUSTER", "MYID"], SlotKeyRoute(SlotType.PRIMARY, f"{args.prefix}:{i}"))
            owners.add(_text(owner))
        print(json.dumps({"written": args.count, "missing_or_wrong": len(bad),
                          "primaries": len(owners), "nodes": nodes}))
        return 1 if bad else 0
    finally:
        await client.close()


async def _load(args, address):
    client = await _connect(args, address)
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
                await client.set(key, key)
                if args.wait_replicas:
                    got = await client.custom_command(
                        ["WAIT", str(args.wait_replicas), "1000"],
                        SlotKeyRoute(SlotType.PRIMARY, key))
                    if int(got) < args.wait_replicas:
                        continue
                now = time.monotonic()
                longest_gap = max(longest_gap, now - last_ack)
                last_ack = now
                acked += 1
                out.write(key + "\n")
                out.flush()
            except GlideError:
                # GLIDE reconnects and refreshes its topology by itself.
                errors += 1
                await asyncio.sleep(0.05)
            if args.interval_ms:
                await asyncio.sleep(args.interval_ms / 1000.0)
    await client.close()
    print(json.dumps({
        "writes": writes,
        "acked": acked,
        "errors": errors,
        "longest_gap_ms": round(longest_gap * 1000.0, 1),
    }))
    return 0


async def _verify(args, address):
    client = await _connect(args, address)
    with open(args.infile, encoding="utf-8") as f:
        keys = [line.strip() for line in f if line.strip()]
    missing = []
    for key in keys:
        for _ in range(20):
            try:
                if _text(await client.get(key)) != key:
                    missing.append(key)
                break
            except GlideError:
                await asyncio.sleep(0.25)
        else:
            missing.append(key)
    await client.close()
    print(json.dumps({"checked": len(keys), "missing": len(missing), "first_missing": missing[:5]}))
    return 1 if missing else 0


def run(args, address):
    """Runs `args.cmd` with GLIDE; `address` parses IP[:PORT]."""
    verb = {"fill": _fill, "load": _load, "verify": _verify}[args.cmd]
    return asyncio.run(verb(args, address))
