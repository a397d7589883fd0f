//! Secrets that live in files and are built again when the files change: the push and
//! fan-out clients' TLS config (CA, client certificate, key), the query API's server config
//! (certificate, key, client CA) and the query API's bearer token (`api.token_file`).
//!
//! A [`Reloading`] value is looked at before each use (a request for a client, a new
//! connection for a server): the files are `stat`ed, and when one of them has a new device,
//! inode, modification time or size (a Secret update swaps a symlink to new files, so the
//! inode changes even when the time does not), the value is built again from the files and
//! used from then on. New files that do not build (half written, a key that is not the
//! certificate's, an empty token file) are logged and counted, and the previous value stays
//! in use; they are not tried again until the files change again. A check is a few `stat`
//! calls, far less than the request or handshake it precedes, and needs no timer: a renewal
//! is used from the next use on.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Which side of a connection the files are for (the `role` label of
/// `ingero_agent_tls_reloads_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The agent's clients: pushes to Fleet, the threshold poller, spans, fan-out.
    Client,
    /// The agent's listeners: the query API.
    Server,
}

impl Role {
    pub const ALL: [Role; 2] = [Role::Client, Role::Server];

    pub fn label(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }

    /// This role's counters.
    pub fn counts(self) -> &'static ReloadCounts {
        match self {
            Role::Client => &CLIENT_RELOADS,
            Role::Server => &SERVER_RELOADS,
        }
    }
}

/// Reloads of one role, in this process.
#[derive(Debug, Default)]
pub struct ReloadCounts {
    /// Changed files built and in use (`result="ok"`).
    pub ok: AtomicU64,
    /// Changed files that did not build; the previous value stayed (`result="error"`).
    pub error: AtomicU64,
}

impl ReloadCounts {
    const fn new() -> Self {
        ReloadCounts {
            ok: AtomicU64::new(0),
            error: AtomicU64::new(0),
        }
    }

    pub fn ok(&self) -> u64 {
        self.ok.load(Relaxed)
    }

    pub fn error(&self) -> u64 {
        self.error.load(Relaxed)
    }
}

static CLIENT_RELOADS: ReloadCounts = ReloadCounts::new();
static SERVER_RELOADS: ReloadCounts = ReloadCounts::new();
static API_TOKEN_RELOADS: ReloadCounts = ReloadCounts::new();

/// What a [`Reloading`] value is built from: which counters its reloads add to and how its
/// log lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// TLS files of one role (`ingero_agent_tls_reloads_total{role}`).
    Tls(Role),
    /// The query API's bearer token file (`ingero_agent_api_token_reloads_total`).
    ApiToken,
}

impl From<Role> for Source {
    fn from(r: Role) -> Self {
        Source::Tls(r)
    }
}

impl Source {
    /// This source's counters.
    pub fn counts(self) -> &'static ReloadCounts {
        match self {
            Source::Tls(r) => r.counts(),
            Source::ApiToken => &API_TOKEN_RELOADS,
        }
    }

    fn changed(self, files: &[PathBuf]) {
        match self {
            Source::Tls(r) => tracing::info!(
                role = r.label(),
                files = ?files,
                "TLS files changed: new connections use them"
            ),
            Source::ApiToken => tracing::info!(
                files = ?files,
                "API token file changed: requests must carry the new token"
            ),
        }
    }

    fn refused(self, error: &dyn std::fmt::Display) {
        match self {
            Source::Tls(r) => tracing::warn!(
                role = r.label(),
                error = %error,
                "TLS files changed but do not load; keeping the previous certificate until they change again"
            ),
            Source::ApiToken => tracing::warn!(
                error = %error,
                "API token file changed but does not load; keeping the previous token until it changes again"
            ),
        }
    }
}

/// What identifies one version of a file: device, inode, modification time and size.
/// `None`: the file could not be looked at.
type FileStamp = Option<(u64, u64, i64, i64, u64)>;

fn stamp(path: &Path) -> FileStamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

