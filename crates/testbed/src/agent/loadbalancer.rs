// Over 600 lines: the testbed's load balancer address pools and their tests.
//! The load balancer: what MetalLB or a cloud's service controller does, for
//! the testbed. Every Service of type `LoadBalancer` (without a
//! `loadBalancerClass`, which would name another implementation) gets an
//! address of the testbed's pool `10.<100+id>.254.0/24` in
//! `status.loadBalancer.ingress[0].ip`; the proxy routes that address to the
//! Service's ready endpoints, and the outside namespace and the host route the
//! pool. The address goes back to the pool when the Service is deleted or its
//! type changes away from `LoadBalancer` (its status is cleared then).
//!
//! Nothing is stored but the cursor and the hold: which address belongs to
//! whom is read from the Services' status at every pass, so an agent restart
//! keeps every assignment (and its cursor goes on after the highest address
//! in use). Addresses are handed out round the pool (a
//! released address is not given again until the cursor comes back to it),
//! so a Service re-created or reassigned gets an address no one had just
//! before, which shows stale clients for what they are.
//!
//! Tests make addresses move with the agent socket (`testbed lb ...`):
//! `lb-reassign` gives one Service a new address, `lb-hold` stops handing out
//! addresses (Services without one stay pending) until `lb-release`.

use super::network::Cidr;
use k8s_openapi::api::core::v1::Service;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// A Service, as `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Key {
    /// Parses `namespace/name`.
    pub fn parse(text: &str) -> Option<Key> {
        let (namespace, name) = text.split_once('/')?;
        let ok = |s: &str| !s.is_empty() && !s.contains('/');
        (ok(namespace) && ok(name)).then(|| Key {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// The addresses of the pool and where the next search starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    cidr: Cidr,
    next: u32,
}

impl Pool {
    pub fn new(cidr: Cidr) -> Pool {
        Pool { cidr, next: 0 }
    }

    /// How many addresses it hands out: all but the network and broadcast
    /// addresses.
    fn size(&self) -> u32 {
        let all = 1u64 << (32 - u32::from(self.cidr.len.min(32)));
        u32::try_from(all.saturating_sub(2)).unwrap_or(u32::MAX)
    }

    /// The `i`-th address handed out (0-based): network + 1 + i.
    fn addr(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cidr.network) + 1 + i)
    }

    /// Whether `ip` is one the pool hands out.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let first = u32::from(self.addr(0));
        let size = self.size();
        size > 0 && (first..first + size).contains(&u32::from(ip))
    }

    /// Moves the cursor past the highest of `held` (an agent that starts
    /// again goes on after what the Services show, not from the start).
    pub fn resume_after(&mut self, held: &BTreeSet<Ipv4Addr>) {
        if let Some(last) = held.iter().rev().find(|ip| self.contains(**ip)) {
            let i = u32::from(*last) - u32::from(self.addr(0));
            self.next = (i + 1) % self.size().max(1);
        }
    }

    /// The next address after the cursor that is not `taken`; `None` when the
    /// pool is exhausted.
    pub fn pick(&mut self, taken: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        let size = self.size();
        for _ in 0..size {
            let candidate = self.addr(self.next % size);
            self.next = (self.next + 1) % size;
            if !taken.contains(&candidate) {
                return Some(candidate);
            }
        }
        None
    }
}

/// What the load balancer reads of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub key: Key,
    pub uid: String,
    /// Type `LoadBalancer` and no `loadBalancerClass`: ours to serve.
    pub wants: bool,
    /// The IPv4 addresses in `status.loadBalancer.ingress`.
    pub ips: Vec<Ipv4Addr>,
}

impl View {
    pub fn of(svc: &Service) -> View {
        let spec = svc.spec.as_ref();
        let wants = spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
            && spec.and_then(|s| s.load_balancer_class.as_ref()).is_none();
        let ips = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.as_deref().and_then(|ip| ip.parse().ok()))
            .collect();
        View {
            key: Key {
                namespace: svc.metadata.namespace.clone().unwrap_or_default(),
                name: svc.metadata.name.clone().unwrap_or_default(),
            },
            uid: svc.metadata.uid.clone().unwrap_or_default(),
            wants,
            ips,
        }
    }
}

/// A status the load balancer writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `status.loadBalancer.ingress` becomes `[{ip}]`.
    Assign {
        key: Key,
        uid: String,
        ip: Ipv4Addr,
        old: Option<Ipv4Addr>,
    },
    /// `status.loadBalancer` emptied: no longer a LoadBalancer.
    Clear {
        key: Key,
        uid: String,
        ips: Vec<Ipv4Addr>,
    },
}

