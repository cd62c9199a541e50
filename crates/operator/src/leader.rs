//! Leader election on a Lease (kube-lease-manager): only the holder runs the
//! controller, so two operator replicas never send Valkey commands to the
//! same cluster at once. A holder that loses the lease stops (the process
//! exits and is restarted as a standby) rather than risk acting alongside the
//! new leader.

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Seconds a lease stays valid after its last renewal.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Seconds before expiry the holder renews.
pub const LEASE_GRACE_SECONDS: u64 = 5;

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
}

/// A held lease: `changes` turns false when it is lost.
pub struct Leadership {
    pub changes: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Resolves when the lease is lost (or the manager stops).
    pub async fn lost(&mut self) {
        loop {
            if !*self.changes.borrow_and_update() {
                return;
            }
            if self.changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Releases the lease (best effort) so a standby takes over at once.
    pub async fn release(self) {
        let Leadership { changes, task } = self;
        // Closing the channel makes the manager release the lock and return.
        drop(changes);
        match task.await {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(error)) => tracing::warn!(%error, "releasing the lease failed"),
            Err(error) => tracing::warn!(%error, "the lease manager task failed"),
        }
    }
}

/// Waits until this instance holds the lease.
pub async fn acquire(client: Client, cfg: &LeaseConfig) -> Result<Leadership, LeaderError> {
    let err = |source| LeaderError::Lease {
        name: cfg.name.clone(),
        namespace: cfg.namespace.clone(),
        source,
    };
    let manager = LeaseManagerBuilder::new(client, &cfg.name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(err)?;
    let (mut changes, task) = manager.watch().await;
    tracing::info!(lease = %cfg.name, namespace = %cfg.namespace, identity = %cfg.identity, "waiting for the lease");
    while !*changes.borrow_and_update() {
        if changes.changed().await.is_err() {
            return Err(LeaderError::Stopped {
                name: cfg.name.clone(),
                namespace: cfg.namespace.clone(),
            });
        }
    }
    tracing::info!(lease = %cfg.name, "lease acquired: this instance leads");
    Ok(Leadership { changes, task })
}
