// Over 600 lines: the backup controller in one file; it is to take the cluster controller's shape (docs/architecture.md, known debt).
//! The ValkeyBackup controller: a second kube-runtime Controller in the
//! operator process, beside the ValkeyCluster one. It checks the input, creates
//! the backup's Job, follows it, and writes the status and events:
//!
//! ```text
//!     observe (cluster, credentials Secret and bucket, Job, its outcome)
//!       -> decide (pure: the next step)
//!       -> act (create the Job; write the status; an event per transition)
//! ```
//!
//! Before the Job is made, the bucket's folder is listed once with the
//! credentials (15 s at most), so wrong credentials or a missing bucket fail
//! with the store's answer. A succeeded Job's outcome is its termination
//! message or, where the runtime keeps none, the manifest read back from the
//! bucket (at most 4 MiB): Completed always means the manifest is there.
//! A backup is taken once: Completed and Failed are final, and a Job that
//! failed is not retried (its objects may be half-written; the manifest is
//! not, so nothing reads them as a backup).

use super::job::{self, LABEL_BACKUP};
use super::store::{STORE_BUSY_RETRY, StoreSlots};
use super::take::Outcome;
use crate::context::Context;
use api::ValkeyCluster;
use api::v1alpha1::{BACKUP_FINALIZER, BackupPhase, ValkeyBackup};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// How often a running backup's Job is looked at besides its watch events.
const POLL: Duration = Duration::from_secs(5);

/// How long a finished Job may wait for its pod's termination message to
/// show in the cache before the backup is judged without it.
const OUTCOME_GRACE: Duration = Duration::from_secs(30);

/// Why a reconcile of a ValkeyBackup failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError {
    #[error("reading {what}: {source}")]
    Read { what: String, source: kube::Error },
    #[error("creating the Job {job}: {source}")]
    CreateJob { job: String, source: kube::Error },
    #[error("writing the status: {source}")]
    Status { source: kube::Error },
    #[error("writing the finalizers: {source}")]
    Finalizer { source: kube::Error },
    #[error("deleting the Job {job}: {source}")]
    DeleteJob { job: String, source: kube::Error },
}

/// The credentials Secret as far as the backup cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Missing,
    MissingKey(&'static str),
    Present,
}

/// The backup's Job, as far as the backup cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Running,
    /// The Job succeeded; its pod's termination message, once seen, and how
    /// long ago it finished.
    Succeeded {
        outcome: Option<String>,
        since: Duration,
    },
    /// The Job failed: its pod's termination message, the Job's own reason.
    Failed {
        outcome: Option<String>,
        reason: String,
        since: Duration,
    },
}

/// What one reconcile observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub phase: Option<BackupPhase>,
    pub name: String,
    pub namespace: String,
    pub cluster: String,
    pub credentials_secret: String,
    pub cluster_exists: bool,
    /// With TLS on, the Secret whose `ca.crt` the backup trusts (the one the
    /// members serve from).
    pub cluster_tls_secret: Option<String>,
    pub credentials: Credentials,
    /// Why the bucket could not be listed with the credentials, when it
    /// could not (checked before the Job is made).
    pub bucket_error: Option<String>,
    pub job: Option<JobState>,
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Final: nothing more to do.
    Done,
    /// Create the Job and say Running.
    Start,
    /// The Job runs (or its outcome is not in the cache yet).
    Wait,
    Complete(Outcome),
    Fail(String),
}

fn outcome(text: Option<&str>) -> Option<Outcome> {
    text.and_then(|t| serde_json::from_str::<Outcome>(t.trim()).ok())
}

