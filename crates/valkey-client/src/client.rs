// Over 600 lines: the Admin trait and its one implementation, command by command, each bounded the same way.
//! The side-effect seam: an [`Admin`] connection to one Valkey node, its redis-rs
//! implementation [`ValkeyAdmin`] (one plain, non-cluster connection per node, with
//! AUTH and timeouts), [`observe_cluster`] to collect what every member says, and
//! [`execute`] to send a planned [`Action`].
//!
//! Errors name the node's address and the command, so a failed reconcile says which
//! member refused what. Connections run over [`crate::wire`]'s stream, which bounds
//! what one reply may make this process hold (a member's image is a tenant's).

use crate::wire;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisConnectionInfo, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use valkey::actions::{Action, FailoverMode, ResetMode};
use valkey::model::{
    MemberAddr, MemberRef, MemberState, NodeReport, ObservedCluster, ObservedMember,
};
use valkey::parse::{
    self, ClusterNodes, ClusterShard, Info, NodeId, ParseError, ReplicationInfo, RoleReply,
    SlotMigration,
};
use valkey::slots::SlotSet;

/// Errors talking to a Valkey node.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection (TCP, AUTH, HELLO) could not be set up.
    #[error("connecting to Valkey at {addr}: {}", parse::truncated(&.source.to_string()))]
    Connect {
        addr: String,
        #[source]
        source: redis::RedisError,
    },
    /// The node answered a command with an error, or the connection failed.
    #[error("{command} on {addr}: {}", parse::truncated(&.source.to_string()))]
    Command {
        addr: String,
        command: String,
        #[source]
        source: redis::RedisError,
    },
    /// The node's reply did not parse.
    #[error("{command} on {addr}: unexpected reply: {source}")]
    Reply {
        addr: String,
        command: String,
        #[source]
        source: ParseError,
    },
    /// CLUSTER FAILOVER was accepted but the node was not a primary in time.
    #[error("CLUSTER FAILOVER on {addr}: still not a primary after {timeout:?}")]
    FailoverTimeout { addr: String, timeout: Duration },
    /// An action names a member there is no connection for.
    #[error("no connection to {member}")]
    NoConnection { member: MemberRef },
}

impl ClientError {
    /// A stable category string for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            ClientError::Connect { source, .. } if source.is_timeout() => "connect_timeout",
            ClientError::Connect { .. } => "connect",
            ClientError::Command { source, .. } if source.is_timeout() => "command_timeout",
            ClientError::Command { source, .. } if source.is_io_error() => "connection_lost",
            ClientError::Command { .. } => "command_refused",
            ClientError::Reply { .. } => "unexpected_reply",
            ClientError::FailoverTimeout { .. } => "failover_timeout",
            ClientError::NoConnection { .. } => "no_connection",
        }
    }

    /// Whether the node refused the login (wrong password, unknown or
    /// disabled user), as opposed to not answering.
    pub fn is_auth_refused(&self) -> bool {
        match self {
            ClientError::Connect { source, .. } => {
                source.kind() == redis::ErrorKind::AuthenticationFailed
                    || source
                        .code()
                        .is_some_and(|c| c == "WRONGPASS" || c == "NOAUTH")
            }
            _ => false,
        }
    }

    /// The server's error text (`ERR Unknown node ...`) when the node refused.
    pub fn server_message(&self) -> Option<String> {
        match self {
            ClientError::Command { source, .. } => {
                let code = source.code()?;
                Some(match source.detail() {
                    Some(detail) => parse::truncated(&format!("{code} {detail}")),
                    None => parse::truncated(code),
                })
            }
            _ => None,
        }
    }
}

/// Every command this client sends, as ACL rules name them (`cluster|meet`),
/// and those a connection's set-up may send (HELLO, AUTH, CLIENT SETINFO and
/// SETNAME): what a user that logs in with it needs, and no more. A test
/// checks that every command in this file is listed.
pub const COMMANDS_SENT: &[&str] = &[
    "ping",
    "info",
    "role",
    "wait",
    "config|get",
    "config|set",
    "acl|list",
    "acl|setuser",
    "acl|deluser",
    "client|kill",
    "client|setinfo",
    "client|setname",
    "cluster|addslotsrange",
    "cluster|bumpepoch",
    "cluster|cancelslotmigrations",
    "cluster|failover",
    "cluster|forget",
    "cluster|getslotmigrations",
    "cluster|info",
    "cluster|meet",
    "cluster|migrateslots",
    "cluster|myid",
    "cluster|nodes",
    "cluster|replicate",
    "cluster|reset",
    "cluster|shards",
    "module|list",
    "replicaof",
    "failover",
    "hello",
    "auth",
];

