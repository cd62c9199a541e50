//! The Valkey seam: one plain connection per member (opened for one
//! reconcile, with short timeouts), what each member says
//! ([`valkey::model::NodeReport`]), and the commands the Valkey planner asks
//! for.
//!
//! A member that does not answer within the timeouts is `Unreachable` with
//! the reason; nothing here retries: the next reconcile asks again.

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use valkey::actions::{Action, FailoverMode, ResetMode};
use valkey::model::{MemberAddr, MemberRef, MemberState, NodeReport};
use valkey::parse::{ClusterNodes, ReplicationInfo, parse_slot_migrations};

/// How long to wait for Valkey.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub command: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_millis(1000),
            command: Duration::from_millis(3000),
        }
    }
}

/// The connections of one reconcile, by member.
#[derive(Default)]
pub struct Session {
    conns: BTreeMap<MemberRef, MultiplexedConnection>,
}

impl Session {
    /// Whether `member` answered when observed.
    pub fn has(&self, member: MemberRef) -> bool {
        self.conns.contains_key(&member)
    }

    /// Keeps the connection of a member that answered.
    pub fn insert(&mut self, member: MemberRef, con: MultiplexedConnection) {
        self.conns.insert(member, con);
    }
}

/// Opens a connection to `addr` and authenticates.
async fn connect(
    addr: MemberAddr,
    password: Option<&str>,
    t: Timeouts,
) -> Result<MultiplexedConnection, String> {
    let base = ConnectionAddr::Tcp(addr.ip.to_string(), addr.port)
        .into_connection_info()
        .map_err(|e| e.to_string())?;
    let mut settings = base.redis_settings().clone();
    if let Some(pw) = password {
        settings = settings.set_password(pw);
    }
    let info: ConnectionInfo = base.set_redis_settings(settings.set_skip_set_lib_name());
    let client = redis::Client::open(info).map_err(|e| e.to_string())?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(t.connect))
        .set_response_timeout(Some(t.command));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| e.to_string())
}

async fn text(con: &mut MultiplexedConnection, cmd: &mut redis::Cmd) -> Result<String, String> {
    let v: Value = cmd.query_async(con).await.map_err(|e| e.to_string())?;
    match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Ok(s),
        Value::VerbatimString { text, .. } => Ok(text),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Asks one member everything the planner needs.
async fn report(
    con: &mut MultiplexedConnection,
    config_keys: &[String],
) -> Result<NodeReport, String> {
    let nodes_text = text(con, redis::cmd("CLUSTER").arg("NODES")).await?;
    let nodes = ClusterNodes::parse(&nodes_text).map_err(|e| format!("CLUSTER NODES: {e}"))?;
    let info = text(con, redis::cmd("INFO").arg("replication")).await?;
    let replication =
        ReplicationInfo::parse(&info).map_err(|e| format!("INFO replication: {e}"))?;
    let migrations: Value = redis::cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query_async(con)
        .await
        .map_err(|e| e.to_string())?;
    let slot_migrations = parse_slot_migrations(&migrations)
        .map_err(|e| format!("CLUSTER GETSLOTMIGRATIONS: {e}"))?;
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(con)
        .await
        .map_err(|e| e.to_string())?;
    let mut config = BTreeMap::new();
    for key in config_keys {
        let v: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(key)
            .query_async(con)
            .await
            .map_err(|e| e.to_string())?;
        if let [k, v] = v.as_slice() {
            config.insert(k.clone(), v.clone());
        }
    }
    Ok(NodeReport {
        nodes,
        replication,
        slot_migrations,
        keys,
        config,
    })
}

/// Observes one member: connects and asks, within the timeouts. The
/// connection of a member that answered goes into `session` (see
/// [`Session::insert`]).
pub async fn observe_member(
    addr: MemberAddr,
    password: Option<&str>,
    config_keys: &[String],
    t: Timeouts,
) -> (MemberState, Option<MultiplexedConnection>) {
    let budget = t.connect + t.command * (5 + u32::try_from(config_keys.len()).unwrap_or(u32::MAX));
    let attempt = async {
        let mut con = connect(addr, password, t).await?;
        let r = report(&mut con, config_keys).await?;
        Ok::<_, String>((con, r))
    };
    match tokio::time::timeout(budget, attempt).await {
        Ok(Ok((con, r))) => (MemberState::Reachable(Box::new(r)), Some(con)),
        Ok(Err(reason)) => (MemberState::Unreachable { reason }, None),
        Err(_) => (
            MemberState::Unreachable {
                reason: format!("no answer within {} ms", budget.as_millis()),
            },
            None,
        ),
    }
}

/// Sends one action to its member over the session's connection.
pub async fn execute(session: &mut Session, action: &Action) -> Result<(), String> {
    let con = session
        .conns
        .get_mut(&action.on())
        .ok_or_else(|| format!("{} is not connected", action.on()))?;
    let mut cmd = redis::cmd("CLUSTER");
    match action {
        Action::Meet {
            ip, port, bus_port, ..
        } => {
            cmd.arg("MEET")
                .arg(ip.to_string())
                .arg(*port)
                .arg(*bus_port);
        }
        Action::AddSlotsRange { ranges, .. } => {
            cmd.arg("ADDSLOTSRANGE");
            for r in ranges.ranges() {
                cmd.arg(r.start().get()).arg(r.end().get());
            }
        }
        Action::Replicate { primary_id, .. } => {
            cmd.arg("REPLICATE").arg(primary_id.as_str());
        }
        Action::Forget { node_id, .. } => {
            cmd.arg("FORGET").arg(node_id.as_str());
        }
        Action::Failover { mode, .. } => {
            cmd.arg("FAILOVER");
            match mode {
                FailoverMode::Default => {}
                FailoverMode::Force => {
                    cmd.arg("FORCE");
                }
                FailoverMode::Takeover => {
                    cmd.arg("TAKEOVER");
                }
            }
        }
        Action::MigrateSlots {
            ranges, target_id, ..
        } => {
            cmd.arg("MIGRATESLOTS").arg("SLOTSRANGE");
            for r in ranges.ranges() {
                cmd.arg(r.start().get()).arg(r.end().get());
            }
            cmd.arg("NODE").arg(target_id.as_str());
        }
        Action::ResetNode { mode, .. } => {
            cmd.arg("RESET").arg(match mode {
                ResetMode::Soft => "SOFT",
                ResetMode::Hard => "HARD",
            });
        }
        Action::ConfigSet { key, value, .. } => {
            cmd = redis::cmd("CONFIG");
            cmd.arg("SET").arg(key).arg(value);
        }
    }
    let _: Value = cmd.query_async(con).await.map_err(|e| e.to_string())?;
    Ok(())
}