/// Who holds which pool address: per Service that wants one, the first pool
/// address of its status that no Service before it (by namespace/name)
/// holds. A duplicate (two Services showing one address) thus stays with
/// one of them and the other gets a new address.
fn holders(views: &[View], pool: &Pool) -> BTreeMap<Key, Ipv4Addr> {
    let mut sorted: Vec<&View> = views.iter().filter(|v| v.wants).collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut taken = BTreeSet::new();
    let mut out = BTreeMap::new();
    for v in sorted {
        if let Some(ip) = v
            .ips
            .iter()
            .find(|ip| pool.contains(**ip) && !taken.contains(*ip))
        {
            taken.insert(*ip);
            out.insert(v.key.clone(), *ip);
        }
    }
    out
}

/// The statuses to write so that every Service that wants an address has
/// one of the pool (unless `held`), and every other Service shows none of
/// the pool's.
pub fn plan(views: &[View], pool: &mut Pool, held: bool) -> Vec<Change> {
    let held_by = holders(views, pool);
    let mut taken: BTreeSet<Ipv4Addr> = held_by.values().copied().collect();
    let mut sorted: Vec<&View> = views.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out = Vec::new();
    for v in sorted {
        let ours: Vec<Ipv4Addr> = v
            .ips
            .iter()
            .copied()
            .filter(|ip| pool.contains(*ip))
            .collect();
        if !v.wants {
            if !ours.is_empty() {
                out.push(Change::Clear {
                    key: v.key.clone(),
                    uid: v.uid.clone(),
                    ips: ours,
                });
            }
            continue;
        }
        match held_by.get(&v.key) {
            Some(ip) if v.ips == [*ip] => {}
            // Its address, but beside others: write it alone.
            Some(ip) => out.push(Change::Assign {
                key: v.key.clone(),
                uid: v.uid.clone(),
                ip: *ip,
                old: Some(*ip),
            }),
            None if held => {}
            None => {
                if let Some(ip) = pool.pick(&taken) {
                    taken.insert(ip);
                    out.push(Change::Assign {
                        key: v.key.clone(),
                        uid: v.uid.clone(),
                        ip,
                        old: v.ips.first().copied(),
                    });
                }
            }
        }
    }
    out
}

/// A new address for `key`, other than the one it has: what a cloud does
/// when a balancer is re-created.
pub fn reassign(views: &[View], pool: &mut Pool, key: &Key) -> Result<Change, String> {
    let Some(v) = views.iter().find(|v| &v.key == key) else {
        return Err(format!("no Service {key}"));
    };
    if !v.wants {
        return Err(format!(
            "Service {key} is not of type LoadBalancer (or names a loadBalancerClass)"
        ));
    }
    let held_by = holders(views, pool);
    let mut taken: BTreeSet<Ipv4Addr> = held_by.values().copied().collect();
    taken.extend(v.ips.iter().copied());
    let ip = pool
        .pick(&taken)
        .ok_or_else(|| "the load-balancer pool is exhausted".to_string())?;
    Ok(Change::Assign {
        key: key.clone(),
        uid: v.uid.clone(),
        ip,
        old: held_by.get(key).copied(),
    })
}

/// One line per LoadBalancer Service (`ns/name 10.103.254.3` or
/// `ns/name pending`), then the hold.
pub fn describe(views: &[View], pool: &Pool, held: bool) -> String {
    let held_by = holders(views, pool);
    let mut lines: Vec<String> = views
        .iter()
        .filter(|v| v.wants)
        .map(|v| match held_by.get(&v.key) {
            Some(ip) => format!("{} {ip}", v.key),
            None => format!("{} pending", v.key),
        })
        .collect();
    lines.sort();
    lines.push(if held {
        "assignment held (testbed lb release)".to_string()
    } else {
        "assigning".to_string()
    });
    lines.join("\n")
}

/// A request from the agent socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Reassign(Key),
    Hold,
    Release,
    Status,
}

