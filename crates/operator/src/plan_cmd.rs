// Over 600 lines: 526 lines of code; the rest are its unit tests, kept beside it.
//! `valkey-operator plan`: the placement planner on manifests read from files.
//!
//! `--cluster` holds one ValkeyCluster; `--nodes` and `--pods` hold Nodes and
//! Pods as `kubectl get -o yaml` prints them (a List), as a multi-document YAML
//! stream, or as single objects. The same adapter the controller uses turns
//! them into a [`placement::Problem`]. Exit 0 when every member is placed, 2
//! when not (the plan is still printed), 1 on bad input with one line on stderr
//! naming the file and the field.
//!
//! The ValkeyCluster is read as strictly as the API server reads it: a field
//! the CRD does not know, or `spec: null`, is refused rather than silently
//! planned with defaults. `--time-limit` bounds the planner's search as the
//! operator's reconcile does (1 s by default).

use api::constants::{GROUP, KIND, VERSION};
use api::v1alpha1::{ValkeyCluster, validate};
use k8s_openapi::api::core::v1::{Node, Pod};
use resources::adapt::{self, AdaptError};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use thiserror::Error;

/// How the plan is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// The topology as a person reads it: region, zone, node, members.
    #[default]
    Text,
    /// The plan as JSON (`cluster`, `feasible`, `members`, `unplaced`, `violations`).
    Json,
    /// The topology as an SVG picture: regions, zones and nodes as nested
    /// boxes, members coloured by shard, violations in red.
    Svg,
}

/// Arguments of `valkey-operator plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// A ValkeyCluster manifest.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Nodes: a List (`kubectl get nodes -o yaml`), a multi-document YAML stream or one Node.
    #[arg(long, value_name = "FILE")]
    pub nodes: PathBuf,
    /// Pods in the same forms: members of the cluster give the current placement,
    /// all others only use room.
    #[arg(long, value_name = "FILE")]
    pub pods: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// How long the planner may search when constraint keys cross (e.g. zones
    /// and racks that span zones): `1s`, `500ms`, `2m`, seconds as a number
    /// (`0.25`), or `none` to search until the plan is proven optimal. Past it
    /// the best plan found is printed, and a note on stderr says it is not
    /// proven optimal. Nesting keys are planned exactly at once.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_time_limit)]
    pub time_limit: TimeLimit,
}

/// `--time-limit`: a duration, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimit(pub Option<Duration>);

/// Reads `1s`, `500ms`, `2m`, `0.25` (seconds) or `none`.
pub fn parse_time_limit(text: &str) -> Result<TimeLimit, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(TimeLimit(None));
    }
    let (number, seconds_per_unit) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let bad =
        || format!("{text:?} is not a duration: write e.g. 1s, 500ms, 2m, 0.25 (seconds) or none");
    let value: f64 = number.trim().parse().map_err(|_| bad())?;
    // try_from_secs_f64 refuses negative, NaN and too large values rather
    // than panicking, as Duration::from_secs_f64 would.
    let limit = Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|_| bad())?;
    if limit.is_zero() {
        return Err(format!(
            "{text:?}: the time limit must be more than 0 (none for no limit)"
        ));
    }
    Ok(TimeLimit(Some(limit)))
}

/// Bad input: which file, and what in it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{file}: {message}")]
pub struct PlanCmdError {
    /// The path as given on the command line.
    pub file: String,
    /// The field and what is wrong with it.
    pub message: String,
}

impl PlanCmdError {
    fn new(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.display().to_string(),
            message: message.into(),
        }
    }
}

/// What the command prints and whether every member was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub output: String,
    pub feasible: bool,
    /// False when `--time-limit` cut the search short.
    pub optimal: bool,
    /// When not optimal: how far the plan may be from the optimum.
    pub gap: Option<placement::Gap>,
}

