//! The testbed's image store: `testbed image load FILE` imports an OCI archive
//! (a tar of an OCI image layout, what `make image` writes and `podman save
//! --format oci-archive` gives) into `DIR/images/`, unpacking its layers into a
//! root filesystem. The node agent runs a container whose image was loaded from
//! that root filesystem (see `agent::rootfs`); images never loaded stay
//! placeholders (or the cached valkey-server for Valkey images).
//!
//! Layout:
//!
//! ```text
//! DIR/images/index.json          {"refs": {"docker.io/library/valkey-operator:0.1.0": "<id>"}}
//! DIR/images/<id>/config.json    the image config blob (User, Entrypoint, Cmd, Env, WorkingDir)
//! DIR/images/<id>/rootfs/        the layers, unpacked in order (whiteouts applied)
//! ```
//!
//! `<id>` is the hex of the config digest, like a container runtime's image id.

use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder of the image store in a testbed directory.
pub fn store_dir(testbed_dir: &Path) -> PathBuf {
    testbed_dir.join("images")
}

/// `index.json` of the store: normalized reference -> image id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Index {
    pub refs: BTreeMap<String, String>,
}

/// The parts of an OCI image config the runtime uses.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageConfig {
    #[serde(rename = "User", default)]
    pub user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    pub cmd: Option<Vec<String>>,
    #[serde(rename = "Env", default)]
    pub env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    pub working_dir: Option<String>,
}

/// A loaded image, ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub id: String,
    pub rootfs: PathBuf,
    pub config: ImageConfig,
}

