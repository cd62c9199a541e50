//! One reconcile of one ValkeyCluster, the driver. It reads like the
//! pipeline it runs (see [`super`] for the module map):
//!
//! 1. **dereference** the object and **validate** its spec (an invalid one
//!    gets a condition and an event, and nothing else happens until it
//!    changes);
//! 2. Kubernetes side: **observe** the owned objects, member pods, Nodes and
//!    Pods; **decide** the placement and the desired objects; **act**: apply
//!    them (the password Secret created once, the rest by server-side apply
//!    when they differ), re-create Pending pods whose scheduling rules are out
//!    of date, grow volumes;
//! 3. Valkey side: **observe** every member (one connection each), derive
//!    the **facts** once, **decide** (moves, rolling update, balancing, the
//!    next Valkey commands, healing) and **act** in a fixed order (see
//!    [`super::act::carry_out`]);
//! 4. **report**: the status (written when it changed), its events, and the
//!    cluster's gauges.
//!
//! Every step is idempotent: a reconcile cut short anywhere starts again from
//! the top with what the API server and the members then say.

use super::act::{self, Actor};
use super::decide::{self, cleanup, placement::Placement};
use super::events::{Events, reason};
use super::facts::Facts;
use super::report::{self, Target};
use super::{Context, Error, Memory, Settings, observe};
use crate::metrics;
use api::{ValidatedCluster, ValkeyCluster};
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
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

/// The annotation `valkey.rs/paused: "true"` is set.
fn is_paused(vc: &ValkeyCluster) -> bool {
    vc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(api::constants::ANNOTATION_PAUSED))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

