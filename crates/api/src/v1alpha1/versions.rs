//! The Valkey versions the operator supports, read from `spec.image`'s tag.
//!
//! An image whose tag names a version (`valkey/valkey:9.1.2`, `:9.1`, `:9`,
//! `:9.0-alpine`) must name one at or after [`OLDEST_SUPPORTED`]; a tag that
//! names none (`latest`, a digest, a build of one's own) is taken on trust.
//! Downgrades are judged against the version the members run
//! ([`downgrade_refusal`]): Valkey cannot load an RDB file a newer major or
//! minor version wrote, so going back across one is refused unless forced.

use std::cmp::Ordering;
use std::fmt;

/// A Valkey version as a tag names it: major, and minor and patch when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagVersion {
    pub major: u32,
    pub minor: Option<u32>,
    pub patch: Option<u32>,
}

impl fmt::Display for TagVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.major)?;
        if let Some(minor) = self.minor {
            write!(f, ".{minor}")?;
        }
        if let Some(patch) = self.patch {
            write!(f, ".{patch}")?;
        }
        Ok(())
    }
}

/// The oldest Valkey the operator supports (major, minor): 9.0, the oldest
/// the e2e suites run ([`TESTED`]) and the first with what every member is
/// given: `shutdown-on-sigterm failover` (a primary hands its slots over
/// before it stops) and atomic slot migration (shard scaling). An 8.x
/// server would not start with the members' config.
pub const OLDEST_SUPPORTED: (u32, u32) = (9, 0);

/// The versions the e2e suites run (docs/operator.md and docs/guide/upgrades.md, Upgrades).
pub const TESTED: &[&str] = &["9.0.0", "9.1.2"];

/// The annotation that lets a downgrade across a major or minor version go
/// ahead (the user accepts that members may not load their data files).
pub const ANNOTATION_ALLOW_DOWNGRADE: &str = "valkey.rs/allow-downgrade";

/// The version `image`'s tag names, or `None` (no tag, `latest`, a digest,
/// a tag that does not start with a version).
pub fn tag_version(image: &str) -> Option<TagVersion> {
    if image.contains('@') {
        return None;
    }
    let last = image.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    // `8.1-alpine`, `9.0.0-trixie`: the version is what comes before `-`.
    let version = tag.split('-').next()?;
    let mut parts = version.split('.');
    let number = |p: Option<&str>| -> Option<Option<u32>> {
        match p {
            None => Some(None),
            Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok().map(Some)
            }
            Some(_) => None,
        }
    };
    let major = number(parts.next())??;
    let minor = number(parts.next())?;
    let patch = number(parts.next())?;
    if parts.next().is_some() {
        return None;
    }
    Some(TagVersion {
        major,
        minor,
        patch,
    })
}

/// The first Valkey release (the fork of Redis 7.2.4): a tag naming an
/// earlier version names no Valkey release, so it is left to the image
/// pull to fail rather than judged here.
pub const FIRST_RELEASE: (u32, u32) = (7, 2);

/// The Valkey release `image`'s tag names: [`tag_version`], when it is one
/// (not before [`FIRST_RELEASE`]).
fn release(image: &str) -> Option<TagVersion> {
    tag_version(image).filter(|v| (v.major, v.minor.unwrap_or(u32::MAX)) >= FIRST_RELEASE)
}

/// Why `image` names a version the operator does not support, or `None`.
pub fn unsupported(image: &str) -> Option<String> {
    let v = release(image)?;
    let (major, minor) = OLDEST_SUPPORTED;
    let older = match v.major.cmp(&major) {
        Ordering::Less => true,
        Ordering::Equal => v.minor.is_some_and(|m| m < minor),
        Ordering::Greater => false,
    };
    older.then(|| {
        format!(
            "Valkey {v} is older than the oldest version this operator supports, {major}.{minor} \
             (tested: {})",
            TESTED.join(", ")
        )
    })
}

/// A running version as `INFO server` says it (`valkey_version:9.1.2`).
pub fn parse_running(text: &str) -> Option<(u32, u32, u32)> {
    let mut it = text.trim().split('.').map(|p| p.parse::<u32>().ok());
    let v = (it.next()??, it.next()??, it.next()??);
    Some(v)
}

/// Why going from the `running` versions (what the members say) to `image`
/// is a downgrade Valkey may not survive, or `None`: the tag names an older
/// major, or the same major and an older minor, than the newest member
/// runs. Unversioned tags and patch downgrades pass.
pub fn downgrade_refusal(image: &str, running: &[(u32, u32, u32)]) -> Option<String> {
    let v = release(image)?;
    let newest = running.iter().max()?;
    let older = match v.major.cmp(&newest.0) {
        Ordering::Less => true,
        Ordering::Equal => v.minor.is_some_and(|m| m < newest.1),
        Ordering::Greater => false,
    };
    older.then(|| {
        format!(
            "spec.image: Valkey {v} is older than the {}.{}.{} the members run: an older major or \
             minor version may not load the data files a newer one wrote (the RDB format), so the \
             roll is not started; set the annotation {ANNOTATION_ALLOW_DOWNGRADE}=true on the \
             cluster to go ahead anyway",
            newest.0, newest.1, newest.2
        )
    })
}

