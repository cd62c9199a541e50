// Over 600 lines: 498 lines of code; the rest are its unit tests, kept beside it.
//! The Markdown reference of a CustomResourceDefinition: every field of the
//! served version's `openAPIV3Schema` with its path, type, default, whether it
//! is required, its description and its rules. `valkey-operator crd-reference`
//! prints it; `docs/reference/valkeycluster.md` and
//! `docs/reference/valkeybackup.md` are its outputs, committed and checked for
//! drift by `make crd-check`.
//!
//! The generator reads the CRD as JSON and never fails: a schema it does not
//! expect (no type, nested arrays, maps, preserved unknown fields) is rendered
//! with what it has. Output order is the order of the schema's `properties`
//! (sorted by name), so the same CRD always gives the same text.

use serde_json::{Map, Value};
use std::fmt::Write;

/// The reference of `crd` (a CustomResourceDefinition as JSON) in Markdown.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn render(crd: &Value) -> String {
    let mut out = String::new();
    let spec = crd.get("spec").unwrap_or(&Value::Null);
    let names = spec.get("names").unwrap_or(&Value::Null);
    let kind = str_of(names.get("kind")).unwrap_or("(unnamed kind)");
    let group = str_of(spec.get("group")).unwrap_or("");
    let version = pick_version(spec);
    let version_name = version
        .and_then(|v| str_of(v.get("name")))
        .unwrap_or("(no version)");

    let _ = writeln!(out, "# {kind} reference\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the CRD by `valkey-operator crd-reference`; run `make crd` after changing the API. Do not edit. -->\n"
    );
    let mut about = format!("Group `{group}`, version `{version_name}`, kind `{kind}`");
    if let Some(plural) = str_of(names.get("plural")) {
        let _ = write!(about, ", plural `{plural}`");
    }
    let short: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(code).collect())
        .unwrap_or_default();
    if !short.is_empty() {
        let _ = write!(about, ", short names {}", short.join(", "));
    }
    if let Some(scope) = str_of(spec.get("scope")) {
        let _ = write!(about, ", scope `{scope}`");
    }
    let _ = writeln!(out, "{about}.\n");
    let served: Vec<String> = spec
        .get("versions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
                .filter_map(|v| str_of(v.get("name")))
                .map(code)
                .collect()
        })
        .unwrap_or_default();
    if !served.is_empty() {
        let _ = writeln!(
            out,
            "Served versions: {}. This page describes `{version_name}`.\n",
            served.join(", ")
        );
    }

    let Some(schema) = version.and_then(|v| v.get("schema")?.get("openAPIV3Schema")) else {
        let _ = writeln!(out, "The CRD has no `openAPIV3Schema` for this version.");
        return out;
    };
    if let Some(d) = str_of(schema.get("description")) {
        let _ = writeln!(out, "{}\n", d.trim());
    }
    let _ = writeln!(
        out,
        "Each field shows its path (`[]` is any item of a list, `<key>` any key of a map), its type, \
         whether it is required, its default, its description and the rules the API server checks \
         (`x-kubernetes-validations` are CEL rules; their messages are shown).\n"
    );

    let top = properties(schema);
    let sections: Vec<(&str, &str)> = vec![("spec", "Spec"), ("status", "Status")];
    let others: Vec<&String> = top
        .map(|p| {
            p.keys()
                .filter(|k| !sections.iter().any(|(name, _)| name == k))
                .collect()
        })
        .unwrap_or_default();

    // Contents.
    let _ = writeln!(out, "## Contents\n");
    for (name, title) in &sections {
        let Some(field) = top.and_then(|p| p.get(*name)) else {
            continue;
        };
        let children: Vec<String> = properties(field)
            .map(|p| {
                p.keys()
                    .map(|k| {
                        let path = format!("{name}.{k}");
                        format!("[`{path}`](#{})", slug(&format!("`{path}`")))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if children.is_empty() {
            let _ = writeln!(out, "- [{title}](#{})", slug(title));
        } else {
            let _ = writeln!(
                out,
                "- [{title}](#{}): {}",
                slug(title),
                children.join(", ")
            );
        }
    }
    if !others.is_empty() {
        let _ = writeln!(out, "- [Other fields](#other-fields)");
    }
    out.push('\n');

    let top_required = required(schema);
    for (name, title) in &sections {
        let Some(field) = top.and_then(|p| p.get(*name)) else {
            continue;
        };
        let _ = writeln!(out, "## {title}\n");
        if *name == "status" {
            let _ = writeln!(
                out,
                "Written by the operator (the status subresource); read it, never set it.\n"
            );
        }
        entry(
            &mut out,
            name,
            field,
            top_required.contains(&name.to_string()),
        );
        match properties(field) {
            Some(props) => {
                let req = required(field);
                for (k, v) in props {
                    let path = format!("{name}.{k}");
                    let _ = writeln!(out, "### `{path}`\n");
                    walk(&mut out, &path, v, req.contains(k));
                }
            }
            None => children(&mut out, name, field),
        }
    }
    if !others.is_empty() {
        let _ = writeln!(out, "## Other fields\n");
        for k in others {
            if let Some(v) = top.and_then(|p| p.get(k)) {
                walk(&mut out, k, v, top_required.contains(k));
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// The storage version, or else the first served one, or else the first.
fn pick_version(spec: &Value) -> Option<&Value> {
    let versions = spec.get("versions")?.as_array()?;
    let flag = |v: &&Value, key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
    versions
        .iter()
        .find(|v| flag(v, "storage") && flag(v, "served"))
        .or_else(|| versions.iter().find(|v| flag(v, "served")))
        .or_else(|| versions.first())
}

fn str_of(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema
        .get("properties")?
        .as_object()
        .filter(|m| !m.is_empty())
}

fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The schema of a map's values, when `additionalProperties` is a schema.
fn map_values(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|v| v.is_object())
}

/// One field and everything under it.
fn walk(out: &mut String, path: &str, schema: &Value, is_required: bool) {
    entry(out, path, schema, is_required);
    children(out, path, schema);
}

/// The fields under `schema` (its properties, its items', its map values').
fn children(out: &mut String, path: &str, schema: &Value) {
    if let Some(props) = properties(schema) {
        let req = required(schema);
        for (k, v) in props {
            walk(out, &format!("{path}.{k}"), v, req.contains(k));
        }
    }
    if let Some(items) = schema.get("items").filter(|v| v.is_object()) {
        children(out, &format!("{path}[]"), items);
    }
    if let Some(values) = map_values(schema) {
        children(out, &format!("{path}.<key>"), values);
    }
}

/// One field: its path, type, whether required, default, description, rules.
fn entry(out: &mut String, path: &str, schema: &Value, is_required: bool) {
    let mut head = format!(
        "- **`{path}`** · {} · {}",
        type_name(schema),
        if is_required { "required" } else { "optional" }
    );
    if let Some(d) = schema.get("default") {
        let _ = write!(head, " · default {}", code(&value_text(d)));
    }
    let _ = writeln!(out, "{head}\n");
    if let Some(d) = str_of(schema.get("description")) {
        let d = d.trim();
        if !d.is_empty() {
            indented(out, d);
        }
    }
    let rules = rules(schema);
    if !rules.is_empty() {
        let mut text = String::from("Rules:");
        for r in rules {
            let _ = write!(text, "\n- {r}");
        }
        indented(out, &text);
    }
}

/// `text` indented under a list item, followed by a blank line.
fn indented(out: &mut String, text: &str) {
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {line}");
        }
    }
    out.push('\n');
}

/// A readable type: `string`, `array of object`, `map of string to integer`,
/// `int-or-string`, `any (kept as written)`.
fn type_name(schema: &Value) -> String {
    type_name_depth(schema, 0)
}

fn type_name_depth(schema: &Value, depth: usize) -> String {
    if depth > 16 {
        return "...".to_string();
    }
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if flag("x-kubernetes-int-or-string") {
        return "int-or-string".to_string();
    }
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    match str_of(schema.get("type")) {
        Some("array") => match schema.get("items").filter(|v| v.is_object()) {
            Some(items) => format!("array of {}", type_name_depth(items, depth + 1)),
            None => "array".to_string(),
        },
        Some("object") => {
            if let Some(values) = map_values(schema) {
                format!("map of string to {}", type_name_depth(values, depth + 1))
            } else if schema.get("additionalProperties") == Some(&Value::Bool(true)) {
                "map of string to any".to_string()
            } else if preserve && properties(schema).is_none() {
                "object (any fields, kept as written)".to_string()
            } else {
                "object".to_string()
            }
        }
        Some(t) => t.to_string(),
        None => {
            for key in ["anyOf", "oneOf", "allOf"] {
                if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                    let names: Vec<String> = branches
                        .iter()
                        .map(|b| type_name_depth(b, depth + 1))
                        .collect();
                    let joiner = if key == "allOf" { " and " } else { " or " };
                    return names.join(joiner);
                }
            }
            if preserve {
                "any (kept as written)".to_string()
            } else if properties(schema).is_some() {
                "object".to_string()
            } else {
                "any".to_string()
            }
        }
    }
}

/// The rules of one schema, and of the items or map values it holds.
fn rules(schema: &Value) -> Vec<String> {
    let mut all = own_rules(schema);
    let mut inner = schema;
    let mut prefix = String::new();
    for _ in 0..16 {
        let (next, what) = if let Some(items) = inner.get("items").filter(|v| v.is_object()) {
            (items, "each item")
        } else if let Some(values) = map_values(inner) {
            (values, "each value")
        } else {
            break;
        };
        prefix = if prefix.is_empty() {
            what.to_string()
        } else {
            format!("{prefix}, {what}")
        };
        all.extend(
            own_rules(next)
                .into_iter()
                .map(|r| format!("{prefix}: {r}")),
        );
        inner = next;
    }
    all
}

/// The rules a schema states about its own value.
fn own_rules(schema: &Value) -> Vec<String> {
    let mut r = Vec::new();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let v: Vec<String> = values.iter().map(|v| code(&value_text(v))).collect();
        r.push(format!("one of {}", v.join(", ")));
    }
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if let Some(min) = schema.get("minimum") {
        let op = if flag("exclusiveMinimum") { ">" } else { ">=" };
        r.push(format!("{op} {}", number_text(min)));
    }
    if let Some(max) = schema.get("maximum") {
        let op = if flag("exclusiveMaximum") { "<" } else { "<=" };
        r.push(format!("{op} {}", number_text(max)));
    }
    if let Some(m) = schema.get("multipleOf") {
        r.push(format!("a multiple of {}", number_text(m)));
    }
    for (key, bound, what) in [
        ("minLength", "at least", "character"),
        ("maxLength", "at most", "character"),
        ("minItems", "at least", "item"),
        ("maxItems", "at most", "item"),
        ("minProperties", "at least", "key"),
        ("maxProperties", "at most", "key"),
    ] {
        if let Some(n) = schema.get(key) {
            let plural = if n.as_u64() == Some(1) { "" } else { "s" };
            r.push(format!("{bound} {} {what}{plural}", value_text(n)));
        }
    }
    if flag("uniqueItems") {
        r.push("items are unique".to_string());
    }
    if let Some(p) = str_of(schema.get("pattern")) {
        r.push(format!("matches {}", code(p)));
    }
    if let Some(f) = str_of(schema.get("format")) {
        r.push(format!("format {}", code(f)));
    }
    if let Some(t) = str_of(schema.get("x-kubernetes-list-type")) {
        let keys: Vec<String> = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(code).collect())
            .unwrap_or_default();
        if keys.is_empty() {
            r.push(format!("list type {}", code(t)));
        } else {
            r.push(format!(
                "list type {} keyed by {}",
                code(t),
                keys.join(", ")
            ));
        }
    }
    if let Some(t) = str_of(schema.get("x-kubernetes-map-type")) {
        r.push(format!("map type {}", code(t)));
    }
    if let Some(validations) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for v in validations {
            let message = str_of(v.get("message"))
                .map(one_line)
                .or_else(|| {
                    str_of(v.get("messageExpression"))
                        .map(|m| format!("(message computed by {})", code(&one_line(m))))
                })
                .or_else(|| str_of(v.get("rule")).map(|m| format!("CEL {}", code(&one_line(m)))));
            if let Some(m) = message {
                r.push(m);
            }
        }
    }
    r
}

