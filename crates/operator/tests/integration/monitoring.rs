//! The Helm chart's Grafana dashboard and alert rules name only metrics the
//! operator exports: every metric name in every dashboard query, dashboard
//! variable and alert expression must be one the operator's registry, or the
//! member exporter's registry, encodes (with the `_total`, `_bucket`, `_sum`
//! and `_count` suffixes its types get), or Prometheus' own `up`. A renamed or
//! removed metric fails here, not on someone's empty panel or silent alert.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use operator::exporter::sample::{self, Sample};
use operator::metrics::{ClusterGauges, Metrics, ReplicaGauges};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use valkey::parse::{ClusterInfo, Info};

const DASHBOARD: &str =
    include_str!("../../../../deploy/helm/valkey-operator/dashboards/valkey-operator.json");
const ALERTS: &str = include_str!("../../../../deploy/helm/valkey-operator/files/alerts.yaml");

/// The operator's metrics with one sample in every family (a family
/// without samples is not encoded at all).
fn with_every_family() -> Metrics {
    let m = Metrics::new();
    m.reconciled("ns", "c", Duration::from_millis(5), Some("Kubernetes"));
    m.api_write("StatefulSet", "apply");
    m.api_request(&::http::Method::GET, None);
    m.valkey_command("FAILOVER");
    m.failovers.inc();
    m.slot_migrations.inc();
    let gauges = ClusterGauges {
        conditions: vec![("Ready".to_string(), true)],
        replicas: vec![ReplicaGauges {
            shard: 0,
            member: "1".into(),
            link_up: true,
            lag_bytes: Some(0),
        }],
        ..ClusterGauges::default()
    };
    m.observe_cluster("ns", "c", &gauges);
    m.backup_completed("ns", "c", 1_800_000_000.0, 12.5, 4096);
    m.backup_schedule("ns", "c", "nightly", Some(86_400.0));
    m
}

/// What the member exporter says about a replica and about a primary (real
/// replies of valkey-server 9.1.2): between them every family it has.
fn exporter_expositions() -> Vec<String> {
    let cluster =
        ClusterInfo::parse(include_str!("../../src/exporter/testdata/cluster-info.txt")).unwrap();
    [
        include_str!("../../src/exporter/testdata/info-replica.txt"),
        include_str!("../../src/exporter/testdata/info-primary.txt"),
    ]
    .iter()
    .map(|info| {
        let s = Sample::from_replies(&Info::parse(info), Some(cluster)).unwrap();
        sample::encode(Some(&s))
    })
    .collect()
}

/// The exporter's series names (see [`exported`]).
fn exporter_exported() -> BTreeSet<String> {
    exporter_expositions()
        .iter()
        .flat_map(|t| names_in(t))
        .collect()
}

/// The series names Prometheus stores for what the operator and the member
/// exporter export.
fn exported() -> BTreeSet<String> {
    let mut names = names_in(&with_every_family().encode());
    names.extend(exporter_exported());
    names
}

/// The series names of an exposition, read from its `# TYPE` lines (with
/// the suffixes of each type) and from the samples themselves.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The names Prometheus itself gives every target.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// Words of PromQL that are not metric names: aggregations, operators,
/// modifiers, literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
];