/// Decides the next step from what was observed (pure).
pub fn decide(o: &Observed) -> Step {
    if o.phase.is_some_and(BackupPhase::is_final) {
        return Step::Done;
    }
    match &o.job {
        Some(JobState::Running) => Step::Wait,
        Some(JobState::Succeeded {
            outcome: text,
            since,
        }) => match outcome(text.as_deref()) {
            Some(out) if out.error.is_none() && out.manifest.is_some() => Step::Complete(out),
            Some(out) => Step::Fail(
                out.error
                    .unwrap_or_else(|| "the backup Job wrote no manifest".to_string()),
            ),
            None if *since < OUTCOME_GRACE => Step::Wait,
            None => Step::Fail(
                "the backup Job succeeded but left no outcome: the backup is not trusted".into(),
            ),
        },
        Some(JobState::Failed {
            outcome: text,
            reason,
            since,
        }) => match (outcome(text.as_deref()), text) {
            (Some(Outcome { error: Some(e), .. }), _) => Step::Fail(e),
            (None, Some(raw)) if !raw.trim().is_empty() => Step::Fail(format!(
                "the backup Job failed: {}",
                raw.trim().lines().last().unwrap_or_default()
            )),
            _ if *since < Duration::from_secs(10) => Step::Wait,
            _ => Step::Fail(format!("the backup Job failed: {reason}")),
        },
        None => {
            if o.name.len() > job::MAX_NAME {
                return Step::Fail(format!(
                    "the name is longer than {} characters (its Job's name would be too long)",
                    job::MAX_NAME
                ));
            }
            if !o.cluster_exists {
                return Step::Fail(format!(
                    "ValkeyCluster {} not found in namespace {}",
                    o.cluster, o.namespace
                ));
            }
            match o.credentials {
                Credentials::Missing => Step::Fail(format!(
                    "credentials Secret {} not found in namespace {}",
                    o.credentials_secret, o.namespace
                )),
                Credentials::MissingKey(key) => Step::Fail(format!(
                    "credentials Secret {} has no key {key}",
                    o.credentials_secret
                )),
                Credentials::Present => match &o.bucket_error {
                    Some(e) => Step::Fail(e.clone()),
                    None => Step::Start,
                },
            }
        }
    }
}

fn job_state(
    job: &Job,
    pod_message: Option<String>,
    now: k8s_openapi::jiff::Timestamp,
) -> JobState {
    let status = job.status.clone().unwrap_or_default();
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t && c.status == "True")
            .cloned()
    };
    let since = |at: Option<&Time>| {
        at.map(|t| {
            let secs = now.as_second() - t.0.as_second();
            Duration::from_secs(u64::try_from(secs).unwrap_or(0))
        })
        .unwrap_or_default()
    };
    if status.succeeded.unwrap_or(0) > 0 {
        return JobState::Succeeded {
            outcome: pod_message,
            since: since(status.completion_time.as_ref()),
        };
    }
    if let Some(failed) = condition("Failed") {
        return JobState::Failed {
            outcome: pod_message,
            reason: failed
                .message
                .or(failed.reason)
                .unwrap_or_else(|| "no reason given".into()),
            since: since(failed.last_transition_time.as_ref()),
        };
    }
    if status.failed.unwrap_or(0) > 0 {
        return JobState::Failed {
            outcome: pod_message,
            reason: "its pod failed".into(),
            since: Duration::ZERO,
        };
    }
    JobState::Running
}

/// The termination message of the backup Job's own pod, from the
/// operator's pod cache: a pod of `ns` labelled for backup `name` whose
/// controller is the Job `job` (by uid). Another pod carrying the same
/// label (a tenant's, or one left from an earlier Job of the same name)
/// never decides the backup's outcome.
fn pod_message(ctx: &Context, ns: &str, name: &str, job: &Job) -> Option<String> {
    let job_uid = job.metadata.uid.as_deref()?;
    ctx.pods
        .state()
        .iter()
        .filter(|p: &&Arc<Pod>| {
            p.namespace().as_deref() == Some(ns)
                && p.labels().get(LABEL_BACKUP).map(String::as_str) == Some(name)
                && p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.kind == "Job" && o.uid == job_uid)
        })
        .find_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .iter()
                .flatten()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        })
        .filter(|m| !m.trim().is_empty())
}

