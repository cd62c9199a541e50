//! Server-side apply of the owned objects, with one field manager
//! (`valkey-operator`, forced), and only when something differs.
//!
//! Before applying, the desired object is compared with the live one: when
//! every field the operator sets already has that value ([`contains`]), no
//! request is sent. A steady cluster therefore costs zero API writes per
//! resync (counted in `valkey_operator_api_writes_total`). Fields the API
//! server defaults or others own do not matter: only the operator's fields are
//! compared.

use crate::error::Error;
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
/// element by element with equal lengths. Strings are equal when they are
/// the same, or, where the schema says quantity (the values of `limits`,
/// `requests` and `capacity` maps, `sizeLimit`), the same Kubernetes quantity
/// in another spelling (`1000m` and `1`). Elsewhere `"01"` and `"1"`, or
/// `"0.5"` and `"500m"`, are different values (a label, an env value).
pub fn contains(live: &Value, desired: &Value) -> bool {
    contains_at(live, desired, Field::Plain)
}

/// What the schema says a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Plain,
    /// A map whose values are quantities (`limits`, `requests`, `capacity`).
    QuantityMap,
    /// A quantity.
    Quantity,
}

impl Field {
    /// The kind of the value under key `key` of an object of this kind.
    fn child(self, key: &str) -> Field {
        match (self, key) {
            (Field::QuantityMap, _) => Field::Quantity,
            (_, "limits" | "requests" | "capacity") => Field::QuantityMap,
            (_, "sizeLimit") => Field::Quantity,
            _ => Field::Plain,
        }
    }
}

fn contains_at(live: &Value, desired: &Value, field: Field) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => contains_at(lv, dv, field.child(k)),
            None => is_empty(dv),
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len()
                && l.iter()
                    .zip(d)
                    .all(|(lv, dv)| contains_at(lv, dv, Field::Plain))
        }
        (Value::Null, d) => is_empty(d),
        (Value::String(l), Value::String(d)) => {
            l == d || (field == Field::Quantity && same_quantity(l, d))
        }
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
    } else {
        // Not among the cluster's objects: a same-named object the cluster
        // does not own must be refused, not taken over by the forced apply
        // below (the garbage collector would delete it with the cluster).
        // One GET, only when the object is missing from the view.
        let existing = api.get_opt(&name).await.map_err(|source| Error::Read {
            kind,
            name: name.clone(),
            source,
        })?;
        if let Some(existing) = existing
            && !same_owner(existing.meta(), desired.meta())
        {
            return Err(Error::NotOwned { kind, name });
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

/// Whether `existing` is owned by the owner `desired` names (its first
/// owner reference's uid).
pub fn same_owner(
    existing: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    desired: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    let Some(owner) = desired.owner_references.as_ref().and_then(|o| o.first()) else {
        return true;
    };
    existing
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner.uid)
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
        "NetworkPolicy" => "NetworkPolicy",
        "Secret" => "Secret",
        "Pod" => "Pod",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "ValkeyCluster" => "ValkeyCluster",
        "ValkeyReplication" => "ValkeyReplication",
        _ => "Object",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_object_of_another_owner_is_not_ours() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
        let owned_by = |uid: &str| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                uid: uid.into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(super::same_owner(&owned_by("a"), &owned_by("a")));
        assert!(!super::same_owner(&owned_by("b"), &owned_by("a")));
        assert!(!super::same_owner(&ObjectMeta::default(), &owned_by("a")));
    }

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
        let limits = |cpu: &str, memory: &str| json!({"resources": {"limits": {"cpu": cpu, "memory": memory}}});
        assert!(contains(&limits("1", "1Gi"), &limits("1000m", "1024Mi")));
        assert!(!contains(&limits("1", "1Gi"), &limits("1", "1G")));
        let claim = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
        assert!(contains(&claim("1Gi"), &claim("1024Mi")));
        let empty_dir = |size: &str| json!({"emptyDir": {"sizeLimit": size}});
        assert!(contains(&empty_dir("0.5Gi"), &empty_dir("512Mi")));
        assert!(!contains(&json!({"name": "a1"}), &json!({"name": "a01"})));
    }

    #[test]
    fn strings_that_are_not_quantities_by_schema_compare_as_written() {
        // A label, an annotation and an env value that only look numeric.
        for (live, desired) in [
            ("1", "01"),
            ("7.20", "7.2"),
            ("500m", "0.5"),
            ("1k", "1000"),
        ] {
            let labels = |v: &str| json!({"metadata": {"labels": {"tier": v}}});
            assert!(
                !contains(&labels(live), &labels(desired)),
                "{live} {desired}"
            );
            let annotations = |v: &str| json!({"metadata": {"annotations": {"a": v}}});
            assert!(!contains(&annotations(live), &annotations(desired)));
            let env = |v: &str| json!({"env": [{"name": "X", "value": v}]});
            assert!(!contains(&env(live), &env(desired)));
        }
    }
}
