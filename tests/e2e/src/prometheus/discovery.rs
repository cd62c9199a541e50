//! The targets Prometheus' Kubernetes service discovery would find, as
//! file-based discovery target groups.
//!
//! Debian's Prometheus build has no Kubernetes discovery (its packaging
//! leaves that plugin out), so the suite lists the objects from the API
//! server itself and hands Prometheus the same targets with the same
//! `__meta_kubernetes_*` labels, written from Prometheus' documentation of
//! the `endpoints` and `pod` roles. Everything after discovery (the
//! monitors' relabelings, scraping, honor_labels, rules) is Prometheus' own.
//!
//! Left out, as the chart's monitors never read them: node and ingress
//! roles, EndpointSlices, `endpoints` targets for pod ports that no
//! Endpoints object lists, and owner-of-owner lookups.

use super::monitors::{Role, sanitize_label_name};
use crate::cluster::Env;
use anyhow::Result;
use serde_json::{Map, Value, json};

type Labels = Map<String, Value>;

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// `__meta_kubernetes_<object>_label_*` (and `labelpresent_`), `annotation_*`
/// (and `annotationpresent_`) of an object's metadata.
fn metadata_labels(object: &str, obj: &Value, out: &mut Labels) {
    for (kind, field) in [("label", "labels"), ("annotation", "annotations")] {
        for (k, v) in obj["metadata"][field].as_object().into_iter().flatten() {
            let k = sanitize_label_name(k);
            out.insert(format!("__meta_kubernetes_{object}_{kind}_{k}"), v.clone());
            out.insert(
                format!("__meta_kubernetes_{object}_{kind}present_{k}"),
                json!("true"),
            );
        }
    }
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The labels every target of a pod carries.
fn pod_labels(pod: &Value) -> Labels {
    let mut l = Labels::new();
    l.insert(
        "__meta_kubernetes_namespace".into(),
        json!(s(&pod["metadata"]["namespace"])),
    );
    let meta = [
        ("name", &pod["metadata"]["name"]),
        ("ip", &pod["status"]["podIP"]),
        ("node_name", &pod["spec"]["nodeName"]),
        ("host_ip", &pod["status"]["hostIP"]),
        ("uid", &pod["metadata"]["uid"]),
        ("phase", &pod["status"]["phase"]),
    ];
    for (k, v) in meta {
        l.insert(format!("__meta_kubernetes_pod_{k}"), json!(s(v)));
    }
    l.insert(
        "__meta_kubernetes_pod_ready".into(),
        json!(is_ready(pod).to_string()),
    );
    if let Some(owner) = pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == json!(true))
    {
        l.insert(
            "__meta_kubernetes_pod_controller_kind".into(),
            json!(s(&owner["kind"])),
        );
        l.insert(
            "__meta_kubernetes_pod_controller_name".into(),
            json!(s(&owner["name"])),
        );
    }
    metadata_labels("pod", pod, &mut l);
    l
}

/// The labels of one container (and one of its ports, if any).
fn container_labels(container: &Value, port: Option<&Value>, l: &mut Labels) {
    l.insert(
        "__meta_kubernetes_pod_container_name".into(),
        json!(s(&container["name"])),
    );
    l.insert(
        "__meta_kubernetes_pod_container_image".into(),
        json!(s(&container["image"])),
    );
    l.insert(
        "__meta_kubernetes_pod_container_init".into(),
        json!("false"),
    );
    if let Some(p) = port {
        l.insert(
            "__meta_kubernetes_pod_container_port_name".into(),
            json!(s(&p["name"])),
        );
        l.insert(
            "__meta_kubernetes_pod_container_port_number".into(),
            json!(p["containerPort"].as_u64().unwrap_or_default().to_string()),
        );
        l.insert(
            "__meta_kubernetes_pod_container_port_protocol".into(),
            json!(p["protocol"].as_str().unwrap_or("TCP")),
        );
    }
}

fn group(address: String, labels: Labels) -> Value {
    json!({ "targets": [address], "labels": labels })
}

