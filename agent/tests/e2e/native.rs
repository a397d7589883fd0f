//! Building and running the fake CUDA/NCCL libraries and the C workload.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "ingero-agent-it-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child's stderr read on a thread: every line kept (so the child never blocks on a full
/// pipe, and a failing test can show them).
#[derive(Debug, Clone)]
pub struct StderrLog(std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>);

impl StderrLog {
    /// Take `child`'s stderr (it must be piped) and read it until it closes.
    pub fn read(child: &mut Child) -> StderrLog {
        let err = child.stderr.take().expect("stderr piped");
        let log = StderrLog(Default::default());
        let shared = log.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                shared.0.lock().unwrap().push(line);
                shared.1.notify_all();
            }
        });
        log
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.0.lock().unwrap().clone()
    }

    /// The first line that `want` accepts, waiting at most `wait` for it.
    pub fn wait_line(&self, want: impl Fn(&str) -> bool, wait: Duration) -> Option<String> {
        let (lines, ready) = &*self.0;
        let deadline = Instant::now() + wait;
        let mut g = lines.lock().unwrap();
        loop {
            if let Some(l) = g.iter().find(|l| want(l)) {
                return Some(l.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            g = ready.wait_timeout(g, left).unwrap().0;
        }
    }

    /// The `listen=` address of the first start-up line that contains `what` (any, when
    /// empty), waiting at most `wait` for it.
    pub fn listen(&self, what: &str, wait: Duration) -> Option<String> {
        let l = self.wait_line(|l| l.contains(what) && l.contains("listen="), wait)?;
        let i = l.find("listen=")?;
        l[i + 7..].split_whitespace().next().map(str::to_string)
    }
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(str::to_string)
        })
        .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Paths of the built fakes.
#[derive(Debug)]
pub struct Fakes {
    pub cudart: PathBuf,
    pub cuda: PathBuf,
    /// A static-runtime library (like cuBLAS) that launches through the driver directly.
    pub cublas: PathBuf,
    pub nccl: PathBuf,
    pub workload: PathBuf,
}

/// Compile the fake libraries (real SONAMEs) and the workload into `dir`.
/// Compile `tests/c/<src>` into the shared library `out` with SONAME `soname`; `extra`:
/// more arguments (defines, libraries to link, an rpath).
fn shared_lib(out: &Path, src: &str, soname: &str, extra: &[&str]) {
    let soname = format!("-Wl,-soname,{soname}");
    let src = c_dir().join(src);
    let mut args = vec![
        "-shared",
        "-fPIC",
        "-O1",
        "-Wall",
        "-Werror",
        &soname,
        "-o",
        out.to_str().unwrap(),
        src.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    cc(&args);
}

pub fn build_fakes(dir: &Path) -> Fakes {
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let lib = |src: &str, name: &str, deps: &[&Path]| {
        let out = dir.join(name);
        let mut extra: Vec<&str> = deps.iter().map(|d| d.to_str().unwrap()).collect();
        extra.push(&rpath);
        shared_lib(&out, src, name, &extra);
        out
    };
    let cuda = lib("fake_cuda.c", "libcuda.so.1", &[]);
    // The runtime launches through the driver; the "static runtime" library (cuBLAS)
    // calls the driver directly.
    let cudart = lib("fake_cudart.c", "libcudart.so.12", &[&cuda]);
    let cublas = lib("fake_cublas.c", "libcublasLt.so.12", &[&cuda]);
    let nccl = lib("fake_nccl.c", "libnccl.so.2", &[]);
    let workload = dir.join("workload");
    link_workload(&workload, &[&cudart, &cuda, &cublas, &nccl], &rpath);
    Fakes {
        cudart,
        cuda,
        cublas,
        nccl,
        workload,
    }
}

/// Compile the fake NVML (`tests/c/fake_nvml.c`) as `dir/nvml/libnvidia-ml.so.1` and return
/// that directory: put it on `LD_LIBRARY_PATH` and the agent's `dlopen` finds it.
pub fn build_fake_nvml(dir: &Path) -> PathBuf {
    let out_dir = dir.join("nvml");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("libnvidia-ml.so.1");
    shared_lib(&out, "fake_nvml.c", "libnvidia-ml.so.1", &[]);
    out_dir
}

/// A runtime whose `cudaLaunchKernel` reaches the driver through a private entry (not the
/// exported `cuLaunchKernel`), and a workload linked to it.
#[derive(Debug)]
pub struct PrivateRuntime {
    pub cudart: PathBuf,
    pub workload: PathBuf,
}

/// Build the private-entry runtime (same soname, in `dir/private`) and a workload that
/// loads it instead of `fakes.cudart`; the other fakes are shared.
pub fn build_private_runtime(dir: &Path, fakes: &Fakes) -> PrivateRuntime {
    let sub = dir.join("private");
    std::fs::create_dir_all(&sub).unwrap();
    let cudart = sub.join("libcudart.so.12");
    // The private directory first: the workload's libcudart.so.12 is the variant.
    let rpath = format!("-Wl,-rpath,{}:{}", sub.display(), dir.display());
    shared_lib(
        &cudart,
        "fake_cudart.c",
        "libcudart.so.12",
        &[
            "-DPRIVATE_DRIVER_ENTRY",
            fakes.cuda.to_str().unwrap(),
            &rpath,
        ],
    );
    let workload = sub.join("workload");
    link_workload(
        &workload,
        &[&cudart, &fakes.cuda, &fakes.cublas, &fakes.nccl],
        &rpath,
    );
    PrivateRuntime { cudart, workload }
}

/// Link `workload.c` against `libs` (in that order) with `rpath`.
fn link_workload(out: &Path, libs: &[&Path], rpath: &str) {
    let src = c_dir().join("workload.c");
    let mut args = vec![
        "-O1",
        "-Wall",
        "-Werror",
        "-o",
        out.to_str().unwrap(),
        src.to_str().unwrap(),
    ];
    args.extend(libs.iter().map(|l| l.to_str().unwrap()));
    args.push(rpath);
    cc(&args);
}

/// A running workload process.
pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Workload {
    pub fn spawn(bin: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn workload");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut w = Workload {
            child,
            stdin,
            stdout,
        };
        w.expect_line("ready");
        w
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), want, "workload said {line:?}");
    }

    /// Let it run its calls and wait until it has made them all.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
        self.expect_line("done");
    }

    /// Send one command line (`workload launches`: how many launches) and wait for "done".
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        self.expect_line("done");
    }

    /// Let it exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// The CPU the `why` and `why_layers` tests pin their training loops (and disturbances) to:
/// 1 where there are two or more, else 0.
pub fn pinned_cpu() -> &'static str {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        "1"
    } else {
        "0"
    }
}

/// The `why` and `why_layers` tests pin their loops to the same CPU and read the scheduler's
/// view of them: in one test process they run one at a time, whatever `--test-threads`.
pub fn pinned_cpu_lock() -> std::sync::MutexGuard<'static, ()> {
    static PINNED_CPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    PINNED_CPU
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Compile the fake training loop (`tests/c/why_workload.c`) into `dir`, linked against the
/// fake runtime and driver there.
pub fn build_why_workload(dir: &Path, fakes: &Fakes) -> PathBuf {
    let out = dir.join("why_workload");
    let o = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&out)
        .arg(c_dir().join("why_workload.c"))
        .arg(&fakes.cudart)
        .arg(&fakes.cuda)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Run `ingero-agent query --json` on the store `db` and parse the rows.
pub fn query(db: &Path, sql: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ingero-agent"))
        .args(["query", "--json", "--db"])
        .arg(db)
        .arg(sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
