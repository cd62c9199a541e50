//! The shape of a testbed, as pure data: how many regions, zones and nodes, what
//! they are called, and which addresses a testbed with a given id owns.
//!
//! Names follow one scheme so tests and docs can rely on them: regions
//! `region-1..N`; the zones of region r are lettered, `zone-<r>a, zone-<r>b, ...`;
//! the nodes of zone `zone-1a` are `node-1a-1, node-1a-2, ...`.

use crate::state::NodeSpec;

/// The highest testbed id: the pod range `10.<100+id>.0.0/16` must stay inside 10/8.
pub const MAX_ID: u8 = 150;

/// Most nodes one testbed can have: node k gets `10.<100+id>.<k+1>.0/24`; the
/// first /24 is the service range and the last three are the outside network
/// (`.253`), the load-balancer pool (`.254`) and the host address (`.255`).
pub const MAX_NODES: usize = 252;

/// What `up` was asked to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub regions: u32,
    /// Zones in each region.
    pub zones_per_region: u32,
    pub nodes_per_zone: u32,
    /// Allocatable cpu of every node (a Kubernetes quantity).
    pub cpu: String,
    /// Allocatable memory of every node (a Kubernetes quantity).
    pub memory: String,
    /// Allocatable pods of every node.
    pub pods: u32,
}

/// A topology that cannot be built, naming the field at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("--regions must be at least 1")]
    NoRegions,
    #[error("--zones must be between 1 and 26 (zones are lettered a..z), got {0}")]
    Zones(u32),
    #[error("--nodes-per-zone must be at least 1")]
    NoNodes,
    #[error("a testbed holds at most {MAX_NODES} nodes, {0} asked for")]
    TooManyNodes(u64),
    #[error("--pods must be at least 1")]
    NoPods,
    #[error("--{field} must be a Kubernetes quantity such as 4 or 8Gi, got {value:?}")]
    Quantity { field: &'static str, value: String },
    #[error("testbed id must be between 1 and {MAX_ID}, got {0}")]
    Id(u8),
}

impl Default for Topology {
    /// The default: one region, three zones, three nodes each.
    fn default() -> Self {
        Self {
            regions: 1,
            zones_per_region: 3,
            nodes_per_zone: 3,
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 32,
        }
    }
}

/// Name of region `r` (1-based).
pub fn region_name(r: u32) -> String {
    format!("region-{r}")
}

/// Name of zone `z` (0-based) of region `r` (1-based): `zone-1a`.
pub fn zone_name(r: u32, z: u32) -> String {
    format!("zone-{r}{}", zone_letter(z))
}

fn zone_letter(z: u32) -> char {
    // Validated to be < 26 before any name is made; `b'a' + 25` is `z`.
    char::from(b'a' + u8::try_from(z % 26).unwrap_or(0))
}

/// Name of node `i` (1-based) in zone `z` (0-based) of region `r` (1-based): `node-1a-1`.
pub fn node_name(r: u32, z: u32, i: u32) -> String {
    format!("node-{r}{}-{i}", zone_letter(z))
}

/// Prefix of every network namespace and host interface of testbed `id`.
pub fn netns_prefix(id: u8) -> String {
    format!("vk{id}-")
}

/// The host's address towards the pods of testbed `id`.
pub fn host_ip(id: u8) -> String {
    format!("10.{}.255.1", 100 + u32::from(id))
}

/// Name of the nftables table the agent uses for testbed `id` (`inet vk<id>`).
pub fn nft_table(id: u8) -> String {
    format!("vk{id}")
}

/// The ClusterIP range of testbed `id`: `10.<100+id>.0.0/24`, the one /24 of
/// its /16 that no node uses (node k has `.<k+1>.0/24`, the host `.255.1`). A
/// range of its own per testbed keeps host-originated traffic to a ClusterIP
/// unambiguous when several testbeds run at once.
pub fn service_cidr(id: u8) -> String {
    format!("10.{}.0.0/24", 100 + u32::from(id))
}

/// The first address of [`service_cidr`], taken by the `kubernetes` Service.
pub fn first_service_ip(id: u8) -> String {
    format!("10.{}.0.1", 100 + u32::from(id))
}

/// The load-balancer pool of testbed `id`: `10.<100+id>.254.0/24`, a /24 no
/// node, Service or other testbed uses. LoadBalancer Services get their
/// `status.loadBalancer.ingress` address from it (`.1` to `.254`).
pub fn lb_pool_cidr(id: u8) -> String {
    format!("10.{}.254.0/24", 100 + u32::from(id))
}

