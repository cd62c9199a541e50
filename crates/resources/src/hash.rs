//! A stable content hash for annotations that must not change between operator
//! builds (a changed hash would restart every member of every cluster).
//!
//! FNV-1a 64: tiny, defined by its constants, the same on every platform and
//! Rust release (unlike `std`'s `DefaultHasher`, whose algorithm may change).

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Accumulates bytes; [`Fnv::hex`] gives the 16-hex-digit digest.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(OFFSET)
    }
}

impl Fnv {
    /// Feeds `bytes`, then a separator, so `("ab","c")` and `("a","bc")` differ.
    pub fn feed(mut self, bytes: &[u8]) -> Self {
        for b in bytes.iter().chain(std::iter::once(&0xff)) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self
    }

    /// Feeds the JSON form of `value` (serde_json writes maps of a
    /// `BTreeMap` and struct fields in a fixed order).
    pub fn feed_json<T: serde::Serialize>(self, value: &T) -> Self {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        self.feed(&bytes)
    }

    /// The digest as 16 lower-case hex digits.
    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_pinned_so_operator_upgrades_restart_nothing() {
        // FNV-1a 64 of b"valkey" followed by the 0xff separator.
        assert_eq!(Fnv::default().feed(b"valkey").hex(), "cb6d515bcf23d37c");
    }

    #[test]
    fn field_boundaries_matter() {
        assert_ne!(
            Fnv::default().feed(b"ab").feed(b"c").hex(),
            Fnv::default().feed(b"a").feed(b"bc").hex()
        );
    }
}
