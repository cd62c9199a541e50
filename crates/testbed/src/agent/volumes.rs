// Over 600 lines: the node agent's volumes: claims, binding, expansion and their faults.
//! Volumes: each pod volume becomes a folder under
//! `DIR/pods/<ns>_<name>_<uid>/volumes/<volume>` (or, for a PersistentVolume, the
//! PV's own folder under `DIR/volumes/`), which `runtime` binds at the mount
//! paths. ConfigMap, Secret, downward API and projected contents are written
//! as files on every container start (so a restart sees updates), and the
//! ConfigMap and Secret volumes of a running pod are kept current every few
//! seconds, as the kubelet's sync does (a renewed certificate reaches a
//! running server without a restart).

use super::spec::{PodFacts, field_value};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Errors preparing a pod's volumes. All of them leave the pod waiting in
/// ContainerCreating and are retried.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {volume}: {message}")]
    NotReady { volume: String, message: String },
    #[error("volume {volume}: kind not supported by the testbed")]
    Unsupported { volume: String },
    #[error("volume {volume}: writing {path}: {source}")]
    Write {
        volume: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume {volume}: reading {what}: {source}")]
    Api {
        volume: String,
        what: String,
        source: kube::Error,
    },
}

/// One file to write inside a volume folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOut {
    pub path: String,
    pub content: Vec<u8>,
    pub mode: u32,
}

/// Files of a ConfigMap/Secret projection: every key, or only `items` (each to
/// its own path and mode). A missing item key is an error unless `optional`.
pub fn project_keys(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
) -> Result<Vec<FileOut>, String> {
    match items {
        None | Some([]) => Ok(data
            .iter()
            .map(|(k, v)| FileOut {
                path: k.clone(),
                content: v.clone(),
                mode: default_mode,
            })
            .collect()),
        Some(items) => {
            let mut out = Vec::new();
            for item in items {
                match data.get(&item.key) {
                    Some(v) => out.push(FileOut {
                        path: item.path.clone(),
                        content: v.clone(),
                        mode: item.mode.map(|m| m as u32).unwrap_or(default_mode),
                    }),
                    None if optional => {}
                    None => return Err(format!("key {:?} not found", item.key)),
                }
            }
            Ok(out)
        }
    }
}

/// Files of a downward API projection (fieldRef items; resourceFieldRef items
/// from the pod's first container).
pub fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    facts: &PodFacts,
    default_mode: u32,
    node: &crate::state::NodeSpec,
) -> Result<Vec<FileOut>, String> {
    let mut out = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            field_value(pod, &f.field_path, facts)
                .ok_or_else(|| format!("unsupported fieldRef {:?}", f.field_path))?
        } else if let Some(r) = &item.resource_field_ref {
            let spec = pod.spec.as_ref();
            let container = spec
                .and_then(|s| {
                    let name = r.container_name.as_deref().unwrap_or_default();
                    s.containers
                        .iter()
                        .find(|c| c.name == name)
                        .or(s.containers.first())
                })
                .ok_or_else(|| "resourceFieldRef without a container".to_string())?;
            super::spec::resource_value(
                container,
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
                &node.cpu,
                &node.memory,
            )
            .ok_or_else(|| format!("unsupported resourceFieldRef {:?}", r.resource))?
        } else {
            String::new()
        };
        out.push(FileOut {
            path: item.path.clone(),
            content: value.into_bytes(),
            mode: item.mode.map(|m| m as u32).unwrap_or(default_mode),
        });
    }
    Ok(out)
}

/// A namespaced object whose keys pods read as files or environment: a
/// ConfigMap or a Secret.
trait KeyedObject:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
{
    /// How messages name the kind.
    const KIND: &'static str;

    /// Every key with its value as bytes.
    fn bytes_map(&self) -> BTreeMap<String, Vec<u8>>;
}

impl KeyedObject for ConfigMap {
    const KIND: &'static str = "configmap";

    fn bytes_map(&self) -> BTreeMap<String, Vec<u8>> {
        let mut m: BTreeMap<String, Vec<u8>> = self
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        for (k, v) in self.binary_data.iter().flatten() {
            m.insert(k.clone(), v.0.clone());
        }
        m
    }
}

