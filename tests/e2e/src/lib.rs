//! Support for end-to-end suites on the testbed.

pub mod cluster;
pub mod exporter;
pub mod helm;
pub mod hostile;
pub mod image;
pub mod manifest;
pub mod prometheus;
pub mod rbac;
pub mod release;
pub mod s3;
pub mod suite;
pub mod topology;
