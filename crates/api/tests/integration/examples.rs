//! The example manifests users start from are valid ValkeyClusters.
#![allow(clippy::unwrap_used)]

use api::v1alpha1::{ValkeyCluster, validate};

fn check(text: &str) -> api::ValidatedCluster {
    let cluster: ValkeyCluster = serde_saphyr::from_str(text).unwrap();
    validate(&cluster).unwrap()
}

#[test]
fn the_demo_cluster_is_3_shards_of_3_members_one_per_zone_and_node() {
    let v = check(include_str!("../../../../examples/cluster.yaml"));
    assert_eq!((v.name.as_str(), v.shards, v.replicas), ("demo", 3, 2));
    let keys: Vec<(&str, u32)> = v
        .spread
        .iter()
        .map(|c| (c.topology_key.as_str(), c.max_replicas))
        .collect();
    assert_eq!(
        keys,
        [
            ("topology.kubernetes.io/zone", 1),
            ("kubernetes.io/hostname", 1)
        ]
    );
}

#[test]
fn the_preferred_example_is_valid() {
    check(include_str!("../../../../examples/cluster-preferred.yaml"));
}
