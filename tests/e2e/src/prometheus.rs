//! A real Prometheus for the suites, fed what the Helm chart's monitoring
//! objects say, the way the Prometheus Operator would feed it.
//!
//! - [`scrape_jobs`] turns the ServiceMonitors and PodMonitors read back from
//!   the API server into Prometheus scrape jobs: Kubernetes service discovery
//!   against the testbed's API server (role `endpoints` for a ServiceMonitor,
//!   `pod` for a PodMonitor, with the testbed's kubeconfig), the monitor's
//!   selector and port by name as `keep` rules, the target labels the
//!   Prometheus Operator adds (`namespace`, `service`, `pod`, `container`,
//!   `endpoint`, `job`), then the monitor's own relabelings, `honorLabels`,
//!   interval, timeout and path. A field it does not translate is an error,
//!   never silently dropped.
//! - [`rule_file`] writes a PrometheusRule's groups as a rules file.
//! - [`Prometheus`] runs the binary on the host (loopback listener, a data
//!   folder of its own, killed on drop and by `testbed down` through its pid
//!   file) and asks its HTTP API.
//! - [`vector_selectors`] and [`grafana_substitute`] take alert and dashboard
//!   expressions apart so a suite can show each piece returns data.
//!
//! The binaries are Debian's build of Prometheus 2.42.0, unpacked by
//! `scripts/fetch-prometheus.sh` (`make setup`).

use crate::cluster::{Env, tail_file};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The upstream release scripts/fetch-prometheus.sh unpacks.
pub const PROMETHEUS_VERSION: &str = "2.42.0";

fn cached_bin(env_var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("VALKEY_RS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/valkey-rs")
        });
    cache.join(format!("bin/prometheus-{PROMETHEUS_VERSION}/{name}"))
}

/// `PROMETHEUS_BIN`, else the cached binary.
pub fn prometheus_bin() -> PathBuf {
    cached_bin("PROMETHEUS_BIN", "prometheus")
}

/// `PROMTOOL_BIN`, else the cached binary.
pub fn promtool_bin() -> PathBuf {
    cached_bin("PROMTOOL_BIN", "promtool")
}

/// Runs `promtool ARGS` with `stdin`; its stdout and stderr, or an error with
/// both when it exits non-zero (problems found, or it could not run).
pub fn promtool(args: &[&str], stdin: &str) -> Result<String> {
    let bin = promtool_bin();
    ensure!(
        bin.exists(),
        "{} is missing: `make setup` (scripts/fetch-prometheus.sh) unpacks it",
        bin.display()
    );
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "promtool {} ({}):\n{text}",
        args.join(" "),
        out.status
    );
    Ok(text)
}

// ---------------------------------------------------------------------------
// The Prometheus Operator's translation.

/// How the scrape jobs' service discovery reaches the API server.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// A kubeconfig with the server, its CA and a client's credentials.
    pub kubeconfig: PathBuf,
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
pub fn scrape_jobs(kind: MonitorKind, monitor: &Value, sd: &Discovery) -> Result<Vec<Value>> {
    let name = text(&monitor["metadata"]["name"], "metadata.name")?;
    let ns = text(&monitor["metadata"]["namespace"], "metadata.namespace")?;
    let what = format!("{} {ns}/{name}", kind.kind());
    jobs_of(kind, monitor, name, ns, sd).with_context(|| what)
}

fn jobs_of(
    kind: MonitorKind,
    monitor: &Value,
    name: &str,
    ns: &str,
    sd: &Discovery,
) -> Result<Vec<Value>> {
    let spec = &monitor["spec"];
    let (object, endpoints_key, role) = match kind {
        MonitorKind::Service => ("service", "endpoints", "endpoints"),
        MonitorKind::Pod => ("pod", "podMetricsEndpoints", "pod"),
    };
    for k in spec.as_object().into_iter().flatten().map(|(k, _)| k) {
        let known = matches!(
            k.as_str(),
            "selector" | "namespaceSelector" | "jobLabel" | "podTargetLabels"
        ) || k == endpoints_key
            || (kind == MonitorKind::Service && k == "targetLabels");
        ensure!(known, "spec.{k} is not translated");
    }
    let mut sd_config = json!({
        "role": role,
        "kubeconfig_file": sd.kubeconfig.to_string_lossy(),
    });
    if let Some(names) = monitor_namespaces(monitor, ns)? {
        sd_config["namespaces"] = json!({ "names": names });
    }
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
        job.insert("kubernetes_sd_configs".into(), json!([sd_config.clone()]));
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
        jobs.push(Value::Object(job));
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

/// A Prometheus configuration written from the monitoring objects in a
/// cluster.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `prometheus.json` (JSON is YAML).
    pub config: PathBuf,
    /// One rules file per PrometheusRule.
    pub rule_files: Vec<PathBuf>,
    /// The scrape jobs' names.
    pub jobs: Vec<String>,
    /// Every alerting rule of the rules files, as (alert, expression).
    pub alerts: Vec<(String, String)>,
}

