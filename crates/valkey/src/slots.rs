// Over 600 lines: 595 lines of code; the rest are its unit tests, kept beside it.
//! Slot arithmetic: the 16384 hash slots, ranges of them, sets of ranges, the even
//! split a fresh cluster starts from, and the rebalance plan that keeps every shard
//! within one slot of even when shards come and go.
//!
//! Everything here is pure and total: a bad slot number is an error that names it,
//! never a panic. [`SlotSet`] is kept normalised (sorted, disjoint, adjacent ranges
//! merged) so two sets holding the same slots compare equal.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// How many hash slots a Valkey cluster has.
pub const SLOT_COUNT: u16 = 16384;

/// Errors of slot arithmetic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// A slot number outside `0..=16383`.
    #[error("slot {value} is out of range 0..=16383")]
    OutOfRange { value: u64 },
    /// Text that is not a slot number.
    #[error("slot {text:?} is not a number")]
    NotANumber { text: String },
    /// A range whose start is after its end.
    #[error("slot range {start}-{end} starts after it ends")]
    InvertedRange { start: u16, end: u16 },
    /// An even split over zero shards, or over more shards than there are slots.
    #[error("cannot split {SLOT_COUNT} slots over {shards} shards (1..=16384)")]
    BadShardCount { shards: usize },
    /// The rebalance input gives one slot to two owners.
    #[error("slot ownership overlaps: {slots} belong to more than one owner")]
    Overlap { slots: SlotSet },
}

impl SlotError {
    /// A stable category string for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::OutOfRange { .. } | Self::NotANumber { .. } | Self::InvertedRange { .. } => {
                "slot_parse"
            }
            Self::BadShardCount { .. } => "slot_split",
            Self::Overlap { .. } => "slot_overlap",
        }
    }
}

/// One hash slot, `0..=16383`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Slot(u16);

impl Slot {
    /// The first slot, 0.
    pub const MIN: Slot = Slot(0);
    /// The last slot, 16383.
    pub const MAX: Slot = Slot(SLOT_COUNT - 1);

    /// A slot from a number, checked against `0..=16383`.
    pub fn new(value: u64) -> Result<Slot, SlotError> {
        if value < u64::from(SLOT_COUNT) {
            // The bound check above makes the narrowing exact.
            Ok(Slot(value as u16))
        } else {
            Err(SlotError::OutOfRange { value })
        }
    }

    /// The slot number.
    pub fn get(self) -> u16 {
        self.0
    }

    /// The slot Valkey hashes `key` to: CRC16 (XMODEM) of the key, or of its hash
    /// tag (the text between the first `{` and the next `}` when not empty), mod 16384.
    pub fn for_key(key: &[u8]) -> Slot {
        let hashed = match key.iter().position(|&b| b == b'{') {
            Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &key[open + 1..open + 1 + len],
                _ => key,
            },
            None => key,
        };
        Slot(crc16_xmodem(hashed) & (SLOT_COUNT - 1))
    }
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Valkey's key
/// slot uses.
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Slot {
    type Err = SlotError;
    fn from_str(text: &str) -> Result<Slot, SlotError> {
        let value: u64 = text.parse().map_err(|_| SlotError::NotANumber {
            text: text.to_string(),
        })?;
        Slot::new(value)
    }
}

impl TryFrom<u16> for Slot {
    type Error = SlotError;
    fn try_from(value: u16) -> Result<Slot, SlotError> {
        Slot::new(u64::from(value))
    }
}

impl TryFrom<i64> for Slot {
    type Error = SlotError;
    fn try_from(value: i64) -> Result<Slot, SlotError> {
        match u64::try_from(value) {
            Ok(v) => Slot::new(v),
            Err(_) => Err(SlotError::NotANumber {
                text: value.to_string(),
            }),
        }
    }
}

/// An inclusive range of slots, `start <= end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SlotRange {
    start: Slot,
    end: Slot,
}

