# syntax=docker/dockerfile:1
# The valkey-operator image: `docker build -t valkey-operator:0.1.0 .` (or `podman build`).
# `make image` assembles the same image without a container daemon from the
# binary `make build` made (scripts/image/build.py); docs/image.md compares them.

# The toolchain the project is built and tested with; bookworm, so the binary
# links against the glibc of the final stage (Debian 12).
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# The registry and target caches survive between builds (BuildKit and buildah
# both honour cache mounts); the binary is copied out of the cache before the
# step ends. Debug sections (the release profile keeps line tables) are
# stripped as `make image` strips them: function names stay in backtraces.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p operator --bin valkey-operator \
    && strip --strip-debug -o /valkey-operator target/release/valkey-operator

# glibc, libgcc_s and CA certificates, no shell; user nonroot is 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
# The crate version (crates/operator/Cargo.toml, from the workspace);
# scripts/check-version.sh fails when this default disagrees with it.
ARG VERSION=0.1.0
ARG SOURCE=https://valkey.rs
LABEL org.opencontainers.image.title="valkey-operator" \
      org.opencontainers.image.description="Kubernetes operator for sharded Valkey clusters with topology-aware placement" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /valkey-operator /usr/local/bin/valkey-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/valkey-operator"]