/// Runs the command: prints the plan on stdout, or one error line on stderr.
pub fn main(args: &PlanArgs) -> ExitCode {
    match plan(args) {
        Ok(rendered) => {
            print!("{}", rendered.output);
            if !rendered.optimal {
                // On stderr: the plan JSON on stdout keeps its documented shape.
                eprintln!(
                    "{}: note: the best plan found within --time-limit, not proven optimal \
                     (its Required constraints hold; {})",
                    args.cluster.display(),
                    decide::placement::gap_words(rendered.gap)
                );
            }
            if rendered.feasible {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

/// Reads the files, plans, and renders the plan.
pub fn plan(args: &PlanArgs) -> Result<Rendered, PlanCmdError> {
    let cluster_file = &args.cluster;
    let cluster = load_cluster(cluster_file)?;
    let validated =
        validate(&cluster).map_err(|e| PlanCmdError::new(cluster_file, e.to_string()))?;
    let nodes: Vec<Node> = load_objects(&args.nodes, "Node")?;
    let pods: Vec<Pod> = match &args.pods {
        Some(path) => load_objects(path, "Pod")?,
        None => Vec::new(),
    };
    let problem = adapt::problem(&validated, &nodes, &pods).map_err(|e| {
        let file = match &e {
            AdaptError::Node { .. } | AdaptError::DuplicateNode { .. } => args.nodes.as_path(),
            AdaptError::Pod { .. } => args.pods.as_deref().unwrap_or(args.nodes.as_path()),
            AdaptError::Cluster { .. } => cluster_file.as_path(),
        };
        PlanCmdError::new(file, e.to_string())
    })?;
    let options = placement::PlanOptions {
        time_limit: args.time_limit.0,
        ..Default::default()
    };
    let planned = placement::plan_with(&problem, &options)
        .map_err(|e| PlanCmdError::new(cluster_file, e.to_string()))?;
    let plan = planned.plan;
    let output = match args.output {
        Output::Json => {
            let mut json = serde_json::to_string_pretty(&plan)
                .map_err(|e| PlanCmdError::new(cluster_file, format!("encoding the plan: {e}")))?;
            json.push('\n');
            json
        }
        Output::Text => placement::render_text(&problem, &plan),
        Output::Svg => placement::render_svg(&placement::Picture::of_plan(&problem, &plan)),
    };
    Ok(Rendered {
        output,
        feasible: plan.feasible,
        optimal: planned.optimal,
        gap: planned.gap,
    })
}

fn read(path: &Path) -> Result<String, PlanCmdError> {
    std::fs::read_to_string(path).map_err(|e| PlanCmdError::new(path, format!("cannot read: {e}")))
}

/// Nodes (mappings, sequences and scalars) a file may hold once its aliases
/// are expanded, per byte of the file. Without aliases a file holds at most
/// about one node per byte (`kubectl get -o yaml` writes one per 20 bytes or
/// so), so this leaves room for any sharing a YAML writer does (PyYAML
/// anchors an object once and aliases every other use of it) while an alias
/// bomb (`billion laughs`: a kilobyte that expands to 10^9 nodes) is refused
/// after a bounded amount of work and memory.
const EXPANDED_NODES_PER_BYTE: usize = 8;
/// The least node limit, for small files: an alias bomb stopped there has
/// taken under a second and some 200 MB.
const MIN_EXPANDED_NODES: usize = 1_000_000;
/// The least limit on scalar text once aliases are expanded (serde-saphyr's
/// own default).
const MIN_EXPANDED_SCALAR_BYTES: usize = 64 * 1024 * 1024;

/// How a file of `input_len` bytes is parsed: what its aliases expand to is
/// bounded, relative to its size ([`EXPANDED_NODES_PER_BYTE`]), not how many
/// aliases it has per anchor. serde-saphyr's default budget refuses more than
/// 10 aliases per anchor past 100 aliases (`AliasAnchorRatio`), which refuses
/// a valid pod list whose pods share one anchored `resources` (PyYAML's
/// `&id001` once, `*id001` for every other pod) that the API server and
/// kubectl accept; and its absolute caps (250 000 nodes, 1 024 documents,
/// 50 000 aliases) refuse `kubectl get pods -A -o yaml` of a large cluster.
fn yaml_options(input_len: usize) -> serde_saphyr::Options {
    let nodes = input_len
        .saturating_mul(EXPANDED_NODES_PER_BYTE)
        .max(MIN_EXPANDED_NODES);
    // A document, an alias and an anchor each take at least two bytes of the
    // file, so none of these counts can reach this cap: they are no limits
    // of their own. What aliases cost is their expansion, which the
    // node, event and byte limits bound.
    let count_cap = input_len.max(MIN_EXPANDED_NODES);
    // Each node opens with one event and a container closes with one; each
    // document adds two, the stream two.
    let events = nodes
        .saturating_mul(2)
        .saturating_add(count_cap.saturating_mul(2))
        .saturating_add(2);
    let mut budget = serde_saphyr::Budget::default();
    budget.enforce_alias_anchor_ratio = false;
    budget.max_nodes = nodes;
    budget.max_events = events;
    budget.max_total_scalar_bytes = input_len
        .saturating_mul(EXPANDED_NODES_PER_BYTE)
        .max(MIN_EXPANDED_SCALAR_BYTES);
    budget.max_documents = count_cap;
    budget.max_aliases = count_cap;
    budget.max_anchors = count_cap;
    // Copies of events kept for anchors (nested anchors copy an event once
    // per open anchor): bounded like the events themselves.
    budget.max_recorded_anchor_events = events;
    budget.max_recorded_anchor_bytes = budget.max_total_scalar_bytes;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // serde-saphyr also counts replayed events on its own (1 000 000 by
    // default); the budget above is the one limit.
    options.alias_limits.max_total_replayed_events = events;
    options
}

/// The one-line message of a YAML error: serde-saphyr's message draws the
/// offending line under its first line; the first line alone (`line 5 column
/// 20: unclosed bracket`) keeps the one-line error the CLI promises. A file
/// over the expansion limits of [`yaml_options`] is named as such.
fn yaml_error_message(error: &serde_saphyr::Error, budget: &serde_saphyr::Budget) -> String {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach as B;
    let mut inner = error;
    while let E::AliasError { error, .. } | E::WithSnippet { error, .. } = inner {
        inner = &**error;
    }
    let limit = |what: &str, max: usize| {
        format!(
            "invalid YAML: more than {max} {what} once aliases are expanded (the limit is \
             {EXPANDED_NODES_PER_BYTE} per byte of the file, at least {MIN_EXPANDED_NODES}): \
             an alias bomb?"
        )
    };
    match inner {
        E::Budget {
            breach: B::Nodes { .. } | B::Events { .. } | B::RecordedAnchorEvents { .. },
            ..
        }
        | E::AliasReplayLimitExceeded { .. } => limit("nodes", budget.max_nodes),
        E::Budget {
            breach: B::ScalarBytes { .. } | B::RecordedAnchorBytes { .. },
            ..
        } => format!(
            "invalid YAML: more than {} bytes of text once aliases are expanded (the limit \
             is {EXPANDED_NODES_PER_BYTE} per byte of the file, at least \
             {MIN_EXPANDED_SCALAR_BYTES}): an alias bomb?",
            budget.max_total_scalar_bytes
        ),
        _ => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            format!("invalid YAML: {first}")
        }
    }
}

/// The YAML documents of `text`, skipping empty ones; each with a label for
/// errors (`document 2: `, or nothing when the file holds one document).
fn documents(path: &Path, text: &str) -> Result<Vec<(String, Value)>, PlanCmdError> {
    let options = yaml_options(text.len());
    let budget = options.budget.clone().unwrap_or_default();
    let values: Vec<Value> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| PlanCmdError::new(path, yaml_error_message(&e, &budget)))?;
    let mut docs = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        if !value.is_null() {
            docs.push((format!("document {}: ", i + 1), value));
        }
    }
    if docs.len() == 1 {
        docs[0].0.clear();
    }
    Ok(docs)
}

fn kind_of(value: &Value) -> Option<&str> {
    value.get("kind").and_then(Value::as_str)
}

/// Deserializes `value` as `T`, naming the failing field (`spec.shards: ...`).
fn typed<'de, T, D>(path: &Path, at: &str, value: D) -> Result<T, PlanCmdError>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
    D::Error: std::fmt::Display,
{
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        if field.is_empty() || field == "." {
            PlanCmdError::new(path, format!("{at}{message}"))
        } else {
            PlanCmdError::new(path, format!("{at}{field}: {message}"))
        }
    })
}