/// Role `pod`: one target per declared port of each container of each pod
/// with an address (`<podIP>:<port>`), or the pod's address alone for a
/// container without ports.
pub fn pod_targets(pods: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for pod in pods {
        let ip = s(&pod["status"]["podIP"]);
        if ip.is_empty() {
            continue;
        }
        let base = pod_labels(pod);
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let ports = c["ports"].as_array().cloned().unwrap_or_default();
            if ports.is_empty() {
                let mut l = base.clone();
                container_labels(c, None, &mut l);
                out.push(group(ip.clone(), l));
            }
            for p in &ports {
                let mut l = base.clone();
                container_labels(c, Some(p), &mut l);
                let port = p["containerPort"].as_u64().unwrap_or_default();
                out.push(group(format!("{ip}:{port}"), l));
            }
        }
    }
    out
}

/// Role `endpoints`: one target per address and port of each Endpoints
/// object, with its Service's labels and, for a Pod address, the pod's and
/// those of the container port with that number.
pub fn endpoints_targets(endpoints: &[Value], services: &[Value], pods: &[Value]) -> Vec<Value> {
    let find = |list: &[Value], ns: &str, name: &str| -> Option<Value> {
        list.iter()
            .find(|o| o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name)
            .cloned()
    };
    let mut out = Vec::new();
    for ep in endpoints {
        let ns = s(&ep["metadata"]["namespace"]);
        let name = s(&ep["metadata"]["name"]);
        let mut base = Labels::new();
        base.insert("__meta_kubernetes_namespace".into(), json!(ns));
        base.insert("__meta_kubernetes_endpoints_name".into(), json!(name));
        metadata_labels("endpoints", ep, &mut base);
        if let Some(svc) = find(services, &ns, &name) {
            base.insert("__meta_kubernetes_service_name".into(), json!(name));
            metadata_labels("service", &svc, &mut base);
        }
        for subset in ep["subsets"].as_array().into_iter().flatten() {
            let addresses = [("addresses", "true"), ("notReadyAddresses", "false")];
            for p in subset["ports"].as_array().into_iter().flatten() {
                let number = p["port"].as_u64().unwrap_or_default();
                for (field, ready) in addresses {
                    for a in subset[field].as_array().into_iter().flatten() {
                        let mut l = base.clone();
                        l.insert("__meta_kubernetes_endpoint_ready".into(), json!(ready));
                        l.insert(
                            "__meta_kubernetes_endpoint_port_name".into(),
                            json!(s(&p["name"])),
                        );
                        l.insert(
                            "__meta_kubernetes_endpoint_port_protocol".into(),
                            json!(p["protocol"].as_str().unwrap_or("TCP")),
                        );
                        for (k, v) in [("hostname", "hostname"), ("node_name", "nodeName")] {
                            if let Some(v) = a[v].as_str() {
                                l.insert(format!("__meta_kubernetes_endpoint_{k}"), json!(v));
                            }
                        }
                        let target = &a["targetRef"];
                        if target.is_object() {
                            l.insert(
                                "__meta_kubernetes_endpoint_address_target_kind".into(),
                                json!(s(&target["kind"])),
                            );
                            l.insert(
                                "__meta_kubernetes_endpoint_address_target_name".into(),
                                json!(s(&target["name"])),
                            );
                        }
                        let pod = (target["kind"] == "Pod")
                            .then(|| find(pods, &ns, &s(&target["name"])))
                            .flatten();
                        if let Some(pod) = pod {
                            for (k, v) in pod_labels(&pod) {
                                l.insert(k, v);
                            }
                            let container = pod["spec"]["containers"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .find_map(|c| {
                                    let port = c["ports"]
                                        .as_array()?
                                        .iter()
                                        .find(|cp| cp["containerPort"].as_u64() == Some(number))?;
                                    Some((c.clone(), port.clone()))
                                });
                            if let Some((c, port)) = container {
                                container_labels(&c, Some(&port), &mut l);
                            }
                        }
                        out.push(group(format!("{}:{number}", s(&a["ip"])), l));
                    }
                }
            }
        }
    }
    out
}

/// Lists what `role` needs in `namespaces` (`None`: all) and returns the
/// target groups.
pub fn discover(env: &Env, role: Role, namespaces: Option<&[String]>) -> Result<Vec<Value>> {
    let list = |resource: &str| -> Result<Vec<Value>> {
        let scopes: Vec<Vec<&str>> = match namespaces {
            None => vec![vec!["--all-namespaces"]],
            Some(names) => names.iter().map(|n| vec!["-n", n.as_str()]).collect(),
        };
        let mut items = Vec::new();
        for scope in scopes {
            let mut args = vec!["get", resource];
            args.extend(scope);
            let v = env.kubectl_json(&args)?;
            items.extend(v["items"].as_array().cloned().unwrap_or_default());
        }
        Ok(items)
    };
    let pods = list("pods")?;
    Ok(match role {
        Role::Pod => pod_targets(&pods),
        Role::Endpoints => endpoints_targets(&list("endpoints")?, &list("services")?, &pods),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {
                "name": "op-1", "namespace": "sys", "uid": "u1",
                "labels": {"app.kubernetes.io/name": "op"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "op-rs", "controller": true}],
            },
            "spec": {"nodeName": "node-1a-1", "containers": [
                {"name": "operator", "image": "op:1", "ports": [{"name": "http", "containerPort": 8080}]},
                {"name": "sidecar", "image": "s:1"},
            ]},
            "status": {"podIP": "10.1.1.5", "hostIP": "10.1.1.1", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    }

    #[test]
    fn the_pod_role_finds_each_container_port_and_portless_container() {
        let mut pending = pod();
        pending["metadata"]["name"] = json!("op-2");
        pending["status"] = json!({"phase": "Pending"});
        let groups = pod_targets(&[pod(), pending]);
        assert_eq!(groups.len(), 2, "{groups:#?}");
        assert_eq!(groups[0]["targets"], json!(["10.1.1.5:8080"]));
        let l = &groups[0]["labels"];
        assert_eq!(l["__meta_kubernetes_pod_container_port_name"], "http");
        assert_eq!(
            l["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
            "op"
        );
        assert_eq!(
            l["__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name"],
            "true"
        );
        assert_eq!(l["__meta_kubernetes_pod_ready"], "true");
        assert_eq!(l["__meta_kubernetes_pod_controller_kind"], "ReplicaSet");
        assert_eq!(groups[1]["targets"], json!(["10.1.1.5"]));
        assert_eq!(
            groups[1]["labels"]["__meta_kubernetes_pod_container_name"],
            "sidecar"
        );
    }

    #[test]
    fn the_endpoints_role_joins_the_service_and_the_pod_behind_each_address() {
        let svc = json!({"metadata": {"name": "op-metrics", "namespace": "sys",
                                      "labels": {"app.kubernetes.io/name": "op"}}});
        let ep = json!({
            "metadata": {"name": "op-metrics", "namespace": "sys"},
            "subsets": [{
                "addresses": [{"ip": "10.1.1.5", "nodeName": "node-1a-1",
                               "targetRef": {"kind": "Pod", "name": "op-1", "namespace": "sys"}}],
                "notReadyAddresses": [{"ip": "10.1.1.6"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }],
        });
        let groups = endpoints_targets(&[ep], &[svc], &[pod()]);
        assert_eq!(groups.len(), 2);
        let l = &groups[0]["labels"];
        assert_eq!(groups[0]["targets"], json!(["10.1.1.5:8080"]));
        assert_eq!(l["__meta_kubernetes_service_name"], "op-metrics");
        assert_eq!(
            l["__meta_kubernetes_service_label_app_kubernetes_io_name"],
            "op"
        );
        assert_eq!(l["__meta_kubernetes_endpoint_port_name"], "http");
        assert_eq!(l["__meta_kubernetes_endpoint_ready"], "true");
        assert_eq!(l["__meta_kubernetes_endpoint_address_target_kind"], "Pod");
        assert_eq!(l["__meta_kubernetes_pod_name"], "op-1");
        assert_eq!(l["__meta_kubernetes_pod_container_name"], "operator");
        let l = &groups[1]["labels"];
        assert_eq!(l["__meta_kubernetes_endpoint_ready"], "false");
        assert!(l.get("__meta_kubernetes_pod_name").is_none());
    }
}