/// The S3 settings of `backup` with the keys of `secret`.
fn s3_settings(backup: &ValkeyBackup, secret: &Secret) -> Option<super::store::S3Settings> {
    let spec = &backup.spec.s3;
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    Some(super::store::S3Settings {
        endpoint: spec.endpoint.clone(),
        bucket: spec.bucket.clone(),
        region: spec.region.clone(),
        access_key_id: key("AWS_ACCESS_KEY_ID")?,
        secret_access_key: key("AWS_SECRET_ACCESS_KEY")?,
    })
}

/// Lists the backup's folder once with its credentials before its Job is
/// made: wrong credentials or a missing bucket fail the backup at once with
/// the store's answer (a Job's pod can only exit 1). One bounded request.
async fn check_bucket(backup: &ValkeyBackup, secret: &Secret) -> Result<(), String> {
    let spec = &backup.spec.s3;
    let settings = s3_settings(backup, secret).ok_or_else(|| {
        format!(
            "credentials Secret {} has no usable keys",
            spec.credentials_secret
        )
    })?;
    let store = super::store::s3_for_operator(&settings)
        .map_err(|e| format!("building the S3 client for {}: {e}", spec.endpoint))?;
    let folder = api::v1alpha1::backup_folder(
        &spec.prefix,
        &backup.namespace().unwrap_or_default(),
        &backup.name_any(),
    );
    let listed = tokio::time::timeout(
        Duration::from_secs(15),
        store.list_with_delimiter(Some(&object_store::path::Path::from(folder.as_str()))),
    )
    .await;
    match listed {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "bucket {} at {} cannot be listed (wrong credentials or no such bucket?): {}",
            spec.bucket,
            spec.endpoint,
            super::store::store_error(&e)
        )),
        Err(_) => Err(format!(
            "bucket {} at {}: no answer within 15 s",
            spec.bucket, spec.endpoint
        )),
    }
}

/// The outcome of a succeeded Job whose runtime kept no termination message
/// (the testbed's keeps none): the manifest read back from the bucket, which
/// is the proof of a complete backup anyway. Bounded in size and time.
async fn outcome_from_bucket(ctx: &Context, backup: &ValkeyBackup) -> Option<String> {
    let ns = backup.namespace().unwrap_or_default();
    let spec = &backup.spec.s3;
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&spec.credentials_secret)
        .await
        .ok()??;
    let settings = s3_settings(backup, &secret)?;
    let store = super::store::s3_for_operator(&settings).ok()?;
    let path = format!(
        "{}/{}",
        api::v1alpha1::backup_folder(&spec.prefix, &ns, &backup.name_any()),
        super::manifest::MANIFEST
    );
    let path = object_store::path::Path::from(path.as_str());
    let read = async {
        use object_store::ObjectStoreExt as _;
        let meta = store.head(&path).await.ok()?;
        if meta.size > super::manifest::MAX_MANIFEST_BYTES as u64 {
            return None;
        }
        store.get(&path).await.ok()?.bytes().await.ok()
    };
    let bytes = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .ok()??;
    let manifest: super::manifest::Manifest = serde_json::from_slice(&bytes).ok()?;
    manifest.check().ok()?;
    serde_json::to_string(&Outcome {
        manifest: Some(path.to_string()),
        size_bytes: manifest.size_bytes(),
        shards: u32::try_from(manifest.shards.len()).unwrap_or(u32::MAX),
        error: None,
    })
    .ok()
}

/// How long the deletion of a backup's objects is retried (the store down)
/// before the ValkeyBackup goes anyway, its objects left (and said so).
const DELETE_PATIENCE: Duration = Duration::from_secs(600);

fn has_finalizer(backup: &ValkeyBackup) -> bool {
    backup.finalizers().iter().any(|f| f == BACKUP_FINALIZER)
}