/// The paths that are set, in order: the files a [`Reloading`] looks at.
pub fn given<const N: usize>(paths: [&Option<PathBuf>; N]) -> Vec<PathBuf> {
    paths.into_iter().flatten().cloned().collect()
}

type Build<T, E> = Box<dyn Fn() -> Result<T, E> + Send + Sync>;

/// The value in use and the file stamps it was built from (or last failed to build from).
struct Current<T> {
    value: T,
    built: Vec<FileStamp>,
    failed: Option<Vec<FileStamp>>,
}

/// A value built from files, built again when they change (see the module's notes).
pub struct Reloading<T, E> {
    source: Source,
    files: Vec<PathBuf>,
    build: Build<T, E>,
    current: parking_lot::Mutex<Current<T>>,
}

impl<T, E> std::fmt::Debug for Reloading<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("source", &self.source)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl<T: Clone, E: std::fmt::Display> Reloading<T, E> {
    /// Build the first value from `files` (an error here is the caller's, not a reload's).
    /// No files: the value never changes.
    pub fn new(
        source: impl Into<Source>,
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<T, E> + Send + Sync + 'static,
    ) -> Result<Self, E> {
        // Stamped before reading, so a change while building is seen at the next use.
        let built = files.iter().map(|p| stamp(p)).collect();
        let value = build()?;
        Ok(Reloading {
            source: source.into(),
            files,
            build: Box::new(build),
            current: parking_lot::Mutex::new(Current {
                value,
                built,
                failed: None,
            }),
        })
    }

    /// The files looked at.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The value to use now: built again first when a file changed since the current one
    /// was built; new files that do not build leave the current value in place.
    pub fn get(&self) -> T {
        let mut cur = self.current.lock();
        if self.files.is_empty() {
            return cur.value.clone();
        }
        // Stamped under the lock: two uses that both see a change build it once.
        let now: Vec<FileStamp> = self.files.iter().map(|p| stamp(p)).collect();
        if now == cur.built || cur.failed.as_ref() == Some(&now) {
            return cur.value.clone();
        }
        let counts = self.source.counts();
        match (self.build)() {
            Ok(v) => {
                cur.value = v;
                cur.built = now;
                cur.failed = None;
                counts.ok.fetch_add(1, Relaxed);
                self.source.changed(&self.files);
            }
            Err(e) => {
                cur.failed = Some(now);
                counts.error.fetch_add(1, Relaxed);
                self.source.refused(&e);
            }
        }
        cur.value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    /// Replace `path` the way a Secret update does: a new file renamed over it.
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn a_changed_file_is_built_once_and_a_bad_one_keeps_the_value() {
        let dir = TempDir::new("reloading");
        let f = dir.path().join("n");
        replace(&f, "1");
        let path = f.clone();
        let r = Reloading::new(Role::Server, vec![f.clone()], move || {
            let s = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            s.trim().parse::<u32>().map_err(|e| e.to_string())
        })
        .unwrap();
        let counts = Role::Server.counts();
        let (ok, err) = (counts.ok(), counts.error());
        assert_eq!(r.get(), 1);
        replace(&f, "22");
        assert_eq!(r.get(), 22);
        assert_eq!(r.get(), 22);
        replace(&f, "bad");
        assert_eq!(r.get(), 22, "bad files keep the value in use");
        assert_eq!(r.get(), 22);
        std::fs::remove_file(&f).unwrap();
        assert_eq!(r.get(), 22, "a missing file keeps the value in use");
        replace(&f, "4444");
        assert_eq!(r.get(), 4444);
        // The only server-role reloads of this test binary.
        assert_eq!(counts.ok(), ok + 2);
        assert_eq!(counts.error(), err + 2);
    }

    #[test]
    fn without_files_the_value_is_fixed() {
        let r = Reloading::new(Role::Client, Vec::new(), || Ok::<_, String>(7)).unwrap();
        assert_eq!(r.get(), 7);
        assert!(Reloading::new(Role::Client, Vec::new(), || Err::<u8, _>("no")).is_err());
    }
}
