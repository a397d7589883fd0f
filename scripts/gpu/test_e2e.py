"""No-GPU tests of the gpu-e2e harness: argument handling, the timeline, the report built
from agent logs and Fleet diagnostics, and (when both binaries are given through
INGERO_AGENT_BIN / INGERO_FLEET_BIN) a short --dry-run with synthetic agents and the real
ingero-fleet. Run: python3 -m unittest scripts/gpu/test_e2e.py
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402

T0 = 1_800_000_000.0


def line(t, **fields):
    """An agent `--log-json` line at T0 + t (the format tracing-subscriber writes)."""
    import datetime
    ts = datetime.datetime.fromtimestamp(T0 + t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps({"timestamp": ts, "level": "INFO", "fields": fields, "target": "ingero_agent::agent"})


def flag(t, on):
    return line(t, message="straggler_state transition", straggler_state="STRAGGLER" if on else "HEALTHY",
                score=0.7, threshold=0.9, mode="fleet", dominant_signal="throughput", event_id="x")


def state(t, nxt):
    return line(t, message="health state transition", prev="active", next=nxt, reason="r")


class Args(unittest.TestCase):
    def rejects(self, argv, words):
        err = io.StringIO()
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
            e2e.parse_args(argv)
        for w in words:
            self.assertIn(w, err.getvalue())

    def test_defaults_are_valid(self):
        a = e2e.parse_args([])
        self.assertEqual((a.nodes, a.injections), (6, ["stall", "contention", "stop"]))

    def test_every_problem_is_named(self):
        self.rejects(["--nodes", "5", "--push-interval", "0.5", "--injections", "stall,melt",
                      "--slowdown", "1.5"],
                     ["--nodes must be >= 6", "--push-interval", "melt", "--slowdown"])
        self.rejects(["--inject", "2"], ["--inject must be at least 3 push intervals"])

    def test_fake_and_sync_go_together_with_the_injections_they_can_make(self):
        self.rejects(["--sync"], ["--sync needs --fake"])
        self.rejects(["--fake", "--dry-run"], ["exclude each other"])
        self.rejects(["--fake"], ["leave contention out"])
        self.rejects(["--fake", "--sync", "--injections", "stall,stop"], ["--sync injects stall only"])
        a = e2e.parse_args(["--fake", "--sync", "--injections", "stall", "--check"])
        self.assertEqual((a.fake, a.sync, a.check, a.injections), (True, True, "all", ["stall"]))
        self.assertEqual(a.sync_on, "nccl")
        a = e2e.parse_args(["--fake", "--sync", "--sync-on", "compute", "--injections", "stall"])
        self.assertEqual(a.sync_on, "compute")
        self.rejects(["--fake", "--sync-on", "device", "--injections", "stall"], ["--sync-on needs --sync"])
        self.assertEqual(a.signal_window, 1.0)
        self.assertEqual(e2e.parse_args(["--push-interval", "5"]).signal_window, 2.5)
        self.rejects(["--signal-window", "0.01"], ["--signal-window must be in"])

    def test_timeline_and_dry_run_script(self):
        a = e2e.parse_args(["--push-interval", "1", "--warmup-samples", "3", "--healthy", "10",
                            "--inject", "5", "--recover", "12", "--injections", "stall,stop"])
        warm, windows, end = e2e.timeline(a)
        self.assertEqual(warm, 5)
        self.assertEqual(windows, [("stall", 15, 20), ("stop", 32, 37)])
        self.assertEqual(end, 49)
        self.assertEqual(e2e.synthetic_script(windows, 0.3, 1.0),
                         "0s:1.0,14000ms:0.7,19000ms:1.0,31000ms:0.0,36000ms:1.0")

    def test_overhead_only_is_for_gpu_runs(self):
        self.assertTrue(e2e.parse_args(["--overhead-only"]).overhead_only)
        for other in ("--fake", "--dry-run", "--skip-overhead"):
            self.rejects(["--overhead-only", other], ["--overhead-only needs a GPU run"])

    def test_injections_are_spaced_beyond_the_clear_hold_off(self):
        # Fleet's classifier clears at once only an episode that began 10 unflagged ticks
        # after the previous clear: injections closer than that would measure flapping.
        self.rejects(["--injections", "stall,stop", "--recover", "20"],
                     ["--recover must be at least 12 push intervals (24.0s)"])
        self.assertEqual(e2e.parse_args(["--injections", "stall", "--recover", "20"]).recover, 20)
        self.assertEqual(e2e.parse_args([]).recover, 40)
        self.assertEqual(e2e.parse_args(["--push-interval", "5"]).recover, 60)


class Report(unittest.TestCase):
    def run_report(self, logs, diag):
        nodes = [f"n{i}" for i in range(6)]
        return e2e.build_report({
            "t0": T0, "push_interval": 2.0, "warm": 10.0, "end": 100.0, "victim": "n0",
            "nodes": nodes, "windows": [("stall", 40.0, 60.0), ("stop", 70.0, 85.0)],
            "agent_logs": {n: logs.get(n, []) for n in nodes}, "diag": diag, "overhead": None,
        })

    def test_detection_recovery_and_false_positives(self):
        logs = {
            "n0": [flag(43.1, True), flag(61.5, False), state(76.0, "idle"), state(85.5, "active")],
            # A healthy node flagged for 3 s: a false positive, and an idle while running.
            "n3": [flag(20.0, True), flag(23.0, False), state(50.0, "idle")],
        }
        diag = []
        for t in range(0, 100):
            nodes = {f"n{i}": {"straggler": False, "state": "active", "score": 0.9} for i in range(6)}
            if 44 <= t < 65:
                nodes["n0"]["straggler"] = True
            if t == 30:
                nodes["n2"]["straggler"] = True
            diag.append({"t": t + 0.5, "nodes": nodes})
        diag.append({"t": 5.0, "err": "HTTP Error 404"})
        r = self.run_report(logs, diag)
        stall, stop = r["injections"]
        self.assertEqual((stall["agent_detect_s"], stall["fleet_detect_s"]), (3.1, 4.5))
        self.assertEqual((stall["agent_recover_s"], stall["fleet_recover_s"]), (1.5, 5.5))
        self.assertTrue(stall["agent_detect_ok"] and stall["fleet_detect_ok"])
        self.assertFalse(stall["recover_ok"], "Fleet took 5.5 s > 2 intervals")
        self.assertEqual((stop["agent_idle_after_s"], stop["agent_wake_after_s"]), (6.0, 0.5))
        # Nothing flagged during the stop: no detection, no recovery.
        self.assertIsNone(stop["agent_detect_s"])
        self.assertIsNone(stop["agent_recover_s"])
        fp = r["false_positives"]
        self.assertEqual(fp["agent_by_node"], {"n3": 3})
        self.assertEqual(fp["fleet_by_node"], {"n2": 1})
        self.assertEqual(r["idle_while_running"], [{"node": "n3", "t": 50.0}])
        self.assertEqual(r["budgets"], {"detect_s": 6.0, "recover_s": 4.0})
        v = r["verdict"]
        self.assertFalse(v["pass"])
        self.assertEqual(v["failed"], ["no_agent_false_positives", "no_fleet_false_positives",
                                       "no_idle_while_running", "stall0_fleet_recover"])
        self.assertTrue(v["checks"]["stall0_agent_recover"])
        # The stop went IDLE at 6.0 s (the budget) and woke 0.5 s after: both in budget.
        self.assertTrue(v["checks"]["stop1_agent_detect"] and v["checks"]["stop1_agent_recover"])
        self.assertTrue(v["checks"]["stall0_agent_detect"] and v["checks"]["stall0_fleet_detect"])

    def test_the_overhead_targets_are_judged_when_measured(self):
        ovh = {"ratio_median": {"ns_per_launch": 1.13, "matmul_ms_per_step": 1.0005,
                                "transformer_ms_per_step": 1.18},
               "agent_rss_idle_bytes": 52 << 20, "probe_totals": {"ringbuf_full": 0}}
        fp = {"agent_flagged_node_seconds": 0, "fleet_flagged_samples": 0}
        v = e2e.verdict([], fp, [], ovh, 6.0, 4.0)
        self.assertEqual(v["failed"], ["overhead_rss_idle", "overhead_transformer_ms_per_step"])
        self.assertTrue(v["checks"]["overhead_matmul_ms_per_step"] and v["checks"]["overhead_no_ring_drops"])
        ovh.update(ratio_median={"matmul_ms_per_step": 1.004, "transformer_ms_per_step": 1.019},
                   agent_rss_idle_bytes=29_000_000)
        self.assertTrue(e2e.verdict([], fp, [], ovh, 6.0, 4.0)["pass"])

    def test_an_overhead_only_run_is_judged_on_the_overhead_alone(self):
        ovh = {"ratio_median": {"ns_per_launch": 1.4, "matmul_ms_per_step": 0.997,
                                "transformer_ms_per_step": 1.074},
               "agent_rss_idle_bytes": 54_677_504, "probe_totals": {"ringbuf_full": 0}}
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "run.json"), "w") as f:
                json.dump({"t0": T0, "push_interval": 2.0, "warm": 0.0, "end": 0.0, "victim": None,
                           "nodes": [], "windows": [], "overhead": ovh}, f)
            open(os.path.join(d, "diag.ndjson"), "w").close()
            v = e2e.report_from_dir(d)["verdict"]
        self.assertEqual(sorted(v["checks"]), ["overhead_matmul_ms_per_step", "overhead_no_ring_drops",
                                               "overhead_rss_idle", "overhead_transformer_ms_per_step"])
        self.assertEqual(v["failed"], ["overhead_rss_idle", "overhead_transformer_ms_per_step"])

    def test_the_probe_floor_finds_the_agents_libcuda_or_says_why_it_is_skipped(self):
        lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"
        log = ["not json",
               json.dumps({"fields": {"message": "probes attached", "path": "/v/nvidia/cu13/lib/libcudart.so.13"}}),
               json.dumps({"fields": {"message": "probes attached", "path": lib, "probes": 24}})]
        self.assertEqual(e2e.attached_libcuda(log), lib)
        self.assertIsNone(e2e.attached_libcuda(log[:2]))
        a = e2e.parse_args(["--attach-empty-bin", "/nonexistent/attach_empty"])
        self.assertIn("skipped", e2e.probe_floor(a, "/tmp", lib, lambda: self.fail("measured")))
        a = e2e.parse_args(["--attach-empty-bin", sys.executable])
        self.assertIn("skipped", e2e.probe_floor(a, "/tmp", None, lambda: self.fail("measured")))

    def test_rss_by_mapping_reads_this_process(self):
        m = e2e.rss_by_mapping(os.getpid())
        self.assertTrue(m and all(v >= 0 for v in m.values()), m)
        self.assertTrue(any("python" in k or k.startswith("[") for k in m), m)
        self.assertIsNone(e2e.rss_by_mapping(2 ** 22 + 1))

    def test_check_fails_the_command_on_a_failed_verdict(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "run.json"), "w") as f:
                json.dump({"t0": T0, "push_interval": 1.0, "warm": 5.0, "end": 30.0, "victim": "n0",
                           "nodes": ["n0", "n1"], "windows": [("stall", 10.0, 20.0)], "overhead": None}, f)
            open(os.path.join(d, "diag.ndjson"), "w").close()
            with contextlib.redirect_stdout(io.StringIO()), self.assertRaises(SystemExit) as e:
                e2e.main(["--report-only", d, "--check"])
            self.assertIn("stall0_agent_detect", str(e.exception.code))
            with contextlib.redirect_stdout(io.StringIO()) as o:
                e2e.main(["--report-only", d])
            self.assertFalse(json.loads(o.getvalue())["verdict"]["pass"])
            # Only the named checks are judged; a name the verdict lacks fails.
            with contextlib.redirect_stdout(io.StringIO()):
                e2e.main(["--report-only", d, "--check", "no_agent_false_positives,no_idle_while_running"])
            with contextlib.redirect_stdout(io.StringIO()), self.assertRaises(SystemExit) as e:
                e2e.main(["--report-only", d, "--check", "no_agent_false_positives,stall9_recover"])
            self.assertIn("stall9_recover (no such check)", str(e.exception.code))

    def test_a_stop_cleared_by_idle_recovers_before_the_end(self):
        logs = {"n0": [flag(71.0, True), state(73.0, "idle"), flag(73.0, False), state(86.0, "active")]}
        diag = [{"t": t + 0.5, "nodes": {"n0": {"straggler": 72 <= t < 74}}} for t in range(100)]
        stop = self.run_report(logs, diag)["injections"][1]
        self.assertEqual((stop["agent_detect_s"], stop["agent_recover_s"]), (1.0, -12.0))
        self.assertEqual((stop["fleet_detect_s"], stop["fleet_recover_s"]), (2.5, -10.5))
        self.assertTrue(stop["recover_ok"])

    def test_a_window_that_moved_every_node_is_nobodys_healthy_time(self):
        # On one shared GPU a stopped node hands its share to the others: they run 20 %
        # faster, then slow down when it resumes, and Fleet (threshold held) flags one.
        rates = {f"n{i}": [(float(t), 50.0) for t in range(100)] for i in range(6)}
        for i in range(1, 6):
            rates[f"n{i}"] = [(t, 60.0 if 70 <= t < 85 else r) for t, r in rates[f"n{i}"]]
        diag = [{"t": t + 0.5, "nodes": {"n3": {"straggler": 88 <= t < 92}}} for t in range(100)]
        logs = {"n3": [flag(89.0, True), flag(91.0, False)]}
        nodes = [f"n{i}" for i in range(6)]
        run = {"t0": T0, "push_interval": 2.0, "warm": 10.0, "end": 100.0, "victim": "n0", "nodes": nodes,
               "windows": [("stall", 40.0, 60.0), ("stop", 70.0, 85.0)], "diag": diag, "overhead": None,
               "agent_logs": {n: logs.get(n, []) for n in nodes}, "rates": rates}
        r = e2e.build_report(run)
        self.assertEqual([i["peer_rate_change"] for i in r["injections"]], [0.0, 0.2])
        fp = r["false_positives"]
        self.assertEqual(fp["systemic_windows"], ["stop"])
        self.assertEqual((fp["fleet_flagged_samples"], fp["fleet_flagged_samples_in_systemic_windows"]), (0, 4))
        self.assertEqual((fp["agent_flagged_node_seconds"], fp["agent_flagged_node_seconds_in_systemic_windows"]),
                         (0, 2))
        self.assertTrue(r["verdict"]["checks"]["no_fleet_false_positives"])
        # The ranks of one synchronous job all slow with the slow one: a flag on a waiting
        # rank stays a false positive, however far their rate moved.
        fp = e2e.build_report({**run, "sync": True})["false_positives"]
        self.assertEqual(fp["systemic_windows"], [])
        self.assertEqual((fp["fleet_flagged_samples"], fp["agent_flagged_node_seconds"]), (4, 2))
        # The same flags outside a systemic window are false positives.
        run["rates"] = {n: [(float(t), 50.0) for t in range(100)] for n in nodes}
        fp = e2e.build_report(run)["false_positives"]
        self.assertEqual((fp["fleet_flagged_samples"], fp["agent_flagged_node_seconds"]), (4, 2))

    def test_scores_csv_has_one_row_per_node_and_push_with_the_healthy_ones_marked(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "run.json"), "w") as f:
                json.dump({"t0": T0, "push_interval": 2.0, "warm": 10.0, "end": 100.0, "victim": "n0",
                           "nodes": ["n0", "n1"], "windows": [["stall", 40.0, 60.0]], "overhead": None}, f)
            with open(os.path.join(d, "diag.ndjson"), "w") as f:
                # Polled four times a push: each node's score once per push.
                for k in range(0, 400):
                    t = k * 0.25
                    push = int(t // 2.0)
                    nodes = {n: {"straggler": False, "state": "active", "score": 0.9 + 0.001 * (push % 7) + i * 0.01}
                             for i, n in enumerate(["n0", "n1"])}
                    f.write(json.dumps({"t": t, "nodes": nodes}) + "\n")
                f.write(json.dumps({"t": 5.0, "err": "HTTP Error 404"}) + "\n")
            report = e2e.report_from_dir(d)
            self.assertNotIn("score_rows", report)
            with open(os.path.join(d, "scores.csv")) as f:
                rows = f.read().splitlines()
        self.assertEqual(rows[0], "t_s,node,score,healthy")
        rows = [r.split(",") for r in rows[1:]]
        self.assertEqual(len(rows), 2 * 50)
        healthy = {(n, float(t)) for t, n, _, h in rows if h == "1"}
        # Warm-up, the victim's injection (and its recovery budget) and the end are out.
        self.assertNotIn(("n0", 0.0), healthy)
        self.assertNotIn(("n0", 40.0), healthy)
        self.assertIn(("n1", 40.0), healthy)
        self.assertIn(("n0", 20.0), healthy)
        self.assertEqual(sum(1 for r in rows if r[1] == "n1" and r[3] == "1"), 45)

    def test_nothing_detected_is_reported_as_such(self):
        r = self.run_report({}, [])
        self.assertIsNone(r["injections"][0]["agent_detect_s"])
        self.assertFalse(r["injections"][0]["agent_detect_ok"])
        self.assertEqual(r["false_positives"]["agent_flagged_node_seconds"], 0)


@unittest.skipUnless(os.environ.get("INGERO_AGENT_BIN") and os.environ.get("INGERO_FLEET_BIN"),
                     "set INGERO_AGENT_BIN and INGERO_FLEET_BIN for the dry run")
class DryRun(unittest.TestCase):
    def test_synthetic_nodes_through_the_real_fleet(self):
        with tempfile.TemporaryDirectory() as out:
            argv = ["--dry-run", "--out", out, "--push-interval", "1", "--warmup-samples", "3",
                    "--healthy", "8", "--inject", "6", "--recover", "12", "--injections", "stall,stop"]
            with contextlib.redirect_stdout(io.StringIO()) as o:
                e2e.main(argv)
            r = json.loads(o.getvalue())
            with open(os.path.join(out, "report.json")) as f:
                self.assertEqual(r, json.load(f))
            stall, stop = r["injections"]
            msg = json.dumps(r, indent=1)
            self.assertTrue(stall["agent_detect_ok"], msg)
            self.assertTrue(stall["fleet_detect_ok"], msg)
            self.assertIsNotNone(stall["agent_recover_s"], msg)
            self.assertIsNotNone(stop["agent_idle_after_s"], msg)
            self.assertEqual(r["false_positives"]["agent_flagged_node_seconds"], 0, msg)
            self.assertEqual(r["false_positives"]["fleet_flagged_samples"], 0, msg)
            self.assertEqual(r["idle_while_running"], [], msg)
            # --report-only rebuilds the same report from the files.
            with contextlib.redirect_stdout(io.StringIO()) as o2:
                e2e.main(["--report-only", out])
            self.assertEqual(json.loads(o2.getvalue()), r)


if __name__ == "__main__":
    unittest.main()
