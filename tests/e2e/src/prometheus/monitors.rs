//! The Prometheus Operator's translation of ServiceMonitors, PodMonitors and
//! PrometheusRules into Prometheus configuration, written here from what
//! the monitoring.coreos.com/v1 API documents: one scrape job per monitor
//! endpoint, named `serviceMonitor/<ns>/<name>/<i>` or
//! `podMonitor/<ns>/<name>/<i>`; the monitor's selector and port (by name)
//! as `keep` rules over the discovered `__meta_kubernetes_*` labels; the
//! target labels the Prometheus Operator adds (`namespace`, `service`,
//! `pod`, `container`, `endpoint`, `job`); then the monitor's own
//! relabelings, `honorLabels`, interval, timeout, path and scheme. A field
//! it does not translate is an error, never dropped in silence.

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::path::Path;

/// What Prometheus' Kubernetes service discovery lists for a scrape job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Every address and port of every Endpoints object (with its Service
    /// and, for a Pod address, the Pod and its container port).
    Endpoints,
    /// Every declared port of every container of every Pod.
    Pod,
}

/// A scrape job as the Prometheus Operator makes it: its configuration
/// without the service discovery section, and what the discovery lists.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeJob {
    pub config: Value,
    pub role: Role,
    /// The namespaces discovered (`None`: every namespace).
    pub namespaces: Option<Vec<String>>,
}

impl ScrapeJob {
    /// `job_name`.
    pub fn name(&self) -> &str {
        self.config["job_name"].as_str().unwrap_or_default()
    }

    /// The job with Kubernetes service discovery against the API server of
    /// `kubeconfig`, as the Prometheus Operator writes it.
    pub fn with_kubernetes_sd(&self, kubeconfig: &Path) -> Value {
        let mut sd = json!({
            "role": match self.role { Role::Endpoints => "endpoints", Role::Pod => "pod" },
            "kubeconfig_file": kubeconfig.to_string_lossy(),
        });
        if let Some(names) = &self.namespaces {
            sd["namespaces"] = json!({ "names": names });
        }
        let mut config = self.config.clone();
        config["kubernetes_sd_configs"] = json!([sd]);
        config
    }

    /// The job reading its targets from `file` (file-based discovery, which
    /// Prometheus watches for changes), for a Prometheus built without
    /// Kubernetes discovery.
    pub fn with_file_sd(&self, file: &Path) -> Value {
        let mut config = self.config.clone();
        config["file_sd_configs"] = json!([{
            "files": [file.to_string_lossy()],
            "refresh_interval": "2s",
        }]);
        config
    }
}

/// What a label name becomes in Prometheus' `__meta_kubernetes_*_label_*`
/// names: every character outside `[a-zA-Z0-9_]` is an underscore.
pub fn sanitize_label_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `s` as an RE2 regular expression that matches exactly `s`.
pub fn regex_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    v.as_str()
        .with_context(|| format!("{what} is not a string: {v}"))
}

/// `keep`/`drop` rules for a Kubernetes label selector over the labels of
/// `object` (`service` or `pod`) in the discovered targets.
pub fn selector_rules(selector: &Value, object: &str) -> Result<Vec<Value>> {
    let meta = |k: &str| {
        let k = sanitize_label_name(k);
        (
            format!("__meta_kubernetes_{object}_label_{k}"),
            format!("__meta_kubernetes_{object}_labelpresent_{k}"),
        )
    };
    let mut rules = Vec::new();
    if let Some(map) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in map {
            let (label, present) = meta(k);
            rules.push(json!({
                "action": "keep",
                "source_labels": [label, present],
                "regex": format!("({});true", regex_quote(text(v, k)?)),
            }));
        }
    }
    for e in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = text(&e["key"], "matchExpressions key")?;
        let (label, present) = meta(key);
        let values: Vec<String> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| text(v, key).map(regex_quote))
            .collect::<Result<_>>()?;
        let rule = match text(&e["operator"], "matchExpressions operator")? {
            op @ ("In" | "NotIn") => json!({
                "action": if op == "In" { "keep" } else { "drop" },
                "source_labels": [label, present],
                "regex": format!("({});true", values.join("|")),
            }),
            op @ ("Exists" | "DoesNotExist") => json!({
                "action": if op == "Exists" { "keep" } else { "drop" },
                "source_labels": [present],
                "regex": "true",
            }),
            op => bail!("label selector operator {op} is not one of Kubernetes'"),
        };
        rules.push(rule);
    }
    for k in selector.as_object().into_iter().flatten().map(|(k, _)| k) {
        ensure!(
            k == "matchLabels" || k == "matchExpressions",
            "label selector field {k} is not translated"
        );
    }
    Ok(rules)
}

