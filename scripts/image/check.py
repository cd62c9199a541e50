#!/usr/bin/env python3
"""Judges the OCI archive `make image` wrote: target/image/<name>-<version>.oci.tar.

It shares no code with scripts/image/build.py and reads the archive as a
registry or runtime would:

  1. the layout: oci-layout, index.json -> manifest -> config and layer, every
     blob's sha256 and size equal to its descriptor, no blob unreferenced, the
     config's diff_id equal to the sha256 of the uncompressed layer;
  2. the config: User 65532:65532, Entrypoint the binary, Env PATH, the OCI
     labels equal to the Dockerfile's (version: the crate's), one history
     entry for the one layer, the index's ref.name <name>:<version>;
  3. the layer: only directories and regular files, no absolute or `..`
     names, reproducible (mtimes SOURCE_DATE_EPOCH, gzip header without time
     or name); its files exactly the binary, /etc/passwd, /etc/group and the
     shared objects `ldd target/release/valkey-operator` lists, each library
     byte for byte the host's; the binary's GNU build id that of
     target/release/valkey-operator; nonroot 65532 in passwd and group, /tmp
     1777;
  4. the binary runs from the unpacked layer alone: chroot into it (mounted
     read-only, as readOnlyRootFilesystem) as 65532:65532 with an empty
     environment, `--help` exits 0 and `--version` prints the crate version;
     without the layer's loader it does not start (so nothing of the host's
     was used);
  5. umoci, an independent implementation, unpacks the same layout (verifying
     digests on its own), resolves the user to uid/gid 65532 and yields the
     same files as (3);
  6. a second build gives the same archive, byte for byte.

Needs root (chroot, mount namespace, file owners) and umoci (make setup).
"""

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("IMAGE_NAME", "valkey-operator")
HOST_BINARY = ROOT / "target/release/valkey-operator"
ENTRYPOINT = "/usr/local/bin/valkey-operator"
NONROOT = 65532

failures = []


def fail(message):
    failures.append(message)
    print(f"  FAIL {message}")


def expect(condition, message):
    if not condition:
        fail(message)
    return condition


def crate():
    out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    package = next(p for p in json.loads(out)["packages"] if p["name"] == "operator")
    return package["version"], package["license"]