/// Writes `finalizers` as the backup's list, guarded by its
/// resourceVersion (a list changed meanwhile is a conflict, retried).
async fn set_finalizers(
    ctx: &Context,
    backup: &ValkeyBackup,
    finalizers: Vec<String>,
) -> Result<(), BackupControllerError> {
    ctx.metrics.api_write("ValkeyBackup", "patch");
    Api::<ValkeyBackup>::namespaced(ctx.client.clone(), &backup.namespace().unwrap_or_default())
        .patch(
            &backup.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": backup.resource_version(),
                }
            })),
        )
        .await
        .map_err(|source| BackupControllerError::Finalizer { source })?;
    Ok(())
}

/// What deleting a backup does next (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// `Retain`: the objects stay; the finalizer goes.
    Retain,
    /// Its Job still runs (it would write on): stop it first.
    StopJob,
    /// The Job is stopping; wait for it and its pod.
    WaitForJob,
    /// Delete the objects, then the finalizer.
    DeleteObjects,
}

/// Decides the next step of a deletion (pure). `job_running`: the Job
/// exists and has not finished; `job_stopping`: it (or its pod) is still
/// going away.
pub fn cleanup_step(
    policy: api::v1alpha1::BackupDeletionPolicy,
    job_running: bool,
    job_stopping: bool,
) -> Cleanup {
    use api::v1alpha1::BackupDeletionPolicy as P;
    match (policy, job_running, job_stopping) {
        (P::Retain, _, _) => Cleanup::Retain,
        (P::Delete, true, false) => Cleanup::StopJob,
        (P::Delete, _, true) => Cleanup::WaitForJob,
        (P::Delete, false, false) => Cleanup::DeleteObjects,
    }
}

/// How long one try at deleting a backup's objects may hold a worker; a
/// store that does not finish is tried again later (see [`DELETE_PATIENCE`]).
const DELETE_TRY: Duration = Duration::from_secs(20);