/// A monitor's relabelings (`RelabelConfig` of monitoring.coreos.com/v1) in
/// Prometheus' own spelling.
pub fn relabel_configs(list: &Value) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for r in list.as_array().into_iter().flatten() {
        let mut c = serde_json::Map::new();
        for (k, v) in r.as_object().into_iter().flatten() {
            let key = match k.as_str() {
                "sourceLabels" => "source_labels",
                "targetLabel" => "target_label",
                "separator" | "regex" | "modulus" | "replacement" => k.as_str(),
                "action" => {
                    c.insert(
                        "action".into(),
                        json!(text(v, "relabeling action")?.to_ascii_lowercase()),
                    );
                    continue;
                }
                other => bail!("relabeling field {other} is not translated"),
            };
            c.insert(key.into(), v.clone());
        }
        out.push(Value::Object(c));
    }
    Ok(out)
}

/// The namespaces a monitor's `namespaceSelector` names (`None`: any).
fn monitor_namespaces(monitor: &Value, own: &str) -> Result<Option<Vec<String>>> {
    let sel = &monitor["spec"]["namespaceSelector"];
    if sel["any"] == json!(true) {
        return Ok(None);
    }
    let names: Vec<String> = sel["matchNames"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| text(v, "matchNames").map(str::to_string))
        .collect::<Result<_>>()?;
    Ok(Some(if names.is_empty() {
        vec![own.to_string()]
    } else {
        names
    }))
}

/// Whether a monitor is a ServiceMonitor or a PodMonitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    Service,
    Pod,
}

impl MonitorKind {
    /// The kind as the API names it.
    pub fn kind(self) -> &'static str {
        match self {
            MonitorKind::Service => "ServiceMonitor",
            MonitorKind::Pod => "PodMonitor",
        }
    }

    /// The Prometheus Operator's prefix of its scrape job names.
    fn job_prefix(self) -> &'static str {
        match self {
            MonitorKind::Service => "serviceMonitor",
            MonitorKind::Pod => "podMonitor",
        }
    }
}

