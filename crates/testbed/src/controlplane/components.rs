//! Command lines of the control-plane components, as pure functions of the
//! testbed's layout. Every choice that differs from a stock cluster is here, with
//! its reason, so docs/testbed.md can point at one place.

use super::certs::PkiPaths;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Seconds a pod tolerates `not-ready`/`unreachable` before it is evicted (the
/// DefaultTolerationSeconds admission plugin adds these to every pod). Stock
/// clusters use 300 s; tests cannot wait that long.
pub const TOLERATION_SECONDS: u32 = 10;
/// How long the node lifecycle controller waits for a heartbeat before it marks
/// a node Unknown (stock 50 s).
pub const NODE_MONITOR_GRACE: &str = "10s";

/// The loopback ports of one testbed's components, chosen free at `up`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

/// The paths every command line refers to.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
    pub pki: PkiPaths,
    pub kubeconfig: PathBuf,
    pub etcd_data: PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            pki: PkiPaths::in_dir(dir),
            kubeconfig: dir.join("kubeconfig"),
            etcd_data: dir.join("etcd"),
        }
    }
}

fn flag(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

fn path_flag(name: &str, value: &Path) -> String {
    flag(name, value.display())
}

pub fn etcd_url(ports: &Ports) -> String {
    format!("http://127.0.0.1:{}", ports.etcd_client)
}

/// The API server's URL: the testbed's fabric (host) address, the one address
/// both the host and the pods' network namespaces reach (pods route to it
/// through their gateway), so in-cluster clients get the API as a kubelet gives
/// it. The serving certificate names it ([`super::certs::apiserver_sans`]).
pub fn apiserver_url(ports: &Ports, host_ip: &str) -> String {
    format!("https://{host_ip}:{}", ports.apiserver)
}

/// etcd, single member on loopback. `--unsafe-no-fsync`: the data is thrown away
/// with the testbed, and fsync on a shared disk is what makes a test cluster slow.
pub fn etcd_args(l: &Layout, p: &Ports) -> Vec<String> {
    let client = etcd_url(p);
    let peer = format!("http://127.0.0.1:{}", p.etcd_peer);
    vec![
        flag("name", "testbed"),
        path_flag("data-dir", &l.etcd_data),
        flag("listen-client-urls", &client),
        flag("advertise-client-urls", &client),
        flag("listen-peer-urls", &peer),
        flag("initial-advertise-peer-urls", &peer),
        flag("initial-cluster", format!("testbed={peer}")),
        flag("initial-cluster-state", "new"),
        "--unsafe-no-fsync".into(),
        // 8 GiB instead of 2: long chaos runs write many events and leases.
        flag("quota-backend-bytes", 8u64 << 30),
        flag("log-level", "warn"),
    ]
}

/// kube-apiserver on the testbed's fabric address (see [`apiserver_url`]; one
/// `--bind-address` only, and never 0.0.0.0), authenticating client certificates against the
/// testbed CA, authorising with Node and RBAC like a kubeadm cluster. The
/// admission plugins are the release's defaults (ServiceAccount and
/// DefaultTolerationSeconds among them).
///
/// `advertise` is the testbed's host address. An explicit address is mandatory
/// on a machine without a default route (the apiserver cannot pick one), and it
/// must not be loopback: the apiserver writes it into the `kubernetes` Service's
/// Endpoints, which refuse 127/8 (it would log that failure every 10 s).
/// `service_cidr` is the testbed's own ClusterIP range
/// ([`crate::topology::service_cidr`]), routed by the agent's proxy.
pub fn apiserver_args(l: &Layout, p: &Ports, advertise: &str, service_cidr: &str) -> Vec<String> {
    vec![
        flag("advertise-address", advertise),
        flag("bind-address", advertise),
        flag("secure-port", p.apiserver),
        flag("etcd-servers", etcd_url(p)),
        flag("service-cluster-ip-range", service_cidr),
        flag("authorization-mode", "Node,RBAC"),
        flag("allow-privileged", "true"),
        path_flag("client-ca-file", &l.pki.ca_cert),
        // Front-proxy settings as kubeadm writes them. Nothing proxies, but the
        // controller-manager and scheduler read this CA from the
        // extension-apiserver-authentication ConfigMap and complain every few
        // seconds when it is missing. No certificate with the allowed name is
        // ever issued, so the headers are never trusted.
        path_flag("requestheader-client-ca-file", &l.pki.ca_cert),
        flag("requestheader-allowed-names", "front-proxy-client"),
        flag("requestheader-username-headers", "X-Remote-User"),
        flag("requestheader-group-headers", "X-Remote-Group"),
        flag("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
        path_flag("tls-cert-file", &l.pki.apiserver_cert),
        path_flag("tls-private-key-file", &l.pki.apiserver_key),
        path_flag("cert-dir", &l.pki.dir.join("apiserver")),
        flag(
            "service-account-issuer",
            "https://kubernetes.default.svc.cluster.local",
        ),
        path_flag("service-account-key-file", &l.pki.sa_pub),
        path_flag("service-account-signing-key-file", &l.pki.sa_key),
        flag("default-not-ready-toleration-seconds", TOLERATION_SECONDS),
        flag("default-unreachable-toleration-seconds", TOLERATION_SECONDS),
        flag("profiling", "false"),
    ]
}

/// kube-controller-manager with every default controller (node lifecycle, taint
/// eviction, StatefulSet, EndpointSlice, disruption, garbage collector, PV
/// binder, service accounts...), a short node-monitor grace, and the admin
/// identity for all of them (`--use-service-account-credentials=false`: one
/// client, no per-controller tokens to wait for).
pub fn controller_manager_args(l: &Layout, p: &Ports) -> Vec<String> {
    vec![
        path_flag("kubeconfig", &l.kubeconfig),
        path_flag("authentication-kubeconfig", &l.kubeconfig),
        path_flag("authorization-kubeconfig", &l.kubeconfig),
        flag("leader-elect", "false"),
        flag("controllers", "*"),
        path_flag("root-ca-file", &l.pki.ca_cert),
        path_flag("service-account-private-key-file", &l.pki.sa_key),
        flag("use-service-account-credentials", "false"),
        flag("node-monitor-period", "1s"),
        flag("node-monitor-grace-period", NODE_MONITOR_GRACE),
        flag("bind-address", "127.0.0.1"),
        flag("secure-port", p.controller_manager),
        path_flag("cert-dir", &l.pki.dir.join("kube-controller-manager")),
        flag("profiling", "false"),
    ]
}

/// kube-scheduler, stock profile.
pub fn scheduler_args(l: &Layout, p: &Ports) -> Vec<String> {
    vec![
        path_flag("kubeconfig", &l.kubeconfig),
        path_flag("authentication-kubeconfig", &l.kubeconfig),
        path_flag("authorization-kubeconfig", &l.kubeconfig),
        flag("leader-elect", "false"),
        flag("bind-address", "127.0.0.1"),
        flag("secure-port", p.scheduler),
        path_flag("cert-dir", &l.pki.dir.join("kube-scheduler")),
        flag("profiling", "false"),
    ]
}

/// The node agent: this binary, hidden verb `agent`.
pub fn agent_args(l: &Layout) -> Vec<String> {
    vec!["agent".into(), "--dir".into(), l.dir.display().to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Layout, Ports) {
        (
            Layout::new(Path::new("/tb")),
            Ports {
                etcd_client: 1001,
                etcd_peer: 1002,
                apiserver: 1003,
                controller_manager: 1004,
                scheduler: 1005,
            },
        )
    }

    #[test]
    fn every_component_command_line_names_the_testbed_dir() {
        // `down` and `status` recognise our processes by this.
        let (l, p) = sample();
        for args in [
            etcd_args(&l, &p),
            apiserver_args(&l, &p, "10.101.255.1", "10.101.0.0/24"),
            controller_manager_args(&l, &p),
            scheduler_args(&l, &p),
            agent_args(&l),
        ] {
            assert!(
                args.iter()
                    .any(|a| super::super::process::mentions_dir(a, "/tb")),
                "{args:?}"
            );
        }
    }

    #[test]
    fn the_apiserver_talks_to_this_testbeds_etcd_and_shortens_tolerations() {
        let (l, p) = sample();
        let a = apiserver_args(&l, &p, "10.101.255.1", "10.101.0.0/24");
        assert!(a.contains(&"--service-cluster-ip-range=10.101.0.0/24".to_string()));
        assert!(a.contains(&"--etcd-servers=http://127.0.0.1:1001".to_string()));
        assert!(a.contains(&"--secure-port=1003".to_string()));
        assert!(a.contains(&"--advertise-address=10.101.255.1".to_string()));
        assert!(a.contains(&"--bind-address=10.101.255.1".to_string()));
        assert!(a.contains(&"--default-unreachable-toleration-seconds=10".to_string()));
        assert!(
            !a.iter()
                .any(|f| f.starts_with("--enable-admission-plugins"))
        );
    }

    #[test]
    fn no_two_components_share_a_port() {
        let (l, p) = sample();
        let cm = controller_manager_args(&l, &p);
        let sched = scheduler_args(&l, &p);
        assert!(cm.contains(&"--secure-port=1004".to_string()));
        assert!(sched.contains(&"--secure-port=1005".to_string()));
        assert!(cm.contains(&"--node-monitor-grace-period=10s".to_string()));
        assert!(cm.contains(&"--leader-elect=false".to_string()));
    }
}
