//! The Valkey seam, over the valkey crate's admin client: one connection
//! (TLS when `spec.tls` is on) per member (opened for one reconcile, short timeouts), what
//! each member says, and the commands the Valkey planner asks for.
//!
//! A member that does not answer within the timeouts is `Unreachable` with
//! the reason; nothing here retries: the next reconcile asks again.

use std::time::Duration;
use valkey::actions::Action;
use valkey::model::ObservedCluster;
use valkey_client::client::{self, ConnectOptions, Connections, ExecuteOptions, Login, Target};

/// How long to wait for Valkey.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub command: Duration,
    /// How long a graceful CLUSTER FAILOVER may take until the replica says
    /// it is the primary.
    pub failover: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_millis(1000),
            command: Duration::from_millis(3000),
            failover: Duration::from_secs(15),
        }
    }
}

/// The connections of one reconcile, by member.
pub type Session = Connections;

/// How to connect to the members: as the operator's own user
/// (`own_login`), else, on a member without that user yet (one started
/// before it existed), as `default` with `password` (or
/// `previous_password`). `switching`: the cluster is being switched to
/// TLS, so its members may still speak plaintext (tried first).
pub fn connect_options(
    own_login: Option<Login>,
    (password, previous_password): (Option<&str>, Option<&str>),
    (tls_ca_pem, switching): (Option<&[u8]>, bool),
    t: Timeouts,
) -> ConnectOptions {
    ConnectOptions {
        own_login,
        // Three-argument AUTH as `default`: a member taking any password
        // (auth being switched) accepts it too.
        username: password.map(|_| valkey::acl::DEFAULT_USER.to_string()),
        password: password.map(str::to_string),
        connect_timeout: t.connect,
        command_timeout: t.command,
        tls_ca_pem: tls_ca_pem.map(<[u8]>::to_vec),
        previous_password: previous_password.map(str::to_string),
        tls_identity: None,
        plaintext: if switching {
            valkey_client::client::Plaintext::First
        } else {
            valkey_client::client::Plaintext::Never
        },
    }
}

/// Observes every target concurrently.
pub async fn observe(
    targets: &[Target],
    opts: &ConnectOptions,
    config_keys: &[String],
) -> (ObservedCluster, Session) {
    client::observe_cluster(targets, opts, config_keys).await
}

/// Sends one action to its member over the session's connection.
pub async fn execute(session: &Session, action: &Action, t: Timeouts) -> Result<(), String> {
    let admin = session
        .get(&action.on())
        .ok_or_else(|| format!("{} is not connected", action.on()))?;
    let opts = ExecuteOptions {
        failover_timeout: t.failover,
        ..ExecuteOptions::default()
    };
    client::execute(admin, action, &opts)
        .await
        .map_err(|e| e.to_string())
}
