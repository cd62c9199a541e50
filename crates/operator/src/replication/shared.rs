//! What one scope's replication controller shares between its reconciles
//! (a module of its own: the steps reach it, not the controller's hub).

use crate::context::{Context, OwnedStores};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What one scope's replication controller shares between reconciles.
pub struct Shared {
    pub ctx: Arc<Context>,
    pub owned: OwnedStores,
    /// Per set (`namespace/name`): since when each member has not answered.
    pub unanswered: Mutex<HashMap<String, HashMap<u32, Instant>>>,
    /// Per set: whether it was Ready at the last reconcile (an event when it
    /// becomes so).
    pub was_ready: Mutex<HashMap<String, bool>>,
}
