//! Finding CUDA and NCCL libraries in running processes (spec 5.1): scan `/proc/*/maps`
//! for `libcudart.so*`, `libcuda.so*`, `libnccl.so*` and libtorch's bundled copies
//! (`libtorch_cuda.so*`, `libtorch_global_deps.so*`), keep those the path rules accept,
//! and identify each by device and inode so one file mapped by many processes (or seen
//! through different mount namespaces) is probed once.
//!
//! # Which paths are accepted, and why
//!
//! The agent runs as root and, for each accepted library, parses its ELF symbol tables and
//! attaches uprobes whose records feed the node's health score. A file anyone can write
//! to would let an unprivileged user make the agent parse a crafted (or enormous) ELF and
//! feed it invented launches, syncs or collectives for any process they can make map it.
//! So:
//!
//! 1. Never from the shared scratch places anyone can write to: `/tmp`, `/var/tmp`,
//!    `/dev/shm`, `/run/user` ([`DENIED_ROOTS`]), nor through a path with `..`.
//! 2. From the system locations ([`ALLOWED_ROOTS`], `/opt/python*`): only root (or a
//!    package manager) writes there; `/usr/local/cuda` is one of them.
//! 3. Anywhere else, including `/home` and any prefix a Python environment lives in, when
//!    the path has the shape of a real install ([`install_shape`]): `.../site-packages/`
//!    (or `dist-packages`) `torch/lib/` or `nvidia/<package>/lib/` (the PyPI CUDA, cuDNN
//!    and NCCL wheels), or `<prefix>/lib/` of a conda environment (`.../envs/<name>/lib/`,
//!    `.../{ana,mini}conda*/lib/`, `.../miniforge*/lib/`, `.../mambaforge*/lib/`).
//!
//! And whatever the rule, the file itself ([`file_trusted`]) must not be group- or
//! world-writable and must belong to root or to the user running a process that maps it
//! (whose own processes are the only ones a file of theirs can describe). `--probe-library-root`
//! is the opt-out: a directory given there is accepted as is, before every other rule
//! (the file check still applies).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Library name prefixes worth probing.
pub const LIBRARY_PREFIXES: [&str; 5] = [
    "libcudart.so",
    "libcuda.so",
    "libnccl.so",
    "libtorch_cuda.so",
    "libtorch_global_deps.so",
];

/// Directories libraries are attached from (spec 5.1).
pub const ALLOWED_ROOTS: [&str; 9] = [
    "/usr/lib/",
    "/usr/lib64/",
    "/lib/",
    "/lib64/",
    "/usr/local/",
    "/opt/nccl/",
    "/opt/cuda/",
    "/opt/conda/",
    "/opt/pytorch/",
];
/// `/opt/python*` is allowed too (any Python install prefix under /opt).
pub const ALLOWED_PREFIX_GLOB: &str = "/opt/python";
/// Never attached from (world-writable scratch space), whatever the shape of the path.
pub const DENIED_ROOTS: [&str; 4] = ["/tmp/", "/dev/shm/", "/var/tmp/", "/run/user/"];

/// A file identity: (device, inode) as `/proc/<pid>/maps` prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    pub dev: (u32, u32),
    pub inode: u64,
}

/// One mapping of a candidate library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibMapping {
    pub id: FileId,
    /// Path inside the process's mount namespace.
    pub path: String,
}

