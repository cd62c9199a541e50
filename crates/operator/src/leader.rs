//! Leader election on a Lease (kube-lease-manager): only the holder runs the
//! controller, so two operator replicas never send Valkey commands to the
//! same cluster at once. A holder that loses the lease stops (the process
//! exits and is restarted as a standby) rather than risk acting alongside the
//! new leader.
//!
//! Two things the library leaves to its user are done here:
//! - **A holder that cannot renew must stop by itself.** The library retries
//!   failed renewals (API unreachable, timeouts) without ever reporting the
//!   lease lost, while a standby takes the lease once it expires. A watchdog
//!   reads the Lease every [`CHECK_INTERVAL`] and declares it lost when it
//!   names another holder, has no holder, or when the last renewal it saw
//!   expires within [`SAFETY_MARGIN`].
//! - **A released lease is taken at once.** A standby of the library sleeps
//!   until the lease it last saw expires, even when the holder released it on
//!   shutdown. While waiting, we read the Lease every [`CHECK_INTERVAL`] and,
//!   when it has no holder, start a fresh manager, which takes it at its first
//!   look.

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use std::time::{Duration, SystemTime};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Seconds a lease stays valid after its last renewal.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Seconds before expiry the holder renews: with 10 of 15 the lease is
/// renewed every 5 s, so one failed renewal and its retry still land well
/// before the watchdog's deadline.
pub const LEASE_GRACE_SECONDS: u64 = 10;
/// How often the holder's watchdog and a waiting standby read the Lease.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// The holder stops acting this long before the last renewal it saw
/// expires; a standby takes the lease only after it has expired (by its own
/// clock), so this margin absorbs one check interval, the controller's
/// shutdown and some clock skew.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(4);

/// Where the lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
}

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        name: String,
        namespace: String,
        #[source]
        source: LeaseManagerError,
    },
    #[error("leader election on Lease {namespace}/{name} stopped before the lease was held")]
    Stopped { name: String, namespace: String },
    #[error("leader election: {0}")]
    Elector(String),
}

/// Where the election on its own thread stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// A standby: waiting for the lease.
    Waiting,
    /// This instance holds the lease.
    Held,
    /// The lease was lost (the manager or the watchdog says so).
    Lost,
    /// The election could not run (no client, the manager failed).
    Failed(String),
}

/// Leader election on a thread of its own, with its own runtime and its own
/// API client: the lease is renewed and watched on time whatever the
/// reconciles do (a planner run holding both worker threads, a burst of
/// Valkey commands, a saturated connection pool). Seen without it: a
/// leader lost its Lease 73 s after it started, while sending commands to a
/// 120-member cluster, and exited ("no renewal seen in time").
pub struct Elector {
    phase: watch::Receiver<Phase>,
    release: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Elector {
    /// Starts the election on the thread `leader-lease`; `client` makes its
    /// API client there.
    pub fn start<F, Fut>(cfg: LeaseConfig, client: F) -> std::io::Result<Elector>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Client, String>>,
    {
        let (phase_tx, phase) = watch::channel(Phase::Waiting);
        let (release, mut released) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("leader-lease".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let client = match client().await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = phase_tx.send(Phase::Failed(e));
                            return;
                        }
                    };
                    let mut held = tokio::select! {
                        r = acquire(client, &cfg) => match r {
                            Ok(l) => l,
                            Err(e) => {
                                let _ = phase_tx.send(Phase::Failed(e.to_string()));
                                return;
                            }
                        },
                        _ = &mut released => return,
                    };
                    let _ = phase_tx.send(Phase::Held);
                    let lost = tokio::select! {
                        _ = held.lost() => true,
                        _ = &mut released => false,
                    };
                    if lost {
                        let _ = phase_tx.send(Phase::Lost);
                        // Released once the controller has stopped acting.
                        let _ = (&mut released).await;
                    }
                    held.release().await;
                });
            })?;
        Ok(Elector {
            phase,
            release: Some(release),
            thread: Some(thread),
        })
    }

    /// Waits until this instance holds the lease.
    pub async fn acquired(&mut self) -> Result<(), LeaderError> {
        loop {
            match &*self.phase.borrow_and_update() {
                Phase::Held => return Ok(()),
                Phase::Failed(e) => return Err(LeaderError::Elector(e.clone())),
                Phase::Lost => return Err(LeaderError::Elector("the lease was lost".into())),
                Phase::Waiting => {}
            }
            if self.phase.changed().await.is_err() {
                return Err(LeaderError::Elector("the election thread ended".into()));
            }
        }
    }

    /// Resolves when the lease is lost (or the election ended).
    pub async fn lost(&mut self) {
        loop {
            if matches!(
                *self.phase.borrow_and_update(),
                Phase::Lost | Phase::Failed(_)
            ) {
                return;
            }
            if self.phase.changed().await.is_err() {
                return;
            }
        }
    }

    /// Releases the lease (best effort) and waits for the thread to end.
    pub async fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// What one read of the Lease says about who may act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseView {
    /// `holder` holds it until `expires` (renewTime + leaseDurationSeconds).
    Held { holder: String, expires: SystemTime },
    /// No holder, or a holder without a renewal time or duration: nobody
    /// may act on it, anyone may take it.
    Free,
}

