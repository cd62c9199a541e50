//! A fake Valkey server that tries to harm whoever administers it: the member
//! image of a hostile tenant's cluster in the `hostile_tenant` suite.
//!
//! It listens on `--port` (6379 when not given; every other argument is
//! ignored), accepts any login (AUTH and CLIENT get `+OK`, HELLO an error so
//! the client stays on RESP2), and then answers the first other command in
//! one of three ways, taken in turn by successive connections (whatever the
//! command: an operator that gives up on the first command it sends, say
//! CLUSTER NODES, then meets all three within three connections):
//! - `$2000000000\r\n` and bytes for as long as the client reads them (an
//!   operator that buffers the whole reply runs out of memory);
//! - no answer, ever (an operator without a deadline waits for ever);
//! - `$100\r\n`, then one byte a second;
//! - a bulk string of [`BIG_REPLY`] bytes (just under the operator's 4 MiB
//!   bound of one reply) to this and every later command of the connection.
//!
//! The connection is useless after that: whatever the client sends later is
//! read and dropped.
//!
//! With `HOSTILE_ANSWER=big` in its environment every connection gets the
//! last harm (the reply-memory benchmark of `e2e-bench`).
//!
//! It exits on SIGTERM or SIGINT, like valkey-server.

use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};

/// What the server does with one command.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The login: `+OK`.
    Ok,
    /// HELLO: an error, as a server without RESP3 says.
    NoHello,
    /// `$2000000000\r\n`, then bytes until the client goes away.
    EndlessBulk,
    /// Nothing, ever.
    Silent,
    /// `$100\r\n`, then a byte a second.
    Trickle,
    /// A bulk string of [`BIG_REPLY`] bytes, and the connection serves on.
    Big,
}

/// The size of each reply in the `big` mode: 4 MB, under the 4 MiB bound.
const BIG_REPLY: usize = 4_000_000;

/// The harms, one per connection in turn.
const HARMS: [Answer; 4] = [
    Answer::EndlessBulk,
    Answer::Silent,
    Answer::Trickle,
    Answer::Big,
];

fn answer(command: &[String], connection: usize, big: bool) -> Answer {
    let name = command.first().map(|c| c.to_ascii_uppercase());
    match name.as_deref().unwrap_or_default() {
        "AUTH" | "CLIENT" | "SELECT" | "READONLY" => Answer::Ok,
        "HELLO" => Answer::NoHello,
        _ if big => Answer::Big,
        _ => HARMS[connection % HARMS.len()],
    }
}

/// Reads one RESP command (an array of bulk strings); `None` at end of
/// stream or on anything else.
async fn read_command<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Option<Vec<String>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len.min(1 << 20) + 2];
        reader.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    Some(args)
}

async fn serve(stream: TcpStream, connection: usize, big: bool) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut told_big = false;
    let harm = loop {
        let Some(command) = read_command(&mut reader).await else {
            return;
        };
        let big_reply;
        let reply: &[u8] = match answer(&command, connection, big) {
            Answer::Ok => b"+OK\r\n",
            Answer::NoHello => b"-ERR unknown command 'HELLO'\r\n",
            Answer::Big => {
                if !told_big {
                    println!("{peer}: {:?} -> Big", command.first());
                    told_big = true;
                }
                let mut r = format!("${BIG_REPLY}\r\n").into_bytes();
                r.resize(r.len() + BIG_REPLY, b'x');
                r.extend_from_slice(b"\r\n");
                big_reply = r;
                &big_reply
            }
            harm => {
                println!("{peer}: {:?} -> {harm:?}", command.first());
                break harm;
            }
        };
        if write.write_all(reply).await.is_err() {
            return;
        }
    };
    let header: &[u8] = match harm {
        Answer::EndlessBulk => b"$2000000000\r\n",
        Answer::Trickle => b"$100\r\n",
        _ => b"",
    };
    if write.write_all(header).await.is_err() {
        return;
    }
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut drain = vec![0u8; 16 * 1024];
    loop {
        // Reads only to notice the client going away (`read` is cancel-safe).
        tokio::select! {
            n = reader.read(&mut drain) => {
                if !matches!(n, Ok(n) if n > 0) {
                    break;
                }
            }
            written = write.write_all(&chunk), if matches!(harm, Answer::EndlessBulk) => {
                if written.is_err() {
                    break;
                }
                sent += chunk.len() as u64;
            }
            _ = tick.tick(), if matches!(harm, Answer::Trickle) => {
                if write.write_all(b"t").await.is_err() {
                    break;
                }
            }
        }
    }
    println!("{peer}: closed after {harm:?}, {sent} bytes of endless reply sent");
}

fn port_from_args() -> u16 {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == "--port")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(6379)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let port = port_from_args();
    let big = std::env::var("HOSTILE_ANSWER").is_ok_and(|v| v == "big");
    let listener = TcpListener::bind(("0.0.0.0", port)).await?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    println!("hostile-valkey listening on 0.0.0.0:{port} (big replies: {big})");
    let mut connections = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(serve(stream, connections, big));
                    connections += 1;
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    println!("hostile-valkey: signalled, exiting");
    Ok(())
}
