//! The `ValkeyCluster` API (`valkey.rs/v1alpha1`): CRD types, defaults, CEL and
//! Rust validation, label names, and the CRD generated from the types.
//!
//! `deploy/crd/valkeycluster.yaml` is the output of [`crd_yaml`]
//! (`valkey-operator crd`); a test fails when the committed copy drifts.

pub mod constants;
pub mod quantity;
pub mod v1alpha1;

pub use v1alpha1::{
    SetKind, ValidatedCluster, ValkeyBackup, ValkeyCluster, ValkeyClusterSpec, ValkeyClusterStatus,
    ValkeyReplication,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;

/// The CustomResourceDefinition of every served version.
pub fn crd() -> CustomResourceDefinition {
    v1alpha1::ValkeyCluster::crd()
}

/// Why the CRD could not be written as YAML.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CrdYamlError(#[from] serde_saphyr::SerializeError);

/// The `ValkeyBackup` CustomResourceDefinition.
pub fn backup_crd() -> CustomResourceDefinition {
    v1alpha1::ValkeyBackup::crd()
}

/// The `ValkeyBackupSchedule` CustomResourceDefinition.
pub fn schedule_crd() -> CustomResourceDefinition {
    v1alpha1::ValkeyBackupSchedule::crd()
}

/// The `ValkeyReplication` CustomResourceDefinition.
pub fn replication_crd() -> CustomResourceDefinition {
    v1alpha1::ValkeyReplication::crd()
}

/// [`replication_crd`] as YAML (`valkey-operator crd --kind replication`).
pub fn replication_crd_yaml() -> Result<String, CrdYamlError> {
    Ok(serde_saphyr::to_string(&replication_crd())?)
}

/// [`schedule_crd`] as YAML (`valkey-operator crd --kind schedule`).
pub fn schedule_crd_yaml() -> Result<String, CrdYamlError> {
    Ok(serde_saphyr::to_string(&schedule_crd())?)
}

/// [`backup_crd`] as YAML (`valkey-operator crd --kind backup`).
pub fn backup_crd_yaml() -> Result<String, CrdYamlError> {
    Ok(serde_saphyr::to_string(&backup_crd())?)
}

/// [`crd`] as the YAML document `kubectl apply -f` takes.
///
/// kubectl and Helm read YAML 1.1, where a bare `Off`, `yes`, `n` or `~` is a
/// boolean or null, and `0x1F` or `1_000` a number: the enum value `Off` of
/// `primaryBalancing.mode` would reach the API server as `false`. serde-saphyr
/// (already in the tree through kube) quotes every string that a YAML 1.1 or
/// 1.2 reader would take for anything but a string, in any case; serde_yaml
/// quotes only the YAML 1.2 ones.
pub fn crd_yaml() -> Result<String, CrdYamlError> {
    Ok(serde_saphyr::to_string(&crd())?)
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

    /// What a YAML 1.1 reader (kubectl, Helm) takes for a bool, a null or a
    /// number when it is written plain. Written out here, from the YAML 1.1
    /// type repository, rather than taken from the emitter under test.
    fn yaml11_reads_as_non_string(s: &str) -> bool {
        let lower = s.to_ascii_lowercase();
        let bool_or_null = [
            "y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "",
        ];
        if bool_or_null.contains(&lower.as_str()) {
            return true;
        }
        let unsigned = lower.trim_start_matches(['+', '-']);
        if [".inf", ".nan"].contains(&unsigned) {
            return true;
        }
        let digits =
            |t: &str, radix: u32| !t.is_empty() && t.chars().all(|c| c == '_' || c.is_digit(radix));
        let float = |t: &str| {
            let (mantissa, exponent) = match t.split_once('e') {
                Some((m, e)) => (m, Some(e.trim_start_matches(['+', '-']))),
                None => (t, None),
            };
            let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            (digits(whole, 10) || (whole.is_empty() && digits(fraction, 10)))
                && (fraction.is_empty() || digits(fraction, 10))
                && exponent.is_none_or(|e| digits(e, 10))
        };
        let sexagesimal = unsigned.contains(':')
            && unsigned
                .split(':')
                .all(|part| digits(part.split('.').next().unwrap_or(""), 10));
        digits(unsigned, 10)
            || unsigned.strip_prefix("0x").is_some_and(|t| digits(t, 16))
            || unsigned.strip_prefix("0o").is_some_and(|t| digits(t, 8))
            || unsigned.strip_prefix("0b").is_some_and(|t| digits(t, 2))
            || float(unsigned)
            || sexagesimal
    }

    #[test]
    fn the_yaml_11_reading_is_written_out_right() {
        for s in [
            "Off", "ON", "y", "No", "TRUE", "~", "Null", "12", "-3", "1_000", "0x1F", "1.5", ".5",
            "1e3", "+.Inf", "1:30",
        ] {
            assert!(yaml11_reads_as_non_string(s), "{s}");
        }
        for s in [
            "Auto",
            "offline",
            "yesterday",
            "1Gi",
            "10.0.0.1",
            "v1",
            "a:b",
            "Preferred",
        ] {
            assert!(!yaml11_reads_as_non_string(s), "{s}");
        }
    }

    /// One YAML node with the style of each scalar, as the parser saw it.
    enum Node {
        Scalar(String, bool),
        Seq(Vec<Node>),
        Map(Vec<(String, bool, Node)>),
    }

    fn read_node<'a>(
        events: &mut impl Iterator<Item = serde_saphyr::granit_parser::Event<'a>>,
        first: serde_saphyr::granit_parser::Event<'a>,
    ) -> Node {
        use serde_saphyr::granit_parser::{Event, ScalarStyle};
        match first {
            Event::Scalar(text, style, _, tag) => Node::Scalar(
                text.to_string(),
                style == ScalarStyle::Plain && tag.is_none(),
            ),
            Event::SequenceStart(..) => {
                let mut items = Vec::new();
                loop {
                    match events.next().unwrap() {
                        Event::SequenceEnd => return Node::Seq(items),
                        e => items.push(read_node(events, e)),
                    }
                }
            }
            Event::MappingStart(..) => {
                let mut entries = Vec::new();
                loop {
                    match events.next().unwrap() {
                        Event::MappingEnd => return Node::Map(entries),
                        e => {
                            let Node::Scalar(key, plain) = read_node(events, e) else {
                                unreachable!("the CRD has only string keys")
                            };
                            let first = events.next().unwrap();
                            entries.push((key, plain, read_node(events, first)));
                        }
                    }
                }
            }
            other => unreachable!("unexpected {other:?}"),
        }
    }

    /// Every plain scalar of `node` that a YAML 1.1 reader would not read as
    /// the string `json` has there (keys included).
    fn misread(node: &Node, json: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        use serde_json::Value;
        match (node, json) {
            (Node::Scalar(text, true), Value::String(s)) => {
                assert_eq!(text, s, "{path}");
                if yaml11_reads_as_non_string(text) {
                    out.push(format!("{path}: {text}"));
                }
            }
            (
                Node::Scalar(..),
                Value::String(_) | Value::Bool(_) | Value::Null | Value::Number(_),
            ) => {}
            (Node::Seq(items), Value::Array(values)) => {
                assert_eq!(items.len(), values.len(), "{path}");
                for (i, (n, v)) in items.iter().zip(values).enumerate() {
                    misread(n, v, &format!("{path}[{i}]"), out);
                }
            }
            (Node::Map(entries), Value::Object(values)) => {
                assert_eq!(entries.len(), values.len(), "{path}");
                for (key, plain, n) in entries {
                    let p = format!("{path}.{key}");
                    if *plain && yaml11_reads_as_non_string(key) {
                        out.push(format!("{p} (the key)"));
                    }
                    misread(n, &values[key.as_str()], &p, out);
                }
            }
            _ => panic!("{path}: the YAML and the CRD differ in shape"),
        }
    }

    #[test]
    fn no_string_of_the_crd_yaml_reads_as_a_bool_null_or_number_in_yaml_11() {
        let yaml = crd_yaml().unwrap();
        let mut events = serde_saphyr::granit_parser::Parser::new_from_str(&yaml)
            .map(|e| e.unwrap().0)
            .skip_while(|e| !matches!(e, serde_saphyr::granit_parser::Event::DocumentStart(..)))
            .skip(1);
        let first = events.next().unwrap();
        let root = read_node(&mut events, first);
        let json = serde_json::to_value(crd()).unwrap();
        let mut out = Vec::new();
        misread(&root, &json, "", &mut out);
        assert!(out.is_empty(), "plain scalars YAML 1.1 misreads: {out:?}");
        // The one that broke kubectl: primaryBalancing.mode's enum.
        assert!(
            yaml.contains("- 'Off'") || yaml.contains("- \"Off\""),
            "{yaml}"
        );
    }

    #[test]
    fn the_crd_yaml_reads_back_as_the_crd() {
        let yaml = crd_yaml().unwrap();
        let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, serde_json::to_value(crd()).unwrap());
    }

    fn undocumented(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        // An embedded Kubernetes type: its fields are documented upstream.
        if schema["description"]
            .as_str()
            .is_some_and(|d| d.ends_with(v1alpha1::schema::UPSTREAM_DOCS))
        {
            return;
        }
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