/// A reference as a container runtime normalizes it: `valkey-operator:0.1.0`
/// -> `docker.io/library/valkey-operator:0.1.0`, no tag -> `:latest`. Digest
/// references (`@sha256:...`) are kept as written after the name.
pub fn normalize(reference: &str) -> String {
    let reference = reference.trim();
    let (name, suffix) = match reference.split_once('@') {
        Some((n, d)) => (n, format!("@{d}")),
        None => (reference, String::new()),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let (name, tag) = match last.rsplit_once(':') {
        Some((_, t)) => (&name[..name.len() - t.len() - 1], t.to_string()),
        None if suffix.is_empty() => (name, "latest".to_string()),
        None => (name, String::new()),
    };
    let first = name.split('/').next().unwrap_or(name);
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let tag = if tag.is_empty() {
        String::new()
    } else {
        format!(":{tag}")
    };
    format!("{full}{tag}{suffix}")
}

/// The references an OCI index entry names: `io.containerd.image.name` and
/// `org.opencontainers.image.ref.name` (when it is a full reference, not
/// just a tag).
fn names_of(annotations: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for key in [
        "io.containerd.image.name",
        "org.opencontainers.image.ref.name",
    ] {
        if let Some(v) = annotations.get(key) {
            let looks_full = v.contains(':') || v.contains('/');
            if looks_full && !v.is_empty() {
                out.push(normalize(v));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[derive(Debug, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct OciIndex {
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: ImageConfig,
}

fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf> {
    let (algo, hex) = digest
        .split_once(':')
        .with_context(|| format!("bad digest {digest:?}"))?;
    ensure!(
        !algo.contains('/') && !hex.contains('/') && !hex.contains(".."),
        "bad digest {digest:?}"
    );
    Ok(layout.join("blobs").join(algo).join(hex))
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a layer's whiteout entries remove from the layers below it: `.wh.NAME`
/// deletes NAME, `.wh..wh..opq` empties its folder. Returns (paths to
/// delete, folders to empty), relative to the root.
pub fn whiteouts(entries: &[String]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut delete = Vec::new();
    let mut empty = Vec::new();
    for e in entries {
        let e = e.trim_start_matches("./").trim_end_matches('/');
        let path = Path::new(e);
        let Some(base) = path.file_name().and_then(|b| b.to_str()) else {
            continue;
        };
        let parent = path.parent().unwrap_or(Path::new("")).to_path_buf();
        if base == ".wh..wh..opq" {
            empty.push(parent);
        } else if let Some(name) = base.strip_prefix(".wh.") {
            delete.push(parent.join(name));
        }
    }
    (delete, empty)
}

fn safe_rel(p: &Path) -> bool {
    p.components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Unpacks one layer blob (tar, gzip or not) over `rootfs`.
fn apply_layer(blob: &Path, rootfs: &Path) -> Result<()> {
    let listing = run(Command::new("tar").arg("-tf").arg(blob))?;
    let entries: Vec<String> = listing.lines().map(str::to_string).collect();
    for e in &entries {
        ensure!(
            !e.starts_with('/') && !e.split('/').any(|c| c == ".."),
            "layer {} has an unsafe entry {e:?}",
            blob.display()
        );
    }
    let (delete, empty) = whiteouts(&entries);
    for d in delete.iter().filter(|p| safe_rel(p)) {
        let p = rootfs.join(d);
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    for d in empty.iter().filter(|p| safe_rel(p)) {
        if let Ok(rd) = std::fs::read_dir(rootfs.join(d)) {
            for entry in rd.flatten() {
                let p = entry.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }
    run(Command::new("tar")
        .arg("-xf")
        .arg(blob)
        .arg("-C")
        .arg(rootfs)
        .args(["--numeric-owner", "--same-permissions", "--same-owner"]))?;
    for e in &entries {
        let base = Path::new(e.trim_end_matches('/'))
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or_default();
        if base.starts_with(".wh.") {
            let _ = std::fs::remove_file(rootfs.join(e.trim_start_matches("./")));
        }
    }
    Ok(())
}

/// The store of one testbed.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
}

impl Store {
    pub fn at(testbed_dir: &Path) -> Store {
        Store {
            dir: store_dir(testbed_dir),
        }
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join("index.json")
    }

    pub fn index(&self) -> Index {
        std::fs::read_to_string(self.index_path())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn save_index(&self, index: &Index) -> Result<()> {
        let tmp = self.dir.join("index.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(index)?)?;
        std::fs::rename(&tmp, self.index_path())?;
        Ok(())
    }

    /// The loaded image a pod's `image` names, if any.
    pub fn resolve(&self, image: &str) -> Option<Loaded> {
        let id = self.index().refs.get(&normalize(image))?.clone();
        let dir = self.dir.join(&id);
        let config: ImageConfig = serde_json::from_str::<ConfigBlob>(
            &std::fs::read_to_string(dir.join("config.json")).ok()?,
        )
        .ok()?
        .config;
        let rootfs = dir.join("rootfs");
        rootfs.is_dir().then_some(Loaded { id, rootfs, config })
    }

    /// Imports an OCI archive; `names` adds references to those the archive's
    /// index carries. Returns the image id and every reference it is known by.
    pub fn load(&self, archive: &Path, names: &[String]) -> Result<(String, Vec<String>)> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let work = self.dir.join(format!(".load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let layout = work.join("layout");
        std::fs::create_dir_all(&layout)?;
        let result = self.load_in(archive, names, &work, &layout);
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    fn load_in(
        &self,
        archive: &Path,
        names: &[String],
        work: &Path,
        layout: &Path,
    ) -> Result<(String, Vec<String>)> {
        run(Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(layout)
            .arg("--no-same-owner"))
        .with_context(|| format!("unpacking {}", archive.display()))?;
        let index: OciIndex = serde_json::from_str(
            &std::fs::read_to_string(layout.join("index.json"))
                .context("the archive has no index.json: not an OCI image layout")?,
        )
        .context("parsing index.json")?;
        ensure!(!index.manifests.is_empty(), "index.json names no manifest");
        ensure!(
            index.manifests.len() == 1,
            "index.json names {} manifests; the testbed loads one image per archive",
            index.manifests.len()
        );
        let desc = &index.manifests[0];
        let mut refs = names_of(&desc.annotations);
        refs.extend(names.iter().map(|n| normalize(n)));
        refs.sort();
        refs.dedup();
        ensure!(
            !refs.is_empty(),
            "the archive names no image reference; give one with --name"
        );
        ensure!(
            desc.media_type.is_empty() || desc.media_type.contains("manifest"),
            "{}: only single-platform image manifests are supported",
            desc.media_type
        );
        let manifest: Manifest =
            serde_json::from_str(&std::fs::read_to_string(blob_path(layout, &desc.digest)?)?)
                .context("parsing the image manifest")?;
        let config_bytes = std::fs::read(blob_path(layout, &manifest.config.digest)?)?;
        let _: ConfigBlob =
            serde_json::from_slice(&config_bytes).context("parsing the image config")?;
        let id = manifest
            .config
            .digest
            .split_once(':')
            .map(|(_, h)| h.to_string())
            .unwrap_or_default();
        ensure!(
            !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()),
            "bad config digest"
        );

        let target = self.dir.join(&id);
        if !target.join("rootfs").is_dir() {
            let staging = work.join("image");
            let rootfs = staging.join("rootfs");
            std::fs::create_dir_all(&rootfs)?;
            for layer in &manifest.layers {
                apply_layer(&blob_path(layout, &layer.digest)?, &rootfs)
                    .with_context(|| format!("layer {}", layer.digest))?;
            }
            std::fs::write(staging.join("config.json"), &config_bytes)?;
            let _ = std::fs::remove_dir_all(&target);
            std::fs::rename(&staging, &target)
                .with_context(|| format!("moving the image to {}", target.display()))?;
        }
        let mut index = self.index();
        for r in &refs {
            index.refs.insert(r.clone(), id.clone());
        }
        self.save_index(&index)?;
        Ok((id, refs))
    }
}

/// The uid, gid and home of `user` (`uid`, `uid:gid`, `name` or `name:group`)
/// per the image's `/etc/passwd` and `/etc/group`; numeric ids need no entry.
pub fn resolve_user(rootfs: &Path, user: &str) -> Result<(u32, u32, String)> {
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let u = if u.is_empty() { "0" } else { u };
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && (f[0] == u || f[2] == u));
    let uid: u32 = match u.parse() {
        Ok(n) => n,
        Err(_) => entry
            .as_ref()
            .and_then(|f| f[2].parse().ok())
            .with_context(|| format!("user {u:?} is not in the image's /etc/passwd"))?,
    };
    let home = entry
        .as_ref()
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| "/".into());
    let gid: u32 = match g {
        Some(g) => match g.parse() {
            Ok(n) => n,
            Err(_) => group
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .with_context(|| format!("group {g:?} is not in the image's /etc/group"))?,
        },
        None => entry
            .as_ref()
            .and_then(|f| f[3].parse().ok())
            .unwrap_or(uid),
    };
    Ok((uid, gid, home))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalize_as_a_runtime_does() {
        assert_eq!(
            normalize("valkey-operator:0.1.0"),
            "docker.io/library/valkey-operator:0.1.0"
        );
        assert_eq!(normalize("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalize("valkey/valkey:9"), "docker.io/valkey/valkey:9");
        assert_eq!(
            normalize("docker.io/library/valkey-operator:0.1.0"),
            "docker.io/library/valkey-operator:0.1.0"
        );
        assert_eq!(normalize("localhost:5000/x/y"), "localhost:5000/x/y:latest");
        assert_eq!(normalize("ghcr.io/a/b:1"), "ghcr.io/a/b:1");
        assert_eq!(normalize("a/b@sha256:00"), "docker.io/a/b@sha256:00");
    }

    #[test]
    fn index_annotations_name_the_image_but_a_bare_tag_does_not() {
        let a: BTreeMap<String, String> = [
            (
                "org.opencontainers.image.ref.name".to_string(),
                "valkey-operator:0.1.0".to_string(),
            ),
            (
                "io.containerd.image.name".to_string(),
                "docker.io/library/valkey-operator:0.1.0".to_string(),
            ),
        ]
        .into();
        assert_eq!(
            names_of(&a),
            vec!["docker.io/library/valkey-operator:0.1.0"]
        );
        let tag_only: BTreeMap<String, String> = [(
            "org.opencontainers.image.ref.name".to_string(),
            "0.1.0".to_string(),
        )]
        .into();
        assert!(names_of(&tag_only).is_empty());
    }

    #[test]
    fn whiteouts_delete_lower_files_and_opaque_markers_empty_folders() {
        let entries: Vec<String> = ["etc/", "etc/.wh.old.conf", "./var/lib/.wh..wh..opq", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (delete, empty) = whiteouts(&entries);
        assert_eq!(delete, vec![PathBuf::from("etc/old.conf")]);
        assert_eq!(empty, vec![PathBuf::from("var/lib")]);
    }

    #[test]
    fn users_resolve_through_the_images_passwd() {
        let root = std::env::temp_dir().join(format!("img-user-{}", std::process::id()));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(
            root.join("etc/passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )
        .unwrap();
        std::fs::write(root.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
        assert_eq!(
            resolve_user(&root, "65532:65532").unwrap(),
            (65532, 65532, "/home/nonroot".into())
        );
        assert_eq!(
            resolve_user(&root, "nonroot").unwrap(),
            (65532, 65532, "/home/nonroot".into())
        );
        assert_eq!(resolve_user(&root, "").unwrap(), (0, 0, "/root".into()));
        assert_eq!(
            resolve_user(&root, "1000").unwrap(),
            (1000, 1000, "/".into())
        );
        assert!(resolve_user(&root, "nobody").is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
