#!/usr/bin/env python3
"""Builds the valkey-operator container image without a container daemon.

The image is the one the Dockerfile describes, assembled from the binary that
`cargo build --release -p operator` already made (nothing is compiled here):
one gzip layer holding

    /usr/local/bin/valkey-operator     the release binary, debug sections removed
    the shared libraries `ldd` lists   and the dynamic loader, each at its path
    /etc/passwd, /etc/group            root and nonroot (65532)
    /home/nonroot                      the working directory, owned by 65532
    /tmp                               1777

an image config (Entrypoint, User 65532:65532, Env PATH, the OCI labels), a
manifest, `index.json` and `oci-layout`, written as an OCI archive (a tar of
the layout) to target/image/<name>-<version>.oci.tar.

Everything is reproducible: entries are sorted, owners numeric, mtimes
SOURCE_DATE_EPOCH (default 0) and the gzip header carries no name or time, so
the same binary gives the same digests. Python 3 standard library only, plus
`ldd` and `strip` (binutils).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "operator"
BINARY_IN_IMAGE = "/usr/local/bin/valkey-operator"
NONROOT = 65532
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The same words as the Dockerfile's LABELs (scripts/image/check.py compares them).
TITLE = "valkey-operator"
DESCRIPTION = "Kubernetes operator for sharded Valkey clusters with topology-aware placement"
# The project declares no repository URL yet; its API group's domain stands in.
DEFAULT_SOURCE = "https://valkey.rs"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# Go's names (GOARCH), which the OCI platform uses.
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


class BuildError(Exception):
    pass


def crate_metadata():
    """Version and license of the operator crate: the one source of the version."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    for package in json.loads(out)["packages"]:
        if package["name"] == PACKAGE:
            return package["version"], package["license"]
    raise BuildError(f"cargo metadata lists no package {PACKAGE!r}")