impl KeyedObject for Secret {
    const KIND: &'static str = "secret";

    fn bytes_map(&self) -> BTreeMap<String, Vec<u8>> {
        let mut m: BTreeMap<String, Vec<u8>> = self
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        for (k, v) in self.string_data.iter().flatten() {
            m.insert(k.clone(), v.clone().into_bytes());
        }
        m
    }
}

/// The keys of each named object of kind `K` in `ns`, as text (missing or
/// unreadable ones are left out).
async fn text_maps<K: KeyedObject>(
    client: &kube::Client,
    ns: &str,
    names: std::collections::BTreeSet<String>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut out = BTreeMap::new();
    for name in names {
        if let Ok(Some(obj)) = api.get_opt(&name).await {
            let m = obj
                .bytes_map()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                .collect();
            out.insert(name, m);
        }
    }
    out
}

/// Reads the ConfigMaps and Secrets the pod's env refers to (missing ones are
/// left out; `spec::container_env` decides whether that is an error).
pub async fn env_sources(client: &kube::Client, pod: &Pod, facts: &mut PodFacts) {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let mut cms = std::collections::BTreeSet::new();
    let mut secrets = std::collections::BTreeSet::new();
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for c in containers {
        for e in c.env.iter().flatten() {
            if let Some(f) = &e.value_from {
                if let Some(k) = &f.config_map_key_ref {
                    cms.insert(k.name.clone());
                }
                if let Some(k) = &f.secret_key_ref {
                    secrets.insert(k.name.clone());
                }
            }
        }
        for f in c.env_from.iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &f.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    facts
        .config_maps
        .extend(text_maps::<ConfigMap>(client, &ns, cms).await);
    facts
        .secrets
        .extend(text_maps::<Secret>(client, &ns, secrets).await);
}

/// Writes `files` into `dir`, replacing what a previous start wrote (the folder
/// itself stays, so an existing bind mount of it stays valid).
pub fn write_files(volume: &str, dir: &Path, files: &[FileOut]) -> Result<(), VolumeError> {
    let werr = |path: &Path, source| VolumeError::Write {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    for f in files {
        if f.path.starts_with('/') || f.path.split('/').any(|c| c == "..") {
            return Err(VolumeError::NotReady {
                volume: volume.to_string(),
                message: format!(
                    "item path {:?} must be relative and stay inside the volume",
                    f.path
                ),
            });
        }
        let path = dir.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| werr(parent, e))?;
        }
        let tmp = path.with_extension("testbed-tmp");
        std::fs::write(&tmp, &f.content).map_err(|e| werr(&tmp, e))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode & 0o7777))
            .map_err(|e| werr(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| werr(&path, e))?;
    }
    Ok(())
}

/// How often a running pod's ConfigMap and Secret volumes are brought up to
/// date. The kubelet does it on its periodic sync (about a minute plus its
/// cache TTL); the testbed is quicker so suites need not wait.
pub const OBJECT_VOLUME_SYNC: std::time::Duration = std::time::Duration::from_secs(5);

/// The files of `files` whose content or mode differs from what `dir` holds:
/// only these are written again, so an unchanged Secret does not touch the
/// volume (and programs watching a file's time see no change).
pub fn changed_files(dir: &Path, files: &[FileOut]) -> Vec<FileOut> {
    files
        .iter()
        .filter(|f| {
            let path = dir.join(&f.path);
            let same_content = std::fs::read(&path).is_ok_and(|c| c == f.content);
            let same_mode = std::fs::metadata(&path)
                .is_ok_and(|m| m.permissions().mode() & 0o777 & !0o070 == f.mode & 0o777 & !0o070);
            !(same_content && same_mode)
        })
        .cloned()
        .collect()
}