/// A JSON value as text: strings bare, anything else as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A bound as the schema means it: `1`, not `1.0` (schemas write integer
/// bounds as floats).
fn number_text(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => value_text(v),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` as inline code, with enough backticks around it.
fn code(s: &str) -> String {
    let s = one_line(s);
    if s.is_empty() {
        return "`\"\"`".to_string();
    }
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    if longest == 0 {
        return format!("`{s}`");
    }
    let fence = "`".repeat(longest + 1);
    format!("{fence} {s} {fence}")
}

/// The anchor GitHub gives a heading: lower case, punctuation dropped
/// (except `-` and `_`), spaces as `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn small_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "spec": {
                "group": "example.rs",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v0", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                        "description": "A widget.",
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "x-kubernetes-validations": [
                                    {"rule": "self.size <= 10 || !has(self.mode)", "message": "big widgets take no mode"}
                                ],
                                "properties": {
                                    "size": {"type": "integer", "format": "int32", "minimum": 1.0, "maximum": 10,
                                             "description": "How big.\n\nIn `units`."},
                                    "mode": {"type": "string", "enum": ["On", "Off"], "default": "On"},
                                    "name": {"type": "string", "minLength": 1, "maxLength": 63,
                                             "pattern": "^[a-z]+$"},
                                    "spread": {"type": "array", "maxItems": 3, "items": {
                                        "type": "object", "required": ["key"],
                                        "properties": {
                                            "key": {"type": "string"},
                                            "maxReplicas": {"type": "integer", "default": 1, "minimum": 0}
                                        }
                                    }},
                                    "grid": {"type": "array", "items": {"type": "array",
                                        "items": {"type": "string", "minLength": 2}}},
                                    "labels": {"type": "object",
                                        "additionalProperties": {"type": "string", "maxLength": 5}},
                                    "ports": {"type": "object", "additionalProperties": {
                                        "type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true}}}},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                    "anything": {"x-kubernetes-preserve-unknown-fields": true},
                                    "untyped": {},
                                    "cel": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'x'"}]}
                                }
                            },
                            "status": {"type": "object", "properties": {
                                "ready": {"type": "boolean", "nullable": true, "description": "Ready or not."}
                            }}
                        }
                    }}}
                ]
            }
        })
    }

    #[test]
    fn crd_reference_lists_every_field_with_type_default_required_and_rules() {
        let md = render(&small_crd());
        assert!(md.starts_with("# Widget reference\n"), "{md}");
        assert!(md.contains("version `v1`"), "{md}");
        assert!(md.contains("short names `wd`"), "{md}");
        assert!(
            md.contains("- **`spec.size`** · integer · required\n"),
            "{md}"
        );
        assert!(md.contains("  How big.\n\n  In `units`.\n"), "{md}");
        assert!(md.contains("- >= 1\n  - <= 10\n  - format `int32`"), "{md}");
        assert!(
            md.contains("- **`spec.mode`** · string · optional · default `On`"),
            "{md}"
        );
        assert!(md.contains("one of `On`, `Off`"), "{md}");
        assert!(md.contains("at least 1 character\n"), "{md}");
        assert!(md.contains("at most 63 characters"), "{md}");
        assert!(md.contains("matches `^[a-z]+$`"), "{md}");
        assert!(md.contains("big widgets take no mode"), "{md}");
        assert!(md.contains("CEL `self != 'x'`"), "{md}");
        assert!(
            md.contains("- **`spec.spread`** · array of object · optional"),
            "{md}"
        );
        assert!(md.contains("at most 3 items"), "{md}");
        assert!(
            md.contains("- **`spec.spread[].key`** · string · required"),
            "{md}"
        );
        assert!(
            md.contains("- **`spec.spread[].maxReplicas`** · integer · optional · default `1`"),
            "{md}"
        );
    }

    #[test]
    fn crd_reference_renders_odd_schemas() {
        let md = render(&small_crd());
        assert!(
            md.contains("`spec.grid`** · array of array of string"),
            "{md}"
        );
        assert!(
            md.contains("each item, each item: at least 2 characters"),
            "{md}"
        );
        assert!(
            md.contains("`spec.labels`** · map of string to string"),
            "{md}"
        );
        assert!(md.contains("each value: at most 5 characters"), "{md}");
        assert!(
            md.contains("`spec.ports.<key>.port`** · int-or-string"),
            "{md}"
        );
        assert!(
            md.contains("`spec.extra`** · object (any fields, kept as written)"),
            "{md}"
        );
        assert!(
            md.contains("`spec.anything`** · any (kept as written)"),
            "{md}"
        );
        assert!(md.contains("`spec.untyped`** · any · optional"), "{md}");
    }

    #[test]
    fn crd_reference_puts_status_in_its_own_section_with_contents() {
        let md = render(&small_crd());
        let spec = md.find("\n## Spec\n").expect("spec section");
        let status = md.find("\n## Status\n").expect("status section");
        assert!(spec < status);
        assert!(md[status..].contains("- **`status.ready`** · boolean · optional"));
        assert!(!md[status..].contains("spec.size"));
        assert!(md.contains("### `spec.size`\n"));
        assert!(md.contains("[`spec.size`](#specsize)"), "{md}");
        assert!(md.contains("[Status](#status)"), "{md}");
    }

    #[test]
    fn crd_reference_is_deterministic_and_follows_property_order() {
        let a = render(&small_crd());
        assert_eq!(a, render(&small_crd()));
        let anything = a.find("### `spec.anything`").unwrap();
        let size = a.find("### `spec.size`").unwrap();
        assert!(anything < size);
    }

    #[test]
    fn crd_reference_never_panics_on_missing_or_malformed_parts() {
        for crd in [
            json!(null),
            json!({}),
            json!({"spec": {"versions": []}}),
            json!({"spec": {"versions": [{"name": "v1", "served": true}]}}),
            json!({"spec": {"versions": [{"name": "v1", "served": true,
            "schema": {"openAPIV3Schema": {"properties": {
                "spec": {"type": "array", "items": true},
                "status": "not a schema",
                "other": {"type": "object", "additionalProperties": false,
                          "required": "spec", "enum": "x", "oneOf": [{"type": "string"}, {"type": "integer"}]}
            }}}}]}}),
        ] {
            let md = render(&crd);
            assert!(md.contains("reference"), "{md}");
        }
    }

    #[test]
    fn crd_reference_of_the_real_crds_names_every_top_level_field() {
        for crd in [
            serde_json::to_value(api::crd()).unwrap(),
            serde_json::to_value(api::backup_crd()).unwrap(),
        ] {
            let md = render(&crd);
            let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            for section in ["spec", "status"] {
                for key in schema["properties"][section]["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                {
                    assert!(md.contains(&format!("### `{section}.{key}`\n")), "{key}");
                }
            }
        }
    }

    #[test]
    fn crd_reference_slugs_like_github() {
        assert_eq!(
            slug("`spec.replicaSpreadConstraints`"),
            "specreplicaspreadconstraints"
        );
        assert_eq!(slug("Other fields"), "other-fields");
    }
}
