//! An API server in memory for whole-reconcile tests: a `kube::Client`
//! whose requests are answered from a map of objects and recorded.
//!
//! It keeps what it is given (create, server-side apply and merge patches
//! merged as JSON merge patches, the `status` subresource, delete), answers
//! GETs and label-selected LISTs, and records every request as
//! `(method, path)` so a test says which the reconcile made. Not a model of
//! the API server's rules (no field ownership, no admission): enough for
//! what one reconcile reads back of what it wrote. Hand-written: tower-test
//! scripts an exact sequence of requests, which would pin the order of
//! every read and write of the reconcile rather than what it does.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// `(resource, namespace, name)`, e.g. `("secrets", "ns", "c-auth")`.
pub type Key = (String, String, String);

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: Method,
    /// The resource (`statefulsets`), with `/status` for the subresource.
    pub resource: String,
    pub name: String,
}

impl Call {
    /// Whether this call changed something (create, apply, patch, delete).
    pub fn is_write(&self) -> bool {
        !matches!(self.method, Method::GET)
    }
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    calls: Vec<Call>,
    version: u64,
}

/// The fake; clones share its state.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// A client whose every request this fake answers.
    pub fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Puts `object` in as it is (a test's seed).
    pub fn put(&self, resource: &str, object: Value) {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.version += 1;
        let mut object = object;
        stamp(&mut object, state.version, &name);
        state
            .objects
            .insert((resource.to_string(), ns, name), object);
    }

    /// The object stored under `resource`/`ns`/`name`.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .objects
            .get(&(resource.to_string(), ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object of `resource`, by name.
    pub fn all(&self, resource: &str) -> Vec<Value> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .objects
            .iter()
            .filter(|((r, _, _), _)| r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The requests answered since the last call of this, in order.
    pub fn take_calls(&self) -> Vec<Call> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut state.calls)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let Some(path) = Path::parse(parts.uri.path()) else {
            return reply(
                StatusCode::NOT_FOUND,
                status(404, "NotFound", "no such path"),
            );
        };
        let query = parts.uri.query().unwrap_or_default();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.calls.push(Call {
            method: parts.method.clone(),
            resource: match &path.subresource {
                Some(sub) => format!("{}/{sub}", path.resource),
                None => path.resource.clone(),
            },
            name: path
                .name
                .clone()
                .or_else(|| body["metadata"]["name"].as_str().map(String::from))
                .unwrap_or_default(),
        });
        state.version += 1;
        let version = state.version;
        let key = |name: &str| {
            (
                path.resource.clone(),
                path.namespace.clone(),
                name.to_string(),
            )
        };
        match (parts.method, path.name.as_deref()) {
            (Method::GET, None) => {
                let selector = selector(query);
                let items: Vec<Value> = state
                    .objects
                    .iter()
                    .filter(|((r, ns, _), _)| {
                        r == &path.resource && (path.namespace.is_empty() || ns == &path.namespace)
                    })
                    .filter(|(_, o)| selector.iter().all(|s| s.matches(&o["metadata"]["labels"])))
                    .map(|(_, o)| o.clone())
                    .collect();
                reply(
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "List",
                           "metadata": {"resourceVersion": version.to_string()}, "items": items}),
                )
            }
            (Method::GET, Some(name)) => match state.objects.get(&key(name)) {
                Some(o) => reply(StatusCode::OK, o.clone()),
                None => not_found(&path.resource, name),
            },
            (Method::POST, None) => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if state.objects.contains_key(&key(&name)) {
                    return reply(
                        StatusCode::CONFLICT,
                        status(409, "AlreadyExists", &format!("{name} already exists")),
                    );
                }
                let mut object = body;
                object["metadata"]["namespace"] = json!(path.namespace);
                stamp(&mut object, version, &name);
                state.objects.insert(key(&name), object.clone());
                reply(StatusCode::CREATED, object)
            }
            (Method::PATCH | Method::PUT, Some(name)) => {
                let existing = state.objects.get(&key(name)).cloned();
                let mut object = match (existing, path.subresource.as_deref()) {
                    (Some(mut o), Some("status")) => {
                        merge(&mut o["status"], &body["status"]);
                        o
                    }
                    (None, Some(_)) => return not_found(&path.resource, name),
                    (Some(mut o), Some(sub)) => {
                        merge(&mut o[sub], &body[sub]);
                        o
                    }
                    (Some(mut o), None) => {
                        merge(&mut o, &body);
                        o
                    }
                    (None, None) => {
                        let mut o = body;
                        o["metadata"]["namespace"] = json!(path.namespace);
                        o
                    }
                };
                stamp(&mut object, version, name);
                state.objects.insert(key(name), object.clone());
                reply(StatusCode::OK, object)
            }
            (Method::DELETE, Some(name)) => match state.objects.remove(&key(name)) {
                Some(o) => reply(StatusCode::OK, o),
                None => not_found(&path.resource, name),
            },
            _ => reply(
                StatusCode::METHOD_NOT_ALLOWED,
                status(405, "MethodNotAllowed", "not here"),
            ),
        }
    }
}

