//! One reconcile of one ValkeyCluster, step by step:
//!
//! 1. **validate** the spec (an invalid one gets a condition and an event,
//!    and nothing else happens until it changes);
//! 2. **observe** Kubernetes (owned objects, member pods, Nodes and Pods);
//! 3. **plan placement** over the live Nodes and Pods;
//! 4. **apply** the owned objects (password Secret created once; the rest by
//!    server-side apply when they differ), and re-create Pending pods whose
//!    scheduling rules are out of date;
//! 5. **observe Valkey** (one connection per member), decide the desired
//!    topology (rolling-update failover, primary balancing), let the Valkey
//!    planner pick the next commands and send them; delete members the
//!    planner says are safe to remove; keep the role labels true;
//! 6. **restart** the next out-of-date member when the cluster is Ready, or
//!    take the next step of a member's move (surge-first: its new copy in
//!    sync before the old one goes, see [`super::surge`]);
//! 7. **status** and events.
//!
//! Every step is idempotent: a reconcile cut short anywhere starts again from
//! the top with what the API server and the members then say.

use super::events::{Events, action_reason, reason};
use super::members::{PodFacts, needs_restart, placement_outdated};
use super::observe::KubeView;
use super::rolling::{RollMember, RollStep};
use super::status::{Activity, BalanceState, ClusterState, Observations, SpreadState, StatusInput};
use super::surge::{self, Surge, SurgePod, SurgeStep};
use super::topology::{self, Candidate, ShardView};
use super::valkey_io::{self, Session};
use super::{Context, Error, Memory, apply, observe, rolling, safety, status};
use crate::adapt;
use crate::builders::scheduling::MemberPlacement;
use crate::builders::statefulset::{Ordinals, set_ordinals};
use crate::builders::{self, Desired, config, pdb_name, secret};
use api::ValidatedCluster;
use api::ValkeyCluster;
use api::constants::{FIELD_MANAGER, LABEL_ROLE, ROLE_PRIMARY, ROLE_REPLICA, member_name};
use api::v1alpha1::{
    BalancingMode, CONDITION_READY, MemberStatus, ShardStatus, ShardTopology, TopologyMember,
    ValkeyClusterStatus,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use valkey::actions::Action as VAction;
use valkey::client::Target;
use valkey::model::{
    DesiredCluster, DesiredMember, DesiredShard, MemberAddr, MemberIndex, MemberRef,
    ObservedCluster, ObservedMember, ShardIndex,
};
use valkey::parse::{NodeId, Role};
use valkey::planner::{self, Health, PlannerOptions};

/// How long the operator waits for a failover it asked for before asking again.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(10);

/// The reconcile.
pub async fn reconcile(vc: &ValkeyCluster, ctx: &Context, key: &str) -> Result<Action, Error> {
    let events = ctx.events(vc.object_ref(&()));
    let mut memory = ctx.memory(key);
    let result = run(vc, ctx, &events, &mut memory).await;
    ctx.remember(key, memory);
    result
}

async fn run(
    vc: &ValkeyCluster,
    ctx: &Context,
    events: &Events<'_>,
    memory: &mut Memory,
) -> Result<Action, Error> {
    let name = vc
        .metadata
        .name
        .clone()
        .ok_or(Error::MissingMetadata("name"))?;
    let ns = vc
        .metadata
        .namespace
        .clone()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let clusters: Api<ValkeyCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let old_status = vc.status.as_ref();
    let now = Time(k8s_openapi::jiff::Timestamp::now());

    // 1. validate
    let cluster = match api::v1alpha1::validate(vc) {
        Ok(c) => c,
        Err(e) => {
            let message = e.to_string();
            let conds = status::invalid_spec_conditions(&message);
            let obs = old_status.map(keep_observations).unwrap_or_default();
            let new = status::build(old_status, &conds, vc.metadata.generation, obs, &now);
            write_status(ctx, &clusters, &name, old_status, new).await?;
            if memory.announced.get("invalid").map(String::as_str) != Some(message.as_str()) {
                events
                    .warning(reason::INVALID_SPEC, "Validate", &message)
                    .await;
                memory.announced.insert("invalid", message);
            }
            return Ok(Action::await_change());
        }
    };
    memory.announced.remove("invalid");
    let owner = vc
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("uid"))?;

    // 2. observe Kubernetes
    let mut view = observe::kubernetes(ctx, &cluster).await?;
    note_missing_nodes(&mut view, memory, Instant::now());

    // 3. placement
    let placement = Placement::compute(&cluster, &view).await;
    announce_placement(&placement, events, memory).await;

    // 4. apply
    let auth = ensure_password(ctx, &cluster, &owner, events).await?;
    let desired = builders::desired(
        &cluster,
        &owner,
        |s, m| placement.member(s, m),
        |name| {
            view.statefulsets
                .get(name)
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.volume_claim_templates.as_deref())
        },
        |name| {
            view.statefulsets
                .get(name)
                .map(Ordinals::of)
                .or_else(|| retained_start(&view, name))
        },
    );
    apply_objects(ctx, &cluster, &desired, &view, events).await?;
    let replaced = replace_pending_pods(ctx, &cluster, &desired, &view, events).await?;
    grow_volumes(ctx, &cluster, &view, events, memory).await;

    // 5. Valkey
    let password = match &auth {
        AuthState::Password(p) => Some(p.as_str()),
        _ => None,
    };
    let blocker = match &auth {
        AuthState::Missing(m) => Some(("PasswordSecretMissing".to_string(), m.clone())),
        _ => None,
    };
    let obs = observe_valkey(
        ctx,
        &cluster,
        &view,
        old_status,
        password,
        blocker.is_none(),
    )
    .await;
    let keys = topology_keys(&cluster, &view);
    let views = shard_views(&cluster, &view, &obs, &keys);
    let desired_topology = desired_topology(&cluster, &view, &views, &keys);
    let opts = PlannerOptions::default();
    // The members alone make the cluster Ready: a move's new copy is one
    // copy more, not one the shard is missing while it syncs.
    let health0 = without_surges(planner::health(&desired_topology, &obs.observed, &opts)?);
    let surges = surges_in_flight(&cluster, &view, &obs, &placement);
    let all_pods_ready = desired_members(&cluster).all(|(s, m)| {
        view.members
            .get(&(s, m))
            .is_some_and(|p| PodFacts::of(p).ready)
    });
    let cluster_ready = health0.is_ready() && all_pods_ready && blocker.is_none();

    // Rolling update, then primary balancing, decide the desired primaries.
    let preference: BTreeMap<u32, Vec<u32>> = (0..cluster.shards)
        .map(|s| (s, topology::failover_preference(&views, s, &keys)))
        .collect();
    let mut roll = rolling_step(
        &cluster,
        &desired,
        &view,
        &obs,
        &placement,
        &preference,
        cluster_ready,
    );
    // One move at a time, and no restart or balancing failover in the
    // middle of one.
    if let Some(why) = move_in_flight(&surges, &view) {
        roll.step = RollStep::Wait(why);
    }
    let stale = roll.stale;
    let mut balance = BalanceState::Aligned;
    let now_i = Instant::now();
    // The quiet period also starts when the operator first sees the cluster.
    memory.last_disturbance.get_or_insert(now_i);
    // The topology the planner works towards: the members, and the new
    // copies of moves in flight as extra replicas.
    let mut plan_topology = with_surges(&desired_topology, &view, &surges);
    for (surge, step) in &surges {
        if *step == SurgeStep::Promote {
            set_primary(
                &mut plan_topology,
                surge.shard,
                MemberIndex::surge_of(surge.member).0,
            );
        }
    }
    match &roll.step {
        RollStep::Failover { shard, to } => {
            set_primary(&mut plan_topology, *shard, *to);
        }
        RollStep::Done => {
            balance = balancing(
                &cluster,
                &views,
                &keys,
                cluster_ready,
                memory,
                now_i,
                &mut plan_topology,
            );
        }
        _ => {}
    }

    let mut plan = if blocker.is_none() {
        planner::next_actions(&plan_topology, &obs.observed, &opts)?
    } else {
        Default::default()
    };
    // A failover the operator asked for takes a moment: do not ask again at once.
    plan.actions.retain(|a| match a {
        VAction::Failover { on, .. } => memory
            .failover_requested
            .get(&on.shard.0)
            .is_none_or(|t| now_i.duration_since(*t) > FAILOVER_PATIENCE),
        _ => true,
    });
    let session = obs.session;
    let executed = execute_actions(ctx, &session, &plan.actions, events, memory, now_i).await;
    let joined = recorded_members(old_status);
    let removed = remove_members(ctx, &cluster, &view, &plan.removable, &joined, events).await?;
    update_role_labels(ctx, &cluster, &view, &obs.observed).await?;
    let healed = heal_lost_members(ctx, &cluster, &view, &obs.observed, events, memory).await?;
    notice_failovers(&views, memory, events, now_i).await;

    let condemned_gone = remove_condemned_on_lost_nodes(ctx, &cluster, &view).await?;

    // 6. rolling restart, moves
    let mut last_action = executed.last().cloned();
    for (surge, step) in &surges {
        if let Some(done) = surge_step(
            ctx,
            &cluster,
            &desired,
            &view,
            surge,
            step,
            plan.actions.is_empty(),
            events,
        )
        .await?
        {
            memory.last_disturbance = Some(now_i);
            last_action = Some(done);
        }
    }
    sweep_moved_volumes(ctx, &cluster, &view).await?;
    match &roll.step {
        RollStep::Surge { shard, member } if plan.actions.is_empty() => {
            if let Some(done) = start_surge(
                ctx, &cluster, &desired, &view, &placement, *shard, *member, events,
            )
            .await?
            {
                memory.last_disturbance = Some(now_i);
                last_action = Some(done);
            }
        }
        RollStep::Restart { shard, member } if plan.actions.is_empty() => {
            if let Some(pod) = view.members.get(&(*shard, *member)) {
                delete_pod(ctx, &cluster, pod).await?;
                let msg = format!(
                    "restarting shard {shard} member {member} (pod {}) to apply a new spec",
                    pod.name_any()
                );
                events
                    .normal(reason::ROLLING_RESTART, "RollingRestart", &msg)
                    .await;
                memory.last_disturbance = Some(now_i);
                last_action = Some(msg);
            }
        }
        RollStep::Blocked(why)
            if memory.announced.get("rolling").map(String::as_str) != Some(why.as_str()) =>
        {
            events
                .warning(reason::ROLLING_BLOCKED, "RollingRestart", why)
                .await;
            memory.announced.insert("rolling", why.clone());
        }
        _ => {}
    }
    if !health0.is_ready() || !executed.is_empty() {
        memory.last_disturbance = Some(now_i);
    }

    // 7. status
    let pods_pending = desired_members(&cluster)
        .filter(|k| view.members.get(k).is_none_or(|p| !PodFacts::of(p).ready))
        .count();
    let leaving = view
        .members
        .keys()
        .any(|(s, m)| *s >= cluster.shards || *m > cluster.replicas);
    let new_members = desired_members(&cluster).any(|k| !view.members.contains_key(&k));
    let mut blocked: Vec<String> = plan
        .waiting
        .iter()
        .filter(|w| w.is_blocked())
        .map(ToString::to_string)
        .collect();
    if let RollStep::Blocked(why) = &roll.step {
        blocked.push(why.clone());
    }
    let moves = move_lines(&cluster, &view, &placement, &surges);
    let spread = spread_now(&placement, &moves);
    let activity = Activity {
        bootstrapping: is_bootstrapping(&obs.observed, old_status),
        actions: executed.clone(),
        pending_restarts: stale,
        pending_moves: moves.len(),
        scaling: leaving
            || (new_members && !is_bootstrapping(&obs.observed, old_status))
            || !removed.is_empty(),
        pods_pending,
    };
    let input = StatusInput {
        generation: cluster.generation,
        cluster: cluster_state(&health0, all_pods_ready, blocked),
        spread: spread.clone(),
        balance,
        activity,
        blocker,
    };
    let conds = status::conditions(&input);
    let observations = observations(
        &cluster,
        &view,
        &obs.observed,
        &health0,
        &spread,
        last_action.clone(),
    );
    let new = status::build(old_status, &conds, cluster.generation, observations, &now);
    announce_readiness(old_status, &new, events).await;
    write_status(ctx, &clusters, &name, old_status, new).await?;

    let converging = !plan.is_converged()
        || !executed.is_empty()
        || !cluster_ready
        || stale > 0
        || roll.moving > 0
        || !moves.is_empty()
        || !view.condemned.is_empty()
        || condemned_gone > 0
        || replaced > 0
        || healed > 0
        || !removed.is_empty();
    Ok(if converging {
        Action::requeue(ctx.settings.fast_requeue)
    } else {
        Action::requeue(ctx.settings.slow_requeue)
    })
}

