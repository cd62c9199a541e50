// Over 600 lines: the driver: `run` and one function per step, in the order they run.
//! One reconcile of one ValkeyCluster, the driver. [`run`] reads like the
//! pipeline it runs (see [`super`] for the module map); each step is a
//! function below it:
//!
//! 1. **dereference** the object and **validate** its spec ([`validate`]; an
//!    invalid one gets a condition and an event, [`refuse`], and nothing else
//!    happens until it changes; a paused one only says so, [`pause`]; a
//!    restore waits for its backup, [`restore_gate`]);
//! 2. Kubernetes side ([`kubernetes`]): **observe** the owned objects, member
//!    pods, Nodes and Pods; **decide** the placement and the desired objects;
//!    **act**: the Secrets (password, users, certificates) first, then the
//!    owned objects by server-side apply when they differ, Pending pods whose
//!    scheduling rules are out of date re-created, volumes grown;
//! 3. Valkey side: **observe** every member (one connection each,
//!    [`members`]), derive the **facts** once, **decide** (moves, rolling
//!    update, balancing, the next Valkey commands, healing) and **act** in a
//!    fixed order (see [`super::act::carry_out`]); then the logins and
//!    certificates that follow the members ([`logins`]: the TLS switch,
//!    password rotation, ACL users, CA rotation);
//! 4. **report** ([`report`]): the status (written when it changed), its
//!    events, the cluster's gauges, and when to look again.
//!
//! Every step is idempotent: a reconcile cut short anywhere starts again from
//! the top with what the API server and the members then say.

use super::act::{self, Actor};
use super::done::Done;
use super::observe::valkey::{AuthState, TlsState, ValkeyObservation};
use super::report::{self, Target};
use super::{Context, Error, Memory, Settings, observe};
use crate::backup::restore;
use crate::events::{Events, reason};
use crate::metrics;
use api::{ValidatedCluster, ValkeyCluster};
use decide::facts::{Facts, recorded_members};
use decide::rotation::{Listed, MemberAuths};
use decide::view::KubeView;
use decide::{self, Decision, cleanup, placement::Placement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use resources::Desired;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The reconcile: runs the pipeline with what is remembered about the
/// cluster, and remembers what it learnt.
pub async fn reconcile(vc: &ValkeyCluster, ctx: &Context, key: &str) -> Result<Action, Error> {
    let events = ctx.events(vc.object_ref(&()));
    let mut memory = ctx.memory(key);
    let result = run(vc, ctx, &events, &mut memory).await;
    ctx.remember(key, memory);
    result
}

/// How soon a refused restore looks at its backup again.
const RESTORE_RECHECK: Duration = Duration::from_secs(10);

/// What every step reads: the object, the operator's shared context, where
/// events go, and the cluster the status is written to.
struct Io<'a> {
    vc: &'a ValkeyCluster,
    ctx: &'a Context,
    events: &'a Events<'a>,
    target: Target<'a>,
}