/// Keeps the ConfigMap and Secret volumes of a running pod current, as the
/// kubelet's sync does: every [`OBJECT_VOLUME_SYNC`] the objects are read
/// again and changed keys written over the old files (atomically; keys that
/// went away stay, and a missing object leaves the files as they are).
/// Nothing is read while `api_connected` says the node is cut off from the
/// API. Abort the task when the pod stops.
pub fn spawn_object_volume_sync(
    client: kube::Client,
    pod: Pod,
    volume_dirs: BTreeMap<String, PathBuf>,
    api_connected: impl Fn() -> bool + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    let spec = pod.spec.clone()?;
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let fs_group = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok());
    let volumes: Vec<(Volume, PathBuf)> = spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.config_map.is_some() || v.secret.is_some())
        .filter_map(|v| volume_dirs.get(&v.name).cloned().map(|d| (v, d)))
        .collect();
    if volumes.is_empty() {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            tokio::time::sleep(OBJECT_VOLUME_SYNC).await;
            if !api_connected() {
                continue;
            }
            for (vol, dir) in &volumes {
                let files = if let Some(cm) = &vol.config_map {
                    object_files::<ConfigMap>(
                        &client,
                        &ns,
                        &cm.name,
                        cm.items.as_deref(),
                        cm.default_mode,
                        Some(true),
                    )
                    .await
                } else if let Some(sv) = &vol.secret {
                    object_files::<Secret>(
                        &client,
                        &ns,
                        sv.secret_name.as_deref().unwrap_or_default(),
                        sv.items.as_deref(),
                        sv.default_mode,
                        Some(true),
                    )
                    .await
                } else {
                    continue;
                };
                let Ok(files) = files else { continue };
                let changed = changed_files(dir, &files);
                if changed.is_empty() {
                    continue;
                }
                let result = write_files(&vol.name, dir, &changed).and_then(|()| {
                    for f in changed.iter().filter(|_| fs_group.is_some()) {
                        let path = dir.join(&f.path);
                        set_ownership(&path, fs_group.unwrap_or_default(), false).map_err(
                            |source| VolumeError::Write {
                                volume: vol.name.clone(),
                                path,
                                source,
                            },
                        )?;
                    }
                    Ok(())
                });
                match result {
                    Ok(()) => tracing::info!(
                        pod = %pod.metadata.name.as_deref().unwrap_or_default(),
                        volume = %vol.name,
                        files = changed.len(),
                        "volume contents updated"
                    ),
                    Err(e) => tracing::warn!(error = %e, "updating a volume failed"),
                }
            }
        }
    }))
}

/// Where each volume of the pod lives on the host, after making sure its
/// contents are there. `pod_dir` is the pod's folder.
pub async fn materialize(
    client: &kube::Client,
    pod: &Pod,
    pod_dir: &Path,
    facts: &PodFacts,
    node: &crate::state::NodeSpec,
) -> Result<BTreeMap<String, PathBuf>, VolumeError> {
    let mut out = BTreeMap::new();
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    let fs_group = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok());
    for vol in spec.volumes.iter().flatten() {
        let path = materialize_one(client, pod, pod_dir, facts, node, vol).await?;
        let write = |source| VolumeError::Write {
            volume: vol.name.clone(),
            path: path.clone(),
            source,
        };
        // The kubelet makes an emptyDir writable by everyone.
        if vol.empty_dir.is_some() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                .map_err(write)?;
        }
        if let Some(gid) = fs_group {
            let writable = vol.empty_dir.is_some()
                || vol.persistent_volume_claim.is_some()
                || vol.ephemeral.is_some();
            let managed = writable
                || vol.config_map.is_some()
                || vol.secret.is_some()
                || vol.downward_api.is_some()
                || vol.projected.is_some();
            let on_root_mismatch = spec
                .security_context
                .as_ref()
                .and_then(|s| s.fs_group_change_policy.as_deref())
                == Some("OnRootMismatch");
            if managed && !(on_root_mismatch && owned_already(&path, gid, writable)) {
                set_ownership(&path, gid, writable).map_err(write)?;
            }
        }
        out.insert(vol.name.clone(), path);
    }
    Ok(out)
}

/// `fsGroupChangePolicy: OnRootMismatch`: the volume's root already has the
/// group and the permissions `set_ownership` gives, so the walk is skipped
/// (a claim full of data is not walked on every container start).
fn owned_already(root: &Path, gid: u32, writable: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(root) else {
        return false;
    };
    let want = if writable { 0o2070 } else { 0o050 };
    meta.gid() == gid && (!meta.is_dir() || meta.mode() & want == want)
}