fn keep_observations(s: &ValkeyClusterStatus) -> Observations {
    Observations {
        ready_shards: s.ready_shards,
        shards: s.shards.clone(),
        members: s.members.clone(),
        topology: s.topology.clone(),
        topology_summary: s.topology_summary.clone(),
        last_action: s.last_action.clone(),
        message: s.message.clone(),
    }
}

/// Writes the status when it differs from the current one.
async fn write_status(
    ctx: &Context,
    api: &Api<ValkeyCluster>,
    name: &str,
    old: Option<&ValkeyClusterStatus>,
    new: ValkeyClusterStatus,
) -> Result<(), Error> {
    if old == Some(&new) {
        return Ok(());
    }
    ctx.metrics.api_write("ValkeyCluster", "status");
    let patch = serde_json::json!({
        "apiVersion": format!("{}/{}", api::constants::GROUP, api::constants::VERSION),
        "kind": api::constants::KIND,
        "status": new,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::Status {
        name: name.to_string(),
        source,
    })?;
    Ok(())
}

/// Where a member StatefulSet that is (re-)created starts: at the volume a
/// removed member left behind (the highest ordinal claimed), so a member
/// added back finds its data as before moves existed; else at 0.
fn retained_start(view: &KubeView, sts: &str) -> Option<Ordinals> {
    let prefix = claim_of(&format!("{sts}-"));
    view.pvcs
        .iter()
        .filter(|(_, pvc)| pvc.metadata.deletion_timestamp.is_none())
        .filter_map(|(claim, _)| claim.strip_prefix(&prefix)?.parse::<u32>().ok())
        .max()
        .map(|start| Ordinals { start, replicas: 1 })
}

/// Every (shard, member) of the spec.
fn desired_members(c: &ValidatedCluster) -> impl Iterator<Item = (u32, u32)> + '_ {
    (0..c.shards).flat_map(move |s| (0..=c.replicas).map(move |m| (s, m)))
}

// ---------------------------------------------------------------- placement

/// At most this many branch-and-bound nodes per placement plan (only when
/// constraint keys cross; nesting keys are planned exactly at once). Real
/// topologies finish far below it; an adversarial one gets the best plan
/// found so far instead of holding the reconcile (and the cores) for seconds.
const PLACEMENT_SEARCH_LIMIT: u64 = 20_000;

/// At most this long per placement plan, whatever the machine's speed: the
/// reconcile waits for it.
const PLACEMENT_TIME_LIMIT: Duration = Duration::from_secs(1);

/// Said of a plan a search limit cut short.
const NOT_PROVEN_OPTIMAL: &str =
    "the best placement found within the planner's search limits, not proven optimal";

/// The placement plan, or why there is none.
struct Placement {
    plan: Option<placement::Plan>,
    error: Option<String>,
    /// False when a search limit cut the planner short.
    optimal: bool,
}

impl Placement {
    async fn compute(cluster: &ValidatedCluster, view: &KubeView) -> Placement {
        let problem = match adapt::problem(cluster, &view.nodes, &view.all_pods) {
            Ok(p) => p,
            Err(e) => {
                return Placement {
                    plan: None,
                    error: Some(e.to_string()),
                    optimal: true,
                };
            }
        };
        let options = placement::PlanOptions {
            search_limit: Some(PLACEMENT_SEARCH_LIMIT),
            time_limit: Some(PLACEMENT_TIME_LIMIT),
        };
        // The planner is CPU-bound for up to the time limit: on a blocking
        // thread it cannot stall the runtime's other reconciles, watches and
        // lease renewals.
        let planned =
            tokio::task::spawn_blocking(move || placement::plan_with(&problem, &options)).await;
        // A planner that panicked (it must not) leaves the placement unknown,
        // as a problem it cannot plan does.
        match planned.map_err(|e| format!("the placement planner stopped: {e}")) {
            Ok(Ok(planned)) => {
                if !planned.optimal {
                    tracing::info!(
                        search_limit = PLACEMENT_SEARCH_LIMIT,
                        time_limit_ms = PLACEMENT_TIME_LIMIT.as_millis() as u64,
                        "placement plan not proven optimal: a search limit cut it short"
                    );
                }
                Placement {
                    plan: Some(planned.plan),
                    error: None,
                    optimal: planned.optimal,
                }
            }
            Ok(Err(e)) => Placement {
                plan: None,
                error: Some(e.to_string()),
                optimal: true,
            },
            Err(e) => Placement {
                plan: None,
                error: Some(e),
                optimal: true,
            },
        }
    }

    fn member(&self, shard: u32, member: u32) -> MemberPlacement {
        let Some(plan) = &self.plan else {
            return MemberPlacement::Unplanned;
        };
        if let Some(p) = plan
            .members
            .iter()
            .find(|p| p.shard == shard && p.member == member)
        {
            return MemberPlacement::Placed {
                node: p.node.clone(),
                domains: p.domains.clone(),
            };
        }
        if let Some(u) = plan
            .unplaced
            .iter()
            .find(|u| u.shard == shard && u.member == member)
        {
            return MemberPlacement::Unplaced {
                reason: u.reason.clone(),
            };
        }
        MemberPlacement::Unplanned
    }

