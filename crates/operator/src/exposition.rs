//! The two text formats `/metrics` speaks, and which one a scraper gets.
//!
//! The metrics registry encodes OpenMetrics 1.0, which Prometheus asks for
//! first in its `Accept` header. Tools that ask for nothing in particular
//! (`curl`, `promtool check metrics`, older scrapers) read the Prometheus text
//! format 0.0.4, where a counter's `# HELP` and `# TYPE` name the series with
//! its `_total` suffix and there is no `# EOF`: read as 0.0.4, an OpenMetrics
//! counter is an untyped series without help. So, as Prometheus' own client
//! libraries do, OpenMetrics goes to whoever accepts it and 0.0.4 to the rest.

/// The `Content-Type` of an OpenMetrics answer.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The `Content-Type` of a Prometheus text format answer.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The format for a request's `Accept` header: OpenMetrics when it names
    /// `application/openmetrics-text` with a weight above 0 and at least that
    /// of `text/plain`; otherwise (no header, `*/*`, `text/plain`) 0.0.4.
    pub fn for_accept(accept: Option<&str>) -> Format {
        let mut openmetrics = 0.0_f64;
        let mut text = 0.0_f64;
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// The answer to a `/metrics` request: `openmetrics` (what the registry
/// encodes) in the format the request's `Accept` header asks for.
pub fn respond(
    headers: &axum::http::HeaderMap,
    openmetrics: String,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let format = Format::for_accept(accept);
    let body = match format {
        Format::OpenMetrics => openmetrics,
        Format::Text => openmetrics_to_text(&openmetrics),
    };
    (
        [(axum::http::header::CONTENT_TYPE, format.content_type())],
        body,
    )
}

/// Rewrites an OpenMetrics text exposition as the Prometheus text format
/// 0.0.4: a counter's `# HELP` and `# TYPE` name `<family>_total` and its
/// `_created` samples go (0.0.4 has none); an info family becomes the gauge
/// `<family>_info`, an unknown one `untyped`; `# UNIT` and `# EOF` go. Samples
/// and label values are written the same way in both formats.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    // The families' types first: `# HELP` comes before `# TYPE`.
    let mut types = std::collections::HashMap::new();
    for line in openmetrics.lines() {
        if let Some((name, kind)) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.split_once(' '))
        {
            types.insert(name, kind);
        }
    }
    let renamed = |name: &str| -> String {
        match types.get(name) {
            Some(&"counter") => format!("{name}_total"),
            Some(&"info") => format!("{name}_info"),
            _ => name.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {} {help}\n", renamed(name)));
        } else if let Some((name, kind)) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.split_once(' '))
        {
            let kind = match kind {
                "info" => "gauge",
                "unknown" => "untyped",
                k => k,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", renamed(name)));
        } else if is_created_sample(line, &types) {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether `line` is the `_created` sample of a counter, histogram or summary.
fn is_created_sample(line: &str, types: &std::collections::HashMap<&str, &str>) -> bool {
    let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
    name.strip_suffix("_created").is_some_and(|family| {
        matches!(
            types.get(family),
            Some(&"counter") | Some(&"histogram") | Some(&"summary")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_plain_clients_get_the_text_format() {
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,\
                          application/openmetrics-text;version=0.0.1;q=0.75,\
                          text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::for_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::for_accept(None), Format::Text);
        assert_eq!(Format::for_accept(Some("*/*")), Format::Text);
        assert_eq!(Format::for_accept(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::for_accept(Some("text/plain;q=1, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::for_accept(Some("application/openmetrics-text;q=0")),
            Format::Text
        );
        assert_eq!(
            Format::for_accept(Some("Application/OpenMetrics-Text; version=1.0.0")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn a_counter_is_named_with_its_total_suffix_in_the_text_format() {
        let om = "# HELP valkey_operator_reconciles Reconciles run.\n\
                  # TYPE valkey_operator_reconciles counter\n\
                  valkey_operator_reconciles_total 3\n\
                  valkey_operator_reconciles_created 1700000000.0\n\
                  # HELP up_seconds Time up.\n\
                  # TYPE up_seconds gauge\n\
                  # UNIT up_seconds seconds\n\
                  up_seconds{a=\"b \\\"c\\\"\"} 2.5\n\
                  # HELP build Build.\n\
                  # TYPE build info\n\
                  build_info{version=\"1\"} 1\n\
                  # HELP d Duration.\n\
                  # TYPE d histogram\n\
                  d_sum 0.5\n\
                  d_count 1\n\
                  d_bucket{le=\"+Inf\"} 1\n\
                  # EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP valkey_operator_reconciles_total Reconciles run.\n\
             # TYPE valkey_operator_reconciles_total counter\n\
             valkey_operator_reconciles_total 3\n\
             # HELP up_seconds Time up.\n\
             # TYPE up_seconds gauge\n\
             up_seconds{a=\"b \\\"c\\\"\"} 2.5\n\
             # HELP build_info Build.\n\
             # TYPE build_info gauge\n\
             build_info{version=\"1\"} 1\n\
             # HELP d Duration.\n\
             # TYPE d histogram\n\
             d_sum 0.5\n\
             d_count 1\n\
             d_bucket{le=\"+Inf\"} 1\n"
        );
    }

    #[test]
    fn the_operators_own_metrics_have_help_and_type_for_every_sample_in_the_text_format() {
        let m = crate::metrics::Metrics::new();
        m.reconciled("ns", "c", std::time::Duration::from_millis(5), None);
        m.api_write("StatefulSet", "apply");
        let text = openmetrics_to_text(&m.encode());
        let typed: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let helped: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(typed, helped, "{text}");
        for sample in text.lines().filter(|l| !l.starts_with('#')) {
            let name = &sample[..sample.find(['{', ' ']).unwrap_or(sample.len())];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "{sample} has no # TYPE in\n{text}");
        }
        assert!(text.contains("# TYPE valkey_operator_api_writes_total counter\n"));
        assert!(!text.contains("# EOF"));
    }
}