/// Reads a Lease object.
pub fn view_of(lease: &Lease) -> LeaseView {
    let Some(spec) = &lease.spec else {
        return LeaseView::Free;
    };
    let (Some(holder), Some(renew), Some(secs)) = (
        spec.holder_identity.as_ref().filter(|h| !h.is_empty()),
        spec.renew_time.as_ref(),
        spec.lease_duration_seconds,
    ) else {
        return LeaseView::Free;
    };
    let renewed: SystemTime = renew.0.into();
    let secs = u64::try_from(secs).unwrap_or(0);
    match renewed.checked_add(Duration::from_secs(secs)) {
        Some(expires) => LeaseView::Held {
            holder: holder.clone(),
            expires,
        },
        None => LeaseView::Free,
    }
}

/// Why the holder must stop acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// The Lease names another holder.
    TakenBy(String),
    /// The Lease has no holder (someone released or cleared it).
    Released,
    /// No renewal of ours has been seen in time: the lease may expire before
    /// the next check, and a standby may then take it.
    NotRenewed { expires: SystemTime },
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::TakenBy(holder) => write!(f, "the Lease is held by {holder}"),
            Lost::Released => write!(f, "the Lease has no holder"),
            Lost::NotRenewed { expires } => {
                let left = expires
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                write!(
                    f,
                    "no renewal seen in time (the lease expires in {:.1}s)",
                    left.as_secs_f64()
                )
            }
        }
    }
}

/// One step of the holder's watchdog: `valid_until` is the expiry of the
/// latest renewal of ours seen so far, `read` what the Lease says now (`None`
/// when it could not be read). Returns the new `valid_until`, or why we must
/// stop.
pub fn watchdog_step(
    valid_until: SystemTime,
    read: Option<&LeaseView>,
    me: &str,
    now: SystemTime,
) -> Result<SystemTime, Lost> {
    let valid_until = match read {
        Some(LeaseView::Held { holder, expires }) if holder == me => valid_until.max(*expires),
        Some(LeaseView::Held { holder, .. }) => return Err(Lost::TakenBy(holder.clone())),
        Some(LeaseView::Free) => return Err(Lost::Released),
        None => valid_until,
    };
    if now + SAFETY_MARGIN >= valid_until {
        return Err(Lost::NotRenewed {
            expires: valid_until,
        });
    }
    Ok(valid_until)
}

/// Whether a waiting standby should start a fresh manager: the Lease was
/// released (the library's manager would sleep until the old expiry).
pub fn released(read: Option<&LeaseView>) -> bool {
    matches!(read, Some(LeaseView::Free))
}

type ManagerTask = JoinHandle<Result<LeaseManager, LeaseManagerError>>;

/// A held lease.
pub struct Leadership {
    changes: watch::Receiver<bool>,
    task: ManagerTask,
    /// The watchdog's verdict: turns false when we must stop.
    held: watch::Receiver<bool>,
    watchdog: JoinHandle<()>,
}

