//! The remediation Unix socket (spec 4.2): one consumer at a time (a new connection
//! replaces the old one), NDJSON lines, a 50 ms write deadline. A message with no consumer
//! or a failed write is dropped and counted; the agent never waits on a consumer.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

pub const WRITE_DEADLINE: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum UdsError {
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Drop and delivery counters.
#[derive(Debug, Default)]
pub struct UdsStats {
    pub sent: AtomicU64,
    pub no_client: AtomicU64,
    pub write_error: AtomicU64,
    pub marshal_error: AtomicU64,
    pub connections: AtomicU64,
}

#[derive(Debug)]
pub struct UdsServer {
    path: PathBuf,
    client: Arc<Mutex<Option<UnixStream>>>,
    stats: Arc<UdsStats>,
    accept_task: tokio::task::JoinHandle<()>,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> UdsError + 'a {
    move |source| UdsError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl UdsServer {
    /// Bind at `path` (a stale socket file is removed first). Mode 0700, or group `gid`
    /// with mode 0770 when given (falling back to 0700 if the chown fails).
    pub fn bind(path: &Path, gid: Option<u32>) -> Result<Self, UdsError> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                std::fs::remove_file(path).map_err(io("remove stale socket", path))?
            }
            Ok(_) => {
                return Err(UdsError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(path).map_err(io("bind", path))?;
        let mut mode = 0o700;
        if let Some(gid) = gid {
            match std::os::unix::fs::chown(path, None, Some(gid)) {
                Ok(()) => mode = 0o770,
                Err(e) => {
                    tracing::warn!(path = %path.display(), gid, error = %e, "chown of remediation socket failed; keeping mode 0700")
                }
            }
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io("chmod", path))?;
        let client: Arc<Mutex<Option<UnixStream>>> = Arc::new(Mutex::new(None));
        let stats = Arc::new(UdsStats::default());
        let accept_task = {
            let client = client.clone();
            let stats = stats.clone();
            tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => {
                            stats.connections.fetch_add(1, Ordering::Relaxed);
                            // Replacing the old stream drops (closes) it.
                            *client.lock().await = Some(stream);
                            tracing::info!("remediation consumer connected");
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "remediation socket accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            })
        };
        Ok(UdsServer {
            path: path.to_path_buf(),
            client,
            stats,
            accept_task,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> &UdsStats {
        &self.stats
    }

    /// Whether a consumer is connected right now.
    pub async fn has_client(&self) -> bool {
        self.client.lock().await.is_some()
    }

    /// Deliver one NDJSON line, or drop it (counted). Returns whether it was written.
    pub async fn send_line(&self, line: &[u8]) -> bool {
        let mut guard = self.client.lock().await;
        let Some(stream) = guard.as_mut() else {
            self.stats.no_client.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        match tokio::time::timeout(WRITE_DEADLINE, stream.write_all(line)).await {
            Ok(Ok(())) => {
                self.stats.sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "remediation write failed; closing the consumer");
                self.stats.write_error.fetch_add(1, Ordering::Relaxed);
                *guard = None;
                false
            }
            Err(_) => {
                tracing::debug!(
                    "remediation write missed its 50 ms deadline; closing the consumer"
                );
                self.stats.write_error.fetch_add(1, Ordering::Relaxed);
                *guard = None;
                false
            }
        }
    }

    /// Serialize and send a message; a serialization failure is counted as `marshal_error`.
    pub async fn send<T: serde::Serialize>(&self, msg: &T) -> bool {
        match super::messages::line(msg) {
            Ok(l) => self.send_line(&l).await,
            Err(e) => {
                tracing::warn!(error = %e, "remediation message not serializable");
                self.stats.marshal_error.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Stop accepting, close the consumer and remove the socket file.
    pub async fn shutdown(&self) {
        self.accept_task.abort();
        *self.client.lock().await = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for UdsServer {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}