/// How to reach and authenticate to Valkey nodes. Its `Debug` leaves the
/// passwords out.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// ACL user; `None` authenticates as `default` with `password` only.
    pub username: Option<String>,
    /// `None` when auth is off.
    pub password: Option<String>,
    pub connect_timeout: Duration,
    /// Bound on every command's reply.
    pub command_timeout: Duration,
    /// TLS: the CA certificates (PEM) the node's certificate must chain to;
    /// `None` for plaintext.
    pub tls_ca_pem: Option<Vec<u8>>,
    /// While the password rotates: the one the nodes had before, tried when
    /// `password` is not accepted (yet).
    pub previous_password: Option<String>,
    /// TLS: a certificate and key to present to the node (a node that gets
    /// one it does not trust refuses the connection). `None`: none.
    pub tls_identity: Option<TlsIdentity>,
    /// TLS: whether a node may still speak plaintext (a cluster switching
    /// to TLS), and so which wire to try first. Ignored without a CA.
    pub plaintext: Plaintext,
    /// An ACL user of one's own (the operator's `valkey-operator`), tried
    /// before `username`/`password`: a node that refuses it (one that does
    /// not have that user yet) is logged in to with those instead.
    pub own_login: Option<Login>,
}

/// An ACL user and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("tls", &self.tls_ca_pem.is_some())
            .field(
                "previous_password",
                &self.previous_password.as_ref().map(|_| "<redacted>"),
            )
            .field("tls_identity", &self.tls_identity)
            .field("plaintext", &self.plaintext)
            .field("own_login", &self.own_login)
            .finish()
    }
}

/// With TLS configured, whether and when plaintext is tried too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Plaintext {
    /// TLS only.
    #[default]
    Never,
    /// Plaintext first, then TLS: the operator while a cluster switches to
    /// TLS, when most members still speak plaintext. A TLS handshake sent
    /// to a plaintext server waits for the whole connect timeout (the
    /// server waits for a line end), while plaintext sent to a TLS server
    /// is reset at once.
    First,
    /// TLS first, then plaintext: a member's own exporter, which cannot
    /// tell whether its member has been switched yet.
    After,
}

/// A client certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity").finish_non_exhaustive()
    }
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            username: None,
            password: None,
            connect_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(5),
            tls_ca_pem: None,
            previous_password: None,
            tls_identity: None,
            plaintext: Plaintext::Never,
            own_login: None,
        }
    }
}

/// The admin commands the planner's actions need, and the observe calls, on one node.
pub trait Admin: Send + Sync {
    /// `ip:port` of the node, for messages.
    fn address(&self) -> &str;