/// Resolves when `rx` holds false (or its sender is gone).
async fn turned_false(rx: &mut watch::Receiver<bool>) {
    loop {
        if !*rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl Leadership {
    /// Resolves when the lease is lost: the manager says so, or the watchdog
    /// saw another holder or no renewal in time.
    pub async fn lost(&mut self) {
        tokio::select! {
            _ = turned_false(&mut self.changes) => {
                tracing::error!("the lease manager reports the lease lost");
            }
            _ = turned_false(&mut self.held) => {}
        }
    }

    /// Releases the lease (best effort) so a standby takes over.
    pub async fn release(self) {
        let Leadership {
            changes,
            task,
            held,
            watchdog,
        } = self;
        watchdog.abort();
        drop(held);
        // Closing the channel makes the manager release the lock and return.
        drop(changes);
        match task.await {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(error)) => tracing::warn!(%error, "releasing the lease failed"),
            Err(error) => tracing::warn!(%error, "the lease manager task failed"),
        }
    }
}

async fn read_lease(api: &Api<Lease>, name: &str) -> Option<LeaseView> {
    match api.get_opt(name).await {
        Ok(Some(lease)) => Some(view_of(&lease)),
        Ok(None) => Some(LeaseView::Free),
        Err(error) => {
            tracing::warn!(%error, lease = %name, "reading the leader Lease failed");
            None
        }
    }
}

async fn start_manager(
    client: Client,
    cfg: &LeaseConfig,
) -> Result<(watch::Receiver<bool>, ManagerTask), LeaderError> {
    let manager = LeaseManagerBuilder::new(client, &cfg.name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|source| LeaderError::Lease {
            name: cfg.name.clone(),
            namespace: cfg.namespace.clone(),
            source,
        })?;
    Ok(manager.watch().await)
}

/// Waits until this instance holds the lease.
pub async fn acquire(client: Client, cfg: &LeaseConfig) -> Result<Leadership, LeaderError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let (mut changes, mut task) = start_manager(client.clone(), cfg).await?;
    tracing::info!(lease = %cfg.name, namespace = %cfg.namespace, identity = %cfg.identity, "waiting for the lease (standby)");
    loop {
        if *changes.borrow_and_update() {
            break;
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return Err(LeaderError::Stopped {
                        name: cfg.name.clone(),
                        namespace: cfg.namespace.clone(),
                    });
                }
            }
            _ = tokio::time::sleep(CHECK_INTERVAL) => {
                if *changes.borrow() || !released(read_lease(&api, &cfg.name).await.as_ref()) {
                    continue;
                }
                tracing::info!(lease = %cfg.name, "the lease was released; taking it");
                // The old manager must be gone before the new one (same
                // identity) starts: its release could otherwise clear a lock
                // the new one has just taken.
                drop(changes);
                let _ = task.await;
                (changes, task) = start_manager(client.clone(), cfg).await?;
            }
        }
    }
    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "lease acquired: this instance leads");
    let (held_tx, held) = watch::channel(true);
    let watchdog = tokio::spawn(watch_hold(api, cfg.clone(), held_tx));
    Ok(Leadership {
        changes,
        task,
        held,
        watchdog,
    })
}

