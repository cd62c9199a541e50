//! Act, ACL users (`spec.users`): the passwords from the users' Secrets, and
//! `ACL SETUSER`/`ACL DELUSER` on every member until each holds exactly the
//! users of the spec (see `valkey::acl`, where the decision is made).
//!
//! Passwords travel and are stored as SHA-256 hashes (`#<hex>` rules); every
//! listed key of a user's Secret is a valid password, so a rotation adds the
//! new key, lets clients move, then drops the old one. Changing a user does
//! not disconnect its clients: Valkey checks a password at AUTH only.
//!
//! A user whose Secret is missing (or holds none of its keys) is left as it
//! is on the members (neither set nor deleted) and reported with a Warning
//! event; the other users and the cluster go on.

use crate::context::Context;
use crate::controller::act::secrets;
use crate::controller::valkey_io::Session;
use crate::error::Error;
use crate::events::{Events, reason};
use api::ValidatedCluster;
use decide::memory::Memory;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use std::collections::{BTreeMap, BTreeSet};
use valkey::acl::{self, AclAction, DesiredUser};
use valkey_client::client::Login;

/// What every user may run before its own rules: the topology and
/// connection commands a cluster-aware client needs to find its way (which
/// `+@read +@write` does not include; the Python `valkey` cluster client
/// runs CLUSTER SLOTS and COMMAND when it connects). A user's rules come after, so
/// `-cluster|nodes` there takes one back.
pub const CLUSTER_CLIENT_RULES: &[&str] = &[
    "+cluster|slots",
    "+cluster|shards",
    "+cluster|nodes",
    "+cluster|info",
    "+cluster|myid",
    "+readonly",
    "+readwrite",
    "+asking",
    "+ping",
    "+echo",
    "+hello",
    "+auth",
    "+command",
    "+client|setinfo",
    "+client|setname",
    "+client|getname",
    "+client|id",
];

/// A user's rules as set on the members: [`CLUSTER_CLIENT_RULES`], the
/// spec's rules, then, unless those grant `+@dangerous`, `+@all` or
/// `allcommands`, `-@dangerous` (FLUSHALL, FLUSHDB, KEYS, CONFIG, DEBUG,
/// MIGRATE...: `+@write` alone would allow FLUSHALL, which names no key a
/// pattern could stop) followed once more by the commands the spec grants
/// by name, so `+flushall` still means it.
pub fn effective_rules(rules: &[String]) -> Vec<String> {
    let mut out: Vec<String> = CLUSTER_CLIENT_RULES.iter().map(|r| r.to_string()).collect();
    out.extend(rules.iter().cloned());
    let grants_dangerous = rules.iter().any(|r| {
        let r = r.to_ascii_lowercase();
        r == "+@dangerous" || r == "+@all" || r == "allcommands"
    });
    if !grants_dangerous {
        out.push("-@dangerous".into());
        out.extend(
            rules
                .iter()
                .filter(|r| r.starts_with('+') && !r.starts_with("+@"))
                .cloned(),
        );
    }
    out
}

use decide::users::{Users, UsersPlan};
use valkey::acl::password_hash;