impl SlotRange {
    /// A range `start..=end`; `start` must not be after `end`.
    pub fn new(start: Slot, end: Slot) -> Result<SlotRange, SlotError> {
        if start <= end {
            Ok(SlotRange { start, end })
        } else {
            Err(SlotError::InvertedRange {
                start: start.get(),
                end: end.get(),
            })
        }
    }

    /// A range from two numbers, both checked.
    pub fn from_numbers(start: u64, end: u64) -> Result<SlotRange, SlotError> {
        SlotRange::new(Slot::new(start)?, Slot::new(end)?)
    }

    /// The range holding one slot.
    pub fn single(slot: Slot) -> SlotRange {
        SlotRange {
            start: slot,
            end: slot,
        }
    }

    /// Every slot, `0..=16383`.
    pub fn full() -> SlotRange {
        SlotRange {
            start: Slot::MIN,
            end: Slot::MAX,
        }
    }

    /// The first slot.
    pub fn start(self) -> Slot {
        self.start
    }

    /// The last slot (inclusive).
    pub fn end(self) -> Slot {
        self.end
    }

    /// How many slots the range holds (at least 1).
    pub fn len(self) -> u32 {
        u32::from(self.end.0) - u32::from(self.start.0) + 1
    }

    /// Always false: a range holds at least one slot. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(self) -> bool {
        false
    }

    /// Whether `slot` is inside the range.
    pub fn contains(self, slot: Slot) -> bool {
        self.start <= slot && slot <= self.end
    }
}

impl fmt::Display for SlotRange {
    /// `s-e`, or `s` for a single slot, as CLUSTER NODES prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

impl FromStr for SlotRange {
    type Err = SlotError;
    /// `s-e` or `s`.
    fn from_str(text: &str) -> Result<SlotRange, SlotError> {
        match text.split_once('-') {
            Some((start, end)) => SlotRange::new(start.parse()?, end.parse()?),
            None => Ok(SlotRange::single(text.parse()?)),
        }
    }
}

/// A set of slots, kept as sorted, disjoint, non-adjacent ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct SlotSet {
    ranges: Vec<SlotRange>,
}

/// A 16384-bit bitmap: the simplest correct way to do set operations on slots
/// (2 KiB, linear in the slot count).
struct Bits([u64; 256]);

impl Bits {
    fn empty() -> Bits {
        Bits([0; 256])
    }

    fn from_set(set: &SlotSet) -> Bits {
        let mut bits = Bits::empty();
        for range in &set.ranges {
            for slot in range.start.0..=range.end.0 {
                bits.set(slot);
            }
        }
        bits
    }

    fn set(&mut self, slot: u16) {
        self.0[usize::from(slot / 64)] |= 1u64 << (slot % 64);
    }

    fn get(&self, slot: u16) -> bool {
        self.0[usize::from(slot / 64)] & (1u64 << (slot % 64)) != 0
    }

    fn to_set(&self) -> SlotSet {
        let mut ranges = Vec::new();
        let mut open: Option<u16> = None;
        for slot in 0..SLOT_COUNT {
            match (self.get(slot), open) {
                (true, None) => open = Some(slot),
                (false, Some(start)) => {
                    ranges.push(SlotRange {
                        start: Slot(start),
                        end: Slot(slot - 1),
                    });
                    open = None;
                }
                _ => {}
            }
        }
        if let Some(start) = open {
            ranges.push(SlotRange {
                start: Slot(start),
                end: Slot::MAX,
            });
        }
        SlotSet { ranges }
    }

    fn zip(&self, other: &Bits, op: impl Fn(u64, u64) -> u64) -> Bits {
        let mut out = Bits::empty();
        for (i, word) in out.0.iter_mut().enumerate() {
            *word = op(self.0[i], other.0[i]);
        }
        out
    }
}

impl SlotSet {
    /// The empty set.
    pub fn new() -> SlotSet {
        SlotSet::default()
    }

    /// All 16384 slots.
    pub fn full() -> SlotSet {
        SlotSet {
            ranges: vec![SlotRange::full()],
        }
    }

