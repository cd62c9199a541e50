//! The integration tests of this crate, one test binary: each file under tests/ would be a
//! binary of its own that links every dependency again (docs/testing.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod hostile_server;
mod real_cluster;