/// Reads every ServiceMonitor, PodMonitor and PrometheusRule carrying the
/// label selector `selector` (all namespaces) from the API server and writes
/// the Prometheus configuration the Prometheus Operator would make of them
/// into `dir`: their scrape jobs and rules files, rules evaluated every
/// second (so an alert's state shows within a second or two).
pub fn write_config(env: &Env, selector: &str, dir: &Path) -> Result<Generated> {
    let sd = Discovery {
        kubeconfig: env.kubeconfig.clone(),
    };
    let list = |resource: &str| -> Result<Vec<Value>> {
        let v = env.kubectl_json(&["get", resource, "--all-namespaces", "-l", selector])?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    };
    let mut scrape_configs = Vec::new();
    for (kind, resource) in [
        (
            MonitorKind::Service,
            "servicemonitors.monitoring.coreos.com",
        ),
        (MonitorKind::Pod, "podmonitors.monitoring.coreos.com"),
    ] {
        for m in list(resource)? {
            scrape_configs.extend(scrape_jobs(kind, &m, &sd)?);
        }
    }
    let mut rule_files = Vec::new();
    let mut alerts = Vec::new();
    for r in list("prometheusrules.monitoring.coreos.com")? {
        let file = rule_file(&r)?;
        alerts.extend(alert_rules(&file));
        let name = format!(
            "rules-{}-{}.json",
            r["metadata"]["namespace"].as_str().unwrap_or_default(),
            r["metadata"]["name"].as_str().unwrap_or_default()
        );
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&file)?)?;
        rule_files.push(path);
    }
    let jobs = scrape_configs
        .iter()
        .filter_map(|j| j["job_name"].as_str().map(str::to_string))
        .collect();
    let config = json!({
        "global": {
            // For jobs whose monitor sets no interval; the chart's set theirs.
            "scrape_interval": "2s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
        },
        "rule_files": rule_files,
        "scrape_configs": scrape_configs,
    });
    let path = dir.join("prometheus.json");
    std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
    Ok(Generated {
        config: path,
        rule_files,
        jobs,
        alerts,
    })
}

// ---------------------------------------------------------------------------
// PromQL and Grafana expressions, taken apart.

/// Words of PromQL that are never metric names where they stand.
const PROMQL_WORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];
/// Clauses followed by a parenthesised label list.
const LABEL_LIST_CLAUSES: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Skips a quoted string starting at `i` (the quote); the index after it.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        if b[j] == b'\\' && quote != b'`' {
            j += 1;
        }
        j += 1;
    }
    (j + 1).min(b.len())
}

