// Ingero Fleet live cluster view. Plain script, no dependencies: polls
// /api/v1/view?cluster_id=ID on the listener that served it and draws on canvases.
// Every text from the server goes through textContent, never innerHTML.
"use strict";

(function () {
  const qs = new URLSearchParams(location.search);
  const POLL_MS = Math.max(500, parseInt(qs.get("poll") || "2000", 10) || 2000);
  const TOKEN_KEY = "ingero.view.token";
  const $ = (id) => document.getElementById(id);
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim();

  let cluster = qs.get("cluster_id") || "";
  let last = null;
  let timer = null;

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  async function getJson(path) {
    const headers = { Accept: "application/json" };
    if (token()) headers.Authorization = "Bearer " + token();
    const r = await fetch(path, { headers, cache: "no-store" });
    let body = null;
    try { body = await r.json(); } catch (_) { body = null; }
    return { status: r.status, body };
  }

  function setStatus(text, err) {
    const s = $("status");
    s.textContent = text;
    s.className = err ? "err" : "";
  }

  function askToken(why) {
    $("token-box").hidden = false;
    setStatus(why, true);
  }

  // The cluster list needs a token scoped to every cluster; a scoped token types its id.
  async function loadClusters() {
    const sel = $("cluster-select");
    const inp = $("cluster-input");
    const r = await getJson("/api/v1/diagnostics?limit=1000");
    if (r.status === 401) { askToken("this Fleet needs a token"); }
    if (r.status === 200 && r.body && Array.isArray(r.body.clusters)) {
      const ids = r.body.clusters.map((c) => c.cluster_id);
      const prev = sel.value;
      sel.replaceChildren();
      for (const id of ids) {
        const o = document.createElement("option");
        o.value = id; o.textContent = id;
        sel.appendChild(o);
      }
      if (!cluster && ids.length) cluster = ids[0];
      if (cluster && !ids.includes(cluster)) {
        const o = document.createElement("option");
        o.value = cluster; o.textContent = cluster;
        sel.appendChild(o);
      }
      sel.value = cluster || prev;
      sel.hidden = false; inp.hidden = true;
      return ids.length;
    }
    inp.hidden = false; sel.hidden = true;
    inp.value = cluster;
    return null;
  }

  let ticks = 0;

  async function tick() {
    clearTimeout(timer);
    try {
      // New clusters show up in the picker every 15 polls.
      if (cluster && ++ticks % 15 === 0 && !$("cluster-select").hidden) await loadClusters();
      if (!cluster) {
        const n = await loadClusters();
        if (!cluster) {
          setStatus(n === 0 ? "no clusters published yet" : "enter a cluster id", false);
          $("view").hidden = true;
          return;
        }
      }
      const r = await getJson("/api/v1/view?cluster_id=" + encodeURIComponent(cluster));
      if (r.status === 200 && r.body) {
        last = r.body;
        $("view").hidden = false;
        render(r.body);
        const t = r.body.published_at_unix_nano;
        setStatus("cluster " + cluster + " | publish " + r.body.generation +
          (t ? " at " + new Date(t / 1e6).toLocaleTimeString() : ""), false);
        document.body.dataset.generation = String(r.body.generation);
      } else if (r.status === 401) {
        askToken("this Fleet needs a token");
      } else if (r.status === 403) {
        askToken("this token may not read cluster " + cluster);
      } else if (r.status === 404) {
        $("view").hidden = true;
        setStatus("cluster " + cluster + " is not published (yet)", true);
      } else {
        setStatus("error " + r.status + ": " + ((r.body && r.body.error) || "no answer"), true);
      }
    } catch (e) {
      setStatus("Fleet unreachable: " + e.message, true);
    } finally {
      timer = setTimeout(tick, POLL_MS);
    }
  }

  const fmt = (v, d) => (v === null || v === undefined ? "-" : Number(v).toFixed(d));

  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s";
    return Math.floor(m / 60) + "h " + (m % 60) + "m";
  }

  function setCard(id, text, cls) {
    const el = $(id);
    el.textContent = text;
    el.className = "v" + (cls ? " " + cls : "");
  }

  function render(v) {
    setCard("threshold", fmt(v.threshold, 4));
    setCard("median", fmt(v.median, 4) + " / " + fmt(v.mad, 4));
    setCard("quorum", v.quorum_met ? "met" : "not met", v.quorum_met ? "good" : "warn");
    setCard("coverage", (100 * v.coverage).toFixed(0) + "% (" + v.active_nodes + " of " +
      v.expected_nodes + ")", v.coverage_low ? "warn" : "");
    setCard("panic", v.panic_mode ? "ON" : "off", v.panic_mode ? "alert" : "good");
    setCard("nodes-count", v.active_nodes + " active, " + v.idle_nodes + " idle, " +
      v.calibrating_nodes + " calibrating");
    setCard("straggler-count", String(v.straggler_count), v.straggler_count > 0 ? "alert" : "good");
    renderHistory(v);
    renderNodes(v);
    renderStragglers(v);
    renderNccl(v);
    renderCost(v);
  }

  // A canvas sized to its CSS width at the device's pixel ratio.
  function surface(id, cssHeight) {
    const c = $(id);
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(200, c.clientWidth);
    c.width = Math.round(w * dpr);
    c.height = Math.round(cssHeight * dpr);
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, cssHeight);
    return { g, w, h: cssHeight, c };
  }

  function renderHistory(v) {
    const pts = v.history || [];
    $("history-note").textContent = v.history === null
      ? "(no history kept for this cluster: over the view's cluster cap)"
      : pts.length ? "(" + pts.length + " publishes, " +
        duration((pts[pts.length - 1].t_unix_nano - pts[0].t_unix_nano) / 1e6) + ")" : "";
    const { g, w, h } = surface("history", 180);
    const vals = [];
    for (const p of pts) {
      for (const x of [p.threshold, p.median]) if (x !== null) vals.push(x);
      if (p.median !== null && p.mad !== null) vals.push(p.median + 1.4826 * p.mad, p.median - 1.4826 * p.mad);
    }
    if (pts.length === 0 || vals.length === 0) {
      g.fillStyle = color("--dim"); g.fillText("no threshold computed yet", 10, 20);
      return;
    }
    let lo = Math.min(...vals), hi = Math.max(...vals);
    const pad = Math.max(0.01, (hi - lo) * 0.15);
    lo -= pad; hi += pad;
    const L = 44, R = w - 8, T = 8, B = h - 18;
    const t0 = pts[0].t_unix_nano, t1 = Math.max(t0 + 1, pts[pts.length - 1].t_unix_nano);
    const X = (t) => L + (R - L) * (t - t0) / (t1 - t0);
    const Y = (x) => B - (B - T) * (x - lo) / (hi - lo);
    g.strokeStyle = color("--line"); g.fillStyle = color("--dim"); g.font = "11px sans-serif";
    for (let i = 0; i <= 4; i++) {
      const x = lo + (hi - lo) * i / 4;
      g.beginPath(); g.moveTo(L, Y(x)); g.lineTo(R, Y(x)); g.stroke();
      g.fillText(x.toFixed(3), 2, Y(x) + 4);
    }
    g.fillText("-" + duration((t1 - t0) / 1e6), L, h - 4);
    g.fillText("now", R - 22, h - 4);
    // Stragglers as a faint bar per publish.
    g.fillStyle = "rgba(224,65,58,0.35)";
    const bw = Math.max(1, (R - L) / Math.max(1, pts.length));
    for (const p of pts) if (p.straggler_count > 0) g.fillRect(X(p.t_unix_nano) - bw / 2, B - 6, bw, 6);
    // Median band.
    const band = pts.filter((p) => p.median !== null && p.mad !== null);
    if (band.length) {
      g.fillStyle = "rgba(88,166,255,0.22)";
      g.beginPath();
      band.forEach((p, i) => { const y = Y(p.median + 1.4826 * p.mad); i ? g.lineTo(X(p.t_unix_nano), y) : g.moveTo(X(p.t_unix_nano), y); });
      for (let i = band.length - 1; i >= 0; i--) g.lineTo(X(band[i].t_unix_nano), Y(band[i].median - 1.4826 * band[i].mad));
      g.closePath(); g.fill();
    }
    const line = (key, col) => {
      g.strokeStyle = col; g.lineWidth = 2; g.beginPath();
      let on = false;
      for (const p of pts) {
        if (p[key] === null) { on = false; continue; }
        on ? g.lineTo(X(p.t_unix_nano), Y(p[key])) : g.moveTo(X(p.t_unix_nano), Y(p[key]));
        on = true;
      }
      g.stroke(); g.lineWidth = 1;
    };
    line("median", color("--med"));
    line("threshold", color("--thr"));
  }

  function nodeColour(n, v) {
    if (n.state !== "active") return color("--idle");
    if (n.straggler) return color("--bad");
    const bandLo = v.median !== null && v.mad !== null ? v.median - 1.4826 * v.mad : null;
    if (bandLo !== null && n.score < bandLo) return color("--near");
    return color("--ok");
  }

  let heatLayout = null;

  function renderNodes(v) {
    const nodes = (v.nodes || []).slice().sort((a, b) => (a.node_id < b.node_id ? -1 : a.node_id > b.node_id ? 1 : 0));
    const total = v.active_nodes + v.idle_nodes + v.calibrating_nodes;
    $("nodes-note").textContent = "(" + nodes.length + " shown" +
      (total > nodes.length ? " of " + total + "; the processor's diagnostics keep stragglers and the lowest scores" : "") + ")";
    // Strip: one tick per node on a score axis, threshold and median marked.
    {
      const { g, w, h } = surface("strip", 56);
      const scores = nodes.map((n) => n.score).concat([v.threshold, v.median].filter((x) => x !== null));
      let lo = Math.min(1, ...scores), hi = Math.max(0, ...scores);
      lo = Math.max(0, lo - 0.02); hi = Math.min(1.5, hi + 0.02);
      if (hi <= lo) hi = lo + 0.1;
      const L = 8, R = w - 8;
      const X = (s) => L + (R - L) * (s - lo) / (hi - lo);
      g.fillStyle = color("--dim"); g.font = "11px sans-serif";
      g.fillText(lo.toFixed(2), L, h - 3); g.fillText(hi.toFixed(2), R - 28, h - 3);
      g.globalAlpha = nodes.length > 200 ? 0.5 : 0.9;
      for (const n of nodes) {
        g.fillStyle = nodeColour(n, v);
        g.fillRect(X(n.score) - 1, n.straggler ? 6 : 14, 2, n.straggler ? 30 : 22);
      }
      g.globalAlpha = 1;
      const mark = (x, col, label) => {
        if (x === null) return;
        g.strokeStyle = col; g.lineWidth = 2; g.beginPath(); g.moveTo(X(x), 2); g.lineTo(X(x), 40); g.stroke();
        g.fillStyle = col; g.fillText(label, X(x) + 3, 50); g.lineWidth = 1;
      };
      mark(v.threshold, color("--thr"), "threshold");
      mark(v.median, color("--med"), "median");
    }
    // Heat map: one cell per node in node-id order (positions stay put between updates).
    {
      const c = $("heat");
      const width = Math.max(200, c.clientWidth);
      const cell = nodes.length > 2000 ? 6 : nodes.length > 500 ? 9 : 14;
      const cols = Math.max(1, Math.floor((width - 4) / cell));
      const rows = Math.max(1, Math.ceil(nodes.length / cols));
      const { g } = surface("heat", rows * cell + 4);
      nodes.forEach((n, i) => {
        g.fillStyle = nodeColour(n, v);
        g.fillRect(2 + (i % cols) * cell, 2 + Math.floor(i / cols) * cell, cell - 1, cell - 1);
      });
      heatLayout = { nodes, cell, cols };
    }
  }

  $("heat").addEventListener("mousemove", (e) => {
    if (!heatLayout) return;
    const r = e.target.getBoundingClientRect();
    const { nodes, cell, cols } = heatLayout;
    const col = Math.floor((e.clientX - r.left - 2) / cell), row = Math.floor((e.clientY - r.top - 2) / cell);
    const n = col < cols ? nodes[row * cols + col] : undefined;
    $("node-hover").textContent = n ? n.node_id + ": " + n.score.toFixed(4) + " (" + n.state +
      (n.straggler ? ", straggler" : "") + ")" : "";
  });

  // The top causal chain the node's agent sent (null: none known). Text only.
  function causeCell(c) {
    const td = document.createElement("td");
    td.className = "cause";
    if (!c) { td.textContent = "-"; td.classList.add("none"); return td; }
    const sev = document.createElement("span");
    sev.className = "sev";
    sev.dataset.severity = String(c.severity);
    sev.textContent = String(c.severity);
    const summary = document.createElement("div");
    summary.className = "summary";
    summary.textContent = String(c.summary);
    const root = document.createElement("div");
    root.className = "root";
    root.textContent = "root cause: " + String(c.root_cause);
    td.title = "episode " + String(c.causal_chain_id) + (c.chains > 1 ? " (" + c.chains + " chains)" : "");
    td.append(sev, summary, root);
    return td;
  }

  function renderStragglers(v) {
    const body = $("stragglers").tBodies[0];
    const list = (v.nodes || []).filter((n) => n.straggler)
      .sort((a, b) => (a.straggler_since_unix_nano || 0) - (b.straggler_since_unix_nano || 0) || a.score - b.score);
    const now = v.published_at_unix_nano || Date.now() * 1e6;
    body.replaceChildren(...list.map((n) => {
      const tr = document.createElement("tr");
      tr.className = "straggler";
      tr.dataset.node = n.node_id;
      const since = n.straggler_since_unix_nano;
      for (const text of [n.node_id, n.cohort || "(cluster)", n.score.toFixed(4),
        since ? new Date(since / 1e6).toLocaleTimeString() : "-",
        since ? duration((now - since) / 1e6) : "-"]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      tr.appendChild(causeCell(n.cause));
      return tr;
    }));
    $("stragglers-empty").hidden = list.length > 0;
    $("stragglers").hidden = list.length === 0;
  }

  function renderNccl(v) {
    const box = $("nccl");
    const streams = v.peer_lag || [];
    $("nccl-note").textContent = v.peer_lag_streams_left_out
      ? "(" + v.peer_lag_streams_left_out + " more streams not shown)" : "";
    box.replaceChildren();
    $("nccl-empty").hidden = streams.length > 0;
    let maxLag = 1;
    for (const s of streams) for (const r of s.ranks) if (r.median_lag_ms) maxLag = Math.max(maxLag, r.median_lag_ms);
    for (const s of streams) {
      const div = document.createElement("div");
      div.className = "stream";
      const name = document.createElement("div");
      name.className = "name";
      name.textContent = s.op_type + " comm " + s.comm_id_hash + ", " + s.nranks + " ranks, " + s.steps + " steps" +
        (s.ranks_left_out ? " (" + s.ranks_left_out + " ranks not shown)" : "");
      div.appendChild(name);
      const c = document.createElement("canvas");
      div.appendChild(c);
      box.appendChild(div);
      const n = Math.max(1, s.ranks.length);
      const width = Math.max(200, c.clientWidth || box.clientWidth);
      const cell = Math.max(3, Math.min(24, Math.floor((width - 4) / n)));
      const cols = Math.max(1, Math.floor((width - 4) / cell));
      const rows = Math.ceil(n / cols);
      const named = s.ranks.filter((r) => r.named);
      // A strip under the grid labels each late rank with its lag.
      const strip = named.length ? 18 : 0;
      const dpr = window.devicePixelRatio || 1;
      c.width = Math.round(width * dpr); c.height = Math.round((rows * cell + 4 + strip) * dpr);
      c.style.height = (rows * cell + 4 + strip) + "px";
      const g = c.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      s.ranks.forEach((r, i) => {
        const lag = r.median_lag_ms || 0;
        const a = Math.min(1, lag / maxLag);
        g.fillStyle = lag > 0 ? "rgba(224,65,58," + (0.15 + 0.85 * a).toFixed(3) + ")" : color("--idle");
        const x = 2 + (i % cols) * cell, y = 2 + Math.floor(i / cols) * cell;
        g.fillRect(x, y, cell - 1, cell - 1);
        if (r.named) { g.strokeStyle = "#fff"; g.strokeRect(x + 0.5, y + 0.5, cell - 2, cell - 2); }
      });
      if (strip) {
        g.font = "11px sans-serif";
        g.textBaseline = "middle";
        const top = rows * cell + 4;
        s.ranks.forEach((r, i) => {
          if (!r.named) return;
          const label = "rank " + r.rank + ": " + fmt(r.median_lag_ms, 0) + " ms late";
          const w = g.measureText(label).width;
          const cx = 2 + (i % cols) * cell + (cell - 1) / 2;
          const cy = 2 + Math.floor(i / cols) * cell + cell - 1;
          const lx = Math.min(Math.max(2, cx - w / 2), width - w - 2);
          g.strokeStyle = "rgba(224,65,58,1)";
          g.beginPath(); g.moveTo(cx, cy); g.lineTo(cx, top + 3); g.stroke();
          g.fillStyle = color("--fg");
          g.fillText(label, lx, top + strip / 2 + 2);
        });
      }
      for (const r of s.ranks.filter((r) => r.named)) {
        const p = document.createElement("div");
        p.className = "late";
        p.dataset.rank = String(r.rank);
        p.textContent = "rank " + r.rank + (r.node_id ? " (" + r.node_id + ")" : "") + " is " +
          fmt(r.median_lag_ms, 0) + " ms behind in " + (100 * r.behind_ratio).toFixed(0) + "% of steps" +
          (r.period_steps ? ", every " + r.period_steps + " steps" : "");
        div.appendChild(p);
      }
    }
  }

  function money(x, cur) {
    return Number(x).toFixed(2) + " " + cur;
  }

  function renderCost(v) {
    const body = $("cost").tBodies[0];
    const rows = [];
    const totals = [];
    for (const c of v.waiting_cost || []) {
      totals.push(money(c.barrier_per_hour + c.stragglers_per_hour, c.currency) + "/h");
      rows.push(["GPUs idle at NCCL barriers", c.barrier_idle_gpus.toFixed(2), money(c.barrier_per_hour, c.currency)]);
      for (const s of c.stragglers) {
        rows.push(["straggler " + s.node_id + " (" + s.provider + " " + s.gpu_model + ")",
          String(s.affected_gpus), money(s.per_hour, c.currency)]);
      }
    }
    setCard("cost-now", totals.length ? totals.join(" + ") : "-");
    body.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const t of cells) { const td = document.createElement("td"); td.textContent = t; tr.appendChild(td); }
      return tr;
    }));
    $("cost-empty").hidden = rows.length > 0;
    $("cost").hidden = rows.length === 0;
  }

  $("pick").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = $("token").value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    $("token-box").hidden = true;
    const typed = $("cluster-input").value.trim();
    if (!$("cluster-input").hidden && typed) cluster = typed;
    tick();
  });
  $("cluster-select").addEventListener("change", (e) => {
    cluster = e.target.value;
    const u = new URL(location.href);
    u.searchParams.set("cluster_id", cluster);
    history.replaceState(null, "", u);
    tick();
  });
  $("cluster-input").addEventListener("change", (e) => { cluster = e.target.value.trim(); tick(); });
  window.addEventListener("resize", () => { if (last) render(last); });
  $("poll").textContent = (POLL_MS / 1000) + " s";
  loadClusters().finally(tick);
})();