    /// The plan moves this running member to another node.
    fn moved(&self, shard: u32, member: u32) -> bool {
        self.plan.as_ref().is_some_and(|p| {
            p.members
                .iter()
                .any(|x| x.shard == shard && x.member == member && x.moved)
        })
    }

    fn spread_state(&self) -> SpreadState {
        let state = self.plan_state();
        if self.optimal {
            return state;
        }
        let mark = |mut lines: Vec<String>| {
            lines.push(format!("({NOT_PROVEN_OPTIMAL})"));
            lines
        };
        match state {
            SpreadState::Unplaceable(r) => SpreadState::Unplaceable(mark(r)),
            SpreadState::Exceeded(v) => SpreadState::Exceeded(mark(v)),
            other => other,
        }
    }

    fn plan_state(&self) -> SpreadState {
        match (&self.plan, &self.error) {
            (Some(plan), _) if !plan.unplaced.is_empty() => SpreadState::Unplaceable(
                plan.unplaced
                    .iter()
                    .map(|u| format!("shard {} member {}: {}", u.shard, u.member, u.reason))
                    .collect(),
            ),
            (Some(plan), _) if !plan.violations.is_empty() => SpreadState::Exceeded(
                plan.violations
                    .iter()
                    .map(|v| {
                        format!(
                            "shard {}: {} members in {} {} (Preferred at most {})",
                            v.shard,
                            v.members,
                            v.topology_key,
                            v.domain.as_deref().unwrap_or("<nodes without the key>"),
                            v.max_replicas
                        )
                    })
                    .collect(),
            ),
            (Some(_), _) => SpreadState::Met,
            (None, Some(e)) => SpreadState::Unknown(format!("placement could not be planned: {e}")),
            (None, None) => SpreadState::Unknown("placement could not be planned".into()),
        }
    }
}

async fn announce_placement(p: &Placement, events: &Events<'_>, memory: &mut Memory) {
    if p.optimal {
        memory.announced.remove("placement-unproven");
    } else if !memory.announced.contains_key("placement-unproven") {
        events
            .normal(
                "PlacementNotProvenOptimal",
                "Plan",
                format!(
                    "using {NOT_PROVEN_OPTIMAL} ({PLACEMENT_SEARCH_LIMIT} search nodes or {PLACEMENT_TIME_LIMIT:?}); \
                     its Required constraints hold, but a plan with less Preferred excess or fewer moves may exist"
                ),
            )
            .await;
        memory.announced.insert("placement-unproven", String::new());
    }
    let (key, text, warn_reason) = match p.spread_state() {
        SpreadState::Unplaceable(r) => {
            ("placement", r.join("; "), Some(reason::MEMBER_UNPLACEABLE))
        }
        SpreadState::Exceeded(v) => ("placement", v.join("; "), Some(reason::SPREAD_VIOLATED)),
        SpreadState::Unknown(m) => ("placement", m, Some(reason::MEMBER_UNPLACEABLE)),
        SpreadState::Met | SpreadState::Moving(_) => ("placement", String::new(), None),
    };
    if memory.announced.get(key).map(String::as_str) == Some(text.as_str()) {
        return;
    }
    if let Some(r) = warn_reason {
        events.warning(r, "Plan", &text).await;
    } else if memory.announced.contains_key(key) {
        events
            .normal(
                "TopologySpreadMet",
                "Plan",
                "every replicaSpreadConstraint holds",
            )
            .await;
    }
    memory.announced.insert(key, text);
}

// ---------------------------------------------------------------- apply

enum AuthState {
    Off,
    Password(String),
    /// The user's Secret (or its key) is missing; the message says which.
    Missing(String),
}

/// Creates `<cluster>-auth` when the operator manages it and it is absent
/// (never overwrites it), and reads the password.
async fn ensure_password(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    events: &Events<'_>,
) -> Result<AuthState, Error> {
    if !cluster.auth.enabled {
        return Ok(AuthState::Off);
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = &cluster.auth.secret_name;
    let existing = api.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.clone(),
        source,
    })?;
    let secret = match existing {
        Some(s) => s,
        None if cluster.auth.operator_managed => {
            let password = secret::generate_password();
            let Some(desired) = secret::auth_secret(cluster, owner, &password) else {
                return Ok(AuthState::Off);
            };
            ctx.metrics.api_write("Secret", "create");
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.create(&pp, &desired).await {
                Ok(_) => {
                    events
                        .normal(
                            reason::SECRET_CREATED,
                            "CreateSecret",
                            format!("generated the password in Secret {name}"),
                        )
                        .await;
                    return Ok(AuthState::Password(password));
                }
                // Created meanwhile (another reconcile, a restart): read it.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.get(name).await.map_err(|source| Error::Read {
                        kind: "Secret",
                        name: name.clone(),
                        source,
                    })?
                }
                Err(source) => {
                    return Err(Error::CreateSecret {
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
        None => {
            let msg = format!("Secret {name} named by spec.auth.passwordSecret does not exist");
            return Ok(AuthState::Missing(msg));
        }
    };
    let key = &cluster.auth.secret_key;
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        });
    match value {
        Some(p) if !p.is_empty() => Ok(AuthState::Password(p)),
        _ => Ok(AuthState::Missing(format!(
            "Secret {name} has no key {key:?}"
        ))),
    }
}

async fn apply_objects(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    events: &Events<'_>,
) -> Result<(), Error> {
    let ns = &cluster.namespace;
    let m = &ctx.metrics;
    let cm: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let name = desired.config_map.name_any();
    apply::apply(&cm, view.config_maps.get(&name), &desired.config_map, m).await?;
    let svc: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    for s in [&desired.headless, &desired.client] {
        apply::apply(&svc, view.services.get(&s.name_any()), s, m).await?;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
    for p in &desired.pdbs {
        apply::apply(&pdbs, view.pdbs.get(&p.name_any()), p, m).await?;
    }
    // Budgets of shards that are gone (no member pod left) or turned off.
    let wanted: BTreeSet<String> = desired.pdbs.iter().map(ResourceExt::name_any).collect();
    for name in view.pdbs.keys().filter(|n| !wanted.contains(*n)) {
        let shard_has_pods = view
            .members
            .keys()
            .any(|(s, _)| pdb_name(&cluster.name, *s) == *name);
        if !shard_has_pods || !cluster.pod_disruption_budget {
            delete(ctx, &pdbs, "PodDisruptionBudget", name, None).await?;
        }
    }
    let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let mut created = Vec::new();
    for s in &desired.statefulsets {
        let name = s.name_any();
        let live = view.statefulsets.get(&name);
        if apply::apply(&sts, live, s, m).await? && live.is_none() {
            created.push(name);
        }
    }
    if !created.is_empty() {
        events
            .normal(
                reason::MEMBER_CREATED,
                "CreateMembers",
                format!("created StatefulSets {}", created.join(", ")),
            )
            .await;
    }
    Ok(())
}

async fn delete<K>(
    ctx: &Context,
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    ctx.metrics.api_write(kind, "delete");
    let dp = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        // Already gone, or replaced by a newer object (uid precondition).
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            name: name.to_string(),
            source,
        }),
    }
}

async fn delete_pod(ctx: &Context, cluster: &ValidatedCluster, pod: &Pod) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    delete(ctx, &api, "Pod", &pod.name_any(), pod.metadata.uid.clone()).await
}

/// `persistence.size` may grow: volumeClaimTemplates are immutable, so the
/// members' PVCs are patched directly (Kubernetes and the storage class do
/// the expansion). A class that cannot expand is reported once, not retried
/// into an error loop.
async fn grow_volumes(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    events: &Events<'_>,
    memory: &mut Memory,
) {
    let Some(p) = &cluster.persistence else {
        return;
    };
    // A size the API server refused is not asked for again until it changes.
    if memory.announced.get("volumes-refused") == Some(&p.size.0) {
        return;
    }
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let mut failures = Vec::new();
    for (name, pvc) in &view.pvcs {
        let current = pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| api::quantity::value(&q.0).ok());
        if current.is_none_or(|c| c >= p.size_bytes) || pvc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        ctx.metrics.api_write("PersistentVolumeClaim", "patch");
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": p.size}}}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                events
                    .normal(
                        "VolumeExpanding",
                        "GrowVolume",
                        format!("asked to grow PersistentVolumeClaim {name} to {}", p.size.0),
                    )
                    .await;
            }
            Err(error) => failures.push(format!("{name}: {error}")),
        }
    }
    if !failures.is_empty() {
        events
            .warning("VolumeExpansionFailed", "GrowVolume", failures.join("; "))
            .await;
        memory.announced.insert("volumes-refused", p.size.0.clone());
    }
}