/// Parses the socket ops of the load balancer (`lb-reassign` with target
/// `namespace/name`, `lb-hold`, `lb-release`, `lb-status`); `None` for any
/// other op.
pub fn parse_request(op: &str, target: Option<&str>) -> Option<Result<Request, String>> {
    Some(match op {
        "lb-reassign" => match target.and_then(Key::parse) {
            Some(k) => Ok(Request::Reassign(k)),
            None => Err(format!(
                "op \"lb-reassign\" needs a \"target\" namespace/name, got {target:?}"
            )),
        },
        "lb-hold" => Ok(Request::Hold),
        "lb-release" => Ok(Request::Release),
        "lb-status" => Ok(Request::Status),
        _ => return None,
    })
}

/// A request and where its answer goes.
pub type Command = (Request, oneshot::Sender<Result<String, String>>);

/// The status patch of a change (a merge patch of the status subresource).
fn patch_of(change: &Change) -> serde_json::Value {
    match change {
        Change::Assign { ip, .. } => serde_json::json!({
            "status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}
        }),
        Change::Clear { .. } => serde_json::json!({"status": {"loadBalancer": {"ingress": null}}}),
    }
}

/// Writes a change; returns the addresses the status shows now.
async fn write(client: &kube::Client, change: &Change) -> Result<Vec<Ipv4Addr>, String> {
    use kube::api::{Api, Patch, PatchParams};
    let key = match change {
        Change::Assign { key, .. } | Change::Clear { key, .. } => key,
    };
    let api: Api<Service> = Api::namespaced(client.clone(), &key.namespace);
    let svc = api
        .patch_status(
            &key.name,
            &PatchParams::default(),
            &Patch::Merge(patch_of(change)),
        )
        .await
        .map_err(|e| format!("writing the status of Service {key}: {e}"))?;
    Ok(View::of(&svc).ips)
}

/// The Services as the store shows them, with what this loop wrote and the
/// store does not show yet laid over them (by uid); entries the store caught
/// up with, or whose Service is gone, are dropped.
fn views(
    store: &[Arc<Service>],
    written: &mut BTreeMap<Key, (String, Vec<Ipv4Addr>)>,
) -> Vec<View> {
    let mut out: Vec<View> = store.iter().map(|s| View::of(s)).collect();
    written.retain(|key, (uid, ips)| {
        let Some(v) = out.iter_mut().find(|v| &v.key == key && &v.uid == uid) else {
            return false;
        };
        if &v.ips == ips {
            return false;
        }
        v.ips = ips.clone();
        true
    });
    out
}

/// Carries out one socket request; the answer for its reply.
async fn answer(
    client: &kube::Client,
    req: Request,
    current: &[View],
    pool: &mut Pool,
    held: &mut bool,
    written: &mut BTreeMap<Key, (String, Vec<Ipv4Addr>)>,
) -> Result<String, String> {
    match req {
        Request::Hold => {
            *held = true;
            Ok("load-balancer addresses held: Services without one stay pending".into())
        }
        Request::Release => {
            *held = false;
            Ok("load-balancer addresses assigned again".into())
        }
        Request::Status => Ok(describe(current, pool, *held)),
        Request::Reassign(key) => {
            let change = reassign(current, pool, &key)?;
            let ips = write(client, &change).await?;
            let message = match &change {
                Change::Assign { ip, old, .. } => format!(
                    "{key}: {} -> {ip}",
                    old.map_or_else(|| "none".to_string(), |o| o.to_string())
                ),
                Change::Clear { .. } => format!("{key}: cleared"),
            };
            let (Change::Assign { uid, .. } | Change::Clear { uid, .. }) = change;
            written.insert(key, (uid, ips));
            Ok(message)
        }
    }
}

