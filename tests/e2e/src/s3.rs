//! The testbed's object store seen from the host: signed GETs and PUTs with
//! curl (SigV4), from the JSON `testbed s3-info` prints.

use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// A string field of `v` (empty when absent).
pub fn field(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

fn url(s3: &Value, key: &str) -> String {
    format!("{}/{}/{key}", field(s3, "endpoint"), field(s3, "bucket"))
}

fn user(s3: &Value) -> String {
    format!("{}:{}", field(s3, "accessKey"), field(s3, "secretKey"))
}

fn status(out: &std::process::Output, what: &str) -> Result<u16> {
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| format!("curl {what}: {out:?}"))
}

/// GETs `key` from the bucket into `to`; the HTTP status.
pub fn get(s3: &Value, key: &str, to: &Path) -> Result<u16> {
    let url = url(s3, key);
    let out = Command::new("curl")
        .args(["-s", "-o"])
        .arg(to)
        .args(["-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3"])
        .args(["--user", &user(s3)])
        .arg(&url)
        .output()
        .context("curl")?;
    status(&out, &format!("GET {url}"))
}

/// PUTs the file `body` as `key` (one request, payload unsigned); the HTTP
/// status.
pub fn put(s3: &Value, key: &str, body: &Path) -> Result<u16> {
    let url = url(s3, key);
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-T"])
        .arg(body)
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", &user(s3)])
        .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .arg(&url)
        .output()
        .context("curl")?;
    status(&out, &format!("PUT {url}"))
}
