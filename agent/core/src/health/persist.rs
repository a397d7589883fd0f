//! Baseline persistence across restarts (spec 3.5): written atomically on graceful
//! shutdown once warmed up, restored at start when fresh, so a rolling restart does not
//! cost a 5-minute warm-up.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use component::Timestamp;
use serde::{Deserialize, Serialize};

use super::SignalSet;
use super::baseline::{BaselineSnapshot, SCHEMA_VERSION};
use crate::timefmt;

pub const DEFAULT_PATH: &str = "/var/lib/ingero/health-baseline.json";
pub const DEFAULT_STALE_AGE: Duration = Duration::from_secs(600);
/// Files above this are quarantined unread.
pub const MAX_FILE_SIZE: u64 = 1 << 20;
const MAX_QUARANTINE_SUFFIX: u32 = 1000;

#[derive(Debug, Serialize, Deserialize)]
struct SavedFile {
    schema_version: i64,
    saved_at: String,
    sample_count: i64,
    fast_alpha: f64,
    floor_alpha: f64,
    fast_ema: SignalSet,
    hard_floor: SignalSet,
}

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("persist path is empty")]
    EmptyPath,
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("encode baseline: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> PersistError + 'a {
    move |source| PersistError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Write `snap` to `path` atomically: temp file in the same directory, fsync, chmod 0644,
/// rename over the target, fsync the directory.
pub fn save(path: &Path, snap: &BaselineSnapshot, now: Timestamp) -> Result<(), PersistError> {
    if path.as_os_str().is_empty() {
        return Err(PersistError::EmptyPath);
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let body = SavedFile {
        schema_version: i64::from(SCHEMA_VERSION),
        saved_at: timefmt::rfc3339_secs(now),
        sample_count: i64::try_from(snap.sample_count).unwrap_or(i64::MAX),
        fast_alpha: snap.fast_alpha,
        floor_alpha: snap.floor_alpha,
        fast_ema: snap.fast_ema,
        hard_floor: snap.hard_floor,
    };
    let data = serde_json::to_vec_pretty(&body)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> Result<(), PersistError> {
        let mut f = fs::File::create(&tmp).map_err(io_err("create", &tmp))?;
        f.write_all(&data).map_err(io_err("write", &tmp))?;
        f.sync_all().map_err(io_err("fsync", &tmp))?;
        drop(f);
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644))
            .map_err(io_err("chmod", &tmp))?;
        fs::rename(&tmp, path).map_err(io_err("rename", path))?;
        Ok(())
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir))
}

/// What [`load`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadOutcome {
    Missing,
    /// Usable: restore it and start ACTIVE.
    Fresh(BaselineSnapshot),
    /// Older than the stale age, or saved in the future: deleted.
    Stale,
    /// Written by a newer schema: left in place, calibrate.
    NewerSchema(i64),
    /// Unparseable, oversized or invalid: renamed aside.
    Corrupt {
        reason: String,
        moved_to: Option<PathBuf>,
    },
    Unreadable(String),
}