/// Why the members that already run `image` show it to be a downgrade, or
/// `None`: one of them says (INFO server) an older major, or the same major
/// and an older minor, than the newest version a member on another image
/// says. The truth behind tags that name no version (`latest`, digests,
/// `stable`): [`downgrade_refusal`] passes them, and the first member rolled
/// to such an image tells what it runs before a second one is rolled.
/// `on_image`: (pod, version) of the members whose pod runs `image`;
/// `others`: the versions of the members whose pod runs another image.
pub fn rolled_downgrade_refusal(
    image: &str,
    on_image: &[(String, (u32, u32, u32))],
    others: &[(u32, u32, u32)],
) -> Option<String> {
    let newest = others.iter().max()?;
    let (pod, v) = on_image
        .iter()
        .filter(|(_, v)| (v.0, v.1) < (newest.0, newest.1))
        .min_by_key(|(_, v)| *v)?;
    Some(format!(
        "spec.image: {image} runs Valkey {}.{}.{} (member pod {pod} says so), older than the \
         {}.{}.{} the other members run: an older major or minor version may not load the data \
         files a newer one wrote (the RDB format), so the roll goes no further; set spec.image \
         back, or set the annotation {ANNOTATION_ALLOW_DOWNGRADE}=true on the cluster to go ahead \
         anyway",
        v.0, v.1, v.2, newest.0, newest.1, newest.2
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_rolled_to_an_unversioned_tag_tells_the_downgrade() {
        let rolled = [("c-0-1-0".to_string(), (9, 0, 0))];
        let why =
            rolled_downgrade_refusal("valkey/valkey:stable", &rolled, &[(9, 1, 2), (9, 1, 2)])
                .unwrap();
        assert!(
            why.starts_with(
                "spec.image: valkey/valkey:stable runs Valkey 9.0.0 (member pod c-0-1-0"
            ),
            "{why}"
        );
        assert!(why.contains("older than the 9.1.2"), "{why}");
        assert!(why.contains(ANNOTATION_ALLOW_DOWNGRADE), "{why}");
        // A patch release older, a newer one, or nothing to compare with: no refusal.
        let patch = [("c-0-1-0".to_string(), (9, 1, 0))];
        assert_eq!(rolled_downgrade_refusal("v:x", &patch, &[(9, 1, 2)]), None);
        let newer = [("c-0-1-0".to_string(), (10, 0, 0))];
        assert_eq!(rolled_downgrade_refusal("v:x", &newer, &[(9, 1, 2)]), None);
        assert_eq!(rolled_downgrade_refusal("v:x", &rolled, &[]), None);
        assert_eq!(rolled_downgrade_refusal("v:x", &[], &[(9, 1, 2)]), None);
    }

    #[test]
    fn tags_name_versions_or_nothing() {
        let v = |major, minor, patch| {
            Some(TagVersion {
                major,
                minor,
                patch,
            })
        };
        assert_eq!(tag_version("valkey/valkey:9.1.2"), v(9, Some(1), Some(2)));
        assert_eq!(tag_version("valkey/valkey:9.1"), v(9, Some(1), None));
        assert_eq!(tag_version("valkey/valkey:9"), v(9, None, None));
        assert_eq!(tag_version("valkey/valkey:8.1-alpine"), v(8, Some(1), None));
        assert_eq!(
            tag_version("reg.example.com:5000/team/valkey:7.2.5"),
            v(7, Some(2), Some(5))
        );
        for none in [
            "valkey/valkey",
            "valkey/valkey:latest",
            "valkey/valkey:unstable",
            "valkey/valkey@sha256:abcd",
            "valkey/valkey:9.1.2.4",
            "valkey/valkey:9..1",
            "reg.example.com:5000/valkey",
        ] {
            assert_eq!(tag_version(none), None, "{none}");
        }
    }

    #[test]
    fn versions_before_9_0_are_refused_and_unversioned_tags_pass() {
        assert!(unsupported("valkey/valkey:7.2.5").is_some_and(|m| m.contains("9.0")));
        assert!(unsupported("valkey/valkey:7").is_some());
        assert!(unsupported("valkey/valkey:8.1.4").is_some());
        assert!(unsupported("valkey/valkey:8").is_some());
        assert!(unsupported("valkey/valkey:8.1-alpine").is_some());
        // Not a Valkey release at all: the pull fails instead.
        assert_eq!(unsupported("valkey/valkey:0.0.0-missing"), None);
        assert_eq!(unsupported("valkey/valkey:6.2"), None);
        for ok in [
            "valkey/valkey:9",
            "valkey/valkey:9.0",
            "valkey/valkey:9.0.0",
            "valkey/valkey:10.0",
            "valkey/valkey:latest",
            "mine/valkey:custom",
        ] {
            assert_eq!(unsupported(ok), None, "{ok}");
        }
    }

    #[test]
    fn a_downgrade_across_a_minor_is_refused_a_patch_one_is_not() {
        let running = [(9, 1, 2), (9, 0, 0)];
        let why = downgrade_refusal("valkey/valkey:9.0.0", &running).unwrap_or_default();
        assert!(
            why.contains("9.1.2") && why.contains(ANNOTATION_ALLOW_DOWNGRADE),
            "{why}"
        );
        assert!(downgrade_refusal("valkey/valkey:8", &running).is_some());
        assert_eq!(downgrade_refusal("valkey/valkey:9.1.1", &running), None);
        assert_eq!(downgrade_refusal("valkey/valkey:9.1", &running), None);
        assert_eq!(downgrade_refusal("valkey/valkey:9", &running), None);
        assert_eq!(downgrade_refusal("valkey/valkey:latest", &running), None);
        assert_eq!(downgrade_refusal("valkey/valkey:9.0.0", &[]), None);
        assert_eq!(
            downgrade_refusal("valkey/valkey:0.0.0-missing", &running),
            None
        );
        assert_eq!(parse_running("9.1.2"), Some((9, 1, 2)));
        assert_eq!(parse_running("garbage"), None);
    }
}