/// The users of `spec.users` with their password hashes, read from their
/// Secrets.
pub async fn resolve(ctx: &Context, cluster: &ValidatedCluster) -> Result<Users, Error> {
    let mut users = Users::default();
    if cluster.users.is_empty() {
        return Ok(users);
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let mut secrets: BTreeMap<String, Option<Secret>> = BTreeMap::new();
    for user in &cluster.users {
        if !secrets.contains_key(&user.secret_name) {
            let secret = secrets::read(ctx, &api, &user.secret_name).await?;
            secrets.insert(user.secret_name.clone(), secret);
        }
        let Some(Some(secret)) = secrets.get(&user.secret_name) else {
            users.unresolved.insert(
                user.name.clone(),
                format!("Secret {} does not exist", user.secret_name),
            );
            continue;
        };
        let hashes: BTreeSet<String> = user
            .keys
            .iter()
            .filter_map(|k| resources::secret::secret_text(secret, k))
            .map(|p| password_hash(&p))
            .collect();
        if hashes.is_empty() {
            users.unresolved.insert(
                user.name.clone(),
                format!(
                    "Secret {} has none of the keys {}",
                    user.secret_name,
                    user.keys.join(", ")
                ),
            );
            continue;
        }
        users.desired.push(DesiredUser {
            name: user.name.clone(),
            enabled: user.enabled,
            hashes,
            rules: effective_rules(&user.rules),
        });
    }
    Ok(users)
}

pub use crate::system_users::{operator_user, replication_user};

/// The users file: the spec's users the members took (see
/// `valkey::acl::users_file`), then the system users' lines, always (their
/// rules are the operator's own, known to load, and a member must have them
/// from its start: its replicas log in with one, the operator with the
/// other).
pub fn file_text(
    previous: &str,
    users: &Users,
    learned: &acl::Learned,
    system: &[DesiredUser],
) -> String {
    let left_alone: BTreeSet<String> = users.unresolved.keys().cloned().collect();
    let spec_users: Vec<DesiredUser> = users
        .desired
        .iter()
        .filter(|u| !system.iter().any(|s| s.name == u.name))
        .cloned()
        .collect();
    let mut text = acl::users_file(previous, &spec_users, &left_alone, learned);
    text.push_str(&crate::system_users::lines(system));
    text
}

/// Keeps `<cluster>-users`, the users file every member pod mounts and loads
/// at start (`--include`), at what the members took (see [`file_text`]),
/// and the system users' passwords (each generated once, then kept): the
/// replication user's (the members' `primaryauth`) and the operator's own.
/// Created before any member pod needs it, written only when it changes.
/// Pods cannot start without it, so it is read on every call (a deleted one
/// comes back at once, with new system passwords: the members take them
/// live, a replica started with the old one logs in again only once it
/// restarts, and the operator logs in as `default` meanwhile). Adds the
/// system users to `users`, so that every member gets them live, and
/// returns the operator's login.
pub async fn ensure_file(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    users: &mut Users,
    (memory, has_members): (&Memory, bool),
    events: &Events<'_>,
) -> Result<SystemLogins, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = api::constants::users_secret_name(&cluster.name);
    let live = secrets::read(ctx, &api, &name).await?;
    let text = |key| {
        live.as_ref()
            .and_then(|s| resources::secret::secret_text(s, key))
            .filter(|p| !p.is_empty())
    };
    let previous = text(api::constants::USERS_FILE_KEY);
    let kept_replication = text(api::constants::REPLICATION_PASSWORD_KEY);
    let kept_operator = text(api::constants::OPERATOR_PASSWORD_KEY);
    let passwords = resources::secret::SystemPasswords {
        replication: kept_replication
            .clone()
            .unwrap_or_else(resources::secret::generate_password),
        operator: kept_operator
            .clone()
            .unwrap_or_else(resources::secret::generate_password),
    };
    let system = [
        replication_user(&passwords.replication),
        operator_user(&passwords.operator),
    ];
    let next = file_text(
        previous.as_deref().unwrap_or_default(),
        users,
        &memory.acl,
        &system,
    );
    users
        .desired
        .retain(|u| !system.iter().any(|s| s.name == u.name));
    users.desired.extend(system);
    if previous.as_deref() != Some(next.as_str())
        || kept_replication.is_none()
        || kept_operator.is_none()
    {
        let secret = resources::secret::users_secret(cluster, owner, &next, &passwords);
        secrets::apply(ctx, &api, &secret).await?;
        tracing::info!(secret = %name, users = next.lines().count() - 1, "users file written");
        if live.is_none() && has_members {
            events
                .warning(
                    reason::USERS_SECRET_RECREATED,
                    "CreateSecret",
                    format!(
                        "Secret {name} was deleted: made again; the system users' passwords are new \
                         (the members get them live, replicas their primaryauth; no restart)"
                    ),
                )
                .await;
        }
    }
    Ok(SystemLogins {
        operator: Login {
            user: api::constants::OPERATOR_USER.to_string(),
            password: passwords.operator,
        },
        replication_password: passwords.replication,
    })
}

/// The system users' logins [`ensure_file`] keeps.
pub struct SystemLogins {
    /// The operator's own login to every member.
    pub operator: Login,
    /// `valkey-replication`'s password: every replica's `primaryauth`.
    pub replication_password: String,
}

/// Keeps every member that logs in to its primary as the replication user
/// on its current password (`CONFIG SET primaryauth`, live): a replica's
/// `primaryauth` comes from its environment at start, so when the password
/// changed since (`<cluster>-users` deleted and made again) the replica
/// would be refused at its next link drop. Failures are logged; the next
/// reconcile tries again.
pub async fn keep_primaryauth(
    ctx: &Context,
    session: &Session,
    auth: &decide::rotation::MemberAuths,
    replication_password: &str,
) {
    for (m, admin) in session {
        let Some(a) = auth.get(m) else {
            continue;
        };
        if a.primaryuser != api::constants::REPLICATION_USER
            || a.primaryauth == replication_password
        {
            continue;
        }
        ctx.metrics.valkey_command("ConfigSet");
        match admin
            .config_set_secret("primaryauth", replication_password)
            .await
        {
            Ok(()) => {
                tracing::info!(member = %m, "primaryauth set to the replication user's password")
            }
            Err(error) => tracing::warn!(member = %m, %error, "CONFIG SET primaryauth failed"),
        }
    }
}

/// Every connected member's `ACL LIST`, by member (one whose list failed
/// is absent).
use decide::rotation::Listed;