/// Read the baseline at `path` as of `now`.
pub fn load(path: &Path, stale_age: Duration, now: Timestamp) -> LoadOutcome {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LoadOutcome::Missing,
        Err(e) => return LoadOutcome::Unreadable(e.to_string()),
    };
    if !meta.is_file() {
        return LoadOutcome::Unreadable("not a regular file".into());
    }
    if meta.len() > MAX_FILE_SIZE {
        return corrupt(
            path,
            now,
            format!("file size {} exceeds {MAX_FILE_SIZE}", meta.len()),
        );
    }
    let mut data = Vec::new();
    let read = fs::File::open(path).and_then(|f| f.take(MAX_FILE_SIZE + 1).read_to_end(&mut data));
    if let Err(e) = read {
        return LoadOutcome::Unreadable(e.to_string());
    }
    if data.len() as u64 > MAX_FILE_SIZE {
        return corrupt(
            path,
            now,
            "file grew past the size cap while reading".into(),
        );
    }
    // The schema version decides how to read the rest: a newer writer may use another shape.
    let loose: serde_json::Value = match serde_json::from_slice(&data) {
        Ok(v) => v,
        Err(e) => return corrupt(path, now, format!("corrupt json: {e}")),
    };
    let version = loose
        .get("schema_version")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    let current = i64::from(SCHEMA_VERSION);
    if version > current {
        return LoadOutcome::NewerSchema(version);
    }
    if version != current {
        return corrupt(path, now, format!("unsupported schema_version {version}"));
    }
    let f: SavedFile = match serde_json::from_value(loose) {
        Ok(f) => f,
        Err(e) => return corrupt(path, now, format!("corrupt json: {e}")),
    };
    let Ok(sample_count) = u64::try_from(f.sample_count) else {
        return corrupt(
            path,
            now,
            format!("negative sample_count {}", f.sample_count),
        );
    };
    if !f.fast_ema.all_finite() || !f.hard_floor.all_finite() {
        return corrupt(path, now, "non-finite baseline values".into());
    }
    let negative = |s: &SignalSet| s.named().iter().any(|(_, v)| *v < 0.0);
    if negative(&f.fast_ema) || negative(&f.hard_floor) {
        return corrupt(path, now, "negative baseline values".into());
    }
    let Some(saved_at) = timefmt::parse_rfc3339(&f.saved_at) else {
        return corrupt(path, now, format!("invalid saved_at {:?}", f.saved_at));
    };
    if saved_at > now || now.since(saved_at) > stale_age {
        let _ = fs::remove_file(path);
        return LoadOutcome::Stale;
    }
    LoadOutcome::Fresh(BaselineSnapshot {
        sample_count,
        fast_alpha: f.fast_alpha,
        floor_alpha: f.floor_alpha,
        fast_ema: f.fast_ema,
        hard_floor: f.hard_floor,
    })
}