    fn cluster_nodes(&self) -> impl Future<Output = Result<ClusterNodes, ClientError>> + Send;
    fn cluster_shards(&self)
    -> impl Future<Output = Result<Vec<ClusterShard>, ClientError>> + Send;
    /// INFO of one section (`replication`, `server`, ...), or all with `""`.
    fn info(&self, section: &str) -> impl Future<Output = Result<Info, ClientError>> + Send;
    fn role(&self) -> impl Future<Output = Result<RoleReply, ClientError>> + Send;
    /// CLUSTER INFO fields (`cluster_state`, `cluster_slots_assigned`, ...).
    fn cluster_info(&self) -> impl Future<Output = Result<Info, ClientError>> + Send;
    fn cluster_myid(&self) -> impl Future<Output = Result<NodeId, ClientError>> + Send;
    fn cluster_getslotmigrations(
        &self,
    ) -> impl Future<Output = Result<Vec<SlotMigration>, ClientError>> + Send;
    /// The keys of every database (INFO keyspace), not only the selected one.
    fn key_count(&self) -> impl Future<Output = Result<u64, ClientError>> + Send;
    /// The names of the modules the server loaded (MODULE LIST), sorted.
    fn module_list(&self) -> impl Future<Output = Result<Vec<String>, ClientError>> + Send;
    /// CONFIG GET of several keys; absent keys are absent from the map.
    fn config_get(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<BTreeMap<String, String>, ClientError>> + Send;
    fn config_set(
        &self,
        key: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    /// WAIT: how many replicas acknowledged the writes so far within `timeout`.
    fn wait(
        &self,
        replicas: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<u32, ClientError>> + Send;

    fn cluster_meet(
        &self,
        ip: IpAddr,
        port: u16,
        bus_port: u16,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_addslotsrange(
        &self,
        ranges: &SlotSet,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_replicate(
        &self,
        primary: &NodeId,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_forget(&self, node: &NodeId)
    -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_failover(
        &self,
        mode: FailoverMode,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    /// CLUSTER MIGRATESLOTS SLOTSRANGE s e [s e ...] NODE target (Valkey 9).
    fn cluster_migrateslots(
        &self,
        ranges: &SlotSet,
        target: &NodeId,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_cancelslotmigrations(&self) -> impl Future<Output = Result<(), ClientError>> + Send;
    fn cluster_reset(
        &self,
        mode: ResetMode,
    ) -> impl Future<Output = Result<(), ClientError>> + Send;
    /// CLUSTER BUMPEPOCH (`BUMPED n`, or `STILL n` when it already has the
    /// highest epoch: both are success).
    fn cluster_bumpepoch(&self) -> impl Future<Output = Result<(), ClientError>> + Send;
}

/// An [`Admin`] over one redis-rs multiplexed connection to one node.
#[derive(Clone)]
pub struct ValkeyAdmin {
    addr: String,
    conn: MultiplexedConnection,
    /// The task that reads and writes the connection; stopped with the last clone.
    _driver: Arc<Driver>,
    /// Logged in as [`ConnectOptions::own_login`]'s user.
    pub own_login: bool,
}

/// Aborts the connection's task when dropped: redis-rs does so for the
/// connections it opens itself, not for those built over a stream of one's own,
/// whose task would otherwise keep reading from a node nobody listens to.
struct Driver(tokio::task::JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for ValkeyAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyAdmin")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ValkeyAdmin {
    /// Connects (and authenticates) to the node at `ip:port`, over the wire
    /// [`ConnectOptions::tls_ca_pem`] and [`ConnectOptions::plaintext`] say.
    pub async fn connect(
        ip: IpAddr,
        port: u16,
        opts: &ConnectOptions,
    ) -> Result<ValkeyAdmin, ClientError> {
        let wires: &[bool] = match (&opts.tls_ca_pem, opts.plaintext) {
            (None, _) => &[false],
            (Some(_), Plaintext::Never) => &[true],
            (Some(_), Plaintext::First) => &[false, true],
            (Some(_), Plaintext::After) => &[true, false],
        };
        let mut first_error = None;
        for &tls in wires {
            let own = match &opts.own_login {
                Some(login) => {
                    let own = ConnectOptions {
                        username: Some(login.user.clone()),
                        password: Some(login.password.clone()),
                        ..opts.clone()
                    };
                    match ValkeyAdmin::connect_over(ip, port, &own, tls).await {
                        Ok(mut admin) => {
                            admin.own_login = true;
                            return Ok(admin);
                        }
                        // The wire works but the node does not know the
                        // user (yet): log in the other way on it.
                        Err(e) if e.is_auth_refused() => Some(e),
                        Err(e) => {
                            first_error.get_or_insert(e);
                            continue;
                        }
                    }
                }
                None => None,
            };
            match ValkeyAdmin::connect_over(ip, port, opts, tls).await {
                Ok(admin) => return Ok(admin),
                Err(e) => {
                    first_error.get_or_insert(own.unwrap_or(e));
                }
            }
        }
        Err(first_error.unwrap_or_else(|| ClientError::Connect {
            addr: format!("{ip}:{port}"),
            source: redis::RedisError::from((redis::ErrorKind::Io, "no wire to try")),
        }))
    }

    async fn connect_over(
        ip: IpAddr,
        port: u16,
        opts: &ConnectOptions,
        tls: bool,
    ) -> Result<ValkeyAdmin, ClientError> {
        let addr = match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        };
        let connect_err = |source| ClientError::Connect {
            addr: addr.clone(),
            source,
        };
        let mut redis = RedisConnectionInfo::default();
        if let Some(user) = &opts.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &opts.password {
            redis = redis.set_password(password);
        }
        let tls = opts
            .tls_ca_pem
            .as_ref()
            .filter(|_| tls)
            .map(|ca| wire::TlsSettings {
                ca_pem: ca,
                identity: opts
                    .tls_identity
                    .as_ref()
                    .map(|i| (i.cert_pem.as_slice(), i.key_pem.as_slice())),
            });
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(opts.command_timeout));
        // The connect timeout bounds TCP, TLS and the login together, as redis-rs's
        // own connect did.
        let setup = async {
            let stream = wire::open(ip, port, tls.as_ref()).await?;
            MultiplexedConnection::new_with_config(&redis, stream, config).await
        };
        let (conn, driver) = match tokio::time::timeout(opts.connect_timeout, setup).await {
            Ok(result) => result.map_err(connect_err)?,
            Err(_) => {
                return Err(connect_err(
                    std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
                ));
            }
        };
        Ok(ValkeyAdmin {
            addr,
            conn,
            _driver: Arc::new(Driver(tokio::spawn(driver))),
            own_login: false,
        })
    }

    /// Connects to a member's address.
    pub async fn connect_member(
        addr: MemberAddr,
        opts: &ConnectOptions,
    ) -> Result<ValkeyAdmin, ClientError> {
        ValkeyAdmin::connect(addr.ip, addr.port, opts).await
    }

    /// `ACL SETUSER default on #<hash>`: one more password for `default`
    /// (those it has stay valid), by its SHA-256 hex.
    pub async fn add_default_password(&self, sha256_hex: &str) -> Result<(), ClientError> {
        self.ok(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(valkey::acl::DEFAULT_USER)
                .arg("on")
                .arg(format!("#{sha256_hex}")),
            "ACL SETUSER default",
        )
        .await
    }

    /// `ACL SETUSER default on resetpass #<hash>`: `default` takes this
    /// password only (`CONFIG SET requirepass` would not do: it does nothing
    /// when the setting already has that value, keeping added passwords).
    pub async fn set_default_password_only(&self, sha256_hex: &str) -> Result<(), ClientError> {
        self.ok(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(valkey::acl::DEFAULT_USER)
                .arg("on")
                .arg("resetpass")
                .arg(format!("#{sha256_hex}")),
            "ACL SETUSER default resetpass",
        )
        .await
    }

    /// `ACL SETUSER default on nopass`: the default user takes any password
    /// or none (auth is being turned off: members restarted without a
    /// password and clients that still send one must both get in).
    pub async fn set_default_nopass(&self) -> Result<(), ClientError> {
        self.ok(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(valkey::acl::DEFAULT_USER)
                .arg("on")
                .arg("nopass"),
            "ACL SETUSER default nopass",
        )
        .await
    }

    /// `CONFIG SET key value` (the value is not logged).
    pub async fn config_set_secret(&self, key: &str, value: &str) -> Result<(), ClientError> {
        self.ok(
            redis::cmd("CONFIG").arg("SET").arg(key).arg(value),
            &format!("CONFIG SET {key}"),
        )
        .await
    }

    /// One `CONFIG SET` of several keys: Valkey applies them together or
    /// not at all.
    pub async fn config_set_all(&self, pairs: &[(&str, String)]) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (k, v) in pairs {
            cmd.arg(*k).arg(v);
        }
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        self.ok(&cmd, &format!("CONFIG SET {}", keys.join(" ")))
            .await
    }

    /// `CLIENT KILL TYPE <kind>` (`normal`, `pubsub`, `master`, `replica`):
    /// drops every such connection but this one; how many it dropped.
    pub async fn client_kill_type(&self, kind: &str) -> Result<u64, ClientError> {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("KILL").arg("TYPE").arg(kind);
        match self.query(&cmd, "CLIENT KILL TYPE").await? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            _ => Ok(0),
        }
    }

    /// `REPLICAOF host port`, or `REPLICAOF NO ONE` with `None` (a
    /// replication set's member: the operator promotes and points).
    pub async fn replicaof(&self, primary: Option<(IpAddr, u16)>) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("REPLICAOF");
        match primary {
            Some((ip, port)) => cmd.arg(ip.to_string()).arg(port),
            None => cmd.arg("NO").arg("ONE"),
        };
        self.ok(&cmd, "REPLICAOF").await
    }

    /// `FAILOVER TO host port TIMEOUT ms`, sent to a primary: it pauses its
    /// clients' writes, waits until the replica has every write, and swaps
    /// roles with it (no acknowledged write lost). Returns once started;
    /// the roles say when it is done.
    pub async fn failover_to(
        &self,
        (ip, port): (IpAddr, u16),
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.ok(
            redis::cmd("FAILOVER")
                .arg("TO")
                .arg(ip.to_string())
                .arg(port)
                .arg("TIMEOUT")
                .arg(millis),
            "FAILOVER",
        )
        .await
    }

    /// `INFO replication`, typed.
    pub async fn replication(&self) -> Result<valkey::parse::ReplicationInfo, ClientError> {
        let text = self
            .text(redis::cmd("INFO").arg("replication"), "INFO")
            .await?;
        valkey::parse::ReplicationInfo::parse(&text).map_err(|e| self.reply_err("INFO", e))
    }

    /// `ACL LIST`, parsed.
    pub async fn acl_list(&self) -> Result<BTreeMap<String, valkey::acl::AclEntry>, ClientError> {
        let value = self
            .query(&redis::cmd("ACL").arg("LIST").clone(), "ACL LIST")
            .await?;
        let lines: Vec<String> = match &value {
            Value::Array(items) => items.iter().filter_map(parse_text).collect(),
            _ => Vec::new(),
        };
        valkey::acl::parse_acl_list(&lines).map_err(|reason| {
            self.reply_err(
                "ACL LIST",
                ParseError::Reply {
                    command: "ACL LIST",
                    reason,
                },
            )
        })
    }

    /// Whether `default` takes the password with this SHA-256 hex (from
    /// `ACL LIST`; a `nopass` default takes any).
    pub async fn default_takes(&self, sha256_hex: &str) -> Result<bool, ClientError> {
        Ok(self
            .acl_list()
            .await?
            .get(valkey::acl::DEFAULT_USER)
            .is_some_and(|d| d.enabled && (d.nopass || d.hashes.contains(sha256_hex))))
    }

    /// `ACL SETUSER` or `ACL DELUSER`.
    pub async fn acl(&self, action: &valkey::acl::AclAction) -> Result<(), ClientError> {
        match action {
            valkey::acl::AclAction::SetUser { user, .. } => {
                let mut cmd = redis::cmd("ACL");
                cmd.arg("SETUSER").arg(&user.name);
                for a in user.setuser_args() {
                    cmd.arg(a);
                }
                self.ok(&cmd, "ACL SETUSER").await
            }
            valkey::acl::AclAction::DelUser { name, .. } => {
                self.ok(redis::cmd("ACL").arg("DELUSER").arg(name), "ACL DELUSER")
                    .await
            }
        }
    }

    async fn query(&self, cmd: &redis::Cmd, name: &str) -> Result<Value, ClientError> {
        let mut conn = self.conn.clone();
        cmd.query_async::<Value>(&mut conn)
            .await
            .map_err(|source| ClientError::Command {
                addr: self.addr.clone(),
                command: name.to_string(),
                source,
            })
    }

    async fn ok(&self, cmd: &redis::Cmd, name: &str) -> Result<(), ClientError> {
        self.query(cmd, name).await.map(|_| ())
    }

    async fn text(&self, cmd: &redis::Cmd, name: &'static str) -> Result<String, ClientError> {
        let value = self.query(cmd, name).await?;
        parse_text(&value).ok_or_else(|| {
            self.reply_err(
                name,
                ParseError::Reply {
                    command: name,
                    reason: "expected text".to_string(),
                },
            )
        })
    }

    fn reply_err(&self, command: &str, source: ParseError) -> ClientError {
        ClientError::Reply {
            addr: self.addr.clone(),
            command: command.to_string(),
            source,
        }
    }
}

/// The `name` of every entry of a MODULE LIST reply (each a map, or a
/// flat array of field/value pairs in RESP2), sorted.
/// What the connection read, as the pure crate's [`valkey::Reply`] its parsers take.
fn reply(value: Value) -> valkey::Reply {
    use valkey::Reply as R;
    let all = |items: Vec<Value>| items.into_iter().map(reply).collect();
    match value {
        Value::Nil => R::Nil,
        Value::Int(i) => R::Int(i),
        Value::BulkString(bytes) => R::BulkString(bytes),
        Value::Array(items) => R::Array(all(items)),
        Value::SimpleString(s) => R::SimpleString(s),
        Value::Okay => R::Okay,
        Value::Map(entries) => R::Map(
            entries
                .into_iter()
                .map(|(k, v)| (reply(k), reply(v)))
                .collect(),
        ),
        Value::Attribute { data, .. } => R::Attribute {
            data: Box::new(reply(*data)),
        },
        Value::Set(items) => R::Set(all(items)),
        Value::Double(d) => R::Double(d),
        Value::Boolean(b) => R::Boolean(b),
        Value::VerbatimString { text, .. } => R::VerbatimString { text },
        Value::BigNumber(n) => R::BigNumber(format!("{n:?}")),
        Value::Push { data, .. } => R::Push(all(data)),
        Value::ServerError(e) => R::ServerError(e.to_string()),
        _ => R::Nil,
    }
}

fn parse_module_list(value: &Value) -> Vec<String> {
    let Value::Array(entries) = value else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .iter()
        .filter_map(|entry| {
            let pairs: Vec<(&Value, &Value)> = match entry {
                Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
                Value::Array(items) => items
                    .chunks(2)
                    .filter_map(|c| Some((c.first()?, c.get(1)?)))
                    .collect(),
                _ => return None,
            };
            pairs
                .into_iter()
                .find(|(k, _)| parse_text(k).as_deref() == Some("name"))
                .and_then(|(_, v)| parse_text(v))
        })
        .collect();
    names.sort();
    names
}

fn parse_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_string()),
        _ => None,
    }
}

