//! The ValkeyCluster manifests the suites apply, from one builder: every
//! member requests 100m CPU and 64Mi (so the scheduler and the placement
//! planner see real requests), the rest is what a suite asks for.
//!
//! ```
//! let m = e2e::manifest::cluster_manifest("two", 3, 2)
//!     .spread("zone", 1, "Required")
//!     .persistence("64Mi", "Delete");
//! assert!(m.yaml().contains("storageClassName: testbed-local"));
//! ```

/// One entry of `spec.replicaSpreadConstraints`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spread {
    pub topology_key: String,
    pub max_replicas: u32,
    pub mode: String,
}

/// `spec.persistence` on the testbed's StorageClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistence {
    pub size: String,
    pub reclaim_policy: String,
}

/// A ValkeyCluster manifest under construction; [`ClusterManifest::yaml`]
/// renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterManifest {
    pub name: String,
    pub shards: u32,
    pub replicas: u32,
    pub image: Option<String>,
    pub spread: Vec<Spread>,
    pub persistence: Option<Persistence>,
    /// Further `spec` lines, indented by two spaces (e.g. `auth:`).
    pub extra_spec: String,
}

/// A cluster `name` of `shards` x (1 + `replicas`) members.
pub fn cluster_manifest(name: &str, shards: u32, replicas: u32) -> ClusterManifest {
    ClusterManifest {
        name: name.to_string(),
        shards,
        replicas,
        image: None,
        spread: Vec::new(),
        persistence: None,
        extra_spec: String::new(),
    }
}

impl ClusterManifest {
    /// `spec.image`.
    pub fn image(mut self, image: &str) -> Self {
        self.image = Some(image.to_string());
        self
    }

    /// Adds a `replicaSpreadConstraints` entry (`topology_key` may be an
    /// alias: `zone`, `node`, `region`).
    pub fn spread(mut self, topology_key: &str, max_replicas: u32, mode: &str) -> Self {
        self.spread.push(Spread {
            topology_key: topology_key.to_string(),
            max_replicas,
            mode: mode.to_string(),
        });
        self
    }

    /// `spec.persistence` of `size` on `testbed-local` with `reclaim_policy`
    /// (`Delete` or `Retain`).
    pub fn persistence(mut self, size: &str, reclaim_policy: &str) -> Self {
        self.persistence = Some(Persistence {
            size: size.to_string(),
            reclaim_policy: reclaim_policy.to_string(),
        });
        self
    }

    /// Appends raw `spec` lines (each indented by two spaces, ending in a
    /// newline), for fields the builder has no method for.
    pub fn extra_spec(mut self, yaml: &str) -> Self {
        self.extra_spec.push_str(yaml);
        self
    }

    /// The same manifest for another number of shards.
    pub fn with_shards(&self, shards: u32) -> Self {
        ClusterManifest {
            shards,
            ..self.clone()
        }
    }

    /// Members in total: shards x (1 + replicas).
    pub fn members(&self) -> usize {
        (self.shards * (self.replicas + 1)) as usize
    }

    /// The manifest as YAML, for `kubectl apply -f -`.
    pub fn yaml(&self) -> String {
        let mut out = format!(
            "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata:
  name: {}
spec:
  shards: {}
  replicas: {}
",
            self.name, self.shards, self.replicas
        );
        if let Some(image) = &self.image {
            out.push_str(&format!("  image: {image}\n"));
        }
        out.push_str("  resources:\n    requests: {cpu: 100m, memory: 64Mi}\n");
        if !self.spread.is_empty() {
            out.push_str("  replicaSpreadConstraints:\n");
            for s in &self.spread {
                out.push_str(&format!(
                    "    - {{topologyKey: {}, maxReplicas: {}, mode: {}}}\n",
                    s.topology_key, s.max_replicas, s.mode
                ));
            }
        }
        if let Some(p) = &self.persistence {
            out.push_str(&format!(
                "  persistence:\n    size: {}\n    storageClassName: testbed-local\n    reclaimPolicy: {}\n",
                p.size, p.reclaim_policy
            ));
        }
        out.push_str(&self.extra_spec);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_cluster_has_its_size_and_the_member_requests() {
        assert_eq!(
            cluster_manifest("heal", 3, 1).yaml(),
            "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata:
  name: heal
spec:
  shards: 3
  replicas: 1
  resources:
    requests: {cpu: 100m, memory: 64Mi}
"
        );
    }

    #[test]
    fn every_option_lands_under_spec_in_order() {
        let m = cluster_manifest("keep", 2, 1)
            .image("valkey/valkey:9.1")
            .spread("zone", 1, "Required")
            .spread("node", 1, "Preferred")
            .persistence("64Mi", "Retain")
            .extra_spec("  auth:\n    passwordSecret: {name: user-pass}\n");
        let yaml = m.yaml();
        assert!(
            yaml.ends_with(
                "  replicas: 1
  image: valkey/valkey:9.1
  resources:
    requests: {cpu: 100m, memory: 64Mi}
  replicaSpreadConstraints:
    - {topologyKey: zone, maxReplicas: 1, mode: Required}
    - {topologyKey: node, maxReplicas: 1, mode: Preferred}
  persistence:
    size: 64Mi
    storageClassName: testbed-local
    reclaimPolicy: Retain
  auth:
    passwordSecret: {name: user-pass}
"
            ),
            "{yaml}"
        );
        let parsed: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(
            parsed["spec"]["replicaSpreadConstraints"][1]["mode"],
            "Preferred"
        );
        assert_eq!(
            parsed["spec"]["auth"]["passwordSecret"]["name"],
            "user-pass"
        );
    }

    #[test]
    fn another_shard_count_keeps_everything_else() {
        let m = cluster_manifest("scalepv", 3, 1).persistence("64Mi", "Retain");
        let two = m.with_shards(2);
        assert_eq!(two.shards, 2);
        assert_eq!(two.members(), 4);
        assert_eq!(two.persistence, m.persistence);
        assert_eq!(m.members(), 6);
    }
}