/// The holder's watchdog: reads the Lease every [`CHECK_INTERVAL`] and sends
/// false (then ends) when we must stop acting.
async fn watch_hold(api: Api<Lease>, cfg: LeaseConfig, held: watch::Sender<bool>) {
    // We have just taken or renewed the lease.
    let mut valid_until = SystemTime::now() + Duration::from_secs(LEASE_DURATION_SECONDS);
    loop {
        let read = read_lease(&api, &cfg.name).await;
        match watchdog_step(valid_until, read.as_ref(), &cfg.identity, SystemTime::now()) {
            Ok(until) => valid_until = until,
            Err(lost) => {
                tracing::error!(lease = %cfg.name, reason = %lost, "lost the leader Lease");
                let _ = held.send(false);
                return;
            }
        }
        tokio::time::sleep(CHECK_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn lease(holder: Option<&str>, renewed: Option<u64>, duration: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed.map(|s| MicroTime(at(s).try_into().unwrap())),
                lease_duration_seconds: duration,
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn held(holder: &str, expires: u64) -> LeaseView {
        LeaseView::Held {
            holder: holder.to_string(),
            expires: at(expires),
        }
    }

    #[test]
    fn a_lease_with_holder_renewal_and_duration_is_held_until_renewal_plus_duration() {
        assert_eq!(
            view_of(&lease(Some("op-1"), Some(100), Some(15))),
            held("op-1", 115)
        );
    }

    #[test]
    fn a_lease_without_holder_renewal_or_duration_is_free() {
        assert_eq!(view_of(&lease(None, Some(100), Some(15))), LeaseView::Free);
        assert_eq!(
            view_of(&lease(Some(""), Some(100), Some(15))),
            LeaseView::Free
        );
        assert_eq!(
            view_of(&lease(Some("op-1"), None, Some(15))),
            LeaseView::Free
        );
        assert_eq!(
            view_of(&lease(Some("op-1"), Some(100), None)),
            LeaseView::Free
        );
        assert_eq!(view_of(&Lease::default()), LeaseView::Free);
    }

    #[test]
    fn each_renewal_seen_extends_the_holders_validity() {
        let got = watchdog_step(at(115), Some(&held("me", 120)), "me", at(108));
        assert_eq!(got, Ok(at(120)));
        // An older read (a stale cache) never shortens it.
        let got = watchdog_step(at(120), Some(&held("me", 115)), "me", at(109));
        assert_eq!(got, Ok(at(120)));
    }

    #[test]
    fn another_holder_or_no_holder_means_the_lease_is_lost_at_once() {
        assert_eq!(
            watchdog_step(at(115), Some(&held("other", 130)), "me", at(101)),
            Err(Lost::TakenBy("other".into()))
        );
        assert_eq!(
            watchdog_step(at(115), Some(&LeaseView::Free), "me", at(101)),
            Err(Lost::Released)
        );
    }

    #[test]
    fn a_holder_that_cannot_read_the_lease_stops_before_it_expires() {
        // Renewed at 100, valid until 115: reads fail from then on.
        let mut until = at(115);
        let mut stopped_at = None;
        for t in (100..120).step_by(2) {
            match watchdog_step(until, None, "me", at(t)) {
                Ok(u) => until = u,
                Err(lost) => {
                    assert_eq!(lost, Lost::NotRenewed { expires: at(115) });
                    stopped_at = Some(t);
                    break;
                }
            }
        }
        let t = stopped_at.expect("the watchdog must fire");
        assert!(
            at(t) + CHECK_INTERVAL <= at(115),
            "stopped at {t}: a standby may take the lease at 115"
        );
    }

    #[test]
    fn a_holder_whose_renewals_stop_landing_stops_before_a_standby_may_take_over() {
        // Renewals every 5 s until 110, then none reach the API server.
        let mut until = at(115);
        for t in (100..=110).step_by(2) {
            let renewed = t - t % 5;
            until = watchdog_step(until, Some(&held("me", renewed + 15)), "me", at(t)).unwrap();
        }
        let mut t = 112;
        let lost = loop {
            match watchdog_step(until, Some(&held("me", 125)), "me", at(t)) {
                Ok(u) => until = u,
                Err(lost) => break lost,
            }
            t += 2;
        };
        assert_eq!(lost, Lost::NotRenewed { expires: at(125) });
        assert!(at(t) + SAFETY_MARGIN >= at(125) && at(t) < at(125));
    }

    #[test]
    fn renewals_every_five_seconds_keep_the_watchdog_quiet() {
        let mut until = at(115);
        for t in (100..200).step_by(2) {
            let renewed = t - t % 5;
            until = watchdog_step(until, Some(&held("me", renewed + 15)), "me", at(t))
                .unwrap_or_else(|lost| panic!("at {t}: {lost}"));
        }
    }

    #[test]
    fn the_renewal_period_leaves_room_for_one_failed_renewal_before_the_deadline() {
        let period = LEASE_DURATION_SECONDS - LEASE_GRACE_SECONDS;
        let deadline = Duration::from_secs(LEASE_DURATION_SECONDS) - SAFETY_MARGIN;
        assert!(Duration::from_secs(period) + CHECK_INTERVAL < deadline);
    }

    #[test]
    fn only_a_released_lease_makes_a_standby_start_over() {
        assert!(released(Some(&LeaseView::Free)));
        assert!(!released(Some(&held("other", 115))));
        assert!(!released(None), "an unreadable Lease is not a free one");
    }
}