/// `fsGroup`, as the kubelet applies it: every file of the volume belongs to
/// the group and is group-readable (and -writable for emptyDir and claims,
/// whose folders also pass the group on to new files with setgid). Owners
/// stay as they are.
pub fn set_ownership(root: &Path, gid: u32, writable: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(root)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(root, None, Some(gid))?;
    let mut mode = meta.permissions().mode() & 0o7777;
    mode |= 0o040;
    if writable {
        mode |= 0o020;
    }
    if meta.is_dir() {
        mode |= 0o010;
        if writable {
            mode |= 0o2000;
        }
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode))?;
        for entry in std::fs::read_dir(root)? {
            set_ownership(&entry?.path(), gid, writable)?;
        }
    } else {
        if mode & 0o100 != 0 {
            mode |= 0o010;
        }
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn materialize_one(
    client: &kube::Client,
    pod: &Pod,
    pod_dir: &Path,
    facts: &PodFacts,
    node: &crate::state::NodeSpec,
    vol: &Volume,
) -> Result<PathBuf, VolumeError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = vol.name.clone();
    let dir = pod_dir.join("volumes").join(&vol.name);
    let not_ready = |message: String| VolumeError::NotReady {
        volume: name.clone(),
        message,
    };
    let api_err = |what: String, source| VolumeError::Api {
        volume: name.clone(),
        what,
        source,
    };
    if vol.empty_dir.is_some() {
        write_files(&name, &dir, &[])?;
        return Ok(dir);
    }
    if let Some(cm) = &vol.config_map {
        let files = object_files::<ConfigMap>(
            client,
            &ns,
            &cm.name,
            cm.items.as_deref(),
            cm.default_mode,
            cm.optional,
        )
        .await
        .map_err(&not_ready)?;
        write_files(&name, &dir, &files)?;
        return Ok(dir);
    }
    if let Some(sv) = &vol.secret {
        let sname = sv.secret_name.clone().unwrap_or_default();
        let files = object_files::<Secret>(
            client,
            &ns,
            &sname,
            sv.items.as_deref(),
            sv.default_mode,
            sv.optional,
        )
        .await
        .map_err(&not_ready)?;
        write_files(&name, &dir, &files)?;
        return Ok(dir);
    }
    if let Some(d) = &vol.downward_api {
        let mode = d.default_mode.unwrap_or(0o644) as u32;
        let files = downward_files(
            pod,
            d.items.as_deref().unwrap_or_default(),
            facts,
            mode,
            node,
        )
        .map_err(&not_ready)?;
        write_files(&name, &dir, &files)?;
        return Ok(dir);
    }
    if let Some(p) = &vol.projected {
        let mode = p.default_mode.unwrap_or(0o644);
        let mut files = Vec::new();
        for src in p.sources.iter().flatten() {
            if let Some(cm) = &src.config_map {
                files.extend(
                    object_files::<ConfigMap>(
                        client,
                        &ns,
                        &cm.name,
                        cm.items.as_deref(),
                        Some(mode),
                        cm.optional,
                    )
                    .await
                    .map_err(&not_ready)?,
                );
            }
            if let Some(s) = &src.secret {
                files.extend(
                    object_files::<Secret>(
                        client,
                        &ns,
                        &s.name,
                        s.items.as_deref(),
                        Some(mode),
                        s.optional,
                    )
                    .await
                    .map_err(&not_ready)?,
                );
            }
            if let Some(d) = &src.downward_api {
                files.extend(
                    downward_files(
                        pod,
                        d.items.as_deref().unwrap_or_default(),
                        facts,
                        mode as u32,
                        node,
                    )
                    .map_err(&not_ready)?,
                );
            }
            if let Some(t) = &src.service_account_token {
                let token =
                    service_account_token(client, pod, t.audience.clone(), t.expiration_seconds)
                        .await;
                files.push(FileOut {
                    path: t.path.clone(),
                    content: token.into_bytes(),
                    mode: mode as u32,
                });
            }
        }
        write_files(&name, &dir, &files)?;
        return Ok(dir);
    }
    if let Some(claim) = &vol.persistent_volume_claim {
        return pv_path(client, &ns, &claim.claim_name)
            .await
            .map_err(|e| match e {
                Ok(m) => not_ready(m),
                Err(source) => api_err(format!("claim {}", claim.claim_name), source),
            });
    }
    if vol.ephemeral.is_some() {
        let claim = format!(
            "{}-{}",
            pod.metadata.name.clone().unwrap_or_default(),
            vol.name
        );
        return pv_path(client, &ns, &claim).await.map_err(|e| match e {
            Ok(m) => not_ready(m),
            Err(source) => api_err(format!("claim {claim}"), source),
        });
    }
    if let Some(hp) = &vol.host_path {
        let path = PathBuf::from(&hp.path);
        match hp.type_.as_deref().unwrap_or_default() {
            "FileOrCreate" if !path.exists() => {
                if let Some(parent) = path.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                std::fs::write(&path, b"").map_err(|e| VolumeError::Write {
                    volume: name.clone(),
                    path: path.clone(),
                    source: e,
                })?;
            }
            "" | "DirectoryOrCreate" if !path.exists() => {
                std::fs::create_dir_all(&path).map_err(|e| VolumeError::Write {
                    volume: name.clone(),
                    path: path.clone(),
                    source: e,
                })?;
            }
            _ if !path.exists() => {
                return Err(not_ready(format!("hostPath {} does not exist", hp.path)));
            }
            _ => {}
        }
        return Ok(path);
    }
    Err(VolumeError::Unsupported { volume: name })
}

