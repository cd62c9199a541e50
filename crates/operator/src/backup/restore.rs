// Over 600 lines: 512 lines of code; the rest are its unit tests, kept beside it.
//! `ValkeyCluster.spec.restore`: a new cluster that starts from a backup.
//!
//! ```text
//!     gate (before any member is made: is the backup usable?)
//!       -> members: each shard's first member loads its shard's RDB in an
//!          init container (`valkey-operator restore`, see `load`) before
//!          Valkey starts; the others start empty
//!       -> planner in restore mode (`valkey::model::DesiredCluster::restore`):
//!          the first members are met, slots nobody serves are added to the
//!          shard that held them in the backup, replicas full-sync
//!       -> the first Ready: the restore is done (recorded in status.restore)
//! ```
//!
//! The gate reads the ValkeyBackup, its credentials, the manifest and the
//! size and time of every shard's object (bounded requests): a missing
//! backup, one not Completed, another number of shards, an unreadable
//! manifest, or an object whose size differs from the manifest's or that
//! was written after it (the manifest is written last) refuses the restore
//! with the
//! condition `Restored` (False, the reason naming the problem, the message
//! naming `spec.restore.backup`) and makes no member at all: no empty
//! cluster. A backup that is still Running is waited for.
//!
//! Once usable, where the backup is (endpoint, bucket, folder, credentials
//! Secret, each shard's slots) is recorded in `status.restore`, and every
//! later reconcile works from the record, not the ValkeyBackup (which may be
//! deleted). A member whose volume already holds a node or data never loads
//! the backup again (`load`), and once the restore is done the members'
//! pods no longer carry the init container (taking it out restarts nothing:
//! it is not part of the restart hash, and member StatefulSets update on
//! delete).

use super::manifest::Manifest;
use crate::context::Context;
use crate::error::Error;
use api::ValkeyCluster;
use api::v1alpha1::{
    BackupPhase, CONDITION_READY, CONDITION_RESTORED, RestoreStatus, ValkeyBackup,
    ValkeyClusterStatus,
};
use decide::conditions::{Cond, merge_conditions};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use object_store::ObjectStoreExt as _;
use std::collections::BTreeMap;
use std::time::Duration;

/// Reasons of the `Restored` condition.
pub mod reason {
    pub const BACKUP_NOT_FOUND: &str = "BackupNotFound";
    pub const BACKUP_FAILED: &str = "BackupFailed";
    pub const BACKUP_NOT_COMPLETED: &str = "BackupNotCompleted";
    pub const BACKUP_UNREADABLE: &str = "BackupUnreadable";
    pub const SHARD_COUNT_MISMATCH: &str = "ShardCountMismatch";
    pub const CHECKSUM_MISMATCH: &str = "ChecksumMismatch";
    pub const RESTORING: &str = "Restoring";
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    pub const RESTORED: &str = "Restored";
}

/// Why a restore cannot start (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

fn refuse(reason: &'static str, message: String) -> Refusal {
    Refusal { reason, message }
}

/// What the gate found.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// No `spec.restore`.
    Off,
    /// The backup cannot be used (yet): no member is made.
    Refused(Refusal),
    /// The store must be asked and no slot is free now (see
    /// [`super::store::StoreSlots`]): nothing changes, ask again soon.
    Busy,
    /// The record of the restore: in progress, or done.
    Go(RestoreStatus),
}

impl Gate {
    /// The record while the restore is in progress.
    pub fn in_progress(&self) -> Option<&RestoreStatus> {
        match self {
            Gate::Go(r) if !r.done => Some(r),
            _ => None,
        }
    }
}

