//! Which processes one agent watches (`--pid`, `--cgroup`), so several agents can share a
//! host (one GPU running several "nodes", or one agent per Kubernetes pod). The filter runs
//! in the kernel (`traced()` in `bpf/common.h`, checked first in every entry program): the
//! agent fills `filter_pids` with the given PIDs and `filter_cgroups` with the id of each
//! given cgroup v2 directory and of every cgroup below it, refreshed on every discovery scan
//! so child cgroups created later (a pod's containers) are picked up. A process is watched
//! when it matches either list; with neither, every process is.
//!
//! Identity: when `--fleet-world-size` is not given (0), `RANK` (else `LOCAL_RANK`) and
//! `WORLD_SIZE` are read from a watched process's environment (`/proc/<pid>/environ`, as
//! torchrun sets them); see [`adopt_identity`].

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where cgroup v2 is mounted on a unified host; relative `--cgroup` paths are taken from
/// here, or from [`CGROUP_ROOT_HYBRID`] on a hybrid (v1 + v2) host.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";
pub const CGROUP_ROOT_HYBRID: &str = "/sys/fs/cgroup/unified";
/// Most cgroups put in the kernel filter (the map's size); beyond it they are not watched
/// and a warning is logged.
pub const MAX_FILTER_CGROUPS: usize = 16384;
/// Most PIDs (the map's size).
pub const MAX_FILTER_PIDS: usize = 1024;
/// `statfs` magic of cgroup v2.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Bits of the kernel's `filter_mode`.
pub const FILTER_PIDS: u32 = 1;
pub const FILTER_CGROUPS: u32 = 2;

/// The processes one agent watches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub pids: Vec<u32>,
    /// Resolved cgroup v2 directories (see [`resolve_cgroup`]).
    pub cgroups: Vec<PathBuf>,
}

impl Scope {
    /// The kernel's `filter_mode`: 0 watches every process.
    pub fn mode(&self) -> u32 {
        let mut m = 0;
        if !self.pids.is_empty() {
            m |= FILTER_PIDS;
        }
        if !self.cgroups.is_empty() {
            m |= FILTER_CGROUPS;
        }
        m
    }

    /// Every cgroup id the filter must hold now: each watched directory and all below it.
    pub fn cgroup_ids(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for c in &self.cgroups {
            collect_ids(c, &mut out, MAX_FILTER_CGROUPS + 1);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The PIDs watched now: the given ones and every process in the watched cgroups.
    pub fn current_pids(&self) -> Vec<u32> {
        let mut out = self.pids.clone();
        for c in &self.cgroups {
            collect_pids(c, &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The cgroup v2 mount: [`CGROUP_ROOT`], else [`CGROUP_ROOT_HYBRID`].
pub fn cgroup2_root() -> Option<PathBuf> {
    [CGROUP_ROOT, CGROUP_ROOT_HYBRID]
        .iter()
        .map(PathBuf::from)
        .find(|p| is_cgroup2(p))
}

/// A `--cgroup` argument as a cgroup v2 directory: an absolute path as given, a relative
/// one (as `/proc/<pid>/cgroup` prints it, leading `/` dropped) under [`cgroup2_root`].
/// Refused when it is not a directory on a cgroup v2 mount or has `..` components.
pub fn resolve_cgroup(arg: &Path) -> Result<PathBuf, String> {
    if arg
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!("{}: `..` is not allowed", arg.display()));
    }
    let p = if arg.is_absolute() {
        arg.to_path_buf()
    } else {
        cgroup2_root()
            .ok_or_else(|| format!("{}: no cgroup v2 mount found", arg.display()))?
            .join(arg)
    };
    let meta = std::fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    if !meta.is_dir() {
        return Err(format!("{}: not a directory", p.display()));
    }
    if !is_cgroup2(&p) {
        return Err(format!(
            "{}: not on a cgroup v2 file system (the filter uses cgroup v2 ids)",
            p.display()
        ));
    }
    Ok(p)
}

fn is_cgroup2(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain old data; all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statfs buffer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    rc == 0 && magic == CGROUP2_SUPER_MAGIC
}

/// The directory's id (its inode number, which is what `bpf_get_current_cgroup_id`
/// returns on cgroup v2) and its descendants', depth first, at most `cap`.
fn collect_ids(dir: &Path, out: &mut Vec<u64>, cap: usize) {
    if out.len() >= cap {
        return;
    }
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    out.push(meta.ino());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_ids(&e.path(), out, cap);
        }
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<u32>) {
    if out.len() >= MAX_FILTER_PIDS * 16 {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&e.path(), out);
        }
    }
}

/// `(rank, world_size)` from a process environment block (`NUL`-separated `KEY=VALUE`):
/// `RANK`, else `LOCAL_RANK`; `WORLD_SIZE`. Each is `None` when absent or not a number.
pub fn rank_from_environ(environ: &[u8]) -> (Option<u32>, Option<u32>) {
    let (mut rank, mut local, mut world) = (None, None, None);
    for kv in environ.split(|b| *b == 0) {
        let Ok(kv) = std::str::from_utf8(kv) else {
            continue;
        };
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let v = v.trim().parse::<u32>().ok();
        match k {
            "RANK" => rank = v,
            "LOCAL_RANK" => local = v,
            "WORLD_SIZE" => world = v,
            _ => {}
        }
    }
    (rank.or(local), world)
}

/// When `fleet.world_size` is 0 (not configured) and a scope is given, take the rank and
/// world size from the first watched process whose environment has both (torchrun's
/// `RANK`/`LOCAL_RANK` and `WORLD_SIZE`), if the rank is below the world size. Returns the
/// process it came from. Unscoped agents keep the configured identity: which process
/// speaks for the node is then not defined.
pub fn adopt_identity(cfg: &mut crate::config::AgentConfig) -> Option<u32> {
    if cfg.fleet.world_size != 0 || (cfg.probes.pids.is_empty() && cfg.probes.cgroups.is_empty()) {
        return None;
    }
    let scope = Scope {
        pids: cfg.probes.pids.clone(),
        cgroups: cfg
            .probes
            .cgroups
            .iter()
            .filter_map(|c| resolve_cgroup(c).ok())
            .collect(),
    };
    let pids = scope.current_pids();
    let proc_root = Path::new("/proc");
    let found = pids.iter().find_map(|pid| {
        let env = std::fs::read(proc_root.join(pid.to_string()).join("environ")).ok()?;
        match rank_from_environ(&env) {
            (Some(r), Some(w)) if r < w => Some((*pid, r, w)),
            _ => None,
        }
    });
    let (pid, rank, world) = found?;
    cfg.fleet.node_rank = rank;
    cfg.fleet.world_size = world;
    tracing::info!(
        pid,
        rank,
        world_size = world,
        "rank and world size from the watched process's environment"
    );
    Some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(Scope::default().mode(), 0);
        let s = Scope {
            pids: vec![1],
            cgroups: vec![],
        };
        assert_eq!(s.mode(), FILTER_PIDS);
        let s = Scope {
            pids: vec![1],
            cgroups: vec![PathBuf::from("/sys/fs/cgroup")],
        };
        assert_eq!(s.mode(), FILTER_PIDS | FILTER_CGROUPS);
    }

