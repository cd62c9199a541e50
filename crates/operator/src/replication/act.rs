//! Carries a replication set's plan out, in a fixed order, and chooses
//! nothing: the Secrets (made when absent), the owned objects (applied when
//! they differ), then the Valkey side of [`decide::replication::Plan`]:
//! labels off, promote or switch over, point the replicas, labels on, the
//! rolling restart's pod, the StatefulSets of members that left.

use super::shared::Shared;
use crate::apply::apply;
use crate::error::Error;
use api::ValidatedCluster;
use api::constants::{FIELD_MANAGER, LABEL_ROLE, VALKEY_PORT};
use decide::replication::Plan;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use resources::Desired;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use valkey_client::client::{Login, ValkeyAdmin};

/// What the set's Secrets hold.
pub struct Logins {
    /// The default user's password; `None` with auth off.
    pub password: Option<String>,
    /// The operator's own user.
    pub own: Login,
    /// Whether the auth Secret was made now (an event says so).
    pub password_created: bool,
}

/// Why the set cannot run yet (a Secret the user named is missing).
pub type Missing = String;

/// Makes `<name>-auth` (when the operator manages it) and `<name>-users`
/// when absent, and reads both.
pub async fn ensure_secrets(
    shared: &Shared,
    set: &ValidatedCluster,
    owner: &OwnerReference,
) -> Result<Result<Logins, Missing>, Error> {
    let api: Api<Secret> = Api::namespaced(shared.ctx.client.clone(), &set.namespace);
    let mut password_created = false;
    let password = if set.auth.enabled {
        let name = &set.auth.secret_name;
        let mut secret = super::observe::secret(shared, &set.namespace, name)
            .await
            .map_err(|source| Error::Read {
                kind: "Secret",
                name: name.clone(),
                source,
            })?;
        if secret.is_none() && set.auth.operator_managed {
            let password = resources::secret::generate_password();
            if let Some(desired) = resources::secret::auth_secret(set, owner, &password) {
                secret = Some(create(shared, &api, &desired).await?);
                password_created = true;
            }
        }
        let Some(secret) = secret else {
            return Ok(Err(format!(
                "Secret {name} named by spec.auth.passwordSecret does not exist"
            )));
        };
        match resources::secret::secret_text(&secret, &set.auth.secret_key) {
            Some(p) if !p.is_empty() => Some(p),
            _ => {
                return Ok(Err(format!(
                    "Secret {name} has no key {:?}",
                    set.auth.secret_key
                )));
            }
        }
    } else {
        None
    };
    let own = ensure_users(shared, set, owner, &api).await?;
    Ok(Ok(Logins {
        password,
        own,
        password_created,
    }))
}

/// `<name>-users`: the system users (replication, operator) every member
/// loads at start; made once, its passwords kept.
async fn ensure_users(
    shared: &Shared,
    set: &ValidatedCluster,
    owner: &OwnerReference,
    api: &Api<Secret>,
) -> Result<Login, Error> {
    let name = api::constants::users_secret_name(&set.name);
    let live = super::observe::secret(shared, &set.namespace, &name)
        .await
        .map_err(|source| Error::Read {
            kind: "Secret",
            name: name.clone(),
            source,
        })?;
    let text = |key| {
        live.as_ref()
            .and_then(|s| resources::secret::secret_text(s, key))
            .filter(|p| !p.is_empty())
    };
    if let (Some(_), Some(operator)) = (
        text(api::constants::REPLICATION_PASSWORD_KEY),
        text(api::constants::OPERATOR_PASSWORD_KEY),
    ) {
        return Ok(Login {
            user: api::constants::OPERATOR_USER.to_string(),
            password: operator,
        });
    }
    let passwords = resources::secret::SystemPasswords {
        replication: resources::secret::generate_password(),
        operator: resources::secret::generate_password(),
    };
    let file = crate::system_users::lines(&[
        crate::system_users::replication_user(&passwords.replication),
        crate::system_users::operator_user(&passwords.operator),
    ]);
    let secret = resources::secret::users_secret(set, owner, &file, &passwords);
    let kept = if live.is_some() {
        shared.ctx.metrics.api_write("Secret", "apply");
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &pp, &Patch::Apply(&secret))
            .await
            .map_err(|source| Error::Apply {
                kind: "Secret",
                name: name.clone(),
                source,
            })?
    } else {
        create(shared, api, &secret).await?
    };
    let operator = resources::secret::secret_text(&kept, api::constants::OPERATOR_PASSWORD_KEY)
        .unwrap_or(passwords.operator);
    Ok(Login {
        user: api::constants::OPERATOR_USER.to_string(),
        password: operator,
    })
}

