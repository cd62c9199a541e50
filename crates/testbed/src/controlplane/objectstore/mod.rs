//! The object store: SeaweedFS (`weed server -s3`, master, volume server,
//! filer and S3 gateway in one process), an S3-compatible server for the
//! operator's backups, run by `up` on the host like CoreDNS.
//!
//! It listens on the testbed's host (fabric) address only, which the host and
//! every pod reach (the apiserver and CoreDNS are there too). Its ports are a
//! function of the testbed id ([`Ports::for_testbed`]), not chosen free like
//! the control plane's: `weed server` puts a unix socket per gRPC port in
//! `/tmp/seaweedfs-<service>-grpc-<port>.sock` (no flag moves it) and removes
//! whatever socket of that name is there when it starts, so two testbeds on the
//! same ports would steal each other's sockets. Ports distinct per id rule that
//! out; they sit below the kernel's ephemeral range, where the control plane's
//! free ports come from.
//!
//! `up` makes one access key (an `Admin` identity in the S3 configuration,
//! `DIR/s3/s3.json`, and nothing anonymous), waits until a signed request
//! creates the bucket (or finds it there), and `testbed s3-info` prints what a
//! client needs. Everything the store keeps is under `DIR/s3/`.

pub mod sigv4;

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// SeaweedFS's own version (`weed version`) of the pinned module
/// (crates/testbed/go/seaweedfs); names the folder of the cached binary.
pub const SEAWEEDFS_VERSION: &str = "4.53";
/// The bucket `up` creates.
pub const BUCKET: &str = "valkey-backups";
/// The region requests are signed for (SeaweedFS accepts any).
pub const REGION: &str = "us-east-1";
/// First port of testbed 1's block; each testbed gets [`PORTS_PER_TESTBED`].
const PORT_BASE: u16 = 20_000;
const PORTS_PER_TESTBED: u16 = 10;
/// The identity's name in the S3 configuration.
const IDENTITY: &str = "testbed";
/// `weed`'s environment: a soft heap limit for Go's collector. Idle, the
/// store's heap is about 30 MB; without a limit one large single-part upload
/// leaves it holding about twice the object's size until the scavenger
/// returns it. The limit is far above what multipart uploads of test data
/// need, so it costs no collector CPU there.
pub const ENV: [(&str, &str); 1] = [("GOMEMLIMIT", "512MiB")];

/// Errors of the object store's files and requests.
#[derive(Debug, thiserror::Error)]
pub enum ObjectStoreError {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no testbed in {dir} ({detail}): run `testbed up`")]
    NoTestbed { dir: PathBuf, detail: String },
    #[error("reading {path}: {detail} (is the testbed up? run `testbed up`)")]
    Read { path: PathBuf, detail: String },
    #[error("making credentials: the system's random source failed")]
    Random,
}

/// The store's listeners, all on the host address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    pub s3: u16,
    pub master: u16,
    pub volume: u16,
    pub filer: u16,
    pub s3_grpc: u16,
    pub master_grpc: u16,
    pub volume_grpc: u16,
    pub filer_grpc: u16,
}

impl Ports {
    /// Testbed `id`'s block: `20000 + 10 * id` and up (ids are at most 150,
    /// so the last block ends at 21509).
    pub fn for_testbed(id: u8) -> Self {
        let base = PORT_BASE + PORTS_PER_TESTBED * u16::from(id);
        Self {
            s3: base,
            master: base + 1,
            volume: base + 2,
            filer: base + 3,
            s3_grpc: base + 5,
            master_grpc: base + 6,
            volume_grpc: base + 7,
            filer_grpc: base + 8,
        }
    }
}

/// Where the store keeps everything: `DIR/s3/`.
pub fn store_dir(dir: &Path) -> PathBuf {
    dir.join("s3")
}

/// Volumes, the master's metadata and the filer's store.
pub fn data_dir(dir: &Path) -> PathBuf {
    store_dir(dir).join("data")
}

/// The S3 identity configuration `weed` reads (`-s3.config`).
pub fn config_path(dir: &Path) -> PathBuf {
    store_dir(dir).join("s3.json")
}

/// One access key and its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl Credentials {
    /// A fresh pair from the system's random source: a 20-character access
    /// key of upper-case letters and digits, as AWS's look, and a 40-character
    /// hex secret.
    pub fn generate() -> Result<Self, ObjectStoreError> {
        use ring::rand::SecureRandom;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        let rng = ring::rand::SystemRandom::new();
        let mut key = [0u8; 18];
        let mut secret = [0u8; 20];
        rng.fill(&mut key)
            .and_then(|()| rng.fill(&mut secret))
            .map_err(|_| ObjectStoreError::Random)?;
        let suffix: String = key
            .iter()
            .map(|b| char::from(ALPHABET[usize::from(b % 32)]))
            .collect();
        Ok(Self {
            access_key: format!("VK{suffix}"),
            secret_key: secret.iter().map(|b| format!("{b:02x}")).collect(),
        })
    }
}