/// Asks every connected member for its `ACL LIST`, all at once: what
/// [`sync`] and the `default` user's check (`decide::rotation::default_fixes`)
/// read, once per reconcile.
pub async fn list(session: &Session) -> Listed {
    let listed = futures::future::join_all(
        session
            .iter()
            .map(|(member, admin)| async move { (*member, admin.acl_list().await) }),
    )
    .await;
    let mut observed = BTreeMap::new();
    for (member, result) in listed {
        match result {
            Ok(list) => {
                observed.insert(member, list);
            }
            Err(error) => tracing::warn!(%member, %error, "ACL LIST failed"),
        }
    }
    observed
}

/// Brings the users of every connected member to the spec, from what each
/// listed ([`list`]). Failures are logged and reported; the next reconcile
/// tries again. Returns how many ACL commands went through.
pub async fn sync(
    ctx: &Context,
    session: &Session,
    plan: UsersPlan,
    memory: &mut Memory,
    events: &Events<'_>,
) -> usize {
    if let Some(note) = plan.missing {
        events.notes(vec![note]).await;
    }
    let actions = plan.actions;
    let mut applied = 0usize;
    for action in &actions {
        let on = match action {
            AclAction::SetUser { on, .. } | AclAction::DelUser { on, .. } => *on,
        };
        let Some(admin) = session.get(&on) else {
            continue;
        };
        let kind = match action {
            AclAction::SetUser { .. } => "AclSetUser",
            AclAction::DelUser { .. } => "AclDelUser",
        };
        ctx.metrics.valkey_command(kind);
        match admin.acl(action).await {
            Ok(()) => {
                tracing::info!(action = %action, "valkey command sent");
                acl::record(&mut memory.acl, action);
                applied += 1;
            }
            Err(error) => {
                tracing::warn!(action = %action, %error, "valkey command failed");
                events
                    .warning(
                        reason::VALKEY_COMMAND_FAILED,
                        kind,
                        format!("{action}: {error}"),
                    )
                    .await;
            }
        }
    }
    if applied > 0 {
        let names: BTreeSet<String> = actions
            .iter()
            .map(|a| match a {
                AclAction::SetUser { user, .. } => format!("set {}", user.name),
                AclAction::DelUser { name, .. } => format!("deleted {name}"),
            })
            .collect();
        events
            .normal(
                reason::USERS_APPLIED,
                "ApplyUsers",
                format!(
                    "{} ({applied} command(s) on the members)",
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ),
            )
            .await;
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangerous_commands_are_off_unless_granted() {
        let rules =
            |r: &[&str]| effective_rules(&r.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let app = rules(&["~app:*", "+@read", "+@write"]);
        assert!(app.starts_with(&["+cluster|slots".to_string()]));
        assert_eq!(
            &app[app.len() - 4..],
            ["~app:*", "+@read", "+@write", "-@dangerous"]
        );
        let explicit = rules(&["~*", "+@write", "+flushdb"]);
        assert_eq!(&explicit[explicit.len() - 2..], ["-@dangerous", "+flushdb"]);
        let admin = rules(&["~*", "+@all"]);
        assert!(!admin.contains(&"-@dangerous".to_string()));
    }

    #[test]
    fn the_system_users_are_always_in_the_file_with_their_own_rules() {
        let system = [replication_user("s3cret"), operator_user("0wn")];
        let users = Users::default();
        let text = file_text("", &users, &acl::Learned::default(), &system);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[lines.len() - 2],
            format!(
                "user valkey-replication reset on #{} ~* &* +@all -@admin -flushall -flushdb -swapdb \
                 +psync +sync +replconf +ping +cluster|syncslots",
                password_hash("s3cret")
            ),
            "{text}"
        );
        // The operator's user: no key, no channel, no data command.
        assert_eq!(
            lines[lines.len() - 1],
            format!(
                "user valkey-operator reset on #{} +ping +info +role +wait +config|get \
                 +config|set +acl|list +acl|setuser +acl|deluser +client|kill +client|setinfo \
                 +client|setname +cluster|addslotsrange +cluster|bumpepoch +cluster|cancelslotmigrations \
                 +cluster|failover +cluster|forget +cluster|getslotmigrations +cluster|info \
                 +cluster|meet +cluster|migrateslots +cluster|myid +cluster|nodes \
                 +cluster|replicate +cluster|reset +cluster|shards +module|list +replicaof +failover \
                 +hello +auth",
                password_hash("0wn")
            ),
            "{text}"
        );
        // Written again from its own previous text, it does not change (nor
        // do the lines repeat).
        assert_eq!(
            file_text(&text, &users, &acl::Learned::default(), &system),
            text
        );
    }

    #[test]
    fn passwords_hash_as_acl_setuser_expects() {
        // `echo -n password | sha256sum`
        assert_eq!(
            password_hash("password"),
            "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
        );
    }
}