/// Pod scheduling rules are immutable: a Pending pod created with rules the
/// plan no longer wants is deleted (it never ran, nothing is lost) and its
/// StatefulSet re-creates it with the new ones. Returns how many.
async fn replace_pending_pods(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    events: &Events<'_>,
) -> Result<usize, Error> {
    let mut replaced = Vec::new();
    // A move's new copy is Pending under the same rules as its member.
    let mut pods: Vec<((u32, u32), &Pod)> = Vec::new();
    for k in desired_members(cluster) {
        for p in view.members.get(&k).into_iter().chain(view.surges.get(&k)) {
            pods.push((k, p));
        }
    }
    for ((s, m), pod) in pods {
        let facts = PodFacts::of(pod);
        let name = member_name(&cluster.name, s, m);
        let Some(sts) = desired.statefulsets.iter().find(|x| x.name_any() == name) else {
            continue;
        };
        // The live StatefulSet must already carry the new template, or the
        // re-created pod would get the old rules again.
        let live_current = view
            .statefulsets
            .get(&name)
            .is_some_and(|live| !placement_outdated_template(live, sts));
        if facts.unscheduled()
            && !facts.terminating
            && placement_outdated(&facts, sts)
            && live_current
        {
            delete_pod(ctx, cluster, pod).await?;
            replaced.push(facts.name);
        }
    }
    if !replaced.is_empty() {
        events
            .normal(
                reason::POD_REPLACED,
                "ReplacePendingPods",
                format!(
                    "re-created Pending pods with the new placement: {}",
                    replaced.join(", ")
                ),
            )
            .await;
    }
    Ok(replaced.len())
}

fn placement_outdated_template(live: &StatefulSet, desired: &StatefulSet) -> bool {
    use crate::builders::statefulset::ANNOTATION_PLACEMENT_HASH;
    super::members::template_annotation(live, ANNOTATION_PLACEMENT_HASH)
        != super::members::template_annotation(desired, ANNOTATION_PLACEMENT_HASH)
}

// ---------------------------------------------------------------- Valkey

struct ValkeyObservation {
    observed: ObservedCluster,
    session: Session,
}

fn member_ref(s: u32, m: u32) -> MemberRef {
    MemberRef::new(s, m)
}

fn pod_addr(pod: &Pod) -> Option<MemberAddr> {
    let ip: IpAddr = PodFacts::of(pod).ip?;
    MemberAddr::with_default_bus(ip, api::constants::VALKEY_PORT)
}

/// The keys the members are asked about with CONFIG GET.
fn config_keys(cluster: &ValidatedCluster) -> Vec<String> {
    let mut keys: Vec<String> = config::live_config(cluster).into_keys().collect();
    keys.push("availability-zone".into());
    keys
}

async fn observe_valkey(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    old_status: Option<&ValkeyClusterStatus>,
    password: Option<&str>,
    enabled: bool,
) -> ValkeyObservation {
    let mut refs: BTreeSet<(u32, u32)> = desired_members(cluster).collect();
    refs.extend(view.members.keys().copied());
    // Leaving members whose pod is missing too: the planner must see them (by
    // their recorded id) to tell whether they still own slots.
    refs.extend(view.statefulsets.values().filter_map(member_of));
    let targets: Vec<Target> = refs
        .iter()
        .map(|&(s, m)| {
            let known_node_id = old_status
                .and_then(|st| {
                    st.members
                        .iter()
                        .find(|x| x.shard == s as i32 && x.member == m as i32)
                })
                .and_then(|x| x.node_id.as_deref())
                .and_then(|id| id.parse::<NodeId>().ok());
            Target {
                member: member_ref(s, m),
                // Without the password nobody can be asked.
                addr: view
                    .members
                    .get(&(s, m))
                    .and_then(pod_addr)
                    .filter(|_| enabled),
                known_node_id,
            }
        })
        .collect();
    // The new copies of moves in flight, under their own index.
    let mut targets = targets;
    targets.extend(view.surges.iter().map(|(&(s, m), pod)| Target {
        member: MemberRef {
            shard: ShardIndex(s),
            member: MemberIndex::surge_of(m),
        },
        addr: pod_addr(pod).filter(|_| enabled),
        known_node_id: None,
    }));
    let (observed, session) = valkey_io::observe(
        &targets,
        password,
        &config_keys(cluster),
        ctx.settings.timeouts,
    )
    .await;
    ValkeyObservation { observed, session }
}

fn report_of(obs: &ObservedCluster, s: u32, m: u32) -> Option<&valkey::model::NodeReport> {
    obs.members
        .iter()
        .find(|x| x.member == member_ref(s, m))
        .and_then(ObservedMember::report)
}

/// The live primary of each shard: the member that says it is a primary and
/// serves slots (or, during bootstrap, any member that says primary and is
/// followed by another member of the shard).
fn live_primaries(cluster: &ValidatedCluster, obs: &ObservedCluster) -> BTreeMap<u32, u32> {
    let mut out = BTreeMap::new();
    for s in 0..cluster.shards {
        let with_slots = (0..=cluster.replicas).find(|m| {
            report_of(obs, s, *m)
                .is_some_and(|r| r.role() == Role::Primary && !r.nodes.myself().slots.is_empty())
        });
        if let Some(m) = with_slots {
            out.insert(s, m);
        }
    }
    out
}

/// The constraint keys, widest first, the node last.
fn topology_keys(cluster: &ValidatedCluster, view: &KubeView) -> Vec<String> {
    let keys: Vec<String> = cluster
        .spread
        .iter()
        .map(|c| c.topology_key.clone())
        .collect();
    let labels: Vec<&BTreeMap<String, String>> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.labels.as_ref())
        .collect();
    topology::keys_widest_first(&keys, &labels)
}

