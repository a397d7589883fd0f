//! Root-only end-to-end tests of the eBPF probes: small C libraries exporting the CUDA and
//! NCCL symbols, a workload that calls them a known number of times with known arguments
//! and durations, and assertions that the agent saw exactly that. Without root they skip
//! with a message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::native;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::Duration;

use component::Timestamp;
use ingero_agent::config::RuntimeLaunchProbes;
use ingero_agent::events::{CudaEvent, NcclEvent, cuda_op, fold_unique_id, source};
use ingero_agent::nccl::{NcclOutbox, op};
use ingero_agent::probes::runtime_launch::{self, State};
use ingero_agent::probes::scope::{self, Scope};
use ingero_agent::probes::{self, ProbeEvent, ProbeHandle, ProbeOptions};
use ingero_agent::signals::SignalSource;
use ingero_agent::signals::window::{EbpfSource, SharedWindow};
use native::{Fakes, TempDir, Workload, build_fakes, build_private_runtime, is_root, wait_until};

const MS: u64 = 1_000_000;
/// Generous ceiling on a probed call's duration on a loaded machine.
const SLACK: u64 = 500 * MS;

fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    eprintln!("SKIP {test}: eBPF uprobes need root (CI runs these tests as root)");
    true
}

struct Probed {
    handle: ProbeHandle,
    tap: Receiver<ProbeEvent>,
    shared: Arc<SharedWindow>,
    outbox: NcclOutbox,
}

fn start_probes(dir: &TempDir, cuda: bool, nccl: bool) -> Probed {
    start_scoped(dir, cuda, nccl, Scope::default())
}

fn start_scoped(dir: &TempDir, cuda: bool, nccl: bool, scope: Scope) -> Probed {
    start_with(dir, cuda, nccl, scope, Duration::from_millis(200))
}

fn start_with(
    dir: &TempDir,
    cuda: bool,
    nccl: bool,
    scope: Scope,
    discovery_interval: Duration,
) -> Probed {
    start_opts(
        dir,
        cuda,
        nccl,
        scope,
        discovery_interval,
        runtime_launch::DEFAULT_THRESHOLD,
    )
}

/// CUDA probes only, deciding about the runtime's launch probes after `threshold` runtime
/// launches.
fn start_calibrating(dir: &TempDir, threshold: u64) -> Probed {
    start_opts(
        dir,
        true,
        false,
        Scope::default(),
        Duration::from_millis(200),
        threshold,
    )
}

fn start_opts(
    dir: &TempDir,
    cuda: bool,
    nccl: bool,
    scope: Scope,
    discovery_interval: Duration,
    launch_calibration: u64,
) -> Probed {
    let (tx, rx) = sync_channel(100_000);
    let opts = ProbeOptions {
        cuda,
        nccl,
        discovery_interval,
        drain_interval: Duration::from_millis(20),
        extra_roots: vec![dir.path().to_path_buf()],
        proc_root: PathBuf::from("/proc"),
        scope,
        tap: Some(tx),
        runtime_launch_probes: RuntimeLaunchProbes::Auto,
        launch_calibration,
        recorder: None,
    };
    let shared = Arc::new(SharedWindow::default());
    let (outbox, sender) = NcclOutbox::new(4096);
    let handle = probes::spawn(opts, shared.clone(), Some(sender)).expect("load and start probes");
    Probed {
        handle,
        tap: rx,
        shared,
        outbox,
    }
}

/// A signal source whose window starts before the workload's first launch. A window's
/// first drain only marks its start (its launches happened over a span it does not know),
/// so the source reads one drain before the work begins: one made after the work would
/// miss every launch that landed in its first drain.
fn window_before_work(p: &Probed) -> EbpfSource {
    assert!(
        wait_until(Duration::from_secs(15), || p.shared.drains.lock().pending()
            > 0),
        "the probes never drained"
    );
    let mut src = EbpfSource::new(p.shared.clone(), Duration::from_secs(60), 1, None);
    src.collect(Timestamp::now()).unwrap();
    src
}

fn wait_attached(p: &Probed, fakes: &Fakes, want: &[&PathBuf]) {
    let ok = wait_until(Duration::from_secs(15), || {
        let st = p.handle.status();
        want.iter()
            .all(|w| st.attached.iter().any(|a| a.path == w.to_str().unwrap()))
    });
    assert!(
        ok,
        "libraries not attached: {:?} (fakes {fakes:?})",
        p.handle.status()
    );
}

