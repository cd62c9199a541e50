//! Act, password rotation and auth switched on or off: carries out what
//! `decide::rotation` decided (how a rotation goes is explained there).
//! Failures of a member's command are logged; the next reconcile goes on from
//! what the members then say.

use crate::context::Context;
use crate::controller::act::secrets;
use crate::controller::valkey_io::Session;
use crate::error::Error;
use crate::events::{Events, reason};
use api::ValidatedCluster;
use api::constants::auth_applied_secret_name;
use decide::rotation::{
    Announce, DefaultFix, RecordWrite, Recorded, Rotation, RotationDecision, RotationStep,
    SwitchCommand,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use resources::secret::{AppliedRecord, applied_secret};
use valkey::model::MemberRef;

/// Reads `<cluster>-auth-applied` (through the one place Secrets are read,
/// which serves the operator's own writes back).
pub async fn read_record(ctx: &Context, cluster: &ValidatedCluster) -> Result<Recorded, Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = auth_applied_secret_name(&cluster.name);
    Ok(Recorded::of(
        secrets::read(ctx, &api, &name).await?.as_ref(),
    ))
}

/// Writes the record the decision changes, says what it announces, and
/// returns where the rotation stands.
pub async fn record(
    ctx: &Context,
    (cluster, owner): (&ValidatedCluster, &OwnerReference),
    decision: RotationDecision,
    events: &Events<'_>,
) -> Result<Rotation, Error> {
    if let Some(w) = &decision.write {
        write_record(ctx, (cluster, owner), w).await?;
    }
    match decision.announce {
        Some(Announce::AuthDisabled) => {
            events
                .normal(
                    reason::AUTH_DISABLED,
                    "SwitchAuth",
                    "auth is off: every member runs without a password",
                )
                .await;
        }
        Some(Announce::AuthEnabled) => {
            events
                .normal(
                    reason::AUTH_ENABLED,
                    "SwitchAuth",
                    "auth is on: the members restart onto the password one at a time",
                )
                .await;
        }
        None => {}
    }
    Ok(decision.rotation)
}

async fn write_record(
    ctx: &Context,
    (cluster, owner): (&ValidatedCluster, &OwnerReference),
    w: &RecordWrite,
) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let record = AppliedRecord {
        password: &w.password,
        number: w.number,
        target: w.target.as_ref().map(|(p, g)| (p.as_str(), *g)),
        highest: w.highest,
    };
    secrets::apply(ctx, &api, &applied_secret(cluster, owner, &record)).await
}

/// Writes `<cluster>-auth-applied` again after it was deleted, as
/// `decide::rotation::rebuilt_record` made it from what the members run.
/// `password`: the Secret's (a record naming another makes the next
/// reconcile a rotation onto the Secret's).
pub async fn rebuild_record(
    ctx: &Context,
    (cluster, owner): (&ValidatedCluster, &OwnerReference),
    rebuilt: &RecordWrite,
    password: &str,
) -> Result<(), Error> {
    write_record(ctx, (cluster, owner), rebuilt).await?;
    tracing::info!(
        rotates = rebuilt.password != password,
        "password record rebuilt from what the members run"
    );
    Ok(())
}

/// Brings the `default` of each member in `fixes` to what the spec says.
pub async fn close_default(ctx: &Context, session: &Session, fixes: &[(MemberRef, DefaultFix)]) {
    for (m, fix) in fixes {
        let Some(admin) = session.get(m) else {
            continue;
        };
        ctx.metrics.valkey_command("AclSetUserDefault");
        let done = match fix {
            DefaultFix::Add(hashes) => {
                let mut result = Ok(());
                for hash in hashes {
                    result = result.and(admin.add_default_password(hash).await);
                }
                result
            }
            DefaultFix::Only(hash) => admin.set_default_password_only(hash).await,
        };
        match done {
            Ok(()) => tracing::info!(member = %m, ?fix, "default user brought to the spec's auth"),
            Err(error) => tracing::warn!(member = %m, %error, "setting the default user failed"),
        }
    }
}

/// Sends what auth being switched on or off asks of each member.
pub async fn advance_switch(
    ctx: &Context,
    session: &Session,
    commands: &[(MemberRef, SwitchCommand)],
    password: &str,
) {
    for (m, command) in commands {
        let Some(admin) = session.get(m) else {
            continue;
        };
        let done = match command {
            SwitchCommand::PrimaryAuth => {
                ctx.metrics.valkey_command("ConfigSet");
                admin.config_set_secret("primaryauth", password).await
            }
            SwitchCommand::NoPass => {
                ctx.metrics.valkey_command("AclSetUserDefault");
                admin.set_default_nopass().await
            }
        };
        if let Err(error) = done {
            tracing::warn!(member = %m, %error, "switching auth failed");
        }
    }
}

/// Carries out a rotation's step: both passwords to every member given
/// them (and `primaryauth` where it says), then, when the step may finish
/// and every command went through, the new password alone on every member,
/// the record, and the event `PasswordRotated`.
pub async fn advance(
    ctx: &Context,
    (cluster, owner): (&ValidatedCluster, &OwnerReference),
    session: &Session,
    step: &RotationStep,
    (password, highest): (&str, u64),
    events: &Events<'_>,
) -> Result<(), Error> {
    let mut failed = false;
    for (m, admin) in session {
        let Some(&primaryauth) = step.given.get(m) else {
            continue;
        };
        // Adding a password a member has is a no-op.
        for hash in &step.hashes {
            ctx.metrics.valkey_command("AclSetUserDefault");
            if let Err(error) = admin.add_default_password(hash).await {
                tracing::warn!(member = %m, %error, "adding a password failed");
                failed = true;
            }
        }
        if primaryauth && let Err(error) = admin.config_set_secret("primaryauth", password).await {
            tracing::warn!(member = %m, %error, "CONFIG SET primaryauth failed");
            failed = true;
        }
    }
    if !step.finish || failed {
        if step.via_previous > 0 {
            tracing::info!(
                members = step.via_previous,
                "password rotation: the new password added"
            );
        }
        return Ok(());
    }
    for (m, admin) in session {
        ctx.metrics.valkey_command("AclSetUserDefault");
        if let Err(error) = admin.set_default_password_only(&step.hashes[0]).await {
            tracing::warn!(member = %m, %error, "dropping the old password failed");
            return Ok(());
        }
    }
    let record = RecordWrite {
        password: password.to_string(),
        number: cluster.password_rotation,
        target: None,
        highest,
    };
    write_record(ctx, (cluster, owner), &record).await?;
    events
        .normal(
            reason::PASSWORD_ROTATED,
            "RotatePassword",
            format!(
                "every member takes the new password of Secret {} only ({} members)",
                cluster.auth.secret_name,
                session.len()
            ),
        )
        .await;
    Ok(())
}
