//! Alert and dashboard expressions taken apart, so a suite can show that each
//! piece returns data: the vector selectors of a PromQL expression, Grafana's
//! variables replaced, a dashboard's queries and `label_values` variables.

use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    v.as_str()
        .with_context(|| format!("{what} is not a string: {v}"))
}

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
        if name.is_empty() {
            // A `$` of PromQL itself (a regex's end), not a variable.
            out.push('$');
            rest = after;
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(
            grafana_substitute("x{a=~\"b$\"}", &values).unwrap(),
            "x{a=~\"b$\"}"
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
}