/// Creates `secret`, or reads the one made meanwhile (409).
async fn create(shared: &Shared, api: &Api<Secret>, secret: &Secret) -> Result<Secret, Error> {
    let name = secret.name_any();
    shared.ctx.metrics.api_write("Secret", "create");
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, secret).await {
        Ok(made) => Ok(made),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            api.get(&name).await.map_err(|source| Error::Read {
                kind: "Secret",
                name,
                source,
            })
        }
        Err(source) => Err(Error::CreateSecret { name, source }),
    }
}

/// Applies every object of `desired` that differs from the cache.
pub async fn apply_objects(
    shared: &Shared,
    namespace: &str,
    desired: &Desired,
) -> Result<(), Error> {
    let client = &shared.ctx.client;
    let m = &shared.ctx.metrics;
    let owned = &shared.owned;
    let live = |name: &str| (namespace, name.to_string());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = &desired.config_map;
    let have = cached(owned.config_maps.state(), live(&cm.name_any()));
    apply(&cms, have.as_ref(), cm, m).await?;
    let svcs: Api<Service> = Api::namespaced(client.clone(), namespace);
    for s in std::iter::once(&desired.headless)
        .chain(std::iter::once(&desired.client))
        .chain(desired.read_only.iter())
    {
        let have = cached(owned.services.state(), live(&s.name_any()));
        apply(&svcs, have.as_ref(), s, m).await?;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
    for p in &desired.pdbs {
        let have = cached(owned.pdbs.state(), live(&p.name_any()));
        apply(&pdbs, have.as_ref(), p, m).await?;
    }
    let nps: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    if let Some(p) = &desired.network_policy {
        let have = cached(owned.network_policies.state(), live(&p.name_any()));
        apply(&nps, have.as_ref(), p, m).await?;
    }
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    for s in &desired.statefulsets {
        let have = cached(owned.statefulsets.state(), live(&s.name_any()));
        apply(&sts, have.as_ref(), s, m).await?;
    }
    Ok(())
}

/// The cached object `(namespace, name)` of `list`.
fn cached<K: kube::Resource + Clone>(
    list: Vec<std::sync::Arc<K>>,
    (namespace, name): (&str, String),
) -> Option<K> {
    list.into_iter()
        .find(|o| {
            o.meta().namespace.as_deref() == Some(namespace)
                && o.meta().name.as_deref() == Some(name.as_str())
        })
        .map(|o| o.as_ref().clone())
}

/// Deletes the StatefulSets of members that left the set (a scale-in).
pub async fn delete_statefulsets(
    shared: &Shared,
    namespace: &str,
    names: &[String],
) -> Result<(), Error> {
    let api: Api<StatefulSet> = Api::namespaced(shared.ctx.client.clone(), namespace);
    for name in names {
        shared.ctx.metrics.api_write("StatefulSet", "delete");
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Delete {
                    kind: "StatefulSet",
                    name: name.clone(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The members' pods and connections, by member index, as act needs them.
pub struct Members<'a> {
    pub pods: BTreeMap<u32, (&'a str, Option<IpAddr>)>,
    pub admins: &'a BTreeMap<u32, ValkeyAdmin>,
}

/// Carries out the Valkey side of `plan` in its order. Returns what it did.
pub async fn carry_out(
    shared: &Shared,
    namespace: &str,
    plan: &Plan,
    members: &Members<'_>,
    failover_timeout: Duration,
) -> Result<Vec<String>, Error> {
    let pods: Api<Pod> = Api::namespaced(shared.ctx.client.clone(), namespace);
    let mut done = Vec::new();
    // 1. No pod is routed to as the primary any more but the one decided.
    for pod in &plan.unlabel {
        label(shared, &pods, pod, None).await?;
        done.push(format!("took the primary label off {pod}"));
    }
    let admin_of = |m: u32, command: &'static str| {
        members.admins.get(&m).ok_or_else(|| Error::Valkey {
            member: format!("member {m}"),
            command,
            message: "not connected".into(),
        })
    };
    let address = |m: u32| members.pods.get(&m).and_then(|(_, ip)| *ip);
    // 2. The new primary.
    if let Some(m) = plan.promote {
        admin_of(m, "REPLICAOF NO ONE")?
            .replicaof(None)
            .await
            .map_err(|e| valkey_error(m, "REPLICAOF NO ONE", &e))?;
        done.push(format!("promoted member {m}"));
    }
    if let Some((from, to)) = plan.switchover {
        let Some(ip) = address(to) else {
            return Ok(done);
        };
        admin_of(from, "FAILOVER")?
            .failover_to((ip, VALKEY_PORT), failover_timeout)
            .await
            .map_err(|e| valkey_error(from, "FAILOVER", &e))?;
        done.push(format!(
            "switchover from member {from} to member {to} started"
        ));
        // The roles move within the timeout; the next reconcile sees them.
        return Ok(done);
    }
    // 3. Everyone else follows it.
    if let Some(ip) = plan.primary.and_then(address) {
        for m in &plan.point {
            if let Some(admin) = members.admins.get(m) {
                admin
                    .replicaof(Some((ip, VALKEY_PORT)))
                    .await
                    .map_err(|e| valkey_error(*m, "REPLICAOF", &e))?;
                done.push(format!("member {m} follows {ip}"));
            }
        }
    }
    // 4. The labels the Services select on.
    for (pod, role) in &plan.labels {
        label(shared, &pods, pod, *role).await?;
    }
    // 5. The rolling restart's next pod.
    if let Some(pod) = &plan.restart {
        shared.ctx.metrics.api_write("Pod", "delete");
        match pods.delete(pod, &DeleteParams::default()).await {
            Ok(_) => done.push(format!("restarted {pod}")),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Delete {
                    kind: "Pod",
                    name: pod.clone(),
                    source,
                });
            }
        }
    }
    Ok(done)
}

fn valkey_error(m: u32, command: &'static str, e: &valkey_client::client::ClientError) -> Error {
    Error::Valkey {
        member: format!("member {m}"),
        command,
        message: e.to_string(),
    }
}

/// Sets (or, with `None`, removes) a pod's role label.
async fn label(
    shared: &Shared,
    pods: &Api<Pod>,
    pod: &str,
    role: Option<&str>,
) -> Result<(), Error> {
    shared.ctx.metrics.api_write("Pod", "patch");
    let patch = serde_json::json!({"metadata": {"labels": {LABEL_ROLE: role}}});
    match pods
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone meanwhile: nothing routes to it.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::PatchPod {
            name: pod.to_string(),
            source,
        }),
    }
}

/// Removes the switchover annotation once it is done with.
pub async fn clear_switchover(shared: &Shared, namespace: &str, name: &str) -> Result<(), Error> {
    let api: Api<api::v1alpha1::ValkeyReplication> =
        Api::namespaced(shared.ctx.client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {
        api::constants::ANNOTATION_SWITCHOVER: null
    }}});
    shared.ctx.metrics.api_write("ValkeyReplication", "patch");
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Apply {
            kind: "ValkeyReplication",
            name: name.to_string(),
            source,
        })
}
