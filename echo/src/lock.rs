//! One writer per data directory: an exclusive `flock(2)` on `<data_dir>/echo.lock`, held
//! for the life of the store. The kernel drops it when the process dies (`kill -9`
//! included), so a rolling restart never finds a stale lock, and a second instance on the
//! same directory refuses to start with the holder's pid.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "echo.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "data directory {dir} is in use by another ingero-echo (pid {holder}): {file} is locked; \
         one writer per data directory (stop the other instance or pick another data_dir)"
    )]
    Held {
        dir: String,
        file: String,
        holder: String,
    },
    #[error("data directory {dir}: {what}: {source}")]
    Io {
        dir: String,
        what: &'static str,
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    pub path: PathBuf,
}

impl DirLock {
    /// Create the directory if needed and take its lock without waiting.
    pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        let d = dir.display().to_string();
        let io = |what: &'static str| {
            let d = d.clone();
            move |source| LockError::Io {
                dir: d,
                what,
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(io("cannot create"))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("cannot open the lock file"))?;
        // SAFETY: flock on a file descriptor this function owns for the call's duration.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LockError::Held {
                    dir: d,
                    file: path.display().to_string(),
                    holder: if holder.is_empty() {
                        "unknown".into()
                    } else {
                        holder.chars().take(32).collect()
                    },
                });
            }
            return Err(io("cannot lock")(err));
        }
        file.set_len(0).map_err(io("cannot write the lock file"))?;
        file.seek(SeekFrom::Start(0))
            .map_err(io("cannot write the lock file"))?;
        write!(file, "{}", std::process::id()).map_err(io("cannot write the lock file"))?;
        let _ = file.sync_all();
        Ok(DirLock { _file: file, path })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_with_the_holder_pid() {
        let dir = std::env::temp_dir().join(format!("echo-lock-{}", std::process::id()));
        let first = DirLock::acquire(&dir).unwrap();
        let err = DirLock::acquire(&dir).unwrap_err().to_string();
        assert!(err.contains("in use by another ingero-echo"), "{err}");
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        drop(first);
        let again = DirLock::acquire(&dir);
        assert!(again.is_ok(), "released on drop");
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