/// The network namespace `testbed outside` runs commands in: a client outside
/// the cluster (`vk<id>-outside`).
pub fn outside_netns(id: u8) -> String {
    format!("{}outside", netns_prefix(id))
}

/// The host end of the outside namespace's veth (`vk<id>-out`).
pub fn outside_link(id: u8) -> String {
    format!("{}out", netns_prefix(id))
}

/// The outside namespace's address, `10.<100+id>.253.1` (the `.253` /24 is
/// the outside network's; nothing else of the testbed uses it).
pub fn outside_ip(id: u8) -> String {
    format!("10.{}.253.1", 100 + u32::from(id))
}

/// The cluster DNS address (the `kube-dns` Service's ClusterIP), `.10` of the
/// service range as kubeadm picks it.
pub fn cluster_dns_ip(id: u8) -> String {
    format!("10.{}.0.10", 100 + u32::from(id))
}

/// The cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The pod /24 of the `k`-th node (0-based) of testbed `id`.
pub fn pod_cidr(id: u8, k: usize) -> String {
    format!("10.{}.{}.0/24", 100 + u32::from(id), k + 1)
}

impl Topology {
    /// Checks the numbers and quantities, then lists every node with its place and
    /// pod range, region by region, zone by zone.
    pub fn nodes(&self, id: u8) -> Result<Vec<NodeSpec>, TopologyError> {
        self.validate(id)?;
        let mut nodes = Vec::new();
        for r in 1..=self.regions {
            for z in 0..self.zones_per_region {
                for i in 1..=self.nodes_per_zone {
                    let k = nodes.len();
                    nodes.push(NodeSpec {
                        name: node_name(r, z, i),
                        region: region_name(r),
                        zone: zone_name(r, z),
                        cpu: self.cpu.clone(),
                        memory: self.memory.clone(),
                        pods: self.pods,
                        pod_cidr: pod_cidr(id, k),
                    });
                }
            }
        }
        Ok(nodes)
    }

    fn validate(&self, id: u8) -> Result<(), TopologyError> {
        if id == 0 || id > MAX_ID {
            return Err(TopologyError::Id(id));
        }
        if self.regions == 0 {
            return Err(TopologyError::NoRegions);
        }
        if self.zones_per_region == 0 || self.zones_per_region > 26 {
            return Err(TopologyError::Zones(self.zones_per_region));
        }
        if self.nodes_per_zone == 0 {
            return Err(TopologyError::NoNodes);
        }
        if self.pods == 0 {
            return Err(TopologyError::NoPods);
        }
        let total = u64::from(self.regions)
            * u64::from(self.zones_per_region)
            * u64::from(self.nodes_per_zone);
        if total > MAX_NODES as u64 {
            return Err(TopologyError::TooManyNodes(total));
        }
        for (field, value) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            if !is_quantity(value) {
                return Err(TopologyError::Quantity {
                    field,
                    value: value.clone(),
                });
            }
        }
        Ok(())
    }
}

