//! What a kubelet gives pods so they can talk to the API server in-cluster:
//! the `KUBERNETES_SERVICE_*` environment and a service-account token kept
//! fresh in the projected `kube-api-access-*` volume (which the apiserver's
//! ServiceAccount admission plugin adds to every pod, with the token, the
//! `kube-root-ca.crt` ConfigMap's `ca.crt` and the pod's namespace; the
//! volume itself is written by `volumes::materialize`).

use super::volumes::{FileOut, service_account_token, write_files};
use k8s_openapi::api::core::v1::Pod;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Where in-cluster clients find the API server: `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT` (kube's in-cluster config reads these two).
///
/// As a kubelet does, the agent passes the `kubernetes` Service's ClusterIP
/// and port 443 (agent/proxy.rs routes it to the API server's fabric address).
pub fn api_endpoint(apiserver_url: &str) -> Option<(String, u16)> {
    let rest = apiserver_url.strip_prefix("https://")?;
    let hostport = rest.split('/').next()?;
    let (host, port) = hostport.rsplit_once(':')?;
    Some((
        host.trim_matches(['[', ']']).to_string(),
        port.parse().ok()?,
    ))
}

/// The variables a kubelet sets in every container for the `kubernetes`
/// Service (the other Services' docker-link variables are not set).
pub fn kubernetes_service_env(apiserver_url: &str) -> Vec<(String, String)> {
    let Some((host, port)) = api_endpoint(apiserver_url) else {
        return Vec::new();
    };
    let url = format!("tcp://{host}:{port}");
    let prefix = format!("KUBERNETES_PORT_{port}_TCP");
    vec![
        ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()),
        ("KUBERNETES_PORT".into(), url.clone()),
        (prefix.clone(), url),
        (format!("{prefix}_PROTO"), "tcp".into()),
        (format!("{prefix}_PORT"), port.to_string()),
        (format!("{prefix}_ADDR"), host),
    ]
}

/// Adds `extra` to a container's environment, under what it sets itself (a
/// container's own `env` wins, as on a kubelet).
pub fn add_missing(env: &mut Vec<(String, String)>, extra: Vec<(String, String)>) {
    for (k, v) in extra {
        if !env.iter().any(|(name, _)| *name == k) {
            env.push((k, v));
        }
    }
}

/// One projected service-account token file of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFile {
    pub volume: String,
    pub path: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    pub mode: u32,
}

/// The `serviceAccountToken` sources of the pod's projected volumes.
pub fn token_files(pod: &Pod) -> Vec<TokenFile> {
    let mut out = Vec::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(p) = &v.projected else { continue };
        for src in p.sources.iter().flatten() {
            if let Some(t) = &src.service_account_token {
                out.push(TokenFile {
                    volume: v.name.clone(),
                    path: t.path.clone(),
                    audience: t.audience.clone(),
                    expiration_seconds: t.expiration_seconds.unwrap_or(3607),
                    mode: p.default_mode.unwrap_or(0o644) as u32,
                });
            }
        }
    }
    out
}

/// When a token of `expiration_seconds` is renewed: at 80 % of its lifetime,
/// as the kubelet does (at most daily).
pub fn refresh_after(expiration_seconds: i64) -> Duration {
    let secs = expiration_seconds.clamp(600, 86_400 * 5 / 4) as u64;
    Duration::from_secs(secs * 4 / 5)
}

/// Keeps the pod's projected tokens fresh: a new bound token through the
/// TokenRequest API before the old one expires, written over the old file
/// (atomically, so a reader sees one or the other). `volume_dirs` are the
/// host folders of the pod's volumes. Abort the task when the pod stops.
pub fn spawn_token_refresh(
    client: kube::Client,
    pod: Pod,
    volume_dirs: Vec<(String, PathBuf)>,
) -> Option<JoinHandle<()>> {
    let files = token_files(&pod);
    let period = files
        .iter()
        .map(|f| refresh_after(f.expiration_seconds))
        .min()?;
    Some(tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            for f in &files {
                let Some((_, dir)) = volume_dirs.iter().find(|(n, _)| *n == f.volume) else {
                    continue;
                };
                refresh_one(&client, &pod, f, dir).await;
            }
        }
    }))
}

async fn refresh_one(client: &kube::Client, pod: &Pod, f: &TokenFile, dir: &Path) {
    let token =
        service_account_token(client, pod, f.audience.clone(), Some(f.expiration_seconds)).await;
    if token.is_empty() {
        return;
    }
    let file = FileOut {
        path: f.path.clone(),
        content: token.into_bytes(),
        mode: f.mode,
    };
    match write_files(&f.volume, dir, &[file]) {
        Ok(()) => tracing::info!(
            pod = %pod.metadata.name.as_deref().unwrap_or_default(),
            volume = %f.volume,
            "service-account token refreshed"
        ),
        Err(e) => tracing::warn!(error = %e, "writing a refreshed token failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PodSpec, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
    };

    #[test]
    fn the_api_endpoint_is_the_apiservers_fabric_address() {
        assert_eq!(
            api_endpoint("https://10.101.255.1:36443"),
            Some(("10.101.255.1".to_string(), 36443))
        );
        let env = kubernetes_service_env("https://10.101.255.1:36443");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("10.101.255.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("36443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://10.101.255.1:36443"));
        assert!(kubernetes_service_env("nonsense").is_empty());
    }

    #[test]
    fn a_containers_own_env_wins() {
        let mut env = vec![("KUBERNETES_SERVICE_HOST".to_string(), "x".to_string())];
        add_missing(
            &mut env,
            kubernetes_service_env("https://10.101.255.1:1234"),
        );
        assert_eq!(env[0].1, "x");
        assert!(
            env.iter()
                .any(|(k, v)| k == "KUBERNETES_SERVICE_PORT" && v == "1234")
        );
    }

    #[test]
    fn tokens_of_the_kube_api_access_volume_renew_at_80_percent() {
        let pod = Pod {
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "kube-api-access-abcde".into(),
                    projected: Some(ProjectedVolumeSource {
                        default_mode: Some(0o644),
                        sources: Some(vec![VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                path: "token".into(),
                                expiration_seconds: Some(3607),
                                audience: None,
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let f = token_files(&pod);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].volume, "kube-api-access-abcde");
        assert_eq!(f[0].path, "token");
        assert_eq!(refresh_after(3607), Duration::from_secs(2885));
        assert_eq!(refresh_after(60), Duration::from_secs(480));
    }
}
