//! The admin client against servers that misbehave on purpose, as a member
//! running a tenant's own image may: a reply that never ends, no reply at all,
//! a reply trickled a byte at a time. Each is a tokio listener on 127.0.0.1 that
//! speaks enough RESP to pass the client's login (AUTH, then the two
//! CLIENT SETINFO redis-rs sends) and then misbehaves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use valkey::{MemberAddr, MemberRef, MemberState};
use valkey_client::client::{self, Admin, ConnectOptions, Target, ValkeyAdmin};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The memory tests measure the whole process: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the fake server answers a command after the login.
#[derive(Clone, Copy, Debug)]
enum Misbehaviour {
    /// `$2000000000\r\n`, then bytes until the client goes away.
    EndlessBulk,
    /// A well-formed bulk string of this many bytes.
    Bulk(usize),
    /// Nothing, ever (the connection stays open).
    Silent,
    /// `$100\r\n`, then one byte a second.
    Trickle,
}

/// What the fake server saw and sent on one connection.
#[derive(Debug, Default)]
struct Conversation {
    commands: Vec<Vec<String>>,
    /// Bytes sent after the login.
    sent: u64,
}

/// Reads one RESP command (an array of bulk strings); `None` at end of stream.
async fn read_command(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Option<Vec<String>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    Some(args)
}

/// Serves one connection: `+OK` to AUTH and CLIENT (the login), then misbehaves
/// on the first other command. With `silent_login` it answers nothing at all.
async fn serve(stream: TcpStream, how: Misbehaviour, silent_login: bool) -> Conversation {
    let mut talk = Conversation::default();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let Some(command) = read_command(&mut reader).await else {
            return talk;
        };
        let name = command
            .first()
            .map(|c| c.to_ascii_uppercase())
            .unwrap_or_default();
        talk.commands.push(command);
        if silent_login {
            continue;
        }
        if name == "AUTH" || name == "CLIENT" {
            if write.write_all(b"+OK\r\n").await.is_err() {
                return talk;
            }
            continue;
        }
        match how {
            Misbehaviour::EndlessBulk => {
                if write.write_all(b"$2000000000\r\n").await.is_err() {
                    return talk;
                }
                let chunk = vec![b'x'; 64 * 1024];
                // Until the client closes the connection (or 1 GiB, so a client
                // that reads it all fails the test instead of running for ever).
                while talk.sent < 1 << 30 {
                    if write.write_all(&chunk).await.is_err() {
                        return talk;
                    }
                    talk.sent += chunk.len() as u64;
                }
                return talk;
            }
            Misbehaviour::Bulk(len) => {
                let mut reply = format!("${len}\r\n").into_bytes();
                reply.resize(reply.len() + len, b'v');
                reply.extend_from_slice(b"\r\n");
                if write.write_all(&reply).await.is_err() {
                    return talk;
                }
                talk.sent += reply.len() as u64;
            }
            Misbehaviour::Silent => {}
            Misbehaviour::Trickle => {
                if write.write_all(b"$100\r\n").await.is_err() {
                    return talk;
                }
                // One byte a second, for every command, from its own task so the
                // other commands are read (and trickled to) too.
                let mut write_half = write;
                let rest = tokio::spawn(async move {
                    for _ in 0..100 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if write_half.write_all(b"t").await.is_err() {
                            break;
                        }
                    }
                });
                // Keep reading so the client's other commands are seen; answer none.
                while let Some(command) = read_command(&mut reader).await {
                    talk.commands.push(command);
                }
                rest.abort();
                return talk;
            }
        }
    }
}

/// A fake server on 127.0.0.1 serving connections with `how`; the join handle
/// yields the first connection's conversation.
async fn fake_server(
    how: Misbehaviour,
    silent_login: bool,
) -> (SocketAddr, tokio::task::JoinHandle<Conversation>) {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve(stream, how, silent_login).await
    });
    (addr, handle)
}

fn options(connect: Duration, command: Duration) -> ConnectOptions {
    ConnectOptions {
        password: Some("s3cret".into()),
        connect_timeout: connect,
        command_timeout: command,
        ..ConnectOptions::default()
    }
}

