//! Act, TLS turned on for a live cluster: carries out the step
//! [`decide::tls::switch_step`] decided (the switch itself is explained
//! there).

use crate::apply;
use crate::context::Context;
use crate::controller::valkey_io::Session;
use crate::error::Error;
use crate::events::{Events, reason};
use api::ValidatedCluster;
use decide::tls::Step;
use decide::view::KubeView;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use resources::{self as builders, config};
use valkey::model::MemberRef;

/// Moves the switch on. Returns whether the cluster is still switching
/// (so the reconcile looks again soon).
pub async fn advance(
    ctx: &Context,
    (cluster, owner): (&ValidatedCluster, &OwnerReference),
    step: Option<Step>,
    (view, session): (&KubeView, &Session),
    events: &Events<'_>,
) -> Result<bool, Error> {
    let (Some(step), Some(settings)) = (step, cluster.tls.as_ref()) else {
        return Ok(false);
    };
    match step {
        Step::Wait(why) => {
            tracing::debug!(%why, "the switch to TLS waits");
            Ok(true)
        }
        Step::Switch(members) => {
            switch(ctx, session, &members, events).await;
            Ok(true)
        }
        Step::Done => {
            // Members restarted from now on start on TLS.
            let on_tls = ValidatedCluster {
                tls: Some(api::v1alpha1::ValidatedTls {
                    switching: false,
                    ..settings.clone()
                }),
                ..cluster.clone()
            };
            let file = builders::config_map(&on_tls, owner);
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
            apply::apply(
                &api,
                view.config_maps
                    .get(&builders::config_map_name(&cluster.name)),
                &file,
                &ctx.metrics,
            )
            .await?;
            events
                .normal(
                    reason::TLS_ENABLED,
                    "SwitchTLS",
                    "every member speaks TLS only (clients, replication, cluster bus)",
                )
                .await;
            Ok(true)
        }
    }
}

/// Every member in `members` takes the TLS wire at once (one CONFIG SET
/// each, all concurrently); then each drops its plaintext connections:
/// clients reconnect over TLS, and a replica's link to its primary resumes
/// over TLS with a partial sync.
async fn switch(ctx: &Context, session: &Session, members: &[(u32, u32)], events: &Events<'_>) {
    let wire = config::tls_wire();
    let results = futures::future::join_all(members.iter().map(|&(s, m)| {
        let wire = &wire;
        async move {
            let admin = session
                .get(&MemberRef::new(s, m))
                .ok_or_else(|| "not connected".to_string())?;
            ctx.metrics.valkey_command("ConfigSet");
            admin
                .config_set_all(wire)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(admin)
        }
    }))
    .await;
    let mut switched = Vec::new();
    let mut failed = Vec::new();
    for (&(s, m), result) in members.iter().zip(results) {
        match result {
            Ok(admin) => switched.push(((s, m), admin)),
            Err(e) => failed.push(format!("shard {s} member {m}: {e}")),
        }
    }
    futures::future::join_all(switched.iter().map(|((s, m), admin)| async move {
        for kind in ["normal", "pubsub", "master"] {
            ctx.metrics.valkey_command("ClientKill");
            if let Err(e) = admin.client_kill_type(kind).await {
                tracing::warn!(shard = s, member = m, kind, error = %e, "dropping plaintext connections failed");
            }
        }
    }))
    .await;
    if !switched.is_empty() {
        let names: Vec<String> = switched
            .iter()
            .map(|((s, m), _)| format!("{s}/{m}"))
            .collect();
        events
            .normal(
                reason::TLS_SWITCHING,
                "SwitchTLS",
                format!(
                    "members {} switched to TLS on port {} (plaintext closed, bus and replication over TLS)",
                    names.join(", "),
                    api::constants::VALKEY_PORT
                ),
            )
            .await;
    }
    if !failed.is_empty() {
        events
            .warning(
                reason::VALKEY_COMMAND_FAILED,
                "SwitchTLS",
                format!("switching to TLS failed on {}", failed.join("; ")),
            )
            .await;
    }
}