fn cluster(sub: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg(sub);
    cmd
}

fn slot_range_args(cmd: &mut redis::Cmd, ranges: &SlotSet) {
    for r in ranges.ranges() {
        cmd.arg(r.start().get()).arg(r.end().get());
    }
}

impl Admin for ValkeyAdmin {
    fn address(&self) -> &str {
        &self.addr
    }

    async fn cluster_nodes(&self) -> Result<ClusterNodes, ClientError> {
        let text = self.text(&cluster("NODES"), "CLUSTER NODES").await?;
        ClusterNodes::parse(&text).map_err(|e| self.reply_err("CLUSTER NODES", e))
    }

    async fn cluster_shards(&self) -> Result<Vec<ClusterShard>, ClientError> {
        let value = self.query(&cluster("SHARDS"), "CLUSTER SHARDS").await?;
        parse::parse_cluster_shards(&reply(value)).map_err(|e| self.reply_err("CLUSTER SHARDS", e))
    }

    async fn info(&self, section: &str) -> Result<Info, ClientError> {
        let mut cmd = redis::cmd("INFO");
        if !section.is_empty() {
            cmd.arg(section);
        }
        let text = self.text(&cmd, "INFO").await?;
        Ok(Info::parse(&text))
    }

    async fn role(&self) -> Result<RoleReply, ClientError> {
        let value = self.query(&redis::cmd("ROLE"), "ROLE").await?;
        RoleReply::parse(&reply(value)).map_err(|e| self.reply_err("ROLE", e))
    }