/// The scrape jobs the Prometheus Operator makes of one ServiceMonitor or
/// PodMonitor (one per endpoint), named `serviceMonitor/<ns>/<name>/<i>` or
/// `podMonitor/<ns>/<name>/<i>` as it names them.
pub fn scrape_jobs(kind: MonitorKind, monitor: &Value) -> Result<Vec<ScrapeJob>> {
    let name = text(&monitor["metadata"]["name"], "metadata.name")?;
    let ns = text(&monitor["metadata"]["namespace"], "metadata.namespace")?;
    let what = format!("{} {ns}/{name}", kind.kind());
    jobs_of(kind, monitor, name, ns).with_context(|| what)
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn jobs_of(kind: MonitorKind, monitor: &Value, name: &str, ns: &str) -> Result<Vec<ScrapeJob>> {
    let spec = &monitor["spec"];
    let (object, endpoints_key, role) = match kind {
        MonitorKind::Service => ("service", "endpoints", Role::Endpoints),
        MonitorKind::Pod => ("pod", "podMetricsEndpoints", Role::Pod),
    };
    for k in spec.as_object().into_iter().flatten().map(|(k, _)| k) {
        let known = matches!(
            k.as_str(),
            "selector" | "namespaceSelector" | "jobLabel" | "podTargetLabels"
        ) || k == endpoints_key
            || (kind == MonitorKind::Service && k == "targetLabels");
        ensure!(known, "spec.{k} is not translated");
    }
    let namespaces = monitor_namespaces(monitor, ns)?;
    let selection = selector_rules(&spec["selector"], object)?;
    let mut jobs = Vec::new();
    let endpoints = spec[endpoints_key].as_array().cloned().unwrap_or_default();
    ensure!(!endpoints.is_empty(), "spec.{endpoints_key} is empty");
    for (i, ep) in endpoints.iter().enumerate() {
        let mut job = serde_json::Map::new();
        job.insert(
            "job_name".into(),
            json!(format!("{}/{ns}/{name}/{i}", kind.job_prefix())),
        );
        let mut rules = vec![json!({
            // What the Prometheus Operator keeps of the job name for its own
            // rules (sharding); harmless here, and the same shape.
            "source_labels": ["job"],
            "target_label": "__tmp_prometheus_job_name",
        })];
        rules.extend(selection.iter().cloned());
        let mut port = None;
        let mut user_rules = Vec::new();
        for (k, v) in ep.as_object().into_iter().flatten() {
            match k.as_str() {
                "port" => port = Some(text(v, "port")?.to_string()),
                "path" => {
                    job.insert("metrics_path".into(), v.clone());
                }
                "scheme" => {
                    job.insert("scheme".into(), v.clone());
                }
                "interval" => {
                    job.insert("scrape_interval".into(), v.clone());
                }
                "scrapeTimeout" => {
                    job.insert("scrape_timeout".into(), v.clone());
                }
                "honorLabels" => {
                    job.insert("honor_labels".into(), v.clone());
                }
                "honorTimestamps" => {
                    job.insert("honor_timestamps".into(), v.clone());
                }
                "params" => {
                    job.insert("params".into(), v.clone());
                }
                "relabelings" => user_rules = relabel_configs(v)?,
                "metricRelabelings" => {
                    job.insert("metric_relabel_configs".into(), json!(relabel_configs(v)?));
                }
                other => bail!("endpoint {i}: field {other} is not translated"),
            }
        }
        let port = port.with_context(|| format!("endpoint {i} names no port"))?;
        match kind {
            MonitorKind::Service => {
                rules.push(json!({
                    "action": "keep",
                    "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                    "regex": regex_quote(&port),
                }));
                for (target_kind, label) in [("Node", "node"), ("Pod", "pod")] {
                    rules.push(json!({
                        "source_labels": [
                            "__meta_kubernetes_endpoint_address_target_kind",
                            "__meta_kubernetes_endpoint_address_target_name",
                        ],
                        "separator": ";",
                        "regex": format!("{target_kind};(.*)"),
                        "replacement": "${1}",
                        "target_label": label,
                    }));
                }
            }
            MonitorKind::Pod => {
                rules.push(json!({
                    "action": "drop",
                    "source_labels": ["__meta_kubernetes_pod_phase"],
                    "regex": "(Failed|Succeeded)",
                }));
                rules.push(json!({
                    "action": "keep",
                    "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                    "regex": regex_quote(&port),
                }));
            }
        }
        let copy = |from: &str, to: &str| json!({"source_labels": [from], "target_label": to});
        rules.push(copy("__meta_kubernetes_namespace", "namespace"));
        if kind == MonitorKind::Service {
            rules.push(copy("__meta_kubernetes_service_name", "service"));
        }
        rules.push(copy("__meta_kubernetes_pod_name", "pod"));
        rules.push(copy("__meta_kubernetes_pod_container_name", "container"));
        if kind == MonitorKind::Service {
            rules.push(json!({
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            }));
        }
        let label_list = |key: &str, object: &str| -> Result<Vec<Value>> {
            spec[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    let l = sanitize_label_name(text(l, key)?);
                    Ok(json!({
                        "source_labels": [format!("__meta_kubernetes_{object}_label_{l}")],
                        "regex": "(.+)",
                        "replacement": "${1}",
                        "target_label": l,
                    }))
                })
                .collect()
        };
        if kind == MonitorKind::Service {
            rules.extend(label_list("targetLabels", "service")?);
        }
        rules.extend(label_list("podTargetLabels", "pod")?);
        // The job: the Service's name (ServiceMonitor) or `<ns>/<name>`
        // (PodMonitor), or the value of the object's `jobLabel` label.
        rules.push(match kind {
            MonitorKind::Service => json!({
                "source_labels": ["__meta_kubernetes_service_name"],
                "target_label": "job",
                "replacement": "${1}",
            }),
            MonitorKind::Pod => json!({
                "target_label": "job",
                "replacement": format!("{ns}/{name}"),
            }),
        });
        if let Some(l) = spec["jobLabel"].as_str().filter(|l| !l.is_empty()) {
            rules.push(json!({
                "source_labels": [format!("__meta_kubernetes_{object}_label_{}", sanitize_label_name(l))],
                "target_label": "job",
                "regex": "(.+)",
                "replacement": "${1}",
            }));
        }
        rules.push(json!({"target_label": "endpoint", "replacement": port}));
        rules.extend(user_rules);
        job.insert("relabel_configs".into(), json!(rules));
        jobs.push(ScrapeJob {
            config: Value::Object(job),
            role,
            namespaces: namespaces.clone(),
        });
    }
    Ok(jobs)
}