/// The driver: the steps, in order.
async fn run(
    vc: &ValkeyCluster,
    ctx: &Context,
    events: &Events<'_>,
    memory: &mut Memory,
) -> Result<Action, Error> {
    // 1. dereference, (pause,) validate, (wait for a restore's backup)
    let io = Io {
        vc,
        ctx,
        events,
        target: Target::of(vc, ctx)?,
    };
    if is_paused(vc) {
        return pause(&io, memory).await;
    }
    if std::mem::take(&mut memory.announced.paused) {
        events
            .normal(reason::RESUMED, "Pause", "reconciles resumed")
            .await;
    }
    let cluster = match validate(vc, &ctx.settings, &member_images(vc, ctx)) {
        Ok(cluster) => cluster,
        Err(message) => return refuse(&io, message, memory).await,
    };
    memory.announced.invalid_spec = None;
    let gate = match restore_gate(&io, &cluster, memory).await? {
        Ok(gate) => gate,
        Err(later) => return Ok(later),
    };
    let cluster = with_operator_settings(cluster, &ctx.settings, &gate);

    // 2. Kubernetes: observe, place, apply the owned objects
    let k = kubernetes(&io, cluster, memory).await?;

    // 3. Valkey: observe, facts, decide, act
    let seen = members(&io, &k).await;
    let mut facts = Facts::new(&k.cluster, &k.kube, &seen.valkey.observed, io.target.now.0);
    facts.password_stale = seen.password_stale.clone();
    let now = Instant::now();
    // The quiet period also starts when the operator first sees the cluster.
    memory.last_disturbance.get_or_insert(now);
    let bootstrapping = !report::observations::ever_ready(io.target.old);
    let held = k.blocker().is_some();
    let decision = decide::next(
        &facts,
        &k.desired,
        &k.placement,
        (held, bootstrapping),
        memory,
        now,
    )?;
    log_waits(&decision);
    let cleanup = decide::cleanup(&facts, &decision, &recorded_members(io.target.old));
    let said = decide::announce(&facts, &decision, memory);
    let session = &seen.valkey.session;
    let done = act::carry_out(
        &k.actor(&io),
        &decision,
        &cleanup,
        said,
        session,
        memory,
        now,
    )
    .await?;
    let step = Step {
        facts: &facts,
        decision: &decision,
        done: &done,
    };
    let tls_switching = logins(&io, &k, &seen, &step, memory).await?;

    // 4. report
    report(&io, &k, &seen, &step, tls_switching, &gate, memory).await
}

/// The annotation `valkey.rs/paused: "true"` is set.
fn is_paused(vc: &ValkeyCluster) -> bool {
    vc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(api::constants::ANNOTATION_PAUSED))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// A paused cluster: its status says so, nothing else is done.
async fn pause(io: &Io<'_>, memory: &mut Memory) -> Result<Action, Error> {
    write_alone(io, report::paused(&io.target)).await?;
    if !memory.announced.paused {
        io.events
            .normal(
                reason::PAUSED,
                "Pause",
                "reconciles paused by the annotation",
            )
            .await;
        memory.announced.paused = true;
    }
    Ok(Action::requeue(io.ctx.settings.slow_requeue))
}

/// The spec as the operator runs it, or why it may not run: the schema's
/// rules and the operator's own (`--allowed-images`, no downgrade the
/// members cannot follow).
fn validate(
    vc: &ValkeyCluster,
    settings: &Settings,
    member_images: &BTreeMap<String, String>,
) -> Result<ValidatedCluster, String> {
    let cluster =
        api::v1alpha1::validate_with(vc, &settings.validation).map_err(|e| e.to_string())?;
    if let Some(why) = settings.images_refused(&cluster) {
        return Err(why);
    }
    if let Some(why) = downgrade_refused(vc, &cluster.image, member_images) {
        return Err(why);
    }
    Ok(cluster)
}

/// An invalid spec: the status and one event say why; nothing else happens
/// until the object changes.
async fn refuse(io: &Io<'_>, message: String, memory: &mut Memory) -> Result<Action, Error> {
    let status = report::invalid(&io.target, io.vc.metadata.generation, &message);
    write_alone(io, status).await?;
    if memory.announced.invalid_spec.as_deref() != Some(message.as_str()) {
        io.events
            .warning(reason::INVALID_SPEC, "Validate", &message)
            .await;
        memory.announced.invalid_spec = Some(message);
    }
    Ok(Action::await_change())
}

/// Writes a status made before any member was looked at, and its gauges.
async fn write_alone(io: &Io<'_>, status: api::v1alpha1::ValkeyClusterStatus) -> Result<(), Error> {
    let conditions = metrics::conditions_of(&status);
    report::write_status(io.ctx, &io.target, status).await?;
    let namespace = io.vc.metadata.namespace.as_deref().unwrap_or_default();
    io.ctx
        .metrics
        .observe_conditions(namespace, &io.target.name, &conditions);
    Ok(())
}