/// The process's resident memory (VmRSS), in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_reply_fails_the_command_at_the_size_bound_without_holding_it() {
    let _serial = SERIAL.lock().await;
    let (addr, server) = fake_server(Misbehaviour::EndlessBulk, false).await;
    // A command timeout far beyond the test's bound: only the size bound can end it.
    let opts = options(Duration::from_secs(2), Duration::from_secs(60));
    let admin = ValkeyAdmin::connect(addr.ip(), addr.port(), &opts)
        .await
        .unwrap();
    let before = rss();
    let started = Instant::now();
    let err = admin.info("").await.unwrap_err();
    let took = started.elapsed();
    let grown = rss().saturating_sub(before);
    assert!(took < Duration::from_secs(5), "failed only after {took:?}");
    assert!(
        grown < 64 << 20,
        "the process grew by {} MiB reading the reply",
        grown >> 20
    );
    assert_eq!(err.category(), "connection_lost", "{err}");
    // The client let go of the connection: the server's writes fail soon, having
    // sent about the bound (plus what the sockets buffer), not the 1 GiB it tries.
    let talk = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the client kept the endless connection open")
        .unwrap();
    assert!(
        talk.sent < (valkey_client::wire::MAX_REPLY_BYTES as u64) + (32 << 20),
        "the server sent {} bytes",
        talk.sent
    );
    // What the login sent: AUTH, then CLIENT SETINFO twice, then INFO.
    let names: Vec<&str> = talk.commands.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(
        names,
        ["AUTH", "CLIENT", "CLIENT", "INFO"],
        "{:?}",
        talk.commands
    );
    drop(admin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_reply_within_the_bound_is_read_whole() {
    let _serial = SERIAL.lock().await;
    let len = valkey_client::wire::MAX_REPLY_BYTES - 1024;
    let (addr, _server) = fake_server(Misbehaviour::Bulk(len), false).await;
    let opts = options(Duration::from_secs(2), Duration::from_secs(10));
    let admin = ValkeyAdmin::connect(addr.ip(), addr.port(), &opts)
        .await
        .unwrap();
    // INFO parses `field:value` lines; a reply of `v`s has none, but it arrives.
    let info = admin.info("").await.unwrap();
    assert!(info.get("role").is_none());
    // The connection still works for the next command (the bound starts over).
    let info = admin.info("").await.unwrap();
    assert!(info.get("role").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_fails_the_connect_at_its_timeout() {
    let _serial = SERIAL.lock().await;
    let (addr, _server) = fake_server(Misbehaviour::Silent, true).await;
    let opts = options(Duration::from_millis(500), Duration::from_secs(60));
    let started = Instant::now();
    let err = ValkeyAdmin::connect(addr.ip(), addr.port(), &opts)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.category(), "connect_timeout", "{err}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(1500),
        "took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_answered_fails_at_the_command_timeout() {
    let _serial = SERIAL.lock().await;
    let (addr, _server) = fake_server(Misbehaviour::Silent, false).await;
    let opts = options(Duration::from_secs(2), Duration::from_millis(700));
    let admin = ValkeyAdmin::connect(addr.ip(), addr.port(), &opts)
        .await
        .unwrap();
    let started = Instant::now();
    let err = admin.cluster_myid().await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.category(), "command_timeout", "{err}");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

/// A server that trickles every reply a byte a second: each command's timeout
/// covers its whole reply, so observing the member ends at about one command
/// timeout (the observe's commands run concurrently), not when the trickle ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_member_is_reported_unreachable_within_the_command_timeout() {
    let _serial = SERIAL.lock().await;
    let (addr, _server) = fake_server(Misbehaviour::Trickle, false).await;
    let opts = options(Duration::from_secs(2), Duration::from_secs(1));
    let member = MemberRef::new(0, 0);
    let targets = [Target {
        member,
        addr: Some(MemberAddr {
            ip: addr.ip(),
            port: addr.port(),
            bus_port: 1,
        }),
        known_node_id: None,
        former_node_ids: Vec::new(),
        silent: false,
    }];
    let started = Instant::now();
    let (observed, conns) = client::observe_cluster(&targets, &opts, &[]).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(conns.is_empty());
    match &observed.members[0].state {
        MemberState::Unreachable { reason } => {
            assert!(reason.contains("timed out"), "{reason}")
        }
        other => panic!("a trickling member observed as {other:?}"),
    }
}
