//! What a restore's record means for the planner.

use api::v1alpha1::RestoreStatus;
use std::collections::BTreeMap;
use valkey::{ShardIndex, SlotRange, SlotSet};

/// The slots each shard held in the backup, from the record, for the
/// planner. `None` when a range does not read back.
pub fn slot_map(record: &RestoreStatus) -> Option<BTreeMap<ShardIndex, SlotSet>> {
    record
        .shard_slots
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let ranges = text
                .split(',')
                .filter(|r| !r.trim().is_empty())
                .map(|r| r.trim().parse::<SlotRange>().ok())
                .collect::<Option<Vec<_>>>()?;
            Some((
                ShardIndex(u32::try_from(i).ok()?),
                SlotSet::from_ranges(ranges),
            ))
        })
        .collect()
}
