//! What act did in one reconcile, as act says it and report writes it
//! (neither step reaches the other: both read this).

/// What acting did, for the status and the requeue.
#[derive(Debug, Default)]
pub struct Done {
    /// Valkey commands sent (CONFIG SET left out).
    pub executed: Vec<String>,
    /// Leaving members removed (`shard s member m`).
    pub removed: Vec<String>,
    /// Pods of members on lost nodes removed.
    pub healed: usize,
    /// Copies a move removed, force-deleted off lost nodes.
    pub stranded: usize,
    /// The last thing done, for `status.lastAction`.
    pub last_action: Option<String>,
}