/// Whether a library file name is one the agent probes.
pub fn is_candidate(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Parse maps text into the candidate libraries it maps (each once).
pub fn parse_maps(text: &str) -> Vec<LibMapping> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        // address perms offset dev inode path
        let mut it = line.split_whitespace();
        let (Some(_addr), Some(_perms), Some(_off), Some(dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path: Vec<&str> = it.collect();
        if path.is_empty() {
            continue;
        }
        let path = path.join(" ");
        if path.ends_with(" (deleted)") || !path.starts_with('/') || !is_candidate(&path) {
            continue;
        }
        let Ok(inode) = inode.parse::<u64>() else {
            continue;
        };
        let Some((maj, min)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (u32::from_str_radix(maj, 16), u32::from_str_radix(min, 16))
        else {
            continue;
        };
        if inode == 0 {
            continue;
        }
        let id = FileId {
            dev: (maj, min),
            inode,
        };
        if seen.insert(id) {
            out.push(LibMapping { id, path });
        }
    }
    out
}

/// Whether a library path may be probed (the module's rules 1-3): under an extra root;
/// else not under a denied root and either under an allowed root or shaped like a Python
/// or conda install. Paths with `..` components are refused.
pub fn allowed(path: &str, extra_roots: &[PathBuf]) -> bool {
    if path.split('/').any(|c| c == "..") {
        return false;
    }
    let p = Path::new(path);
    if extra_roots.iter().any(|r| p.starts_with(r)) {
        return true;
    }
    if DENIED_ROOTS.iter().any(|d| path.starts_with(d)) {
        return false;
    }
    ALLOWED_ROOTS.iter().any(|r| path.starts_with(r))
        || path.starts_with(ALLOWED_PREFIX_GLOB)
        || install_shape(path)
}

/// Whether the directory of a library is that of a Python package or a conda environment:
/// `.../{site,dist}-packages/torch/lib/`, `.../{site,dist}-packages/nvidia/<pkg>/lib/`,
/// `.../envs/<name>/lib/`, `.../{anaconda,miniconda,miniforge,mambaforge}*/lib/`.
pub fn install_shape(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    // [.., dir components .., file]
    let Some((_, dirs)) = parts.split_last() else {
        return false;
    };
    let n = dirs.len();
    let at = |i: usize| dirs.get(i).copied().unwrap_or("");
    let packages = |c: &str| c == "site-packages" || c == "dist-packages";
    if n >= 3 && at(n - 1) == "lib" && at(n - 2) == "torch" && packages(at(n - 3)) {
        return true;
    }
    if n >= 4
        && at(n - 1) == "lib"
        && at(n - 3) == "nvidia"
        && packages(at(n - 4))
        && !at(n - 2).is_empty()
    {
        return true;
    }
    if n >= 3 && at(n - 1) == "lib" && at(n - 3) == "envs" && !at(n - 2).is_empty() {
        return true;
    }
    n >= 2
        && at(n - 1) == "lib"
        && ["anaconda", "miniconda", "miniforge", "mambaforge"]
            .iter()
            .any(|d| at(n - 2).starts_with(d))
}

/// Whether a library file may be trusted (see the module docs): not group- or
/// world-writable, owned by root or by `process_uid` (the user running a process that maps
/// it).
pub fn file_trusted(mode: u32, owner: u32, process_uid: Option<u32>) -> bool {
    mode & 0o022 == 0 && (owner == 0 || Some(owner) == process_uid)
}

/// The real user id of a process, from `/proc/<pid>/status`.
pub fn process_uid(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

/// Every candidate library in every process: file id -> (a pid mapping it, path, pids).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    pub libs: BTreeMap<FileId, (u32, String, BTreeSet<u32>)>,
}

/// Scan `/proc`.
pub fn scan_proc(proc_root: &Path) -> Scan {
    let mut scan = Scan::default();
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return scan;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // Unreadable maps (a process that just exited, or one we may not inspect) are skipped.
        let Ok(text) = std::fs::read_to_string(entry.path().join("maps")) else {
            continue;
        };
        for m in parse_maps(&text) {
            let e = scan
                .libs
                .entry(m.id)
                .or_insert_with(|| (pid, m.path.clone(), BTreeSet::new()));
            e.2.insert(pid);
        }
    }
    scan
}

/// The path to hand the kernel: the library as seen from the process's root, so libraries
/// inside containers resolve to the right inode.
pub fn host_path(proc_root: &Path, pid: u32, path: &str) -> PathBuf {
    proc_root
        .join(pid.to_string())
        .join("root")
        .join(path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
7f0000000000-7f0000100000 r--p 00000000 fd:01 5555 /usr/local/cuda/lib64/libcudart.so.12.4.127
7f0000100000-7f0000200000 r-xp 00100000 fd:01 5555 /usr/local/cuda/lib64/libcudart.so.12.4.127
7f0000300000-7f0000400000 r-xp 00000000 08:10 777 /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so
7f0000500000-7f0000600000 r-xp 00000000 fd:01 888 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14
7f0000700000-7f0000800000 r-xp 00000000 fd:01 999 /tmp/x/libnccl.so.2 (deleted)
7f0000900000-7f0000a00000 r-xp 00000000 fd:01 1000 /usr/lib/libc.so.6
7f0000b00000-7f0000c00000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
garbage line
";

    #[test]
    fn maps_yield_each_candidate_once() {
        let libs = parse_maps(MAPS);
        let paths: Vec<&str> = libs.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/local/cuda/lib64/libcudart.so.12.4.127",
                "/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14",
            ]
        );
        assert_eq!(
            libs[0].id,
            FileId {
                dev: (0xfd, 1),
                inode: 5555
            }
        );
        assert_eq!(libs[1].id.dev, (8, 16));
    }

    #[test]
    fn allow_list() {
        let extra = vec![PathBuf::from("/tmp/ingero-test")];
        assert!(allowed("/usr/lib/x86_64-linux-gnu/libcuda.so.1", &[]));
        assert!(allowed("/opt/python3.11/lib/libnccl.so.2", &[]));
        assert!(allowed(
            "/usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2",
            &[]
        ));
        assert!(!allowed("/tmp/libcudart.so.12", &[]));
        assert!(
            !allowed("/home/u/.venv/lib/libnccl.so.2", &[]),
            "not an install shape"
        );
        assert!(!allowed("/home/u/libcuda.so.1", &[]));
        assert!(
            !allowed("/srv/libnccl.so.2", &[]),
            "not under an allowed root"
        );
        assert!(!allowed("/usr/lib/../../tmp/libnccl.so.2", &[]));
        assert!(
            allowed("/tmp/ingero-test/libnccl.so.2", &extra),
            "extra roots win over the deny list"
        );
        assert!(
            !allowed("/tmp/ingero-test-other/libnccl.so.2", &extra),
            "component-wise prefix"
        );
    }

    #[test]
    fn real_installs_are_found_wherever_they_live() {
        for ok in [
            // A virtualenv in a home directory: PyTorch's and the CUDA/NCCL wheels' copies.
            "/home/u/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
            "/home/u/.venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12",
            "/home/u/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "/srv/train/venv/lib64/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13",
            "/usr/lib/python3/dist-packages/torch/lib/libcudart.so.12",
            // Conda environments.
            "/home/u/miniconda3/envs/train/lib/libnccl.so.2",
            "/home/u/miniconda3/lib/libcudart.so.12",
            "/data/anaconda3/lib/libcudart.so.11.0",
            "/home/u/miniforge3/envs/x/lib/libcudart.so.12",
            "/opt/conda/envs/torch/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
            // System installs.
            "/usr/local/cuda/lib64/libcudart.so.12",
            "/usr/local/cuda-12.4/targets/x86_64-linux/lib/libcudart.so.12",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
        ] {
            assert!(allowed(ok, &[]), "{ok}");
        }
        for no in [
            // Scratch space stays refused, whatever the shape.
            "/tmp/x/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "/dev/shm/envs/a/lib/libcudart.so.12",
            "/var/tmp/site-packages/torch/lib/libtorch_cuda.so",
            "/run/user/1000/miniconda3/lib/libcudart.so.12",
            // Not an install shape.
            "/home/u/site-packages/libnccl.so.2",
            "/home/u/site-packages/nvidia/lib/libnccl.so.2",
            "/home/u/torch/lib/libtorch_cuda.so",
            "/home/u/envs/lib/libcudart.so.12",
            "/home/u/site-packages/torch/lib/../../../../tmp/libcudart.so.12",
        ] {
            assert!(!allowed(no, &[]), "{no}");
        }
    }

    #[test]
    fn files_others_can_write_are_not_trusted() {
        assert!(file_trusted(0o100755, 0, Some(1000)), "root's");
        assert!(
            file_trusted(0o100644, 1000, Some(1000)),
            "the process user's own"
        );
        assert!(!file_trusted(0o100644, 1001, Some(1000)), "another user's");
        assert!(!file_trusted(0o100644, 1001, None));
        assert!(!file_trusted(0o100666, 0, Some(0)), "world-writable");
        assert!(!file_trusted(0o100775, 1000, Some(1000)), "group-writable");
        let me = process_uid(Path::new("/proc"), std::process::id());
        let euid = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Uid:").map(str::to_string))
            .unwrap();
        assert_eq!(
            me.map(|u| u.to_string()),
            euid.split_whitespace().next().map(str::to_string)
        );
    }

    #[test]
    fn candidates_and_host_paths() {
        assert!(is_candidate("/x/libnccl.so.2.21.5"));
        assert!(is_candidate("/x/libcuda.so"));
        assert!(!is_candidate("/x/libcudnn.so.9"));
        assert_eq!(
            host_path(Path::new("/proc"), 42, "/usr/lib/libcuda.so.1"),
            PathBuf::from("/proc/42/root/usr/lib/libcuda.so.1")
        );
    }

    #[test]
    fn scanning_this_machine_does_not_fail() {
        // No CUDA here: an empty (or small) result, never an error.
        let s = scan_proc(Path::new("/proc"));
        assert!(
            s.libs
                .values()
                .all(|(_, p, pids)| is_candidate(p) && !pids.is_empty())
        );
    }
}