/// A plain Kubernetes quantity: a decimal number and an optional suffix. Catches
/// typos at `up` instead of at node registration.
fn is_quantity(s: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let digits_end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(digits_end);
    !number.is_empty()
        && number.chars().filter(|c| *c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit())
        && SUFFIXES.contains(&suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_topology_is_three_zones_of_three_nodes_in_one_region() {
        let nodes = Topology::default().nodes(7).unwrap();
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "node-1a-1",
                "node-1a-2",
                "node-1a-3",
                "node-1b-1",
                "node-1b-2",
                "node-1b-3",
                "node-1c-1",
                "node-1c-2",
                "node-1c-3"
            ]
        );
        assert!(nodes.iter().all(|n| n.region == "region-1"));
        assert_eq!(nodes[4].zone, "zone-1b");
        assert_eq!(nodes[0].pod_cidr, "10.107.1.0/24");
        assert_eq!(nodes[8].pod_cidr, "10.107.9.0/24");
        assert_eq!(nodes[8].cpu, "4");
        assert_eq!(nodes[8].memory, "8Gi");
        assert_eq!(nodes[8].pods, 32);
    }

    #[test]
    fn zones_are_counted_per_region_and_lettered_per_region() {
        let t = Topology {
            regions: 2,
            zones_per_region: 2,
            nodes_per_zone: 1,
            ..Topology::default()
        };
        let nodes = t.nodes(1).unwrap();
        let places: Vec<_> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.zone.as_str(), n.region.as_str()))
            .collect();
        assert_eq!(
            places,
            [
                ("node-1a-1", "zone-1a", "region-1"),
                ("node-1b-1", "zone-1b", "region-1"),
                ("node-2a-1", "zone-2a", "region-2"),
                ("node-2b-1", "zone-2b", "region-2"),
            ]
        );
    }

    #[test]
    fn every_node_gets_its_own_pod_range_and_the_host_address_is_outside_them() {
        let t = Topology {
            regions: 2,
            zones_per_region: 3,
            nodes_per_zone: 4,
            ..Topology::default()
        };
        let nodes = t.nodes(150).unwrap();
        let mut cidrs: Vec<_> = nodes.iter().map(|n| n.pod_cidr.clone()).collect();
        cidrs.sort();
        cidrs.dedup();
        assert_eq!(cidrs.len(), 24);
        assert_eq!(host_ip(150), "10.250.255.1");
        assert!(!cidrs.iter().any(|c| c.starts_with("10.250.255.")));
        assert_eq!(service_cidr(150), "10.250.0.0/24");
        assert!(!cidrs.iter().any(|c| c.starts_with("10.250.0.")));
    }

    #[test]
    fn the_service_range_is_the_unused_first_slash_24_of_the_testbed() {
        let nodes = Topology {
            nodes_per_zone: 80,
            ..Topology::default()
        }
        .nodes(4)
        .unwrap();
        assert_eq!(service_cidr(4), "10.104.0.0/24");
        assert_eq!(first_service_ip(4), "10.104.0.1");
        assert_eq!(cluster_dns_ip(4), "10.104.0.10");
        assert!(nodes.iter().all(|n| !n.pod_cidr.starts_with("10.104.0.")));
    }

    #[test]
    fn names_of_the_network_objects_carry_the_id() {
        assert_eq!(netns_prefix(3), "vk3-");
        assert_eq!(nft_table(3), "vk3");
        assert_eq!(host_ip(3), "10.103.255.1");
        assert_eq!(outside_netns(3), "vk3-outside");
        assert_eq!(outside_link(3), "vk3-out");
        assert!(outside_link(3).len() <= 15 && outside_link(150).len() <= 15);
    }

    #[test]
    fn the_outside_network_and_the_lb_pool_are_slash_24s_no_node_can_have() {
        let nodes = Topology {
            nodes_per_zone: 84,
            ..Topology::default()
        }
        .nodes(7)
        .unwrap();
        assert_eq!(nodes.len(), MAX_NODES);
        assert_eq!(lb_pool_cidr(7), "10.107.254.0/24");
        assert_eq!(outside_ip(7), "10.107.253.1");
        for n in &nodes {
            assert!(!n.pod_cidr.starts_with("10.107.253."), "{}", n.pod_cidr);
            assert!(!n.pod_cidr.starts_with("10.107.254."), "{}", n.pod_cidr);
        }
        assert_ne!(service_cidr(7), lb_pool_cidr(7));
    }

    #[test]
    fn bad_numbers_are_refused_naming_the_flag() {
        let bad = |t: Topology| t.nodes(1).unwrap_err().to_string();
        let base = Topology::default();
        assert!(
            bad(Topology {
                regions: 0,
                ..base.clone()
            })
            .contains("--regions")
        );
        assert!(
            bad(Topology {
                zones_per_region: 27,
                ..base.clone()
            })
            .contains("--zones")
        );
        assert!(
            bad(Topology {
                nodes_per_zone: 0,
                ..base.clone()
            })
            .contains("--nodes-per-zone")
        );
        assert!(
            bad(Topology {
                nodes_per_zone: 100,
                ..base.clone()
            })
            .contains("at most 252")
        );
        assert!(
            bad(Topology {
                memory: "8 GB".into(),
                ..base.clone()
            })
            .contains("--memory")
        );
        assert!(
            bad(Topology {
                cpu: "".into(),
                ..base.clone()
            })
            .contains("--cpu")
        );
        assert_eq!(base.nodes(0).unwrap_err(), TopologyError::Id(0));
        assert_eq!(base.nodes(151).unwrap_err(), TopologyError::Id(151));
    }

    #[test]
    fn quantities_accept_kubernetes_forms() {
        for ok in ["4", "500m", "8Gi", "1.5", "512Mi", "2k"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "8GB", "1.2.3", "-1", "4 "] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
