//! The `ValkeyCluster` API (`valkey.rs/v1alpha1`): CRD types, defaults, CEL and
//! Rust validation, label names, and the CRD generated from the types.
//!
//! `deploy/crd/valkeycluster.yaml` is the output of [`crd_yaml`]
//! (`valkey-operator crd`); a test fails when the committed copy drifts.

pub mod constants;
pub mod quantity;
pub mod v1alpha1;

pub use v1alpha1::{ValidatedCluster, ValkeyCluster, ValkeyClusterSpec, ValkeyClusterStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The CustomResourceDefinition of every served version.
pub fn crd() -> CustomResourceDefinition {
    v1alpha1::ValkeyCluster::crd()
}

/// [`crd`] as the YAML document `kubectl apply -f` takes.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource_and_short_name() {
        let crd = crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("valkeyclusters.valkey.rs")
        );
        assert_eq!(crd.spec.group, "valkey.rs");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["vkc".to_string()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Ready", "Shards", "Replicas", "Topology", "Age"]);
    }

    #[test]
    fn every_spec_field_has_a_description() {
        let json = serde_json::to_value(crd()).unwrap();
        let spec = &json["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let mut missing = Vec::new();
        undocumented(spec, "spec", &mut missing);
        assert!(
            missing.is_empty(),
            "fields without a description: {missing:?}"
        );
    }

    fn undocumented(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        if let Some(props) = schema["properties"].as_object() {
            for (name, prop) in props {
                let p = format!("{path}.{name}");
                if prop["description"].as_str().is_none_or(str::is_empty) {
                    missing.push(p.clone());
                }
                undocumented(prop, &p, missing);
            }
        }
        if schema["items"].is_object() {
            undocumented(&schema["items"], &format!("{path}[]"), missing);
        }
    }
}