/// Keeps the Services' load-balancer addresses until the task is aborted.
pub async fn run(agent: Arc<super::Agent>, mut commands: mpsc::Receiver<Command>) {
    use futures::StreamExt;
    use kube::api::Api;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let cidr_text = crate::topology::lb_pool_cidr(agent.state.id);
    let Some(cidr) = Cidr::parse(&cidr_text) else {
        tracing::error!(pool = %cidr_text, "load-balancer pool is not a range: no addresses");
        return;
    };
    let mut pool = Pool::new(cidr);
    let mut held = false;
    let mut written: BTreeMap<Key, (String, Vec<Ipv4Addr>)> = BTreeMap::new();
    let (store, writer) = reflector::store::<Service>();
    let events = reflector(
        writer,
        watcher(
            Api::<Service>::all(agent.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|ev| matches!(ev, Ok(watcher::Event::InitDone)));
    let mut events = std::pin::pin!(events);
    let mut resync = tokio::time::interval(Duration::from_secs(10));
    // Nothing is decided before the first full list: an empty store would
    // make every address look free.
    let mut listed = false;
    let mut commands_open = true;
    loop {
        let mut command = None;
        tokio::select! {
            ev = events.next() => match ev {
                None => break,
                Some(done) => {
                    if done && !listed {
                        let current = views(&store.state(), &mut written);
                        let held: BTreeSet<Ipv4Addr> =
                            holders(&current, &pool).into_values().collect();
                        pool.resume_after(&held);
                    }
                    listed |= done;
                }
            },
            c = commands.recv(), if commands_open => match c {
                Some(c) => command = Some(c),
                None => commands_open = false,
            },
            _ = resync.tick() => {}
        }
        if let Some((req, reply)) = command {
            let answer = if listed {
                let current = views(&store.state(), &mut written);
                answer(
                    &agent.client,
                    req,
                    &current,
                    &mut pool,
                    &mut held,
                    &mut written,
                )
                .await
            } else {
                Err("the Service list is not loaded yet; try again".into())
            };
            let _ = reply.send(answer);
        }
        if !listed {
            continue;
        }
        let current = views(&store.state(), &mut written);
        for change in plan(&current, &mut pool, held) {
            match write(&agent.client, &change).await {
                Ok(ips) => {
                    tracing::info!(?change, "load-balancer status written");
                    let (Change::Assign { key, uid, .. } | Change::Clear { key, uid, .. }) = change;
                    written.insert(key, (uid, ips));
                }
                // The Service may be gone meanwhile; the next pass sees it.
                Err(e) => tracing::warn!(error = %e, "load-balancer status not written"),
            }
        }
    }
    tracing::error!("load-balancer watch ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Pool {
        Pool::new(Cidr::parse("10.103.254.0/24").unwrap())
    }

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 103, 254, last)
    }

    fn view(name: &str, wants: bool, ips: &[Ipv4Addr]) -> View {
        View {
            key: Key {
                namespace: "db".into(),
                name: name.into(),
            },
            uid: format!("uid-{name}"),
            wants,
            ips: ips.to_vec(),
        }
    }

    fn assigned(changes: &[Change]) -> Vec<(String, Ipv4Addr)> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Assign { key, ip, .. } => Some((key.name.clone(), *ip)),
                Change::Clear { .. } => None,
            })
            .collect()
    }

    #[test]
    fn the_pool_hands_out_every_host_address_once_round_the_range() {
        let mut p = pool();
        let mut taken = BTreeSet::new();
        for _ in 0..254 {
            let a = p.pick(&taken).unwrap();
            assert!(p.contains(a));
            assert!(taken.insert(a), "{a} handed out twice");
        }
        assert!(p.pick(&taken).is_none(), "exhausted");
        assert!(!taken.contains(&ip(0)) && !taken.contains(&ip(255)));
        assert!(!p.contains(ip(0)) && !p.contains(ip(255)));
        assert!(!p.contains(Ipv4Addr::new(10, 103, 0, 5)));
    }

    #[test]
    fn a_released_address_is_not_handed_out_again_at_once() {
        let mut p = pool();
        let a = p.pick(&BTreeSet::new()).unwrap();
        let b = p.pick(&BTreeSet::new()).unwrap();
        assert_eq!((a, b), (ip(1), ip(2)));
        // .1 is free again, but the cursor moved on.
        assert_eq!(p.pick(&[ip(2)].into()), Some(ip(3)));
    }

    #[test]
    fn a_restarted_agent_goes_on_after_the_highest_address_in_use() {
        let mut p = pool();
        p.resume_after(&[ip(3), ip(9)].into());
        assert_eq!(p.pick(&[ip(3), ip(9)].into()), Some(ip(10)));
        let mut p = pool();
        p.resume_after(&[ip(254)].into());
        assert_eq!(p.pick(&[ip(254)].into()), Some(ip(1)), "wraps round");
        let mut p = pool();
        p.resume_after(&[Ipv4Addr::new(192, 0, 2, 1)].into());
        assert_eq!(p.pick(&BTreeSet::new()), Some(ip(1)), "not ours: ignored");
    }

    #[test]
    fn pending_services_get_an_address_and_keep_it() {
        let mut p = pool();
        let views = [
            view("a", true, &[]),
            view("b", true, &[ip(1)]),
            view("plain", false, &[]),
        ];
        let changes = plan(&views, &mut p, false);
        assert_eq!(assigned(&changes), [("a".to_string(), ip(2))]);
        // Once the status shows it, nothing more to write.
        let views = [view("a", true, &[ip(2)]), view("b", true, &[ip(1)])];
        assert!(plan(&views, &mut p, false).is_empty());
    }

    #[test]
    fn a_hold_leaves_new_services_pending_and_keeps_assigned_ones() {
        let mut p = pool();
        let views = [view("a", true, &[]), view("b", true, &[ip(7)])];
        assert!(plan(&views, &mut p, true).is_empty());
        assert_eq!(
            assigned(&plan(&views, &mut p, false)),
            [("a".to_string(), ip(1))]
        );
    }

    #[test]
    fn a_service_that_is_no_longer_a_load_balancer_gives_its_address_back() {
        let mut p = pool();
        let views = [view("was-lb", false, &[ip(4)])];
        assert_eq!(
            plan(&views, &mut p, false),
            [Change::Clear {
                key: views[0].key.clone(),
                uid: "uid-was-lb".into(),
                ips: vec![ip(4)],
            }]
        );
        // An address outside the pool is not ours to clear.
        assert!(
            plan(
                &[view("x", false, &[Ipv4Addr::new(192, 0, 2, 1)])],
                &mut p,
                false
            )
            .is_empty()
        );
    }

    #[test]
    fn two_services_showing_one_address_end_with_two() {
        let mut p = pool();
        let views = [view("a", true, &[ip(1)]), view("b", true, &[ip(1)])];
        assert_eq!(
            assigned(&plan(&views, &mut p, false)),
            [("b".to_string(), ip(2))]
        );
    }

    #[test]
    fn reassign_gives_a_new_address_no_one_holds() {
        let mut p = pool();
        let views = [view("a", true, &[ip(1)]), view("b", true, &[ip(2)])];
        let key = views[0].key.clone();
        match reassign(&views, &mut p, &key).unwrap() {
            Change::Assign { ip: new, old, .. } => {
                assert_eq!(old, Some(ip(1)));
                assert_eq!(new, ip(3));
            }
            other => panic!("{other:?}"),
        }
        let plain = [view("c", false, &[])];
        assert!(
            reassign(&plain, &mut p, &plain[0].key)
                .unwrap_err()
                .contains("not of type LoadBalancer")
        );
        let missing = Key::parse("db/zzz").unwrap();
        assert!(
            reassign(&views, &mut p, &missing)
                .unwrap_err()
                .contains("no Service")
        );
    }

    #[test]
    fn socket_ops_are_parsed_and_a_target_must_name_a_service() {
        assert_eq!(
            parse_request("lb-reassign", Some("db/vk-0")),
            Some(Ok(Request::Reassign(Key::parse("db/vk-0").unwrap())))
        );
        assert!(matches!(
            parse_request("lb-reassign", Some("vk-0")),
            Some(Err(_))
        ));
        assert!(matches!(
            parse_request("lb-reassign", Some("a/b/c")),
            Some(Err(_))
        ));
        assert!(matches!(parse_request("lb-reassign", None), Some(Err(_))));
        assert_eq!(parse_request("lb-hold", None), Some(Ok(Request::Hold)));
        assert_eq!(parse_request("node-fail", Some("n")), None);
    }

    #[test]
    fn what_this_loop_wrote_counts_until_the_store_shows_it() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let svc = Arc::new(Service {
            metadata: ObjectMeta {
                namespace: Some("db".into()),
                name: Some("a".into()),
                uid: Some("uid-a".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..Default::default()
            }),
            status: None,
        });
        let key = Key::parse("db/a").unwrap();
        let mut written = BTreeMap::from([(key.clone(), ("uid-a".to_string(), vec![ip(5)]))]);
        let v = views(std::slice::from_ref(&svc), &mut written);
        assert_eq!(v[0].ips, [ip(5)], "not assigned a second time");
        assert!(written.contains_key(&key));
        // A Service of the same name but another uid: the entry goes.
        let mut other = (*svc).clone();
        other.metadata.uid = Some("uid-new".into());
        let v = views(&[Arc::new(other)], &mut written);
        assert!(v[0].ips.is_empty());
        assert!(written.is_empty());
    }

    #[test]
    fn the_status_lists_addresses_and_pending_services() {
        let views = [
            view("b", true, &[]),
            view("a", true, &[ip(3)]),
            view("c", false, &[]),
        ];
        assert_eq!(
            describe(&views, &pool(), true),
            "db/a 10.103.254.3\ndb/b pending\nassignment held (testbed lb release)"
        );
    }
}