/// The S3 configuration: one identity with every action on every bucket. No
/// `anonymous` identity, so an unsigned or wrongly signed request is refused.
pub fn s3_config(c: &Credentials) -> String {
    let config = serde_json::json!({
        "identities": [{
            "name": IDENTITY,
            "credentials": [{"accessKey": c.access_key, "secretKey": c.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }],
    });
    serde_json::to_string_pretty(&config).unwrap_or_default()
}

/// The credentials in a configuration written by [`s3_config`].
pub fn parse_s3_config(text: &str) -> Option<Credentials> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let c = v.get("identities")?.get(0)?.get("credentials")?.get(0)?;
    Some(Credentials {
        access_key: c.get("accessKey")?.as_str()?.to_string(),
        secret_key: c.get("secretKey")?.as_str()?.to_string(),
    })
}

/// The credentials of the store at `dir`, made (and written, owner-only)
/// when there are none yet; a running store keeps its key across `up`s.
pub fn ensure_credentials(dir: &Path) -> Result<Credentials, ObjectStoreError> {
    let path = config_path(dir);
    if let Some(c) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| parse_s3_config(&t))
    {
        return Ok(c);
    }
    let creds = Credentials::generate()?;
    write_private(&path, &s3_config(&creds))?;
    Ok(creds)
}

fn write_private(path: &Path, text: &str) -> Result<(), ObjectStoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let write = || -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(text.as_bytes())
    };
    write().map_err(|source| ObjectStoreError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// `weed server`'s command line: master, volume server, filer and S3 gateway
/// in one process, bound to `host_ip` only.
pub fn args(dir: &Path, host_ip: &str, p: &Ports) -> Vec<String> {
    let flag = |name: &str, value: &dyn std::fmt::Display| format!("-{name}={value}");
    vec![
        "server".into(),
        flag("ip", &host_ip),
        // Without -ip.bind every service also listens on localhost, where
        // testbeds would collide.
        flag("ip.bind", &host_ip),
        flag("dir", &data_dir(dir).display()),
        flag("master.port", &p.master),
        flag("master.port.grpc", &p.master_grpc),
        // One master, no quorum: with its raft state from an earlier run it
        // elects itself at once instead of after the 10 s election timeout.
        flag("master.peers", &"none"),
        // Nothing leaves the machine: no usage report.
        flag("master.telemetry", &false),
        // 64 MB volumes (the stock 30 GB is a real disk's size) grown from
        // sparse files; backups of test data are small.
        flag("master.volumeSizeLimitMB", &64),
        flag("volume.port", &p.volume),
        flag("volume.port.grpc", &p.volume_grpc),
        // As many volumes as the disk holds, so a large backup never meets a
        // "no writable volume" that no real store would give.
        flag("volume.max", &0),
        // Stock is 10 s of draining before exit; nothing to drain here, and
        // `down` would wait for it.
        flag("volume.preStopSeconds", &0),
        flag("filer.port", &p.filer),
        flag("filer.port.grpc", &p.filer_grpc),
        "-s3".into(),
        flag("s3.port", &p.s3),
        flag("s3.port.grpc", &p.s3_grpc),
        flag("s3.config", &config_path(dir).display()),
        // A missing bucket is an error, as on S3 (the stock gateway makes it
        // on the first upload by an admin).
        flag("s3.autoCreateBucket", &false),
        // Not needed, and their stock ports (8181, 9101) would collide:
        // CoreDNS's readiness is 8181 on the same address.
        flag("s3.port.iceberg", &0),
        flag("s3.port.lance", &0),
        flag("s3.iam", &false),
    ]
}

/// The unix sockets `weed server` makes in `/tmp` for these ports (see the
/// module doc); `down` removes them.
pub fn tmp_sockets(p: &Ports) -> Vec<PathBuf> {
    let mut out = vec![
        PathBuf::from(format!("/tmp/seaweedfs-s3-{}.sock", p.s3)),
        PathBuf::from(format!("/tmp/seaweedfs-filer-{}.sock", p.filer)),
    ];
    for (name, port) in [
        ("master", p.master_grpc),
        ("volume", p.volume_grpc),
        ("filer", p.filer_grpc),
        ("s3", p.s3_grpc),
    ] {
        out.push(PathBuf::from(format!(
            "/tmp/seaweedfs-{name}-grpc-{port}.sock"
        )));
    }
    out
}

/// What `testbed s3-info` prints: all a client needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    pub bucket: String,
}

