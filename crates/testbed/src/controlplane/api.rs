//! What `up` and `status` ask the apiserver: readiness, nodes, the StorageClass,
//! the default ServiceAccount, pods per node.

use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, GetParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Name of the StorageClass whose volumes the agent provisions.
pub const STORAGE_CLASS: &str = "testbed-local";
/// Its provisioner, served by the agent.
pub const PROVISIONER: &str = "testbed.valkey.rs/local";
const FIELD_MANAGER: &str = "testbed";

/// Errors talking to the apiserver.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("building a client from {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("{what}: {source}")]
    Request {
        what: &'static str,
        source: kube::Error,
    },
}

/// A client with short timeouts (a dead apiserver must not hang `up`).
pub async fn client(kubeconfig: &Path) -> Result<Client, ApiError> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|source| ApiError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        source,
    })?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| ApiError::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            source,
        })?;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).map_err(|source| ApiError::Client {
        path: kubeconfig.to_path_buf(),
        source,
    })
}

/// Whether `/readyz` answers `ok`.
pub async fn is_ready(client: &Client) -> bool {
    // kube-core's request builder makes `GET /readyz` from an empty base path.
    let Ok(req) = kube::core::Request::new("").get("readyz", &GetParams::default()) else {
        return false;
    };
    matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
}

/// Whether `node` has the condition Ready=True.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Nodes, by name.
pub async fn nodes(client: &Client) -> Result<BTreeMap<String, Node>, ApiError> {
    let list = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| ApiError::Request {
            what: "listing nodes",
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name.clone().map(|name| (name, n)))
        .collect())
}

/// Every pod.
pub async fn pods(client: &Client) -> Result<Vec<Pod>, ApiError> {
    Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|source| ApiError::Request {
            what: "listing pods",
            source,
        })
}

/// The StorageClass the agent provisions for, made or kept as it should be.
pub async fn apply_storage_class(client: &Client) -> Result<(), ApiError> {
    let sc = serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        // The default class, as kind's `standard` and every cloud's is: a
        // claim that names no class gets it (the DefaultStorageClass
        // admission plugin), instead of staying Pending.
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        // Like a local disk: the scheduler picks the node, then the volume is
        // made there.
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    });
    Api::<StorageClass>::all(client.clone())
        .patch(
            STORAGE_CLASS,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&sc),
        )
        .await
        .map(|_| ())
        .map_err(|source| ApiError::Request {
            what: "applying StorageClass testbed-local",
            source,
        })
}

/// Whether the controller-manager has made the `default` ServiceAccount of
/// namespace `default` (pods are refused until it exists).
pub async fn default_service_account_exists(client: &Client) -> bool {
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .get_opt("default")
        .await
        .is_ok_and(|sa| sa.is_some())
}