/// Collect tap events until `done` says enough (or 15 s pass).
fn collect(p: &Probed, mut done: impl FnMut(&[ProbeEvent]) -> bool) -> Vec<ProbeEvent> {
    let mut got = Vec::new();
    wait_until(Duration::from_secs(15), || {
        while let Ok(e) = p.tap.try_recv() {
            got.push(e);
        }
        done(&got)
    });
    got
}

fn cuda_of(events: &[ProbeEvent], pid: u32) -> Vec<CudaEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            ProbeEvent::Cuda(c) if c.pid == pid => Some(*c),
            _ => None,
        })
        .collect()
}

fn nccl_of(events: &[ProbeEvent], pid: u32) -> Vec<NcclEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            ProbeEvent::Nccl(c) if c.pid == pid => Some(*c),
            _ => None,
        })
        .collect()
}

fn in_bounds(d: u64, min_ms: u64) {
    assert!(
        d >= min_ms * MS && d < min_ms * MS + SLACK,
        "duration {d} ns not in [{min_ms} ms, +{SLACK} ns)"
    );
}

#[test]
fn cuda_probes_see_every_call_with_its_arguments() {
    if skip_unless_root("cuda_probes_see_every_call_with_its_arguments") {
        return;
    }
    let dir = TempDir::new("cuda");
    let fakes = build_fakes(dir.path());
    let mut w = Workload::spawn(&fakes.workload, &["cuda"]);
    let p = start_probes(&dir, true, false);
    wait_attached(&p, &fakes, &[&fakes.cudart, &fakes.cuda]);
    let mut src = window_before_work(&p);
    w.go();
    let pid = w.pid();
    // Records: 3+3+5+4+6+2 runtime calls, 2+3 driver calls (launches are counted in the
    // kernel, not recorded).
    let events = collect(&p, |e| cuda_of(e, pid).len() >= 28);
    let ev = cuda_of(&events, pid);
    let mut counts: BTreeMap<(u8, u8), usize> = BTreeMap::new();
    for e in &ev {
        *counts.entry((e.source, e.op)).or_default() += 1;
    }
    let rt = source::CUDA_RUNTIME;
    let drv = source::CUDA_DRIVER;
    assert_eq!(
        counts,
        BTreeMap::from([
            ((rt, cuda_op::MALLOC), 3),
            ((rt, cuda_op::FREE), 3),
            ((rt, cuda_op::MEMCPY), 5),
            ((rt, cuda_op::MEMCPY_ASYNC), 4),
            ((rt, cuda_op::STREAM_SYNC), 6),
            ((rt, cuda_op::DEVICE_SYNC), 2),
            ((drv, cuda_op::MALLOC), 2),
            ((drv, cuda_op::MEMCPY), 3),
        ]),
        "exactly the calls the workload made"
    );
    for e in &ev {
        assert_eq!(e.ret, 0);
        assert_eq!(e.comm_str(), "workload");
        match (e.source, e.op) {
            (s, cuda_op::MALLOC) if s == rt => {
                assert_eq!(e.args[0], 1 << 20);
                assert_eq!(
                    e.args[1],
                    0x7f00_0000_0000 + (1 << 20),
                    "pointer written by the call"
                );
            }
            (_, cuda_op::MALLOC) => assert_eq!(e.args, [4096, 0x6000_0000_0000 + 4096, 0, 0]),
            (_, cuda_op::FREE) => assert_eq!(e.args[0], 0x7f00_0000_0000 + (1 << 20)),
            (s, cuda_op::MEMCPY) if s == rt => {
                assert_eq!(&e.args[..2], &[4096, 1]);
                in_bounds(e.duration_ns, 1);
            }
            (_, cuda_op::MEMCPY) => {
                assert_eq!(&e.args[..2], &[256, 1], "cuMemcpyHtoD: host to device");
                assert!(e.duration_ns >= MS / 2 && e.duration_ns < MS / 2 + SLACK);
            }
            (_, cuda_op::MEMCPY_ASYNC) => {
                assert_eq!(&e.args[..2], &[8192, 2]);
                assert_eq!(e.stream, 0xabc0);
            }
            (_, cuda_op::STREAM_SYNC) => {
                assert_eq!(e.stream, 0xabc0);
                in_bounds(e.duration_ns, 2);
            }
            (_, cuda_op::DEVICE_SYNC) => in_bounds(e.duration_ns, 3),
            other => panic!("unexpected {other:?}"),
        }
    }

    // 50 runtime launches (each reaching the driver: the same launch) and 7 direct driver
    // launches: 57 launches, each counted once.
    assert!(
        wait_until(Duration::from_secs(10), || p.handle.status().launches
            == [50, 0, 7, 0, 50]),
        "launch counters: {:?}",
        p.handle.status().launches
    );
    let sample = src.collect(Timestamp::now()).unwrap();
    assert_eq!(sample.kernel_launches, 57);
    let cg: u64 = sample.per_cgroup.iter().map(|c| c.kernel_launches).sum();
    assert_eq!(cg, 57);
    let h2d: u64 = sample.per_cgroup.iter().map(|c| c.memcpy_bytes[1]).sum();
    assert_eq!(
        h2d,
        5 * 4096,
        "runtime copies; the driver copies of a runtime process are not double counted"
    );
    assert!(sample.raw.compute > 0.0);

    w.finish();
    let st = p.handle.status();
    assert_eq!(st.kernel_drops, [0, 0, 0, 0]);
    assert_eq!(st.decode_errors, 0);
    p.handle.stop();
}