/// Rename a bad file to `<path>.corrupt-<stamp>[.n]` so it is kept for inspection but never
/// read again.
fn corrupt(path: &Path, now: Timestamp, reason: String) -> LoadOutcome {
    let base = format!("{}.corrupt-{}", path.display(), timefmt::compact_stamp(now));
    for i in 0..MAX_QUARANTINE_SUFFIX {
        let candidate = if i == 0 {
            PathBuf::from(&base)
        } else {
            PathBuf::from(format!("{base}.{i}"))
        };
        if candidate.symlink_metadata().is_err() {
            let moved_to = fs::rename(path, &candidate).ok().map(|_| candidate);
            return LoadOutcome::Corrupt { reason, moved_to };
        }
    }
    LoadOutcome::Corrupt {
        reason,
        moved_to: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    const NOW: Timestamp = Timestamp::from_secs(1_779_185_472);

    fn snap() -> BaselineSnapshot {
        BaselineSnapshot {
            sample_count: 42,
            fast_alpha: 0.1,
            floor_alpha: 0.001,
            fast_ema: SignalSet::new(900.0, 0.8, 0.7, 0.6),
            hard_floor: SignalSet::new(850.0, 0.75, 0.65, 0.55),
        }
    }

    #[test]
    fn save_then_load_round_trips_with_the_documented_shape() {
        let dir = TempDir::new("persist-rt");
        let path = dir.path().join("sub/baseline.json");
        save(&path, &snap(), NOW).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["saved_at"], "2026-05-19T10:11:12Z");
        assert_eq!(v["sample_count"], 42);
        assert_eq!(v["fast_ema"]["Throughput"], 900.0);
        assert_eq!(v["hard_floor"]["CPU"], 0.55);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let later = NOW.saturating_add(Duration::from_secs(599));
        assert_eq!(
            load(&path, DEFAULT_STALE_AGE, later),
            LoadOutcome::Fresh(snap())
        );
        // No temp file left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn stale_and_future_files_are_deleted() {
        let dir = TempDir::new("persist-stale");
        let path = dir.path().join("b.json");
        save(&path, &snap(), NOW).unwrap();
        assert_eq!(
            load(
                &path,
                DEFAULT_STALE_AGE,
                NOW.saturating_add(Duration::from_secs(601))
            ),
            LoadOutcome::Stale
        );
        assert!(!path.exists());
        save(&path, &snap(), NOW).unwrap();
        assert_eq!(
            load(
                &path,
                DEFAULT_STALE_AGE,
                NOW.saturating_sub(Duration::from_secs(1))
            ),
            LoadOutcome::Stale
        );
        assert_eq!(load(&path, DEFAULT_STALE_AGE, NOW), LoadOutcome::Missing);
    }

    #[test]
    fn corrupt_files_are_quarantined_and_newer_schemas_preserved() {
        let dir = TempDir::new("persist-corrupt");
        let path = dir.path().join("b.json");
        let cases: [(&str, &str); 5] = [
            ("{not json", "corrupt json"),
            (
                r#"{"schema_version":0,"saved_at":"2026-05-19T10:11:12Z","sample_count":1,"fast_alpha":0.1,"floor_alpha":0.001,"fast_ema":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1},"hard_floor":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1}}"#,
                "unsupported schema_version",
            ),
            (
                r#"{"schema_version":1,"saved_at":"2026-05-19T10:11:12Z","sample_count":-1,"fast_alpha":0.1,"floor_alpha":0.001,"fast_ema":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1},"hard_floor":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1}}"#,
                "negative sample_count",
            ),
            (
                r#"{"schema_version":1,"saved_at":"2026-05-19T10:11:12Z","sample_count":1,"fast_alpha":0.1,"floor_alpha":0.001,"fast_ema":{"Throughput":-1,"Compute":1,"Memory":1,"CPU":1},"hard_floor":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1}}"#,
                "negative baseline",
            ),
            (
                r#"{"schema_version":1,"saved_at":"yesterday","sample_count":1,"fast_alpha":0.1,"floor_alpha":0.001,"fast_ema":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1},"hard_floor":{"Throughput":1,"Compute":1,"Memory":1,"CPU":1}}"#,
                "invalid saved_at",
            ),
        ];
        for (i, (body, why)) in cases.iter().enumerate() {
            fs::write(&path, body).unwrap();
            match load(&path, DEFAULT_STALE_AGE, NOW) {
                LoadOutcome::Corrupt { reason, moved_to } => {
                    assert!(reason.contains(why), "{reason} vs {why}");
                    let moved = moved_to.unwrap();
                    let expect = if i == 0 {
                        format!("b.json.corrupt-{}", timefmt::compact_stamp(NOW))
                    } else {
                        format!("b.json.corrupt-{}.{i}", timefmt::compact_stamp(NOW))
                    };
                    assert_eq!(moved.file_name().unwrap().to_string_lossy(), expect);
                    assert!(!path.exists());
                }
                other => panic!("case {i}: {other:?}"),
            }
        }
        fs::write(&path, br#"{"schema_version":2}"#).unwrap();
        assert_eq!(
            load(&path, DEFAULT_STALE_AGE, NOW),
            LoadOutcome::NewerSchema(2)
        );
        assert!(path.exists(), "a newer schema is preserved");
    }

    #[test]
    fn oversized_files_are_quarantined_unread() {
        let dir = TempDir::new("persist-big");
        let path = dir.path().join("b.json");
        fs::write(&path, vec![b' '; (MAX_FILE_SIZE + 1) as usize]).unwrap();
        assert!(matches!(
            load(&path, DEFAULT_STALE_AGE, NOW),
            LoadOutcome::Corrupt { .. }
        ));
        assert!(!path.exists());
    }
}
