//! Act, password rotation: a new password in the cluster's Secret reaches the
//! members live, with old and new both valid until every member takes the
//! new one, so neither the operator nor a client is locked out.
//!
//! The operator keeps the password the members were last given in
//! `<cluster>-auth-applied`. When the Secret's password differs from it:
//! 1. it logs in to each member as its own user (`valkey-operator`, whose
//!    password the rotation does not touch), or, on a member without that
//!    user yet, as `default` with the new password or else the applied one,
//!    and asks each which of the two `default` takes (ACL LIST);
//! 2. every member takes both: the one it lacks is *added* (`ACL SETUSER
//!    default on #<sha256>`; a member restarted onto the new password gets
//!    the old one back for the clients not moved yet). Replication is not
//!    concerned: replicas log in as the replication user (`primaryuser
//!    valkey-replication`, its own password in `<cluster>-users`); only a
//!    member started by a release before that user (`primaryuser default`)
//!    gets the new password as `primaryauth`;
//! 3. the rotation's number goes into the members' restart hash, so the
//!    rolling update restarts them one at a time (failover first) onto the
//!    new password: their environment (`requirepass`, the probes' and the
//!    start script's `valkey-cli`) comes from the Secret;
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
//!
//! Turning auth on or off ([`Switch`]) is the same kind of roll. Which
//! members still run the other way is read off their pods (the password in
//! their environment), not stored. The operator logs in as its own user;
//! the probes (and the operator, on a member without its user) log in as
//! `default` with three-argument AUTH: a member that takes any password
//! (`nopass`) accepts that as well as one that requires it. Replicas log in
//! as the replication user, whose password auth on or off does not change.
//! - On: the members restart onto the password one at a time (a member of
//!   an older release, still `primaryuser default`, first gets the password
//!   as `primaryauth`). Clients without the password are refused by each
//!   member once it restarted: that is what turning auth on means.
//! - Off: every member first takes any password (`ACL SETUSER default on
//!   nopass`); then the members restart
//!   without one. Once none runs with the password, the record says so
//!   (an empty password) and the event `AuthDisabled` is sent. Clients that
//!   send the password as `default` (three-argument AUTH) keep working
//!   throughout; a client sending the two-argument `AUTH <password>` is
//!   refused by a member without a password (Valkey's rule).

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
    /// Auth is being turned on or off.
    pub switch: Option<Switch>,
}

/// Auth being turned on or off while members still run the other way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// Some member still runs without a password.
    On,
    /// Some member still runs with `password` (the one last applied).
    Off { password: String },
}

impl Rotation {
    /// The password to log in to the members with, and the one to try when
    /// that is refused.
    pub fn login<'a>(&'a self, auth: &'a AuthState) -> (Option<&'a str>, Option<&'a str>) {
        match &self.switch {
            Some(Switch::Off { password }) => (Some(password.as_str()), None),
            _ => (auth.password(), self.previous.as_deref()),
        }
    }
}

/// The switch under way, if any: from whether auth is on, what the record
/// says was applied, and how many member pods run with and without the
/// password.
pub fn switch_of(
    enabled: bool,
    recorded: Option<&str>,
    (with_password, without_password): (usize, usize),
) -> Option<Switch> {
    match (enabled, recorded) {
        (true, _) if without_password > 0 => Some(Switch::On),
        (false, Some(p)) if !p.is_empty() && with_password > 0 => Some(Switch::Off {
            password: p.to_string(),
        }),
        _ => None,
    }
}

/// Member pods (new copies of moves included) that run with and without the
/// password.
fn pods_by_password(view: &KubeView) -> (usize, usize) {
    let with = view
        .members
        .values()
        .chain(view.surges.values())
        .filter(|p| PodFacts::of(p).runs_with_password)
        .count();
    (with, view.members.len() + view.surges.len() - with)
}

