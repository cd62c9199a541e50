//! Taking a member's RDB over the replication protocol, the way
//! `valkey-cli --rdb` does: `REPLCONF capa eof`, `REPLCONF rdb-only 1`, then
//! `SYNC`. The member forks and writes a snapshot while it goes on serving
//! writes (a replica's snapshot costs its primary nothing at all), and sends it
//! either as one bulk `$<len>\r\n<len bytes>` (from a file on its disk) or, when
//! it streams diskless, as `$EOF:<40 byte mark>\r\n<bytes><the same mark>`.
//! Before the header it may send bare `\n` keepalives while the fork works.
//!
//! The bytes go to a sink as they arrive: nothing here holds more than one read
//! buffer. A hostile member cannot make this hold more than a line of
//! [`MAX_LINE`] bytes, nor wait on it longer than the idle timeout per read.

use crate::wire::{self, Stream, TlsSettings};
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// The longest reply line read before the payload (an error message, a header).
pub const MAX_LINE: usize = 4096;

/// Length of the end mark of a diskless payload.
pub const EOF_MARK_LEN: usize = 40;

/// Why an RDB could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} refused the login: {message}")]
    AuthRefused { addr: String, message: String },
    #[error("{addr} answered {command} with an error: {message}")]
    Refused {
        addr: String,
        command: &'static str,
        message: String,
    },
    #[error("{addr} sent no byte for {seconds} s")]
    Idle { addr: String, seconds: u64 },
    #[error("reading from {addr}: {source}")]
    Read {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} closed the connection before the snapshot ended")]
    Truncated { addr: String },
    #[error("{addr} sent an unexpected reply: {0}", .reply)]
    Framing { addr: String, reply: String },
    #[error("writing the snapshot of {addr}: {source}")]
    Sink {
        addr: String,
        source: std::io::Error,
    },
}

impl SyncError {
    /// A stable name for events and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            SyncError::Connect { .. } => "connect",
            SyncError::AuthRefused { .. } => "auth",
            SyncError::Refused { .. } => "refused",
            SyncError::Idle { .. } => "timeout",
            SyncError::Read { .. } | SyncError::Truncated { .. } => "io",
            SyncError::Framing { .. } => "protocol",
            SyncError::Sink { .. } => "sink",
        }
    }
}

/// How the snapshot's bytes are framed, from the line that announces them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// `$<len>`: exactly `len` bytes follow.
    Sized(u64),
    /// `$EOF:<mark>`: bytes follow until the 40-byte mark.
    EofMarked([u8; EOF_MARK_LEN]),
}

/// Parses the payload header line (without its line end).
pub fn parse_payload_header(line: &[u8]) -> Result<Payload, String> {
    let shown = || String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    let Some(rest) = line.strip_prefix(b"$") else {
        return Err(shown());
    };
    if let Some(mark) = rest.strip_prefix(b"EOF:") {
        let mark: [u8; EOF_MARK_LEN] = mark.try_into().map_err(|_| shown())?;
        return Ok(Payload::EofMarked(mark));
    }
    std::str::from_utf8(rest)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .map(Payload::Sized)
        .ok_or_else(shown)
}

/// Finds the end mark in a diskless payload read in chunks: it holds back the
/// last [`EOF_MARK_LEN`] bytes seen (they may be the start of the mark) and
/// hands on the rest.
#[derive(Debug)]
pub struct EofScanner {
    mark: [u8; EOF_MARK_LEN],
    held: Vec<u8>,
    done: bool,
}

impl EofScanner {
    pub fn new(mark: [u8; EOF_MARK_LEN]) -> EofScanner {
        EofScanner {
            mark,
            held: Vec::with_capacity(2 * EOF_MARK_LEN),
            done: false,
        }
    }

    /// Whether the mark was seen.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Takes the next chunk; returns the payload bytes now known to come
    /// before the mark. After the mark, every byte is ignored.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done {
            return Vec::new();
        }
        self.held.extend_from_slice(chunk);
        // The mark may start in the bytes held back from the last chunk; no
        // match can start before them.
        if let Some(at) = memchr::memmem::find(&self.held, &self.mark) {
            self.done = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self.held.len().min(EOF_MARK_LEN - 1);
        let tail = self.held.split_off(self.held.len() - keep);
        std::mem::replace(&mut self.held, tail)
    }
}

/// Where the snapshot's bytes go, in order.
pub trait RdbSink {
    fn write(&mut self, bytes: &[u8]) -> impl Future<Output = std::io::Result<()>> + Send;
}

/// What was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub bytes: u64,
    /// Whether it came diskless (EOF-marked) or as one sized bulk.
    pub diskless: bool,
}