/// Modifiers followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Removes what is delimited by `open`..`close` (strings when both are the
/// same quote, with backslash escapes).
fn strip(expr: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut inside = false;
    let mut escaped = false;
    for c in expr.chars() {
        if inside {
            if escaped {
                escaped = false;
            } else if c == '\\' && open == close {
                escaped = true;
            } else if c == close {
                inside = false;
            }
        } else if c == open {
            inside = true;
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    assert!(!inside, "unbalanced {open}{close} in {expr}");
    out
}

/// The metric names a PromQL expression reads: strings, label matchers and
/// ranges removed, then every identifier that is not a function call, a
/// keyword, a label list of `by`/`on`/..., a number or a Grafana `$variable`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut e = expr.to_string();
    for q in ['"', '\'', '`'] {
        e = strip(&e, q, q);
    }
    e = strip(&e, '{', '}');
    e = strip(&e, '[', ']');
    let chars: Vec<char> = e.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '$' || c.is_ascii_digit() || c == '.' {
            // A Grafana variable or a number (durations like 5m included).
            i += 1;
            while i < chars.len() && (ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            if c == '(' && skip_list {
                // A label list: skip to its closing parenthesis.
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
            }
            if !c.is_whitespace() {
                skip_list = false;
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && ident(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        skip_list = LABEL_LISTS.contains(&word.as_str());
        if next == Some(&'(') || KEYWORDS.contains(&word.as_str()) {
            continue;
        }
        names.push(word);
    }
    names
}

/// The expression a Grafana variable query reads: `label_values(EXPR,
/// label)` reads EXPR, `query_result(EXPR)` and `metrics(EXPR)` EXPR,
/// anything else is an expression; `None` for `label_values(label)`, which
/// names no metric (the dashboard should not use it).
fn variable_expr(query: &str) -> Option<String> {
    let q = query.trim();
    if let Some(args) = q
        .strip_prefix("label_values(")
        .and_then(|a| a.strip_suffix(')'))
    {
        let (expr, _label) = args.rsplit_once(',')?;
        return Some(expr.to_string());
    }
    for f in ["query_result(", "metrics("] {
        if let Some(inner) = q.strip_prefix(f).and_then(|a| a.strip_suffix(')')) {
            return Some(inner.to_string());
        }
    }
    Some(q.to_string())
}

/// Every query of the dashboard, by where it is.
fn dashboard_queries(d: &Value) -> Vec<(String, String)> {
    fn panels(list: &Value, out: &mut Vec<(String, String)>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?").to_string();
            if p["type"] == "row" {
                panels(&p["panels"], out);
                continue;
            }
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            assert!(!targets.is_empty(), "panel {title:?} has no query");
            for t in targets {
                let expr = t["expr"].as_str().unwrap_or_default();
                assert!(
                    !expr.is_empty(),
                    "panel {title:?} has a target without expr"
                );
                out.push((format!("panel {title:?}"), expr.to_string()));
            }
        }
    }
    let mut out = Vec::new();
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let query = match &v["query"] {
            Value::String(s) => s.clone(),
            q => q["query"].as_str().unwrap_or_default().to_string(),
        };
        let name = v["name"].as_str().unwrap_or("?");
        let expr = variable_expr(&query)
            .unwrap_or_else(|| panic!("variable {name}: cannot read {query:?}"));
        out.push((format!("variable {name}"), expr));
    }
    out
}

/// Every alert's (name, expression), with the chart's placeholders
/// (`__OPERATOR_JOB__`...) left in: they sit inside label values.
fn alert_rules() -> Vec<(String, String)> {
    let doc: Value = serde_saphyr::from_str(ALERTS).unwrap();
    let mut out = Vec::new();
    for g in doc["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let name = r["alert"].as_str().expect("alert name").to_string();
            let expr = r["expr"].as_str().expect("expr").to_string();
            out.push((name, expr));
        }
    }
    out
}

/// Checks `queries` against what is exported; returns the names used.
fn check(queries: &[(String, String)], exported: &BTreeSet<String>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for (what, expr) in queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{what}: no metric found in {expr:?}");
        for n in names {
            if !exported.contains(&n) && !PROMETHEUS_OWN.contains(&n.as_str()) {
                unknown.push(format!("{what}: {n} (in {expr})"));
            }
            used.insert(n);
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics the operator does not export:\n{}",
        unknown.join("\n")
    );
    used
}

#[test]
fn every_dashboard_query_names_a_metric_the_operator_exports() {
    let exported = exported();
    let d: Value = serde_json::from_str(DASHBOARD).unwrap();
    let queries = dashboard_queries(&d);
    assert!(queries.len() >= 25, "only {} queries found", queries.len());
    let used = check(&queries, &exported);
    // Every per-cluster and per-replica gauge has a panel.
    let shown: Vec<&String> = exported
        .iter()
        .filter(|n| {
            n.starts_with("valkey_operator_cluster_") || n.starts_with("valkey_operator_replica_")
        })
        .filter(|n| !used.contains(*n))
        .collect();
    assert!(shown.is_empty(), "gauges without a panel: {shown:?}");
    // So does every family of the member exporter.
    let unshown: Vec<String> = exporter_exported()
        .into_iter()
        .filter(|n| !used.contains(n))
        .collect();
    assert!(
        unshown.is_empty(),
        "exporter metrics without a panel: {unshown:?}"
    );
}

#[test]
fn the_exporter_contract_names_are_exported() {
    // The names other people build on (docs/guide/monitoring.md).
    let exported = exporter_exported();
    for name in [
        "valkey_up",
        "valkey_memory_used_bytes",
        "valkey_memory_max_bytes",
        "valkey_connected_clients",
        "valkey_commands_processed_total",
        "valkey_instantaneous_ops_per_second",
        "valkey_keyspace_keys",
        "valkey_evicted_keys_total",
        "valkey_expired_keys_total",
        "valkey_replication_offset_bytes",
        "valkey_connected_replicas",
        "valkey_master_link_up",
        "valkey_cluster_state_ok",
        "valkey_cluster_slots_assigned",
        "valkey_cluster_slots_ok",
        "valkey_cluster_known_nodes",
        "valkey_role_primary",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
    // No per-cluster labels: the scraper adds the pod's.
    for text in exporter_expositions() {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            for label in ["cluster=", "namespace=", "shard=", "member=", "pod="] {
                assert!(!line.contains(label), "{line}");
            }
        }
    }
}

#[test]
fn every_alert_names_a_metric_the_operator_exports() {
    let exported = exported();
    let rules = alert_rules();
    let names: BTreeSet<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "ValkeyClusterNotReady",
            "ValkeyClusterSlotsNotServed",
            "ValkeyReplicaLinkDown",
            "ValkeyBackupTooOld",
            "ValkeyClusterPrimariesMisplaced",
            "ValkeyClusterRequiredSpreadUnsatisfiable",
            "ValkeyOperatorDown",
        ])
    );
    let used = check(&rules, &exported);
    assert!(used.contains("up"), "the operator-down alert reads up");
}

