// Over 600 lines: 530 lines of code; the rest are its unit tests, kept beside it.
//! `valkey-operator backup`: takes one backup of a cluster and exits; the
//! ValkeyBackup controller runs it as a Job (see `job`).
//!
//! 1. the bucket is listed first, so wrong credentials or a missing bucket fail
//!    before any member is asked for anything;
//! 2. CLUSTER SHARDS on a member says which shards serve which slots; for each,
//!    an online replica is preferred (its snapshot costs the primary nothing),
//!    the primary otherwise (a fork; its writes go on);
//! 3. each shard's RDB is streamed over the replication protocol
//!    (`valkey_client::replication`) into a multipart upload, hashed on the way;
//! 4. `manifest.json` is written last: a backup without one is not complete.
//!
//! The outcome goes to stdout and to the termination message the controller
//! reads (`/dev/termination-log`).

use super::manifest::{self, Manifest, ShardEntry};
use super::store::{self, S3Settings};
use api::v1alpha1::backup_folder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use valkey::parse::{NodeHealth, NodeId, Role};
use valkey_client::client::{Admin, ConnectOptions, ValkeyAdmin};
use valkey_client::replication::{self, RdbSink};

/// Where the Job's container tells the controller how it ended.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// `valkey-operator backup` arguments.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// Namespace of the cluster and the ValkeyBackup.
    #[arg(long)]
    pub namespace: String,
    /// The ValkeyCluster.
    #[arg(long)]
    pub cluster: String,
    /// The ValkeyBackup (names the folder in the bucket).
    #[arg(long)]
    pub name: String,
    /// Where to ask for the cluster's shards, `host:port`: the cluster's
    /// headless Service, every member; each address is tried in turn.
    #[arg(long)]
    pub seed: String,
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub bucket: String,
    #[arg(long, default_value = "")]
    pub prefix: String,
    #[arg(long)]
    pub region: Option<String>,
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    pub access_key_id: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub secret_access_key: String,
    /// The password of the members' `valkey-replication` user (from
    /// `<cluster>-users`); unset: no login.
    #[arg(long, env = "VALKEY_REPLICATION_PASSWORD", hide_env_values = true)]
    pub replication_password: Option<String>,
    /// With TLS: the CA (PEM) the members' certificates chain to.
    #[arg(long)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Seconds without a byte from a member before its snapshot is given up.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Where to write the outcome for the controller.
    #[arg(long, default_value = TERMINATION_LOG)]
    pub termination_log: std::path::PathBuf,
}

/// What a finished backup reports (the termination message, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// Key of the manifest, when the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    #[serde(default)]
    pub size_bytes: u64,
    #[serde(default)]
    pub shards: u32,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a backup failed, in words for the ValkeyBackup's status.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("building the S3 client for {endpoint}: {source}")]
    Store {
        endpoint: String,
        source: object_store::Error,
    },
    #[error(
        "bucket {bucket} at {endpoint} cannot be listed (wrong credentials or no such bucket?): {source}"
    )]
    Bucket {
        bucket: String,
        endpoint: String,
        source: object_store::Error,
    },
    #[error("reading the TLS CA {path}: {detail}")]
    TlsCa { path: String, detail: String },
    #[error("resolving the cluster's address {seed}: {detail}")]
    Resolve { seed: String, detail: String },
    #[error("asking {seed} for the cluster's shards: {detail}")]
    Shards { seed: String, detail: String },
    #[error("the cluster serves no slot: nothing to back up")]
    NoShards,
    #[error("shard {shard} (slots {slots}) has no online member to take its snapshot from")]
    NoSource { shard: usize, slots: String },
    #[error("shard {shard}: taking the snapshot: {source}")]
    Snapshot {
        shard: usize,
        source: replication::SyncError,
    },
    #[error("shard {shard}: uploading {key}: {source}")]
    Upload {
        shard: usize,
        key: String,
        source: object_store::Error,
    },
    #[error("writing the manifest {key}: {source}")]
    Manifest {
        key: String,
        source: object_store::Error,
    },
}

