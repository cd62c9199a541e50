//! `valkey-operator restore`: loads one shard's RDB from a backup onto a
//! member's data volume before Valkey starts. The init container of each
//! shard's first member while the cluster is being restored (see
//! `backup::restore` and `builders::statefulset`).
//!
//! 1. a data volume that already holds a node (`nodes.conf`), an RDB or an
//!    AOF is left alone: the member has run, and its data is newer than the
//!    backup's;
//! 2. the manifest says which object is the shard's, its size and SHA-256;
//! 3. the object is streamed to a temporary file on the volume (never held in
//!    memory), hashed on the way, and renamed into place only when size and
//!    checksum match the manifest;
//! 4. with AOF on, Valkey loads only the AOF (`loadDataFromDisk`: an AOF
//!    that does not exist loads nothing, the RDB is not read), so the same
//!    bytes are also linked in as the base of a new multi-part AOF (an RDB
//!    is what Valkey itself writes as a base).
//!
//! The outcome goes to stdout and the termination message; a mismatch exits
//! 1, so the pod does not start and the cluster's `Restored` condition says
//! why.

use super::manifest::{self, Manifest};
use super::store::{self, S3Settings};
use futures::StreamExt;
use object_store::ObjectStoreExt as _;
use object_store::path::Path as ObjectPath;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::io::AsyncWriteExt;

/// `valkey-operator restore` arguments.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub bucket: String,
    #[arg(long)]
    pub region: Option<String>,
    /// The backup's folder in the bucket (`<prefix>/<namespace>/<name>`).
    #[arg(long)]
    pub folder: String,
    /// The shard to load (its index in the manifest).
    #[arg(long)]
    pub shard: usize,
    /// Valkey's data directory.
    #[arg(long, default_value = "/data")]
    pub dir: PathBuf,
    /// The file to write in `dir`: `dump.rdb`, or a name the member's start
    /// script moves into place.
    #[arg(long, default_value = "dump.rdb")]
    pub file: String,
    /// Also make the RDB the base of a new AOF (Valkey runs with
    /// `appendonly yes`).
    #[arg(long)]
    pub aof: bool,
    /// Valkey's `appenddirname`.
    #[arg(long, default_value = "appendonlydir")]
    pub aof_dir: String,
    /// Valkey's `appendfilename`.
    #[arg(long, default_value = "appendonly.aof")]
    pub aof_file: String,
    #[arg(long, env = "AWS_ACCESS_KEY_ID", hide_env_values = true)]
    pub access_key_id: String,
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub secret_access_key: String,
    #[arg(long, default_value = super::take::TERMINATION_LOG)]
    pub termination_log: PathBuf,
}

/// Why a shard could not be loaded, in words for the cluster's status.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("building the S3 client for {endpoint}: {source}")]
    Store {
        endpoint: String,
        source: object_store::Error,
    },
    #[error("reading the manifest {key}: {detail}")]
    Manifest { key: String, detail: String },
    #[error("the manifest {key} has no shard {shard}")]
    NoShard { key: String, shard: usize },
    #[error("downloading {key}: {source}")]
    Download {
        key: String,
        source: object_store::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "checksum mismatch for shard {shard} ({key}): the manifest says {want_size} bytes with SHA-256 {want_sha}, the object has {got_size} bytes with SHA-256 {got_sha}"
    )]
    Mismatch {
        shard: usize,
        key: String,
        want_size: u64,
        want_sha: String,
        got_size: u64,
        got_sha: String,
    },
}

/// What on the volume says it already holds a member's state, if anything:
/// nodes.conf, an RDB or an AOF.
fn in_use(args: &LoadArgs) -> Option<String> {
    ["nodes.conf", "dump.rdb", &args.file, &args.aof_dir]
        .into_iter()
        .find(|f| args.dir.join(f).exists())
        .map(str::to_string)
}

/// Runs the command; exit 0 when the shard's data is in place (or the volume
/// was already in use).
pub async fn main(args: LoadArgs) -> ExitCode {
    let outcome = match load(&args).await {
        Ok(message) => {
            println!("{message}");
            let _ = std::fs::write(&args.termination_log, &message);
            return ExitCode::SUCCESS;
        }
        Err(e) => e.to_string(),
    };
    eprintln!("restore: {outcome}");
    // Best effort: outside a pod there is no termination log.
    let _ = std::fs::write(&args.termination_log, &outcome);
    ExitCode::from(1)
}