/// A PrometheusRule's groups as a Prometheus rules file (JSON is YAML).
pub fn rule_file(rule: &Value) -> Result<Value> {
    let groups = rule["spec"]["groups"]
        .as_array()
        .filter(|g| !g.is_empty())
        .context("a PrometheusRule without spec.groups")?;
    Ok(json!({ "groups": groups }))
}

/// The alerting rules (name, expression) of a rules file.
pub fn alert_rules(rules: &Value) -> Vec<(String, String)> {
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| {
            Some((
                r["alert"].as_str()?.to_string(),
                r["expr"].as_str()?.trim().to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service_monitor() -> Value {
        json!({
            "metadata": {"name": "valkey-operator", "namespace": "valkey-system"},
            "spec": {
                "namespaceSelector": {"matchNames": ["valkey-system"]},
                "selector": {"matchLabels": {
                    "app.kubernetes.io/name": "valkey-operator",
                    "app.kubernetes.io/instance": "vk",
                }},
                "endpoints": [{
                    "port": "http",
                    "path": "/metrics",
                    "interval": "1s",
                    "scrapeTimeout": "1s",
                    "honorLabels": true,
                    "relabelings": [{"action": "replace", "targetLabel": "job", "replacement": "valkey-operator"}],
                }],
            },
        })
    }
    #[test]
    fn a_service_monitor_becomes_an_endpoints_job_keeping_its_selector_and_port() {
        let jobs = scrape_jobs(MonitorKind::Service, &service_monitor()).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].role, Role::Endpoints);
        let job = &jobs[0].with_kubernetes_sd(Path::new("/tb/kubeconfig"));
        assert_eq!(
            job["job_name"],
            "serviceMonitor/valkey-system/valkey-operator/0"
        );
        assert_eq!(job["honor_labels"], true);
        assert_eq!(job["scrape_interval"], "1s");
        assert_eq!(job["metrics_path"], "/metrics");
        assert_eq!(
            job["kubernetes_sd_configs"],
            json!([{
                "role": "endpoints",
                "kubeconfig_file": "/tb/kubeconfig",
                "namespaces": {"names": ["valkey-system"]},
            }])
        );
        let rules = job["relabel_configs"].as_array().unwrap();
        assert!(rules.contains(&json!({
            "action": "keep",
            "source_labels": [
                "__meta_kubernetes_service_label_app_kubernetes_io_name",
                "__meta_kubernetes_service_labelpresent_app_kubernetes_io_name",
            ],
            "regex": "(valkey-operator);true",
        })));
        assert!(rules.contains(&json!({
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": "http",
        })));
        // The monitor's own relabeling comes last, so its job wins over the
        // Service's name.
        let job_rules: Vec<&Value> = rules
            .iter()
            .filter(|r| r["target_label"] == "job")
            .collect();
        assert_eq!(job_rules.len(), 2);
        assert_eq!(
            rules.last().unwrap(),
            &json!({"action": "replace", "target_label": "job", "replacement": "valkey-operator"})
        );
    }

    #[test]
    fn a_pod_monitor_becomes_a_pod_job_with_expressions_and_any_namespace() {
        let pm = json!({
            "metadata": {"name": "members", "namespace": "valkey-system"},
            "spec": {
                "namespaceSelector": {"any": true},
                "selector": {"matchExpressions": [
                    {"key": "valkey.rs/cluster", "operator": "Exists"},
                    {"key": "tier", "operator": "NotIn", "values": ["a.b", "c"]},
                ]},
                "podMetricsEndpoints": [{"port": "metrics"}],
            },
        });
        let jobs = scrape_jobs(MonitorKind::Pod, &pm).unwrap();
        assert_eq!(jobs[0].namespaces, None);
        let job = &jobs[0].with_kubernetes_sd(Path::new("/tb/kubeconfig"));
        assert_eq!(job["job_name"], "podMonitor/valkey-system/members/0");
        assert_eq!(job["kubernetes_sd_configs"][0]["role"], "pod");
        assert!(job["kubernetes_sd_configs"][0].get("namespaces").is_none());
        let rules = job["relabel_configs"].as_array().unwrap();
        assert!(rules.contains(&json!({
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_labelpresent_valkey_rs_cluster"],
            "regex": "true",
        })));
        assert!(rules.contains(&json!({
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_label_tier", "__meta_kubernetes_pod_labelpresent_tier"],
            "regex": "(a\\.b|c);true",
        })));
        assert!(rules.contains(&json!({
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": "metrics",
        })));
        assert!(
            rules.contains(&json!({"target_label": "job", "replacement": "valkey-system/members"}))
        );
    }

    #[test]
    fn a_monitor_field_that_is_not_translated_is_an_error() {
        let mut sm = service_monitor();
        sm["spec"]["endpoints"][0]["tlsConfig"] = json!({"insecureSkipVerify": true});
        let e = scrape_jobs(MonitorKind::Service, &sm).unwrap_err();
        assert!(
            format!("{e:#}").contains("tlsConfig is not translated"),
            "{e:#}"
        );
        let mut sm = service_monitor();
        sm["spec"]["sampleLimit"] = json!(10);
        assert!(scrape_jobs(MonitorKind::Service, &sm).is_err());
    }

    #[test]
    fn a_monitor_without_a_namespace_selector_watches_its_own_namespace() {
        let mut sm = service_monitor();
        sm["spec"]
            .as_object_mut()
            .unwrap()
            .remove("namespaceSelector");
        let jobs = scrape_jobs(MonitorKind::Service, &sm).unwrap();
        assert_eq!(jobs[0].namespaces, Some(vec!["valkey-system".to_string()]));
        let file = jobs[0].with_file_sd(Path::new("/w/sd/0.json"));
        assert_eq!(file["file_sd_configs"][0]["files"], json!(["/w/sd/0.json"]));
        assert!(file.get("kubernetes_sd_configs").is_none());
    }

    #[test]
    fn a_prometheus_rule_becomes_a_rules_file_and_its_alerts_are_listed() {
        let rule = json!({"spec": {"groups": [{"name": "g", "rules": [
            {"alert": "A", "expr": "x > 0\n", "for": "5m"},
            {"record": "r", "expr": "sum(x)"},
        ]}]}});
        let file = rule_file(&rule).unwrap();
        assert_eq!(file["groups"][0]["name"], "g");
        assert_eq!(alert_rules(&file), [("A".to_string(), "x > 0".to_string())]);
        assert!(rule_file(&json!({"spec": {}})).is_err());
    }
}
