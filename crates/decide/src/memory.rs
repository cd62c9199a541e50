//! What the operator remembers about a cluster between reconciles.
//!
//! Everything else is read again from the API server and the members each
//! time. Memory is lost when the operator restarts (or leadership moves);
//! what that costs:
//!
//! - `last_disturbance`: primary balancing waits one more quiet period;
//! - `primaries`: a failover that happened while no operator ran is not
//!   announced as `PrimaryChanged`;
//! - `failover_requested`: a failover may be asked for again at once (Valkey
//!   answers the second request harmlessly);
//! - `announced`: standing warnings are published once more;
//! - `nodes_missing_since`: the clock of a deleted Node starts again, so
//!   healing waits longer, never shorter;
//! - `failures`: the retry back-off starts again at 1 s.

use crate::pods::PodFacts;
use crate::view::KubeView;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// What is remembered about one cluster.
#[derive(Debug, Default, Clone)]
pub struct Memory {
    /// The last time something changed membership or primaries (quiet period).
    pub last_disturbance: Option<Instant>,
    /// The live primary per shard at the last reconcile that saw one (to
    /// notice Valkey's own failovers). Not derived from the status: the
    /// status shows no primary while a shard has none (mid-failover), and a
    /// change from the old primary to the new one would go unannounced.
    pub primaries: HashMap<u32, u32>,
    /// When the operator last asked for a failover in a shard.
    pub failover_requested: HashMap<u32, Instant>,
    /// Warnings already published.
    pub announced: Announced,
    /// When the operator first found each Node its members were bound to
    /// gone (a deleted Node counts as lost from then on, not forever at once).
    pub nodes_missing_since: HashMap<String, Instant>,
    /// Reconciles in a row that ended in an error (the retry back-off).
    pub failures: u32,
    /// The ACL users the operator set on each member, and how the member
    /// listed them after (see `valkey::acl`).
    pub acl: valkey::acl::Learned,
}

/// Warnings (and their all-clear) already published, so a standing problem
/// is not re-announced every reconcile.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Announced {
    /// The invalid-spec message.
    pub invalid_spec: Option<String>,
    /// The placement problem (empty once every constraint held).
    pub placement: Option<String>,
    /// The plan in use was announced as not proven optimal.
    pub placement_unproven: bool,
    /// Why the rolling update is blocked.
    pub rolling_blocked: Option<String>,
    /// The volume size the API server refused to grow the volumes to (not
    /// asked for again until it changes).
    pub volumes_refused: Option<String>,
    /// The lost members waiting to be re-created.
    pub heal_waiting: Option<String>,
    /// Reconciles are paused by the annotation.
    pub paused: bool,
    /// The users whose password Secret is missing.
    pub users_missing: Option<String>,
    /// The members a password rotation waits for (unreachable).
    pub rotation_waiting: Option<String>,
    /// Why `spec.restore` is refused.
    pub restore_refused: Option<String>,
    /// Why a first member could not load the backup.
    pub restore_failed: Option<String>,
}

impl Memory {
    /// Records when each node a member pod is bound to was first seen
    /// without a Node object, and puts how long into `view.missing_nodes`.
    pub fn note_missing_nodes(&mut self, view: &mut KubeView, now: Instant) {
        let known: BTreeSet<&str> = view
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let bound: BTreeSet<String> = view
            .members
            .values()
            .chain(view.new_copies.values())
            .chain(view.condemned.iter().map(|(_, p)| p))
            .filter_map(|p| PodFacts::of(p).node)
            .filter(|n| !known.contains(n.as_str()))
            .collect();
        self.nodes_missing_since
            .retain(|name, _| bound.contains(name));
        for name in bound {
            let since = *self.nodes_missing_since.entry(name.clone()).or_insert(now);
            view.missing_nodes
                .insert(name, now.saturating_duration_since(since));
        }
    }
}