/// The ValkeyBackup `name` of namespace `ns` as a restore needs it:
/// present and Completed (pure).
pub fn check_backup<'a>(
    name: &str,
    ns: &str,
    backup: Option<&'a ValkeyBackup>,
) -> Result<&'a ValkeyBackup, Refusal> {
    let Some(backup) = backup else {
        return Err(refuse(
            reason::BACKUP_NOT_FOUND,
            format!(
                "spec.restore.backup: ValkeyBackup {name} not found in namespace {ns}: no member is made until it exists and is Completed"
            ),
        ));
    };
    let status = backup.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Completed) => Ok(backup),
        Some(BackupPhase::Failed) => Err(refuse(
            reason::BACKUP_FAILED,
            format!(
                "spec.restore.backup: ValkeyBackup {name} is Failed ({}): it cannot be restored; no member is made",
                status.message.unwrap_or_default()
            ),
        )),
        phase => Err(refuse(
            reason::BACKUP_NOT_COMPLETED,
            format!(
                "spec.restore.backup: ValkeyBackup {name} is {} and not Completed: no member is made until it completes",
                match phase {
                    Some(BackupPhase::Running) => "Running",
                    _ => "Pending",
                }
            ),
        )),
    }
}

/// A shard's object as the bucket lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectSeen {
    pub size: u64,
    /// Written after the manifest: the manifest is written last, so the
    /// object is no longer the one its checksum was taken of.
    pub rewritten: bool,
}