/// A restore: no member is made until the backup is usable (no empty
/// cluster); while it runs, the first members load it (see
/// `backup::restore`). `Err` holds when to look again at a backup that
/// cannot be used yet.
async fn restore_gate(
    io: &Io<'_>,
    cluster: &ValidatedCluster,
    memory: &mut Memory,
) -> Result<Result<restore::Gate, Action>, Error> {
    let gate = restore::gate(io.ctx, io.vc, cluster.shards, io.target.old).await?;
    if matches!(gate, restore::Gate::Busy) {
        return Ok(Err(Action::requeue(crate::backup::store::STORE_BUSY_RETRY)));
    }
    if let restore::Gate::Refused(refusal) = &gate {
        let status = report::restore_refused(&io.target, io.vc.metadata.generation, refusal);
        write_alone(io, status).await?;
        if memory.announced.restore_refused.as_deref() != Some(refusal.message.as_str()) {
            io.events
                .warning(reason::RESTORE_REFUSED, "Restore", &refusal.message)
                .await;
            memory.announced.restore_refused = Some(refusal.message.clone());
        }
        // A backup that completes, or is created, is noticed by this look.
        return Ok(Err(Action::requeue(RESTORE_RECHECK)));
    }
    memory.announced.restore_refused = None;
    if let restore::Gate::Go(record) = &gate
        && io.target.old.and_then(|s| s.restore.as_ref()).is_none()
    {
        // The record goes in before any member is made: a reconcile cut
        // short after the members are made still finds it.
        let mut status = io.target.old.cloned().unwrap_or_default();
        restore::report(&mut status, io.target.old, record, None, &io.target.now);
        report::write_status(io.ctx, &io.target, status).await?;
        io.events
            .normal(
                reason::RESTORE_STARTED,
                "Restore",
                format!(
                    "restoring ValkeyBackup {} ({} shards from {}/{})",
                    record.backup,
                    record.shard_slots.len(),
                    record.bucket,
                    record.folder
                ),
            )
            .await;
    }
    Ok(Ok(gate))
}

/// What the operator's settings, not the spec, decide of the members: the
/// exporter runs the operator's own image, the members' NetworkPolicy's
/// default and the operator's pods come from its flags, and a restore in
/// progress names its backup.
fn with_operator_settings(
    mut cluster: ValidatedCluster,
    settings: &Settings,
    gate: &restore::Gate,
) -> ValidatedCluster {
    if let Some(exporter) = cluster.exporter.as_mut() {
        exporter.image.clone_from(&settings.exporter_image);
    }
    let np = &mut cluster.network_policy;
    np.enabled = Some(np.enabled.unwrap_or(settings.member_network_policy));
    np.operator.clone_from(&settings.operator_pods);
    cluster.restore = gate
        .in_progress()
        .map(|record| api::v1alpha1::RestoreSource {
            record: record.clone(),
            image: settings.exporter_image.clone(),
        });
    cluster
}

/// What the Kubernetes side leaves for the Valkey side and the report.
struct KubeSide {
    /// The cluster as the members should run it (with the rotation's
    /// generation and whether a TLS switch is under way).
    cluster: ValidatedCluster,
    owner: OwnerReference,
    kube: KubeView,
    placement: Placement,
    auth: AuthState,
    rotation: decide::rotation::Rotation,
    /// The value of `valkey.rs/rotate-ca`, if set.
    rotate_request: Option<String>,
    tls: TlsState,
    users: decide::users::Users,
    system: act::users::SystemLogins,
    desired: Desired,
    /// Pending pods re-created with new scheduling rules.
    replaced: usize,
}

impl KubeSide {
    /// A missing Secret that keeps the operator from talking to members.
    fn blocker(&self) -> Option<(String, String)> {
        self.auth.blocker().or_else(|| self.tls.blocker())
    }

    fn has_members(&self) -> bool {
        !self.kube.statefulsets.is_empty()
    }

