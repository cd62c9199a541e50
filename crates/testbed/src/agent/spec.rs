// Over 600 lines: what the node agent reads of a pod spec, field by field, and its tests.
//! From a container spec to a process: the argv (Kubernetes command/args
//! semantics on top of the Valkey image's entrypoint), the environment (with the
//! downward API and `$(VAR)` expansion), and the bind mounts that put volumes at
//! their mount paths. Everything here is pure; `runtime` runs the result.

use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors turning a container spec into a process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("container {container}: env {var}: {message}")]
    Env {
        container: String,
        var: String,
        message: String,
    },
    #[error("container {container}: volumeMount {mount}: {message}")]
    Mount {
        container: String,
        mount: String,
        message: String,
    },
}

/// The Valkey image's `ENTRYPOINT ["docker-entrypoint.sh"]` and `CMD ["valkey-server"]`.
const IMAGE_ENTRYPOINT: &str = "docker-entrypoint.sh";
const IMAGE_CMD: &str = "valkey-server";
/// The Valkey image's `WORKDIR`.
pub const IMAGE_WORKDIR: &str = "/data";

/// Real binaries of one Valkey version the agent maps image paths to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// The folder that holds them, first on the container's PATH (so `sh -c
    /// 'exec valkey-server'` finds this version's).
    pub dir: PathBuf,
    pub valkey_server: PathBuf,
    pub valkey_cli: PathBuf,
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// The argv of a Valkey-image container, as the image would run it: Kubernetes
/// rules first (command replaces the entrypoint, args replace the cmd), then the
/// image's `docker-entrypoint.sh` (an argv starting with `-x` or `*.conf` gets
/// `valkey-server` in front), then image paths of the Valkey binaries mapped to
/// the real ones. Anything else (`sh -c ...`) runs as given, with the real
/// binaries on PATH.
pub fn valkey_argv(command: &[String], args: &[String], bins: &Binaries) -> Vec<String> {
    let mut argv: Vec<String> = match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => std::iter::once(IMAGE_ENTRYPOINT.to_string())
            .chain(args.iter().cloned())
            .collect(),
        (true, true) => vec![IMAGE_ENTRYPOINT.to_string(), IMAGE_CMD.to_string()],
    };
    if argv.first().map(|a| basename(a)) == Some(IMAGE_ENTRYPOINT) {
        argv.remove(0);
        let wants_server = argv
            .first()
            .map(|a| a.starts_with('-') || a.ends_with(".conf"))
            .unwrap_or(true);
        if wants_server {
            argv.insert(0, IMAGE_CMD.to_string());
        }
    }
    if let Some(first) = argv.first_mut() {
        match basename(first) {
            "valkey-server" | "redis-server" => {
                *first = bins.valkey_server.display().to_string();
            }
            "valkey-cli" | "redis-cli" => *first = bins.valkey_cli.display().to_string(),
            _ => {}
        }
    }
    argv
}

/// Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` is a
/// literal `$`, and references to undefined variables stay as written.
pub fn expand(input: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' && i + 1 < chars.len() {
            if chars[i + 1] == '$' {
                out.push('$');
                i += 2;
                continue;
            }
            if chars[i + 1] == '('
                && let Some(close) = chars[i + 2..].iter().position(|c| *c == ')')
            {
                let name: String = chars[i + 2..i + 2 + close].iter().collect();
                match vars(&name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        out.push_str("$(");
                        out.push_str(&name);
                        out.push(')');
                    }
                }
                i += close + 3;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// What the downward API and env sources can see of the pod at run time.
#[derive(Debug, Clone, Default)]
pub struct PodFacts {
    pub pod_ip: String,
    pub host_ip: String,
    /// ConfigMaps of the pod's namespace that the spec references (missing ones absent).
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// Secrets likewise, decoded.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
}

/// The value of a downward-API `fieldRef` path, or None when unsupported.
pub fn field_value(pod: &Pod, path: &str, facts: &PodFacts) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_entry = |map: &Option<BTreeMap<String, String>>, key: &str| {
        Some(
            map.as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default(),
        )
    };
    let format_map = |map: &Option<BTreeMap<String, String>>| {
        map.as_ref()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    if let Some(key) = bracket_key(path, "metadata.labels") {
        return map_entry(&meta.labels, &key);
    }
    if let Some(key) = bracket_key(path, "metadata.annotations") {
        return map_entry(&meta.annotations, &key);
    }
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => Some(meta.namespace.clone().unwrap_or_else(|| "default".into())),
        "metadata.uid" => meta.uid.clone(),
        "metadata.labels" => Some(format_map(&meta.labels)),
        "metadata.annotations" => Some(format_map(&meta.annotations)),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => Some(
            spec.and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".into()),
        ),
        "status.podIP" | "status.podIPs" => Some(facts.pod_ip.clone()),
        "status.hostIP" | "status.hostIPs" => Some(facts.host_ip.clone()),
        _ => None,
    }
}