/// The files of a ConfigMap or Secret volume or projection source: every
/// key, or only `items`; a missing object is an error unless `optional`.
async fn object_files<K: KeyedObject>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: Option<i32>,
    optional: Option<bool>,
) -> Result<Vec<FileOut>, String> {
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let optional = optional == Some(true);
    let kind = K::KIND;
    match api.get_opt(name).await {
        Ok(Some(obj)) => project_keys(
            &obj.bytes_map(),
            items,
            mode.unwrap_or(0o644) as u32,
            optional,
        )
        .map_err(|e| format!("{kind} {name:?}: {e}")),
        Ok(None) if optional => Ok(Vec::new()),
        Ok(None) => Err(format!("{kind} {name:?} not found")),
        Err(e) => Err(format!("reading {kind} {name:?}: {e}")),
    }
}

/// A bound service account token for the pod (empty when the API refuses, so
/// a pod that never talks to the API still starts).
pub(crate) async fn service_account_token(
    client: &kube::Client,
    pod: &Pod,
    audience: Option<String>,
    expiration: Option<i64>,
) -> String {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audience.into_iter().collect()),
            expiration_seconds: Some(expiration.unwrap_or(3607)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..Default::default()
    };
    match api
        .create_token_request(&sa, &PostParams::default(), &req)
        .await
    {
        Ok(t) => t.status.and_then(|s| s.token).unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, serviceaccount = %sa, "token request failed; writing an empty token");
            String::new()
        }
    }
}