    fn actor<'a>(&'a self, io: &'a Io<'a>) -> Actor<'a> {
        Actor {
            ctx: io.ctx,
            cluster: &self.cluster,
            desired: &self.desired,
            kube: &self.kube,
            placement: &self.placement,
            events: io.events,
        }
    }
}

/// The Kubernetes side: observe the owned objects, Nodes and Pods, place
/// the members, make the Secrets (password, certificates, users), then
/// apply the owned objects, re-create Pending pods out of date, grow
/// volumes.
async fn kubernetes(
    io: &Io<'_>,
    mut cluster: ValidatedCluster,
    memory: &mut Memory,
) -> Result<KubeSide, Error> {
    let (ctx, events) = (io.ctx, io.events);
    let owner = io
        .vc
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("uid"))?;
    let mut kube = observe::kube::kubernetes(ctx, &cluster).await?;
    memory.note_missing_nodes(&mut kube, Instant::now());
    // TLS turned on for a live cluster: its members speak plaintext until
    // the switch is done (their config file says so).
    if let Some(tls) = cluster.tls.as_mut() {
        tls.switching = decide::tls::switching(
            kube.config_maps
                .get(&resources::config_map_name(&cluster.name)),
            !kube.statefulsets.is_empty(),
        );
    }
    let placement = plan_placement(&cluster, &kube).await;
    events.notes(placement.notes(&mut memory.announced)).await;
    let recorded = act::rotation::read_record(ctx, &cluster).await?;
    let source = decide::rotation::password_source(
        (&cluster.auth.secret_name, &cluster.auth.secret_key),
        &recorded,
        decide::rotation::pods_by_password(&kube).0,
    );
    let auth = act::kube::ensure_password(ctx, &cluster, &owner, source, events).await?;
    let rotation = decide::rotation::decide(
        cluster.auth.enabled,
        auth.password(),
        &recorded,
        decide::rotation::pods_by_password(&kube),
        decide::rotation::in_use(&kube),
    );
    let rotation = act::rotation::record(ctx, (&cluster, &owner), rotation, events).await?;
    let cluster = ValidatedCluster {
        password_rotation: rotation.number,
        ..cluster
    };
    let rotate_request = io
        .vc
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(api::constants::ANNOTATION_ROTATE_CA))
        .cloned();
    let now_unix = io.target.now.0.as_second();
    let tls = act::tls::ensure(
        ctx,
        &cluster,
        &owner,
        &decide::tls::member_ips(&cluster, &kube),
        (now_unix, rotate_request.as_deref()),
        events,
    )
    .await?;
    let mut users = act::users::resolve(ctx, &cluster).await?;
    // Before the StatefulSets: member pods mount it.
    let has_members = !kube.statefulsets.is_empty();
    let system = act::users::ensure_file(
        ctx,
        &cluster,
        &owner,
        &mut users,
        (memory, has_members),
        events,
    )
    .await?;
    let desired = decide::objects(&cluster, &owner, &placement, &kube);
    let orphaned = cleanup::Orphans {
        services: cleanup::orphaned_external_services(&desired, &kube),
        pdbs: cleanup::orphaned_pdbs(&cluster, &desired, &kube),
        network_policy: cleanup::orphaned_network_policy(&desired, &kube),
    };
    act::kube::apply_objects(ctx, &cluster, &desired, &kube, &orphaned, events).await?;
    let pending = cleanup::pending_pods_to_replace(&cluster, &desired, &kube);
    let replaced = act::kube::replace_pending_pods(ctx, &cluster, &pending, events).await?;
    let grow =
        cleanup::volumes_to_grow(&cluster, &kube, memory.announced.volumes_refused.as_deref());
    act::kube::grow_volumes(ctx, &cluster, &grow, events, &mut memory.announced).await;
    Ok(KubeSide {
        cluster,
        owner,
        kube,
        placement,
        auth,
        rotation,
        rotate_request,
        tls,
        users,
        system,
        desired,
        replaced,
    })
}