/// Encodes a command as a RESP array of bulk strings.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Connects to `ip:port` (TLS when given) and streams its RDB into `sink`.
pub async fn take_rdb(
    ip: IpAddr,
    port: u16,
    tls_ca_pem: Option<&[u8]>,
    login: Option<(&str, &str)>,
    timeout: Duration,
    sink: &mut impl RdbSink,
) -> Result<Taken, SyncError> {
    let addr = format!("{ip}:{port}");
    let tls = tls_ca_pem.map(|ca_pem| TlsSettings {
        ca_pem,
        identity: None,
    });
    let stream: Stream =
        tokio::time::timeout(timeout, wire::open_unbounded(ip, port, tls.as_ref()))
            .await
            .map_err(|_| SyncError::Idle {
                addr: addr.clone(),
                seconds: timeout.as_secs(),
            })?
            .map_err(|source| SyncError::Connect {
                addr: addr.clone(),
                source,
            })?;
    sync_over(stream, &addr, login, timeout, sink).await
}

/// The protocol over an open stream (tests drive it over an in-memory pipe).
pub async fn sync_over<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    addr: &str,
    login: Option<(&str, &str)>,
    idle: Duration,
    sink: &mut impl RdbSink,
) -> Result<Taken, SyncError> {
    let mut conn = Conn {
        io: BufReader::with_capacity(64 * 1024, stream),
        addr: addr.to_string(),
        idle,
    };
    if let Some((user, password)) = login {
        conn.send(&resp(&[b"AUTH", user.as_bytes(), password.as_bytes()]))
            .await?;
        let reply = conn.line().await?;
        if let Some(message) = reply.strip_prefix(b"-") {
            return Err(SyncError::AuthRefused {
                addr: conn.addr,
                message: String::from_utf8_lossy(message).into_owned(),
            });
        }
    }
    conn.send(&resp(&[b"REPLCONF", b"capa", b"eof"])).await?;
    conn.expect_ok("REPLCONF capa eof").await?;
    // Without rdb-only (before Valkey 7.2's REPLCONF rdb-only) the member
    // goes on with the command stream after the snapshot, which is ignored.
    conn.send(&resp(&[b"REPLCONF", b"rdb-only", b"1"])).await?;
    let _ = conn.line().await?;
    conn.send(&resp(&[b"SYNC"])).await?;
    let header = loop {
        let line = conn.line().await?;
        if line.is_empty() {
            continue; // a keepalive while the member forks
        }
        if let Some(message) = line.strip_prefix(b"-") {
            return Err(SyncError::Refused {
                addr: conn.addr,
                command: "SYNC",
                message: String::from_utf8_lossy(message).into_owned(),
            });
        }
        break line;
    };
    let payload = parse_payload_header(&header).map_err(|reply| SyncError::Framing {
        addr: conn.addr.clone(),
        reply,
    })?;
    let mut buf = vec![0u8; 64 * 1024];
    match payload {
        Payload::Sized(len) => {
            let mut left = len;
            while left > 0 {
                let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
                let n = conn.read(&mut buf[..want]).await?;
                conn.sink(sink, &buf[..n]).await?;
                left -= n as u64;
            }
            Ok(Taken {
                bytes: len,
                diskless: false,
            })
        }
        Payload::EofMarked(mark) => {
            let mut scanner = EofScanner::new(mark);
            let mut bytes = 0u64;
            while !scanner.done() {
                let n = conn.read(&mut buf).await?;
                let out = scanner.push(&buf[..n]);
                bytes += out.len() as u64;
                conn.sink(sink, &out).await?;
            }
            Ok(Taken {
                bytes,
                diskless: true,
            })
        }
    }
}

struct Conn<S> {
    io: BufReader<S>,
    addr: String,
    idle: Duration,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn idle_error(&self) -> SyncError {
        SyncError::Idle {
            addr: self.addr.clone(),
            seconds: self.idle.as_secs(),
        }
    }

