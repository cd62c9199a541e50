//! The CLI side of the fault verbs: one JSON request line to the agent's unix
//! socket, one JSON reply line back.
//!
//! Request `{"op":"node-fail","target":"node-1a-1"}` (ops `node-fail`,
//! `node-heal`, `zone-fail`, `zone-heal`, `zone-partition`, and `status`
//! without a target; the load balancer's `lb-reassign` with target
//! `namespace/name`, `lb-hold`, `lb-release`, `lb-status`); reply
//! `{"ok":true,"message":"..."}`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// How long a fault may take to be carried out by the agent.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A fault (or the status query) as sent to the agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    pub op: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub target: Option<String>,
}

/// The agent's answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reply {
    pub ok: bool,
    #[serde(default)]
    pub message: String,
}

/// Errors reaching the agent.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    #[error("connecting to the agent at {path} (is the testbed up?): {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to the agent at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the agent at {path} did not answer within {}s", TIMEOUT.as_secs())]
    Timeout { path: PathBuf },
    #[error("the agent at {path} closed the connection without answering")]
    NoReply { path: PathBuf },
    #[error("the agent at {path} answered {line:?}, not a reply: {source}")]
    BadReply {
        path: PathBuf,
        line: String,
        source: serde_json::Error,
    },
}

impl Request {
    pub fn new(op: &str, target: Option<&str>) -> Self {
        Self {
            op: op.to_string(),
            target: target.map(str::to_string),
        }
    }

    /// The request line, newline-terminated.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Sends `req` to the agent listening on `socket` and returns its reply.
pub async fn send(socket: &Path, req: &Request) -> Result<Reply, FaultError> {
    let path = socket.to_path_buf();
    let exchange = async {
        let mut stream =
            UnixStream::connect(socket)
                .await
                .map_err(|source| FaultError::Connect {
                    path: path.clone(),
                    source,
                })?;
        let io = |source| FaultError::Io {
            path: path.clone(),
            source,
        };
        stream.write_all(req.line().as_bytes()).await.map_err(io)?;
        stream.flush().await.map_err(io)?;
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .await
            .map_err(io)?;
        if line.trim().is_empty() {
            return Err(FaultError::NoReply { path: path.clone() });
        }
        serde_json::from_str(line.trim()).map_err(|source| FaultError::BadReply {
            path: path.clone(),
            line: line.trim().to_string(),
            source,
        })
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .unwrap_or(Err(FaultError::Timeout { path }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_json_line_and_status_has_no_target() {
        assert_eq!(
            Request::new("node-fail", Some("node-1a-1")).line(),
            "{\"op\":\"node-fail\",\"target\":\"node-1a-1\"}\n"
        );
        assert_eq!(Request::new("status", None).line(), "{\"op\":\"status\"}\n");
    }

    #[tokio::test]
    async fn a_reply_line_is_read_back_from_the_socket() {
        let dir = std::env::temp_dir().join(format!("testbed-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("agent.sock");
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut line = String::new();
            BufReader::new(r).read_line(&mut line).await.unwrap();
            let req: Request = serde_json::from_str(&line).unwrap();
            let reply = format!(
                "{{\"ok\":false,\"message\":\"no node {}\"}}\n",
                req.target.unwrap()
            );
            w.write_all(reply.as_bytes()).await.unwrap();
        });
        let reply = send(&sock, &Request::new("node-fail", Some("node-9z-9")))
            .await
            .unwrap();
        assert_eq!(
            reply,
            Reply {
                ok: false,
                message: "no node node-9z-9".into()
            }
        );
        server.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_missing_agent_is_reported_as_such() {
        let err = send(
            Path::new("/nonexistent/agent.sock"),
            &Request::new("status", None),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("is the testbed up?"));
    }
}