/// A deleted ValkeyBackup: its objects go (unless `Retain`), then it does.
/// A store that stays unreachable is retried for [`DELETE_PATIENCE`]; a
/// credentials Secret that is gone (a namespace being deleted) can never
/// succeed: the objects are left and an event says where.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn clean_up(backup: &ValkeyBackup, ctx: &Context) -> Result<Action, BackupControllerError> {
    if !has_finalizer(backup) {
        return Ok(Action::await_change());
    }
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let read = |what: String| move |source| BackupControllerError::Read { what, source };
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let job_name = job::job_name(&name);
    let job = jobs
        .get_opt(&job_name)
        .await
        .map_err(read(format!("Job {job_name}")))?;
    let finished = |j: &Job| {
        j.status.as_ref().is_some_and(|s| {
            s.succeeded.unwrap_or(0) > 0 || s.failed.unwrap_or(0) > 0 || s.completion_time.is_some()
        })
    };
    let job_running = job
        .as_ref()
        .is_some_and(|j| !finished(j) && j.metadata.deletion_timestamp.is_none());
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL_BACKUP}={name}")))
        .await
        .map_err(read(format!("pods of Job {job_name}")))?;
    let pod_running = pods.items.iter().any(|p| {
        !matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    });
    let job_stopping = job
        .as_ref()
        .is_some_and(|j| j.metadata.deletion_timestamp.is_some())
        || (pod_running && !job_running);
    let events = ctx.events(backup.object_ref(&()));
    let folder = api::v1alpha1::backup_folder(&backup.spec.s3.prefix, &ns, &name);
    let where_ = format!("{folder}/ in bucket {}", backup.spec.s3.bucket);
    match cleanup_step(
        backup.spec.deletion_policy.unwrap_or_default(),
        job_running,
        job_stopping,
    ) {
        Cleanup::Retain => {
            events
                .normal(
                    "BackupObjectsRetained",
                    "Delete",
                    format!("deletionPolicy Retain: the objects under {where_} stay"),
                )
                .await;
        }
        Cleanup::StopJob => {
            ctx.metrics.api_write("Job", "delete");
            jobs.delete(&job_name, &kube::api::DeleteParams::background())
                .await
                .map_err(|source| BackupControllerError::DeleteJob {
                    job: job_name.clone(),
                    source,
                })?;
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        Cleanup::WaitForJob => return Ok(Action::requeue(Duration::from_secs(2))),
        Cleanup::DeleteObjects => {
            let Some(_slot) = StoreSlots::process().try_take(&ns) else {
                return Ok(Action::requeue(STORE_BUSY_RETRY));
            };
            let secret = Api::<Secret>::namespaced(ctx.client.clone(), &ns)
                .get_opt(&backup.spec.s3.credentials_secret)
                .await
                .map_err(read(format!(
                    "Secret {}",
                    backup.spec.s3.credentials_secret
                )))?;
            let deleted = match secret.as_ref().and_then(|s| s3_settings(backup, s)) {
                None => Err((
                    false,
                    format!(
                        "credentials Secret {} is gone or lacks its keys",
                        backup.spec.s3.credentials_secret
                    ),
                )),
                Some(settings) => match super::store::s3_for_operator(&settings) {
                    Err(e) => Err((false, format!("building the S3 client: {e}"))),
                    Ok(store) => match tokio::time::timeout(
                        DELETE_TRY,
                        super::store::delete_folder(&store, &folder),
                    )
                    .await
                    {
                        Ok(Ok(n)) => Ok(n),
                        Ok(Err(e)) => Err((true, super::store::store_error(&e))),
                        Err(_) => {
                            Err((true, format!("no answer within {} s", DELETE_TRY.as_secs())))
                        }
                    },
                },
            };
            match deleted {
                Ok(n) => {
                    events
                        .normal(
                            "BackupObjectsDeleted",
                            "Delete",
                            format!("{n} object(s) under {where_} deleted"),
                        )
                        .await;
                }
                Err((retry, why)) => {
                    let since = backup
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .map(|t| {
                            let now = k8s_openapi::jiff::Timestamp::now();
                            Duration::from_secs(
                                u64::try_from(now.as_second() - t.0.as_second()).unwrap_or(0),
                            )
                        })
                        .unwrap_or_default();
                    if retry && since < DELETE_PATIENCE {
                        events
                            .warning(
                                "BackupObjectsNotDeleted",
                                "Delete",
                                format!("deleting the objects under {where_}: {why}; retrying"),
                            )
                            .await;
                        return Ok(Action::requeue(Duration::from_secs(30)));
                    }
                    events
                        .warning(
                            "BackupObjectsLeft",
                            "Delete",
                            format!("the objects under {where_} were not deleted: {why}"),
                        )
                        .await;
                }
            }
        }
    }
    let rest: Vec<String> = backup
        .finalizers()
        .iter()
        .filter(|f| *f != BACKUP_FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, backup, rest).await?;
    Ok(Action::await_change())
}

async fn reconcile(
    backup: Arc<ValkeyBackup>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    if backup.metadata.deletion_timestamp.is_some() {
        return clean_up(&backup, &ctx).await;
    }
    if !has_finalizer(&backup) {
        let mut all = backup.finalizers().to_vec();
        all.push(BACKUP_FINALIZER.to_string());
        // Without the finalizer the backup is still taken (an operator run
        // under an older chart's RBAC may not patch ValkeyBackups); only
        // the deletion of its objects with it is lost, and said so.
        if let Err(error) = set_finalizers(&ctx, &backup, all).await {
            tracing::warn!(backup = %backup.name_any(), %error,
                "cannot add the finalizer: deleting this ValkeyBackup will leave its objects");
        }
    }
    take(backup, ctx).await
}

