//! How the CRD schema carries the Kubernetes types it embeds (containers,
//! volumes, tolerations, affinity, security contexts, resources).
//!
//! Their schemas come with Kubernetes' own description of every field, and
//! those descriptions were most of the CRD: 518 KB of YAML, past the 256 KiB
//! annotation of a client-side `kubectl apply`, and paid again by every client
//! that discovers the API. The fields keep their whole structure (types,
//! formats, enums, required lists) and this project's description of each
//! embedding field; the nested descriptions, which say what the Kubernetes
//! documentation of the same type says, are left out and the embedding
//! field says where to read them.

use schemars::Schema;

/// What an embedding field's description ends with; the CRD test knows the
/// fields below it keep no description of their own.
pub const UPSTREAM_DOCS: &str =
    "Its fields are the Kubernetes type's own: `kubectl explain pod.spec` documents them.";

/// A `#[schemars(transform)]` for a field whose type is a Kubernetes type:
/// every description below the field is dropped, and its own says where the
/// rest is documented.
pub fn upstream_docs(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        for (key, value) in obj.iter_mut() {
            if key != "description" {
                strip_descriptions(value);
            }
        }
        let own = obj
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or_default()
            .trim()
            .to_string();
        let text = if own.is_empty() {
            UPSTREAM_DOCS.to_string()
        } else {
            format!("{own} {UPSTREAM_DOCS}")
        };
        obj.insert("description".into(), text.into());
    }
}

/// Drops the descriptions below an embedded type, and the integer formats
/// (`int32`, `int64`: documentation only; the API server validates no
/// integer format, and `kubectl explain pod.spec` names them).
fn strip_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("description");
            if map
                .get("format")
                .is_some_and(|f| matches!(f.as_str(), Some("int32" | "int64")))
            {
                map.remove("format");
            }
            for v in map.values_mut() {
                strip_descriptions(v);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}
