//! Reads only: the set's member pods, their Nodes and the owned objects from
//! the caches, the Secrets it needs, and what every member's server says
//! (INFO replication, all members at once).

use super::shared::Shared;
use api::ValidatedCluster;
use api::constants::{LABEL_MEMBER, LABEL_REPLICATION, LABEL_ROLE, ROLE_PRIMARY};
use decide::replication::{MemberFacts, Said};
use decide::view::KubeView;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use valkey_client::client::{ConnectOptions, ValkeyAdmin};

/// The Kubernetes side of one set.
pub struct Kube {
    /// What the planner and the object builders read: every Node and Pod, the
    /// set's StatefulSets by name.
    pub view: KubeView,
    /// The set's member pods by member index (a live pod wins over one being
    /// deleted).
    pub pods: BTreeMap<u32, Arc<Pod>>,
    /// Nodes by name.
    pub nodes: HashMap<String, Arc<Node>>,
}

/// The member index of a pod of set `name` in `namespace`.
fn member_of(pod: &Pod, namespace: &str, name: &str) -> Option<u32> {
    let labels = pod.metadata.labels.as_ref()?;
    if pod.metadata.namespace.as_deref() != Some(namespace)
        || labels.get(LABEL_REPLICATION).map(String::as_str) != Some(name)
    {
        return None;
    }
    labels.get(LABEL_MEMBER)?.parse().ok()
}

/// Reads the caches (no request).
pub fn kube(shared: &Shared, set: &ValidatedCluster) -> Kube {
    let ctx = &shared.ctx;
    let nodes_list = ctx.nodes.state();
    let all_pods = ctx.pods.state();
    let mut pods: BTreeMap<u32, Arc<Pod>> = BTreeMap::new();
    for pod in &all_pods {
        let Some(member) = member_of(pod, &set.namespace, &set.name) else {
            continue;
        };
        let going = |p: &Pod| p.metadata.deletion_timestamp.is_some();
        match pods.get(&member) {
            Some(kept) if !going(kept) || going(pod) => {}
            _ => {
                pods.insert(member, pod.clone());
            }
        }
    }
    let in_set = |labels: &BTreeMap<String, String>, ns: Option<String>| {
        ns.as_deref() == Some(set.namespace.as_str())
            && labels.get(LABEL_REPLICATION).map(String::as_str) == Some(set.name.as_str())
    };
    let statefulsets = shared
        .owned
        .statefulsets
        .state()
        .iter()
        .filter(|s| in_set(s.labels(), s.namespace()))
        .map(|s| (s.name_any(), s.as_ref().clone()))
        .collect();
    let nodes = nodes_list
        .iter()
        .map(|n| (n.name_any(), n.clone()))
        .collect();
    Kube {
        view: KubeView {
            nodes: nodes_list,
            all_pods,
            statefulsets,
            ..KubeView::default()
        },
        pods,
        nodes,
    }
}

/// A Secret of the set: from the cache when the operator made it, else read.
pub async fn secret(
    shared: &Shared,
    namespace: &str,
    name: &str,
) -> Result<Option<Secret>, kube::Error> {
    let cached = shared
        .owned
        .secrets
        .state()
        .iter()
        .find(|s| s.namespace().as_deref() == Some(namespace) && s.name_any() == name)
        .map(|s| s.as_ref().clone());
    if cached.is_some() {
        return Ok(cached);
    }
    let api: Api<Secret> = Api::namespaced(shared.ctx.client.clone(), namespace);
    api.get_opt(name).await
}

/// The facts of each member decide reads, from the pods and Nodes, without
/// what the servers said (see [`valkey`]).
pub fn members(k: &Kube, members: u32) -> Vec<MemberFacts> {
    let mut indices: std::collections::BTreeSet<u32> = (0..members).collect();
    indices.extend(k.pods.keys().copied());
    indices
        .into_iter()
        .map(|member| {
            let Some(pod) = k.pods.get(&member) else {
                return MemberFacts {
                    member,
                    ..MemberFacts::default()
                };
            };
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let node_obj = node.as_ref().and_then(|n| k.nodes.get(n));
            let role = pod.labels().get(LABEL_ROLE).cloned();
            MemberFacts {
                member,
                pod: Some(pod.name_any()),
                ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
                pod_ready: pod_ready(pod),
                deleting: pod.metadata.deletion_timestamp.is_some(),
                zone: node_obj
                    .and_then(|n| n.labels().get(api::v1alpha1::validation::ZONE_KEY).cloned()),
                node_ready: node_obj.is_some_and(|n| resources::adapt::nodes::is_ready(n)),
                node,
                labelled_primary: role.as_deref() == Some(ROLE_PRIMARY),
                role_label: role,
                ..MemberFacts::default()
            }
        })
        .collect()
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What each member's server says (INFO replication), all at once, each
/// bounded by the connect and command timeouts. A member without an address
/// is not asked.
pub async fn valkey(
    members: &[MemberFacts],
    opts: &ConnectOptions,
) -> BTreeMap<u32, Result<(Said, ValkeyAdmin), String>> {
    let asks = members.iter().filter_map(|m| {
        let ip: IpAddr = m.ip.as_deref()?.parse().ok()?;
        if m.deleting {
            return None;
        }
        let opts = opts.clone();
        Some(async move { (m.member, ask(ip, &opts).await) })
    });
    futures::future::join_all(asks).await.into_iter().collect()
}

async fn ask(ip: IpAddr, opts: &ConnectOptions) -> Result<(Said, ValkeyAdmin), String> {
    let admin = ValkeyAdmin::connect(ip, api::constants::VALKEY_PORT, opts)
        .await
        .map_err(|e| e.to_string())?;
    let info = admin.replication().await.map_err(|e| e.to_string())?;
    let said = match &info.primary_link {
        None => Said {
            primary: true,
            following: None,
            link_up: false,
            offset: info.repl_offset,
        },
        Some(link) => Said {
            primary: false,
            following: Some((link.host.clone(), link.port)),
            link_up: link.link_up && !link.sync_in_progress,
            offset: info.repl_offset,
        },
    };
    Ok((said, admin))
}

/// The connect options of the set's members: the operator's own user, else
/// `default` with the set's password.
pub fn connect_options(
    own: Option<valkey_client::client::Login>,
    password: Option<&str>,
    (connect, command): (Duration, Duration),
) -> ConnectOptions {
    ConnectOptions {
        own_login: own,
        username: password.map(|_| valkey::acl::DEFAULT_USER.to_string()),
        password: password.map(str::to_string),
        connect_timeout: connect,
        command_timeout: command,
        tls_ca_pem: None,
        previous_password: None,
        tls_identity: None,
        plaintext: valkey_client::client::Plaintext::Never,
    }
}