/// A Completed backup's time, duration and size, for the backup gauges.
fn record_success(
    ctx: &Context,
    backup: &ValkeyBackup,
    status: &api::v1alpha1::ValkeyBackupStatus,
) {
    if status.phase != Some(BackupPhase::Completed) {
        return;
    }
    let Some(done) = &status.completion_time else {
        return;
    };
    let started = status.start_time.as_ref().unwrap_or(done);
    let seconds = |t: &Time| t.0.as_millisecond() as f64 / 1000.0;
    ctx.metrics.backup_completed(
        &backup.namespace().unwrap_or_default(),
        &backup.spec.cluster,
        seconds(done),
        (seconds(done) - seconds(started)).max(0.0),
        status.size_bytes.unwrap_or(0),
    );
}

/// Takes the backup: checks, its Job, its outcome.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn take(
    backup: Arc<ValkeyBackup>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let status = backup.status.clone().unwrap_or_default();
    if status.phase.is_some_and(BackupPhase::is_final) {
        record_success(&ctx, &backup, &status);
        return Ok(Action::await_change());
    }
    let client = ctx.client.clone();
    let read = |what: String| move |source| BackupControllerError::Read { what, source };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let job_name = job::job_name(&name);
    let job = jobs
        .get_opt(&job_name)
        .await
        .map_err(read(format!("Job {job_name}")))?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut observed = Observed {
        phase: status.phase,
        name: name.clone(),
        namespace: ns.clone(),
        cluster: backup.spec.cluster.clone(),
        credentials_secret: backup.spec.s3.credentials_secret.clone(),
        cluster_exists: false,
        cluster_tls_secret: None,
        credentials: Credentials::Missing,
        bucket_error: None,
        job: None,
    };
    if let Some(j) = job.as_ref() {
        let mut state = job_state(j, pod_message(&ctx, &ns, &name, j), now);
        if let JobState::Succeeded {
            outcome: o @ None, ..
        } = &mut state
        {
            let Some(_slot) = StoreSlots::process().try_take(&ns) else {
                return Ok(Action::requeue(STORE_BUSY_RETRY));
            };
            *o = outcome_from_bucket(&ctx, &backup).await;
        }
        observed.job = Some(state);
    }
    let mut secret = None;
    if job.is_none() {
        let cluster = Api::<ValkeyCluster>::namespaced(client.clone(), &ns)
            .get_opt(&backup.spec.cluster)
            .await
            .map_err(read(format!("ValkeyCluster {}", backup.spec.cluster)))?;
        observed.cluster_exists = cluster.is_some();
        observed.cluster_tls_secret = cluster.as_ref().filter(|c| c.spec.tls.enabled).map(|c| {
            c.spec
                .tls
                .secret_name
                .clone()
                .unwrap_or_else(|| api::constants::tls_secret_name(&c.name_any()))
        });
        secret = Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt(&backup.spec.s3.credentials_secret)
            .await
            .map_err(read(format!(
                "Secret {}",
                backup.spec.s3.credentials_secret
            )))?;
        observed.credentials = match secret {
            None => Credentials::Missing,
            Some(ref s) => {
                let has = |k: &str| {
                    s.data.as_ref().is_some_and(|d| d.contains_key(k))
                        || s.string_data.as_ref().is_some_and(|d| d.contains_key(k))
                };
                if !has("AWS_ACCESS_KEY_ID") {
                    Credentials::MissingKey("AWS_ACCESS_KEY_ID")
                } else if !has("AWS_SECRET_ACCESS_KEY") {
                    Credentials::MissingKey("AWS_SECRET_ACCESS_KEY")
                } else {
                    Credentials::Present
                }
            }
        };
    }

    if observed.credentials == Credentials::Present
        && observed.cluster_exists
        && let Some(secret) = secret.as_ref()
    {
        let Some(_slot) = StoreSlots::process().try_take(&ns) else {
            return Ok(Action::requeue(STORE_BUSY_RETRY));
        };
        observed.bucket_error = check_bucket(&backup, secret).await.err();
    }

    let events = ctx.events(backup.object_ref(&()));
    let mut next = status.clone();
    let action = match decide(&observed) {
        Step::Done => return Ok(Action::await_change()),
        Step::Wait => {
            if next.phase.is_none() {
                next.phase = Some(BackupPhase::Running);
            }
            Action::requeue(POLL)
        }
        Step::Start => {
            let desired = job::build(
                &backup,
                &ctx.settings.exporter_image,
                observed.cluster_tls_secret.as_deref(),
            );
            ctx.metrics.api_write("Job", "create");
            jobs.patch(
                &job_name,
                &PatchParams::apply(api::constants::FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(|source| BackupControllerError::CreateJob {
                job: job_name.clone(),
                source,
            })?;
            next.phase = Some(BackupPhase::Running);
            next.start_time = Some(Time(now));
            next.job = Some(job_name.clone());
            next.message = Some(format!("Job {job_name} takes the backup"));
            events
                .normal(
                    "BackupStarted",
                    "Backup",
                    format!(
                        "Job {job_name} backs up ValkeyCluster {}",
                        backup.spec.cluster
                    ),
                )
                .await;
            Action::requeue(POLL)
        }
        Step::Complete(out) => {
            let manifest = out.manifest.clone().unwrap_or_default();
            next.phase = Some(BackupPhase::Completed);
            next.completion_time = Some(Time(now));
            next.message = Some(format!(
                "{} shard(s), {} bytes; manifest {manifest}",
                out.shards, out.size_bytes
            ));
            next.manifest = out.manifest;
            next.size_bytes = Some(out.size_bytes);
            next.shards = Some(out.shards);
            record_success(&ctx, &backup, &next);
            events
                .normal(
                    "BackupCompleted",
                    "Backup",
                    next.message.clone().unwrap_or_default(),
                )
                .await;
            Action::await_change()
        }
        Step::Fail(message) => {
            next.phase = Some(BackupPhase::Failed);
            next.completion_time = Some(Time(now));
            next.message = Some(message.clone());
            events.warning("BackupFailed", "Backup", message).await;
            Action::await_change()
        }
    };
    if next != status {
        ctx.metrics.api_write("ValkeyBackup", "patch_status");
        Api::<ValkeyBackup>::namespaced(client, &ns)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": next })),
            )
            .await
            .map_err(|source| BackupControllerError::Status { source })?;
    }
    Ok(action)
}