    /// The set of the given ranges (in any order, overlapping or not).
    pub fn from_ranges(ranges: impl IntoIterator<Item = SlotRange>) -> SlotSet {
        let mut sorted: Vec<SlotRange> = ranges.into_iter().collect();
        sorted.sort();
        let mut out: Vec<SlotRange> = Vec::with_capacity(sorted.len());
        for range in sorted {
            match out.last_mut() {
                // Merge when overlapping or adjacent.
                Some(last) if u32::from(range.start.0) <= u32::from(last.end.0) + 1 => {
                    if range.end > last.end {
                        last.end = range.end;
                    }
                }
                _ => out.push(range),
            }
        }
        SlotSet { ranges: out }
    }

    /// The set holding one range.
    pub fn from_range(range: SlotRange) -> SlotSet {
        SlotSet {
            ranges: vec![range],
        }
    }

    /// The normalised ranges, in slot order.
    pub fn ranges(&self) -> &[SlotRange] {
        &self.ranges
    }

    /// How many slots the set holds.
    pub fn len(&self) -> u32 {
        self.ranges.iter().map(|r| r.len()).sum()
    }

    /// Whether the set holds no slot.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether the set holds every slot.
    pub fn is_full(&self) -> bool {
        self.len() == u32::from(SLOT_COUNT)
    }

    /// Whether `slot` is in the set.
    pub fn contains(&self, slot: Slot) -> bool {
        // Ranges are sorted: binary search on the start.
        let idx = self.ranges.partition_point(|r| r.start <= slot);
        idx > 0 && self.ranges[idx - 1].contains(slot)
    }

    /// Adds the slots of `range`.
    pub fn insert_range(&mut self, range: SlotRange) {
        let mut all = std::mem::take(&mut self.ranges);
        all.push(range);
        *self = SlotSet::from_ranges(all);
    }

    /// The slots in either set.
    pub fn union(&self, other: &SlotSet) -> SlotSet {
        SlotSet::from_ranges(self.ranges.iter().chain(other.ranges.iter()).copied())
    }

    /// The slots in both sets.
    pub fn intersection(&self, other: &SlotSet) -> SlotSet {
        Bits::from_set(self)
            .zip(&Bits::from_set(other), |a, b| a & b)
            .to_set()
    }

    /// The slots in `self` and not in `other`.
    pub fn difference(&self, other: &SlotSet) -> SlotSet {
        Bits::from_set(self)
            .zip(&Bits::from_set(other), |a, b| a & !b)
            .to_set()
    }

    /// The slots not in the set.
    pub fn complement(&self) -> SlotSet {
        SlotSet::full().difference(self)
    }

    /// Whether the sets share no slot.
    pub fn is_disjoint(&self, other: &SlotSet) -> bool {
        self.intersection(other).is_empty()
    }

    /// Whether every slot of `self` is in `other`.
    pub fn is_subset(&self, other: &SlotSet) -> bool {
        self.difference(other).is_empty()
    }

    /// The `count` lowest slots of the set (all of it when it holds fewer).
    pub fn lowest(&self, count: u32) -> SlotSet {
        let mut left = count;
        let mut out = Vec::new();
        for range in &self.ranges {
            if left == 0 {
                break;
            }
            if range.len() <= left {
                out.push(*range);
                left -= range.len();
            } else {
                // left < range.len() <= 16384, so the sum stays a valid slot.
                let end = Slot(range.start.0 + (left as u16) - 1);
                out.push(SlotRange {
                    start: range.start,
                    end,
                });
                left = 0;
            }
        }
        SlotSet { ranges: out }
    }

    /// Every slot of the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.ranges
            .iter()
            .flat_map(|r| (r.start.0..=r.end.0).map(Slot))
    }
}

impl fmt::Display for SlotSet {
    /// Ranges separated by spaces, as CLUSTER NODES prints them; `-` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ranges.is_empty() {
            return write!(f, "-");
        }
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