/// The store's [`Info`] for testbed `id` at host address `host_ip`.
pub fn info(id: u8, host_ip: &str, creds: &Credentials) -> Info {
    Info {
        endpoint: format!("http://{host_ip}:{}", Ports::for_testbed(id).s3),
        access_key: creds.access_key.clone(),
        secret_key: creds.secret_key.clone(),
        bucket: BUCKET.into(),
    }
}

/// The [`Info`] of the testbed at `dir`, from its state and S3 configuration.
pub fn load_info(dir: &Path) -> Result<Info, ObjectStoreError> {
    let state = crate::state::TestbedState::load(dir).map_err(|e| ObjectStoreError::NoTestbed {
        dir: dir.to_path_buf(),
        detail: e.to_string(),
    })?;
    let path = config_path(dir);
    let creds = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| parse_s3_config(&t).ok_or_else(|| "no credentials in it".to_string()))
        .map_err(|detail| ObjectStoreError::Read {
            path: path.clone(),
            detail,
        })?;
    Ok(info(state.id, &state.host_ip, &creds))
}

/// An S3 answer: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// Sends one signed, path-style request (`path` URI-encoded) with `body` to
/// the store at `host:port`, over one HTTP/1.1 connection.
pub fn request(
    addr: SocketAddr,
    creds: &Credentials,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<Answer> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let amz_date = sigv4::amz_date(now);
    let host = addr.to_string();
    let payload = sigv4::payload_hash(body);
    let auth = sigv4::authorization(
        &sigv4::Signer {
            access_key: &creds.access_key,
            secret_key: &creds.secret_key,
            region: REGION,
        },
        &sigv4::Request {
            method,
            host: &host,
            path,
            query: "",
            headers: &[],
            payload_sha256: &payload,
            amz_date: &amz_date,
        },
    );
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n\
         x-amz-content-sha256: {payload}\r\nx-amz-date: {amz_date}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_answer(&raw).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(80)])
            ),
        )
    })
}

/// Status and body of a raw HTTP/1.x answer (the body as sent: requests here
/// are small and their answers are not chunked, or only read for errors).
pub fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .strip_prefix("HTTP/1.")?
        .get(2..)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some(Answer { status, body })
}

/// Whether an answer to creating the bucket means the bucket is there and
/// ours: created (200), or already ours (409 BucketAlreadyOwnedByYou).
pub fn bucket_is_ours(a: &Answer) -> bool {
    a.status == 200 || (a.status == 409 && a.body.contains("BucketAlreadyOwnedByYou"))
}