fn error_policy(
    backup: Arc<ValkeyBackup>,
    error: &BackupControllerError,
    _ctx: Arc<Context>,
) -> Action {
    tracing::warn!(backup = %backup.name_any(), %error, "backup reconcile failed");
    Action::requeue(POLL)
}

/// Runs the ValkeyBackup controller over `api` (one namespace or all) and
/// the Jobs it owns, until `shutdown` resolves.
pub async fn run(
    backups: Api<ValkeyBackup>,
    jobs: Api<Job>,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    Controller::new(backups, watcher::Config::default().any_semantic())
        .owns(jobs, watcher::Config::default().labels(LABEL_BACKUP))
        .with_config(controller::Config::default().concurrency(4))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "backup reconcile finished with an error");
            }
            futures::future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_deleted_backup_stops_its_job_before_its_objects_go_unless_retained() {
        use api::v1alpha1::BackupDeletionPolicy::{Delete, Retain};
        assert_eq!(cleanup_step(Retain, true, false), Cleanup::Retain);
        assert_eq!(cleanup_step(Delete, true, false), Cleanup::StopJob);
        assert_eq!(cleanup_step(Delete, false, true), Cleanup::WaitForJob);
        assert_eq!(cleanup_step(Delete, true, true), Cleanup::WaitForJob);
        assert_eq!(cleanup_step(Delete, false, false), Cleanup::DeleteObjects);
    }

    fn observed() -> Observed {
        Observed {
            phase: None,
            name: "b".into(),
            namespace: "ns".into(),
            cluster: "c".into(),
            credentials_secret: "s3".into(),
            cluster_exists: true,
            cluster_tls_secret: None,
            credentials: Credentials::Present,
            bucket_error: None,
            job: None,
        }
    }

    fn ok_outcome() -> String {
        r#"{"manifest":"p/ns/b/manifest.json","sizeBytes":10,"shards":3}"#.into()
    }

    #[test]
    fn a_new_backup_with_good_input_starts_its_job() {
        assert_eq!(decide(&observed()), Step::Start);
    }

    #[test]
    fn a_missing_cluster_or_secret_fails_with_a_message_naming_it() {
        let mut o = observed();
        o.cluster_exists = false;
        assert_eq!(
            decide(&o),
            Step::Fail("ValkeyCluster c not found in namespace ns".into())
        );
        let mut o = observed();
        o.credentials = Credentials::Missing;
        assert_eq!(
            decide(&o),
            Step::Fail("credentials Secret s3 not found in namespace ns".into())
        );
        o.credentials = Credentials::MissingKey("AWS_SECRET_ACCESS_KEY");
        assert!(matches!(decide(&o), Step::Fail(m) if m.contains("AWS_SECRET_ACCESS_KEY")));
    }

    #[test]
    fn a_bucket_the_credentials_cannot_list_fails_before_any_job() {
        let mut o = observed();
        o.bucket_error = Some("bucket b at e cannot be listed: 403".into());
        assert_eq!(
            decide(&o),
            Step::Fail("bucket b at e cannot be listed: 403".into())
        );
    }

    #[test]
    fn final_phases_are_never_left() {
        for phase in [BackupPhase::Completed, BackupPhase::Failed] {
            let mut o = observed();
            o.phase = Some(phase);
            o.job = Some(JobState::Running);
            assert_eq!(decide(&o), Step::Done);
        }
    }

    #[test]
    fn a_succeeded_job_completes_only_with_a_manifest() {
        let mut o = observed();
        o.job = Some(JobState::Succeeded {
            outcome: Some(ok_outcome()),
            since: Duration::ZERO,
        });
        assert!(matches!(decide(&o), Step::Complete(out) if out.shards == 3));
        o.job = Some(JobState::Succeeded {
            outcome: Some(r#"{"sizeBytes":0,"shards":0}"#.into()),
            since: Duration::ZERO,
        });
        assert!(matches!(decide(&o), Step::Fail(_)));
    }

    #[test]
    fn a_succeeded_job_without_its_outcome_waits_then_fails() {
        let mut o = observed();
        o.job = Some(JobState::Succeeded {
            outcome: None,
            since: Duration::from_secs(1),
        });
        assert_eq!(decide(&o), Step::Wait);
        o.job = Some(JobState::Succeeded {
            outcome: None,
            since: Duration::from_secs(300),
        });
        assert!(matches!(decide(&o), Step::Fail(_)));
    }

    #[test]
    fn a_failed_job_passes_on_the_error_it_wrote() {
        let mut o = observed();
        o.job = Some(JobState::Failed {
            outcome: Some(r#"{"error":"bucket x cannot be listed: 403"}"#.into()),
            reason: "BackoffLimitExceeded".into(),
            since: Duration::ZERO,
        });
        assert_eq!(
            decide(&o),
            Step::Fail("bucket x cannot be listed: 403".into())
        );
        o.job = Some(JobState::Failed {
            outcome: None,
            reason: "BackoffLimitExceeded".into(),
            since: Duration::from_secs(60),
        });
        assert_eq!(
            decide(&o),
            Step::Fail("the backup Job failed: BackoffLimitExceeded".into())
        );
    }

    #[test]
    fn a_running_job_is_waited_for() {
        let mut o = observed();
        o.job = Some(JobState::Running);
        assert_eq!(decide(&o), Step::Wait);
    }
}