/// `metadata.labels['app']` -> `app`.
fn bracket_key(path: &str, prefix: &str) -> Option<String> {
    let rest = path
        .strip_prefix(prefix)?
        .strip_prefix('[')?
        .strip_suffix(']')?;
    let unquoted = rest
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        .unwrap_or(rest);
    Some(unquoted.to_string())
}

/// Parses a Kubernetes quantity into a number of base units (cores or bytes).
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        s if s.starts_with('e') || s.starts_with('E') => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

/// A `resourceFieldRef` value: the container's request or limit divided by the
/// divisor and rounded up, as Kubernetes does; limits default to the node's
/// allocatable (`node_cpu`, `node_memory`).
pub fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    node_cpu: &str,
    node_memory: &str,
) -> Option<String> {
    let res = container.resources.as_ref();
    let get = |which: &str, name: &str| {
        let map = match which {
            "limits" => res.and_then(|r| r.limits.as_ref()),
            _ => res.and_then(|r| r.requests.as_ref()),
        };
        map.and_then(|m| m.get(name)).map(|q| q.0.clone())
    };
    let (which, name) = resource.split_once('.')?;
    let raw = match (which, name) {
        ("limits", "cpu") => get("limits", "cpu").unwrap_or_else(|| node_cpu.to_string()),
        ("limits", "memory") => get("limits", "memory").unwrap_or_else(|| node_memory.to_string()),
        ("requests", "cpu") => get("requests", "cpu").unwrap_or_else(|| "0".into()),
        ("requests", "memory") => get("requests", "memory").unwrap_or_else(|| "0".into()),
        (w, n) => get(w, n)?,
    };
    let value = parse_quantity(&raw)?;
    let div = divisor
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Some(format!("{}", (value / div).ceil() as i64))
}

