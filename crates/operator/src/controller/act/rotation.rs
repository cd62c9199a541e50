//! Act, password rotation: a new password in the cluster's Secret reaches the
//! members live, with old and new both valid until every member takes the
//! new one, so neither the operator nor a client is locked out.
//!
//! The operator keeps the password the members were last given in
//! `<cluster>-auth-applied`. When the Secret's password differs from it:
//! 1. it logs in to each member with the new password, or else the applied
//!    one (`previous_password` of the connection);
//! 2. every member takes both: the one it lacks is *added* (`ACL SETUSER
//!    default on #<sha256>`; a member restarted onto the new password gets
//!    the old one back for the clients not moved yet), and every member's
//!    `primaryauth` becomes the new one (replicas re-authenticate with it
//!    when their link restarts; their primaries take both);
//! 3. the rotation's number goes into the members' restart hash, so the
//!    rolling update restarts them one at a time (failover first) onto the
//!    new password: their environment (`requirepass`, `primaryauth`, the
//!    probes' and the preStop hook's `valkey-cli`) comes from the Secret;
//! 4. once every member runs with the new environment, is reachable and
//!    takes the new password, `ACL SETUSER default on resetpass #<new>`
//!    leaves only the new one (`requirepass` already says it: the members
//!    started with it), and the record is updated (event `PasswordRotated`).
//!
//! Connected clients stay connected throughout: a password is checked at
//! AUTH only, and clients move to the new password at their own pace until
//! step 4. The decision ([`may_finish`]) is pure. Changing the password again
//! before `PasswordRotated` is not supported: members restarted onto the
//! first new password would take neither the second nor the old one.

use super::users::password_hash;
use crate::builders::Desired;
use crate::builders::secret::{APPLIED_GENERATION_KEY, APPLIED_KEY, applied_secret};
use crate::controller::act::kube::AuthState;
use crate::controller::act::secrets;
use crate::controller::events::{Events, reason};
use crate::controller::observe::kube::KubeView;
use crate::controller::observe::pods::{PodFacts, needs_restart};
use crate::controller::valkey_io::Session;
use crate::controller::{Context, Error};
use api::ValidatedCluster;
use api::constants::{auth_applied_secret_name, member_name};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use valkey::model::{MemberState, ObservedCluster};

/// Where a rotation stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rotation {
    /// The password the members may still have instead of the Secret's
    /// (`None`: no rotation under way).
    pub previous: Option<String>,
    /// The number of the rotation the members should run with (goes into
    /// their restart hash).
    pub generation: u64,
}

/// Reads `<cluster>-auth-applied` against the Secret's password; records
/// the password when there is no record yet.
pub async fn state(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    auth: &AuthState,
) -> Result<Rotation, Error> {
    if !cluster.auth.enabled {
        return Ok(Rotation::default());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = auth_applied_secret_name(&cluster.name);
    let record = secrets::read(&api, &name).await?;
    let recorded = record
        .as_ref()
        .and_then(|s| crate::builders::secret::secret_text(s, APPLIED_KEY));
    let generation: u64 = record
        .as_ref()
        .and_then(|s| crate::builders::secret::secret_text(s, APPLIED_GENERATION_KEY))
        .and_then(|g| g.trim().parse().ok())
        .unwrap_or(0);
    // The password Secret is missing: keep the members as they are.
    let Some(password) = auth.password() else {
        return Ok(Rotation {
            previous: None,
            generation,
        });
    };
    Ok(match recorded {
        Some(r) if r == password => Rotation {
            previous: None,
            generation,
        },
        Some(r) => Rotation {
            previous: Some(r),
            generation: generation + 1,
        },
        None => {
            secrets::apply(ctx, &api, &applied_secret(cluster, owner, password, 0)).await?;
            Rotation::default()
        }
    })
}

/// Whether every member pod runs the restart hash its StatefulSet asks for.
pub fn all_rolled(cluster: &ValidatedCluster, view: &KubeView, desired: &Desired) -> bool {
    view.members.iter().all(|(&(shard, member), pod)| {
        let name = member_name(&cluster.name, shard, member);
        desired
            .statefulsets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name.as_str()))
            .is_none_or(|sts| !needs_restart(&PodFacts::of(pod), sts))
    })
}

/// Whether the old password may go: every member was asked (`everyone_reachable`),
/// runs with the new environment (`rolled`), answered (`connected`) and took the new
/// password (`via_previous` empty). Until then every connected member is given both
/// passwords and the new `primaryauth`.
pub fn may_finish(
    everyone_reachable: bool,
    rolled: bool,
    connected: usize,
    via_previous: usize,
) -> bool {
    everyone_reachable && rolled && via_previous == 0 && connected > 0
}

/// Moves a rotation on (see the module doc). Failures are logged; the next
/// reconcile goes on from what the members then say.
pub async fn advance(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    (observed, session): (&ObservedCluster, &Session),
    rolled: bool,
    (password, previous): (&str, &str),
    events: &Events<'_>,
) -> Result<(), Error> {
    let via_previous = session.values().filter(|a| a.previous_password).count();
    let everyone_reachable = observed
        .members
        .iter()
        .all(|m| matches!(m.state, MemberState::Reachable(_)));
    let finish = may_finish(everyone_reachable, rolled, session.len(), via_previous);
    let hashes = [password_hash(password), password_hash(previous)];
    let mut failed = false;
    for (m, admin) in session {
        // Adding a password a member has is a no-op.
        for hash in &hashes {
            ctx.metrics.valkey_command("AclSetUserDefault");
            if let Err(error) = admin.add_default_password(hash).await {
                tracing::warn!(member = %m, %error, "adding a password failed");
                failed = true;
            }
        }
        if let Err(error) = admin.config_set_secret("primaryauth", password).await {
            tracing::warn!(member = %m, %error, "CONFIG SET primaryauth failed");
            failed = true;
        }
    }
    if !finish || failed {
        if via_previous > 0 {
            tracing::info!(
                members = via_previous,
                "password rotation: the new password added"
            );
        }
        return Ok(());
    }
    for (m, admin) in session {
        ctx.metrics.valkey_command("AclSetUserDefault");
        if let Err(error) = admin.set_default_password_only(&hashes[0]).await {
            tracing::warn!(member = %m, %error, "dropping the old password failed");
            return Ok(());
        }
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    secrets::apply(
        ctx,
        &api,
        &applied_secret(cluster, owner, password, cluster.auth_generation),
    )
    .await?;
    events
        .normal(
            reason::PASSWORD_ROTATED,
            "RotatePassword",
            format!(
                "every member takes the new password of Secret {} only ({} members)",
                cluster.auth.secret_name,
                session.len()
            ),
        )
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_password_goes_only_once_every_member_takes_the_new_one() {
        // One member has only the old one: not yet.
        assert!(!may_finish(true, true, 2, 1));
        // Everyone takes the new one: finish.
        assert!(may_finish(true, true, 2, 0));
        // A member nobody could reach may have only the old one: wait.
        assert!(!may_finish(false, true, 1, 0));
        // A member not restarted yet still uses the old one: wait.
        assert!(!may_finish(true, false, 2, 0));
        // Nobody answered: nothing is known.
        assert!(!may_finish(true, true, 0, 0));
    }
}