/// [`typed`], refusing every field `T` does not know as the API server
/// refuses fields its schema does not know (kubectl's strict field
/// validation), instead of planning as if it were not there. `at_root` are
/// the top-level keys read elsewhere (e.g. `apiVersion`, `kind`).
fn strictly_typed<T: DeserializeOwned>(
    path: &Path,
    value: Value,
    at_root: &[&str],
) -> Result<T, PlanCmdError> {
    let mut unknown: Vec<String> = Vec::new();
    let mut note = |p: serde_ignored::Path| {
        let field = field_path(&p);
        if !at_root.contains(&field.as_str()) {
            unknown.push(field);
        }
    };
    let typed = typed(path, "", serde_ignored::Deserializer::new(value, &mut note))?;
    if unknown.is_empty() {
        Ok(typed)
    } else {
        Err(PlanCmdError::new(
            path,
            unknown
                .iter()
                .map(|f| format!("{f}: unknown field"))
                .collect::<Vec<_>>()
                .join("; "),
        ))
    }
}

/// `spec.replicaSpreadConstraints[0].mode`, as the other errors name fields.
fn field_path(p: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        P::Map { parent, key } => match field_path(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            field_path(parent)
        }
    }
}

/// Every object of `kind` in the file at `path`: from Lists (`items`), from
/// every document of a stream, or the single object.
pub fn load_objects<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<Vec<T>, PlanCmdError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (at, doc) in documents(path, &text)? {
        if !doc.is_object() {
            return Err(PlanCmdError::new(
                path,
                format!(
                    "{at}expected a Kubernetes object or List, found {}",
                    describe(&doc)
                ),
            ));
        }
        match doc.get("items") {
            Some(items) => {
                let list_kind = kind_of(&doc).unwrap_or("List");
                if list_kind != "List" && list_kind != format!("{kind}List") {
                    return Err(PlanCmdError::new(
                        path,
                        format!("{at}kind: expected {kind}, {kind}List or List, found {list_kind}"),
                    ));
                }
                let Some(items) = items.as_array() else {
                    return Err(PlanCmdError::new(
                        path,
                        format!("{at}items: expected a list"),
                    ));
                };
                for (i, item) in items.iter().enumerate() {
                    let item_at = format!("{at}items[{i}]");
                    check_kind(path, &format!("{item_at}."), item, kind, true)?;
                    out.push(typed(path, &format!("{item_at}."), item.clone())?);
                }
            }
            None => {
                check_kind(path, &at, &doc, kind, false)?;
                out.push(typed(path, &at, doc)?);
            }
        }
    }
    Ok(out)
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Objects in a List may leave `kind` out (the List's kind says it); a
/// standalone object must say it.
fn check_kind(
    path: &Path,
    at: &str,
    value: &Value,
    kind: &str,
    may_omit: bool,
) -> Result<(), PlanCmdError> {
    match kind_of(value) {
        Some(k) if k == kind => Ok(()),
        None if may_omit => Ok(()),
        Some(other) => Err(PlanCmdError::new(
            path,
            format!("{at}kind: expected {kind}, found {other}"),
        )),
        None => Err(PlanCmdError::new(
            path,
            format!("{at}kind: required (expected {kind})"),
        )),
    }
}

/// The one ValkeyCluster in the file at `path`.
pub fn load_cluster(path: &Path) -> Result<ValkeyCluster, PlanCmdError> {
    let text = read(path)?;
    let mut docs = documents(path, &text)?;
    let doc = match docs.len() {
        0 => return Err(PlanCmdError::new(path, format!("no {KIND} in the file"))),
        1 => docs.remove(0).1,
        n => {
            return Err(PlanCmdError::new(
                path,
                format!("expected one {KIND}, found {n} documents"),
            ));
        }
    };
    if !doc.is_object() {
        return Err(PlanCmdError::new(
            path,
            format!("expected a {KIND} object, found {}", describe(&doc)),
        ));
    }
    check_kind(path, "", &doc, KIND, false)?;
    let api_version = format!("{GROUP}/{VERSION}");
    match doc.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(PlanCmdError::new(
                path,
                format!("apiVersion: expected {api_version}, found {v}"),
            ));
        }
        None => {
            return Err(PlanCmdError::new(
                path,
                format!("apiVersion: required (expected {api_version})"),
            ));
        }
    }
    // The CRD requires spec; a null spec would otherwise read as every default.
    match doc.get("spec") {
        None => {
            return Err(PlanCmdError::new(
                path,
                "spec: required (write spec: {} for every default)",
            ));
        }
        Some(Value::Null) => {
            return Err(PlanCmdError::new(
                path,
                "spec: must be an object, got null (write spec: {} for every default)",
            ));
        }
        Some(_) => {}
    }
    strictly_typed(path, doc, &["apiVersion", "kind"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(text: &str) -> tempfile_lite::TempFile {
        tempfile_lite::TempFile::new(text)
    }

    /// A tiny self-cleaning temp file, to keep dev-dependencies small.
    mod tempfile_lite {
        use super::*;
        use std::sync::atomic::{AtomicUsize, Ordering};

        static NEXT: AtomicUsize = AtomicUsize::new(0);

        pub struct TempFile(pub PathBuf);

        impl TempFile {
            pub fn new(text: &str) -> Self {
                let n = NEXT.fetch_add(1, Ordering::SeqCst);
                let path =
                    std::env::temp_dir().join(format!("plan-cmd-{}-{n}.yaml", std::process::id()));
                let mut f = std::fs::File::create(&path).unwrap();
                f.write_all(text.as_bytes()).unwrap();
                Self(path)
            }
        }

        impl Drop for TempFile {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn nodes_load_from_a_list_a_stream_and_a_single_object() {
        let list = file(
            "apiVersion: v1\nkind: List\nitems:\n- {kind: Node, metadata: {name: a}}\n- {kind: Node, metadata: {name: b}}\n",
        );
        let stream =
            file("kind: Node\nmetadata: {name: a}\n---\n---\nkind: Node\nmetadata: {name: b}\n");
        let single = file("kind: Node\nmetadata: {name: a}\n");
        let typed_list = file("kind: NodeList\nitems:\n- metadata: {name: a}\n");
        for (f, n) in [(&list, 2), (&stream, 2), (&single, 1), (&typed_list, 1)] {
            let nodes: Vec<Node> = load_objects(&f.0, "Node").unwrap();
            assert_eq!(nodes.len(), n);
        }
    }

    #[test]
    fn a_wrong_kind_names_the_item() {
        let f = file(
            "kind: List\nitems:\n- {kind: Node, metadata: {name: a}}\n- {kind: Pod, metadata: {name: b}}\n",
        );
        let err = load_objects::<Node>(&f.0, "Node").unwrap_err();
        assert_eq!(err.message, "items[1].kind: expected Node, found Pod");
    }

    #[test]
    fn a_type_error_names_the_field_path() {
        let f = file(
            "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b, labels: [x]}\n",
        );
        let err = load_objects::<Node>(&f.0, "Node").unwrap_err();
        assert!(
            err.message.starts_with("document 2: metadata.labels: "),
            "{err}"
        );
    }

    #[test]
    fn the_cluster_must_be_a_valkeycluster_of_this_api_version() {
        let wrong_kind = file("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n");
        let err = load_cluster(&wrong_kind.0).unwrap_err();
        assert_eq!(err.message, "kind: expected ValkeyCluster, found Pod");
        let wrong_version =
            file("apiVersion: valkey.rs/v1\nkind: ValkeyCluster\nmetadata: {name: a}\nspec: {}\n");
        let err = load_cluster(&wrong_version.0).unwrap_err();
        assert_eq!(
            err.message,
            "apiVersion: expected valkey.rs/v1alpha1, found valkey.rs/v1"
        );
    }

    #[test]
    fn a_cluster_field_of_the_wrong_type_is_named() {
        let f = file(
            "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyCluster\nmetadata: {name: a}\nspec: {shards: many}\n",
        );
        let err = load_cluster(&f.0).unwrap_err();
        assert!(err.message.starts_with("spec.shards: "), "{err}");
    }

    #[test]
    fn a_cluster_as_kubectl_get_prints_it_has_no_unknown_field() {
        let f = file(
            "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: demo\n  \
             namespace: default\n  uid: 0b0c\n  generation: 2\n  resourceVersion: '42'\n  \
             creationTimestamp: '2025-01-01T00:00:00Z'\n  managedFields:\n  - manager: kubectl\n    \
             operation: Apply\n    fieldsType: FieldsV1\n    fieldsV1: {f:spec: {}}\n\
             spec:\n  shards: 1\n  replicas: 0\n  primaryBalancing: {mode: 'Off'}\n\
             status:\n  observedGeneration: 2\n  readyShards: 1\n  conditions:\n  - type: Ready\n    \
             status: 'True'\n    reason: Ready\n    message: ok\n    \
             lastTransitionTime: '2025-01-01T00:00:00Z'\n  members:\n  - {shard: 0, member: 0, \
             pod: demo-0-0-0, ready: true, role: primary}\n",
        );
        let cluster = load_cluster(&f.0).unwrap();
        assert_eq!(cluster.spec.shards, 1);
    }

    #[test]
    fn time_limits_read_as_a_person_writes_them() {
        for (text, limit) in [
            ("1s", Some(Duration::from_secs(1))),
            ("500ms", Some(Duration::from_millis(500))),
            ("2m", Some(Duration::from_secs(120))),
            ("0.25", Some(Duration::from_millis(250))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("none", None),
            ("None", None),
        ] {
            assert_eq!(parse_time_limit(text), Ok(TimeLimit(limit)), "{text}");
        }
        for bad in [
            "", "s", "soon", "-1s", "0", "0ms", "NaN", "inf", "1h", "1e400",
        ] {
            assert!(parse_time_limit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_stream_of_more_than_1024_documents_loads() {
        // serde-saphyr's default budget stops at 1 024 documents.
        let stream: String = (0..1500)
            .map(|i| format!("---\nkind: Node\nmetadata: {{name: n{i}}}\n"))
            .collect();
        let f = file(&stream);
        assert_eq!(load_objects::<Node>(&f.0, "Node").unwrap().len(), 1500);
    }

    #[test]
    fn many_aliases_of_one_anchor_load_and_expand() {
        let mut list = String::from(
            "kind: List\nitems:\n- kind: Node\n  metadata: {name: n0, labels: &l {zone: a}}\n",
        );
        for i in 1..2000 {
            list.push_str(&format!(
                "- kind: Node\n  metadata: {{name: n{i}, labels: *l}}\n"
            ));
        }
        let nodes: Vec<Node> = load_objects(&file(&list).0, "Node").unwrap();
        assert_eq!(nodes.len(), 2000);
        let zone = |n: &Node| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("zone"))
                .cloned()
        };
        assert!(nodes.iter().all(|n| zone(n).as_deref() == Some("a")));
    }

    #[test]
    fn an_alias_bomb_is_refused_in_one_line() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, level) in "abcdefgh".chars().zip("bcdefghi".chars()) {
            let aliases = vec![format!("*{prev}"); 10].join(", ");
            bomb.push_str(&format!("{level}: &{level} [{aliases}]\n"));
        }
        let err = load_objects::<Node>(&file(&bomb).0, "Node").unwrap_err();
        assert!(
            err.message
                .starts_with("invalid YAML: more than 1000000 nodes once aliases"),
            "{err}"
        );
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }

    #[test]
    fn aliases_may_expand_a_file_eightfold_past_a_million_nodes() {
        let small = yaml_options(1000).budget.unwrap();
        assert_eq!(small.max_nodes, 1_000_000);
        assert!(!small.enforce_alias_anchor_ratio);
        let big = yaml_options(10_000_000).budget.unwrap();
        assert_eq!(big.max_nodes, 80_000_000);
        assert!(big.max_events > 2 * big.max_nodes);
    }

    #[test]
    fn invalid_yaml_is_reported_not_panicked_on() {
        let f = file("kind: Node\nmetadata: {name: [\n");
        let err = load_objects::<Node>(&f.0, "Node").unwrap_err();
        assert!(err.message.starts_with("invalid YAML: "), "{err}");
    }
}