    fn read_error(&self, source: std::io::Error) -> SyncError {
        SyncError::Read {
            addr: self.addr.clone(),
            source,
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), SyncError> {
        let io = self.io.get_mut();
        match tokio::time::timeout(self.idle, async {
            io.write_all(bytes).await?;
            io.flush().await
        })
        .await
        {
            Err(_) => Err(self.idle_error()),
            Ok(Err(e)) => Err(self.read_error(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Reads one byte at a time up to `\n` (the lines before the payload are
    /// few and short), at most [`MAX_LINE`] bytes; strips the `\r`.
    async fn line(&mut self) -> Result<Vec<u8>, SyncError> {
        let mut line = Vec::new();
        loop {
            let byte = match tokio::time::timeout(self.idle, self.io.read_u8()).await {
                Err(_) => return Err(self.idle_error()),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(SyncError::Truncated {
                        addr: self.addr.clone(),
                    });
                }
                Ok(Err(e)) => return Err(self.read_error(e)),
                Ok(Ok(b)) => b,
            };
            if byte == b'\n' {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if line.len() >= MAX_LINE {
                return Err(SyncError::Framing {
                    addr: self.addr.clone(),
                    reply: format!("a line longer than {MAX_LINE} bytes"),
                });
            }
            line.push(byte);
        }
    }

    async fn expect_ok(&mut self, command: &'static str) -> Result<(), SyncError> {
        let line = self.line().await?;
        if let Some(message) = line.strip_prefix(b"-") {
            return Err(SyncError::Refused {
                addr: self.addr.clone(),
                command,
                message: String::from_utf8_lossy(message).into_owned(),
            });
        }
        Ok(())
    }

    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, SyncError> {
        match tokio::time::timeout(self.idle, self.io.read(buf)).await {
            Err(_) => Err(self.idle_error()),
            Ok(Err(e)) => Err(self.read_error(e)),
            Ok(Ok(0)) => Err(SyncError::Truncated {
                addr: self.addr.clone(),
            }),
            Ok(Ok(n)) => Ok(n),
        }
    }

    async fn sink(&self, sink: &mut impl RdbSink, bytes: &[u8]) -> Result<(), SyncError> {
        if bytes.is_empty() {
            return Ok(());
        }
        sink.write(bytes).await.map_err(|source| SyncError::Sink {
            addr: self.addr.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::duplex;

    #[test]
    fn a_sized_header_names_its_length() {
        assert_eq!(parse_payload_header(b"$1234"), Ok(Payload::Sized(1234)));
    }

    #[test]
    fn an_eof_header_carries_its_forty_byte_mark() {
        let mark = [b'a'; 40];
        let mut line = b"$EOF:".to_vec();
        line.extend_from_slice(&mark);
        assert_eq!(parse_payload_header(&line), Ok(Payload::EofMarked(mark)));
    }

    #[test]
    fn bad_headers_are_refused_not_guessed() {
        for bad in [
            &b"+FULLRESYNC x 0"[..],
            b"$",
            b"$-1",
            b"$12a",
            b"$EOF:short",
            b"$99999999999999999999999",
        ] {
            assert!(parse_payload_header(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_scanner_finds_a_mark_split_over_chunks_and_keeps_every_byte_before_it() {
        let mark = *b"0123456789012345678901234567890123456789";
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut stream = data.clone();
        stream.extend_from_slice(&mark);
        stream.extend_from_slice(b"trailing");
        for chunk in [1, 7, 39, 40, 41, 500, 5000] {
            let mut s = EofScanner::new(mark);
            let mut out = Vec::new();
            for c in stream.chunks(chunk) {
                out.extend(s.push(c));
            }
            assert!(s.done(), "chunk {chunk}");
            assert_eq!(out, data, "chunk {chunk}");
        }
    }

    #[test]
    fn the_scanner_never_finishes_without_the_mark() {
        let mut s = EofScanner::new([b'x'; 40]);
        let out = s.push(&[b'x'; 39]);
        assert!(out.is_empty());
        assert!(!s.done());
    }

    struct Collect(Vec<u8>);
    impl RdbSink for Collect {
        async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
            self.0.extend_from_slice(bytes);
            Ok(())
        }
    }

    async fn serve(reply: Vec<u8>) -> Result<(Taken, Vec<u8>), SyncError> {
        let (client, mut server) = duplex(1 << 20);
        tokio::spawn(async move {
            server.write_all(&reply).await.ok();
            // Keep the stream open so a reader waiting for more is idle, not at EOF.
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let mut sink = Collect(Vec::new());
        let taken = sync_over(
            client,
            "test",
            Some(("u", "p")),
            Duration::from_millis(300),
            &mut sink,
        )
        .await?;
        Ok((taken, sink.0))
    }

    #[tokio::test]
    async fn a_disk_snapshot_after_keepalives_is_taken_whole() {
        let mut reply = b"+OK\r\n+OK\r\n+OK\r\n\n\n$5\r\nREDIS".to_vec();
        reply.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let (taken, bytes) = serve(reply).await.unwrap();
        assert_eq!(bytes, b"REDIS");
        assert_eq!(
            taken,
            Taken {
                bytes: 5,
                diskless: false
            }
        );
    }

    #[tokio::test]
    async fn a_diskless_snapshot_ends_at_its_mark() {
        let mark = [b'm'; 40];
        let mut reply = b"+OK\r\n+OK\r\n+OK\r\n$EOF:".to_vec();
        reply.extend_from_slice(&mark);
        reply.extend_from_slice(b"\r\nREDIS0011payload");
        reply.extend_from_slice(&mark);
        let (taken, bytes) = serve(reply).await.unwrap();
        assert_eq!(bytes, b"REDIS0011payload");
        assert!(taken.diskless);
    }

    #[tokio::test]
    async fn a_refused_login_says_so() {
        let err = serve(b"-WRONGPASS invalid username-password pair\r\n".to_vec())
            .await
            .unwrap_err();
        assert_eq!(err.category(), "auth", "{err}");
    }

    #[tokio::test]
    async fn a_member_that_stalls_mid_snapshot_times_out() {
        let err = serve(b"+OK\r\n+OK\r\n+OK\r\n$100\r\nonly some".to_vec())
            .await
            .unwrap_err();
        assert_eq!(err.category(), "timeout", "{err}");
    }

    #[tokio::test]
    async fn an_endless_line_is_refused_within_its_bound() {
        let err = serve(vec![b'+'; MAX_LINE + 10]).await.unwrap_err();
        assert_eq!(err.category(), "protocol", "{err}");
    }
}