/// Reads `<cluster>-auth-applied` against the Secret's password; records
/// the password when there is no record yet.
pub async fn state(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    auth: &AuthState,
    view: &KubeView,
    events: &Events<'_>,
) -> Result<Rotation, Error> {
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
    let pods = pods_by_password(view);
    let switch = switch_of(cluster.auth.enabled, recorded.as_deref(), pods);
    if !cluster.auth.enabled {
        // Off, and no member runs with the password any more: record it.
        if switch.is_none() && recorded.as_deref().is_some_and(|r| !r.is_empty()) {
            secrets::apply(ctx, &api, &applied_secret(cluster, owner, "", generation)).await?;
            events
                .normal(
                    reason::AUTH_DISABLED,
                    "SwitchAuth",
                    "auth is off: every member runs without a password",
                )
                .await;
        }
        return Ok(Rotation {
            previous: None,
            generation,
            switch,
        });
    }
    // The password Secret is missing: keep the members as they are.
    let Some(password) = auth.password() else {
        return Ok(Rotation {
            previous: None,
            generation,
            switch: None,
        });
    };
    Ok(match recorded {
        Some(r) if r == password => Rotation {
            previous: None,
            generation,
            switch,
        },
        Some(r) if !r.is_empty() => Rotation {
            previous: Some(r),
            generation: generation + 1,
            switch,
        },
        // No record (a new cluster, or one from before records) or auth was
        // off: the members get this password from now on.
        _ => {
            secrets::apply(
                ctx,
                &api,
                &applied_secret(cluster, owner, password, generation),
            )
            .await?;
            if switch.is_some() {
                events
                    .normal(
                        reason::AUTH_ENABLED,
                        "SwitchAuth",
                        "auth is on: the members restart onto the password one at a time",
                    )
                    .await;
            }
            Rotation {
                previous: None,
                generation,
                switch,
            }
        }
    })
}

/// Moves a switch of auth on (see the module doc): when auth is being
/// turned off, every connected member takes any password; a member that
/// still logs in to its primary as `default` (one started by a release
/// before the replication user) gets the password as `primaryauth`.
/// Failures are logged; the next reconcile tries again.
pub async fn advance_switch(ctx: &Context, session: &Session, switch: &Switch, password: &str) {
    for (m, admin) in session {
        let done = match switch {
            Switch::On => {
                if !logs_in_as_default(admin).await {
                    continue;
                }
                ctx.metrics.valkey_command("ConfigSet");
                admin.config_set_secret("primaryauth", password).await
            }
            Switch::Off { .. } => {
                ctx.metrics.valkey_command("AclSetUserDefault");
                admin.set_default_nopass().await
            }
        };
        if let Err(error) = done {
            tracing::warn!(member = %m, %error, "switching auth failed");
        }
    }
}

/// Whether the member logs in to its primary as `default` with the cluster
/// password (`primaryuser default`, as members of releases before the
/// replication user did) rather than as the replication user.
async fn logs_in_as_default(admin: &valkey::client::ValkeyAdmin) -> bool {
    use valkey::client::Admin as _;
    admin
        .config_get(&["primaryuser".to_string()])
        .await
        .is_ok_and(|c| {
            c.get("primaryuser")
                .is_some_and(|u| u == valkey::acl::DEFAULT_USER)
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
/// password (`via_previous`, the members whose `default` does not take it, is 0). Until then every connected member is given both
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
    let hashes = [password_hash(password), password_hash(previous)];
    // Asked of `default` itself: the operator logs in as its own user, so
    // which password let it in says nothing.
    let takes_new = futures::future::join_all(
        session
            .values()
            .map(|a| async { a.default_takes(&hashes[0]).await.unwrap_or(false) }),
    )
    .await;
    let via_previous = takes_new.iter().filter(|t| !**t).count();
    let everyone_reachable = observed
        .members
        .iter()
        .all(|m| matches!(m.state, MemberState::Reachable(_)));
    let finish = may_finish(everyone_reachable, rolled, session.len(), via_previous);
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
        if logs_in_as_default(admin).await
            && let Err(error) = admin.config_set_secret("primaryauth", password).await
        {
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
    fn a_switch_lasts_while_a_member_pod_runs_the_other_way() {
        // On: a member still runs without the password.
        assert_eq!(switch_of(true, None, (2, 1)), Some(Switch::On));
        assert_eq!(switch_of(true, Some(""), (0, 4)), Some(Switch::On));
        assert_eq!(switch_of(true, Some("pw"), (4, 0)), None);
        // A new cluster: no pods yet.
        assert_eq!(switch_of(true, None, (0, 0)), None);
        // Off: a member still runs with the recorded password.
        assert_eq!(
            switch_of(false, Some("pw"), (1, 3)),
            Some(Switch::Off {
                password: "pw".into()
            })
        );
        // Off and done, or never on.
        assert_eq!(switch_of(false, Some("pw"), (0, 4)), None);
        assert_eq!(switch_of(false, Some(""), (0, 4)), None);
        assert_eq!(switch_of(false, None, (0, 4)), None);
    }

    #[test]
    fn while_auth_goes_off_the_operator_logs_in_with_the_old_password() {
        let off = Rotation {
            previous: None,
            generation: 0,
            switch: Some(Switch::Off {
                password: "old".into(),
            }),
        };
        assert_eq!(off.login(&AuthState::Off), (Some("old"), None));
        let rotating = Rotation {
            previous: Some("old".into()),
            generation: 1,
            switch: None,
        };
        assert_eq!(
            rotating.login(&AuthState::Password("new".into())),
            (Some("new"), Some("old"))
        );
    }

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