#[test]
fn probes_stay_attached_while_the_library_exists_so_a_new_process_counts_from_its_first_call() {
    if skip_unless_root(
        "probes_stay_attached_while_the_library_exists_so_a_new_process_counts_from_its_first_call",
    ) {
        return;
    }
    let dir = TempDir::new("stay");
    let fakes = build_fakes(dir.path());
    let mut first = Workload::spawn(&fakes.workload, &["layers", "runtime"]);
    // One scan at start, then only the ones this test asks for.
    let p = start_with(
        &dir,
        true,
        false,
        Scope::default(),
        Duration::from_secs(3600),
    );
    wait_attached(&p, &fakes, &[&fakes.cudart, &fakes.cuda]);
    first.go();
    let first_pid = first.pid();
    wait_until(Duration::from_secs(15), || {
        launch_counts(&p).get(&first_pid) == Some(&[40, 0, 0, 0, 40])
    });
    first.finish();
    // A scan with no process mapping the libraries: they stay attached.
    let scans = p.handle.status().scans;
    p.handle.rescan();
    assert!(wait_until(Duration::from_secs(10), || p
        .handle
        .status()
        .scans
        > scans));
    let st = p.handle.status();
    let paths: Vec<&str> = st.attached.iter().map(|a| a.path.as_str()).collect();
    assert!(
        paths.contains(&fakes.cudart.to_str().unwrap())
            && paths.contains(&fakes.cuda.to_str().unwrap()),
        "still attached with no process: {st:?}"
    );
    assert!(st.attached.iter().all(|a| a.pids.is_empty()));
    // A new process, with no scan in between: every launch from its first is counted.
    let scans = st.scans;
    let mut second = Workload::spawn(&fakes.workload, &["layers", "mixed"]);
    second.go();
    let second_pid = second.pid();
    let want = [20, 10, 30, 0, 30];
    wait_until(Duration::from_secs(15), || {
        launch_counts(&p).get(&second_pid) == Some(&want)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(launch_counts(&p).get(&second_pid), Some(&want));
    assert_eq!(
        p.handle.status().scans,
        scans,
        "no discovery scan helped the new process"
    );
    second.finish();
    // Once the files are gone, the next scan detaches.
    std::fs::remove_file(&fakes.cudart).unwrap();
    std::fs::remove_file(&fakes.cuda).unwrap();
    p.handle.rescan();
    let detached = wait_until(Duration::from_secs(10), || {
        p.handle.status().attached.is_empty()
    });
    assert!(
        detached,
        "probes detached once the files are removed: {:?}",
        p.handle.status()
    );
    p.handle.stop();
}

/// `workload layers <mix>` and the counters it must produce: runtime, runtime graph,
/// driver, driver graph, nested (the driver launches made by runtime launches).
const LAYER_MIXES: [(&str, [u64; 5]); 7] = [
    // PyTorch's own kernels: cudaLaunchKernel -> cuLaunchKernel, one launch each.
    ("runtime", [40, 0, 0, 0, 40]),
    // cuBLAS / cuDNN: their static runtime calls cuLaunchKernel directly.
    ("static", [0, 0, 20, 0, 0]),
    // Triton: cuLaunchKernel from the application.
    ("triton", [0, 0, 7, 0, 0]),
    // cudaGraphLaunch -> cuGraphLaunch (a tail call), and cuGraphLaunch alone.
    ("graph", [0, 5, 0, 4, 5]),
    // cudaLaunchKernelExC -> cuLaunchKernelEx (a tail call), and a static runtime's
    // cuLaunchKernelEx.
    ("ex", [10, 0, 6, 0, 10]),
    // A runtime launch that fails before reaching the driver, then a cuBLAS launch.
    ("failed", [3, 0, 3, 0, 0]),
    // All of them interleaved on one thread.
    ("mixed", [20, 10, 30, 0, 30]),
];

#[test]
fn launches_are_counted_once_whichever_layer_launched_them() {
    if skip_unless_root("launches_are_counted_once_whichever_layer_launched_them") {
        return;
    }
    let dir = TempDir::new("layers");
    let fakes = build_fakes(dir.path());
    let mut ws: Vec<(&str, [u64; 5], Workload)> = LAYER_MIXES
        .iter()
        .map(|(mix, want)| {
            (
                *mix,
                *want,
                Workload::spawn(&fakes.workload, &["layers", mix]),
            )
        })
        .collect();
    let p = start_probes(&dir, true, false);
    wait_attached(&p, &fakes, &[&fakes.cudart, &fakes.cuda]);
    let mut src = window_before_work(&p);
    for (_, _, w) in &mut ws {
        w.go();
    }
    let got = |pid: u32| {
        p.shared
            .acc
            .lock()
            .per_pid
            .get(&pid)
            .map(|a| a.launch_counts)
            .unwrap_or_default()
    };
    let all_in = wait_until(Duration::from_secs(15), || {
        ws.iter().all(|(_, want, w)| got(w.pid()) == *want)
    });
    // A few more drains: a count that keeps growing (a double count arriving late) fails.
    std::thread::sleep(Duration::from_millis(300));
    for (mix, want, w) in &ws {
        assert_eq!(
            got(w.pid()),
            *want,
            "mix {mix}: [runtime, runtime graph, driver, driver graph, nested] (all in: {all_in})"
        );
    }
    let work: u64 = LAYER_MIXES
        .iter()
        .map(|(_, n)| n[..4].iter().sum::<u64>())
        .sum();
    let sample = src.collect(Timestamp::now()).unwrap();
    assert_eq!(
        sample.kernel_launches,
        i64::try_from(work).unwrap(),
        "the window counts every launch once"
    );
    let st = p.handle.status();
    assert_eq!(st.kernel_drops, [0, 0, 0, 0]);
    assert_eq!(st.cuda_events, 0, "launches take no ring-buffer space");
    for (_, _, w) in ws {
        w.finish();
    }
    p.handle.stop();
}

/// Each process's launch counters as the window holds them.
fn launch_counts(p: &Probed) -> BTreeMap<u32, [u64; 5]> {
    p.shared
        .acc
        .lock()
        .per_pid
        .iter()
        .map(|(pid, a)| (*pid, a.launch_counts))
        .collect()
}

fn runtime_launch_status(p: &Probed) -> runtime_launch::Status {
    p.handle.status().runtime_launch
}

/// The symbols attached in the library at `path`.
fn symbols_of(p: &Probed, path: &std::path::Path) -> Vec<&'static str> {
    p.handle
        .status()
        .attached
        .iter()
        .find(|a| a.path == path.to_str().unwrap())
        .map(|a| a.symbols.clone())
        .unwrap_or_default()
}

/// Wait until the process's counters are `want`, then a few more drains (a count still
/// growing fails), and check them.
fn expect_counts(p: &Probed, pid: u32, want: [u64; 5], what: &str) {
    wait_until(Duration::from_secs(15), || {
        launch_counts(p).get(&pid) == Some(&want)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        launch_counts(p).get(&pid),
        Some(&want),
        "{what}: [runtime, runtime graph, driver, driver graph, nested]"
    );
}

#[test]
fn runtime_launches_move_to_the_driver_probe_after_calibration_each_counted_once() {
    if skip_unless_root(
        "runtime_launches_move_to_the_driver_probe_after_calibration_each_counted_once",
    ) {
        return;
    }
    let dir = TempDir::new("driver-only");
    let fakes = build_fakes(dir.path());
    let mut w = Workload::spawn(&fakes.workload, &["launches"]);
    let pid = w.pid();
    let p = start_calibrating(&dir, 1000);
    wait_attached(&p, &fakes, &[&fakes.cudart, &fakes.cuda]);
    let mut src = window_before_work(&p);
    assert_eq!(runtime_launch_status(&p).state, State::Calibrating);

    // Below the threshold: both layers count, still calibrating.
    w.send("600");
    expect_counts(&p, pid, [600, 0, 0, 0, 600], "calibrating");
    let st = runtime_launch_status(&p);
    assert_eq!(
        (st.state, st.runtime, st.nested),
        (State::Calibrating, 600, 600)
    );

    // Past the threshold: every runtime launch reached the exported cuLaunchKernel, so the
    // runtime's launch probes go (the verdict may land in the middle of this batch).
    w.send("3000");
    assert!(
        wait_until(Duration::from_secs(15), || runtime_launch_status(&p).state
            == State::Detached),
        "not detached: {:?}",
        p.handle.status()
    );
    // The drain that decided may have read a launch between its runtime and driver probes:
    // one launch in flight on the workload's one thread.
    let st = runtime_launch_status(&p);
    assert!(
        st.runtime >= 1000 && st.runtime.abs_diff(st.nested) <= 1,
        "{st:?}"
    );
    let syms = symbols_of(&p, &fakes.cudart);
    assert!(
        !syms.contains(&"cudaLaunchKernel") && !syms.contains(&"cudaGraphLaunch"),
        "runtime launch probes gone: {syms:?}"
    );
    assert!(
        syms.contains(&"cudaMalloc") && syms.contains(&"cudaStreamSynchronize"),
        "the other runtime probes stay: {syms:?}"
    );
    // Every launch so far counted once across the switch: runtime (with its nested driver
    // launch) before it, driver after it.
    wait_until(Duration::from_secs(15), || {
        launch_counts(&p)
            .get(&pid)
            .is_some_and(|n| n[..4].iter().sum::<u64>() == 3600)
    });
    std::thread::sleep(Duration::from_millis(300));
    let before = launch_counts(&p)[&pid];
    assert_eq!(before[0] + before[2], 3600, "{before:?}");
    assert_eq!((before[1], before[3], before[4]), (0, 0, before[0]));

    // After the switch: K launches, K driver launches, no runtime, nothing nested.
    w.send("700");
    let after = [before[0], 0, before[2] + 700, 0, before[4]];
    expect_counts(&p, pid, after, "after the switch");

    // A new runtime library (one that reaches the driver privately) calibrates again; its
    // launches keep its probes, and the switched library stays switched.
    let private = build_private_runtime(dir.path(), &fakes);
    let mut pw = Workload::spawn(&private.workload, &["launches"]);
    let ppid = pw.pid();
    wait_attached(&p, &fakes, &[&private.cudart]);
    let st = runtime_launch_status(&p);
    assert_eq!(
        (st.state, st.runtime, st.nested),
        (State::Calibrating, 0, 0),
        "calibrating again"
    );
    pw.send("1500");
    assert!(
        wait_until(Duration::from_secs(15), || runtime_launch_status(&p).state
            == State::Attached),
        "private entry: runtime launch probes kept: {:?}",
        p.handle.status()
    );
    let st = runtime_launch_status(&p);
    assert!(st.runtime >= 1000 && st.nested == 0, "{st:?}");
    expect_counts(&p, ppid, [1500, 0, 0, 0, 0], "private runtime");
    assert!(symbols_of(&p, &private.cudart).contains(&"cudaLaunchKernel"));
    w.send("500");
    let after = [after[0], 0, after[2] + 500, 0, after[4]];
    expect_counts(&p, pid, after, "the switched library stays switched");

    let sample = src.collect(Timestamp::now()).unwrap();
    assert_eq!(
        sample.kernel_launches,
        3600 + 700 + 1500 + 500,
        "the window counts every launch once"
    );
    let st = p.handle.status();
    assert_eq!(
        st.launches[..4].iter().sum::<u64>(),
        3600 + 700 + 1500 + 500
    );
    assert_eq!(st.kernel_drops, [0, 0, 0, 0]);
    w.finish();
    pw.finish();
    p.handle.stop();
}

#[test]
fn a_runtime_reaching_the_driver_privately_keeps_its_launch_probes() {
    if skip_unless_root("a_runtime_reaching_the_driver_privately_keeps_its_launch_probes") {
        return;
    }
    let dir = TempDir::new("private-entry");
    let fakes = build_fakes(dir.path());
    let private = build_private_runtime(dir.path(), &fakes);
    let mut w = Workload::spawn(&private.workload, &["launches"]);
    let pid = w.pid();
    let p = start_calibrating(&dir, 1000);
    wait_attached(&p, &fakes, &[&private.cudart, &fakes.cuda]);
    let mut src = window_before_work(&p);
    w.send("1500");
    assert!(
        wait_until(Duration::from_secs(15), || runtime_launch_status(&p).state
            != State::Calibrating),
        "no verdict: {:?}",
        p.handle.status()
    );
    let st = runtime_launch_status(&p);
    assert_eq!(st.state, State::Attached, "{st:?}");
    assert!(st.runtime >= 1000 && st.nested == 0, "{st:?}");
    expect_counts(&p, pid, [1500, 0, 0, 0, 0], "calibration");
    w.send("700");
    expect_counts(&p, pid, [2200, 0, 0, 0, 0], "after the verdict");
    assert_eq!(runtime_launch_status(&p).state, State::Attached);
    assert!(symbols_of(&p, &private.cudart).contains(&"cudaLaunchKernel"));
    let sample = src.collect(Timestamp::now()).unwrap();
    assert_eq!(
        sample.kernel_launches, 2200,
        "the window counts every launch once"
    );
    assert_eq!(p.handle.status().kernel_drops, [0, 0, 0, 0]);
    w.finish();
    p.handle.stop();
}

#[test]
fn two_agents_scoped_by_pid_each_count_only_their_own_process() {
    if skip_unless_root("two_agents_scoped_by_pid_each_count_only_their_own_process") {
        return;
    }
    let dir = TempDir::new("scope-pid");
    let fakes = build_fakes(dir.path());
    let mut a = Workload::spawn(&fakes.workload, &["layers", "runtime"]);
    let mut b = Workload::spawn(&fakes.workload, &["layers", "static"]);
    let scoped = |pid: u32| Scope {
        pids: vec![pid],
        cgroups: vec![],
    };
    let pa = start_scoped(&dir, true, false, scoped(a.pid()));
    let pb = start_scoped(&dir, true, false, scoped(b.pid()));
    wait_attached(&pa, &fakes, &[&fakes.cudart, &fakes.cuda]);
    wait_attached(&pb, &fakes, &[&fakes.cudart, &fakes.cuda]);
    a.go();
    b.go();
    let want_a = BTreeMap::from([(a.pid(), [40, 0, 0, 0, 40])]);
    let want_b = BTreeMap::from([(b.pid(), [0, 0, 20, 0, 0])]);
    wait_until(Duration::from_secs(15), || {
        launch_counts(&pa) == want_a && launch_counts(&pb) == want_b
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(launch_counts(&pa), want_a, "agent A sees only process A");
    assert_eq!(launch_counts(&pb), want_b, "agent B sees only process B");
    for p in [&pa, &pb] {
        assert_eq!(
            p.handle.status().kernel_drops,
            [0, 0, 0, 0],
            "the other process's calls are filtered, not lost"
        );
    }
    a.finish();
    b.finish();
    pa.handle.stop();
    pb.handle.stop();
}

#[test]
fn the_binary_refuses_a_scope_it_cannot_filter_on() {
    if skip_unless_root("the_binary_refuses_a_scope_it_cannot_filter_on") {
        return;
    }
    let dir = TempDir::new("scope-args");
    let bin = env!("CARGO_BIN_EXE_ingero-agent");
    let persist = dir.path().join("baseline.json");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .arg("--fleet-persist-path")
            .arg(&persist)
            .output()
            .unwrap()
    };
    let not_cgroup = dir.path().to_str().unwrap().to_string();
    for (args, want) in [
        (vec!["--cgroup", not_cgroup.as_str()], "cgroup v2"),
        (
            vec!["--cgroup", "/nonexistent-ingero-cgroup"],
            "No such file",
        ),
        (vec!["--cgroup", "/sys/fs/cgroup/../../etc"], ".."),
        (vec!["--pid", "0"], "probes.pids"),
        (vec!["--pid", "x"], "invalid value"),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A cgroup v2 directory made for a test, removed (with its children) on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(tag: &str) -> Option<Self> {
        let root = scope::cgroup2_root()?;
        let p = root.join(format!("ingero-it-{tag}-{}", std::process::id()));
        std::fs::create_dir(&p).ok()?;
        Some(TestCgroup(p))
    }

    fn child(&self, name: &str) -> PathBuf {
        let c = self.0.join(name);
        std::fs::create_dir(&c).unwrap();
        c
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Children first; a cgroup is removable once its processes have exited.
        if let Ok(rd) = std::fs::read_dir(&self.0) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn an_agent_scoped_to_a_cgroup_counts_its_child_cgroups_and_nothing_else() {
    if skip_unless_root("an_agent_scoped_to_a_cgroup_counts_its_child_cgroups_and_nothing_else") {
        return;
    }
    let Some(cg) = TestCgroup::new("scope") else {
        eprintln!("SKIP: no writable cgroup v2 mount on this machine");
        return;
    };
    let dir = TempDir::new("scope-cgroup");
    let fakes = build_fakes(dir.path());
    let mut inside = Workload::spawn(&fakes.workload, &["layers", "mixed"]);
    let mut outside = Workload::spawn(&fakes.workload, &["layers", "runtime"]);
    // The watched process sits in a child of the watched cgroup (a pod's container).
    let child = cg.child("container");
    std::fs::write(child.join("cgroup.procs"), inside.pid().to_string()).unwrap();
    let p = start_scoped(
        &dir,
        true,
        false,
        Scope {
            pids: vec![],
            cgroups: vec![scope::resolve_cgroup(&cg.0).unwrap()],
        },
    );
    wait_attached(&p, &fakes, &[&fakes.cudart, &fakes.cuda]);
    inside.go();
    outside.go();
    let want = BTreeMap::from([(inside.pid(), [20, 10, 30, 0, 30])]);
    wait_until(Duration::from_secs(15), || launch_counts(&p) == want);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        launch_counts(&p),
        want,
        "only the process in the cgroup tree"
    );
    inside.finish();
    outside.finish();
    p.handle.stop();
}

#[test]
fn nccl_probes_capture_ranks_hashes_and_sequence_numbers() {
    if skip_unless_root("nccl_probes_capture_ranks_hashes_and_sequence_numbers") {
        return;
    }
    let dir = TempDir::new("nccl");
    let fakes = build_fakes(dir.path());
    let seed = 5;
    let mut r0 = Workload::spawn(&fakes.workload, &["nccl", "0", "2", "5"]);
    let mut r1 = Workload::spawn(&fakes.workload, &["nccl", "1", "2", "5"]);
    let p = start_probes(&dir, true, true);
    wait_attached(&p, &fakes, &[&fakes.nccl, &fakes.cudart]);
    r0.go();
    r1.go();
    let (pid0, pid1) = (r0.pid(), r1.pid());
    // rank 0: init + 5 + 2 + 1 + 1 + 2 sends + initAll + 1 + destroy = 15; rank 1: 13.
    let events = collect(&p, |e| {
        nccl_of(e, pid0).len() >= 15 && nccl_of(e, pid1).len() >= 13
    });
    let mut id = [0u8; 128];
    for (i, b) in id.iter_mut().enumerate() {
        *b = (seed * 31 + i as i32 * 7) as u8;
    }
    let hash = fold_unique_id(&id);
    for (rank, pid) in [(0u32, pid0), (1, pid1)] {
        let ev = nccl_of(&events, pid);
        let ops: Vec<u8> = ev.iter().map(|e| e.op).collect();
        let p2p = if rank == 0 { op::SEND } else { op::RECV };
        let mut want = vec![
            op::COMM_INIT_RANK,
            op::ALL_REDUCE,
            op::ALL_REDUCE,
            op::ALL_REDUCE,
            op::ALL_REDUCE,
            op::ALL_REDUCE,
        ];
        want.extend([
            op::ALL_GATHER,
            op::ALL_GATHER,
            op::REDUCE_SCATTER,
            op::BCAST,
            p2p,
            p2p,
        ]);
        if rank == 0 {
            want.extend([op::COMM_INIT_ALL, op::ALL_REDUCE]);
        }
        want.push(op::COMM_DESTROY);
        assert_eq!(ops, want, "rank {rank}: every call, in order");
        let init = ev[0];
        assert_eq!(
            (init.comm_id_hash, init.rank, init.nranks),
            (hash, rank, 2),
            "the unique id was read from the stack"
        );
        in_bounds(init.duration_ns, 1);
        // The communicator's collectives, numbered 1..9 in call order.
        let comm_ops: Vec<&NcclEvent> = ev[1..10].iter().collect();
        for (i, e) in comm_ops.iter().enumerate() {
            assert_eq!((e.comm_id_hash, e.rank, e.nranks), (hash, rank, 2));
            assert_eq!(e.op_seq, i as u64 + 1);
            assert_eq!(
                e.stream_handle, 0x5a,
                "the stream (7th argument for all-reduce)"
            );
            assert_eq!(e.return_code, 0);
        }
        let ar = comm_ops[0];
        assert_eq!((ar.count, ar.datatype, ar.reduce_op), (1024, 7, 0));
        in_bounds(ar.duration_ns, 2);
        assert_eq!(
            (comm_ops[5].count, comm_ops[5].datatype),
            (256, 7),
            "all-gather"
        );
        assert_eq!(
            (
                comm_ops[7].count,
                comm_ops[7].datatype,
                comm_ops[7].reduce_op
            ),
            (128, 6, 1),
            "reduce-scatter"
        );
        assert_eq!((comm_ops[8].count, comm_ops[8].datatype), (64, 0), "bcast");
        for (k, e) in ev[10..12].iter().enumerate() {
            assert_eq!(e.peer_rank, 1 - rank);
            assert_eq!(
                e.op_seq,
                k as u64 + 1,
                "per-peer numbering of point-to-point"
            );
            assert_eq!((e.count, e.comm_id_hash), (32, hash));
        }
        if rank == 0 {
            let on_all = ev[13];
            assert_eq!(
                (
                    on_all.rank,
                    on_all.nranks,
                    on_all.comm_id_hash,
                    on_all.op_seq
                ),
                (1, 2, 0, 1),
                "comms[1] of ncclCommInitAll"
            );
            assert_eq!(on_all.count, 16);
        }
    }

    // Exported points: wall-clock times, op_seq on every collective of the communicator,
    // and the barrier wait of the stream synchronize after each all-reduce.
    let mut points = Vec::new();
    wait_until(Duration::from_secs(5), || {
        points.extend(p.outbox.drain());
        points
            .iter()
            .filter(|pt| pt.barrier_wait_ns.is_some())
            .count()
            >= 10
            && points.len() >= 24
    });
    let now = Timestamp::now();
    assert!(points.iter().all(|pt| pt.exported()));
    assert_eq!(
        points.len(),
        24,
        "13 + 11 collectives, init/destroy excluded, ncclCommInitAll included"
    );
    for pt in &points {
        assert!(
            now.since(pt.time) < Duration::from_secs(120)
                && pt.time.since(now) < Duration::from_secs(5),
            "wall clock, not uptime: {:?}",
            pt.time
        );
    }
    let barriers: Vec<u64> = points.iter().filter_map(|pt| pt.barrier_wait_ns).collect();
    assert_eq!(
        barriers.len(),
        10,
        "one synchronize after each of the 5 all-reduces per rank"
    );
    for b in barriers {
        in_bounds(b, 2);
    }
    r0.finish();
    r1.finish();

    // PyTorch's way of waiting (the host never synchronizes the NCCL stream): five steps of
    // three all-reduces followed by a synchronize of the compute stream made to wait for
    // them, then five of one all-reduce and a device synchronize. Each synchronize is the
    // barrier of the first collective before it, once.
    let mut ddp = Workload::spawn(&fakes.workload, &["nccl-ddp", "5"]);
    ddp.go();
    let ddp_hash = fold_unique_id(&[0x17u8; 128]);
    let mut points = Vec::new();
    wait_until(Duration::from_secs(5), || {
        points.extend(
            p.outbox
                .drain()
                .into_iter()
                .filter(|pt| pt.comm_id_hash == ddp_hash),
        );
        points.len() >= 20
    });
    points.sort_by_key(|pt| pt.op_seq);
    assert_eq!(
        points.iter().map(|pt| pt.op_seq).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<u64>>(),
        "20 all-reduces"
    );
    for pt in &points {
        let (first_of_step, min_ms) = if pt.op_seq <= 15 {
            ((pt.op_seq - 1) % 3 == 0, 2)
        } else {
            (true, 3)
        };
        match pt.barrier_wait_ns {
            Some(w) if first_of_step => in_bounds(w, min_ms),
            None if !first_of_step => {}
            other => panic!(
                "all-reduce {} (first of its step: {first_of_step}): barrier {other:?}",
                pt.op_seq
            ),
        }
    }
    ddp.finish();
    p.handle.stop();
}