/// Runs the command; exit 0 when the backup completed.
pub async fn main(args: BackupArgs) -> ExitCode {
    let outcome = match backup(&args).await {
        Ok(o) => o,
        Err(e) => Outcome {
            manifest: None,
            size_bytes: 0,
            shards: 0,
            error: Some(e.to_string()),
        },
    };
    let json = serde_json::to_string(&outcome).unwrap_or_default();
    println!("{json}");
    // Best effort: outside a pod there is no termination log.
    let _ = std::fs::write(&args.termination_log, truncate(&json, 4000));
    if outcome.error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The size of each part of a shard's multipart upload.
const PART_BYTES: usize = 16 << 20;
/// Parts uploading at once: with [`PART_BYTES`], at most 64 MiB of a
/// snapshot is in memory (one part filling, three in flight).
const PARTS_IN_FLIGHT: usize = 3;

/// Streams into a multipart upload and hashes on the way. At most
/// [`PARTS_IN_FLIGHT`] parts are in flight and one fills.
struct Upload {
    writer: Option<WriteMultipart>,
    sha: Sha256,
    bytes: u64,
}

impl RdbSink for Upload {
    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the upload was closed"))?;
        writer
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(std::io::Error::other)?;
        writer.write(bytes);
        self.sha.update(bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A shard to back up: its slots and the nodes to take it from, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub slots: Vec<[u16; 2]>,
    /// `(ip, port, is a replica)` of each online node: replicas first (their
    /// fork costs the primary nothing), the primary last. A snapshot that
    /// breaks off (the node died or stopped answering) is taken again from the
    /// next one.
    pub nodes: Vec<(IpAddr, u16, bool)>,
}

/// Each slot-serving shard's sources, shards in the order of their first slot.
/// A node whose pod address is known (`pods`: node id -> the address its pod
/// answered at, from the headless Service) is read there, whatever address
/// it announces (with external access, a load balancer's, which may send the
/// snapshot out of the cluster and back, or refuse it).
pub fn sources(
    shards: &[valkey::parse::ClusterShard],
    pods: &BTreeMap<NodeId, SocketAddr>,
) -> Vec<Source> {
    let mut out: Vec<Source> = shards
        .iter()
        .filter(|s| !s.slots.ranges().is_empty())
        .map(|s| {
            let slots = s
                .slots
                .ranges()
                .iter()
                .map(|r| [r.start().get(), r.end().get()])
                .collect();
            let online = |role: Role| {
                s.nodes
                    .iter()
                    .filter(move |n| n.role == role && n.health == NodeHealth::Online)
                    .filter_map(move |n| {
                        if let Some(pod) = pods.get(&n.id) {
                            return Some((pod.ip(), pod.port(), role == Role::Replica));
                        }
                        let ip: IpAddr = n.ip.as_deref()?.parse().ok()?;
                        let port = n.tls_port.or(n.port)?;
                        Some((ip, port, role == Role::Replica))
                    })
            };
            Source {
                slots,
                nodes: online(Role::Replica).chain(online(Role::Primary)).collect(),
            }
        })
        .collect();
    out.sort_by_key(|s| s.slots.first().map(|r| r[0]));
    out
}

fn slots_text(slots: &[[u16; 2]]) -> String {
    slots
        .iter()
        .map(|[a, b]| format!("{a}-{b}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// How long one member may take to answer the shard discovery before the
/// next is asked: a stopped or partitioned member must not stall the backup.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster's shards and Valkey version, from the first of `seeds` (every
/// member, from the headless Service) that answers within
/// [`DISCOVERY_TIMEOUT`]; the error names what each one said.
async fn discover(
    seeds: &[SocketAddr],
    opts: &ConnectOptions,
    timeout: Duration,
) -> Result<(Vec<valkey::parse::ClusterShard>, String), String> {
    let quick = timeout.min(DISCOVERY_TIMEOUT);
    let opts = ConnectOptions {
        connect_timeout: quick,
        command_timeout: quick,
        ..opts.clone()
    };
    let mut failures = Vec::new();
    for seed in seeds {
        eprintln!("asking {seed} for the cluster's shards");
        let asked = async {
            let admin = ValkeyAdmin::connect(seed.ip(), seed.port(), &opts)
                .await
                .map_err(|e| e.to_string())?;
            let shards = admin.cluster_shards().await.map_err(|e| e.to_string())?;
            let version = admin
                .info("server")
                .await
                .ok()
                .and_then(|i| {
                    i.get("valkey_version")
                        .or_else(|| i.get("redis_version"))
                        .map(str::to_string)
                })
                .unwrap_or_default();
            Ok::<_, String>((shards, version))
        };
        match asked.await {
            Ok(found) => return Ok(found),
            Err(e) => {
                eprintln!("{seed} did not answer ({e}); the next member is asked");
                failures.push(format!("{seed}: {e}"));
            }
        }
    }
    Err(failures.join("; "))
}

/// The node id of every member that answers at its pod address (`seeds`,
/// from the headless Service), all asked at once; a member that does not
/// answer within [`DISCOVERY_TIMEOUT`] is left out (read at the address it
/// announces, if at all).
async fn pod_addresses(
    seeds: &[SocketAddr],
    opts: &ConnectOptions,
    timeout: Duration,
) -> BTreeMap<NodeId, SocketAddr> {
    let quick = timeout.min(DISCOVERY_TIMEOUT);
    let opts = ConnectOptions {
        connect_timeout: quick,
        command_timeout: quick,
        ..opts.clone()
    };
    let asked = futures::future::join_all(seeds.iter().map(|seed| {
        let opts = &opts;
        async move {
            let admin = ValkeyAdmin::connect(seed.ip(), seed.port(), opts)
                .await
                .ok()?;
            let id = admin.cluster_myid().await.ok()?;
            Some((id, *seed))
        }
    }))
    .await;
    asked.into_iter().flatten().collect()
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn backup(args: &BackupArgs) -> Result<Outcome, BackupError> {
    let start_time = k8s_openapi::jiff::Timestamp::now().to_string();
    let settings = S3Settings {
        endpoint: args.endpoint.clone(),
        bucket: args.bucket.clone(),
        region: args.region.clone(),
        access_key_id: args.access_key_id.clone(),
        secret_access_key: args.secret_access_key.clone(),
    };
    let store = store::s3(&settings).map_err(|source| BackupError::Store {
        endpoint: args.endpoint.clone(),
        source,
    })?;
    let folder = backup_folder(&args.prefix, &args.namespace, &args.name);
    store
        .list_with_delimiter(Some(&Path::from(folder.as_str())))
        .await
        .map_err(|source| BackupError::Bucket {
            bucket: args.bucket.clone(),
            endpoint: args.endpoint.clone(),
            source,
        })?;

    let timeout = Duration::from_secs(args.idle_seconds.max(1));
    let seeds: Vec<SocketAddr> = tokio::net::lookup_host(&args.seed)
        .await
        .map_err(|e| BackupError::Resolve {
            seed: args.seed.clone(),
            detail: e.to_string(),
        })?
        .collect();
    if seeds.is_empty() {
        return Err(BackupError::Resolve {
            seed: args.seed.clone(),
            detail: "no address".into(),
        });
    }
    let login = args
        .replication_password
        .as_deref()
        .filter(|p| !p.is_empty())
        .map(|p| ("valkey-replication", p));
    let tls_ca = match &args.tls_ca_file {
        Some(path) => Some(std::fs::read(path).map_err(|e| BackupError::TlsCa {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?),
        None => None,
    };
    let opts = ConnectOptions {
        username: login.map(|(u, _)| u.to_string()),
        password: login.map(|(_, p)| p.to_string()),
        connect_timeout: timeout,
        command_timeout: timeout,
        tls_ca_pem: tls_ca.clone(),
        previous_password: None,
        tls_identity: None,
        plaintext: Default::default(),
        own_login: None,
    };
    let (shards, valkey_version) =
        discover(&seeds, &opts, timeout)
            .await
            .map_err(|detail| BackupError::Shards {
                seed: args.seed.clone(),
                detail,
            })?;

    let pods = pod_addresses(&seeds, &opts, timeout).await;
    let sources = sources(&shards, &pods);
    if sources.is_empty() {
        return Err(BackupError::NoShards);
    }
    let mut entries = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        if source.nodes.is_empty() {
            return Err(BackupError::NoSource {
                shard: index,
                slots: slots_text(&source.slots),
            });
        }
        let object = manifest::shard_object(index);
        let key = format!("{folder}/{object}");
        let mut last_error = None;
        for &(ip, port, from_replica) in &source.nodes {
            let role = if from_replica { "replica" } else { "primary" };
            eprintln!("shard {index}: taking the snapshot from the {role} {ip}:{port}");
            let started = std::time::Instant::now();
            let taken = match take_shard(
                &*store,
                &key,
                (ip, port),
                tls_ca.as_deref(),
                login,
                timeout,
            )
            .await
            {
                Ok(taken) => taken,
                Err(ShardError::Upload(source)) => {
                    return Err(BackupError::Upload {
                        shard: index,
                        key,
                        source,
                    });
                }
                Err(ShardError::Snapshot(source)) => {
                    eprintln!(
                        "shard {index}: the snapshot from {ip}:{port} broke off ({source}); \
                         its upload was aborted and the next member is asked"
                    );
                    last_error = Some(BackupError::Snapshot {
                        shard: index,
                        source,
                    });
                    continue;
                }
            };
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "shard {index}: {} bytes in {secs:.1} s ({:.0} MB/s)",
                taken.bytes,
                taken.bytes as f64 / 1e6 / secs.max(1e-6)
            );
            entries.push(ShardEntry {
                index,
                slots: source.slots.clone(),
                object: object.clone(),
                size_bytes: taken.bytes,
                sha256: taken.sha256,
                source_node: format!("{ip}:{port}"),
                from_replica,
            });
            last_error = None;
            break;
        }
        if let Some(e) = last_error {
            return Err(e);
        }
    }
    let manifest = Manifest {
        format_version: manifest::FORMAT_VERSION,
        namespace: args.namespace.clone(),
        cluster: args.cluster.clone(),
        backup: args.name.clone(),
        valkey_version,
        start_time,
        completion_time: k8s_openapi::jiff::Timestamp::now().to_string(),
        shards: entries,
    };
    let key = format!("{folder}/{}", manifest::MANIFEST);
    let body = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    store
        .put(&Path::from(key.as_str()), PutPayload::from(body))
        .await
        .map_err(|source| BackupError::Manifest {
            key: key.clone(),
            source,
        })?;
    Ok(Outcome {
        manifest: Some(key),
        size_bytes: manifest.size_bytes(),
        shards: u32::try_from(manifest.shards.len()).unwrap_or(u32::MAX),
        error: None,
    })
}

/// One shard's object as uploaded.
struct Taken {
    bytes: u64,
    sha256: String,
}

enum ShardError {
    /// The member's snapshot failed or broke off: another member may do.
    Snapshot(replication::SyncError),
    /// The store refused: another member would not help.
    Upload(object_store::Error),
}

/// Streams the snapshot of the node at `addr` into a multipart upload of
/// `key`; a snapshot that breaks off aborts the upload, so no part of it
/// stays in the store.
async fn take_shard(
    store: &dyn ObjectStore,
    key: &str,
    (ip, port): (IpAddr, u16),
    tls_ca: Option<&[u8]>,
    login: Option<(&str, &str)>,
    timeout: Duration,
) -> Result<Taken, ShardError> {
    let upload = store
        .put_multipart(&Path::from(key))
        .await
        .map_err(ShardError::Upload)?;
    let mut sink = Upload {
        writer: Some(WriteMultipart::new_with_chunk_size(upload, PART_BYTES)),
        sha: Sha256::new(),
        bytes: 0,
    };
    let taken = replication::take_rdb(ip, port, tls_ca, login, timeout, &mut sink).await;
    match (taken, sink.writer.take()) {
        (Ok(_), Some(writer)) => {
            writer.finish().await.map_err(ShardError::Upload)?;
            Ok(Taken {
                bytes: sink.bytes,
                sha256: hex(&sink.sha.finalize()),
            })
        }
        (Err(e), writer) => {
            if let Some(w) = writer {
                let _ = w.abort().await;
            }
            Err(ShardError::Snapshot(e))
        }
        (Ok(_), None) => Err(ShardError::Upload(object_store::Error::Generic {
            store: "S3",
            source: "the upload was closed".into(),
        })),
    }
}

/// Keeps the store type in one place for the callers that only list.
pub type Store = Arc<dyn ObjectStore>;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A member that accepts the connection and never answers (stopped, or
    /// behind a Service that still routes to it) costs the discovery its
    /// short timeout, then the next address is asked; the error names each.
    #[tokio::test]
    async fn a_silent_seed_is_given_up_and_the_next_asked() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let seeds = [silent.local_addr().unwrap(), closed.local_addr().unwrap()];
        drop(closed);
        let started = std::time::Instant::now();
        let error = discover(
            &seeds,
            &ConnectOptions::default(),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "{error}");
        assert!(
            error.contains(&seeds[0].to_string()) && error.contains(&seeds[1].to_string()),
            "{error}"
        );
        drop(silent);
    }

    #[test]
    fn the_termination_message_is_cut_at_a_character_boundary() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }

    fn node(n: u8, role: Role, health: NodeHealth) -> valkey::parse::ShardNode {
        valkey::parse::ShardNode {
            id: format!("{n:040x}").parse().unwrap(),
            ip: Some(format!("10.0.0.{n}")),
            endpoint: None,
            hostname: None,
            port: Some(6379),
            tls_port: None,
            role,
            replication_offset: 0,
            health,
            availability_zone: None,
        }
    }

    #[test]
    fn online_replicas_come_first_then_the_primary_and_failed_nodes_never() {
        let slots = |a: &str| valkey::slots::SlotSet::from_ranges([a.parse().unwrap()]);
        let shards = [
            valkey::parse::ClusterShard {
                id: None,
                slots: slots("8192-16383"),
                nodes: vec![node(3, Role::Primary, NodeHealth::Online)],
            },
            valkey::parse::ClusterShard {
                id: None,
                slots: slots("0-8191"),
                nodes: vec![
                    node(1, Role::Primary, NodeHealth::Online),
                    node(2, Role::Replica, NodeHealth::Failed),
                    node(4, Role::Replica, NodeHealth::Online),
                ],
            },
        ];
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        assert_eq!(
            sources(&shards, &BTreeMap::new()),
            vec![
                Source {
                    slots: vec![[0, 8191]],
                    nodes: vec![(ip(4), 6379, true), (ip(1), 6379, false)],
                },
                Source {
                    slots: vec![[8192, 16383]],
                    nodes: vec![(ip(3), 6379, false)],
                },
            ]
        );
    }

    #[test]
    fn a_member_is_read_at_its_pod_address_not_the_one_it_announces() {
        // Announced: a load balancer's address and port (external access).
        let mut announced = node(1, Role::Primary, NodeHealth::Online);
        announced.ip = Some("203.0.113.7".into());
        announced.port = Some(31001);
        let shards = [valkey::parse::ClusterShard {
            id: None,
            slots: valkey::slots::SlotSet::from_ranges(["0-16383".parse().unwrap()]),
            nodes: vec![
                announced.clone(),
                node(2, Role::Replica, NodeHealth::Online),
            ],
        }];
        let pod: SocketAddr = "10.244.1.5:6379".parse().unwrap();
        let pods = BTreeMap::from([(announced.id.clone(), pod)]);
        let got = sources(&shards, &pods);
        // The replica's pod did not answer by its id: read where it announces.
        assert_eq!(
            got[0].nodes,
            vec![
                (IpAddr::from([10, 0, 0, 2]), 6379, true),
                (pod.ip(), 6379, false)
            ]
        );
    }

    #[test]
    fn an_outcome_reads_back() {
        let o = Outcome {
            manifest: Some("a/b/manifest.json".into()),
            size_bytes: 3,
            shards: 2,
            error: None,
        };
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), o);
    }
}
