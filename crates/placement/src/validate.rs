//! Refusing problems that cannot be planned, and resolving topology key aliases.
//!
//! The CRD schema refuses most of these already; the planner checks again
//! because `valkey-operator plan` reads files that never went through the API
//! server, and a bad field must give an error that names it, never a panic.

use crate::PlanError;
use crate::model::{HOSTNAME_KEY, Problem, REGION_KEY, ZONE_KEY};
use std::collections::BTreeMap;

/// The most shards a cluster may have: one per hash slot.
pub const MAX_SHARDS: u32 = 16384;

/// The most members (shards x (replicas + 1)) one plan may hold. Far above any
/// real cluster; it bounds the planner's memory on absurd input.
pub const MAX_MEMBERS: u64 = 1 << 20;

/// Resolves a topologyKey alias: `node` -> `kubernetes.io/hostname`, `zone` ->
/// `topology.kubernetes.io/zone`, `region` -> `topology.kubernetes.io/region`;
/// any other key is returned as is.
pub fn resolve_key(key: &str) -> String {
    match key {
        "node" => HOSTNAME_KEY.to_string(),
        "zone" => ZONE_KEY.to_string(),
        "region" => REGION_KEY.to_string(),
        other => other.to_string(),
    }
}

/// Checks a label key the way Kubernetes does: an optional DNS subdomain prefix
/// (at most 253 characters) and `/`, then a name of at most 63 characters made
/// of alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric.
/// Returns why the key is invalid.
pub fn check_label_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("must not be empty".into());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(format!("{key:?}: the prefix before '/' must not be empty"));
        }
        if prefix.len() > 253 {
            return Err(format!(
                "{key:?}: the prefix must be at most 253 characters"
            ));
        }
        let dns_label = |l: &str| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !prefix.split('.').all(dns_label) {
            return Err(format!(
                "{key:?}: the prefix must be a DNS subdomain (lowercase alphanumerics, '-' and '.')"
            ));
        }
    }
    if name.is_empty() {
        return Err(format!("{key:?}: the name must not be empty"));
    }
    if name.len() > 63 {
        return Err(format!("{key:?}: the name must be at most 63 characters"));
    }
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    let body_ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !body_ok || !edge_ok(name.bytes().next()) || !edge_ok(name.bytes().last()) {
        return Err(format!(
            "{key:?}: the name must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> PlanError {
    PlanError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Refuses a problem the planner cannot plan; the error names the field as the
/// user wrote it in the ValkeyCluster (`spec.replicaSpreadConstraints[1].maxReplicas`)
/// or, for node data, by position (`nodes[3].name`).
pub fn validate(problem: &Problem) -> Result<(), PlanError> {
    if problem.shards == 0 || problem.shards > MAX_SHARDS {
        return Err(invalid(
            "spec.shards",
            format!("must be between 1 and {MAX_SHARDS}, got {}", problem.shards),
        ));
    }
    let members = u64::from(problem.shards) * (u64::from(problem.replicas) + 1);
    if members > MAX_MEMBERS {
        return Err(invalid(
            "spec.replicas",
            format!(
                "{} shards x ({} replicas + 1) = {members} members; at most {MAX_MEMBERS} are supported",
                problem.shards, problem.replicas
            ),
        ));
    }
    let mut seen: BTreeMap<(String, crate::Mode), usize> = BTreeMap::new();
    for (i, c) in problem.constraints.iter().enumerate() {
        let field = format!("spec.replicaSpreadConstraints[{i}]");
        if c.max_replicas == 0 {
            return Err(invalid(
                format!("{field}.maxReplicas"),
                "must be at least 1, got 0",
            ));
        }
        check_label_key(&c.topology_key).map_err(|m| invalid(format!("{field}.topologyKey"), m))?;
        let key = resolve_key(&c.topology_key);
        if let Some(first) = seen.insert((key.clone(), c.mode), i) {
            return Err(invalid(
                field,
                format!(
                    "duplicates spec.replicaSpreadConstraints[{first}]: both constrain {key} with mode {:?}",
                    c.mode
                ),
            ));
        }
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, node) in problem.nodes.iter().enumerate() {
        if node.name.is_empty() {
            return Err(invalid(format!("nodes[{i}].name"), "must not be empty"));
        }
        if let Some(first) = names.insert(&node.name, i) {
            return Err(invalid(
                format!("nodes[{i}].name"),
                format!("node {} is listed twice (also nodes[{first}])", node.name),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_well_known_keys() {
        assert_eq!(resolve_key("node"), HOSTNAME_KEY);
        assert_eq!(resolve_key("zone"), ZONE_KEY);
        assert_eq!(resolve_key("region"), REGION_KEY);
        assert_eq!(resolve_key("example.com/rack"), "example.com/rack");
    }

    #[test]
    fn label_keys_follow_kubernetes_rules() {
        for ok in [
            "zone",
            "rack",
            "topology.kubernetes.io/zone",
            "a/b",
            "example.com/Rack_1.x",
            "A9",
        ] {
            assert_eq!(check_label_key(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/zone",
            "zone/",
            "a/b/c",
            "Example.com/rack",
            "-rack",
            "rack-",
            "ex_ample.com/rack",
            "rack space",
            &"x".repeat(64),
            &format!("{}/x", "a".repeat(254)),
        ] {
            assert!(check_label_key(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
