//! Pods' `/etc/resolv.conf`, as the kubelet writes it for `clusterDNS`: the
//! cluster DNS address (the `kube-dns` ClusterIP), the search path of the
//! pod's namespace and `ndots:5`, with the pod's `dnsPolicy` and `dnsConfig`
//! applied. The file lives in the pod's folder and is bind-mounted over
//! `/etc/resolv.conf` inside each container's own mount namespace, so the
//! host's file is never touched.

use super::spec::Mount;
use k8s_openapi::api::core::v1::Pod;
use std::path::{Path, PathBuf};

/// Where containers see the file.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// The kubelet's limits: 3 nameservers, 32 search domains.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCHES: usize = 32;

/// The resolv.conf text of `pod`, or None when the pod keeps the host's
/// (`dnsPolicy: Default`, or `ClusterFirst` with host networking).
pub fn resolv_conf(pod: &Pod, dns_ip: &str, domain: &str) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let host_network = spec.host_network.unwrap_or(false);
    let (mut nameservers, mut searches, mut options): (Vec<String>, Vec<String>, Vec<String>) =
        match policy {
            "ClusterFirst" if host_network => return None,
            "ClusterFirst" | "ClusterFirstWithHostNet" => (
                vec![dns_ip.to_string()],
                vec![
                    format!("{ns}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.to_string(),
                ],
                vec!["ndots:5".to_string()],
            ),
            "None" => (Vec::new(), Vec::new(), Vec::new()),
            _ => return None,
        };
    if let Some(cfg) = &spec.dns_config {
        for n in cfg.nameservers.iter().flatten() {
            if !nameservers.contains(n) {
                nameservers.push(n.clone());
            }
        }
        for s in cfg.searches.iter().flatten() {
            if !searches.contains(s) {
                searches.push(s.clone());
            }
        }
        for o in cfg.options.iter().flatten() {
            let Some(name) = o.name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            let text = match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name.to_string(),
            };
            // A pod's option overrides the default of the same name.
            options.retain(|x| x.split(':').next() != Some(name));
            options.push(text);
        }
    }
    nameservers.truncate(MAX_NAMESERVERS);
    searches.truncate(MAX_SEARCHES);
    let mut out = String::new();
    for n in &nameservers {
        out.push_str(&format!("nameserver {n}\n"));
    }
    if !searches.is_empty() {
        out.push_str(&format!("search {}\n", searches.join(" ")));
    }
    if !options.is_empty() {
        out.push_str(&format!("options {}\n", options.join(" ")));
    }
    Some(out)
}

/// Writes the pod's resolv.conf into `pod_dir` and returns the bind mount
/// that puts it at `/etc/resolv.conf`; None when the pod keeps the host's, or
/// when the host has no `/etc/resolv.conf` to mount over (the container's
/// wrapper would otherwise create one on the host).
pub fn resolv_mount(pod: &Pod, pod_dir: &Path, dns_ip: &str, domain: &str) -> Option<Mount> {
    let text = resolv_conf(pod, dns_ip, domain)?;
    if !Path::new(RESOLV_CONF).is_file() {
        return None;
    }
    let source = pod_dir.join("resolv.conf");
    let _ = std::fs::create_dir_all(pod_dir);
    if let Err(e) = std::fs::write(&source, text) {
        tracing::warn!(path = %source.display(), error = %e, "could not write the pod's resolv.conf");
        return None;
    }
    Some(Mount {
        source,
        target: PathBuf::from(RESOLV_CONF),
        read_only: false,
        file: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ns: &str, policy: Option<&str>, cfg: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(str::to_string),
                dns_config: cfg,
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn cluster_first_is_the_kubelets_cluster_dns_file() {
        let text = resolv_conf(&pod("db", None, None), "10.103.0.10", "cluster.local").unwrap();
        assert_eq!(
            text,
            "nameserver 10.103.0.10\nsearch db.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
    }

    #[test]
    fn default_policy_and_host_network_keep_the_hosts_file() {
        assert!(resolv_conf(&pod("db", Some("Default"), None), "10.1.0.10", "c.l").is_none());
        let mut p = pod("db", Some("ClusterFirst"), None);
        p.spec.as_mut().unwrap().host_network = Some(true);
        assert!(resolv_conf(&p, "10.1.0.10", "c.l").is_none());
        p.spec.as_mut().unwrap().dns_policy = Some("ClusterFirstWithHostNet".into());
        assert!(resolv_conf(&p, "10.1.0.10", "c.l").is_some());
    }

    #[test]
    fn dns_config_adds_nameservers_and_searches_and_overrides_options() {
        let cfg = PodDNSConfig {
            nameservers: Some(vec!["10.9.9.9".into()]),
            searches: Some(vec!["example.internal".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        };
        let text = resolv_conf(
            &pod("a", None, Some(cfg.clone())),
            "10.1.0.10",
            "cluster.local",
        )
        .unwrap();
        assert!(text.starts_with("nameserver 10.1.0.10\nnameserver 10.9.9.9\n"));
        assert!(text.contains(" cluster.local example.internal\n"));
        assert!(text.ends_with("options ndots:2 edns0\n"));
        let none = resolv_conf(
            &pod("a", Some("None"), Some(cfg)),
            "10.1.0.10",
            "cluster.local",
        )
        .unwrap();
        assert_eq!(
            none,
            "nameserver 10.9.9.9\nsearch example.internal\noptions ndots:2 edns0\n"
        );
    }
}