/// What the members said: their cluster views and sessions, the auth
/// settings they run, and which of them run another password than they
/// should.
struct Seen {
    valkey: ValkeyObservation,
    member_auth: MemberAuths,
    password_stale: std::collections::BTreeSet<(u32, u32)>,
}

/// Observes every member (one connection each) and the auth it runs.
async fn members(io: &Io<'_>, k: &KubeSide) -> Seen {
    let logins = (
        &k.auth,
        k.system.operator.clone(),
        k.rotation.login(k.auth.password()),
    );
    let valkey =
        observe::valkey::members(io.ctx, &k.cluster, &k.kube, io.target.old, logins, &k.tls).await;
    let member_auth = observe::valkey::member_auth(&valkey.session).await;
    let expected_password = if k.cluster.auth.enabled {
        k.auth.password()
    } else {
        Some("")
    };
    let password_stale = observe::valkey::password_stale(expected_password, &member_auth);
    Seen {
        valkey,
        member_auth,
        password_stale,
    }
}

/// What the Valkey side found, decided and did.
struct Step<'a> {
    facts: &'a Facts<'a>,
    decision: &'a Decision,
    done: &'a Done,
}

/// What holds a converging cluster back (e.g. views still differing after
/// the MEETs), for whoever reads the debug log.
fn log_waits(decision: &Decision) {
    if tracing::enabled!(tracing::Level::DEBUG) && !decision.valkey.waiting.is_empty() {
        let waits: Vec<String> = decision
            .valkey
            .waiting
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::debug!(waiting = %waits.join("; "), "the Valkey plan waits");
    }
}

/// After the Valkey commands, what follows the members (unless a missing
/// Secret holds everything): the TLS switch, the password rotation or auth
/// switch, `default`'s rules, the ACL users, the CA rotation. Returns
/// whether a TLS switch is under way.
async fn logins(
    io: &Io<'_>,
    k: &KubeSide,
    seen: &Seen,
    step: &Step<'_>,
    memory: &mut Memory,
) -> Result<bool, Error> {
    if k.blocker().is_some() {
        return Ok(false);
    }
    let (ctx, events, cluster, owner) = (io.ctx, io.events, &k.cluster, &k.owner);
    let (session, facts) = (&seen.valkey.session, step.facts);
    let quiet = step.done.executed.is_empty() && step.done.last_action.is_none();
    let switch = decide::tls::switch_step(
        cluster,
        facts,
        &k.desired,
        quiet && step.decision.cluster_ready,
    );
    let tls_switching =
        act::tls_switch::advance(ctx, (cluster, owner), switch, (&k.kube, session), events).await?;
    // Every member's ACL users, asked once: the rotation, the check of
    // `default` and the users' sync read it.
    let listed = act::users::list(session).await;
    passwords(io, k, seen, (&listed, facts), memory).await?;
    let users = decide::users::plan(session.keys(), &listed, &k.users, memory);
    if act::users::sync(ctx, session, users, memory, events).await > 0 {
        // The users file is written again with what was just set.
        let mut users = k.users.clone();
        act::users::ensure_file(
            ctx,
            cluster,
            owner,
            &mut users,
            (memory, k.has_members()),
            events,
        )
        .await?;
    }
    act::tls::advance_rotation(
        ctx,
        cluster,
        owner,
        (&k.tls, &k.kube),
        act::tls::RotationInputs {
            opts: &seen.valkey.opts,
            request: k.rotate_request.as_deref(),
            now_unix: io.target.now.0.as_second(),
        },
        events,
    )
    .await?;
    Ok(tls_switching)
}