    #[test]
    fn ranks_from_torchrun_environment() {
        let env = b"PATH=/usr/bin\0LOCAL_RANK=3\0RANK=11\0WORLD_SIZE=16\0";
        assert_eq!(rank_from_environ(env), (Some(11), Some(16)));
        assert_eq!(
            rank_from_environ(b"LOCAL_RANK=2\0"),
            (Some(2), None),
            "LOCAL_RANK when RANK is absent"
        );
        assert_eq!(
            rank_from_environ(b"RANK=x\0WORLD_SIZE=\0\xff\xfe=1\0"),
            (None, None),
            "garbage is ignored"
        );
        assert_eq!(rank_from_environ(b""), (None, None));
    }

    #[test]
    fn identity_comes_from_the_watched_process_unless_configured() {
        use crate::config::AgentConfig;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("RANK", "2")
            .env("WORLD_SIZE", "4")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until the child has exec'd, its environment is still this process's.
        let environ = format!("/proc/{pid}/environ");
        for _ in 0..500 {
            if std::fs::read(&environ).is_ok_and(|e| rank_from_environ(&e).1 == Some(4)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut cfg = AgentConfig::default();
        cfg.probes.pids = vec![pid];
        assert_eq!(adopt_identity(&mut cfg), Some(pid));
        assert_eq!((cfg.fleet.node_rank, cfg.fleet.world_size), (2, 4));
        // A configured world size wins; no scope, no adoption.
        let mut set = AgentConfig::default();
        set.fleet.world_size = 8;
        set.fleet.node_rank = 5;
        set.probes.pids = vec![pid];
        assert_eq!(adopt_identity(&mut set), None);
        assert_eq!((set.fleet.node_rank, set.fleet.world_size), (5, 8));
        let mut unscoped = AgentConfig::default();
        assert_eq!(adopt_identity(&mut unscoped), None);
        assert_eq!(unscoped.fleet.world_size, 0);
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn cgroup_arguments_are_checked() {
        assert!(
            resolve_cgroup(Path::new("/sys/fs/cgroup/../../etc"))
                .unwrap_err()
                .contains("..")
        );
        let tmp = std::env::temp_dir();
        let e = resolve_cgroup(&tmp).unwrap_err();
        assert!(e.contains("cgroup v2"), "{e}");
        assert!(resolve_cgroup(Path::new("/nonexistent-ingero-cgroup")).is_err());
        // This machine's own cgroup, when it runs cgroup v2: resolved, and its id is the
        // first of the tree.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            let rel = rel.trim_start_matches('/');
            if let Ok(p) = resolve_cgroup(Path::new(rel)) {
                let s = Scope {
                    pids: vec![],
                    cgroups: vec![p.clone()],
                };
                let ids = s.cgroup_ids();
                assert!(ids.contains(&std::fs::metadata(&p).unwrap().ino()));
                assert!(
                    s.current_pids().contains(&std::process::id()),
                    "this process is in its own cgroup"
                );
            }
        }
    }
}
