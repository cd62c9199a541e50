//! `manifest.json`: what a backup holds, written after every shard's RDB, so
//! its presence is what makes a backup complete. A restore reads the shards,
//! their slots and checksums from it.

use serde::{Deserialize, Serialize};

/// The manifest's format; a reader refuses one it does not know.
pub const FORMAT_VERSION: u32 = 1;

/// The object name of the manifest in a backup's folder.
pub const MANIFEST: &str = "manifest.json";

/// The largest manifest the operator reads back (a manifest of 1000 shards
/// is ~300 KB).
pub const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// The object name of shard `index`'s RDB in a backup's folder.
pub fn shard_object(index: usize) -> String {
    format!("shard-{index}.rdb")
}

/// One backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format_version: u32,
    pub namespace: String,
    pub cluster: String,
    pub backup: String,
    /// `valkey_version` of the members the RDBs came from (INFO server).
    pub valkey_version: String,
    /// RFC 3339.
    pub start_time: String,
    pub completion_time: String,
    /// In the order of their first slot.
    pub shards: Vec<ShardEntry>,
}

/// One shard's RDB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardEntry {
    pub index: usize,
    /// Inclusive `[start, end]` slot ranges the shard served.
    pub slots: Vec<[u16; 2]>,
    /// Object name in the backup's folder.
    pub object: String,
    pub size_bytes: u64,
    /// SHA-256 of the object's bytes, hex.
    pub sha256: String,
    /// The node the RDB was taken from, and whether it was a replica.
    pub source_node: String,
    pub from_replica: bool,
}

impl Manifest {
    /// Bytes of RDB in all shards.
    pub fn size_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.size_bytes).sum()
    }

    /// Checks what a reader relies on: a known format, shards numbered
    /// 0..n in order, no slot served by two shards.
    pub fn check(&self) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "manifest format {} (this operator reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        let mut seen = vec![false; 16384];
        for (i, shard) in self.shards.iter().enumerate() {
            if shard.index != i {
                return Err(format!("shard {i} is numbered {}", shard.index));
            }
            for [start, end] in &shard.slots {
                if start > end || *end >= 16384 {
                    return Err(format!("shard {i}: bad slot range {start}-{end}"));
                }
                for slot in *start..=*end {
                    let seen = &mut seen[usize::from(slot)];
                    if *seen {
                        return Err(format!("slot {slot} is in two shards"));
                    }
                    *seen = true;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn shard(index: usize, slots: Vec<[u16; 2]>) -> ShardEntry {
        ShardEntry {
            index,
            slots,
            object: shard_object(index),
            size_bytes: 10,
            sha256: "ab".into(),
            source_node: "10.0.0.1:6379".into(),
            from_replica: true,
        }
    }

    fn manifest(shards: Vec<ShardEntry>) -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            namespace: "ns".into(),
            cluster: "c".into(),
            backup: "b".into(),
            valkey_version: "8.1.1".into(),
            start_time: "2026-01-01T00:00:00Z".into(),
            completion_time: "2026-01-01T00:00:01Z".into(),
            shards,
        }
    }

    #[test]
    fn the_manifest_reads_back_as_written_in_camel_case() {
        let m = manifest(vec![
            shard(0, vec![[0, 8191]]),
            shard(1, vec![[8192, 16383]]),
        ]);
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"valkeyVersion\":\"8.1.1\""), "{json}");
        assert!(json.contains("\"sha256\":\"ab\""), "{json}");
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
        assert_eq!(m.size_bytes(), 20);
        assert_eq!(m.check(), Ok(()));
    }

    #[test]
    fn a_slot_in_two_shards_is_refused() {
        let m = manifest(vec![shard(0, vec![[0, 100]]), shard(1, vec![[100, 200]])]);
        assert_eq!(m.check(), Err("slot 100 is in two shards".into()));
    }

    #[test]
    fn shards_out_of_order_or_an_unknown_format_are_refused() {
        assert!(manifest(vec![shard(1, vec![[0, 1]])]).check().is_err());
        let mut m = manifest(vec![]);
        m.format_version = 2;
        assert!(m.check().is_err());
    }
}
