//! One PodDisruptionBudget per shard, `maxUnavailable: 1`: a drain or an
//! eviction never takes two members of one shard at once (the operator's own
//! deletions are not evictions and follow its rolling order instead).

use super::owned_meta;
use super::{pdb_name, set_shard_selector};
use api::ValidatedCluster;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The PDB of shard `shard`.
pub fn pdb(c: &ValidatedCluster, owner: &OwnerReference, shard: u32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owned_meta(c, owner, pdb_name(&c.name, shard)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(set_shard_selector(c.kind, &c.name, shard)),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, owner};

    #[test]
    fn a_shard_budget_allows_one_member_down_and_selects_only_that_shard() {
        let p = pdb(&cluster("cache", 3, 1), &owner(), 2);
        assert_eq!(p.metadata.name.as_deref(), Some("cache-2"));
        let spec = p.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let labels = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(labels["valkey.rs/cluster"], "cache");
        assert_eq!(labels["valkey.rs/shard"], "2");
        assert_eq!(labels.len(), 2);
    }
}
