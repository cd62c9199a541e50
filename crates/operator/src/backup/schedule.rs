// Over 600 lines: 456 lines of code; the rest are its unit tests, kept beside it.
//! The ValkeyBackupSchedule controller: a third kube-runtime Controller in
//! the operator process. Each run creates one ValkeyBackup (the backup
//! controller takes it); backups beyond `keep` are deleted (their objects
//! go with them unless their `deletionPolicy` is `Retain`, see the backup
//! controller's finalizer).
//!
//! ```text
//!     observe (the schedule, its backups by label)
//!       -> decide (pure: is a run due, may it start, what to prune)
//!       -> act (create a ValkeyBackup, delete the pruned; status, events, gauges)
//! ```
//!
//! A run missed while the operator was away is taken once when it is back
//! (the latest occurrence only, no backfill); a run due while a backup of
//! the schedule is still unfinished is skipped and said so. Cron times are
//! UTC. The backups are not owned by the schedule, so deleting a schedule
//! keeps them.

use crate::context::Context;
use api::v1alpha1::{
    BackupPhase, LABEL_SCHEDULE, ValkeyBackup, ValkeyBackupSchedule, ValkeyBackupScheduleStatus,
    ValkeyBackupSpec,
};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The longest wait between two looks at a schedule (its backups are
/// watched too; this bounds what a missed event costs).
const MAX_WAIT: Duration = Duration::from_secs(300);

/// Why a reconcile of a schedule failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("listing the backups of the schedule: {0}")]
    List(kube::Error),
    #[error("creating ValkeyBackup {name}: {source}")]
    Create { name: String, source: kube::Error },
    #[error("deleting ValkeyBackup {name}: {source}")]
    Delete { name: String, source: kube::Error },
    #[error("writing the status: {0}")]
    Status(kube::Error),
}