/// Creates the bucket (or finds it ours) with a signed request, which also
/// shows that the gateway is up and takes the credentials. `Err` says what
/// the store answered instead, for the message when `up` gives up.
pub fn ensure_bucket(host_ip: &str, id: u8, creds: &Credentials) -> Result<(), String> {
    let port = Ports::for_testbed(id).s3;
    let addr: SocketAddr = format!("{host_ip}:{port}")
        .parse()
        .map_err(|e| format!("address {host_ip}:{port}: {e}"))?;
    let path = format!("/{BUCKET}");
    match request(addr, creds, "PUT", &path, b"") {
        Ok(a) if bucket_is_ours(&a) => Ok(()),
        Ok(a) => Err(format!(
            "PUT {path} answered {}: {}",
            a.status,
            a.body.chars().take(300).collect::<String>()
        )),
        Err(e) => Err(format!("PUT {path} on {addr}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            access_key: "VKABCDEFGHIJKLMNOPQR".into(),
            secret_key: "00112233445566778899aabbccddeeff00112233".into(),
        }
    }

    fn all(p: &Ports) -> [u16; 8] {
        [
            p.s3,
            p.master,
            p.volume,
            p.filer,
            p.s3_grpc,
            p.master_grpc,
            p.volume_grpc,
            p.filer_grpc,
        ]
    }

    #[test]
    fn every_testbed_gets_its_own_block_of_ports_below_the_ephemeral_range() {
        // Distinct within a testbed and across all 150.
        let mut seen = std::collections::BTreeSet::new();
        for id in 1..=150u8 {
            let p = Ports::for_testbed(id);
            for port in all(&p) {
                assert!(seen.insert(port), "port {port} of testbed {id} reused");
                // Linux's ip_local_port_range starts at 32768.
                assert!(port < 32_768);
                // CoreDNS's 53, 8080 and 8181 on the same address.
                assert!(![53, 8080, 8181].contains(&port));
            }
        }
        assert_eq!(Ports::for_testbed(1).s3, 20_010);
    }

    #[test]
    fn the_command_line_binds_the_host_address_and_names_the_testbed_dir() {
        let p = Ports::for_testbed(3);
        let a = args(Path::new("/tb"), "10.103.255.1", &p);
        assert_eq!(a[0], "server");
        assert!(a.contains(&"-ip.bind=10.103.255.1".to_string()));
        assert!(a.contains(&"-s3".to_string()));
        assert!(a.contains(&"-s3.port=20030".to_string()));
        assert!(a.contains(&"-s3.config=/tb/s3/s3.json".to_string()));
        assert!(a.contains(&"-dir=/tb/s3/data".to_string()));
        assert!(a.contains(&"-master.telemetry=false".to_string()));
        assert!(a.contains(&"-s3.autoCreateBucket=false".to_string()));
        // Every listener's port is set, from the testbed's block.
        for (flag, port) in [
            ("master.port", p.master),
            ("master.port.grpc", p.master_grpc),
            ("volume.port", p.volume),
            ("volume.port.grpc", p.volume_grpc),
            ("filer.port", p.filer),
            ("filer.port.grpc", p.filer_grpc),
            ("s3.port.grpc", p.s3_grpc),
        ] {
            assert!(a.contains(&format!("-{flag}={port}")), "{flag}");
        }
        // `down` and `status` recognise the process by its directory.
        assert!(
            a.iter()
                .any(|x| super::super::process::mentions_dir(x, "/tb"))
        );
    }

    #[test]
    fn the_s3_config_has_one_admin_identity_and_no_anonymous_one() {
        let text = s3_config(&creds());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ids = v["identities"].as_array().unwrap();
        assert_eq!(ids.len(), 1);
        assert_ne!(ids[0]["name"], "anonymous");
        assert!(
            ids[0]["actions"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!("Admin"))
        );
        assert_eq!(parse_s3_config(&text), Some(creds()));
        assert_eq!(parse_s3_config("{}"), None);
        assert_eq!(parse_s3_config("not json"), None);
    }

    #[test]
    fn generated_credentials_look_like_aws_keys_and_differ() {
        let a = Credentials::generate().unwrap();
        let b = Credentials::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.access_key.len(), 20);
        assert!(
            a.access_key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        );
        assert_eq!(a.secret_key.len(), 40);
    }

    #[test]
    fn credentials_are_made_once_and_kept_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("testbed-s3-creds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = ensure_credentials(&dir).unwrap();
        assert_eq!(ensure_credentials(&dir).unwrap(), first);
        let mode = std::fs::metadata(config_path(&dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn info_names_the_s3_port_on_the_host_address() {
        let i = info(2, "10.102.255.1", &creds());
        assert_eq!(i.endpoint, "http://10.102.255.1:20020");
        assert_eq!(i.bucket, "valkey-backups");
        let json = serde_json::to_value(&i).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["accessKey", "bucket", "endpoint", "secretKey"]);
    }

    #[test]
    fn answers_are_parsed_and_only_ours_counts_as_the_bucket_being_there() {
        let ok = parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(ok.status, 200);
        assert!(bucket_is_ours(&ok));
        let mine = parse_answer(
            b"HTTP/1.1 409 Conflict\r\n\r\n<Error><Code>BucketAlreadyOwnedByYou</Code></Error>",
        )
        .unwrap();
        assert!(bucket_is_ours(&mine));
        let theirs = parse_answer(
            b"HTTP/1.1 409 Conflict\r\n\r\n<Error><Code>BucketAlreadyExists</Code></Error>",
        )
        .unwrap();
        assert!(!bucket_is_ours(&theirs));
        let denied = parse_answer(b"HTTP/1.1 403 Forbidden\r\n\r\n<Error/>").unwrap();
        assert_eq!(denied.status, 403);
        assert!(!bucket_is_ours(&denied));
        assert_eq!(parse_answer(b"garbage"), None);
        assert_eq!(parse_answer(b""), None);
    }

    #[test]
    fn s3_info_without_a_testbed_or_its_key_says_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("testbed-s3-info-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let err = load_info(&dir).unwrap_err();
        assert!(matches!(err, ObjectStoreError::NoTestbed { .. }), "{err}");
        assert!(err.to_string().contains("run `testbed up`"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_tmp_sockets_are_named_by_this_testbeds_ports() {
        let p = Ports::for_testbed(4);
        let socks = tmp_sockets(&p);
        assert!(socks.contains(&PathBuf::from("/tmp/seaweedfs-master-grpc-20046.sock")));
        assert!(socks.contains(&PathBuf::from("/tmp/seaweedfs-s3-20040.sock")));
        assert_eq!(socks.len(), 6);
    }
}