/// The cluster password's side of [`logins`]: auth switched on or off, a
/// deleted record rebuilt, a rotation moved on, `default` brought to the spec.
async fn passwords(
    io: &Io<'_>,
    k: &KubeSide,
    seen: &Seen,
    (listed, facts): (&Listed, &Facts<'_>),
    memory: &mut Memory,
) -> Result<(), Error> {
    let (ctx, events, cluster, owner) = (io.ctx, io.events, &k.cluster, &k.owner);
    let (session, observed, member_auth) = (
        &seen.valkey.session,
        &seen.valkey.observed,
        &seen.member_auth,
    );
    let (auth, rotation) = (&k.auth, &k.rotation);
    if let (Some(switch), (Some(password), _)) = (&rotation.switch, rotation.login(auth.password()))
    {
        let commands = decide::rotation::switch_commands(session.keys(), member_auth, switch);
        act::rotation::advance_switch(ctx, session, &commands, password).await;
    }
    if let (true, Some(password)) = (rotation.unrecorded, auth.password()) {
        let started_with: Vec<Option<String>> = observed
            .members
            .iter()
            .map(|m| member_auth.get(&m.member).map(|a| a.requirepass.clone()))
            .collect();
        let rebuilt = decide::rotation::rebuilt_record(
            password,
            &started_with,
            (cluster.password_rotation, rotation.highest),
        );
        if let Some(rebuilt) = &rebuilt {
            act::rotation::rebuild_record(ctx, (cluster, owner), rebuilt, password).await?;
        }
    }
    // A rotation finishes only once every member answered: say which
    // it waits for, once per change (the old password stays valid).
    let waiting = rotation_waiting(rotation, observed);
    if waiting != memory.announced.rotation_waiting {
        if let Some(w) = &waiting {
            events
                .warning(
                    reason::PASSWORD_ROTATION_WAITING,
                    "RotatePassword",
                    w.clone(),
                )
                .await;
        }
        memory.announced.rotation_waiting = waiting;
    }
    let rolled = decide::rotation::all_rolled(cluster, &k.kube, &k.desired)
        && facts.password_stale.is_empty();
    if let (Some(previous), Some(password)) = (&rotation.previous, auth.password()) {
        let step = decide::rotation::rotation_step(
            session.keys(),
            (observed, &k.kube),
            (listed, member_auth, rolled),
            (password, previous),
        );
        act::rotation::advance(
            ctx,
            (cluster, owner),
            session,
            &step,
            (password, rotation.highest),
            events,
        )
        .await?;
    }
    act::users::keep_primaryauth(ctx, session, member_auth, &k.system.replication_password).await;
    let everyone_reachable = observed
        .members
        .iter()
        .all(|m| matches!(m.state, valkey::model::MemberState::Reachable(_)));
    // While a rotation runs, `advance` gives every member both
    // passwords; the listing predates its adds.
    if let Some(want) =
        decide::rotation::default_want(rotation, auth.password(), rolled, everyone_reachable)
        && rotation.previous.is_none()
    {
        let fixes = decide::rotation::default_fixes(session.keys(), &k.kube, listed, &want);
        act::rotation::close_default(ctx, session, &fixes).await;
    }
    Ok(())
}

/// The report: the status (written when it changed) with a restore's
/// progress, the gauges, the pulse told whether the cluster is steady, and
/// when to look again.
async fn report(
    io: &Io<'_>,
    k: &KubeSide,
    seen: &Seen,
    step: &Step<'_>,
    tls_switching: bool,
    gate: &restore::Gate,
    memory: &mut Memory,
) -> Result<Action, Error> {
    let (ctx, events, target) = (io.ctx, io.events, &io.target);
    let (facts, decision, done) = (step.facts, step.decision, step.done);
    let blocker = k.blocker();
    let blocked = blocker.is_some();
    let mut status = report::build(target, facts, &k.placement, decision, done, blocker);
    if let restore::Gate::Go(record) = gate {
        let failure = restore::load_failures(&k.kube.members, k.cluster.shards);
        if restore::report(
            &mut status,
            target.old,
            record,
            failure.as_deref(),
            &target.now,
        ) {
            events
                .normal(
                    reason::RESTORE_COMPLETED,
                    "Restore",
                    format!(
                        "the data of ValkeyBackup {} is in the cluster",
                        record.backup
                    ),
                )
                .await;
        }
        if failure != memory.announced.restore_failed {
            if let Some(why) = &failure {
                events
                    .warning(reason::RESTORE_FAILED, "Restore", why.clone())
                    .await;
            }
            memory.announced.restore_failed = failure;
        }
    }
    let gauges = report::gauges::of(facts, &k.placement, &status);
    report::publish(ctx, target, status, events).await?;
    ctx.metrics
        .observe_cluster(&k.cluster.namespace, &k.cluster.name, &gauges);
    let converging = report::converging(facts, &k.placement, decision, done, k.replaced)
        || k.tls.rotating()
        || tls_switching;
    let valkey = &seen.valkey;
    ctx.pulse.record(
        ObjectRef::from_obj(io.vc),
        !converging && !blocked,
        &valkey.observed,
        valkey.opts.clone(),
    );
    Ok(Action::requeue(next_look(
        converging,
        decision.wake_in,
        &ctx.settings,
    )))
}

/// The members a password rotation (or a switch of auth) waits for
/// because they do not answer, as a message; `None` when it waits for none.
fn rotation_waiting(
    rotation: &decide::rotation::Rotation,
    observed: &valkey::model::ObservedCluster,
) -> Option<String> {
    if rotation.previous.is_none() && rotation.switch.is_none() {
        return None;
    }
    let silent: Vec<String> = observed
        .members
        .iter()
        .filter(|m| !matches!(m.state, valkey::model::MemberState::Reachable(_)))
        .map(|m| m.member.to_string())
        .collect();
    (!silent.is_empty()).then(|| {
        format!(
            "the password change waits for {} (not answering): both passwords stay valid until \
             every member answered and runs the new one",
            silent.join(", ")
        )
    })
}

/// When to reconcile again without a change: soon while converging, else at
/// the resync, or earlier when something waits on time alone (a quiet
/// period ending).
fn next_look(converging: bool, wake_in: Option<Duration>, settings: &Settings) -> Duration {
    if converging {
        return settings.fast_requeue;
    }
    match wake_in {
        // A moment past the end, so the wait has surely ended.
        Some(w) => (w + Duration::from_millis(100)).min(settings.slow_requeue),
        None => settings.slow_requeue,
    }
}

/// The image of each member pod's `valkey` container, by pod name (from the
/// pod cache).
fn member_images(vc: &ValkeyCluster, ctx: &Context) -> BTreeMap<String, String> {
    use kube::ResourceExt as _;
    let ns = vc.namespace();
    let name = vc.name_any();
    ctx.pods
        .state()
        .iter()
        .filter(|p| {
            p.namespace() == ns && p.labels().get(api::constants::LABEL_CLUSTER) == Some(&name)
        })
        .filter_map(|p| {
            let image = p
                .spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == api::constants::VALKEY_CONTAINER)?
                .image
                .clone()?;
            Some((p.name_any(), image))
        })
        .collect()
}

