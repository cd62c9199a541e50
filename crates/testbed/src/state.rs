//! The testbed's state file, `DIR/testbed.json`: written by `up`, read by the node
//! agent and by every other verb. It is the contract between the launcher and the
//! agent, so both sides agree on names, addresses and paths.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File name of the state file inside the testbed directory.
pub const STATE_FILE: &str = "testbed.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TestbedState {
    /// Absolute path of the testbed directory (`--dir`).
    pub dir: PathBuf,
    /// Small number (1..=150) that tells testbeds on this machine apart; it picks
    /// the pod address range `10.<100+id>.0.0/16` (node k gets
    /// `10.<100+id>.<k+1>.0/24`, see [`NodeSpec::pod_cidr`]), the network
    /// namespace prefix and the host-side interface names.
    pub id: u8,
    /// Prefix of every network namespace and host interface this testbed creates
    /// (e.g. `vk3-`); `down` removes everything that starts with it.
    pub netns_prefix: String,
    /// The fabric address the host uses as source towards pods,
    /// `10.<100+id>.255.1`, on the host interface `<prefix>host`.
    pub host_ip: String,
    /// `https://127.0.0.1:<port>`.
    pub apiserver_url: String,
    /// Admin kubeconfig (`DIR/kubeconfig`).
    pub kubeconfig: PathBuf,
    /// Folder of the pinned control-plane binaries (kubectl is there too).
    pub kube_bin_dir: PathBuf,
    /// The valkey-server binary of each Valkey version the testbed has
    /// (`9.1.2` -> its path; see `valkey_versions`). A version missing here
    /// (a state file older than the build) fails its images as not found.
    #[serde(default)]
    pub valkey_servers: BTreeMap<String, PathBuf>,
    /// The valkey-cli the agent puts on probes' PATH, for every version (a
    /// redis-cli is fine).
    pub valkey_cli: PathBuf,
    /// Unix socket the agent listens on for fault commands (`DIR/agent.sock`).
    pub agent_socket: PathBuf,
    pub nodes: Vec<NodeSpec>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Node name and its `kubernetes.io/hostname` label, e.g. `node-1a-1`.
    pub name: String,
    /// `topology.kubernetes.io/region`, e.g. `region-1`.
    pub region: String,
    /// `topology.kubernetes.io/zone`, e.g. `zone-1a`.
    pub zone: String,
    /// Allocatable cpu as a Kubernetes quantity, e.g. `4`.
    pub cpu: String,
    /// Allocatable memory as a Kubernetes quantity, e.g. `8Gi`.
    pub memory: String,
    /// Allocatable pods.
    pub pods: u32,
    /// The /24 this node's pods get their addresses from, e.g. `10.203.5.0/24`.
    pub pod_cidr: String,
}

/// Errors reading or writing the state file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TestbedState {
    /// Path of the state file in `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// Reads `DIR/testbed.json`.
    pub fn load(dir: &Path) -> Result<Self, StateError> {
        let path = Self::path_in(dir);
        let text = std::fs::read_to_string(&path).map_err(|source| StateError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| StateError::Parse { path, source })
    }

    /// Writes `DIR/testbed.json` atomically (write then rename), so a reader never
    /// sees half a file.
    pub fn save(&self) -> Result<(), StateError> {
        let path = Self::path_in(&self.dir);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self).map_err(|source| StateError::Parse {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&tmp, text).map_err(|source| StateError::Write {
            path: tmp.clone(),
            source,
        })?;
        std::fs::rename(&tmp, &path).map_err(|source| StateError::Write { path, source })
    }

    /// The nodes of one zone.
    pub fn nodes_in_zone<'a>(&'a self, zone: &'a str) -> impl Iterator<Item = &'a NodeSpec> + 'a {
        self.nodes.iter().filter(move |n| n.zone == zone)
    }
}