    async fn cluster_info(&self) -> Result<Info, ClientError> {
        let text = self.text(&cluster("INFO"), "CLUSTER INFO").await?;
        Ok(Info::parse(&text))
    }

    async fn cluster_myid(&self) -> Result<NodeId, ClientError> {
        let text = self.text(&cluster("MYID"), "CLUSTER MYID").await?;
        text.trim()
            .parse()
            .map_err(|e| self.reply_err("CLUSTER MYID", e))
    }

    async fn cluster_getslotmigrations(&self) -> Result<Vec<SlotMigration>, ClientError> {
        let value = self
            .query(&cluster("GETSLOTMIGRATIONS"), "CLUSTER GETSLOTMIGRATIONS")
            .await?;
        parse::parse_slot_migrations(&reply(value))
            .map_err(|e| self.reply_err("CLUSTER GETSLOTMIGRATIONS", e))
    }

    async fn key_count(&self) -> Result<u64, ClientError> {
        let info = self.info("keyspace").await?;
        info.keyspace_keys()
            .map_err(|e| self.reply_err("INFO keyspace", e))
    }

    async fn module_list(&self) -> Result<Vec<String>, ClientError> {
        let value = self
            .query(&redis::cmd("MODULE").arg("LIST").clone(), "MODULE LIST")
            .await?;
        Ok(parse_module_list(&value))
    }