/// What a request's path names.
struct Path {
    resource: String,
    namespace: String,
    name: Option<String>,
    subresource: Option<String>,
}

impl Path {
    fn parse(path: &str) -> Option<Path> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // /api/v1/... or /apis/<group>/<version>/...
        let rest = match *parts.first()? {
            "api" => parts.get(2..)?,
            "apis" => parts.get(3..)?,
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
            rest => (String::new(), rest),
        };
        let (resource, rest) = rest.split_first()?;
        Some(Path {
            resource: resource.to_string(),
            namespace,
            name: rest.first().map(ToString::to_string),
            subresource: rest.get(1).map(ToString::to_string),
        })
    }
}

/// One term of a label selector: `key`, `key=value` or `key!=value`.
struct Term {
    key: String,
    value: Option<(bool, String)>,
}

impl Term {
    fn matches(&self, labels: &Value) -> bool {
        let got = labels.get(&self.key).and_then(Value::as_str);
        match (&self.value, got) {
            (None, got) => got.is_some(),
            (Some((true, want)), got) => got == Some(want.as_str()),
            (Some((false, want)), got) => got != Some(want.as_str()),
        }
    }
}

fn selector(query: &str) -> Vec<Term> {
    let Some((_, decoded)) =
        form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "labelSelector")
    else {
        return Vec::new();
    };
    decoded
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some((k, v)) = t.split_once("!=") {
                Term {
                    key: k.to_string(),
                    value: Some((false, v.to_string())),
                }
            } else if let Some((k, v)) = t.split_once('=') {
                Term {
                    key: k.to_string(),
                    value: Some((true, v.trim_start_matches('=').to_string())),
                }
            } else {
                Term {
                    key: t.to_string(),
                    value: None,
                }
            }
        })
        .collect()
}

/// RFC 7386 JSON merge patch of `patch` onto `target`.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(map) = target {
        for (k, v) in patch {
            if v.is_null() {
                map.remove(k);
            } else {
                merge(map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// What the API server fills in on every write (a Secret's `stringData`
/// goes into `data`, base64, as the API server does).
fn stamp(object: &mut Value, version: u64, name: &str) {
    if let Some(Value::Object(strings)) =
        object.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        for (k, v) in strings {
            let bytes = k8s_openapi::ByteString(v.as_str().unwrap_or_default().as_bytes().to_vec());
            object["data"][k] = serde_json::to_value(bytes).unwrap_or_default();
        }
    }
    let meta = &mut object["metadata"];
    meta["resourceVersion"] = json!(version.to_string());
    if meta["uid"].is_null() {
        meta["uid"] = json!(format!("uid-{name}"));
    }
    if meta["creationTimestamp"].is_null() {
        meta["creationTimestamp"] = json!("2026-12-06T00:00:00Z");
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "code": code, "reason": reason, "message": message, "metadata": {}})
}

fn not_found(resource: &str, name: &str) -> Response<Body> {
    reply(
        StatusCode::NOT_FOUND,
        status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
    )
}

fn reply(code: StatusCode, body: Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_resource_namespace_and_subresource() {
        let p =
            Path::parse("/apis/valkey.rs/v1alpha1/namespaces/ns/valkeyclusters/c/status").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.namespace.as_str()),
            ("valkeyclusters", "ns")
        );
        assert_eq!(p.name.as_deref(), Some("c"));
        assert_eq!(p.subresource.as_deref(), Some("status"));
        let p = Path::parse("/api/v1/nodes").unwrap();
        assert_eq!((p.resource.as_str(), p.name), ("nodes", None));
    }

    #[test]
    fn merge_patches_replace_arrays_and_drop_nulls() {
        let mut t = json!({"a": 1, "b": [1, 2], "c": {"d": 1, "e": 2}});
        merge(&mut t, &json!({"a": null, "b": [3], "c": {"e": 3}}));
        assert_eq!(t, json!({"b": [3], "c": {"d": 1, "e": 3}}));
    }

    #[test]
    fn selectors_match_equality_and_existence() {
        let terms = selector("labelSelector=valkey.rs%2Fcluster%3Dc,app");
        let labels = json!({"valkey.rs/cluster": "c", "app": "x"});
        assert!(terms.iter().all(|t| t.matches(&labels)));
        assert!(!terms[0].matches(&json!({"valkey.rs/cluster": "d"})));
    }
}