def dockerfile_labels(version):
    """The LABELs of the Dockerfile's final stage, its ARG defaults substituted."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    args["VERSION"] = version
    if os.environ.get("IMAGE_SOURCE"):
        args["SOURCE"] = os.environ["IMAGE_SOURCE"]
    labels = {}
    for line in re.findall(r"^LABEL (.*)$", text, re.M):
        for key, value in re.findall(r'(\S+?)="([^"]*)"', line):
            labels[key] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return labels


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blob(layout, desc, media_type, what):
    """The blob a descriptor names, after checking its media type, size and digest."""
    expect(desc.get("mediaType") == media_type, f"{what}: mediaType {desc.get('mediaType')}, want {media_type}")
    algorithm, _, hexdigest = desc["digest"].partition(":")
    path = layout / "blobs" / algorithm / hexdigest
    if not expect(path.is_file(), f"{what}: no blob {desc['digest']}"):
        return None
    data = path.read_bytes()
    expect(len(data) == desc["size"], f"{what}: {len(data)} bytes, descriptor says {desc['size']}")
    if not expect(algorithm == "sha256" and sha256(data) == desc["digest"],
                  f"{what}: content hashes to {sha256(data)}, descriptor says {desc['digest']}"):
        return None
    return data


def ldd_paths():
    out = subprocess.run(["ldd", str(HOST_BINARY)], check=True, capture_output=True, text=True).stdout
    paths = set()
    for line in out.splitlines():
        match = re.match(r"\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$", line)
        if match:
            paths.add(match.group(1).lstrip("/"))
    return paths


def build_id(path):
    out = subprocess.run(["readelf", "-n", str(path)], check=True, capture_output=True, text=True).stdout
    match = re.search(r"Build ID: ([0-9a-f]+)", out)
    return match.group(1) if match else None


def check_layout(layout, version, license_, arch):
    print("layout: descriptors, digests, sizes")
    expect(json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"},
           "oci-layout is not imageLayoutVersion 1.0.0")
    index = json.loads((layout / "index.json").read_text())
    expect(index.get("schemaVersion") == 2, "index.json: schemaVersion is not 2")
    manifests = index.get("manifests", [])
    if not expect(len(manifests) == 1, f"index.json lists {len(manifests)} manifests, want 1"):
        return None
    top = manifests[0]
    reference = f"{NAME}:{version}"
    annotations = top.get("annotations", {})
    expect(annotations.get("org.opencontainers.image.ref.name") == reference,
           f"index.json ref.name {annotations.get('org.opencontainers.image.ref.name')}, want {reference}")
    expect(annotations.get("io.containerd.image.name") == f"docker.io/library/{reference}",
           f"index.json io.containerd.image.name {annotations.get('io.containerd.image.name')}")
    expect(top.get("platform") == {"architecture": arch, "os": "linux"},
           f"index.json platform {top.get('platform')}, want linux/{arch}")

    manifest_bytes = blob(layout, top, "application/vnd.oci.image.manifest.v1+json", "manifest")
    if manifest_bytes is None:
        return None
    manifest = json.loads(manifest_bytes)
    expect(manifest.get("schemaVersion") == 2, "manifest: schemaVersion is not 2")
    config_bytes = blob(layout, manifest["config"], "application/vnd.oci.image.config.v1+json", "config")
    layers = manifest.get("layers", [])
    if not expect(len(layers) == 1, f"manifest lists {len(layers)} layers, want 1") or config_bytes is None:
        return None
    layer_gz = blob(layout, layers[0], "application/vnd.oci.image.layer.v1.tar+gzip", "layer")
    if layer_gz is None:
        return None

    referenced = {top["digest"], manifest["config"]["digest"], layers[0]["digest"]}
    present = {f"{p.parent.name}:{p.name}" for p in (layout / "blobs").glob("*/*")}
    expect(present == referenced, f"blobs not referenced by the index: {sorted(present - referenced)}")

    layer_tar = gzip.decompress(layer_gz)
    config = json.loads(config_bytes)
    expect(config.get("rootfs") == {"type": "layers", "diff_ids": [sha256(layer_tar)]},
           f"config rootfs {config.get('rootfs')} does not name the layer's diff_id {sha256(layer_tar)}")
    expect(config.get("architecture") == arch and config.get("os") == "linux",
           f"config platform {config.get('os')}/{config.get('architecture')}, want linux/{arch}")
    expect(len([h for h in config.get("history", []) if not h.get("empty_layer")]) == 1,
           "config history does not have one entry for the one layer")

    print("config: user, entrypoint, labels")
    settings = config.get("config", {})
    expect(settings.get("User") == f"{NONROOT}:{NONROOT}", f"config User {settings.get('User')!r}, want 65532:65532")
    expect(settings.get("Entrypoint") == [ENTRYPOINT], f"config Entrypoint {settings.get('Entrypoint')}")
    expect(not settings.get("Cmd"), f"config Cmd {settings.get('Cmd')}: arguments are the Deployment's")
    expect(any(e.startswith("PATH=") for e in settings.get("Env", [])), "config Env has no PATH")
    labels = settings.get("Labels", {})
    expect(labels.get("org.opencontainers.image.version") == version,
           f"label version {labels.get('org.opencontainers.image.version')}, crate {version}")
    expect(labels.get("org.opencontainers.image.licenses") == license_,
           f"label licenses {labels.get('org.opencontainers.image.licenses')}, crate {license_}")
    want = dockerfile_labels(version)
    expect(labels == want, f"config labels {labels} differ from the Dockerfile's {want}")
    return layer_gz, layer_tar


def check_layer(layer_gz, layer_tar, rootfs):
    print("layer: entries, files, reproducibility")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    # gzip header: bytes 4..8 are MTIME, flag bit 3 (FNAME) marks a file name.
    expect(layer_gz[4:8] == b"\0\0\0\0" and not layer_gz[3] & 0x08, "layer gzip header carries a time or name")
    entries = {}
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as tar:
        for member in tar.getmembers():
            name = member.name.rstrip("/")
            if not expect(not name.startswith("/") and ".." not in name.split("/"), f"layer entry {member.name!r}"):
                return None
            expect(name not in entries, f"layer entry {name} twice")
            expect(member.isdir() or member.isreg(), f"layer entry {name} is neither directory nor file")
            entries[name] = (member, tar.extractfile(member).read() if member.isreg() else None)

    late = sorted(n for n, (m, _) in entries.items() if m.mtime != epoch)
    expect(not late, f"{len(late)} layer entries ({', '.join(late[:3])}...) have an mtime other than {epoch}")
    files = {n for n, (m, _) in entries.items() if m.isreg()}
    libraries = ldd_paths()
    want = {ENTRYPOINT.lstrip("/"), "etc/passwd", "etc/group"} | libraries
    expect(files == want, f"layer files {sorted(files)}, want {sorted(want)} (the binary, passwd, group, ldd's list)")
    for library in sorted(libraries & files):
        host = Path(os.path.realpath("/" + library)).read_bytes()
        expect(entries[library][1] == host, f"{library} differs from the host's")
    binary = entries.get(ENTRYPOINT.lstrip("/"))
    if binary:
        expect(binary[0].mode & 0o111 and binary[0].uid == 0, "the binary is not executable or not root's")
    passwd = entries.get("etc/passwd", (None, b""))[1].decode().splitlines()
    group = entries.get("etc/group", (None, b""))[1].decode().splitlines()
    expect(any(re.match(r"^nonroot:x:65532:65532:[^:]*:[^:]*:[^:]*$", line) for line in passwd),
           f"/etc/passwd has no nonroot 65532: {passwd}")
    expect("nonroot:x:65532:" in group, f"/etc/group has no nonroot 65532: {group}")
    tmp = entries.get("tmp")
    expect(tmp is not None and tmp[0].isdir() and tmp[0].mode == 0o1777, "/tmp is not a 1777 directory")

    # Unpacked by hand: after the checks above there are only directories and files.
    for name in sorted(entries):
        member, data = entries[name]
        path = rootfs / name
        if member.isdir():
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_bytes(data)
        os.chown(path, member.uid, member.gid)
    for name in sorted(entries, reverse=True):
        os.chmod(rootfs / name, entries[name][0].mode)
    return {n: (m.mode, m.uid, m.gid) for n, (m, _) in entries.items()}


def run_in(rootfs, *args):
    """The binary, chrooted into a read-only bind mount of rootfs, as 65532:65532.

    The mount lives in a private mount namespace and goes with it; `env -i`
    runs on the host side so nothing of the caller's environment (say
    LD_LIBRARY_PATH) reaches the binary.
    """
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
              'exec env -i "$(command -v chroot)" --userspec=65532:65532 --groups=65532 "$1" "${@:2}"')
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "--",
                           "bash", "-c", script, "_", str(rootfs), ENTRYPOINT, *args],
                          capture_output=True, text=True, timeout=30)


def check_runs(rootfs, version):
    print("run: chroot into the layer as 65532:65532, read-only")
    helped = run_in(rootfs, "--help")
    expect(helped.returncode == 0 and "Usage: valkey-operator" in helped.stdout,
           f"valkey-operator --help in the layer: exit {helped.returncode}, {helped.stderr.strip()[:300]}")
    said = run_in(rootfs, "--version")
    expect(said.returncode == 0 and said.stdout.strip() == f"valkey-operator {version}",
           f"valkey-operator --version in the layer said {said.stdout.strip()!r} (exit {said.returncode})")
    # The control: hide the layer's loader and the binary must not start (the
    # kernel finds no interpreter: chroot cannot run the command).
    loader = next((p for p in rootfs.rglob("ld-linux*") if p.is_file()), None)
    if helped.returncode == 0 and expect(loader is not None, "no dynamic loader (ld-linux*) in the layer"):
        hidden = loader.with_name(loader.name + ".hidden")
        loader.rename(hidden)
        try:
            without = run_in(rootfs, "--help")
        finally:
            hidden.rename(loader)
        expect(without.returncode == 127 and f"'{ENTRYPOINT}'" in without.stderr,
               f"without the layer's loader: exit {without.returncode}, {without.stderr.strip()[:300]} "
               f"(want chroot unable to run {ENTRYPOINT})")


def check_umoci(layout, version, ours, work):
    print("umoci: an independent unpack")
    bundle = work / "bundle"
    done = subprocess.run(["umoci", "unpack", "--image", f"{layout}:{NAME}:{version}", str(bundle)],
                          capture_output=True, text=True)
    if not expect(done.returncode == 0, f"umoci unpack: {done.stderr.strip()[:500]}"):
        return
    process = json.loads((bundle / "config.json").read_text())["process"]
    expect(process["user"].get("uid") == NONROOT and process["user"].get("gid") == NONROOT,
           f"umoci resolves the user to {process['user']}")
    expect(process["args"] == [ENTRYPOINT], f"umoci's process args {process['args']}")
    expect("HOME=/home/nonroot" in process["env"], "umoci did not find nonroot's home in /etc/passwd")
    rootfs = bundle / "rootfs"
    theirs = {}
    for path in rootfs.rglob("*"):
        st = path.lstat()
        theirs[str(path.relative_to(rootfs))] = (st.st_mode & 0o7777, st.st_uid, st.st_gid)
    expect(theirs == ours, f"umoci's rootfs differs from the layer's entries: "
                           f"{sorted(set(theirs.items()) ^ set(ours.items()))[:10]}")


def shown(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main():
    started = time.monotonic()
    if os.geteuid() != 0:
        sys.exit("image-check: needs root (chroot, mount namespace, file owners)")
    if not shutil.which("umoci"):
        sys.exit("image-check: umoci is missing (make setup installs it)")
    version, license_ = crate()
    # An archive path as the argument judges another file (a copy, a doctored one).
    archive = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "target/image" / f"{NAME}-{version}.oci.tar"
    if not archive.is_file():
        sys.exit(f"image-check: no {shown(archive)} (make image)")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]

    with tempfile.TemporaryDirectory(prefix="image-check-") as tmp:
        work = Path(tmp)
        layout = work / "layout"
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            if not all(re.fullmatch(r"oci-layout|index\.json|blobs/?|blobs/sha256/?|blobs/sha256/[0-9a-f]{64}", n)
                       for n in names):
                sys.exit(f"image-check: unexpected entries in {archive}: {names}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(layout, filter="data")
            else:
                tar.extractall(layout)
        found = check_layout(layout, version, license_, arch)
        if found:
            layer_gz, layer_tar = found
            rootfs = work / "rootfs"
            rootfs.mkdir()
            ours = check_layer(layer_gz, layer_tar, rootfs)
            image_binary = rootfs / ENTRYPOINT.lstrip("/")
            if ours:
                expect(build_id(image_binary) is not None and build_id(image_binary) == build_id(HOST_BINARY),
                       "the image's binary has not the build id of target/release/valkey-operator")
                check_runs(rootfs, version)
                check_umoci(layout, version, ours, work)

        print("reproducible: a second build")
        again = work / "again"
        built = subprocess.run([sys.executable, str(ROOT / "scripts/image/build.py"), "--out-dir", str(again)],
                               capture_output=True, text=True)
        second = again / f"{NAME}-{version}.oci.tar"
        if expect(built.returncode == 0, f"the second build failed: {built.stderr.strip()[:500]}"):
            expect(second.read_bytes() == archive.read_bytes(),
                   f"a second build ({sha256(second.read_bytes())}) differs from "
                   f"{shown(archive)} ({sha256(archive.read_bytes())})")

    if failures:
        print(f"image-check: {len(failures)} failure(s) in {shown(archive)}")
        sys.exit(1)
    print(f"image-check: {shown(archive)} ({archive.stat().st_size / 1e6:.1f} MB) is a valid "
          f"OCI image {NAME}:{version} that runs as 65532 ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