/// The container's environment in Kubernetes order (`envFrom`, then `env`, each
/// `value` expanded against the variables before it), plus what a runtime adds
/// (`HOSTNAME`, and `PATH`/`HOME` when the spec does not set them).
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn container_env(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
    default_path: &str,
    node_cpu: &str,
    node_memory: &str,
) -> Result<Vec<(String, String)>, SpecError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(slot) = env.iter_mut().find(|(name, _)| *name == k) {
            slot.1 = v;
        } else {
            env.push((k, v));
        }
    };
    let err = |var: &str, message: String| SpecError::Env {
        container: container.name.clone(),
        var: var.to_string(),
        message,
    };
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    set(&mut env, "PATH".into(), default_path.to_string());
    set(&mut env, "HOME".into(), "/root".into());
    set(&mut env, "HOSTNAME".into(), hostname);

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(cm) = &from.config_map_ref {
            match facts.config_maps.get(&cm.name) {
                Some(data) => {
                    for (k, v) in data {
                        set(&mut env, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if cm.optional == Some(true) => {}
                None => return Err(err("envFrom", format!("configmap {:?} not found", cm.name))),
            }
        }
        if let Some(sr) = &from.secret_ref {
            match facts.secrets.get(&sr.name) {
                Some(data) => {
                    for (k, v) in data {
                        set(&mut env, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if sr.optional == Some(true) => {}
                None => return Err(err("envFrom", format!("secret {:?} not found", sr.name))),
            }
        }
    }

    for var in container.env.iter().flatten() {
        let value = if let Some(v) = &var.value {
            let snapshot = env.clone();
            expand(v, &|name| {
                snapshot
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
        } else if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                field_value(pod, &f.field_path, facts).ok_or_else(|| {
                    err(
                        &var.name,
                        format!("unsupported fieldRef {:?}", f.field_path),
                    )
                })?
            } else if let Some(r) = &from.resource_field_ref {
                let target = match &r.container_name {
                    Some(name) if !name.is_empty() => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.iter().find(|c| &c.name == name))
                        .unwrap_or(container),
                    _ => container,
                };
                resource_value(
                    target,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    node_cpu,
                    node_memory,
                )
                .ok_or_else(|| {
                    err(
                        &var.name,
                        format!("unsupported resourceFieldRef {:?}", r.resource),
                    )
                })?
            } else if let Some(k) = &from.config_map_key_ref {
                match facts.config_maps.get(&k.name).and_then(|m| m.get(&k.key)) {
                    Some(v) => v.clone(),
                    None if k.optional == Some(true) => continue,
                    None => {
                        return Err(err(
                            &var.name,
                            format!("key {:?} of configmap {:?} not found", k.key, k.name),
                        ));
                    }
                }
            } else if let Some(k) = &from.secret_key_ref {
                match facts.secrets.get(&k.name).and_then(|m| m.get(&k.key)) {
                    Some(v) => v.clone(),
                    None if k.optional == Some(true) => continue,
                    None => {
                        return Err(err(
                            &var.name,
                            format!("key {:?} of secret {:?} not found", k.key, k.name),
                        ));
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut env, var.name.clone(), value);
    }
    Ok(env)
}

/// One bind mount inside the container's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
    /// The source is a regular file (the target is then created as a file).
    pub file: bool,
}

/// Bind mounts for a container's `volumeMounts`, with `subPath` and
/// `subPathExpr` (expanded against the container env) resolved inside the
/// volume folder. `volumes` maps a volume name to its folder on the host.
pub fn volume_mounts(
    container: &Container,
    volumes: &BTreeMap<String, PathBuf>,
    env: &[(String, String)],
) -> Result<Vec<Mount>, SpecError> {
    let mut out = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let err = |message: String| SpecError::Mount {
            container: container.name.clone(),
            mount: vm.mount_path.clone(),
            message,
        };
        let base = volumes
            .get(&vm.name)
            .ok_or_else(|| err(format!("no volume named {:?} in the pod", vm.name)))?;
        let sub = match (&vm.sub_path, &vm.sub_path_expr) {
            (Some(p), _) if !p.is_empty() => p.clone(),
            (_, Some(e)) if !e.is_empty() => expand(e, &|name| {
                env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            }),
            _ => String::new(),
        };
        if sub.starts_with('/') || sub.split('/').any(|c| c == "..") {
            return Err(err(format!(
                "subPath {sub:?} must be relative and stay inside the volume"
            )));
        }
        if !vm.mount_path.starts_with('/') {
            return Err(err("mountPath must be absolute".into()));
        }
        let source = if sub.is_empty() {
            base.clone()
        } else {
            base.join(&sub)
        };
        out.push(Mount {
            source,
            target: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only == Some(true),
            file: false,
        });
    }
    Ok(out)
}

/// The container's private working directory (unless a volume covers it): a
/// folder under `scratch`, so two pods never share the host's copy and Valkey's
/// files (nodes.conf, dump.rdb) stay per pod. Never over a path in `keep` (the
/// testbed dir, the binaries), which the container and its probes still need.
pub fn scratch_mounts(
    workdir: &Path,
    mounts: &[Mount],
    scratch: &Path,
    keep: &[PathBuf],
) -> Vec<Mount> {
    let covered = |p: &Path| mounts.iter().any(|m| p.starts_with(&m.target));
    let hides = |p: &Path| keep.iter().any(|k| k.starts_with(p));
    let mut out = Vec::new();
    for target in [workdir] {
        if target == Path::new("/") || covered(target) || hides(target) {
            continue;
        }
        let name = target
            .to_string_lossy()
            .trim_start_matches('/')
            .replace('/', "_");
        out.push(Mount {
            source: scratch.join(name),
            target: target.to_path_buf(),
            read_only: false,
            file: false,
        });
    }
    out
}

/// Single-quotes a string for `sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Absolute paths of the tools the wrapper script calls (the container's PATH
/// may be anything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptTools {
    pub mount: PathBuf,
    pub mkdir: PathBuf,
}

/// The order to make bind mounts in: a mount goes after every mount whose
/// target is its parent (nesting), and before any mount whose target would hide
/// its source. When both rules cannot hold (a cycle), the rest go by depth.
pub fn mount_order(mounts: &[Mount]) -> Vec<&Mount> {
    let mut left: Vec<&Mount> = mounts.iter().collect();
    left.sort_by_key(|m| m.target.components().count());
    let must_wait = |m: &Mount, other: &Mount| {
        // `m` waits for `other` when `other` is its parent mount.
        // ... or when mounting it now would hide `other`'s source.
        m.target != other.target
            && (m.target.starts_with(&other.target) || other.source.starts_with(&m.target))
    };
    let mut out = Vec::new();
    while !left.is_empty() {
        let ready = left.iter().position(|m| {
            !left
                .iter()
                .any(|o| !std::ptr::eq(*o, *m) && must_wait(m, o))
        });
        let i = ready.unwrap_or(0);
        out.push(left.remove(i));
    }
    out
}

/// The `sh -c` script that runs inside the container's fresh mount namespace:
/// create the mount points, bind the volumes (parents before children),
/// re-mount read-only ones, enter the working directory and exec the argv
/// (passed as `"$@"`, so it is never re-parsed by the shell). The runtime
/// calls [`wrapper_script_with`]; this is its form without an image root.
#[cfg(test)]
pub fn wrapper_script(
    mounts: &[Mount],
    workdir: &Path,
    hostname: &str,
    tools: &ScriptTools,
) -> String {
    wrapper_script_with(mounts, workdir, hostname, tools, None)
}

/// Extra script of a container that runs in an image's root filesystem
/// (`rootfs::RootFs`): `prelude` before the volume mounts, `epilogue` last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootScript {
    pub prelude: String,
    pub epilogue: String,
}

/// [`wrapper_script`], with an image root's prelude and epilogue when given.
///
/// Every mount point is created and bound first; only then are the read-only
/// ones re-mounted read-only (a kubelet's order). Re-mounting a parent
/// read-only before binding a volume inside it would leave no way to create
/// the child's mount point (`/config` read-only, then `mkdir /config/users`).
pub fn wrapper_script_with(
    mounts: &[Mount],
    workdir: &Path,
    hostname: &str,
    tools: &ScriptTools,
    root: Option<&RootScript>,
) -> String {
    let sorted = mount_order(mounts);
    let mount = shell_quote(&tools.mount.display().to_string());
    let mkdir = shell_quote(&tools.mkdir.display().to_string());
    let mut s = String::from("set -e\n");
    if !hostname.is_empty() {
        // The container has a UTS namespace of its own: its hostname is the pod's.
        s.push_str(&format!(
            "printf %s {} > /proc/sys/kernel/hostname\n",
            shell_quote(hostname)
        ));
    }
    if let Some(r) = root {
        s.push_str(&r.prelude);
    }
    for m in &sorted {
        let t = shell_quote(&m.target.display().to_string());
        let src = shell_quote(&m.source.display().to_string());
        if m.file {
            let parent = m
                .target
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "/".into());
            s.push_str(&format!(
                "[ -e {t} ] || {{ {mkdir} -p {}; : > {t}; }}\n",
                shell_quote(&parent)
            ));
        } else {
            s.push_str(&format!("{mkdir} -p {t}\n"));
        }
        s.push_str(&format!("{mount} --bind {src} {t}\n"));
    }
    // Read-only last, children before parents (a child's remount never
    // needs its parent writable, but keep the order obvious).
    for m in sorted.iter().rev().filter(|m| m.read_only) {
        let t = shell_quote(&m.target.display().to_string());
        s.push_str(&format!("{mount} -o remount,bind,ro {t}\n"));
    }
    let wd = shell_quote(&workdir.display().to_string());
    s.push_str(&format!("{mkdir} -p {wd}\ncd {wd}\n"));
    if let Some(r) = root {
        s.push_str(&r.epilogue);
    }
    s.push_str("exec \"$@\"\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapKeySelector, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec,
        ResourceFieldSelector, ResourceRequirements, SecretKeySelector, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn bins() -> Binaries {
        Binaries {
            dir: "/opt/vk".into(),
            valkey_server: "/opt/vk/valkey-server".into(),
            valkey_cli: "/usr/bin/redis-cli".into(),
        }
    }
    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn image_default_runs_the_real_server() {
        assert_eq!(
            valkey_argv(&[], &[], &bins()),
            v(&["/opt/vk/valkey-server"])
        );
    }

    #[test]
    fn args_alone_go_through_the_image_entrypoint() {
        assert_eq!(
            valkey_argv(
                &[],
                &v(&["/etc/valkey/valkey.conf", "--port", "7000"]),
                &bins()
            ),
            v(&[
                "/opt/vk/valkey-server",
                "/etc/valkey/valkey.conf",
                "--port",
                "7000"
            ])
        );
        assert_eq!(
            valkey_argv(&[], &v(&["--cluster-enabled", "yes"]), &bins()),
            v(&["/opt/vk/valkey-server", "--cluster-enabled", "yes"])
        );
        assert_eq!(
            valkey_argv(&[], &v(&["valkey-server", "--port", "1"]), &bins()),
            v(&["/opt/vk/valkey-server", "--port", "1"])
        );
        assert_eq!(
            valkey_argv(&[], &v(&["sh", "-c", "x"]), &bins()),
            v(&["sh", "-c", "x"])
        );
    }

    #[test]
    fn command_overrides_the_entrypoint_and_image_paths_map_to_real_binaries() {
        assert_eq!(
            valkey_argv(
                &v(&["/usr/local/bin/valkey-server"]),
                &v(&["/conf/v.conf"]),
                &bins()
            ),
            v(&["/opt/vk/valkey-server", "/conf/v.conf"])
        );
        assert_eq!(
            valkey_argv(
                &v(&["docker-entrypoint.sh"]),
                &v(&["--port", "6380"]),
                &bins()
            ),
            v(&["/opt/vk/valkey-server", "--port", "6380"])
        );
        assert_eq!(
            valkey_argv(&v(&["valkey-cli", "ping"]), &[], &bins()),
            v(&["/usr/bin/redis-cli", "ping"])
        );
        assert_eq!(
            valkey_argv(&v(&["sh", "-c"]), &v(&["exec valkey-server"]), &bins()),
            v(&["sh", "-c", "exec valkey-server"])
        );
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let vars = |n: &str| match n {
            "POD_IP" => Some("10.0.0.5".to_string()),
            _ => None,
        };
        assert_eq!(expand("--ip=$(POD_IP)", &vars), "--ip=10.0.0.5");
        assert_eq!(expand("$(MISSING)/x", &vars), "$(MISSING)/x");
        assert_eq!(expand("$$(POD_IP)", &vars), "$(POD_IP)");
        assert_eq!(expand("cost $5 $(", &vars), "cost $5 $(");
        assert_eq!(expand("ü$(POD_IP)ü", &vars), "ü10.0.0.5ü");
    }

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("vk-0".into());
        p.metadata.namespace = Some("ns1".into());
        p.metadata.uid = Some("u-1".into());
        p.metadata.labels = Some([("app".to_string(), "vk".to_string())].into());
        p.spec = Some(PodSpec {
            node_name: Some("node-1a-1".into()),
            ..Default::default()
        });
        p
    }

    fn facts() -> PodFacts {
        PodFacts {
            pod_ip: "10.203.1.2".into(),
            host_ip: "10.203.1.1".into(),
            config_maps: [(
                "cm".to_string(),
                [("k".to_string(), "cv".to_string())].into(),
            )]
            .into(),
            secrets: [(
                "s".to_string(),
                [("pw".to_string(), "hunter2".to_string())].into(),
            )]
            .into(),
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn env_resolves_downward_api_refs_and_expansion() {
        let c = Container {
            name: "valkey".into(),
            env: Some(vec![
                field("POD_NAME", "metadata.name"),
                field("POD_NS", "metadata.namespace"),
                field("POD_IP", "status.podIP"),
                field("NODE", "spec.nodeName"),
                field("HOST_IP", "status.hostIP"),
                field("UID", "metadata.uid"),
                field("APP", "metadata.labels['app']"),
                EnvVar {
                    name: "ANNOUNCE".into(),
                    value: Some("$(POD_IP):6379".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "PW".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "s".into(),
                            key: "pw".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "CV".into(),
                    value_from: Some(EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cm".into(),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let env = container_env(&pod(), &c, &facts(), "/bin", "4", "8Gi").unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("POD_NAME"), Some("vk-0"));
        assert_eq!(get("POD_NS"), Some("ns1"));
        assert_eq!(get("POD_IP"), Some("10.203.1.2"));
        assert_eq!(get("NODE"), Some("node-1a-1"));
        assert_eq!(get("HOST_IP"), Some("10.203.1.1"));
        assert_eq!(get("UID"), Some("u-1"));
        assert_eq!(get("APP"), Some("vk"));
        assert_eq!(get("ANNOUNCE"), Some("10.203.1.2:6379"));
        assert_eq!(get("PW"), Some("hunter2"));
        assert_eq!(get("CV"), Some("cv"));
        assert_eq!(get("HOSTNAME"), Some("vk-0"));
        assert_eq!(get("PATH"), Some("/bin"));
    }

    #[test]
    fn a_missing_secret_key_names_the_variable() {
        let c = Container {
            name: "valkey".into(),
            env: Some(vec![EnvVar {
                name: "PW".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "nope".into(),
                        key: "pw".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let e = container_env(&pod(), &c, &facts(), "/bin", "4", "8Gi").unwrap_err();
        assert!(e.to_string().contains("PW"), "{e}");
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn resource_refs_round_up_like_kubernetes() {
        let c = Container {
            name: "valkey".into(),
            resources: Some(ResourceRequirements {
                limits: Some(
                    [
                        ("memory".to_string(), Quantity("1Gi".into())),
                        ("cpu".to_string(), Quantity("500m".into())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            env: Some(vec![EnvVar {
                name: "MEM_MB".into(),
                value_from: Some(EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.memory".into(),
                        divisor: Some(Quantity("1Mi".into())),
                        container_name: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let env = container_env(&pod(), &c, &facts(), "/bin", "4", "8Gi").unwrap();
        assert!(env.contains(&("MEM_MB".to_string(), "1024".to_string())));
        assert_eq!(
            resource_value(&c, "limits.cpu", None, "4", "8Gi").as_deref(),
            Some("1")
        );
        assert_eq!(
            resource_value(&c, "requests.cpu", None, "4", "8Gi").as_deref(),
            Some("0")
        );
        assert_eq!(parse_quantity("8Gi"), Some(8.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("bogus"), None);
    }

    #[test]
    fn sub_paths_resolve_inside_the_volume_and_never_escape_it() {
        let vols: BTreeMap<String, PathBuf> =
            [("conf".to_string(), PathBuf::from("/tb/v/conf"))].into();
        let mk = |sub: Option<&str>, expr: Option<&str>| Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "conf".into(),
                mount_path: "/etc/valkey/valkey.conf".into(),
                sub_path: sub.map(Into::into),
                sub_path_expr: expr.map(Into::into),
                read_only: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let env = vec![("POD".to_string(), "vk-0".to_string())];
        let m = volume_mounts(&mk(Some("valkey.conf"), None), &vols, &env).unwrap();
        assert_eq!(m[0].source, PathBuf::from("/tb/v/conf/valkey.conf"));
        assert!(m[0].read_only);
        let m = volume_mounts(&mk(None, Some("$(POD)/x")), &vols, &env).unwrap();
        assert_eq!(m[0].source, PathBuf::from("/tb/v/conf/vk-0/x"));
        assert!(volume_mounts(&mk(Some("../../etc"), None), &vols, &env).is_err());
        let unknown = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "nope".into(),
                mount_path: "/x".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(
            volume_mounts(&unknown, &vols, &env)
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
    }

    #[test]
    fn scratch_covers_the_workdir_unless_a_volume_does_or_it_would_hide_the_testbed() {
        let data = Mount {
            source: "/pv".into(),
            target: "/data".into(),
            read_only: false,
            file: false,
        };
        let keep = vec![PathBuf::from("/tmp/tb")];
        let s = scratch_mounts(
            Path::new("/data"),
            std::slice::from_ref(&data),
            Path::new("/scr"),
            &keep,
        );
        assert!(s.is_empty());
        let s = scratch_mounts(Path::new("/data"), &[], Path::new("/scr"), &keep);
        assert_eq!(s[0].source, PathBuf::from("/scr/data"));
        assert_eq!(s[0].target, PathBuf::from("/data"));
        assert!(scratch_mounts(Path::new("/tmp"), &[], Path::new("/scr"), &keep).is_empty());
    }

    #[test]
    fn mounts_are_ordered_parents_first_and_never_over_a_later_source() {
        let m = |s: &str, t: &str| Mount {
            source: s.into(),
            target: t.into(),
            read_only: false,
            file: false,
        };
        let mounts = vec![
            m("/scr/x", "/tmp"),
            m("/tmp/tb/v/conf", "/etc/valkey"),
            m("/tmp/tb/v/file", "/etc/valkey/x.conf"),
            m("/tmp/tb/v/etc", "/etc"),
        ];
        let order: Vec<&str> = mount_order(&mounts)
            .iter()
            .map(|m| m.target.to_str().unwrap())
            .collect();
        assert_eq!(
            order,
            vec!["/etc", "/etc/valkey", "/etc/valkey/x.conf", "/tmp"]
        );
    }

    #[test]
    fn the_wrapper_binds_parents_first_and_quotes_everything() {
        let tools = ScriptTools {
            mount: "/usr/bin/mount".into(),
            mkdir: "/usr/bin/mkdir".into(),
        };
        let mounts = vec![
            Mount {
                source: "/v/conf/valkey.conf".into(),
                target: "/etc/valkey/valkey.conf".into(),
                read_only: true,
                file: true,
            },
            Mount {
                source: "/v/it's".into(),
                target: "/etc".into(),
                read_only: false,
                file: false,
            },
        ];
        let s = wrapper_script(&mounts, Path::new("/data"), "vk-0", &tools);
        assert!(s.starts_with("set -e\nprintf %s 'vk-0' > /proc/sys/kernel/hostname\n"));
        let etc = s.find("--bind '/v/it'\\''s' '/etc'").unwrap();
        let conf = s.find("--bind '/v/conf/valkey.conf'").unwrap();
        assert!(etc < conf, "{s}");
        assert!(s.contains("remount,bind,ro '/etc/valkey/valkey.conf'"));
        assert!(s.contains(": > '/etc/valkey/valkey.conf'"));
        assert!(s.ends_with("cd '/data'\nexec \"$@\"\n"));
    }

    #[test]
    fn nested_read_only_mounts_bind_every_child_before_any_remount() {
        let tools = ScriptTools {
            mount: "/usr/bin/mount".into(),
            mkdir: "/usr/bin/mkdir".into(),
        };
        let m = |s: &str, t: &str| Mount {
            source: s.into(),
            target: t.into(),
            read_only: true,
            file: false,
        };
        let s = wrapper_script(
            &[m("/v/users", "/config/users"), m("/v/config", "/config")],
            Path::new("/data"),
            "",
            &tools,
        );
        let bind_parent = s.find("--bind '/v/config' '/config'").unwrap();
        let mkdir_child = s.find("-p '/config/users'").unwrap();
        let bind_child = s.find("--bind '/v/users' '/config/users'").unwrap();
        let ro_parent = s.find("remount,bind,ro '/config'\n").unwrap();
        let ro_child = s.find("remount,bind,ro '/config/users'").unwrap();
        assert!(bind_parent < mkdir_child && mkdir_child < bind_child, "{s}");
        assert!(bind_child < ro_parent && bind_child < ro_child, "{s}");
    }
}
