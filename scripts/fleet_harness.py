"""Shared pieces of the measurement scripts (restart-recovery.py, soak.py): a loopback
ingero-fleet config, starting the binary, the threshold GET, and /proc readings."""

import json
import os
import subprocess
import tempfile
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Loopback ports of the harness config (clear of the embedded default's 4317/4318/8080).
OTLP_HTTP = "127.0.0.1:24318"
AGENT_API = "127.0.0.1:28080"
ADMIN_API = "127.0.0.1:28081"
PROMETHEUS = "127.0.0.1:29090"

CONFIG = f"""
receivers:
  otlp:
    protocols:
      http: {{endpoint: {OTLP_HTTP}}}
processors:
  ingero: {{push_interval: %(interval)s}}
extensions:
  ingero_threshold: {{agent_endpoint: {AGENT_API}, admin_endpoint: {ADMIN_API}}}
exporters:
  %(exporter)s
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {{receivers: [otlp], processors: [ingero], exporters: [%(exporter_id)s]}}
  telemetry:
    logs: {{level: warn}}
    metrics: {{level: none}}
"""


def bin_dir(profile):
    return os.path.join(ROOT, "target", profile)


def write_config(interval, prometheus=False):
    """A temporary config file; the caller removes it."""
    if prometheus:
        exporter, exporter_id = f"prometheus: {{endpoint: {PROMETHEUS}}}", "prometheus"
    else:
        exporter, exporter_id = "debug: {}", "debug"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(CONFIG % {"interval": interval, "exporter": exporter, "exporter_id": exporter_id})
        return f.name


def start_fleet(profile, cfg_path, stderr=subprocess.DEVNULL):
    return subprocess.Popen(
        [os.path.join(bin_dir(profile), "ingero-fleet"), "--config", cfg_path],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


def loadgen(profile, agents, clusters, interval, duration_s):
    """fleet-loadgen in paced mode against the harness config, JSON report on stdout."""
    return subprocess.Popen(
        [
            os.path.join(bin_dir(profile), "fleet-loadgen"),
            "--endpoint", f"http://{OTLP_HTTP}",
            "--agents", str(agents),
            "--clusters", str(clusters),
            "--interval", interval,
            "--duration", f"{duration_s}s",
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def threshold(cluster):
    url = f"http://{AGENT_API}/api/v1/threshold?cluster_id={cluster}"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r)
    except OSError:
        return None


def scrape():
    """Bytes of one Prometheus scrape, or None."""
    try:
        with urllib.request.urlopen(f"http://{PROMETHEUS}/metrics", timeout=10) as r:
            return len(r.read())
    except OSError:
        return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def open_fds(pid):
    """Open file descriptors of a process (sockets dominate: a proxy for connections)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def parse_seconds(d):
    d = d.strip()
    if d.endswith("ms"):
        return float(d[:-2]) / 1000
    if d.endswith("s"):
        return float(d[:-1])
    if d.endswith("m"):
        return float(d[:-1]) * 60
    return float(d)