/// Why `image` would take the members back across a major or minor Valkey
/// version, unless the cluster carries `valkey.rs/allow-downgrade: "true"`:
/// from its tag against the versions the last status recorded, or, for a tag
/// that names no version, from what the members already rolled to it say
/// they run (`member_images`: each member pod's image).
fn downgrade_refused(
    vc: &ValkeyCluster,
    image: &str,
    member_images: &BTreeMap<String, String>,
) -> Option<String> {
    use api::v1alpha1::versions;
    let forced = vc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(versions::ANNOTATION_ALLOW_DOWNGRADE))
        .is_some_and(|v| v.trim() == "true");
    if forced {
        return None;
    }
    let running: Vec<(String, (u32, u32, u32))> = vc
        .status
        .as_ref()
        .map(|s| {
            s.members
                .iter()
                .filter_map(|m| {
                    let v = m.version.as_deref().and_then(versions::parse_running)?;
                    Some((m.pod.clone(), v))
                })
                .collect()
        })
        .unwrap_or_default();
    let versions: Vec<(u32, u32, u32)> = running.iter().map(|(_, v)| *v).collect();
    if let Some(why) = versions::downgrade_refusal(image, &versions) {
        return Some(why);
    }
    let (on_image, others): (Vec<_>, Vec<_>) = running
        .into_iter()
        .partition(|(pod, _)| member_images.get(pod).map(String::as_str) == Some(image));
    let others: Vec<(u32, u32, u32)> = others.into_iter().map(|(_, v)| v).collect();
    versions::rolled_downgrade_refusal(image, &on_image, &others)
}