impl FromIterator<SlotRange> for SlotSet {
    fn from_iter<I: IntoIterator<Item = SlotRange>>(iter: I) -> SlotSet {
        SlotSet::from_ranges(iter)
    }
}

impl FromIterator<Slot> for SlotSet {
    fn from_iter<I: IntoIterator<Item = Slot>>(iter: I) -> SlotSet {
        SlotSet::from_ranges(iter.into_iter().map(SlotRange::single))
    }
}

/// Splits the 16384 slots over `shards` shards into contiguous ranges, in order;
/// the first `16384 % shards` ranges hold one slot more than the others.
pub fn even_split(shards: usize) -> Result<Vec<SlotRange>, SlotError> {
    let total = usize::from(SLOT_COUNT);
    if shards == 0 || shards > total {
        return Err(SlotError::BadShardCount { shards });
    }
    let base = total / shards;
    let extra = total % shards;
    let mut out = Vec::with_capacity(shards);
    let mut start = 0usize;
    for i in 0..shards {
        let len = base + usize::from(i < extra);
        // start + len <= 16384 by construction.
        out.push(SlotRange {
            start: Slot(start as u16),
            end: Slot((start + len - 1) as u16),
        });
        start += len;
    }
    Ok(out)
}

/// One step of a rebalance: `slots` go from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotMove<K> {
    pub from: K,
    pub to: K,
    pub slots: SlotSet,
}

/// The slot count each holder should end with so that `total` slots are spread
/// within one slot and as few as possible move: the `total % n` holders that hold
/// the most now (`counts`) get the larger share; ties go to the earlier holder.
pub fn balanced_targets(counts: &[u32], total: u32) -> Vec<u32> {
    let n = counts.len() as u32;
    if n == 0 {
        return Vec::new();
    }
    let base = total / n;
    let extra = (total % n) as usize;
    let mut order: Vec<usize> = (0..counts.len()).collect();
    // Stable sort: ties keep the earlier holder first.
    order.sort_by(|&a, &b| counts[b].cmp(&counts[a]));
    let mut targets = vec![base; counts.len()];
    for &i in order.iter().take(extra) {
        targets[i] += 1;
    }
    targets
}

