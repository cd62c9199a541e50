//! Server-side apply of the owned objects, with one field manager
//! (`valkey-operator`, forced), and only when something differs.
//!
//! Before applying, the desired object is compared with the live one: when
//! every field the operator sets already has that value ([`contains`]), no
//! request is sent. A steady cluster therefore costs zero API writes per
//! resync (counted in `valkey_operator_api_writes_total`). Fields the API
//! server defaults or others own do not matter: only the operator's fields are
//! compared.

use super::Error;
use crate::metrics::Metrics;
use api::constants::FIELD_MANAGER;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt::Debug;

/// Whether every field set in `desired` has the same value in `live`.
///
/// Objects compare key by key (keys absent from `desired` are ignored; a key
/// absent from `live` matches only an empty or null desired value), lists
/// element by element with equal lengths, and strings that are the same
/// Kubernetes quantity in another spelling (`1000m` and `1`) as equal.
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => contains(lv, dv),
            None => is_empty(dv),
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains(lv, dv))
        }
        (Value::Null, d) => is_empty(d),
        (Value::String(l), Value::String(d)) => l == d || same_quantity(l, d),
        (l, d) => l == d,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn same_quantity(a: &str, b: &str) -> bool {
    let starts_numeric = |s: &str| s.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !starts_numeric(a) || !starts_numeric(b) {
        return false;
    }
    match (api::quantity::cpu_millis(a), api::quantity::cpu_millis(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Applies `desired` unless `live` already contains it. Returns whether a
/// request was sent.
pub async fn apply<K>(
    api: &Api<K>,
    live: Option<&K>,
    desired: &K,
    metrics: &Metrics,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
{
    let kind = K::kind(&());
    let kind: &'static str = kind_name(&kind);
    let name = desired.name_any();
    let want = serde_json::to_value(desired).map_err(|source| Error::Serialize {
        kind,
        name: name.clone(),
        source,
    })?;
    if let Some(live) = live {
        let have = serde_json::to_value(live).map_err(|source| Error::Serialize {
            kind,
            name: name.clone(),
            source,
        })?;
        if contains(&have, &strip_type_meta(want.clone())) {
            return Ok(false);
        }
    }
    metrics.api_write(kind, "apply");
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&want),
    )
    .await
    .map_err(|source| Error::Apply { kind, name, source })?;
    Ok(true)
}

/// apiVersion and kind are not always present on objects read back from a list.
fn strip_type_meta(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

/// A `'static` name for the kinds the operator writes (metric labels and
/// error messages).
pub fn kind_name(kind: &str) -> &'static str {
    match kind {
        "StatefulSet" => "StatefulSet",
        "Service" => "Service",
        "ConfigMap" => "ConfigMap",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        "Secret" => "Secret",
        "Pod" => "Pod",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "ValkeyCluster" => "ValkeyCluster",
        _ => "Object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_defaulted_by_the_server_do_not_count_as_a_difference() {
        let live = json!({"spec": {"replicas": 1, "revisionHistoryLimit": 10, "ports": [{"port": 6379, "protocol": "TCP"}]}});
        let desired = json!({"spec": {"replicas": 1, "ports": [{"port": 6379}]}});
        assert!(contains(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_a_difference() {
        let live = json!({"spec": {"replicas": 1}});
        assert!(!contains(&live, &json!({"spec": {"replicas": 2}})));
        assert!(!contains(&live, &json!({"spec": {"image": "x"}})));
    }

    #[test]
    fn lists_must_have_the_same_length() {
        let live = json!({"args": ["a", "b"]});
        assert!(!contains(&live, &json!({"args": ["a"]})));
        assert!(!contains(&live, &json!({"args": ["a", "b", "c"]})));
        assert!(contains(&live, &json!({"args": ["a", "b"]})));
    }

    #[test]
    fn empty_desired_values_match_absent_ones() {
        let live = json!({"metadata": {"name": "x"}});
        assert!(contains(
            &live,
            &json!({"metadata": {"name": "x", "annotations": {}}})
        ));
        assert!(contains(
            &live,
            &json!({"metadata": {"labels": {}}, "spec": []})
        ));
    }

    #[test]
    fn quantities_in_another_spelling_are_equal() {
        assert!(contains(&json!({"cpu": "1"}), &json!({"cpu": "1000m"})));
        assert!(contains(
            &json!({"memory": "1Gi"}),
            &json!({"memory": "1024Mi"})
        ));
        assert!(!contains(
            &json!({"memory": "1Gi"}),
            &json!({"memory": "1G"})
        ));
        assert!(!contains(&json!({"name": "a1"}), &json!({"name": "a01"})));
    }
}