    async fn config_get(&self, keys: &[String]) -> Result<BTreeMap<String, String>, ClientError> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET");
        for k in keys {
            cmd.arg(k);
        }
        let value = self.query(&cmd, "CONFIG GET").await?;
        let entries: Vec<(Value, Value)> = match value {
            Value::Map(entries) => entries,
            Value::Array(items) if items.len() % 2 == 0 => {
                let mut it = items.into_iter();
                let mut out = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    out.push((k, v));
                }
                out
            }
            other => {
                return Err(self.reply_err(
                    "CONFIG GET",
                    ParseError::Reply {
                        command: "CONFIG GET",
                        reason: format!("expected key/value pairs, got {other:?}"),
                    },
                ));
            }
        };
        Ok(entries
            .iter()
            .filter_map(|(k, v)| Some((parse_text(k)?, parse_text(v)?)))
            .collect())
    }

    async fn config_set(&self, key: &str, value: &str) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg(key).arg(value);
        self.ok(&cmd, &format!("CONFIG SET {key}")).await
    }

    async fn wait(&self, replicas: u32, timeout: Duration) -> Result<u32, ClientError> {
        let mut cmd = redis::cmd("WAIT");
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        cmd.arg(replicas).arg(millis);
        match self.query(&cmd, "WAIT").await? {
            Value::Int(n) => Ok(u32::try_from(n).unwrap_or(0)),
            other => Err(self.reply_err(
                "WAIT",
                ParseError::Reply {
                    command: "WAIT",
                    reason: format!("expected a count, got {other:?}"),
                },
            )),
        }
    }

    async fn cluster_meet(&self, ip: IpAddr, port: u16, bus_port: u16) -> Result<(), ClientError> {
        let mut cmd = cluster("MEET");
        cmd.arg(ip.to_string()).arg(port).arg(bus_port);
        self.ok(&cmd, &format!("CLUSTER MEET {ip} {port} {bus_port}"))
            .await
    }

    async fn cluster_addslotsrange(&self, ranges: &SlotSet) -> Result<(), ClientError> {
        let mut cmd = cluster("ADDSLOTSRANGE");
        slot_range_args(&mut cmd, ranges);
        self.ok(&cmd, &format!("CLUSTER ADDSLOTSRANGE {ranges}"))
            .await
    }

    async fn cluster_replicate(&self, primary: &NodeId) -> Result<(), ClientError> {
        let mut cmd = cluster("REPLICATE");
        cmd.arg(primary.as_str());
        self.ok(&cmd, &format!("CLUSTER REPLICATE {primary}")).await
    }

    async fn cluster_forget(&self, node: &NodeId) -> Result<(), ClientError> {
        let mut cmd = cluster("FORGET");
        cmd.arg(node.as_str());
        self.ok(&cmd, &format!("CLUSTER FORGET {node}")).await
    }

    async fn cluster_failover(&self, mode: FailoverMode) -> Result<(), ClientError> {
        let mut cmd = cluster("FAILOVER");
        match mode {
            FailoverMode::Default => {}
            FailoverMode::Force => {
                cmd.arg("FORCE");
            }
            FailoverMode::Takeover => {
                cmd.arg("TAKEOVER");
            }
        }
        self.ok(&cmd, "CLUSTER FAILOVER").await
    }

    async fn cluster_migrateslots(
        &self,
        ranges: &SlotSet,
        target: &NodeId,
    ) -> Result<(), ClientError> {
        let mut cmd = cluster("MIGRATESLOTS");
        cmd.arg("SLOTSRANGE");
        slot_range_args(&mut cmd, ranges);
        cmd.arg("NODE").arg(target.as_str());
        self.ok(
            &cmd,
            &format!("CLUSTER MIGRATESLOTS {ranges} NODE {target}"),
        )
        .await
    }

    async fn cluster_cancelslotmigrations(&self) -> Result<(), ClientError> {
        self.ok(
            &cluster("CANCELSLOTMIGRATIONS"),
            "CLUSTER CANCELSLOTMIGRATIONS",
        )
        .await
    }

    async fn cluster_reset(&self, mode: ResetMode) -> Result<(), ClientError> {
        let mut cmd = cluster("RESET");
        cmd.arg(match mode {
            ResetMode::Soft => "SOFT",
            ResetMode::Hard => "HARD",
        });
        self.ok(&cmd, "CLUSTER RESET").await
    }

    async fn cluster_bumpepoch(&self) -> Result<(), ClientError> {
        self.ok(&cluster("BUMPEPOCH"), "CLUSTER BUMPEPOCH").await
    }
}

/// Collects one node's [`NodeReport`]: CLUSTER NODES, INFO replication,
/// CLUSTER GETSLOTMIGRATIONS, INFO keyspace, CONFIG GET of `config_keys`,
/// CLUSTER INFO, INFO server and MODULE LIST, one after the other.
///
/// One at a time, each reply made into its compact parsed form before the next
/// request is written: a connection then holds at most one raw reply, which is
/// what its bound and its reply ticket count (see `wire`), whatever the member
/// answers. Sent together, a member answering each with 4 MB had the operator
/// hold all of them per member at once (measured: 320 MB RSS for 20 such
/// members). The members are observed concurrently; a node answers these in
/// well under a millisecond each.
pub async fn observe_node<A: Admin>(
    admin: &A,
    config_keys: &[String],
) -> Result<NodeReport, ClientError> {
    let nodes = admin.cluster_nodes().await?;
    let info = admin.info("replication").await?;
    let replication = ReplicationInfo::from_info(&info).map_err(|source| ClientError::Reply {
        addr: admin.address().to_string(),
        command: "INFO replication".to_string(),
        source,
    })?;
    drop(info);
    let slot_migrations = admin.cluster_getslotmigrations().await?;
    let keys = admin.key_count().await?;
    let config = admin.config_get(config_keys).await?;
    let cluster_state_ok = admin.cluster_info().await?.get("cluster_state") == Some("ok");
    let server = admin.info("server").await?;
    let version = server
        .get("valkey_version")
        .or_else(|| server.get("redis_version"))
        .map(str::to_string);
    drop(server);
    // Only shown in the status: a member whose operator user may not run
    // MODULE LIST yet (its ACL is updated by the same reconcile) is
    // observed all the same, with no modules listed.
    let modules = admin.module_list().await.unwrap_or_default();
    Ok(NodeReport {
        nodes,
        replication,
        slot_migrations,
        keys,
        config,
        cluster_state_ok,
        version,
        modules,
    })
}