/// The host folder of the PV bound to a claim. `Err(Ok(msg))` means not bound
/// yet (retry), `Err(Err(e))` an API error.
async fn pv_path(
    client: &kube::Client,
    ns: &str,
    claim: &str,
) -> Result<PathBuf, Result<String, kube::Error>> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc = pvcs
        .get_opt(claim)
        .await
        .map_err(Err)?
        .ok_or_else(|| Ok(format!("claim {claim:?} not found")))?;
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Ok(format!("claim {claim:?} is not bound yet")))?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs
        .get_opt(&pv_name)
        .await
        .map_err(Err)?
        .ok_or_else(|| Ok(format!("volume {pv_name:?} not found")))?;
    let spec = pv.spec.unwrap_or_default();
    let path = spec
        .local
        .map(|l| l.path)
        .or(spec.host_path.map(|h| h.path))
        .ok_or_else(|| Ok(format!("volume {pv_name:?} is neither local nor hostPath")))?;
    let path = PathBuf::from(path);
    if !path.exists() {
        std::fs::create_dir_all(&path)
            .map_err(|e| Ok(format!("creating {}: {e}", path.display())))?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_changed_files_are_written_again() {
        let dir = std::env::temp_dir().join(format!("vol-sync-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let f = |path: &str, content: &str| FileOut {
            path: path.into(),
            content: content.as_bytes().to_vec(),
            mode: 0o644,
        };
        write_files("v", &dir, &[f("a", "1"), f("b", "2")]).unwrap();
        let changed = changed_files(&dir, &[f("a", "1"), f("b", "3"), f("c", "4")]);
        let paths: Vec<&str> = changed.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["b", "c"]);
        // fsGroup adds group bits; that is not a change.
        set_ownership(&dir.join("a"), 0, false).unwrap();
        assert!(changed_files(&dir, &[f("a", "1")]).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;
    use k8s_openapi::api::core::v1::{ObjectFieldSelector, PodSpec};

    fn data() -> BTreeMap<String, Vec<u8>> {
        [
            ("valkey.conf".to_string(), b"port 6379\n".to_vec()),
            ("other".to_string(), b"x".to_vec()),
        ]
        .into()
    }

    #[test]
    fn fs_group_makes_a_volume_group_writable_and_passes_the_group_on() {
        let dir = std::env::temp_dir().join(format!("vk-fsgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), b"x").unwrap();
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        set_ownership(&dir, 4242, true).unwrap();
        use std::os::unix::fs::MetadataExt;
        let d = std::fs::metadata(dir.join("sub")).unwrap();
        assert_eq!(d.gid(), 4242);
        assert_eq!(d.mode() & 0o2070, 0o2070);
        let f = std::fs::metadata(dir.join("sub/f")).unwrap();
        assert_eq!(f.gid(), 4242);
        assert_eq!(f.mode() & 0o777, 0o660);
        assert!(owned_already(&dir, 4242, true));
        assert!(!owned_already(&dir, 4243, true));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn all_keys_become_files_without_items() {
        let f = project_keys(&data(), None, 0o644, false).unwrap();
        assert_eq!(f.len(), 2);
        assert!(
            f.iter()
                .any(|f| f.path == "valkey.conf" && f.content == b"port 6379\n")
        );
    }

    #[test]
    fn items_pick_keys_paths_and_modes() {
        let items = vec![KeyToPath {
            key: "valkey.conf".into(),
            path: "conf/v.conf".into(),
            mode: Some(0o600),
        }];
        let f = project_keys(&data(), Some(&items), 0o644, false).unwrap();
        assert_eq!(
            f,
            vec![FileOut {
                path: "conf/v.conf".into(),
                content: b"port 6379\n".to_vec(),
                mode: 0o600
            }]
        );
        let missing = vec![KeyToPath {
            key: "nope".into(),
            path: "n".into(),
            mode: None,
        }];
        assert!(
            project_keys(&data(), Some(&missing), 0o644, false)
                .unwrap_err()
                .contains("nope")
        );
        assert!(
            project_keys(&data(), Some(&missing), 0o644, true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn downward_files_carry_pod_fields() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("vk-0".into());
        pod.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        pod.spec = Some(PodSpec::default());
        let item = |path: &str, field: &str| DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: field.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let node = crate::state::NodeSpec {
            name: "n".into(),
            region: "r".into(),
            zone: "z".into(),
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 10,
            pod_cidr: "10.0.0.0/24".into(),
        };
        let f = downward_files(
            &pod,
            &[
                item("name", "metadata.name"),
                item("labels", "metadata.labels"),
            ],
            &PodFacts::default(),
            0o644,
            &node,
        )
        .unwrap();
        assert_eq!(f[0].content, b"vk-0");
        assert_eq!(f[1].content, b"a=\"b\"");
        assert!(
            downward_files(
                &pod,
                &[item("x", "spec.bogus")],
                &PodFacts::default(),
                0o644,
                &node
            )
            .is_err()
        );
    }

    #[test]
    fn written_files_replace_old_ones_and_refuse_escapes() {
        let dir = std::env::temp_dir().join(format!("vol-test-{}", std::process::id()));
        let f = |path: &str, c: &[u8]| FileOut {
            path: path.into(),
            content: c.to_vec(),
            mode: 0o640,
        };
        write_files("v", &dir, &[f("a/b.conf", b"1")]).unwrap();
        write_files("v", &dir, &[f("a/b.conf", b"2")]).unwrap();
        assert_eq!(std::fs::read(dir.join("a/b.conf")).unwrap(), b"2");
        let mode = std::fs::metadata(dir.join("a/b.conf"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o640);
        assert!(write_files("v", &dir, &[f("../x", b"")]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