#[test]
fn the_families_dashboards_and_alerts_rely_on_are_exported() {
    let exported = exported();
    for name in [
        "valkey_operator_build_info",
        "valkey_operator_reconciles_total",
        "valkey_operator_reconcile_duration_seconds_bucket",
        "valkey_operator_reconcile_duration_seconds_count",
        "valkey_operator_cluster_condition",
        "valkey_operator_cluster_primaries_misplaced",
        "valkey_operator_cluster_preferred_spread_violations",
        "valkey_operator_cluster_members_unplaced",
        "valkey_operator_cluster_plan_optimal",
        "valkey_operator_cluster_reconcile_duration_seconds",
        "valkey_operator_replica_lag_bytes",
        "valkey_operator_replica_link_up",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
    assert!(!exported.contains("valkey_operator_cluster_nope"));
}

#[test]
fn names_are_read_past_functions_keywords_label_lists_strings_and_ranges() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="}", job=~"$job"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        metric_names("time() - max by (namespace, cluster) (b{c=\"d\"}) > bool 3"),
        ["b"]
    );
    assert_eq!(
        metric_names("c / on (namespace) group_left (cluster) d unless e offset 5m"),
        ["c", "d", "e"]
    );
    assert_eq!(
        metric_names(r#"absent(up{job="__OPERATOR_JOB__"} == 1)"#),
        ["up"]
    );
    assert_eq!(
        metric_names("sum without (pod) (f) * 1e3 + count(g)"),
        ["f", "g"]
    );
    assert_eq!(
        variable_expr(r#"label_values(h{namespace=~"$namespace"}, cluster)"#).unwrap(),
        r#"h{namespace=~"$namespace"}"#
    );
}

#[test]
fn an_unknown_metric_fails_the_check() {
    let exported = exported();
    let result = std::panic::catch_unwind(|| {
        check(
            &[(
                "panel".to_string(),
                "max(valkey_operator_cluster_nope)".to_string(),
            )],
            &exported,
        )
    });
    assert!(result.is_err());
}