/// A member to observe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub member: MemberRef,
    /// `None` when the member has no address yet (reported unreachable).
    pub addr: Option<MemberAddr>,
    /// The id recorded for it before (see [`ObservedMember::known_node_id`]).
    pub known_node_id: Option<NodeId>,
    /// Ids it had before that (see [`ObservedMember::former_node_ids`]).
    pub former_node_ids: Vec<NodeId>,
    /// It did not answer a moment ago (a cheap probe timed out): it gets
    /// [`SILENT_DEADLINE`] to connect and answer instead of the full
    /// timeouts, so a member that stopped answering is reported so in about
    /// a second, not after the command timeout.
    pub silent: bool,
}

/// How long a member that was just found silent gets to answer again.
pub const SILENT_DEADLINE: Duration = Duration::from_secs(1);

/// Connections to the reachable members, by member.
pub type Connections = BTreeMap<MemberRef, ValkeyAdmin>;

/// Connects to every target and observes it, all concurrently. `config_keys` are
/// the settings to read back; pass [`valkey::DesiredCluster::config_keys`]. Members that cannot
/// be reached or observed are `Unreachable` with the error as reason. Returns the
/// observation and the connections of the reachable members (to execute a plan on).
pub async fn observe_cluster(
    targets: &[Target],
    opts: &ConnectOptions,
    config_keys: &[String],
) -> (ObservedCluster, Connections) {
    let results = futures::future::join_all(targets.iter().map(|t| async move {
        let Some(addr) = t.addr else {
            return (t, Err("no address yet".to_string()));
        };
        let short;
        let opts = if t.silent {
            short = ConnectOptions {
                connect_timeout: opts.connect_timeout.min(SILENT_DEADLINE),
                command_timeout: opts.command_timeout.min(SILENT_DEADLINE),
                ..opts.clone()
            };
            &short
        } else {
            opts
        };
        let admin = match ValkeyAdmin::connect_member(addr, opts).await {
            Ok(admin) => admin,
            // Mid-rotation: the node may have the previous password only
            // (a node that did not answer is not asked again).
            Err(e) => match &opts.previous_password {
                Some(previous) if e.is_auth_refused() => {
                    let old = ConnectOptions {
                        password: Some(previous.clone()),
                        ..opts.clone()
                    };
                    match ValkeyAdmin::connect_member(addr, &old).await {
                        Ok(admin) => admin,
                        Err(_) => return (t, Err(e.to_string())),
                    }
                }
                _ => return (t, Err(e.to_string())),
            },
        };
        match observe_node(&admin, config_keys).await {
            Ok(report) => (t, Ok((admin, report))),
            Err(e) => (t, Err(e.to_string())),
        }
    }))
    .await;
    let mut members = Vec::with_capacity(results.len());
    let mut conns = Connections::new();
    for (t, result) in results {
        let state = match result {
            Ok((admin, report)) => {
                conns.insert(t.member, admin);
                MemberState::Reachable(Box::new(report))
            }
            Err(reason) => MemberState::Unreachable { reason },
        };
        members.push(ObservedMember {
            member: t.member,
            addr: t.addr,
            known_node_id: t.known_node_id.clone(),
            former_node_ids: t.former_node_ids.clone(),
            state,
        });
    }
    (ObservedCluster { members }, conns)
}

/// How [`execute`] waits on commands that only schedule work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteOptions {
    /// How long a CLUSTER FAILOVER may take until ROLE says primary.
    pub failover_timeout: Duration,
    pub poll_interval: Duration,
}

impl Default for ExecuteOptions {
    fn default() -> ExecuteOptions {
        ExecuteOptions {
            failover_timeout: Duration::from_secs(15),
            poll_interval: Duration::from_millis(100),
        }
    }
}

