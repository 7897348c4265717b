// tsdht's node page: polls /api/v1/cluster and redraws the map; plots a series from
// /api/v1/agg at one bucket per pixel column (min/max band, mean line).
"use strict";
(function () {
  const $ = (s) => document.querySelector(s);
  const POLL_MS = 3000, PLOT_MS = 5000;

  function size(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + " " + u[i];
  }
  function esc(s) { return String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";"); }
  // The angle of a 160-bit ID on the ring: its first 32 bits as a fraction of a turn.
  function angle(id) { return parseInt(id.slice(0, 8), 16) / 4294967296 * 2 * Math.PI - Math.PI / 2; }

  function drawCluster(c) {
    const ms = c.members || [];
    const live = ms.filter((m) => m.state === "alive").length;
    $("#summary").textContent = `${ms.length} members · ${live} alive · rf ${c.rf || "?"}`;
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
    const note = $("#note");
    note.hidden = !c.note; note.textContent = c.note || "";
    const dash = "–";
    $("#members tbody").innerHTML = ms.map((m) => {
      const k = m.reachable;
      return `<tr data-node="${esc(m.node_id)}" data-state="${esc(m.state)}">` +
        `<td class="id" title="${esc(m.node_id)}">${esc(m.node_id)}</td><td>${esc(m.rpc)}</td>` +
        `<td class="state state-${esc(m.state)}">${esc(m.state)}</td>` +
        `<td class="num">${k ? m.shards : dash}</td><td class="num">${k ? m.points.toLocaleString() : dash}</td>` +
        `<td class="num">${k ? size(m.disk_bytes) : dash}</td><td class="num">${k ? m.under_replicated : dash}</td></tr>`;
    }).join("");
    drawUplinks(c.uplinks || []);
    // The ring: every member at its ID's place on the 160-bit circle.
    let svg = `<circle r="90" fill="none" stroke="#bbb" stroke-width="2"/>`;
    for (const m of ms) {
      const a = angle(m.node_id), x = 90 * Math.cos(a), y = 90 * Math.sin(a);
      const col = m.state === "alive" ? "#2a8a3a" : (m.state === "dead" ? "#c0392b" : "#d68910");
      svg += `<g><title>${esc(m.node_id)} ${esc(m.state)}</title><circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="7" fill="${col}"/>` +
        `<text x="${(x * 0.78).toFixed(1)}" y="${(y * 0.78 + 3).toFixed(1)}" font-size="9" text-anchor="middle">${esc(m.node_id.slice(0, 4))}</text></g>`;
    }
    svg += `<text y="4" font-size="10" text-anchor="middle" fill="#777">0 … 2¹⁶⁰</text>`;
    $("#ring").innerHTML = svg;
    // Shard balance: (shard, series) pairs per member.
    const max = Math.max(1, ...ms.map((m) => (m.reachable ? m.shards : 0)));
    $("#balance").innerHTML = ms.map((m) =>
      `<div class="bar${m.reachable ? "" : " dead"}"><span class="label" title="${esc(m.node_id)}">${esc(m.node_id.slice(0, 8))}</span>` +
      `<span class="fill" style="width:${m.reachable ? (60 * m.shards / max).toFixed(1) : 0}%"></span>` +
      `<span>${m.reachable ? m.shards : "–"}</span></div>`).join("");
  }

  // Uplinks: one row per member and uplink, as `tsdht status` lists them; the node
  // that forwards a series shows it in its note (or the last error).
  function drawUplinks(ups) {
    $("#uplinks").hidden = ups.length === 0;
    const every = (ns) => (ns ? (ns / 1e9) + " s" : "raw");
    $("#uplinktable tbody").innerHTML = ups.map((u) => {
      const note = u.last_error ? u.last_error : (u.forwarding || []).join(" ");
      return `<tr data-node="${esc(u.node_id)}" data-uplink="${esc(u.id)}" data-series="${u.series}" data-sent="${u.sent_points}">` +
        `<td class="url">${esc(u.url)}</td><td>${every(u.every_ns)}</td>` +
        `<td class="id" title="${esc(u.node_id)}">${esc(u.node_id.slice(0, 8))}</td>` +
        `<td class="num">${u.series}</td><td class="num lag">${u.lag_seconds.toFixed(1)} s</td>` +
        `<td class="num">${u.lag_points.toLocaleString()}</td><td class="num sent">${u.sent_points.toLocaleString()}</td>` +
        `<td class="num">${size(u.sent_bytes)}</td><td class="num">${u.retries}</td><td class="num">${u.rejected_points}</td>` +
        `<td class="num">${u.late_windows}</td><td class="num">${u.never_forwarded_points}</td>` +
        `<td class="fwd${u.last_error ? " err" : ""}" title="${esc(note)}">${esc(note)}</td></tr>`;
    }).join("");
  }

  async function pollCluster() {
    try {
      const r = await fetch("api/v1/cluster");
      const c = await r.json();
      if (!r.ok) throw new Error(c.error || r.statusText);
      drawCluster(c);
    } catch (e) {
      $("#summary").textContent = "cannot reach the node: " + e.message;
    }
  }

  // The picker: series whose key starts with what is typed (the catalog, when the node has
  // one), offered by the key box's <datalist>. An answer to an older prefix is dropped.
  let catalog = true, asked = 0;
  async function loadKeys() {
    if (!catalog) return;
    const prefix = $("#key").value.trim(), n = ++asked;
    try {
      const r = await fetch("api/v1/series?prefix=" + encodeURIComponent(prefix));
      const j = await r.json();
      if (n !== asked) return;
      catalog = j.available;
      const list = $("#keys");
      list.innerHTML = (j.series || []).map((s) =>
        `<option value="${esc(s.key)}">${esc([s.unit, s.description].filter(Boolean).join(" · "))}</option>`).join("");
      list.dataset.prefix = prefix; // what the options answer, for tests
    } catch (e) { /* the picker still takes a typed key */ }
  }
  let keysT = null;
  $("#key").addEventListener("input", () => { clearTimeout(keysT); keysT = setTimeout(loadKeys, 250); });
  $("#key").addEventListener("focus", loadKeys);

  function metaText(m) {
    if (!m) return "";
    const parts = [];
    if (m.unit) parts.push("unit " + m.unit);
    if (m.description) parts.push(m.description);
    if (m.nominal_rate) parts.push(m.nominal_rate + " Hz nominal");
    const tags = Object.entries(m.tags || {}).map(([k, v]) => k + "=" + v);
    if (tags.length) parts.push(tags.join(", "));
    if (m.first && m.last) parts.push("written within " + new Date(m.first / 1e6).toISOString() + " … " + new Date(m.last / 1e6).toISOString());
    return parts.join(" · ");
  }

  let plot = null, timer = null;
  // The plot takes the width #plot has, whatever the screen: #plot clips what is wider
  // (CSS), so a plot drawn for a wider screen never widens the page, and is redrawn.
  function plotWidth() { return Math.max(120, Math.floor($("#plot").clientWidth)); }
  function plotHeight(width) { return Math.min(360, Math.max(220, Math.round(width * 0.45))); }
  window.tsdhtPlot = null; // what the plot shows, for people and tests: from, to, n, xmin, xmax

  async function drawPlot() {
    const key = $("#key").value.trim();
    if (!key) return;
    const span = Number($("#range").value);
    const el = $("#plot");
    const width = plotWidth();
    const buckets = Math.min(4096, Math.round(width));
    const toMs = Date.now(), fromMs = toMs - span * 1000;
    const q = `series=${encodeURIComponent(key)}&from=${fromMs}000000&to=${toMs}000000&buckets=${buckets}`;
    let a;
    try {
      const r = await fetch("api/v1/agg?" + q);
      a = await r.json();
      if (!r.ok) throw new Error(a.error || r.statusText);
    } catch (e) {
      $("#meta").textContent = "cannot plot " + key + ": " + e.message;
      return;
    }
    const xs = a.t.map((t) => t / 1e9 + a.every / 2e9);
    $("#meta").textContent = `${a.series} · ${a.type} · ${a.points.toLocaleString()} points in range · ` +
      `${xs.length} buckets of ${(a.every / 1e9).toPrecision(3)} s (min/max band, mean line)` +
      (a.partial ? " · PARTIAL: some shard had no reachable replica" : "");
    $("#seriesmeta").textContent = metaText(a.meta);
    const data = [xs, a.min || [], a.max || [], a.mean || []];
    const opts = {
      width, height: plotHeight(width),
      scales: { x: { time: true, range: [fromMs / 1000, toMs / 1000] } },
      series: [
        {},
        { label: "min", stroke: "rgba(45,108,223,0.5)", width: 1 },
        { label: "max", stroke: "rgba(45,108,223,0.5)", width: 1 },
        { label: "mean", stroke: "#1f3f8f", width: 2 },
      ],
      bands: [{ series: [2, 1], fill: "rgba(45,108,223,0.18)" }],
      axes: [{}, { size: 60 }],
    };
    if (plot) plot.destroy();
    plot = new uPlot(opts, data, el);
    window.tsdhtPlot = {
      series: key, from: fromMs / 1000, to: toMs / 1000, buckets, n: xs.length, points: a.points,
      xmin: xs.length ? xs[0] : null, xmax: xs.length ? xs[xs.length - 1] : null,
      get scaleMin() { return plot.scales.x.min; }, get scaleMax() { return plot.scales.x.max; },
    };
    location.hash = "series=" + encodeURIComponent(key) + "&range=" + span;
  }

  // Live mode: the raw points of the range from /api/v1/stream (server-sent events of a
  // watch: history, then each new point once), the oldest dropped as they leave the range.
  const LIVE_MAX = 200000; // points kept in the browser
  let live = null;
  window.tsdhtLive = null; // what live mode shows, for people and tests: series, n, late
  function stopLive() { if (live) { live.close(); live = null; } }
  function startLive() {
    stopLive();
    clearInterval(timer);
    const key = $("#key").value.trim();
    if (!key) return;
    const span = Number($("#range").value);
    const xs = [], ys = [];
    const width = plotWidth();
    if (plot) plot.destroy();
    plot = new uPlot({
      width, height: plotHeight(width), scales: { x: { time: true } },
      series: [{}, { label: "value", stroke: "#1f3f8f", width: 1 }], axes: [{}, { size: 60 }],
    }, [xs, ys], $("#plot"));
    const state = window.tsdhtLive = { series: key, n: 0, late: 0 };
    let drawT = null;
    const es = live = new EventSource("api/v1/stream?series=" + encodeURIComponent(key) + "&from=-" + span + "s");
    es.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      for (let i = 0; i < ev.t.length; i++) {
        const x = ev.t[i] / 1e9, y = typeof ev.v[i] === "number" ? ev.v[i] : NaN;
        if (ev.late) { // in its place: the plot's x must ascend
          let j = xs.length;
          while (j > 0 && xs[j - 1] > x) j--;
          xs.splice(j, 0, x); ys.splice(j, 0, y);
          state.late++;
        } else { xs.push(x); ys.push(y); }
      }
      let cut = 0;
      const oldest = Date.now() / 1000 - span;
      while (cut < xs.length && (xs[cut] < oldest || xs.length - cut > LIVE_MAX)) cut++;
      if (cut) { xs.splice(0, cut); ys.splice(0, cut); }
      state.n = xs.length;
      $("#meta").textContent = `${key} · live · ${xs.length.toLocaleString()} points` + (state.late ? ` · ${state.late} late` : "");
      if (!drawT) drawT = setTimeout(() => { drawT = null; plot.setData([xs, ys]); }, 100);
    };
    es.onerror = () => {
      // The browser would ask again for the whole range on top of what is drawn:
      // start over instead, once the node answers again.
      if (live !== es) return;
      es.close();
      $("#meta").textContent = `${key} · live · reconnecting`;
      setTimeout(() => { if (live === es) startLive(); }, 1000);
    };
    location.hash = "series=" + encodeURIComponent(key) + "&range=" + span + "&live=1";
  }

  function startPlot() {
    if ($("#live").checked) { startLive(); return; }
    stopLive();
    clearInterval(timer);
    drawPlot();
    timer = setInterval(drawPlot, PLOT_MS);
  }

  $("#pick").addEventListener("submit", (e) => { e.preventDefault(); startPlot(); });
  $("#range").addEventListener("change", startPlot);
  $("#live").addEventListener("change", startPlot);
  // A change of #plot's width (a window resized, a phone turned, a layout that settles)
  // resizes the drawn plot at once, and asks again for one bucket per pixel column.
  let resizeT = null;
  new ResizeObserver(() => {
    if (!plot) return;
    const w = plotWidth();
    if (w === plot.width) return;
    plot.setSize({ width: w, height: plotHeight(w) });
    if (!live) { clearTimeout(resizeT); resizeT = setTimeout(drawPlot, 200); }
  }).observe($("#plot"));

  const h = new URLSearchParams(location.hash.slice(1));
  if (h.get("series")) {
    $("#key").value = h.get("series");
    if (h.get("range")) $("#range").value = h.get("range");
    $("#live").checked = h.get("live") === "1";
    startPlot();
  }
  pollCluster();
  setInterval(pollCluster, POLL_MS);
  loadKeys();
})();