/// Checks the manifest against the cluster: as many shards as `shards`, and
/// each object (`objects`, by shard; `None`: missing; an empty list checks
/// the manifest alone) of the size the
/// manifest says and not written after it. The SHA-256 itself is checked
/// by the member that loads the object. Returns each shard's slots as text
/// (pure).
pub fn check_manifest(
    name: &str,
    manifest: &Manifest,
    shards: u32,
    objects: &[Option<ObjectSeen>],
) -> Result<Vec<String>, Refusal> {
    manifest.check().map_err(|e| {
        refuse(
            reason::BACKUP_UNREADABLE,
            format!("spec.restore.backup: the manifest of ValkeyBackup {name}: {e}"),
        )
    })?;
    if manifest.shards.len() != shards as usize {
        return Err(refuse(
            reason::SHARD_COUNT_MISMATCH,
            format!(
                "spec.shards is {shards} but ValkeyBackup {name} (spec.restore.backup) holds {} shard(s): a restore needs the same number of shards; set spec.shards to {}",
                manifest.shards.len(),
                manifest.shards.len()
            ),
        ));
    }
    for (shard, seen) in manifest.shards.iter().zip(objects) {
        match seen {
            None => {
                return Err(refuse(
                    reason::BACKUP_UNREADABLE,
                    format!(
                        "spec.restore.backup: shard {} of ValkeyBackup {name} ({}) is missing from the bucket",
                        shard.index, shard.object
                    ),
                ));
            }
            Some(seen) if seen.size != shard.size_bytes => {
                return Err(refuse(
                    reason::CHECKSUM_MISMATCH,
                    format!(
                        "spec.restore.backup: checksum mismatch: shard {} of ValkeyBackup {name} ({}) is {} bytes but its manifest says {}: the backup is damaged",
                        shard.index, shard.object, seen.size, shard.size_bytes
                    ),
                ));
            }
            Some(seen) if seen.rewritten => {
                return Err(refuse(
                    reason::CHECKSUM_MISMATCH,
                    format!(
                        "spec.restore.backup: checksum mismatch: shard {} of ValkeyBackup {name} ({}) was written after the backup completed: it is not the object the manifest's SHA-256 was taken of",
                        shard.index, shard.object
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(manifest
        .shards
        .iter()
        .map(|s| {
            s.slots
                .iter()
                .map(|[a, b]| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect())
}

/// Bounds the whole of the gate's work on the store (the manifest and
/// every shard's object): a slow store holds one worker this long at most.
const STORE_TIMEOUT: Duration = Duration::from_secs(15);

/// Shard objects asked about at once.
const HEADS_AT_ONCE: usize = 16;

/// Decides whether the restore of `vc` may go on: the record when there is
/// one, else the backup checked (and the record made from it).
pub async fn gate(
    ctx: &Context,
    vc: &ValkeyCluster,
    shards: u32,
    old: Option<&ValkeyClusterStatus>,
) -> Result<Gate, Error> {
    let Some(spec) = vc.spec.restore.as_ref() else {
        return Ok(Gate::Off);
    };
    if let Some(record) = old.and_then(|s| s.restore.as_ref())
        && record.backup == spec.backup
    {
        return Ok(Gate::Go(record.clone()));
    }
    let ns = vc.namespace().unwrap_or_default();
    // Members but no record (the record is written before any member is
    // made, so only a lost status gets here): the data is in, or can no
    // longer be loaded; a running cluster is never stopped for its backup.
    let name = vc.name_any();
    let has_members = ctx.pods.state().iter().any(|p| {
        p.namespace().as_deref() == Some(ns.as_str())
            && p.labels().get(api::constants::LABEL_CLUSTER) == Some(&name)
    });
    if has_members {
        return Ok(Gate::Off);
    }
    let backup = Api::<ValkeyBackup>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&spec.backup)
        .await
        .map_err(|source| Error::Read {
            kind: "ValkeyBackup",
            name: spec.backup.clone(),
            source,
        })?;
    let backup = match check_backup(&spec.backup, &ns, backup.as_ref()) {
        Ok(b) => b,
        Err(r) => return Ok(Gate::Refused(r)),
    };
    let Some(_slot) = super::store::StoreSlots::process().try_take(&ns) else {
        return Ok(Gate::Busy);
    };
    Ok(match read_backup(ctx, &ns, backup, shards).await {
        Ok(record) => Gate::Go(record),
        Err(r) => Gate::Refused(r),
    })
}

/// Reads the manifest and the objects' sizes with the backup's credentials,
/// and makes the record.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn read_backup(
    ctx: &Context,
    ns: &str,
    backup: &ValkeyBackup,
    shards: u32,
) -> Result<RestoreStatus, Refusal> {
    let name = backup.name_any();
    let s3 = &backup.spec.s3;
    let unreadable = |what: String| {
        refuse(
            reason::BACKUP_UNREADABLE,
            format!("spec.restore.backup: ValkeyBackup {name}: {what}"),
        )
    };
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(&s3.credentials_secret)
        .await
        .map_err(|e| unreadable(format!("reading Secret {}: {e}", s3.credentials_secret)))?
        .ok_or_else(|| {
            unreadable(format!(
                "credentials Secret {} not found",
                s3.credentials_secret
            ))
        })?;
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    let (Some(access_key_id), Some(secret_access_key)) =
        (key("AWS_ACCESS_KEY_ID"), key("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(unreadable(format!(
            "credentials Secret {} lacks AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY",
            s3.credentials_secret
        )));
    };
    let store = super::store::s3_for_operator(&super::store::S3Settings {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        region: s3.region.clone(),
        access_key_id,
        secret_access_key,
    })
    .map_err(|e| unreadable(format!("building the S3 client for {}: {e}", s3.endpoint)))?;
    let folder = api::v1alpha1::backup_folder(&s3.prefix, ns, &name);
    let path = |object: &str| object_store::path::Path::from(format!("{folder}/{object}"));
    let manifest_path = path(super::manifest::MANIFEST);
    let deadline = tokio::time::Instant::now() + STORE_TIMEOUT;
    let read = async {
        let meta = store.head(&manifest_path).await?;
        if meta.size > super::manifest::MAX_MANIFEST_BYTES as u64 {
            return Err(object_store::Error::Generic {
                store: "S3",
                source: format!("the manifest is {} bytes", meta.size).into(),
            });
        }
        let bytes = store.get(&manifest_path).await?.bytes().await?;
        Ok((meta.last_modified, bytes))
    };
    let no_answer = || unreadable(format!("no answer from {} within 15 s", s3.endpoint));
    let (written, bytes) = tokio::time::timeout_at(deadline, read)
        .await
        .map_err(|_| no_answer())?
        .map_err(|e| {
            unreadable(format!(
                "reading {manifest_path}: {}",
                super::store::store_error(&e)
            ))
        })?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| unreadable(format!("{manifest_path} is not a manifest: {e}")))?;
    // What the manifest alone decides (its format, the shard count) before
    // a single object is asked about: no objects, no object checks.
    check_manifest(&name, &manifest, shards, &[])?;
    let locations: Vec<object_store::path::Path> = manifest
        .shards
        .iter()
        .map(|shard| path(&shard.object))
        .collect();
    let heads = futures::stream::iter(locations)
        .map(|location| {
            let store = store.clone();
            async move { store.head(&location).await }
        })
        .buffered(HEADS_AT_ONCE)
        .collect::<Vec<_>>();
    let heads = tokio::time::timeout_at(deadline, heads)
        .await
        .map_err(|_| no_answer())?;
    let mut objects = Vec::new();
    for (shard, head) in manifest.shards.iter().zip(heads) {
        objects.push(match head {
            Ok(meta) => Some(ObjectSeen {
                size: meta.size,
                rewritten: meta.last_modified > written,
            }),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => {
                return Err(unreadable(format!(
                    "reading {}: {}",
                    shard.object,
                    super::store::store_error(&e)
                )));
            }
        });
    }
    let shard_slots = check_manifest(&name, &manifest, shards, &objects)?;
    Ok(RestoreStatus {
        backup: name,
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        region: s3.region.clone(),
        credentials_secret: s3.credentials_secret.clone(),
        folder,
        shard_slots,
        done: false,
    })
}

/// The init container of member pods that loads the backup.
pub const CONTAINER: &str = resources::statefulset::RESTORE_CONTAINER;

/// Why a shard's first member could not load its data, from its pod's init
/// container (the termination message when the runtime keeps it), if one
/// failed (pure).
pub fn load_failures(pods: &BTreeMap<(u32, u32), Pod>, shards: u32) -> Option<String> {
    let failed: Vec<String> = (0..shards)
        .filter_map(|s| {
            let pod = pods.get(&(s, 0))?;
            let st = pod
                .status
                .as_ref()?
                .init_container_statuses
                .iter()
                .flatten()
                .find(|c| c.name == CONTAINER)?;
            let terminated = [st.state.as_ref(), st.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|s| s.terminated.as_ref())
                .find(|t| t.exit_code != 0)?;
            let why = terminated
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| {
                    format!(
                        "its init container {CONTAINER} exited {} (its SHA-256 or size differs from the manifest's, or the bucket could not be read); see kubectl logs {} -c {CONTAINER}",
                        terminated.exit_code,
                        pod.name_any()
                    )
                });
            Some(format!("shard {s}: {}", why.trim()))
        })
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// The `Restored` condition and the record, once the reconcile's status is
/// built: done at the first Ready (pure). Returns whether the restore
/// finished with this status.
pub fn report(
    status: &mut ValkeyClusterStatus,
    old: Option<&ValkeyClusterStatus>,
    record: &RestoreStatus,
    failure: Option<&str>,
    now: &Time,
) -> bool {
    let ready = status
        .condition(CONDITION_READY)
        .is_some_and(|c| c.status == "True");
    let mut record = record.clone();
    let finished = !record.done && ready;
    record.done |= ready;
    let cond = if record.done {
        Cond::new(
            CONDITION_RESTORED,
            true,
            reason::RESTORED,
            format!(
                "the data of ValkeyBackup {} (spec.restore.backup) is in the cluster",
                record.backup
            ),
        )
    } else if let Some(why) = failure {
        Cond::new(
            CONDITION_RESTORED,
            false,
            reason::RESTORE_FAILED,
            format!(
                "loading ValkeyBackup {} (spec.restore.backup) failed: {why}",
                record.backup
            ),
        )
    } else {
        Cond::new(
            CONDITION_RESTORED,
            false,
            reason::RESTORING,
            format!(
                "each shard's first member loads its data from ValkeyBackup {} (spec.restore.backup)",
                record.backup
            ),
        )
    };
    set_condition(status, old, cond, now);
    status.restore = Some(record);
    finished
}

/// Puts `cond` into `status` in place of its type (transition time kept
/// when the status did not change).
pub fn set_condition(
    status: &mut ValkeyClusterStatus,
    old: Option<&ValkeyClusterStatus>,
    cond: Cond,
    now: &Time,
) {
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    let merged = merge_conditions(
        old_conditions,
        std::slice::from_ref(&cond),
        status.observed_generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != cond.type_);
    status.conditions.extend(merged);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backup::manifest::{FORMAT_VERSION, ShardEntry, shard_object};
    use api::v1alpha1::{S3Location, ValkeyBackupSpec, ValkeyBackupStatus};

    fn backup(phase: Option<BackupPhase>) -> ValkeyBackup {
        let mut b = ValkeyBackup::new(
            "nightly",
            ValkeyBackupSpec {
                cluster: "src".into(),
                s3: S3Location {
                    endpoint: "http://s3".into(),
                    bucket: "b".into(),
                    prefix: "p".into(),
                    region: None,
                    credentials_secret: "s3".into(),
                },
                deletion_policy: None,
            },
        );
        b.status = Some(ValkeyBackupStatus {
            phase,
            message: Some("bucket b cannot be listed".into()),
            ..Default::default()
        });
        b
    }

    fn manifest(ranges: &[[u16; 2]]) -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            namespace: "ns".into(),
            cluster: "src".into(),
            backup: "nightly".into(),
            valkey_version: "9.1.2".into(),
            start_time: "t".into(),
            completion_time: "t".into(),
            shards: ranges
                .iter()
                .enumerate()
                .map(|(i, r)| ShardEntry {
                    index: i,
                    slots: vec![*r],
                    object: shard_object(i),
                    size_bytes: 100,
                    sha256: "ab".into(),
                    source_node: "10.0.0.1:6379".into(),
                    from_replica: true,
                })
                .collect(),
        }
    }

    fn ok() -> Option<ObjectSeen> {
        Some(ObjectSeen {
            size: 100,
            rewritten: false,
        })
    }

    #[test]
    fn a_missing_failed_or_unfinished_backup_is_refused_naming_the_field() {
        let r = check_backup("nightly", "ns", None).unwrap_err();
        assert_eq!(r.reason, reason::BACKUP_NOT_FOUND);
        assert!(r.message.contains("spec.restore.backup") && r.message.contains("nightly"));
        let failed = backup(Some(BackupPhase::Failed));
        let r = check_backup("nightly", "ns", Some(&failed)).unwrap_err();
        assert_eq!(r.reason, reason::BACKUP_FAILED);
        assert!(r.message.contains("cannot be listed"), "{}", r.message);
        for phase in [None, Some(BackupPhase::Pending), Some(BackupPhase::Running)] {
            let b = backup(phase);
            let r = check_backup("nightly", "ns", Some(&b)).unwrap_err();
            assert_eq!(r.reason, reason::BACKUP_NOT_COMPLETED);
        }
        let done = backup(Some(BackupPhase::Completed));
        assert!(check_backup("nightly", "ns", Some(&done)).is_ok());
    }

    #[test]
    fn another_number_of_shards_is_refused_naming_spec_shards() {
        let m = manifest(&[[0, 8191], [8192, 16383]]);
        let r = check_manifest("nightly", &m, 3, &[ok(), ok()]).unwrap_err();
        assert_eq!(r.reason, reason::SHARD_COUNT_MISMATCH);
        assert!(r.message.contains("spec.shards is 3"), "{}", r.message);
        assert!(r.message.contains("2 shard(s)"), "{}", r.message);
    }

    #[test]
    fn an_object_of_another_size_or_missing_is_refused() {
        let m = manifest(&[[0, 8191], [8192, 16383]]);
        let short = Some(ObjectSeen {
            size: 7,
            rewritten: false,
        });
        let r = check_manifest("nightly", &m, 2, &[ok(), short]).unwrap_err();
        assert_eq!(r.reason, reason::CHECKSUM_MISMATCH);
        assert!(r.message.contains("shard 1"), "{}", r.message);
        let rewritten = Some(ObjectSeen {
            size: 100,
            rewritten: true,
        });
        let r = check_manifest("nightly", &m, 2, &[rewritten, ok()]).unwrap_err();
        assert_eq!(r.reason, reason::CHECKSUM_MISMATCH);
        assert!(r.message.contains("written after"), "{}", r.message);
        let r = check_manifest("nightly", &m, 2, &[None, ok()]).unwrap_err();
        assert_eq!(r.reason, reason::BACKUP_UNREADABLE);
    }

    #[test]
    fn the_recorded_slots_read_back_as_the_manifest_had_them() {
        let mut m = manifest(&[[0, 999], [1000, 16383]]);
        m.shards[0].slots.push([2000, 2000]);
        m.shards[1].slots = vec![[1000, 1999], [2001, 16383]];
        let slots = check_manifest("nightly", &m, 2, &[ok(), ok()]).unwrap();
        assert_eq!(slots, vec!["0-999,2000", "1000-1999,2001-16383"]);
        let record = RestoreStatus {
            shard_slots: slots,
            ..Default::default()
        };
        let map = decide::restore::slot_map(&record).unwrap();
        assert_eq!(map[&valkey::model::ShardIndex(0)].len(), 1001);
        assert_eq!(map[&valkey::model::ShardIndex(1)].len(), 16384 - 1001);
    }

    fn first_member(exit_code: i32, message: Option<&str>) -> Pod {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
        };
        let mut pod = Pod::default();
        pod.metadata.name = Some("c-1-0-0".into());
        pod.status = Some(PodStatus {
            init_container_statuses: Some(vec![ContainerStatus {
                name: CONTAINER.into(),
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code,
                        message: message.map(str::to_string),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn a_first_member_that_could_not_load_says_why_by_shard() {
        let mut pods = BTreeMap::new();
        pods.insert((1, 0), first_member(0, None));
        assert_eq!(load_failures(&pods, 2), None);
        pods.insert(
            (1, 0),
            first_member(1, Some("checksum mismatch for shard 1 (p/shard-1.rdb)")),
        );
        assert_eq!(
            load_failures(&pods, 2).as_deref(),
            Some("shard 1: checksum mismatch for shard 1 (p/shard-1.rdb)")
        );
        // Without a termination message (the testbed's runtime keeps none).
        pods.insert((1, 0), first_member(1, None));
        let why = load_failures(&pods, 2).unwrap();
        assert!(
            why.contains("exited 1") && why.contains("kubectl logs c-1-0-0 -c restore"),
            "{why}"
        );
    }

    #[test]
    fn the_restore_is_done_at_the_first_ready_and_says_so() {
        let record = RestoreStatus {
            backup: "nightly".into(),
            ..Default::default()
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let mut status = ValkeyClusterStatus::default();
        assert!(!report(&mut status, None, &record, None, &now));
        let cond = status.condition(CONDITION_RESTORED).unwrap();
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("False", "Restoring")
        );
        assert!(!status.restore.as_ref().unwrap().done);

        let mut failed = ValkeyClusterStatus::default();
        report(
            &mut failed,
            None,
            &record,
            Some("shard 0: checksum mismatch"),
            &now,
        );
        let cond = failed.condition(CONDITION_RESTORED).unwrap();
        assert_eq!(cond.reason, "RestoreFailed");
        assert!(cond.message.contains("checksum mismatch"));

        let mut ready = ValkeyClusterStatus::default();
        set_condition(
            &mut ready,
            None,
            Cond::new(CONDITION_READY, true, "ClusterReady", ""),
            &now,
        );
        assert!(report(&mut ready, Some(&status), &record, None, &now));
        assert!(ready.restore.as_ref().unwrap().done);
        let cond = ready.condition(CONDITION_RESTORED).unwrap();
        assert_eq!(cond.status, "True");
    }
}