async fn load(args: &LoadArgs) -> Result<String, LoadError> {
    if let Some(found) = in_use(args) {
        return Ok(format!(
            "{} already holds {found}: the member has run, its data is kept",
            args.dir.display()
        ));
    }
    let settings = S3Settings {
        endpoint: args.endpoint.clone(),
        bucket: args.bucket.clone(),
        region: args.region.clone(),
        access_key_id: args.access_key_id.clone(),
        secret_access_key: args.secret_access_key.clone(),
    };
    let store = store::s3(&settings).map_err(|source| LoadError::Store {
        endpoint: args.endpoint.clone(),
        source,
    })?;
    load_from(&store, args).await
}

/// Steps 2-4, from `store`.
async fn load_from(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    args: &LoadArgs,
) -> Result<String, LoadError> {
    let key = format!("{}/{}", args.folder, manifest::MANIFEST);
    let manifest_error = |detail: String| LoadError::Manifest {
        key: key.clone(),
        detail,
    };
    let bytes = store
        .get(&ObjectPath::from(key.as_str()))
        .await
        .map_err(|e| manifest_error(e.to_string()))?
        .bytes()
        .await
        .map_err(|e| manifest_error(e.to_string()))?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| manifest_error(e.to_string()))?;
    manifest.check().map_err(manifest_error)?;
    let entry = manifest
        .shards
        .get(args.shard)
        .ok_or_else(|| LoadError::NoShard {
            key: key.clone(),
            shard: args.shard,
        })?;

    let object = format!("{}/{}", args.folder, entry.object);
    let partial = args.dir.join(format!("{}.partial", args.file));
    let write_error = |path: &Path| {
        let path = path.display().to_string();
        move |source| LoadError::Write { path, source }
    };
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(write_error(&partial))?;
    let mut stream = store
        .get(&ObjectPath::from(object.as_str()))
        .await
        .map_err(|source| LoadError::Download {
            key: object.clone(),
            source,
        })?
        .into_stream();
    let mut sha = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|source| LoadError::Download {
            key: object.clone(),
            source,
        })?;
        sha.update(&chunk);
        size += chunk.len() as u64;
        file.write_all(&chunk)
            .await
            .map_err(write_error(&partial))?;
    }
    file.sync_all().await.map_err(write_error(&partial))?;
    drop(file);
    let got_sha = hex(&sha.finalize());
    if size != entry.size_bytes || !got_sha.eq_ignore_ascii_case(&entry.sha256) {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(LoadError::Mismatch {
            shard: args.shard,
            key: object,
            want_size: entry.size_bytes,
            want_sha: entry.sha256.clone(),
            got_size: size,
            got_sha,
        });
    }
    let target = args.dir.join(&args.file);
    if args.aof {
        aof_base(&args.dir.join(&args.aof_dir), &args.aof_file, &partial)
            .map_err(write_error(&args.dir.join(&args.aof_dir)))?;
    }
    tokio::fs::rename(&partial, &target)
        .await
        .map_err(write_error(&target))?;
    Ok(format!(
        "shard {}: {size} bytes from {object} (SHA-256 {got_sha}) in {}{}",
        args.shard,
        target.display(),
        if args.aof {
            ", and as the AOF's base"
        } else {
            ""
        }
    ))
}

/// The base file of a new multi-part AOF named `name` (`appendfilename`).
pub fn aof_base_name(name: &str) -> String {
    format!("{name}.1.base.rdb")
}

/// The AOF manifest of `name`, listing only its base (as Valkey writes it).
pub fn aof_manifest(name: &str) -> String {
    format!("file {} seq 1 type b\n", aof_base_name(name))
}