/// The index after the bracket that closes the one at `i` (strings skipped).
fn skip_balanced(b: &[u8], i: usize, open: u8, close: u8) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => {
                j = skip_string(b, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    b.len()
}

fn next_non_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Whether `s` starts with the word `w` (not merely a longer name).
fn starts_with_word(s: &str, w: &str) -> bool {
    s.strip_prefix(w).is_some_and(|rest| {
        !rest
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    })
}

/// The instant vector selectors of a PromQL expression, in order, each once:
/// a metric name with its `{...}` matchers, or matchers alone (range
/// brackets, functions, aggregations, clauses and literals left out).
pub fn vector_selectors(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i = skip_string(b, i);
        } else if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'[' {
            i = skip_balanced(b, i, b'[', b']');
        } else if c == b'{' {
            let end = skip_balanced(b, i, b'{', b'}');
            push(expr[i..end].to_string());
            i = end;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            let next = next_non_space(b, i);
            let lower = word.to_ascii_lowercase();
            if LABEL_LIST_CLAUSES.contains(&lower.as_str()) {
                if b.get(next) == Some(&b'(') {
                    i = skip_balanced(b, next, b'(', b')');
                }
            } else if PROMQL_WORDS.contains(&lower.as_str()) {
                // An operator or a literal.
            } else if b.get(next) == Some(&b'(') {
                // A function or an aggregation.
            } else if starts_with_word(&expr[next..], "by")
                || starts_with_word(&expr[next..], "without")
            {
                // An aggregation with its clause first: `sum by (x) (...)`.
            } else if b.get(next) == Some(&b'{') {
                let end = skip_balanced(b, next, b'{', b'}');
                push(format!("{word}{}", &expr[next..end]));
                i = end;
            } else {
                push(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Replaces Grafana's `$name` and `${name}` variables in `expr` with
/// `values`; an unknown variable is an error (a new dashboard variable needs
/// a value here too).
pub fn grafana_substitute(expr: &str, values: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .with_context(|| format!("unclosed ${{ in {expr}"))?;
            // `${var:format}`: the format does not matter for these values.
            let inner = &braced[..end];
            (inner.split(':').next().unwrap_or(inner), end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = values
            .get(name)
            .with_context(|| format!("no value for the dashboard variable ${name} in {expr}"))?;
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Every panel query of a Grafana dashboard (rows' panels included), as
/// (panel title, expression).
pub fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((title.clone(), expr.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The dashboard's `label_values(selector, label)` query variables, as
/// (variable, selector, label).
pub fn dashboard_label_variables(dashboard: &Value) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] != "query" {
            continue;
        }
        let name = text(&v["name"], "variable name")?.to_string();
        let query = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .or_else(|| v["definition"].as_str())
            .with_context(|| format!("variable {name} has no query"))?;
        let inner = query
            .trim()
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .with_context(|| format!("variable {name}: {query} is not label_values(...)"))?;
        let (selector, label) = inner
            .rsplit_once(',')
            .with_context(|| format!("variable {name}: {query} names no metric"))?;
        out.push((name, selector.trim().to_string(), label.trim().to_string()));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The process and its API.

/// GET `path` (with its query string) from `host:port` over HTTP/1.0, with
/// extra header lines; the status code and the body.
pub fn http_get(authority: &str, path: &str, headers: &str) -> Result<(u16, String)> {
    let timeout = Duration::from_secs(10);
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .with_context(|| format!("{authority} has no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {authority}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // HTTP/1.0: the answer ends when the server closes (never chunked).
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\n{headers}\r\n"
    )?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .with_context(|| format!("reading {authority}{path}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("{authority}{path}: no HTTP header in {answer:?}"))?;
    let code = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{authority}{path}: no status in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// `s` percent-encoded for a query string.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Prometheus on the host, killed (and its data removed) on drop.
pub struct Prometheus {
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    pub authority: String,
    pub dir: PathBuf,
    log: PathBuf,
    pid_file: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus with `config` (a file in `dir`), its data in
    /// `dir/data`, its log in `dir/prometheus.log`, listening on a free
    /// loopback port; its pid goes to the testbed's `pids/` so `testbed
    /// down` stops it too. Waits until it is ready.
    pub fn start(env: &Env, dir: &Path, config: &Path) -> Result<Prometheus> {
        let bin = prometheus_bin();
        ensure!(
            bin.exists(),
            "{} is missing: `make setup` (scripts/fetch-prometheus.sh) unpacks it",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let authority = format!("127.0.0.1:{port}");
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={authority}"))
            .arg("--storage.tsdb.retention.time=1h")
            .arg("--log.level=info")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pids = env.testbed_dir.join("pids");
        std::fs::create_dir_all(&pids)?;
        let pid_file = pids.join(format!("prometheus-e2e-{}.pid", std::process::id()));
        std::fs::write(&pid_file, child.id().to_string())?;
        let mut p = Prometheus {
            child: Some(child),
            authority,
            dir: dir.to_path_buf(),
            log,
            pid_file,
        };
        crate::cluster::wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
            if let Some(Ok(Some(status))) = p.child.as_mut().map(Child::try_wait) {
                bail!("prometheus exited ({status}):\n{}", p.log_tail(30));
            }
            Ok(matches!(
                http_get(&p.authority, "/-/ready", ""),
                Ok((200, _))
            ))
        })
        .with_context(|| format!("prometheus did not become ready:\n{}", p.log_tail(30)))?;
        Ok(p)
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// GETs an API path; its `data` when `status` is `success`.
    pub fn api(&self, path: &str) -> Result<Value> {
        let (code, body) = http_get(&self.authority, path, "")?;
        let v: Value = serde_json::from_str(&body)
            .with_context(|| format!("GET {path}: {code}, not JSON: {body}"))?;
        ensure!(
            code == 200 && v["status"] == "success",
            "GET {path}: {code} {}",
            body.trim()
        );
        Ok(v["data"].clone())
    }

    /// An instant query: its result vector.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", url_encode(expr)))
            .with_context(|| format!("query {expr}"))?;
        ensure!(
            data["resultType"] == "vector",
            "query {expr}: a {}, not a vector",
            data["resultType"]
        );
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The active targets.
    pub fn targets(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/targets?state=active")?["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The alerts pending or firing.
    pub fn alerts(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/alerts")?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Every loaded rule, as (group, rule) JSON.
    pub fn rules(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/rules")?["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Makes it read its configuration again (SIGHUP) and waits until the
    /// reload succeeded.
    pub fn reload(&self) -> Result<()> {
        let before = self.reloads()?;
        let pid = self.pid().context("prometheus is not running")?;
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        ensure!(sent.success(), "kill -HUP {pid} failed");
        crate::cluster::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            Ok(self.reloads()? > before)
        })
        .with_context(|| format!("prometheus did not reload:\n{}", self.log_tail(20)))?;
        let ok = self.query("prometheus_config_last_reload_successful")?;
        ensure!(
            ok.first().map(|s| s["value"][1] == "1") == Some(true),
            "the reload failed:\n{}",
            self.log_tail(20)
        );
        Ok(())
    }

    /// When the configuration was last (re)loaded, from its own metrics.
    fn reloads(&self) -> Result<f64> {
        let (_, body) = http_get(&self.authority, "/metrics", "")?;
        Ok(body
            .lines()
            .find_map(|l| {
                l.strip_prefix("prometheus_config_last_reload_success_timestamp_seconds ")
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pid_file);
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sd() -> Discovery {
        Discovery {
            kubeconfig: PathBuf::from("/tb/kubeconfig"),
        }
    }

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
        let jobs = scrape_jobs(MonitorKind::Service, &service_monitor(), &sd()).unwrap();
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
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
        let jobs = scrape_jobs(MonitorKind::Pod, &pm, &sd()).unwrap();
        let job = &jobs[0];
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
        let e = scrape_jobs(MonitorKind::Service, &sm, &sd()).unwrap_err();
        assert!(
            format!("{e:#}").contains("tlsConfig is not translated"),
            "{e:#}"
        );
        let mut sm = service_monitor();
        sm["spec"]["sampleLimit"] = json!(10);
        assert!(scrape_jobs(MonitorKind::Service, &sm, &sd()).is_err());
    }

    #[test]
    fn a_monitor_without_a_namespace_selector_watches_its_own_namespace() {
        let mut sm = service_monitor();
        sm["spec"]
            .as_object_mut()
            .unwrap()
            .remove("namespaceSelector");
        let jobs = scrape_jobs(MonitorKind::Service, &sm, &sd()).unwrap();
        assert_eq!(
            jobs[0]["kubernetes_sd_configs"][0]["namespaces"]["names"],
            json!(["valkey-system"])
        );
    }

    #[test]
    fn vector_selectors_leave_out_functions_clauses_ranges_and_literals() {
        assert_eq!(
            vector_selectors(
                "max by (namespace, cluster) (valkey_operator_cluster_condition{condition=\"Ready\"}) == 0"
            ),
            ["valkey_operator_cluster_condition{condition=\"Ready\"}"]
        );
        assert_eq!(
            vector_selectors("absent(up{job=\"valkey-operator\", namespace=\"x\"} == 1)"),
            ["up{job=\"valkey-operator\", namespace=\"x\"}"]
        );
        assert_eq!(
            vector_selectors(
                "histogram_quantile(0.99, sum by (le) (rate(d_bucket{job=~\"$job\"}[$__rate_interval])))"
            ),
            ["d_bucket{job=~\"$job\"}"]
        );
        assert_eq!(
            vector_selectors(
                "sum(rate(a_sum[5m])) / sum(rate(a_count[5m])) and on (x) b offset 1m"
            ),
            ["a_sum", "a_count", "b"]
        );
        assert_eq!(
            vector_selectors("time() - max(t{a=\"}\"}) > bool 1e3 or {__name__=\"z\"}"),
            ["t{a=\"}\"}", "{__name__=\"z\"}"]
        );
    }

    #[test]
    fn grafana_variables_are_replaced_and_unknown_ones_refused() {
        let values = BTreeMap::from([
            ("namespace", "ns1".to_string()),
            ("__rate_interval", "10s".to_string()),
        ]);
        assert_eq!(
            grafana_substitute(
                "rate(x{namespace=~\"$namespace\"}[${__rate_interval}])",
                &values
            )
            .unwrap(),
            "rate(x{namespace=~\"ns1\"}[10s])"
        );
        let e = grafana_substitute("x{cluster=~\"$cluster\"}", &values).unwrap_err();
        assert!(e.to_string().contains("$cluster"), "{e}");
    }

    #[test]
    fn the_dashboard_queries_and_variables_are_found_in_rows_too() {
        let d = json!({
            "panels": [
                {"title": "A", "targets": [{"expr": "a"}]},
                {"title": "row", "type": "row", "panels": [{"title": "B", "targets": [{"expr": "b"}, {"refId": "x"}]}]},
            ],
            "templating": {"list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {"name": "ns", "type": "query", "query": {"query": "label_values(m{a=\"b\"}, namespace)"}},
            ]},
        });
        assert_eq!(
            dashboard_queries(&d),
            [
                ("A".to_string(), "a".to_string()),
                ("B".to_string(), "b".to_string())
            ]
        );
        assert_eq!(
            dashboard_label_variables(&d).unwrap(),
            [(
                "ns".to_string(),
                "m{a=\"b\"}".to_string(),
                "namespace".to_string()
            )]
        );
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

    #[test]
    fn query_strings_are_percent_encoded() {
        assert_eq!(url_encode("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
    }
}