async fn run(
    vc: &ValkeyCluster,
    ctx: &Context,
    events: &Events<'_>,
    memory: &mut Memory,
) -> Result<Action, Error> {
    // 1. dereference, (pause,) validate
    let target = Target::of(vc, ctx)?;
    let namespace = vc.metadata.namespace.as_deref().unwrap_or_default();
    if is_paused(vc) {
        let status = report::paused(&target);
        let conditions = metrics::conditions_of(&status);
        report::write_status(ctx, &target, status).await?;
        ctx.metrics
            .observe_conditions(namespace, &target.name, &conditions);
        if !memory.announced.paused {
            events
                .normal(
                    reason::PAUSED,
                    "Pause",
                    "reconciles paused by the annotation",
                )
                .await;
            memory.announced.paused = true;
        }
        return Ok(Action::requeue(ctx.settings.slow_requeue));
    }
    if std::mem::take(&mut memory.announced.paused) {
        events
            .normal(reason::RESUMED, "Pause", "reconciles resumed")
            .await;
    }
    let validated = api::v1alpha1::validate_with(vc, &ctx.settings.validation)
        .map_err(|e| e.to_string())
        .and_then(|c| match ctx.settings.image_refused(&c.image) {
            Some(why) => Err(why),
            None => Ok(c),
        })
        .and_then(|c| match downgrade_refused(vc, &c.image) {
            Some(why) => Err(why),
            None => Ok(c),
        });
    let mut cluster = match validated {
        Ok(c) => c,
        Err(message) => {
            let status = report::invalid(&target, vc.metadata.generation, &message);
            let conditions = metrics::conditions_of(&status);
            report::write_status(ctx, &target, status).await?;
            ctx.metrics
                .observe_conditions(namespace, &target.name, &conditions);
            if memory.announced.invalid_spec.as_deref() != Some(message.as_str()) {
                events
                    .warning(reason::INVALID_SPEC, "Validate", &message)
                    .await;
                memory.announced.invalid_spec = Some(message);
            }
            return Ok(Action::await_change());
        }
    };
    memory.announced.invalid_spec = None;
    // The exporter runs the operator's own image: the operator's flag names
    // it, not the spec.
    if let Some(exporter) = cluster.exporter.as_mut() {
        exporter.image.clone_from(&ctx.settings.exporter_image);
    }
    // So do the members' NetworkPolicy's default and the operator's pods.
    let np = &mut cluster.network_policy;
    np.enabled = Some(np.enabled.unwrap_or(ctx.settings.member_network_policy));
    np.operator.clone_from(&ctx.settings.operator_pods);
    let owner = vc
        .controller_owner_ref(&())
        .ok_or(Error::MissingMetadata("uid"))?;

    // 2. Kubernetes: observe, place, apply the owned objects
    let mut kube = observe::kube::kubernetes(ctx, &cluster).await?;
    memory.note_missing_nodes(&mut kube, Instant::now());
    // TLS turned on for a live cluster: its members speak plaintext until
    // the switch is done (their config file says so).
    if let Some(tls) = cluster.tls.as_mut() {
        tls.switching = decide::tls::switching(
            kube.config_maps
                .get(&crate::builders::config_map_name(&cluster.name)),
            !kube.statefulsets.is_empty(),
        );
    }
    let placement = Placement::compute(&cluster, &kube).await;
    events.notes(placement.notes(&mut memory.announced)).await;
    let auth = act::kube::ensure_password(ctx, &cluster, &owner, &kube, events).await?;
    let rotation = act::rotation::state(ctx, &cluster, &owner, &auth, &kube, events).await?;
    let cluster = ValidatedCluster {
        auth_generation: rotation.generation,
        ..cluster
    };
    let rotate_request = vc
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(api::constants::ANNOTATION_ROTATE_CA))
        .map(String::as_str);
    let tls = act::tls::ensure(
        ctx,
        &cluster,
        &owner,
        &kube,
        (target.now.0.as_second(), rotate_request),
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

    // 3. Valkey: observe, facts, decide, act
    let blocker = auth.blocker().or_else(|| tls.blocker());
    let valkey = observe::valkey::members(
        ctx,
        &cluster,
        &kube,
        target.old,
        (&auth, system.operator.clone(), rotation.login(&auth)),
        &tls,
    )
    .await;
    let member_auth = observe::valkey::member_auth(&valkey.session).await;
    let expected_password = if cluster.auth.enabled {
        auth.password()
    } else {
        Some("")
    };
    let mut facts = Facts::new(&cluster, &kube, &valkey.observed, target.now.0);
    facts.password_stale = observe::valkey::password_stale(expected_password, &member_auth);
    let now = Instant::now();
    // The quiet period also starts when the operator first sees the cluster.
    memory.last_disturbance.get_or_insert(now);
    let bootstrapping = !report::observations::ever_ready(target.old);
    let decision = decide::next(
        &facts,
        &desired,
        &placement,
        (blocker.is_some(), bootstrapping),
        memory,
        now,
    )?;
    // What holds a converging cluster back (e.g. views still differing after
    // the MEETs), for whoever reads the debug log.
    if tracing::enabled!(tracing::Level::DEBUG) && !decision.valkey.waiting.is_empty() {
        let waits: Vec<String> = decision
            .valkey
            .waiting
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::debug!(waiting = %waits.join("; "), "the Valkey plan waits");
    }
    let actor = Actor {
        ctx,
        cluster: &cluster,
        desired: &desired,
        kube: &kube,
        placement: &placement,
        events,
    };
    let done = act::carry_out(
        &actor,
        &facts,
        &decision,
        &valkey.session,
        target.old,
        memory,
        now,
    )
    .await?;
    let mut tls_switching = false;
    if blocker.is_none() {
        let quiet = done.executed.is_empty() && done.last_action.is_none();
        tls_switching = act::tls_switch::advance(
            ctx,
            (&cluster, &owner, &desired),
            (&facts, &valkey.session),
            quiet && decision.cluster_ready,
            events,
        )
        .await?;
        // Every member's ACL users, asked once: the rotation, the check of
        // `default` and the users' sync read it.
        let listed = act::users::list(&valkey.session).await;
        if let (Some(switch), (Some(password), _)) = (&rotation.switch, rotation.login(&auth)) {
            act::rotation::advance_switch(ctx, &valkey.session, &member_auth, switch, password)
                .await;
        }
        if let (true, Some(password)) = (rotation.unrecorded, auth.password()) {
            act::rotation::rebuild_record(
                ctx,
                &cluster,
                &owner,
                (&valkey.observed, &member_auth),
                (password, rotation.highest),
            )
            .await?;
        }
        // A rotation finishes only once every member answered: say which
        // it waits for, once per change (the old password stays valid).
        let waiting = rotation_waiting(&rotation, &valkey.observed);
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
        if let (Some(previous), Some(password)) = (&rotation.previous, auth.password()) {
            act::rotation::advance(
                ctx,
                &cluster,
                &owner,
                (&valkey.observed, &valkey.session, &kube),
                (
                    &listed,
                    &member_auth,
                    act::rotation::all_rolled(&cluster, &kube, &desired)
                        && facts.password_stale.is_empty(),
                ),
                (password, previous, rotation.highest),
                events,
            )
            .await?;
        }
        act::users::keep_primaryauth(
            ctx,
            &valkey.session,
            &member_auth,
            &system.replication_password,
        )
        .await;
        let everyone_reachable = valkey
            .observed
            .members
            .iter()
            .all(|m| matches!(m.state, valkey::model::MemberState::Reachable(_)));
        let rolled =
            act::rotation::all_rolled(&cluster, &kube, &desired) && facts.password_stale.is_empty();
        // While a rotation runs, `advance` gives every member both
        // passwords; the listing predates its adds.
        if let Some(want) =
            act::rotation::default_want(&rotation, auth.password(), rolled, everyone_reachable)
            && rotation.previous.is_none()
        {
            act::rotation::close_default(ctx, &valkey.session, &kube, &listed, &want).await;
        }
        if act::users::sync(ctx, &valkey.session, &listed, &users, memory, events).await > 0 {
            act::users::ensure_file(
                ctx,
                &cluster,
                &owner,
                &mut users,
                (memory, has_members),
                events,
            )
            .await?;
        }
        act::tls::advance_rotation(
            ctx,
            &cluster,
            &owner,
            (&tls, &kube),
            act::tls::RotationInputs {
                opts: &valkey.opts,
                request: rotate_request,
                now_unix: target.now.0.as_second(),
            },
            events,
        )
        .await?;
    }

    // 4. report
    let blocked = blocker.is_some();
    let status = report::build(&target, &facts, &placement, &decision, &done, blocker);
    let gauges = report::gauges::of(&facts, &placement, &status);
    report::publish(ctx, &target, status, events).await?;
    ctx.metrics
        .observe_cluster(&cluster.namespace, &cluster.name, &gauges);
    let converging = report::converging(&facts, &placement, &decision, &done, replaced)
        || tls.rotating()
        || tls_switching;
    ctx.pulse.record(
        ObjectRef::from_obj(vc),
        !converging && !blocked,
        &valkey,
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
    rotation: &act::rotation::Rotation,
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

/// Why `image` would take the members back across a major or minor Valkey
/// version (from the versions the last status recorded), unless the cluster
/// carries `valkey.rs/allow-downgrade: "true"`.
fn downgrade_refused(vc: &ValkeyCluster, image: &str) -> Option<String> {
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
    let running: Vec<(u32, u32, u32)> = vc
        .status
        .as_ref()
        .map(|s| {
            s.members
                .iter()
                .filter_map(|m| m.version.as_deref().and_then(versions::parse_running))
                .collect()
        })
        .unwrap_or_default();
    versions::downgrade_refusal(image, &running)
}

#[cfg(test)]
mod tests {
    use super::*;

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