/// Sends one action to the node it names (`admin` must be that node's connection).
///
/// CLUSTER FORGET of a node the receiver no longer knows counts as done. CLUSTER
/// FAILOVER only schedules the failover, so this polls ROLE until the node is a
/// primary (bounded by `opts.failover_timeout`). CLUSTER MIGRATESLOTS returns once the
/// job is started; its progress shows in the next observation
/// (CLUSTER GETSLOTMIGRATIONS), and the planner waits for it.
pub async fn execute<A: Admin>(
    admin: &A,
    action: &Action,
    opts: &ExecuteOptions,
) -> Result<(), ClientError> {
    match action {
        Action::Meet {
            ip, port, bus_port, ..
        } => admin.cluster_meet(*ip, *port, *bus_port).await,
        Action::AddSlotsRange { ranges, .. } => admin.cluster_addslotsrange(ranges).await,
        Action::Replicate { primary_id, .. } => admin.cluster_replicate(primary_id).await,
        Action::Forget { node_id, .. } => match admin.cluster_forget(node_id).await {
            Err(e)
                if e.server_message()
                    .is_some_and(|m| m.contains("Unknown node")) =>
            {
                Ok(())
            }
            other => other,
        },
        Action::Failover { mode, .. } => {
            admin.cluster_failover(*mode).await?;
            let deadline = tokio::time::Instant::now() + opts.failover_timeout;
            loop {
                if admin.role().await?.is_primary() {
                    return Ok(());
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(ClientError::FailoverTimeout {
                        addr: admin.address().to_string(),
                        timeout: opts.failover_timeout,
                    });
                }
                tokio::time::sleep(opts.poll_interval).await;
            }
        }
        Action::MigrateSlots {
            ranges, target_id, ..
        } => admin.cluster_migrateslots(ranges, target_id).await,
        Action::ResetNode { mode, .. } => admin.cluster_reset(*mode).await,
        Action::BumpEpoch { .. } => admin.cluster_bumpepoch().await,
        Action::ConfigSet { key, value, .. } => admin.config_set(key, value).await,
    }
}

/// Sends every action in order, each to its member's connection, and returns each
/// outcome. A failure does not stop the rest: the actions of one plan do not depend
/// on each other's success, and the next reconcile re-plans from what the members
/// then say.
///
/// One at a time, in the plan's order, not concurrently across members: the order
/// is the planner's promise ([`Action`]'s rank: membership first, then slots,
/// replication, settings, and the moves last; the operator's own executor keeps it
/// too), and sending a rank's commands together would gain little: each is one
/// round trip on a connection already open, except CLUSTER FAILOVER, whose wait
/// for ROLE the planner asks of one shard at a time anyway.
pub async fn execute_all(
    conns: &Connections,
    actions: &[Action],
    opts: &ExecuteOptions,
) -> Vec<(Action, Result<(), ClientError>)> {
    let mut out = Vec::with_capacity(actions.len());
    for action in actions {
        let result = match conns.get(&action.on()) {
            Some(admin) => execute(admin, action, opts).await,
            None => Err(ClientError::NoConnection {
                member: action.on(),
            }),
        };
        if let Err(e) = &result {
            tracing::warn!(action = %action, error = %e, "valkey admin command failed");
        } else {
            tracing::info!(action = %action, "valkey admin command sent");
        }
        out.push((action.clone(), result));
    }
    out
}

#[cfg(test)]
mod commands_sent_tests {
    use super::{COMMANDS_SENT, ClientError, ConnectOptions, Login};

    #[test]
    fn a_huge_error_reply_is_told_in_part() {
        let detail = "y".repeat(4_000_000);
        let source = redis::RedisError::from((redis::ErrorKind::Io, "refused", detail));
        let e = ClientError::Command {
            addr: "10.0.0.1:6379".into(),
            command: "CLUSTER NODES".into(),
            source,
        };
        let message = e.to_string();
        assert!(message.len() < 600, "{} bytes", message.len());
        assert!(
            message.starts_with("CLUSTER NODES on 10.0.0.1:6379: "),
            "{message}"
        );
        assert!(message.contains("bytes)"), "{message}");
    }

    #[test]
    fn connect_options_never_print_a_password() {
        let opts = ConnectOptions {
            password: Some("pa55-new".into()),
            previous_password: Some("pa55-old".into()),
            own_login: Some(Login {
                user: "valkey-operator".into(),
                password: "pa55-own".into(),
            }),
            ..ConnectOptions::default()
        };
        let printed = format!("{opts:?}");
        assert!(!printed.contains("pa55"), "{printed}");
        assert!(printed.contains("valkey-operator"), "{printed}");
    }

    /// The quoted words after `pattern` in this file's code (tests excluded).
    fn quoted_after(pattern: &str) -> Vec<String> {
        let source = include_str!("client.rs");
        let code = &source[..source
            .find("mod commands_sent_tests")
            .unwrap_or(source.len())];
        code.match_indices(pattern)
            .filter_map(|(i, _)| {
                let rest = &code[i + pattern.len()..];
                let end = rest.find('"')?;
                Some(rest[..end].to_ascii_lowercase())
            })
            .collect()
    }

    #[test]
    fn every_command_the_client_sends_is_listed() {
        let clusters = quoted_after("cluster(\"");
        assert!(clusters.len() >= 10, "{clusters:?}");
        for sub in clusters {
            let rule = format!("cluster|{sub}");
            assert!(
                COMMANDS_SENT.contains(&rule.as_str()),
                "{rule} is not listed"
            );
        }
        let commands = quoted_after("redis::cmd(\"");
        assert!(commands.len() >= 5, "{commands:?}");
        for command in commands {
            assert!(
                COMMANDS_SENT
                    .iter()
                    .any(|c| *c == command || c.starts_with(&format!("{command}|"))),
                "{command} is not listed"
            );
        }
    }
}