/// The moves that take `current` ownership to a balanced one over `keep`.
///
/// `current` maps each owner to the slots it holds now (owners not in `keep` are
/// drained to nothing); every owner in `keep` ends with `total / keep.len()` slots or
/// one more, where `total` is every slot in `current`. Only the excess of each owner
/// above its target moves, which is the least any balanced result can move. Donors
/// give their lowest slots first; recipients are filled in `keep` order.
///
/// Errors when two owners share a slot, or when `keep` is empty while slots are held.
pub fn rebalance<K: Ord + Clone>(
    current: &BTreeMap<K, SlotSet>,
    keep: &[K],
) -> Result<Vec<SlotMove<K>>, SlotError> {
    let mut seen = SlotSet::new();
    for slots in current.values() {
        let overlap = seen.intersection(slots);
        if !overlap.is_empty() {
            return Err(SlotError::Overlap { slots: overlap });
        }
        seen = seen.union(slots);
    }
    let mut keep_unique: Vec<K> = Vec::with_capacity(keep.len());
    for key in keep {
        if !keep_unique.contains(key) {
            keep_unique.push(key.clone());
        }
    }
    if keep_unique.is_empty() {
        return if seen.is_empty() {
            Ok(Vec::new())
        } else {
            Err(SlotError::BadShardCount { shards: 0 })
        };
    }
    let held = |key: &K| current.get(key).cloned().unwrap_or_default();
    let mut counts: Vec<u32> = keep_unique.iter().map(|k| held(k).len()).collect();
    // Slots of owners that are not kept count towards the total: they all move.
    let total = seen.len();
    let targets = balanced_targets(&counts, total);

    // Donors: every non-kept owner (all of it), then kept owners above target.
    let mut donors: Vec<(K, SlotSet)> = current
        .iter()
        .filter(|(k, s)| !keep_unique.contains(k) && !s.is_empty())
        .map(|(k, s)| (k.clone(), s.clone()))
        .collect();
    for (i, key) in keep_unique.iter().enumerate() {
        if counts[i] > targets[i] {
            let slots = held(key);
            let excess = counts[i] - targets[i];
            // Give the lowest `excess` slots so what stays is the contiguous top.
            donors.push((key.clone(), slots.lowest(excess)));
        }
    }

    let mut moves = Vec::new();
    for (from, mut giving) in donors {
        for (i, to) in keep_unique.iter().enumerate() {
            if giving.is_empty() {
                break;
            }
            if counts[i] >= targets[i] || *to == from {
                continue;
            }
            let want = targets[i] - counts[i];
            let chunk = giving.lowest(want);
            counts[i] += chunk.len();
            giving = giving.difference(&chunk);
            moves.push(SlotMove {
                from: from.clone(),
                to: to.clone(),
                slots: chunk,
            });
        }
    }
    Ok(moves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range(s: u64, e: u64) -> SlotRange {
        SlotRange::from_numbers(s, e).unwrap()
    }

    #[test]
    fn slot_numbers_outside_the_cluster_are_refused() {
        assert!(Slot::new(16383).is_ok());
        assert_eq!(
            Slot::new(16384),
            Err(SlotError::OutOfRange { value: 16384 })
        );
        assert!(matches!(
            "12x".parse::<Slot>(),
            Err(SlotError::NotANumber { .. })
        ));
        assert!(matches!(
            "10-5".parse::<SlotRange>(),
            Err(SlotError::InvertedRange { start: 10, end: 5 })
        ));
    }

    #[test]
    fn ranges_print_like_cluster_nodes() {
        assert_eq!(range(0, 5460).to_string(), "0-5460");
        assert_eq!(range(7, 7).to_string(), "7");
        let set = SlotSet::from_ranges([range(10, 20), range(5, 5), range(21, 30)]);
        assert_eq!(set.to_string(), "5 10-30");
        assert_eq!(SlotSet::new().to_string(), "-");
    }

    #[test]
    fn key_slots_match_valkey() {
        // Values from CLUSTER KEYSLOT on valkey-server.
        assert_eq!(Slot::for_key(b"foo").get(), 12182);
        assert_eq!(Slot::for_key(b"bar").get(), 5061);
        assert_eq!(Slot::for_key(b"{user1000}.following").get(), 3443);
        assert_eq!(
            Slot::for_key(b"{user1000}.followers"),
            Slot::for_key(b"user1000")
        );
        // An empty hash tag hashes the whole key.
        assert_eq!(Slot::for_key(b"{}foo"), Slot::for_key(b"{}foo"));
        assert_ne!(Slot::for_key(b"{}foo"), Slot::for_key(b"foo"));
    }

    #[test]
    fn even_split_of_three_matches_the_usual_layout() {
        let split = even_split(3).unwrap();
        assert_eq!(
            split,
            vec![range(0, 5461), range(5462, 10922), range(10923, 16383)]
        );
    }

    #[test]
    fn even_split_refuses_zero_and_too_many_shards() {
        assert!(even_split(0).is_err());
        assert!(even_split(16385).is_err());
        assert_eq!(even_split(16384).unwrap().len(), 16384);
    }

    #[test]
    fn scale_out_from_three_to_four_moves_only_a_quarter() {
        let split = even_split(3).unwrap();
        let current: BTreeMap<u32, SlotSet> = split
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, SlotSet::from_range(*r)))
            .collect();
        let moves = rebalance(&current, &[0, 1, 2, 3]).unwrap();
        let moved: u32 = moves.iter().map(|m| m.slots.len()).sum();
        assert_eq!(moved, 4096);
        assert!(moves.iter().all(|m| m.to == 3));
    }

    #[test]
    fn draining_a_shard_hands_all_its_slots_to_the_others() {
        let split = even_split(4).unwrap();
        let current: BTreeMap<u32, SlotSet> = split
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, SlotSet::from_range(*r)))
            .collect();
        let moves = rebalance(&current, &[0, 1, 2]).unwrap();
        assert!(moves.iter().all(|m| m.from == 3));
        assert_eq!(moves.iter().map(|m| m.slots.len()).sum::<u32>(), 4096);
    }

    #[test]
    fn overlapping_ownership_is_refused() {
        let mut current = BTreeMap::new();
        current.insert(0u32, SlotSet::from_range(range(0, 10)));
        current.insert(1u32, SlotSet::from_range(range(10, 20)));
        assert!(matches!(
            rebalance(&current, &[0, 1]),
            Err(SlotError::Overlap { .. })
        ));
    }

    #[test]
    fn a_balanced_cluster_needs_no_move() {
        let current: BTreeMap<u32, SlotSet> = even_split(5)
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, r)| (i as u32, SlotSet::from_range(*r)))
            .collect();
        assert!(rebalance(&current, &[0, 1, 2, 3, 4]).unwrap().is_empty());
    }

    fn apply<K: Ord + Clone>(
        current: &BTreeMap<K, SlotSet>,
        moves: &[SlotMove<K>],
    ) -> BTreeMap<K, SlotSet> {
        let mut out = current.clone();
        for m in moves {
            let from = out.entry(m.from.clone()).or_default();
            assert!(
                m.slots.is_subset(from),
                "move gives slots the donor does not hold"
            );
            *from = from.difference(&m.slots);
            let to = out.entry(m.to.clone()).or_default();
            *to = to.union(&m.slots);
        }
        out
    }

    /// Random disjoint ownership of some or all slots by up to 6 owners.
    fn ownership() -> impl Strategy<Value = BTreeMap<u32, SlotSet>> {
        (
            1usize..=6,
            prop::collection::vec(0u32..7, 64),
            any::<bool>(),
        )
            .prop_map(|(owners, chunks, full)| {
                // 64 chunks of 256 slots each, given to an owner (or to nobody: 6).
                let mut map: BTreeMap<u32, SlotSet> = BTreeMap::new();
                for (i, owner) in chunks.iter().enumerate() {
                    let owner = if full { owner % owners as u32 } else { *owner };
                    if owner as usize >= owners {
                        continue;
                    }
                    let start = (i * 256) as u64;
                    let r = SlotRange::from_numbers(start, start + 255).unwrap();
                    map.entry(owner).or_default().insert_range(r);
                }
                map
            })
    }

    /// The fewest slots any balanced assignment must move, by brute force over which
    /// kept holders get the larger share.
    fn minimal_movement(current: &BTreeMap<u32, SlotSet>, keep: &[u32]) -> u32 {
        let total: u32 = current.values().map(|s| s.len()).sum();
        let n = keep.len() as u32;
        let base = total / n;
        let extra = (total % n) as usize;
        let counts: Vec<u32> = keep
            .iter()
            .map(|k| current.get(k).map(|s| s.len()).unwrap_or(0))
            .collect();
        let drained: u32 = current
            .iter()
            .filter(|(k, _)| !keep.contains(k))
            .map(|(_, s)| s.len())
            .sum();
        let mut best = u32::MAX;
        for mask in 0u32..(1 << keep.len()) {
            if mask.count_ones() as usize != extra {
                continue;
            }
            let excess: u32 = counts
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let t = base + u32::from(mask & (1 << i) != 0);
                    c.saturating_sub(t)
                })
                .sum();
            best = best.min(excess + drained);
        }
        best
    }

    proptest! {
        #[test]
        fn even_split_covers_every_slot_once_and_is_balanced(n in 1usize..=300) {
            let split = even_split(n).unwrap();
            prop_assert_eq!(split.len(), n);
            let set = SlotSet::from_ranges(split.clone());
            prop_assert!(set.is_full());
            let total: u32 = split.iter().map(|r| r.len()).sum();
            prop_assert_eq!(total, 16384);
            let min = split.iter().map(|r| r.len()).min().unwrap();
            let max = split.iter().map(|r| r.len()).max().unwrap();
            prop_assert!(max - min <= 1);
            // Contiguous and in order.
            for pair in split.windows(2) {
                prop_assert_eq!(pair[0].end().get() + 1, pair[1].start().get());
            }
        }

        #[test]
        fn set_operations_agree_with_slot_membership(
            a in prop::collection::vec((0u64..16384, 0u64..200), 0..8),
            b in prop::collection::vec((0u64..16384, 0u64..200), 0..8),
            probe in prop::collection::vec(0u64..16384, 32),
        ) {
            let mk = |v: &Vec<(u64, u64)>| SlotSet::from_ranges(
                v.iter().map(|&(s, l)| SlotRange::from_numbers(s, (s + l).min(16383)).unwrap()));
            let (a, b) = (mk(&a), mk(&b));
            let u = a.union(&b);
            let i = a.intersection(&b);
            let d = a.difference(&b);
            for p in probe {
                let s = Slot::new(p).unwrap();
                prop_assert_eq!(u.contains(s), a.contains(s) || b.contains(s));
                prop_assert_eq!(i.contains(s), a.contains(s) && b.contains(s));
                prop_assert_eq!(d.contains(s), a.contains(s) && !b.contains(s));
            }
            prop_assert_eq!(u.len() + i.len(), a.len() + b.len());
            prop_assert_eq!(a.complement().len() + a.len(), 16384);
            // Normalised: sorted, disjoint and never adjacent.
            for pair in u.ranges().windows(2) {
                prop_assert!(u32::from(pair[0].end().get()) + 1 < u32::from(pair[1].start().get()));
            }
            prop_assert_eq!(SlotSet::from_iter(u.iter()), u.clone());
        }

        #[test]
        fn lowest_takes_exactly_the_first_slots(
            a in prop::collection::vec((0u64..16384, 0u64..500), 1..8),
            count in 0u32..20000,
        ) {
            let set = SlotSet::from_ranges(
                a.iter().map(|&(s, l)| SlotRange::from_numbers(s, (s + l).min(16383)).unwrap()));
            let low = set.lowest(count);
            prop_assert_eq!(low.len(), count.min(set.len()));
            prop_assert!(low.is_subset(&set));
            let rest = set.difference(&low);
            if let (Some(hi), Some(lo)) = (low.ranges().last(), rest.ranges().first()) {
                prop_assert!(hi.end() < lo.start());
            }
        }

        #[test]
        fn rebalance_ends_exact_disjoint_balanced_and_minimal(
            current in ownership(),
            keep_mask in 1u32..64,
        ) {
            let keep: Vec<u32> = (0..6).filter(|i| keep_mask & (1 << i) != 0).collect();
            let moves = rebalance(&current, &keep).unwrap();
            let after = apply(&current, &moves);
            // Coverage exact: the same slots are held, by one owner each.
            let before_all = current.values().fold(SlotSet::new(), |acc, s| acc.union(s));
            let mut after_all = SlotSet::new();
            for s in after.values() {
                prop_assert!(after_all.is_disjoint(s));
                after_all = after_all.union(s);
            }
            prop_assert_eq!(&before_all, &after_all);
            // Drained owners hold nothing.
            for (k, s) in &after {
                if !keep.contains(k) { prop_assert!(s.is_empty()); }
            }
            // Balanced within one slot.
            let counts: Vec<u32> = keep.iter().map(|k| after.get(k).map(|s| s.len()).unwrap_or(0)).collect();
            let max = *counts.iter().max().unwrap();
            let min = *counts.iter().min().unwrap();
            prop_assert!(max - min <= 1, "counts {:?}", counts);
            // Minimal movement.
            let moved: u32 = moves.iter().map(|m| m.slots.len()).sum();
            prop_assert_eq!(moved, minimal_movement(&current, &keep));
            // Idempotent: a balanced result needs no further move.
            prop_assert!(rebalance(&after, &keep).unwrap().is_empty());
        }
    }
}