/// Parses a schedule: five fields (minute, hour, day of month, month, day
/// of week) or `@hourly`, `@daily`/`@midnight`, `@weekly`, `@monthly`,
/// `@yearly`/`@annually`. The error says why, for `spec.schedule`.
pub fn parse(expr: &str) -> Result<Cron, String> {
    let expr = expr.trim();
    let fields = match expr {
        "@hourly" => "0 * * * *",
        "@daily" | "@midnight" => "0 0 * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        other => other,
    };
    if fields.split_whitespace().count() != 5 {
        return Err(format!(
            "{expr:?} is not a cron expression of five fields (minute hour day-of-month month day-of-week) or @hourly/@daily/@weekly/@monthly/@yearly"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .build()
        .parse(fields)
        .map_err(|e| format!("{expr:?}: {e}"))
}

fn utc(t: Timestamp) -> k8s_openapi::jiff::Zoned {
    t.to_zoned(TimeZone::UTC)
}

/// The first occurrence strictly after `t`.
pub fn next_after(cron: &Cron, t: Timestamp) -> Option<Timestamp> {
    cron.find_next_occurrence(&utc(t), false)
        .ok()
        .map(|z| z.timestamp())
}

/// The run due at `now`: the latest occurrence in `(last, now]`, if any.
pub fn due(cron: &Cron, last: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let latest = cron
        .find_previous_occurrence(&utc(now), true)
        .ok()?
        .timestamp();
    (latest > last).then_some(latest)
}

/// Seconds between the next two runs after `now` (the alert's yardstick).
pub fn interval(cron: &Cron, now: Timestamp) -> Option<f64> {
    let a = next_after(cron, now)?;
    let b = next_after(cron, a)?;
    Some((b.as_second() - a.as_second()) as f64)
}

/// `<schedule>-<YYYYMMDDHHMM>` (UTC) of a run.
pub fn backup_name(schedule: &str, run: Timestamp) -> String {
    format!("{schedule}-{}", utc(run).strftime("%Y%m%d%H%M"))
}

/// One backup of a schedule, as far as its schedule cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub name: String,
    pub phase: Option<BackupPhase>,
    /// Its creation time (what orders them).
    pub created: Timestamp,
    pub completed: Option<Timestamp>,
    pub deleting: bool,
}

/// The backups to delete so that the newest `keep` Completed ones stay,
/// and Failed ones only while newer than the newest Completed one (at most
/// `keep` of them). Unfinished backups are never pruned.
pub fn prune(made: &[Made], keep: u32) -> Vec<String> {
    let mut finished: Vec<&Made> = made
        .iter()
        .filter(|m| !m.deleting && m.phase.is_some_and(BackupPhase::is_final))
        .collect();
    // Newest first; the name breaks ties (it holds the run's minute).
    finished.sort_by(|a, b| b.created.cmp(&a.created).then(b.name.cmp(&a.name)));
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    let newest_completed = finished
        .iter()
        .find(|m| m.phase == Some(BackupPhase::Completed))
        .map(|m| m.created);
    let mut completed = 0;
    let mut failed = 0;
    let mut out = Vec::new();
    for m in finished {
        if m.phase == Some(BackupPhase::Completed) {
            completed += 1;
            if completed > keep {
                out.push(m.name.clone());
            }
        } else {
            failed += 1;
            let newer = newest_completed.is_none_or(|c| m.created > c);
            if !newer || failed > keep {
                out.push(m.name.clone());
            }
        }
    }
    out
}

/// What a reconcile of a schedule decided (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// A run is due at this time: create this backup.
    pub create: Option<(Timestamp, String)>,
    /// A run is due but a backup of the schedule is unfinished: skipped.
    pub skip: Option<(Timestamp, String)>,
    /// The due run's backup exists already (this reconcile saw a status
    /// older than the one that made it): recorded, nothing made.
    pub made: Option<(Timestamp, String)>,
    pub prune: Vec<String>,
    pub next: Option<Timestamp>,
}

/// Decides a reconcile of a schedule (pure). `last`: the last run, or the
/// schedule's creation when it never ran.
pub fn decide(
    cron: &Cron,
    name: &str,
    suspend: bool,
    keep: u32,
    last: Timestamp,
    now: Timestamp,
    made: &[Made],
) -> Plan {
    let mut plan = Plan {
        create: None,
        skip: None,
        made: None,
        prune: prune(made, keep),
        next: None,
    };
    if suspend {
        return plan;
    }
    if let Some(run) = due(cron, last, now) {
        let name = backup_name(name, run);
        if made.iter().any(|m| m.name == name) {
            plan.made = Some((run, name));
            plan.next = next_after(cron, now.max(run));
            return plan;
        }
        let busy = made
            .iter()
            .find(|m| !m.deleting && !m.phase.is_some_and(BackupPhase::is_final));
        match busy {
            Some(m) => plan.skip = Some((run, m.name.clone())),
            None => plan.create = Some((run, name)),
        }
    }
    plan.next = next_after(cron, now.max(last));
    plan
}

fn made_of(b: &ValkeyBackup) -> Made {
    let status = b.status.as_ref();
    Made {
        name: b.name_any(),
        phase: status.and_then(|s| s.phase),
        created: b
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        completed: status.and_then(|s| s.completion_time.as_ref()).map(|t| t.0),
        deleting: b.metadata.deletion_timestamp.is_some(),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn reconcile(
    schedule: Arc<ValkeyBackupSchedule>,
    ctx: Arc<Context>,
) -> Result<Action, ScheduleError> {
    let ns = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let spec = &schedule.spec;
    let status = schedule.status.clone().unwrap_or_default();
    let events = ctx.events(schedule.object_ref(&()));
    let mut next = ValkeyBackupScheduleStatus {
        observed_generation: schedule.metadata.generation,
        ..status.clone()
    };
    let schedules: Api<ValkeyBackupSchedule> = Api::namespaced(ctx.client.clone(), &ns);
    let write = |next: ValkeyBackupScheduleStatus| {
        let schedules = schedules.clone();
        let ctx = ctx.clone();
        let name = name.clone();
        async move {
            ctx.metrics
                .api_write("ValkeyBackupSchedule", "patch_status");
            schedules
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({ "status": next })),
                )
                .await
                .map(|_| ())
                .map_err(ScheduleError::Status)
        }
    };

    let cron = if name.len() > api::v1alpha1::schedule::MAX_SCHEDULE_NAME {
        Err(format!(
            "metadata.name: at most {} characters (each backup is named <schedule>-<YYYYMMDDHHMM>)",
            api::v1alpha1::schedule::MAX_SCHEDULE_NAME
        ))
    } else {
        parse(&spec.schedule).map_err(|e| format!("spec.schedule: {e}"))
    };
    let cron = match cron {
        Ok(cron) => cron,
        Err(message) => {
            ctx.metrics.backup_schedule(&ns, &spec.cluster, &name, None);
            if status.message.as_deref() != Some(message.as_str()) {
                events
                    .warning("InvalidSchedule", "Schedule", message.clone())
                    .await;
            }
            next.message = Some(message);
            next.next_schedule_time = None;
            if next != status {
                write(next).await?;
            }
            return Ok(Action::await_change());
        }
    };

    let backups: Api<ValkeyBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = backups
        .list(&ListParams::default().labels(&format!("{LABEL_SCHEDULE}={name}")))
        .await
        .map_err(ScheduleError::List)?;
    let made: Vec<Made> = listed.items.iter().map(made_of).collect();
    let now = Timestamp::now();
    let created = schedule
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let last = status.last_schedule_time.as_ref().map_or(created, |t| t.0);
    let plan = decide(&cron, &name, spec.suspend, spec.keep, last, now, &made);

    if let Some((run, backup)) = &plan.create {
        let object = ValkeyBackup {
            metadata: ObjectMeta {
                name: Some(backup.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([
                    (LABEL_SCHEDULE.to_string(), name.clone()),
                    (
                        api::constants::LABEL_CLUSTER.to_string(),
                        spec.cluster.clone(),
                    ),
                ])),
                ..Default::default()
            },
            spec: ValkeyBackupSpec {
                cluster: spec.cluster.clone(),
                s3: spec.s3.clone(),
                deletion_policy: spec.deletion_policy,
            },
            status: None,
        };
        ctx.metrics.api_write("ValkeyBackup", "create");
        match backups.create(&PostParams::default(), &object).await {
            Ok(_) => {
                events
                    .normal(
                        "BackupScheduled",
                        "Schedule",
                        format!("ValkeyBackup {backup} for the run of {run}"),
                    )
                    .await;
            }
            // Made by an earlier reconcile whose status write was lost.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => {
                return Err(ScheduleError::Create {
                    name: backup.clone(),
                    source,
                });
            }
        }
        next.last_schedule_time = Some(Time(*run));
        next.last_backup = Some(backup.clone());
    }
    if let Some((run, backup)) = &plan.made {
        next.last_schedule_time = Some(Time(*run));
        next.last_backup = Some(backup.clone());
    }
    if let Some((run, busy)) = &plan.skip {
        events
            .normal(
                "BackupSkipped",
                "Schedule",
                format!("the run of {run} is skipped: ValkeyBackup {busy} is still unfinished"),
            )
            .await;
        next.last_schedule_time = Some(Time(*run));
    }
    for pruned in &plan.prune {
        ctx.metrics.api_write("ValkeyBackup", "delete");
        match backups.delete(pruned, &DeleteParams::background()).await {
            Ok(_) => {
                events
                    .normal(
                        "BackupPruned",
                        "Schedule",
                        format!(
                            "ValkeyBackup {pruned} deleted: beyond keep {} of this schedule",
                            spec.keep
                        ),
                    )
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(ScheduleError::Delete {
                    name: pruned.clone(),
                    source,
                });
            }
        }
    }
    if let Some(newest) = made
        .iter()
        .filter(|m| m.phase == Some(BackupPhase::Completed))
        .max_by_key(|m| (m.completed, m.created))
    {
        next.last_successful_backup = Some(newest.name.clone());
        next.last_successful_time = newest.completed.map(Time);
    }
    next.next_schedule_time = if spec.suspend {
        None
    } else {
        plan.next.map(Time)
    };
    next.message = None;
    ctx.metrics.backup_schedule(
        &ns,
        &spec.cluster,
        &name,
        (!spec.suspend).then(|| interval(&cron, now)).flatten(),
    );
    if next != status {
        write(next).await?;
    }
    let until_next = plan
        .next
        .map(|t| {
            Duration::from_secs(u64::try_from(t.as_second() - now.as_second()).unwrap_or(0) + 1)
        })
        .unwrap_or(MAX_WAIT);
    Ok(Action::requeue(until_next.min(MAX_WAIT)))
}