/// Links `rdb` in as the base of a new AOF `name` in the directory `aof`
/// (`appenddirname`; a hard link: no second copy on the volume); the
/// manifest is written last.
fn aof_base(aof: &Path, name: &str, rdb: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(aof)?;
    let base = aof.join(aof_base_name(name));
    if base.exists() {
        std::fs::remove_file(&base)?;
    }
    std::fs::hard_link(rdb, &base).or_else(|_| std::fs::copy(rdb, &base).map(|_| ()))?;
    std::fs::write(aof.join(format!("{name}.manifest")), aof_manifest(name))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(dir: &Path) -> LoadArgs {
        LoadArgs {
            endpoint: "http://s3".into(),
            bucket: "b".into(),
            region: None,
            folder: "p/ns/x".into(),
            shard: 0,
            dir: dir.to_path_buf(),
            file: "dump.rdb".into(),
            aof: false,
            aof_dir: "appendonlydir".into(),
            aof_file: "appendonly.aof".into(),
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
            termination_log: dir.join("log"),
        }
    }

    #[test]
    fn a_volume_with_a_node_or_data_on_it_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("restore-in-use-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(in_use(&args(&dir)), None);
        std::fs::create_dir_all(dir.join("appendonlydir")).unwrap();
        assert_eq!(in_use(&args(&dir)).as_deref(), Some("appendonlydir"));
        std::fs::write(dir.join("nodes.conf"), b"x").unwrap();
        assert_eq!(in_use(&args(&dir)).as_deref(), Some("nodes.conf"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("restore-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A bucket with a one-shard backup whose manifest says `sha256` of
    /// `rdb`'s length.
    async fn bucket(rdb: &[u8], sha256: &str) -> std::sync::Arc<dyn object_store::ObjectStore> {
        use crate::backup::manifest::{FORMAT_VERSION, ShardEntry};
        let store: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            namespace: "ns".into(),
            cluster: "c".into(),
            backup: "x".into(),
            valkey_version: "9.1.2".into(),
            start_time: "t".into(),
            completion_time: "t".into(),
            shards: vec![ShardEntry {
                index: 0,
                slots: vec![[0, 16383]],
                object: "shard-0.rdb".into(),
                size_bytes: rdb.len() as u64,
                sha256: sha256.into(),
                source_node: "10.0.0.1:6379".into(),
                from_replica: true,
            }],
        };
        let put = |key: &str, body: Vec<u8>| {
            let store = store.clone();
            let key = ObjectPath::from(key);
            async move {
                store
                    .put(&key, object_store::PutPayload::from(body))
                    .await
                    .unwrap();
            }
        };
        put(
            "p/ns/x/manifest.json",
            serde_json::to_vec(&manifest).unwrap(),
        )
        .await;
        put("p/ns/x/shard-0.rdb", rdb.to_vec()).await;
        store
    }

    #[tokio::test]
    async fn the_shard_lands_as_dump_rdb_when_its_checksum_matches() {
        let rdb = b"REDIS0011 some keys".to_vec();
        let store = bucket(&rdb, &hex(&Sha256::digest(&rdb))).await;
        let dir = temp("ok");
        let out = load_from(&store, &args(&dir)).await.unwrap();
        assert!(out.contains("shard 0"), "{out}");
        assert_eq!(std::fs::read(dir.join("dump.rdb")).unwrap(), rdb);
        assert!(!dir.join("dump.rdb.partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn other_bytes_than_the_manifest_checksummed_fail_and_leave_nothing() {
        let rdb = b"REDIS0011 some keys".to_vec();
        let store = bucket(&rdb, &hex(&Sha256::digest(b"REDIS0011 other keys"))).await;
        let dir = temp("mismatch");
        let err = load_from(&store, &args(&dir)).await.unwrap_err();
        assert!(matches!(err, LoadError::Mismatch { shard: 0, .. }), "{err}");
        assert!(
            err.to_string().starts_with("checksum mismatch for shard 0"),
            "{err}"
        );
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "files left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_aof_base_is_the_rdb_and_the_manifest_names_it_as_base() {
        let dir = std::env::temp_dir().join(format!("restore-aof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rdb = dir.join("dump.rdb.partial");
        std::fs::write(&rdb, b"REDIS0011...").unwrap();
        let aof = dir.join("appendonlydir");
        aof_base(&aof, "appendonly.aof", &rdb).unwrap();
        assert_eq!(
            std::fs::read(aof.join("appendonly.aof.1.base.rdb")).unwrap(),
            b"REDIS0011..."
        );
        assert_eq!(
            std::fs::read_to_string(aof.join("appendonly.aof.manifest")).unwrap(),
            "file appendonly.aof.1.base.rdb seq 1 type b\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