def binary_version(binary):
    out = subprocess.run([str(binary), "--version"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def shared_objects(binary):
    """The paths `ldd` resolves, the loader included (the vDSO has no file)."""
    out = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    paths = []
    for line in out.splitlines():
        words = line.split()
        if "not found" in line:
            raise BuildError(f"ldd {binary}: {line.strip()}")
        if "=>" in words:
            target = words[words.index("=>") + 1]
            if target.startswith("/"):
                paths.append(target)
        elif words and words[0].startswith("/"):
            paths.append(words[0])
    if not paths:
        raise BuildError(f"ldd {binary} lists no shared objects: a static binary needs another layout")
    return sorted(set(paths))


class Layer:
    """An uncompressed tar built entry by entry, parents before children."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.buffer = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buffer, mode="w", format=tarfile.USTAR_FORMAT)
        self.entries = {}

    def _info(self, name, kind, mode, owner):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.uid = info.gid = owner
        info.uname = info.gname = ""
        info.mtime = self.mtime
        return info

    def directory(self, path, mode=0o755, owner=0):
        self.entries[path.strip("/") + "/"] = ("dir", mode, owner, None)

    def file(self, path, data, mode=0o644, owner=0):
        self.entries[path.strip("/")] = ("file", mode, owner, data)

    def finish(self):
        # Every parent gets a directory entry (0755 root) unless given one.
        for name in list(self.entries):
            parts = name.rstrip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                parent = "/".join(parts[:i]) + "/"
                self.entries.setdefault(parent, ("dir", 0o755, 0, None))
        for name in sorted(self.entries):
            kind, mode, owner, data = self.entries[name]
            if kind == "dir":
                self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode, owner))
            else:
                info = self._info(name, tarfile.REGTYPE, mode, owner)
                info.size = len(data)
                self.tar.addfile(info, io.BytesIO(data))
        self.tar.close()
        return self.buffer.getvalue()


def stripped(binary, workdir):
    """The binary without its debug sections (line tables: 4/5 of its size).

    The symbol table stays, so backtraces still name functions, and so does
    the GNU build id, which ties the image's binary to target/release's.
    """
    out = Path(workdir) / "valkey-operator"
    subprocess.run(["strip", "--strip-debug", "-o", str(out), str(binary)], check=True)
    return out.read_bytes()


def gzipped(data):
    out = io.BytesIO()
    # mtime=0 and no file name: the compressed bytes depend on the content only.
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return out.getvalue()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def descriptor(media_type, blob, **extra):
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
            "size": len(blob), **extra}


def rootfs_layer(binary, mtime, workdir, path_in_image=BINARY_IN_IMAGE, extras=()):
    layer = Layer(mtime)
    layer.file(path_in_image, stripped(binary, workdir), mode=0o755)
    # Test images only (--extra): files beside the binary, e.g. a Valkey
    # module's .so where an init container copies it from. Executable:
    # valkey-server refuses a module without execute permission.
    for source, dest in extras:
        layer.file(dest, Path(source).read_bytes(), mode=0o755)
    for path in shared_objects(binary):
        # Stored as a regular file at the path ldd names, whatever symlinks the
        # build host has in between (merged /usr, /lib64): the loader path is
        # what the binary's PT_INTERP asks for, the rest is the loader's search path.
        real = Path(os.path.realpath(path))
        layer.file(path, real.read_bytes(), mode=real.stat().st_mode & 0o755)
    layer.file("/etc/passwd",
               b"root:x:0:0:root:/root:/sbin/nologin\n"
               b"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    layer.file("/etc/group", b"root:x:0:\nnonroot:x:65532:\n")
    layer.directory("/home/nonroot", mode=0o700, owner=NONROOT)
    layer.directory("/tmp", mode=0o1777)
    return layer.finish()


def archive(blobs, index, mtime):
    """The OCI layout as one tar: oci-layout, index.json, blobs/sha256/*."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        def add(name, data=None):
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            info.uname = info.gname = ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, len(data)
                tar.addfile(info, io.BytesIO(data))
        add("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add("index.json", canonical(index))
        add("blobs/")
        add("blobs/sha256/")
        for blob in sorted(blobs, key=lambda b: hashlib.sha256(b).hexdigest()):
            add("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob)
    return out.getvalue()


def build(args):
    started = time.monotonic()
    version, license_ = crate_metadata()
    binary = Path(args.binary)
    path_in_image = args.path_in_image
    # Another binary at another path is a test image (the e2e suites' fake
    # servers): it need not say the operator's version.
    said = binary_version(binary) if path_in_image == BINARY_IN_IMAGE else None
    if said is not None and said != f"valkey-operator {version}":
        raise BuildError(f"{binary} says {said!r} but the crate is {version}: "
                         f"rebuild it (make build) before the image")
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise BuildError(f"no OCI architecture name known for {machine}")
    arch = ARCHITECTURES[machine]
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    reference = f"{args.name}:{version}"

    with tempfile.TemporaryDirectory() as workdir:
        extras = [extra.split(":", 1) for extra in args.extra]
        if any(len(e) != 2 or not e[1].startswith("/") for e in extras):
            raise BuildError("--extra takes SOURCE:/absolute/path/in/image")
        tar = rootfs_layer(binary, mtime, workdir, path_in_image, extras)
    layer = gzipped(tar)
    labels = {
        "org.opencontainers.image.title": TITLE,
        "org.opencontainers.image.description": DESCRIPTION,
        "org.opencontainers.image.source": args.source,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.licenses": license_,
    }
    config = canonical({
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Entrypoint": [path_in_image],
            "Env": [PATH_ENV],
            "WorkingDir": "/home/nonroot",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created,
                     "created_by": f"scripts/image/build.py: valkey-operator {version} and its shared libraries"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": descriptor(MEDIA_CONFIG, config),
        "layers": [descriptor(MEDIA_LAYER, layer)],
    })
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [descriptor(MEDIA_MANIFEST, manifest,
                                 platform={"architecture": arch, "os": "linux"},
                                 annotations={
                                     # podman and skopeo name the image after ref.name,
                                     # containerd (ctr import, kind) after its own key.
                                     "org.opencontainers.image.ref.name": reference,
                                     "io.containerd.image.name": f"docker.io/library/{reference}",
                                 })],
    }

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{args.name}-{version}.oci.tar"
    partial = out.with_suffix(".tar.partial")
    partial.write_bytes(archive([config, manifest, layer], index, mtime))
    partial.replace(out)

    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    print(f"image {reference} ({arch}, manifest {manifest_digest})")
    print(f"  layer {len(layer) / 1e6:.1f} MB gzip ({len(tar) / 1e6:.1f} MB tar), "
          f"archive {out.stat().st_size / 1e6:.1f} MB, built in {time.monotonic() - started:.1f} s")
    print(f"  {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    print(reference)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Where cargo put it: CARGO_TARGET_DIR when set (relative to the
    # checkout, as cargo reads it from here), else target/.
    target = ROOT / os.environ.get("CARGO_TARGET_DIR", "target")
    parser.add_argument("--binary", default=str(target / "release/valkey-operator"))
    parser.add_argument("--name", default=os.environ.get("IMAGE_NAME") or "valkey-operator",
                        help="image name, the chart's image.repository (env IMAGE_NAME)")
    parser.add_argument("--out-dir", default=str(ROOT / "target/image"))
    parser.add_argument("--path-in-image", default=BINARY_IN_IMAGE,
                        help="where the binary goes in the image, its entrypoint; another path than "
                             "the default builds a test image (the binary's --version is not checked)")
    parser.add_argument("--extra", action="append", default=[], metavar="SOURCE:PATH",
                        help="a file to add to a test image at PATH (repeatable)")
    parser.add_argument("--source", default=os.environ.get("IMAGE_SOURCE") or DEFAULT_SOURCE,
                        help="org.opencontainers.image.source (env IMAGE_SOURCE)")
    args = parser.parse_args()
    try:
        build(args)
    except (BuildError, subprocess.CalledProcessError, OSError) as err:
        detail = getattr(err, "stderr", None)
        print(f"image: {err}" + (f"\n{detail.strip()}" if detail else ""), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