fn error_policy(
    schedule: Arc<ValkeyBackupSchedule>,
    error: &ScheduleError,
    _ctx: Arc<Context>,
) -> Action {
    tracing::warn!(schedule = %schedule.name_any(), %error, "backup schedule reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// Runs the ValkeyBackupSchedule controller over `schedules` (one namespace
/// or all), woken by changes of the backups it made, until `shutdown`.
pub async fn run(
    schedules: Api<ValkeyBackupSchedule>,
    backups: Api<ValkeyBackup>,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    Controller::new(schedules, watcher::Config::default().any_semantic())
        .watches(
            backups,
            watcher::Config::default().labels(LABEL_SCHEDULE),
            |b: ValkeyBackup| {
                let schedule = b.labels().get(LABEL_SCHEDULE)?.clone();
                Some(ObjectRef::new(&schedule).within(&b.namespace()?))
            },
        )
        .with_config(controller::Config::default().concurrency(2))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "schedule reconcile finished with an error");
            }
            futures::future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn made(name: &str, phase: BackupPhase, created: &str) -> Made {
        Made {
            name: name.into(),
            phase: Some(phase),
            created: t(created),
            completed: Some(t(created)),
            deleting: false,
        }
    }

    #[test]
    fn schedules_are_five_fields_or_an_alias_and_errors_say_why() {
        assert!(parse("0 3 * * *").is_ok());
        assert!(parse("@daily").is_ok());
        assert!(parse("*/15 * * * 1-5").is_ok());
        let e = parse("0 0 3 * * *").unwrap_err();
        assert!(e.contains("five fields"), "{e}");
        let e = parse("61 * * * *").unwrap_err();
        assert!(e.contains("61"), "{e}");
        assert!(parse("").is_err());
    }

    #[test]
    fn the_latest_missed_run_is_due_once_and_the_next_follows() {
        let cron = parse("0 * * * *").unwrap();
        let last = t("2026-12-06T10:00:00Z");
        assert_eq!(due(&cron, last, t("2026-12-06T10:59:59Z")), None);
        // Three runs missed: only the latest is taken.
        assert_eq!(
            due(&cron, last, t("2026-12-06T13:20:00Z")),
            Some(t("2026-12-06T13:00:00Z"))
        );
        assert_eq!(
            next_after(&cron, t("2026-12-06T13:20:00Z")),
            Some(t("2026-12-06T14:00:00Z"))
        );
        assert_eq!(interval(&cron, last), Some(3600.0));
        assert_eq!(
            backup_name("nightly", t("2026-12-06T13:00:00Z")),
            "nightly-202612061300"
        );
    }

    #[test]
    fn a_run_due_while_a_backup_is_unfinished_is_skipped() {
        let cron = parse("* * * * *").unwrap();
        let mut running = made("s-1", BackupPhase::Running, "2026-12-06T10:00:00Z");
        running.completed = None;
        let plan = decide(
            &cron,
            "s",
            false,
            3,
            t("2026-12-06T10:00:00Z"),
            t("2026-12-06T10:01:30Z"),
            &[running],
        );
        assert_eq!(plan.create, None);
        assert_eq!(
            plan.skip,
            Some((t("2026-12-06T10:01:00Z"), "s-1".to_string()))
        );
        let plan = decide(
            &cron,
            "s",
            false,
            3,
            t("2026-12-06T10:00:00Z"),
            t("2026-12-06T10:01:30Z"),
            &[],
        );
        assert_eq!(
            plan.create,
            Some((t("2026-12-06T10:01:00Z"), "s-202612061001".to_string()))
        );
        assert_eq!(plan.next, Some(t("2026-12-06T10:02:00Z")));
        // A status older than the run that made s-202612061001: recorded,
        // neither made again nor skipped.
        let mut exists = made(
            "s-202612061001",
            BackupPhase::Running,
            "2026-12-06T10:01:00Z",
        );
        exists.completed = None;
        let plan = decide(
            &cron,
            "s",
            false,
            3,
            t("2026-12-06T10:00:00Z"),
            t("2026-12-06T10:01:30Z"),
            &[exists],
        );
        assert_eq!((plan.create, plan.skip), (None, None));
        assert_eq!(
            plan.made,
            Some((t("2026-12-06T10:01:00Z"), "s-202612061001".to_string()))
        );
        // Suspended: nothing runs, pruning goes on.
        let plan = decide(
            &cron,
            "s",
            true,
            3,
            t("2026-12-06T10:00:00Z"),
            t("2026-12-06T10:01:30Z"),
            &[],
        );
        assert_eq!((plan.create, plan.next), (None, None));
    }

    #[test]
    fn retention_keeps_the_newest_completed_and_failed_ones_newer_than_them() {
        let all = vec![
            made("a", BackupPhase::Completed, "2026-12-06T10:00:00Z"),
            made("b", BackupPhase::Failed, "2026-12-06T10:01:00Z"),
            made("c", BackupPhase::Completed, "2026-12-06T10:02:00Z"),
            made("d", BackupPhase::Completed, "2026-12-06T10:03:00Z"),
            made("e", BackupPhase::Failed, "2026-12-06T10:04:00Z"),
            made("f", BackupPhase::Failed, "2026-12-06T10:05:00Z"),
        ];
        let mut pruned = prune(&all, 2);
        pruned.sort();
        // Completed: d, c kept; a pruned. Failed: f, e newer than d (kept,
        // 2 at most); b older than the newest completed.
        assert_eq!(pruned, ["a", "b"]);
        let mut pruned = prune(&all, 1);
        pruned.sort();
        assert_eq!(pruned, ["a", "b", "c", "e"]);
        // Unfinished and deleting backups are left alone.
        let mut running = made("g", BackupPhase::Running, "2026-12-06T09:00:00Z");
        running.phase = Some(BackupPhase::Running);
        let mut going = made("h", BackupPhase::Completed, "2026-12-06T09:00:00Z");
        going.deleting = true;
        assert!(prune(&[running, going], 1).is_empty());
    }
}