/// Plans where the members run, on a blocking thread: the planner is
/// CPU-bound for up to its time limit, and must not stall the runtime's other
/// reconciles, watches and lease renewals. A planner that panicked (it must
/// not) leaves the placement unknown, as a problem it cannot plan does.
async fn plan_placement(cluster: &ValidatedCluster, kube: &KubeView) -> Placement {
    let (problem, options) = match Placement::problem(cluster, kube) {
        Ok(p) => p,
        Err(why) => return Placement::Failed(why),
    };
    let placement = tokio::task::spawn_blocking(move || Placement::solve(&problem, &options))
        .await
        .unwrap_or_else(|e| Placement::Failed(format!("the placement planner stopped: {e}")));
    if let Placement::Planned { gap: Some(_), .. } = &placement {
        tracing::info!(
            search_limit = decide::placement::PLACEMENT_SEARCH_LIMIT,
            time_limit_ms = decide::placement::PLACEMENT_TIME_LIMIT.as_millis() as u64,
            "placement plan not proven optimal: a search limit cut it short"
        );
    }
    placement
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_rolled_to_an_unversioned_tag_that_runs_an_older_valkey_stops_the_roll() {
        let vc: ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"shards": 1, "replicas": 2, "image": "valkey/valkey:stable"},
            "status": {"members": [
                {"shard": 0, "member": 0, "pod": "c-0-0-0", "ready": true, "version": "9.1.2"},
                {"shard": 0, "member": 1, "pod": "c-0-1-0", "ready": true, "version": "9.0.0"},
                {"shard": 0, "member": 2, "pod": "c-0-2-0", "ready": true, "version": "9.1.2"},
            ]}
        }))
        .unwrap();
        let images = |rolled: &str| {
            ["c-0-0-0", "c-0-1-0", "c-0-2-0"]
                .iter()
                .map(|p| {
                    let image = if *p == rolled {
                        "valkey/valkey:stable"
                    } else {
                        "valkey/valkey:9.1.2"
                    };
                    (p.to_string(), image.to_string())
                })
                .collect::<BTreeMap<_, _>>()
        };
        let why = downgrade_refused(&vc, "valkey/valkey:stable", &images("c-0-1-0")).unwrap();
        assert!(why.contains("member pod c-0-1-0"), "{why}");
        // Set back to the old image: the roll back goes on.
        assert_eq!(
            downgrade_refused(&vc, "valkey/valkey:9.1.2", &images("c-0-1-0")),
            None
        );
        // Allowed by the annotation.
        let mut allowed = vc.clone();
        allowed.metadata.annotations = Some(
            [(
                api::v1alpha1::versions::ANNOTATION_ALLOW_DOWNGRADE.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert_eq!(
            downgrade_refused(&allowed, "valkey/valkey:stable", &images("c-0-1-0")),
            None
        );
    }

    #[test]
    fn a_steady_cluster_waiting_on_a_quiet_period_is_looked_at_when_it_ends() {
        let s = Settings::default();
        assert_eq!(next_look(true, None, &s), s.fast_requeue);
        assert_eq!(
            next_look(true, Some(Duration::from_secs(7)), &s),
            s.fast_requeue
        );
        assert_eq!(next_look(false, None, &s), s.slow_requeue);
        assert_eq!(
            next_look(false, Some(Duration::from_secs(7)), &s),
            Duration::from_millis(7100)
        );
        assert_eq!(
            next_look(false, Some(Duration::from_secs(600)), &s),
            s.slow_requeue
        );
    }
}