fn member_domains(
    view: &KubeView,
    pod: Option<&Pod>,
    keys: &[String],
) -> Option<topology::Domains> {
    let node = PodFacts::of(pod?).node?;
    let labels = view.node_labels(&node)?;
    Some(
        keys.iter()
            .filter_map(|k| labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
    )
}

fn shard_views(
    cluster: &ValidatedCluster,
    view: &KubeView,
    obs: &ValkeyObservation,
    keys: &[String],
) -> Vec<ShardView> {
    let primaries = live_primaries(cluster, &obs.observed);
    (0..cluster.shards)
        .map(|s| {
            let primary = primaries.get(&s).copied();
            let primary_info = primary
                .and_then(|p| report_of(&obs.observed, s, p))
                .map(|r| &r.replication);
            let primary_id = primary
                .and_then(|p| report_of(&obs.observed, s, p))
                .map(|r| r.node_id().clone());
            let members = (0..=cluster.replicas)
                .map(|m| {
                    let report = report_of(&obs.observed, s, m);
                    let in_sync = if Some(m) == primary {
                        true
                    } else {
                        match (report, primary_info) {
                            (Some(r), Some(p)) => {
                                r.nodes.myself().primary_id.as_ref() == primary_id.as_ref()
                                    && planner::replica_sync(
                                        p,
                                        &r.replication,
                                        PlannerOptions::default().max_replica_lag_bytes,
                                    )
                                    .is_in_sync()
                            }
                            _ => false,
                        }
                    };
                    Candidate {
                        member: m,
                        domains: member_domains(view, view.members.get(&(s, m)), keys),
                        in_sync,
                    }
                })
                .collect();
            ShardView {
                shard: s,
                primary,
                members,
            }
        })
        .collect()
}

fn desired_topology(
    cluster: &ValidatedCluster,
    view: &KubeView,
    views: &[ShardView],
    keys: &[String],
) -> DesiredCluster {
    let live: BTreeMap<String, String> = config::live_config(cluster)
        .into_iter()
        .map(|(k, v)| (k, config::normalized_value(&v)))
        .collect();
    let shards = (0..cluster.shards)
        .map(|s| DesiredShard {
            index: ShardIndex(s),
            members: (0..=cluster.replicas)
                .map(|m| {
                    let zone = view
                        .members
                        .get(&(s, m))
                        .and_then(|p| PodFacts::of(p).node)
                        .and_then(|n| {
                            view.node_labels(&n)
                                .and_then(|l| l.get(placement::ZONE_KEY))
                                .cloned()
                        });
                    DesiredMember {
                        index: MemberIndex(m),
                        config: zone
                            .map(|z| BTreeMap::from([("availability-zone".to_string(), z)]))
                            .unwrap_or_default(),
                    }
                })
                .collect(),
            primary: None,
            failover_preference: topology::failover_preference(views, s, keys)
                .into_iter()
                .map(MemberIndex)
                .collect(),
        })
        .collect();
    DesiredCluster {
        shards,
        config: live,
    }
}

fn set_primary(d: &mut DesiredCluster, shard: u32, member: u32) {
    if let Some(s) = d.shards.iter_mut().find(|s| s.index.0 == shard) {
        s.primary = Some(MemberIndex(member));
    }
}

/// The rolling step, and how many members are out of date.
fn rolling_step(
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    obs: &ValkeyObservation,
    placement: &Placement,
    preference: &BTreeMap<u32, Vec<u32>>,
    cluster_ready: bool,
) -> Roll {
    let primaries = live_primaries(cluster, &obs.observed);
    let members: Vec<RollMember> = desired_members(cluster)
        .map(|(s, m)| {
            let pod = view.members.get(&(s, m));
            let facts = pod.map(PodFacts::of);
            let name = member_name(&cluster.name, s, m);
            let sts = desired.statefulsets.iter().find(|x| x.name_any() == name);
            let running = facts
                .as_ref()
                .is_some_and(|f| !f.unscheduled() && !f.terminating);
            let restart = match (&facts, sts) {
                (Some(f), Some(sts)) => running && needs_restart(f, sts),
                _ => false,
            };
            let moving = running && placement.moved(s, m);
            RollMember {
                shard: s,
                member: m,
                has_pod: facts.is_some(),
                terminating: facts.as_ref().is_some_and(|f| f.terminating),
                stale: restart || moving,
                moving,
                primary: primaries.get(&s) == Some(&m),
            }
        })
        .collect();
    let stale = members.iter().filter(|m| m.stale && !m.moving).count();
    let moving = members.iter().filter(|m| m.moving).count();
    let step = rolling::next_step(
        &members,
        cluster_ready,
        preference,
        cluster.persistence.is_some(),
    );
    Roll {
        step,
        stale,
        moving,
    }
}

/// The rolling step and what is left to do.
struct Roll {
    step: RollStep,
    /// Members to restart for a new spec.
    stale: usize,
    /// Members to move to where the plan puts them.
    moving: usize,
}

// ---------------------------------------------------------------- moves

/// The health of the members: what the new copies of moves in flight add
/// (observed, but not members) is left out.
fn without_surges(mut h: Health) -> Health {
    h.issues.retain_mut(|i| match i {
        planner::HealthIssue::LeavingMembers { members } => {
            members.retain(|m| m.member.surge_for().is_none());
            !members.is_empty()
        }
        _ => true,
    });
    h
}

/// Whether the node of `pod` is lost past the grace after which members
/// are re-created elsewhere.
fn on_lost_node(view: &KubeView, facts: &PodFacts) -> bool {
    facts
        .node
        .as_deref()
        .and_then(|n| node_lost_for(view, n))
        .is_some_and(|d| d >= super::safety::NODE_LOST_GRACE)
}

/// Every move in flight (a member's StatefulSet runs a second pod), read
/// again from the live objects and what Valkey says, with its next step.
fn surges_in_flight(
    cluster: &ValidatedCluster,
    view: &KubeView,
    obs: &ValkeyObservation,
    placement: &Placement,
) -> Vec<(Surge, SurgeStep)> {
    let primaries = live_primaries(cluster, &obs.observed);
    let max_lag = PlannerOptions::default().max_replica_lag_bytes;
    let mut out = Vec::new();
    for (s, m) in desired_members(cluster) {
        let Some(sts) = view.statefulsets.get(&member_name(&cluster.name, s, m)) else {
            continue;
        };
        let ordinals = Ordinals::of(sts);
        if ordinals.surge().is_none() {
            continue;
        }
        let primary_report = primaries
            .get(&s)
            .and_then(|p| report_of(&obs.observed, s, *p));
        let pod = view.surges.get(&(s, m)).map(|p| {
            let facts = PodFacts::of(p);
            let report = report_of(&obs.observed, s, MemberIndex::surge_of(m).0);
            let in_sync = match (report, primary_report) {
                (Some(r), Some(p)) => {
                    r.nodes.myself().primary_id.as_ref() == Some(p.node_id())
                        && planner::replica_sync(&p.replication, &r.replication, max_lag)
                            .is_in_sync()
                }
                _ => false,
            };
            SurgePod {
                scheduled: !facts.unscheduled(),
                terminating: facts.terminating,
                node_lost: on_lost_node(view, &facts),
                in_sync,
                primary: report.is_some_and(|r| {
                    r.role() == Role::Primary && !r.nodes.myself().slots.is_empty()
                }),
            }
        });
        let surge = Surge {
            shard: s,
            member: m,
            ordinals,
            pod,
            old_is_primary: primaries.get(&s) == Some(&m),
            served_elsewhere: served_elsewhere(view, &primaries, s, MemberIndex::surge_of(m).0),
            still_wanted: placement.moved(s, m),
        };
        let step = surge::next(&surge);
        out.push((surge, step));
    }
    out
}

/// Why no other move or restart may start now, if one is under way.
fn move_in_flight(surges: &[(Surge, SurgeStep)], view: &KubeView) -> Option<String> {
    if let Some((s, step)) = surges.first() {
        let detail = match step {
            SurgeStep::Wait(w) | SurgeStep::Abort(w) => w.clone(),
            SurgeStep::Promote => format!(
                "shard {} member {}: handing the primary over to its new copy",
                s.shard, s.member
            ),
            SurgeStep::Complete => format!(
                "shard {} member {}: its new copy is in sync, the old one goes",
                s.shard, s.member
            ),
        };
        return Some(format!("a member is moving ({detail})"));
    }
    view.condemned.first().map(|((s, m), pod)| {
        format!(
            "a member is moving (shard {s} member {m}: its old copy, pod {}, is going)",
            pod.name_any()
        )
    })
}

/// `members` plus the new copy of every move in flight as one more replica
/// of its shard (met, attached to the primary, promoted when asked).
fn with_surges(
    members: &DesiredCluster,
    view: &KubeView,
    surges: &[(Surge, SurgeStep)],
) -> DesiredCluster {
    let mut out = members.clone();
    for (surge, step) in surges {
        if matches!(step, SurgeStep::Abort(_)) {
            continue;
        }
        let Some(pod) = view.surges.get(&(surge.shard, surge.member)) else {
            continue;
        };
        let zone = PodFacts::of(pod).node.and_then(|n| {
            view.node_labels(&n)
                .and_then(|l| l.get(placement::ZONE_KEY))
                .cloned()
        });
        if let Some(shard) = out.shards.iter_mut().find(|d| d.index.0 == surge.shard) {
            shard.members.push(DesiredMember {
                index: MemberIndex::surge_of(surge.member),
                config: zone
                    .map(|z| BTreeMap::from([("availability-zone".to_string(), z)]))
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// Applies member StatefulSet `name` as desired, running `ordinals`.
async fn apply_ordinals(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    name: &str,
    ordinals: Ordinals,
) -> Result<bool, Error> {
    let Some(want) = desired.statefulsets.iter().find(|x| x.name_any() == name) else {
        return Ok(false);
    };
    let mut want = want.clone();
    set_ordinals(&mut want, ordinals);
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    apply::apply(&api, view.statefulsets.get(name), &want, &ctx.metrics).await?;
    Ok(true)
}

fn claim_of(pod_name: &str) -> String {
    format!("{}-{pod_name}", crate::builders::statefulset::DATA_VOLUME)
}

fn node_of(pod: Option<&Pod>) -> String {
    pod.and_then(|p| PodFacts::of(p).node)
        .unwrap_or_else(|| "<none>".to_string())
}

/// Starts moving member `(s, m)`: its StatefulSet runs a second pod, created
/// from the template that already carries the new placement. Returns what
/// was done.
#[allow(clippy::too_many_arguments)]
async fn start_surge(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    placement: &Placement,
    s: u32,
    m: u32,
    events: &Events<'_>,
) -> Result<Option<String>, Error> {
    let name = member_name(&cluster.name, s, m);
    let Some(live) = view.statefulsets.get(&name) else {
        return Ok(None);
    };
    let ordinals = Ordinals::of(live);
    let surging = ordinals.with_surge();
    let Some(next) = surging.surge() else {
        return Ok(None);
    };
    let new_pod = format!("{name}-{next}");
    if cluster.persistence.is_some() {
        // A claim left under the new ordinal (a move given up, a member
        // removed and added back) would bring stale data, and pin the new
        // copy to the old volume's node: it goes first.
        let claim = claim_of(&new_pod);
        if view.pvcs.contains_key(&claim) {
            let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                Api::namespaced(ctx.client.clone(), &cluster.namespace);
            delete(ctx, &pvcs, "PersistentVolumeClaim", &claim, None).await?;
            return Ok(None);
        }
    }
    if !apply_ordinals(ctx, cluster, desired, view, &name, surging).await? {
        return Ok(None);
    }
    let old = view.members.get(&(s, m));
    let to = match placement.member(s, m) {
        MemberPlacement::Placed { node, .. } => node,
        _ => "<unplanned>".to_string(),
    };
    let msg = format!(
        "moving shard {s} member {m} off node {}: its new copy (pod {new_pod}) starts where the placement plan puts it (node {to}); the old copy (pod {}) stays until the new one is in sync",
        node_of(old),
        old.map(ResourceExt::name_any).unwrap_or_default()
    );
    tracing::info!(shard = s, member = m, "{msg}");
    events
        .normal(reason::MEMBER_MOVED, "MoveMember", &msg)
        .await;
    Ok(Some(msg))
}

/// Carries out the next step of a move in flight. `quiet`: no Valkey
/// command was sent this reconcile. Returns what was done.
#[allow(clippy::too_many_arguments)]
async fn surge_step(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    surge: &Surge,
    step: &SurgeStep,
    quiet: bool,
    events: &Events<'_>,
) -> Result<Option<String>, Error> {
    let (s, m) = (surge.shard, surge.member);
    let name = member_name(&cluster.name, s, m);
    let old = view.members.get(&(s, m));
    let new = view.surges.get(&(s, m));
    let pod_name = |p: Option<&Pod>| p.map(ResourceExt::name_any).unwrap_or_default();
    match step {
        SurgeStep::Complete if quiet => {
            // The old pod goes; its claim is deleted by sweep_moved_volumes
            // (kept by Kubernetes until the pod is gone).
            apply_ordinals(
                ctx,
                cluster,
                desired,
                view,
                &name,
                surge.ordinals.completed(),
            )
            .await?;
            let msg = format!(
                "moved shard {s} member {m}: its new copy (pod {} on node {}) is in sync; removing the old copy (pod {} on node {})",
                pod_name(new),
                node_of(new),
                pod_name(old),
                node_of(old)
            );
            tracing::info!(shard = s, member = m, "{msg}");
            events
                .normal(reason::MEMBER_MOVED, "MoveMember", &msg)
                .await;
            Ok(Some(msg))
        }
        SurgeStep::Abort(why) => {
            // The new copy's volume goes with the move, by the one volume rule.
            let keep = match (new, cluster.persistence.as_ref()) {
                (Some(pod), Some(p)) => {
                    safety::give_up_volume(&new_copy_facts(view, surge, pod), p.node_loss_grace)
                        .err()
                }
                _ => None,
            };
            if let Some(reason) = keep {
                let msg = format!(
                    "shard {s} member {m}: giving up its move ({why}) waits: the new copy's volume is kept because {reason}"
                );
                tracing::info!(shard = s, member = m, "{msg}");
                return Ok(None);
            }
            apply_ordinals(ctx, cluster, desired, view, &name, surge.ordinals.aborted()).await?;
            if let Some(pod) = new {
                if cluster.persistence.is_some() {
                    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                        Api::namespaced(ctx.client.clone(), &cluster.namespace);
                    let claim = claim_of(&pod.name_any());
                    delete(ctx, &pvcs, "PersistentVolumeClaim", &claim, None).await?;
                }
                if on_lost_node(view, &PodFacts::of(pod)) {
                    // Nobody on that node can finish the deletion.
                    force_delete_pod(ctx, cluster, pod).await?;
                }
            }
            let msg = format!(
                "gave up moving shard {s} member {m} ({why}); it stays on node {} (pod {})",
                node_of(old),
                pod_name(old)
            );
            tracing::warn!(shard = s, member = m, "{msg}");
            events
                .warning(reason::MEMBER_MOVE_ABORTED, "MoveMember", &msg)
                .await;
            Ok(Some(msg))
        }
        _ => Ok(None),
    }
}

/// The new copy of move `surge` as the volume rule sees it.
fn new_copy_facts(view: &KubeView, surge: &Surge, pod: &Pod) -> safety::CopyFacts {
    let facts = PodFacts::of(pod);
    safety::CopyFacts {
        ever_joined: !facts.unscheduled(),
        node_lost_for: facts.node.as_deref().and_then(|n| node_lost_for(view, n)),
        serves_slots: surge.pod.as_ref().is_some_and(|p| p.primary),
        shard_served_elsewhere: surge.served_elsewhere,
    }
}

/// Deletes the claims of copies a finished move removed: ordinals below the
/// StatefulSet's start are never used again (ordinals only grow).
async fn sweep_moved_volumes(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
) -> Result<(), Error> {
    if cluster.persistence.is_none() {
        return Ok(());
    }
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace);
    for (s, m) in desired_members(cluster) {
        let name = member_name(&cluster.name, s, m);
        let Some(live) = view.statefulsets.get(&name) else {
            continue;
        };
        let start = Ordinals::of(live).start;
        let prefix = claim_of(&format!("{name}-"));
        for (claim, pvc) in &view.pvcs {
            let index = claim
                .strip_prefix(&prefix)
                .and_then(|i| i.parse::<u32>().ok());
            if index.is_some_and(|i| i < start) && pvc.metadata.deletion_timestamp.is_none() {
                delete(
                    ctx,
                    &pvcs,
                    "PersistentVolumeClaim",
                    claim,
                    pvc.metadata.uid.clone(),
                )
                .await?;
            }
        }
    }
    Ok(())
}

/// Force-deletes copies a move removed whose node is lost (the kubelet
/// that would finish their deletion is gone; the member lives on in its
/// other copy). Returns how many.
async fn remove_condemned_on_lost_nodes(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
) -> Result<usize, Error> {
    let mut done = 0;
    for (_, pod) in &view.condemned {
        if on_lost_node(view, &PodFacts::of(pod)) {
            force_delete_pod(ctx, cluster, pod).await?;
            done += 1;
        }
    }
    Ok(done)
}

/// Deletes `pod` at once (grace period 0), if it is still the same pod.
async fn force_delete_pod(
    ctx: &Context,
    cluster: &ValidatedCluster,
    pod: &Pod,
) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = pod.name_any();
    ctx.metrics.api_write("Pod", "delete");
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pods.delete(&name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind: "Pod",
            name,
            source,
        }),
    }
}

/// One line per member the plan moves or that is moving, for the status.
fn move_lines(
    cluster: &ValidatedCluster,
    view: &KubeView,
    placement: &Placement,
    surges: &[(Surge, SurgeStep)],
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut busy: BTreeSet<(u32, u32)> = BTreeSet::new();
    for (surge, step) in surges {
        let key = (surge.shard, surge.member);
        busy.insert(key);
        let state = match step {
            SurgeStep::Wait(w) => w
                .split_once(": ")
                .map(|(_, w)| w.to_string())
                .unwrap_or_else(|| w.clone()),
            SurgeStep::Promote => "handing the primary over to its new copy".to_string(),
            SurgeStep::Complete => "its new copy is in sync".to_string(),
            SurgeStep::Abort(_) => "giving the move up".to_string(),
        };
        lines.push(format!(
            "shard {} member {}: moving from node {} to {} ({state})",
            surge.shard,
            surge.member,
            node_of(view.members.get(&key)),
            match view.surges.get(&key).and_then(|p| PodFacts::of(p).node) {
                Some(n) => format!("node {n}"),
                None => "where the plan puts it".to_string(),
            }
        ));
    }
    for ((s, m), pod) in &view.condemned {
        if busy.insert((*s, *m)) {
            lines.push(format!(
                "shard {s} member {m}: its old copy (pod {} on node {}) is going",
                pod.name_any(),
                node_of(Some(pod))
            ));
        }
    }
    for (s, m) in desired_members(cluster) {
        let running = view
            .members
            .get(&(s, m))
            .is_some_and(|p| !PodFacts::of(p).unscheduled());
        if running && placement.moved(s, m) && !busy.contains(&(s, m)) {
            let to = match placement.member(s, m) {
                MemberPlacement::Placed { node, .. } => node,
                _ => "<unplanned>".to_string(),
            };
            lines.push(format!(
                "shard {s} member {m}: on node {}, the plan puts it on node {to}",
                node_of(view.members.get(&(s, m)))
            ));
        }
    }
    lines
}

/// The TopologySpread state: the plan's, but not "met" while members still
/// have to get there.
fn spread_now(placement: &Placement, moves: &[String]) -> SpreadState {
    match placement.spread_state() {
        SpreadState::Met if !moves.is_empty() => SpreadState::Moving(moves.to_vec()),
        other => other,
    }
}

/// Primary balancing: after the quiet period, one shard at a time, only
/// while the cluster is Ready, move one primary to an in-sync replica in a
/// better domain.
fn balancing(
    cluster: &ValidatedCluster,
    views: &[ShardView],
    keys: &[String],
    cluster_ready: bool,
    memory: &Memory,
    now: Instant,
    desired: &mut DesiredCluster,
) -> BalanceState {
    let Some(mv) = topology::best_move(views, keys) else {
        return BalanceState::Aligned;
    };
    let what = format!(
        "shard {}: primary should move from member {} to member {}",
        mv.shard, mv.from, mv.to
    );
    if cluster.primary_balancing.mode == BalancingMode::Off {
        return BalanceState::Off(format!("{what} (primaryBalancing.mode is Off)"));
    }
    if !mv.ready {
        return BalanceState::Impossible(format!("{what}, but that replica is not in sync"));
    }
    if !cluster_ready {
        return BalanceState::Pending(format!("{what} once the cluster is Ready"));
    }
    let quiet = cluster.primary_balancing.quiet_period;
    if let Some(t) = memory.last_disturbance {
        let elapsed = now.duration_since(t);
        if elapsed < quiet {
            // No countdown in the message: the status must not change (and
            // be written) on every reconcile while nothing happens.
            return BalanceState::Pending(format!(
                "{what} after a quiet period of {} s",
                quiet.as_secs()
            ));
        }
    }
    set_primary(desired, mv.shard, mv.to);
    BalanceState::Pending(format!("{what}: failing over"))
}

async fn execute_actions(
    ctx: &Context,
    session: &Session,
    actions: &[VAction],
    events: &Events<'_>,
    memory: &mut Memory,
    now: Instant,
) -> Vec<String> {
    let mut done: Vec<String> = Vec::new();
    let mut by_kind: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for action in actions {
        let text = action.to_string();
        ctx.metrics.valkey_command(action.kind());
        match valkey_io::execute(session, action, ctx.settings.timeouts).await {
            Ok(()) => {
                tracing::info!(action = %text, "valkey command sent");
                match action {
                    VAction::Failover { on, .. } => {
                        ctx.metrics.failovers.inc();
                        memory.failover_requested.insert(on.shard.0, now);
                    }
                    VAction::MigrateSlots { .. } => {
                        ctx.metrics.slot_migrations.inc();
                    }
                    _ => {}
                }
                by_kind.entry(action.kind()).or_default().push(text.clone());
                if !matches!(action, VAction::ConfigSet { .. }) {
                    done.push(text);
                }
            }
            Err(error) => {
                tracing::warn!(action = %text, %error, "valkey command failed");
                events
                    .warning(
                        reason::VALKEY_COMMAND_FAILED,
                        action.kind(),
                        format!("{text}: {error}"),
                    )
                    .await;
            }
        }
    }
    for (kind, texts) in by_kind {
        let note = if texts.len() <= 4 {
            texts.join("; ")
        } else {
            format!("{}; ... ({} commands)", texts[..3].join("; "), texts.len())
        };
        events.normal(action_reason(kind), kind, note).await;
    }
    done
}

/// The (shard, member) a member StatefulSet's labels name.
fn member_of(sts: &StatefulSet) -> Option<(u32, u32)> {
    let labels = sts.labels();
    let parse = |k: &str| labels.get(k).and_then(|v| v.parse::<u32>().ok());
    Some((
        parse(api::constants::LABEL_SHARD)?,
        parse(api::constants::LABEL_MEMBER)?,
    ))
}

/// Whether shard `s`'s live primary is a member other than `not` whose pod
/// sits on a node that is not lost (the shard is served without `not`).
fn served_elsewhere(view: &KubeView, primaries: &BTreeMap<u32, u32>, s: u32, not: u32) -> bool {
    primaries.get(&s).is_some_and(|p| {
        *p != not
            && view
                .members
                .get(&(s, *p))
                .and_then(|pod| PodFacts::of(pod).node)
                .is_some_and(|n| node_lost_for(view, &n).is_none())
    })
}

/// Members a node id was ever recorded for (in status): they joined the
/// cluster and may hold slots or data, whatever their pod does now.
fn recorded_members(old_status: Option<&ValkeyClusterStatus>) -> BTreeSet<(u32, u32)> {
    old_status
        .map(|st| {
            st.members
                .iter()
                .filter(|m| m.node_id.is_some())
                .filter_map(|m| Some((u32::try_from(m.shard).ok()?, u32::try_from(m.member).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the StatefulSets of leaving members the planner says are safe to
/// remove (their slots moved, no replica follows them), and of leaving
/// members that never joined and never ran ([`safety::may_remove_leaving`]).
/// PVCs follow the retention policy (reclaimPolicy).
async fn remove_members(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    removable: &[MemberRef],
    joined: &BTreeSet<(u32, u32)>,
    events: &Events<'_>,
) -> Result<Vec<String>, Error> {
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let desired: BTreeSet<String> = desired_members(cluster)
        .map(|(s, m)| member_name(&cluster.name, s, m))
        .collect();
    let mut removed = Vec::new();
    for (name, sts) in &view.statefulsets {
        if desired.contains(name) {
            continue;
        }
        let Some((s, m)) = member_of(sts) else {
            continue;
        };
        let ran = view
            .members
            .get(&(s, m))
            .is_some_and(|p| !PodFacts::of(p).unscheduled());
        if safety::may_remove_leaving(
            removable.contains(&member_ref(s, m)),
            joined.contains(&(s, m)),
            ran,
        ) {
            delete(ctx, &api, "StatefulSet", name, sts.metadata.uid.clone()).await?;
            removed.push(format!("shard {s} member {m}"));
        }
    }
    if !removed.is_empty() {
        events
            .normal(
                reason::MEMBER_REMOVED,
                "RemoveMembers",
                format!("removed {}", removed.join(", ")),
            )
            .await;
    }
    Ok(removed)
}

/// The role label a member should carry: `primary` for a primary that
/// serves slots, `replica` for a replica. A fresh node (an empty primary not
/// yet attached to its shard) keeps the label it has, so selecting
/// `valkey.rs/role=primary` never finds a node that serves nothing.
fn role_label(report: &valkey::model::NodeReport) -> Option<&'static str> {
    match report.role() {
        Role::Primary if !report.nodes.myself().slots.is_empty() => Some(ROLE_PRIMARY),
        Role::Primary => None,
        Role::Replica => Some(ROLE_REPLICA),
    }
}

/// Keeps `valkey.rs/role` equal to the live role.
async fn update_role_labels(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    obs: &ObservedCluster,
) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let mut pods: Vec<(u32, u32, &Pod)> = view
        .members
        .iter()
        .map(|(k, pod)| (k.0, k.1, pod))
        .collect();
    for (k, pod) in &view.surges {
        pods.push((k.0, MemberIndex::surge_of(k.1).0, pod));
    }
    for (s, m, pod) in pods {
        let Some(report) = report_of(obs, s, m) else {
            continue;
        };
        let Some(want) = role_label(report) else {
            continue;
        };
        if PodFacts::of(pod).role_label.as_deref() == Some(want) {
            continue;
        }
        ctx.metrics.api_write("Pod", "patch");
        let patch = serde_json::json!({"metadata": {"labels": {LABEL_ROLE: want}}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let name = pod.name_any();
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => return Err(Error::PatchPod { name, source }),
        }
    }
    Ok(())
}

/// How long `node` has been lost: `Some(d)` when its Ready condition has not
/// been True for `d`, or its Node object has been gone for `d` (as long as the
/// operator has seen it gone); `None` when it is Ready.
fn node_lost_for(view: &KubeView, node: &str) -> Option<Duration> {
    let Some(n) = view
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    else {
        return Some(
            view.missing_nodes
                .get(node)
                .copied()
                .unwrap_or(Duration::ZERO),
        );
    };
    if adapt::nodes::is_ready(n) {
        return None;
    }
    let since = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let lost_for = since
        .map(|t| k8s_openapi::jiff::Timestamp::now().duration_since(t))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(Duration::ZERO);
    Some(lost_for)
}

/// Records when each node a member pod is bound to was first seen without a
/// Node object, and puts how long into `view.missing_nodes`.
fn note_missing_nodes(view: &mut KubeView, memory: &mut Memory, now: Instant) {
    let known: BTreeSet<&str> = view
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let bound: BTreeSet<String> = view
        .members
        .values()
        .chain(view.surges.values())
        .chain(view.condemned.iter().map(|(_, p)| p))
        .filter_map(|p| PodFacts::of(p).node)
        .filter(|n| !known.contains(n.as_str()))
        .collect();
    memory
        .nodes_missing_since
        .retain(|name, _| bound.contains(name));
    for name in bound {
        let since = *memory
            .nodes_missing_since
            .entry(name.clone())
            .or_insert(now);
        view.missing_nodes
            .insert(name, now.saturating_duration_since(since));
    }
}

/// Re-creates members whose node is lost (see [`super::heal`]). Returns how
/// many pods it removed.
async fn heal_lost_members(
    ctx: &Context,
    cluster: &ValidatedCluster,
    view: &KubeView,
    obs: &ObservedCluster,
    events: &Events<'_>,
    memory: &mut Memory,
) -> Result<usize, Error> {
    let primaries = live_primaries(cluster, obs);
    let mut lost = Vec::new();
    for (s, m) in desired_members(cluster) {
        let Some(pod) = view.members.get(&(s, m)) else {
            continue;
        };
        let Some(node) = PodFacts::of(pod).node else {
            continue;
        };
        let Some(lost_for) = node_lost_for(view, &node) else {
            continue;
        };
        let served_elsewhere = served_elsewhere(view, &primaries, s, m);
        lost.push(super::heal::LostMember {
            shard: s,
            member: m,
            lost_for,
            shard_served_elsewhere: served_elsewhere,
        });
    }
    if lost.is_empty() {
        memory.announced.remove("heal");
        return Ok(0);
    }
    let volume_grace = cluster
        .persistence
        .as_ref()
        .map(|p| p.node_loss_grace)
        .unwrap_or_default();
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let mut waiting = Vec::new();
    let mut done = 0;
    for decision in super::heal::decide(&lost, cluster.persistence.is_some(), volume_grace) {
        let (s, m, with_volume) = match decision {
            super::heal::Heal::Wait {
                shard,
                member,
                reason,
            } => {
                waiting.push(format!("shard {shard} member {member}: {reason}"));
                continue;
            }
            super::heal::Heal::ReplacePod { shard, member } => (shard, member, false),
            super::heal::Heal::ReplacePodAndVolume { shard, member } => (shard, member, true),
        };
        let Some(pod) = view.members.get(&(s, m)) else {
            continue;
        };
        let name = pod.name_any();
        let node = PodFacts::of(pod).node.unwrap_or_default();
        if with_volume {
            let claim = format!("{}-{name}", crate::builders::statefulset::DATA_VOLUME);
            delete(ctx, &pvcs, "PersistentVolumeClaim", &claim, None).await?;
        }
        force_delete_pod(ctx, cluster, pod).await?;
        done += 1;
        let what = if with_volume {
            "its volume on that node is given up and it is reseeded by its primary"
        } else {
            "it is reseeded by its primary"
        };
        events
            .warning(
                reason::MEMBER_REPLACED,
                "Heal",
                format!("shard {s} member {m}: node {node} is lost; re-creating the member where the plan puts it ({what})"),
            )
            .await;
    }
    let text = waiting.join("; ");
    if !waiting.is_empty() && memory.announced.get("heal") != Some(&text) {
        events.warning(reason::MEMBER_LOST, "Heal", &text).await;
        memory.announced.insert("heal", text);
    }
    Ok(done)
}

/// Announces primaries that changed since the last reconcile (Valkey's own
/// failovers included).
async fn notice_failovers(
    views: &[ShardView],
    memory: &mut Memory,
    events: &Events<'_>,
    now: Instant,
) {
    for v in views {
        let Some(p) = v.primary else { continue };
        match memory.primaries.insert(v.shard, p) {
            Some(old) if old != p => {
                memory.last_disturbance = Some(now);
                events
                    .normal(
                        reason::PRIMARY_CHANGED,
                        "Failover",
                        format!(
                            "shard {}: member {p} is now the primary (was member {old})",
                            v.shard
                        ),
                    )
                    .await;
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- status

fn is_bootstrapping(obs: &ObservedCluster, old: Option<&ValkeyClusterStatus>) -> bool {
    let ever_ready = old.is_some_and(|s| {
        s.ready_shards > 0
            || s.condition(CONDITION_READY)
                .is_some_and(|c| c.status == "True")
    });
    let any_slots = obs
        .members
        .iter()
        .filter_map(ObservedMember::report)
        .any(|r| !r.nodes.myself().slots.is_empty());
    !ever_ready && (!any_slots || old.is_none())
}

fn cluster_state(h: &Health, all_pods_ready: bool, blocked: Vec<String>) -> ClusterState {
    let ready = h.is_ready() && all_pods_ready;
    let reason = if h.is_ready() && !all_pods_ready {
        Some("PodsNotReady".to_string())
    } else {
        h.first_reason().map(str::to_string)
    };
    let message = if ready {
        format!(
            "{} shard(s) serve all 16384 slots with every replica in sync",
            h.ready_shards
        )
    } else {
        let mut issues: Vec<String> = h.issues.iter().take(3).map(ToString::to_string).collect();
        if h.issues.len() > 3 {
            issues.push(format!("and {} more", h.issues.len() - 3));
        }
        if issues.is_empty() {
            "member pods are not all Ready".into()
        } else {
            issues.join("; ")
        }
    };
    ClusterState {
        ready,
        degraded: h.is_degraded(),
        reason,
        message,
        blocked,
    }
}

async fn announce_readiness(
    old: Option<&ValkeyClusterStatus>,
    new: &ValkeyClusterStatus,
    events: &Events<'_>,
) {
    let was = old
        .and_then(|s| s.condition(CONDITION_READY))
        .map(|c| c.status == "True");
    let Some(now) = new.condition(CONDITION_READY) else {
        return;
    };
    let is = now.status == "True";
    if was == Some(is) {
        return;
    }
    if is {
        events
            .normal(reason::CLUSTER_READY, "Ready", &now.message)
            .await;
    } else if was == Some(true) {
        events
            .warning(
                reason::CLUSTER_NOT_READY,
                "Ready",
                format!("{}: {}", now.reason, now.message),
            )
            .await;
    }
}

fn observations(
    cluster: &ValidatedCluster,
    view: &KubeView,
    obs: &ObservedCluster,
    h: &Health,
    spread: &SpreadState,
    last_action: Option<String>,
) -> Observations {
    let primaries = live_primaries(cluster, obs);
    let mut refs: BTreeSet<(u32, u32)> = desired_members(cluster).collect();
    refs.extend(view.members.keys().copied());
    let not_ready: BTreeSet<MemberRef> = h
        .issues
        .iter()
        .filter_map(|i| match i {
            planner::HealthIssue::MemberUnreachable { member }
            | planner::HealthIssue::ReplicaMissing { member }
            | planner::HealthIssue::ReplicaNotInSync { member, .. }
            | planner::HealthIssue::MemberNotJoined { member } => Some(*member),
            _ => None,
        })
        .collect();
    let mut members = Vec::new();
    let mut topology: BTreeMap<u32, Vec<TopologyMember>> = BTreeMap::new();
    for (s, m) in refs {
        let pod = view.members.get(&(s, m));
        let facts = pod.map(PodFacts::of);
        let node = facts.as_ref().and_then(|f| f.node.clone());
        let labels = node.as_deref().and_then(|n| view.node_labels(n));
        let zone = labels.and_then(|l| l.get(placement::ZONE_KEY)).cloned();
        let region = labels.and_then(|l| l.get(placement::REGION_KEY)).cloned();
        let report = report_of(obs, s, m);
        let role = report.map(|r| match r.role() {
            Role::Primary => ROLE_PRIMARY.to_string(),
            Role::Replica => ROLE_REPLICA.to_string(),
        });
        let node_id = report.map(|r| r.node_id().to_string()).or_else(|| {
            obs.members
                .iter()
                .find(|x| x.member == member_ref(s, m))
                .and_then(|x| x.known_node_id.as_ref())
                .map(ToString::to_string)
        });
        let ready = facts.as_ref().is_some_and(|f| f.ready)
            && report.is_some()
            && !not_ready.contains(&member_ref(s, m));
        // The live pod's name: a member that moved runs under a later ordinal.
        let pod_name = pod.map(ResourceExt::name_any).unwrap_or_else(|| {
            let sts = member_name(&cluster.name, s, m);
            let start = view
                .statefulsets
                .get(&sts)
                .map(Ordinals::of)
                .unwrap_or(Ordinals::INITIAL)
                .start;
            format!("{sts}-{start}")
        });
        members.push(MemberStatus {
            shard: s as i32,
            member: m as i32,
            pod: pod_name,
            node: node.clone(),
            zone: zone.clone(),
            region: region.clone(),
            role: role.clone(),
            node_id,
            ready,
            ip: facts.as_ref().and_then(|f| f.ip).map(|ip| ip.to_string()),
        });
        if s < cluster.shards && m <= cluster.replicas {
            topology.entry(s).or_default().push(TopologyMember {
                member: m as i32,
                node,
                zone,
                region,
                role,
            });
        }
    }
    let shards = (0..cluster.shards)
        .map(|s| {
            let primary = primaries.get(&s).copied();
            let slots = primary
                .and_then(|p| report_of(obs, s, p))
                .map(|r| r.nodes.myself().slots.to_string());
            ShardStatus {
                index: s as i32,
                slots,
                primary: primary.map(|p| p as i32),
            }
        })
        .collect();
    let zones: BTreeSet<&String> = members.iter().filter_map(|m| m.zone.as_ref()).collect();
    let spread = match spread {
        SpreadState::Met => "spread ok".to_string(),
        SpreadState::Unplaceable(r) => format!("{} member(s) unplaceable", r.len()),
        SpreadState::Exceeded(v) => format!("{} preferred violation(s)", v.len()),
        SpreadState::Moving(v) => format!("{} member(s) moving", v.len()),
        SpreadState::Unknown(_) => "placement unknown".to_string(),
    };
    let summary = format!(
        "{}/{} shards ready, {} zone(s), {spread}",
        h.ready_shards,
        cluster.shards,
        zones.len()
    );
    Observations {
        ready_shards: i32::try_from(h.ready_shards).unwrap_or(i32::MAX),
        shards,
        members,
        topology: topology
            .into_iter()
            .map(|(shard, members)| ShardTopology {
                shard: shard as i32,
                members,
            })
            .collect(),
        topology_summary: Some(summary),
        last_action,
        message: Some(if h.is_ready() {
            "ready".to_string()
        } else {
            h.first_reason().unwrap_or("converging").to_string()
        }),
    }
}
