//! Files that reload without a restart: a capped read, a fingerprint (sha256 and mtime)
//! to log, and change detection by polling the file's metadata from `tick`.
//!
//! Components own no threads, so nothing watches in the background: the processor calls
//! [`WatchedFile::poll`] from `tick(now)`, which costs one `stat` when nothing changed.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// What identifies one version of a file on disk without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub mtime_unix_nano: u64,
    pub len: u64,
    /// Inode on Unix (an atomic rename changes it even when mtime and size do not); 0
    /// elsewhere.
    pub inode: u64,
}

/// One loaded version of a file, as logged at start and on every reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    pub path: String,
    /// Lower-case hex SHA-256 of the bytes read.
    pub sha256: String,
    pub mtime_unix_nano: u64,
    pub len: u64,
}

/// Why a file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: cannot read: {reason}")]
    Io { path: String, reason: String },
    #[error("{path}: {len} bytes exceed the cap of {cap} bytes")]
    TooLarge { path: String, len: u64, cap: u64 },
}

/// Metadata of `path`.
pub fn stat(path: &Path) -> std::io::Result<FileStamp> {
    let meta = std::fs::metadata(path)?;
    let mtime_unix_nano = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(FileStamp {
        mtime_unix_nano,
        len: meta.len(),
        inode,
    })
}

/// Read at most `cap` bytes of `path` (more is an error, not a truncation) and fingerprint
/// them. The stamp is taken before reading, so a write racing the read shows up as a
/// change on the next poll.
pub fn read_capped(path: &Path, cap: u64) -> Result<(Vec<u8>, FileStamp, Fingerprint), ReadError> {
    let shown = path.display().to_string();
    let io = |e: std::io::Error| ReadError::Io {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let stamp = stat(path).map_err(io)?;
    if stamp.len > cap {
        return Err(ReadError::TooLarge {
            path: shown,
            len: stamp.len,
            cap,
        });
    }
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(usize::try_from(stamp.len).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read_len = bytes.len() as u64;
    if read_len > cap {
        return Err(ReadError::TooLarge {
            path: shown,
            len: read_len,
            cap,
        });
    }
    let fingerprint = Fingerprint {
        path: shown,
        sha256: hex::encode(Sha256::digest(&bytes)),
        mtime_unix_nano: stamp.mtime_unix_nano,
        len: read_len,
    };
    Ok((bytes, stamp, fingerprint))
}

/// What the last look at the file saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Stamp(FileStamp),
    Missing,
}

/// Result of one poll.
#[derive(Debug)]
pub enum Poll {
    /// Same metadata (or same bytes) as last time: nothing to do.
    Unchanged,
    /// New content to validate; call [`WatchedFile::accept`] if it is good.
    Changed {
        bytes: Vec<u8>,
        fingerprint: Fingerprint,
    },
    /// The file could not be read; reported once per change of the file's state.
    Failed(ReadError),
}

/// A file whose current good version is known, polled for changes.
#[derive(Debug)]
pub struct WatchedFile {
    path: PathBuf,
    cap: u64,
    current: Option<Fingerprint>,
    last_seen: Option<Seen>,
}

impl WatchedFile {
    pub fn new(path: impl Into<PathBuf>, cap: u64) -> Self {
        WatchedFile {
            path: path.into(),
            cap,
            current: None,
            last_seen: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version in use, once one was accepted.
    pub fn current(&self) -> Option<&Fingerprint> {
        self.current.as_ref()
    }

    /// Read the file now, whatever its metadata says.
    pub fn read_now(&mut self) -> Result<(Vec<u8>, Fingerprint), ReadError> {
        match read_capped(&self.path, self.cap) {
            Ok((bytes, stamp, fp)) => {
                self.last_seen = Some(Seen::Stamp(stamp));
                Ok((bytes, fp))
            }
            Err(e) => {
                self.last_seen = match stat(&self.path) {
                    Ok(stamp) => Some(Seen::Stamp(stamp)),
                    Err(_) => Some(Seen::Missing),
                };
                Err(e)
            }
        }
    }

    /// Look for a change: one `stat`, and a read only when the metadata moved. Content
    /// identical to the version in use (a `touch`) is `Unchanged`.
    pub fn poll(&mut self) -> Poll {
        let seen = match stat(&self.path) {
            Ok(stamp) => Seen::Stamp(stamp),
            Err(e) => {
                if self.last_seen == Some(Seen::Missing) {
                    return Poll::Unchanged;
                }
                self.last_seen = Some(Seen::Missing);
                return Poll::Failed(ReadError::Io {
                    path: self.path.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        if self.last_seen.as_ref() == Some(&seen) {
            return Poll::Unchanged;
        }
        match self.read_now() {
            Ok((bytes, fingerprint)) => {
                if let Some(cur) = &mut self.current
                    && cur.sha256 == fingerprint.sha256
                {
                    cur.mtime_unix_nano = fingerprint.mtime_unix_nano;
                    return Poll::Unchanged;
                }
                Poll::Changed { bytes, fingerprint }
            }
            Err(e) => Poll::Failed(e),
        }
    }

    /// Record `fingerprint` as the version in use.
    pub fn accept(&mut self, fingerprint: Fingerprint) {
        self.current = Some(fingerprint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn temp_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "provider-processor-watch-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("f.yaml")
    }

    fn write_at(path: &Path, bytes: &[u8], mtime_secs: u64) {
        std::fs::write(path, bytes).unwrap();
        let f = File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime_secs))
            .unwrap();
    }

    #[test]
    fn fingerprint_is_sha256_and_mtime() {
        let p = temp_path("fp");
        write_at(&p, b"abc", 1_700_000_000);
        let (bytes, _, fp) = read_capped(&p, 10).unwrap();
        assert_eq!(bytes, b"abc");
        assert_eq!(
            fp.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(fp.mtime_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(fp.len, 3);
        assert!(matches!(
            read_capped(&p, 2),
            Err(ReadError::TooLarge { len: 3, cap: 2, .. })
        ));
    }

    #[test]
    fn poll_reads_only_on_change_and_reports_a_missing_file_once() {
        let p = temp_path("poll");
        write_at(&p, b"v1", 1_700_000_000);
        let mut w = WatchedFile::new(&p, 1024);
        let (_, fp) = w.read_now().unwrap();
        w.accept(fp);
        assert!(matches!(w.poll(), Poll::Unchanged));

        // Touch without a content change.
        write_at(&p, b"v1", 1_700_000_100);
        assert!(matches!(w.poll(), Poll::Unchanged));
        assert_eq!(
            w.current().unwrap().mtime_unix_nano,
            1_700_000_100_000_000_000
        );

        write_at(&p, b"v2", 1_700_000_200);
        match w.poll() {
            Poll::Changed { bytes, fingerprint } => {
                assert_eq!(bytes, b"v2");
                assert_eq!(fingerprint.len, 2);
            }
            other => panic!("{other:?}"),
        }
        // Not accepted (say it was invalid): not re-read until the file moves again.
        assert!(matches!(w.poll(), Poll::Unchanged));

        std::fs::remove_file(&p).unwrap();
        assert!(matches!(w.poll(), Poll::Failed(ReadError::Io { .. })));
        assert!(matches!(w.poll(), Poll::Unchanged));
        write_at(&p, b"v3", 1_700_000_300);
        assert!(matches!(w.poll(), Poll::Changed { .. }));
    }
}
