//! `spec.podTemplate` merged into a member's pod, with the strategic-merge
//! semantics `kubectl` users know: lists of containers, env, volumes and
//! volume mounts merge by their key (name; mountPath for volume mounts),
//! maps (labels, resources' requests and limits) key by key, other values
//! are replaced by the overlay's, and lists without a merge key (command,
//! args, tolerations...) are replaced whole.
//!
//! Written here rather than taken from a crate: no well-kept Rust crate
//! implements Kubernetes' strategic merge patch (it lives in Go's
//! apimachinery and needs each type's merge keys), and the operator needs
//! only the few keys of a pod below, on typed k8s-openapi values. What the
//! operator owns was refused by validation before this runs
//! (`api::v1alpha1::extensions`), so the merge need not guard it.

use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The merge key of each list field the merge knows, by field name
/// (Kubernetes' `patchMergeKey` of those fields).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets" => Some("name"),
        "volumeMounts" | "volumeDevices" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Strategic merge of `patch` into `base` (JSON of one Kubernetes object).
fn merge_value(base: &mut Value, patch: &Value, field: &str) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    continue;
                }
                match b.get_mut(k) {
                    Some(existing) => merge_value(existing, v, k),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(b), Value::Array(p)) => match merge_key(field) {
            Some(key) => {
                for item in p {
                    let id = item.get(key);
                    match b.iter_mut().find(|e| id.is_some() && e.get(key) == id) {
                        Some(existing) => merge_value(existing, item, ""),
                        None => b.push(item.clone()),
                    }
                }
            }
            None => *b = p.clone(),
        },
        (b, p) => *b = p.clone(),
    }
}

/// `patch` merged into `base`; `base` unchanged should the result not be a
/// `T` (it always is for two values of `T`).
fn merged<T: Serialize + DeserializeOwned + Clone>(base: &T, patch: &T, field: &str) -> T {
    let (Ok(mut b), Ok(p)) = (serde_json::to_value(base), serde_json::to_value(patch)) else {
        return base.clone();
    };
    merge_value(&mut b, &p, field);
    serde_json::from_value(b).unwrap_or_else(|_| base.clone())
}

/// The operator's container with the overlay's container of the same name
/// merged in (env and volume mounts by key, resources key by key, other
/// fields replaced).
pub fn merge_container(base: &Container, overlay: &Container) -> Container {
    merged(base, overlay, "")
}

/// The pod with the overlay's containers, init containers and volumes:
/// containers merge by name (a new name is added after the operator's),
/// init containers and volumes are added.
pub fn merge_pod_spec(base: &PodSpec, overlay: &PodSpec) -> PodSpec {
    merged(base, overlay, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, EnvVar, ResourceRequirements, Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        }
    }

    fn operator_container() -> Container {
        Container {
            name: "valkey".into(),
            image: Some("valkey/valkey:9".into()),
            command: Some(vec!["sh".into(), "-c".into(), "start".into()]),
            env: Some(vec![env("POD_IP", "x"), env("LOG", "info")]),
            volume_mounts: Some(vec![mount("data", "/data")]),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity("100m".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn env_and_mounts_merge_by_key_and_resources_by_resource() {
        let overlay = Container {
            name: "valkey".into(),
            env: Some(vec![env("LOG", "debug"), env("TZ", "UTC")]),
            volume_mounts: Some(vec![mount("extra", "/extra")]),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("memory".into(), Quantity("1Gi".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = merge_container(&operator_container(), &overlay);
        assert_eq!(
            c.env.unwrap(),
            vec![env("POD_IP", "x"), env("LOG", "debug"), env("TZ", "UTC")]
        );
        assert_eq!(
            c.volume_mounts.unwrap(),
            vec![mount("data", "/data"), mount("extra", "/extra")]
        );
        let requests = c.resources.unwrap().requests.unwrap();
        assert_eq!(requests.len(), 2, "cpu kept, memory added: {requests:?}");
        assert_eq!(c.command, operator_container().command);
        assert_eq!(c.image, operator_container().image);
    }

    #[test]
    fn a_new_container_name_is_a_sidecar_after_the_operators() {
        let base = PodSpec {
            containers: vec![operator_container()],
            volumes: Some(vec![Volume {
                name: "data".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let sidecar = Container {
            name: "shipper".into(),
            image: Some("shipper:1".into()),
            ..Default::default()
        };
        let init = Container {
            name: "fetch".into(),
            image: Some("fetch:1".into()),
            ..Default::default()
        };
        let overlay = PodSpec {
            containers: vec![sidecar.clone()],
            init_containers: Some(vec![init.clone()]),
            volumes: Some(vec![Volume {
                name: "shared".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let pod = merge_pod_spec(&base, &overlay);
        let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["valkey", "shipper"]);
        assert_eq!(pod.containers[0], operator_container());
        assert_eq!(pod.init_containers, Some(vec![init]));
        let volumes: Vec<_> = pod.volumes.unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(volumes, ["data", "shared"]);
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced_whole() {
        let base = Container {
            name: "s".into(),
            args: Some(vec!["a".into(), "b".into()]),
            ..Default::default()
        };
        let overlay = Container {
            name: "s".into(),
            args: Some(vec!["c".into()]),
            ..Default::default()
        };
        assert_eq!(
            merge_container(&base, &overlay).args,
            Some(vec!["c".to_string()])
        );
    }
}
