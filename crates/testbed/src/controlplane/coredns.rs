//! Cluster DNS: CoreDNS with its `kubernetes` plugin, run on the host as a
//! testbed component, and the `kube-dns` Service in `kube-system` that gives it
//! the cluster DNS address as on a kubeadm cluster.
//!
//! CoreDNS listens on the testbed's host (fabric) address, port 53, which every
//! pod reaches through its default route; the `kube-dns` Service has no
//! selector and one EndpointSlice of its own naming that address, so the
//! agent's Service proxy DNATs the ClusterIP (what pods have in resolv.conf) to
//! it like any other Service. Each testbed has its own host address, so several
//! testbeds' CoreDNS never share a socket. Health and readiness listen on the
//! same address (8080 and 8181, the stock ports).

use super::api::ApiError;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use std::path::Path;
use std::time::Duration;

/// The pinned CoreDNS release (crates/testbed/go/coredns).
pub const COREDNS_VERSION: &str = "v1.15.0";
/// CoreDNS's readiness port (the `ready` plugin's default).
pub const READY_PORT: u16 = 8181;
/// CoreDNS's liveness port (the `health` plugin's default).
pub const HEALTH_PORT: u16 = 8080;
/// Name of the Service (and of its EndpointSlice's prefix), as on kubeadm.
pub const SERVICE: &str = "kube-dns";
/// The EndpointSlice naming CoreDNS on the host.
pub const ENDPOINT_SLICE: &str = "kube-dns-host";
/// `endpointslice.kubernetes.io/managed-by` of that slice: not the
/// EndpointSlice controller's, so it leaves the slice alone.
pub const MANAGED_BY: &str = "testbed.valkey.rs";
const FIELD_MANAGER: &str = "testbed";

/// The Corefile: the cluster domain and the reverse zones from the API, pod
/// records (`pods insecure`, as kubeadm), short TTLs (tests watch endpoints
/// change), and nothing forwarded: names outside the cluster do not resolve
/// (the testbed has no upstream resolver to offer).
pub fn corefile(host_ip: &str, kubeconfig: &Path, domain: &str) -> String {
    format!(
        ".:53 {{
    bind {host_ip}
    errors
    health {host_ip}:{HEALTH_PORT}
    ready {host_ip}:{READY_PORT}
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loop
}}
",
        kubeconfig = kubeconfig.display()
    )
}

/// CoreDNS's command line; the Corefile is in the testbed directory, so the
/// command line names it (how `down` and `status` recognise the process).
pub fn args(corefile: &Path) -> Vec<String> {
    vec!["-conf".into(), corefile.display().to_string()]
}

/// The `kube-dns` Service (ClusterIP `dns_ip`, 53 over UDP and TCP, no
/// selector) and its EndpointSlice naming CoreDNS at `host_ip`.
pub fn objects(dns_ip: &str, host_ip: &str) -> (serde_json::Value, serde_json::Value) {
    let labels = serde_json::json!({
        "k8s-app": "kube-dns",
        "kubernetes.io/name": "CoreDNS",
        "kubernetes.io/cluster-service": "true",
    });
    let svc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": "kube-system", "labels": labels},
        "spec": {
            "clusterIP": dns_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
        },
    });
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": ENDPOINT_SLICE,
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [host_ip], "conditions": {"ready": true}}],
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        ],
    });
    (svc, slice)
}

/// Makes (or keeps) the `kube-dns` Service and its EndpointSlice.
pub async fn apply_kube_dns(client: &Client, dns_ip: &str, host_ip: &str) -> Result<(), ApiError> {
    let (svc, slice) = objects(dns_ip, host_ip);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch(SERVICE, &pp, &Patch::Apply(&svc))
        .await
        .map_err(|source| ApiError::Request {
            what: "applying Service kube-system/kube-dns",
            source,
        })?;
    Api::<EndpointSlice>::namespaced(client.clone(), "kube-system")
        .patch(ENDPOINT_SLICE, &pp, &Patch::Apply(&slice))
        .await
        .map_err(|source| ApiError::Request {
            what: "applying EndpointSlice kube-system/kube-dns-host",
            source,
        })?;
    Ok(())
}

/// Whether CoreDNS's `ready` plugin answers 200 (every plugin, the
/// kubernetes one included, has synced with the API).
pub fn is_ready(host_ip: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(addr) = format!("{host_ip}:{READY_PORT}").parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"GET /ready HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).contains(" 200 ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corefile_serves_the_cluster_domain_on_the_host_address_only() {
        let c = corefile("10.103.255.1", Path::new("/tb/kubeconfig"), "cluster.local");
        assert!(c.starts_with(".:53 {\n    bind 10.103.255.1\n"));
        assert!(c.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {"));
        assert!(c.contains("kubeconfig /tb/kubeconfig\n"));
        assert!(c.contains("ready 10.103.255.1:8181\n"));
        assert!(c.contains("health 10.103.255.1:8080\n"));
        assert!(!c.contains("forward"));
        assert_eq!(c.matches('{').count(), c.matches('}').count());
    }

    #[test]
    fn the_kube_dns_service_has_no_selector_and_its_slice_names_the_host() {
        let (svc, slice) = objects("10.103.0.10", "10.103.255.1");
        assert_eq!(svc["spec"]["clusterIP"], "10.103.0.10");
        assert!(svc["spec"].get("selector").is_none());
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "kube-dns"
        );
        assert_eq!(slice["endpoints"][0]["addresses"][0], "10.103.255.1");
        // Service ports and slice ports pair up by name.
        let names = |v: &serde_json::Value| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let slice_ports = names(&slice["ports"]);
        assert!(
            slice_ports
                .iter()
                .all(|n| names(&svc["spec"]["ports"]).contains(n))
        );
    }

    #[test]
    fn the_command_line_names_the_corefile() {
        assert_eq!(
            args(Path::new("/tb/coredns/Corefile")),
            ["-conf", "/tb/coredns/Corefile"]
        );
    }
}
