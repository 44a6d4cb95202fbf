"""The dashboard page served at ``GET /ui``: one self-contained HTML document (inline CSS and JS, no network
access beyond this gateway: ``/ui/stats``, and the playground's ``/v1/models``, ``/v1/chat/completions`` and
``/v1/tasks/*``), drawing its charts on ``<canvas>`` by hand.

The playground tries a prompt or a task against a served model: a chat streams into the page as it is decoded;
classify, summarize and extract show their JSON answer. With "draft first" (a gateway with ``[cascade]``) a chat
shows the draft model's stream at once and replaces it with the quality model's at its first piece (the draft stays
on screen until then: never an empty box). ``/ui?mode=chat&input=…&draft=1&run=1`` fills it in (and runs it)
from the address, so a link can share a try."""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tiankong gateway</title>
<style>
  :root { --bg: #0f1419; --card: #182029; --fg: #e6e6e6; --dim: #8a96a3; --a: #4fb3ff; --b: #ff9f43;
          --ok: #3ecf8e; --bad: #ff5c5c; --warn: #f5c542; }
  * { box-sizing: border-box; }
  body { margin: 0; padding: 16px 20px; background: var(--bg); color: var(--fg);
         font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
  header { display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap; margin-bottom: 12px; }
  h1 { font-size: 20px; margin: 0; }
  .dim { color: var(--dim); }
  .pill { padding: 2px 10px; border-radius: 10px; font-weight: 600; background: var(--card); }
  .pill.ok { color: var(--ok); } .pill.bad { color: var(--bad); } .pill.warn { color: var(--warn); }
  .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(140px, 1fr)); gap: 10px; }
  .card { background: var(--card); border-radius: 8px; padding: 10px 12px; }
  .card .v { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
  .card .k { color: var(--dim); font-size: 12px; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 10px;
            margin: 12px 0; }
  .chart { background: var(--card); border-radius: 8px; padding: 10px 12px; }
  .chart h2 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
  .chart canvas { width: 100%; height: 150px; display: block; }
  .legend span { margin-right: 12px; font-size: 12px; }
  .legend i { display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }
  table { width: 100%; border-collapse: collapse; background: var(--card); border-radius: 8px; }
  th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid #26313c;
           font-variant-numeric: tabular-nums; }
  th { color: var(--dim); font-weight: 500; font-size: 12px; }
  #auth { display: none; margin: 10px 0; }
  #playground { margin: 12px 0; }
  #playground .row { display: flex; gap: 8px; flex-wrap: wrap; margin-bottom: 8px; align-items: center; }
  #playground textarea { width: 100%; background: var(--bg); color: var(--fg); border: 1px solid #26313c;
                         border-radius: 6px; padding: 8px; font: inherit; }
  #pg-output { white-space: pre-wrap; min-height: 3em; background: var(--bg); border-radius: 6px; padding: 8px;
               margin: 8px 0 4px; }
  #error { color: var(--bad); min-height: 1.4em; }
</style>
</head>
<body>
<header>
  <h1>tiankong gateway</h1>
  <span id="status" class="pill">loading</span>
  <span class="dim">model <b id="model">-</b></span>
  <span class="dim">degradation <b id="level">-</b></span>
  <span class="dim">uptime <b id="uptime">-</b></span>
  <span class="dim" id="updated"></span>
</header>
<div id="auth">API key: <input id="key" type="password" size="40">
  <button id="save">use key</button> <span class="dim">(kept in this tab's sessionStorage only)</span></div>
<div id="error"></div>
<section class="cards">
  <div class="card"><div class="v" id="stat-tokens-per-s">-</div><div class="k">tokens/s (window)</div></div>
  <div class="card"><div class="v" id="stat-requests-per-s">-</div><div class="k">requests/s (window)</div></div>
  <div class="card"><div class="v" id="stat-ttft-p50">-</div><div class="k">TTFT p50</div></div>
  <div class="card"><div class="v" id="stat-ttft-p99">-</div><div class="k">TTFT p99</div></div>
  <div class="card"><div class="v" id="stat-latency-p99">-</div><div class="k">latency p99</div></div>
  <div class="card"><div class="v" id="stat-queue">-</div><div class="k">queue depth</div></div>
  <div class="card"><div class="v" id="stat-busy">-</div><div class="k">busy slots</div></div>
  <div class="card"><div class="v" id="stat-requests">-</div><div class="k">requests (total)</div></div>
  <div class="card"><div class="v" id="stat-tokens">-</div><div class="k">tokens (total)</div></div>
  <div class="card"><div class="v" id="stat-rejected">-</div><div class="k">429 (total)</div></div>
  <div class="card"><div class="v" id="stat-errors">-</div><div class="k">5xx (total)</div></div>
  <div class="card"><div class="v" id="stat-batch">-</div><div class="k">batch lines in flight / waiting</div></div>
  <div class="card"><div class="v" id="stat-batch-pending">-</div><div class="k">batch lines pending</div></div>
  <div class="card"><div class="v" id="stat-batch-running">-</div><div class="k">running batch</div></div>
</section>
<section class="charts">
  <div class="chart"><h2>Throughput</h2><canvas id="chart-throughput"></canvas>
    <div class="legend"><span><i style="background:var(--a)"></i>completion tokens/s</span></div></div>
  <div class="chart"><h2>Time to first token (trailing 30 s)</h2><canvas id="chart-ttft"></canvas>
    <div class="legend"><span><i style="background:var(--a)"></i>p50 s</span>
    <span><i style="background:var(--b)"></i>p99 s</span></div></div>
  <div class="chart"><h2>Queue depth</h2><canvas id="chart-queue"></canvas>
    <div class="legend"><span><i style="background:var(--a)"></i>waiting (max per interval)</span>
    <span><i style="background:var(--bad)"></i>429s</span></div></div>
  <div class="chart"><h2>Busy slots</h2><canvas id="chart-busy"></canvas>
    <div class="legend"><span><i style="background:var(--a)"></i>requests holding a slot (max per interval)</span>
    </div></div>
</section>
<section id="playground" class="chart">
  <h2>Playground</h2>
  <div class="row">
    <label>model <select id="pg-model"><option value="">(default)</option></select></label>
    <label>try <select id="pg-mode"><option value="chat">chat</option><option value="classify">classify</option>
      <option value="summarize">summarize</option><option value="extract">extract</option></select></label>
    <input id="pg-extra" size="48" placeholder="classify: labels a,b,c · extract: a JSON Schema">
    <label title="a gateway with [cascade]: the draft model's answer at once, replaced by the quality model's">
      <input type="checkbox" id="pg-draft"> draft first</label>
    <button id="pg-run">run</button> <button id="pg-stop">stop</button>
  </div>
  <textarea id="pg-input" rows="4" placeholder="a prompt, or the text of a task"></textarea>
  <div id="pg-output" data-state="idle"></div>
  <div id="pg-meta" class="dim"></div>
</section>
<table id="engines">
  <thead><tr><th>engine</th><th>models</th><th>state</th><th>in flight</th><th>queue</th><th>busy slots</th>
    <th>RSS</th><th>restarts</th></tr></thead>
  <tbody id="engine-rows"><tr><td colspan="8" class="dim">loading</td></tr></tbody>
</table>
<p class="dim">Polls <code>/ui/stats</code> every 2 s; charts cover the last 5 minutes. Prometheus:
  <code>/metrics</code>.</p>
<script>
"use strict";
const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);
const keyFromHash = new URLSearchParams(location.hash.slice(1)).get("key");
if (keyFromHash) {
  sessionStorage.setItem("tiankong-key", keyFromHash); history.replaceState(null, "", "/ui" + location.search);
}

function fmt(x, digits) {
  if (x === null || x === undefined) return "-";
  if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString("en");
  return x.toFixed(digits === undefined ? 1 : digits);
}
function seconds(x) {
  if (x === null || x === undefined) return "-";
  return x < 1 ? Math.round(x * 1000) + " ms" : x.toFixed(2) + " s";
}
function bytes(x) {
  if (!x) return "-";
  return (x / 1048576).toFixed(0) + " MiB";
}
function duration(s) {
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? h + "h " + m + "m" : m + "m " + Math.floor(s % 60) + "s";
}

function drawChart(canvas, series, colors) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 400, h = canvas.clientHeight || 150;
  canvas.width = w * ratio; canvas.height = h * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, w, h);
  const left = 44, right = 8, top = 8, bottom = 18, span = 300;
  let max = 0;
  series.forEach((s) => s.forEach((p) => { if (p[1] !== null) max = Math.max(max, p[1]); }));
  max = max > 0 ? max * 1.15 : 1;
  g.strokeStyle = "#26313c"; g.fillStyle = "#8a96a3"; g.font = "11px system-ui"; g.lineWidth = 1;
  for (let k = 0; k <= 3; k++) {
    const y = top + (h - top - bottom) * k / 3;
    g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
    g.fillText(fmt(max * (3 - k) / 3, max < 3 ? 2 : 0), 2, y + 4);
  }
  g.fillText("-5 min", left, h - 4); g.fillText("now", w - right - 22, h - 4);
  const x = (t) => left + (w - left - right) * (1 + t / span);
  const y = (v) => top + (h - top - bottom) * (1 - v / max);
  series.forEach((s, i) => {
    g.strokeStyle = colors[i]; g.lineWidth = 2; g.beginPath();
    let pen = false;
    s.forEach((p) => {
      if (p[1] === null) { pen = false; return; }
      const px = x(p[0]), py = y(p[1]);
      if (pen) g.lineTo(px, py); else g.moveTo(px, py);
      pen = true;
    });
    g.stroke();
  });
  canvas.dataset.points = String(series.reduce((n, s) => n + s.filter((p) => p[1] !== null).length, 0));
}

function render(data) {
  const w = data.window, t = data.totals;
  const color = getComputedStyle(document.documentElement);
  const A = color.getPropertyValue("--a"), B = color.getPropertyValue("--b"), BAD = color.getPropertyValue("--bad");
  $("status").textContent = data.status; $("status").className = "pill " + (data.status === "ok" ? "ok" : "bad");
  $("model").textContent = data.model;
  const level = data.degradation ? data.degradation.level : 0;
  $("level").textContent = "L" + level;
  $("level").style.color = level ? "var(--warn)" : "var(--ok)";
  $("uptime").textContent = duration(data.uptime_s);
  $("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
  $("stat-tokens-per-s").textContent = fmt(w.tokens_per_s);
  $("stat-requests-per-s").textContent = fmt(w.requests_per_s, 2);
  $("stat-ttft-p50").textContent = seconds(w.ttft_p50_s);
  $("stat-ttft-p99").textContent = seconds(w.ttft_p99_s);
  $("stat-latency-p99").textContent = seconds(w.latency_p99_s);
  const queue = data.engines.reduce((n, e) => n + e.queue, 0);
  const busy = data.engines.reduce((n, e) => n + (e.busy_slots === null ? e.in_flight : e.busy_slots), 0);
  const slots = data.engines.reduce((n, e) => n + (e.slots === null ? e.limit : e.slots), 0);
  $("stat-queue").textContent = String(queue);
  $("stat-busy").textContent = busy + " / " + slots;
  $("stat-requests").textContent = String(t.requests);
  $("stat-tokens").textContent = String(t.tokens);
  $("stat-rejected").textContent = String(t.rejected);
  $("stat-errors").textContent = String(t.errors);
  const b = data.batches;
  $("stat-batch").textContent = b ? b.in_flight + " / " + b.waiting : "off";
  $("stat-batch-pending").textContent = b ? String(b.pending) : "-";
  $("stat-batch-running").textContent = b && b.running ? b.running.id.slice(0, 14) + "… " +
    b.running.request_counts.completed + " / " + b.running.request_counts.total : "-";
  const s = data.series, pick = (k) => s.map((p) => [p.t, p[k]]);
  drawChart($("chart-throughput"), [pick("tokens_per_s")], [A]);
  drawChart($("chart-ttft"), [pick("ttft_p50_s"), pick("ttft_p99_s")], [A, B]);
  drawChart($("chart-queue"), [pick("queue"), pick("rejected")], [A, BAD]);
  drawChart($("chart-busy"), [pick("busy")], [A]);
  const rows = data.engines.map((e) => {
    const cells = [e.name, e.models.join(", "), e.state, e.in_flight + " / " + e.limit,
      e.queue + " / " + e.queue_capacity, e.busy_slots === null ? "-" : e.busy_slots + " / " + e.slots,
      bytes(e.rss_bytes), String(e.restarts)];
    const tr = document.createElement("tr");
    tr.className = "engine";
    cells.forEach((c, i) => { const td = document.createElement("td"); td.textContent = c;
      if (i === 2) td.style.color = c === "ready" ? "var(--ok)" : "var(--bad)"; tr.appendChild(td); });
    return tr;
  });
  $("engine-rows").replaceChildren(...rows);
}

async function poll() {
  const key = sessionStorage.getItem("tiankong-key");
  const headers = key ? { "Authorization": "Bearer " + key } : {};
  try {
    const answer = await fetch("/ui/stats", { headers: headers, cache: "no-store" });
    if (answer.status === 401) {
      $("auth").style.display = "block"; $("error").textContent = "API key required"; return;
    }
    const data = await answer.json();
    if (!answer.ok) { $("error").textContent = data.error ? data.error.message : "HTTP " + answer.status; return; }
    $("error").textContent = ""; $("auth").style.display = "none";
    render(data);
  } catch (err) {
    $("error").textContent = "gateway unreachable: " + err;
    $("status").textContent = "unreachable"; $("status").className = "pill bad";
  }
}
$("save").addEventListener("click", () => { sessionStorage.setItem("tiankong-key", $("key").value); poll(); });
poll();
setInterval(poll, POLL_MS);
</script>
<script>
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  let running = null;
  function headers() {
    const key = sessionStorage.getItem("tiankong-key");
    return Object.assign({ "Content-Type": "application/json" }, key ? { "Authorization": "Bearer " + key } : {});
  }
  function show(text, state) {
    $("pg-output").textContent = text; $("pg-output").dataset.state = state;
  }
  async function models() {
    try {
      const answer = await fetch("/v1/models", { headers: headers() });
      if (!answer.ok) return;
      (await answer.json()).data.forEach((m) => {
        const option = document.createElement("option"); option.value = m.id; option.textContent = m.id;
        $("pg-model").appendChild(option);
      });
    } catch (err) { /* the dashboard shows the gateway's state */ }
  }
  function body(mode, text, extra, model) {
    const chosen = model ? { model: model } : {};
    if (mode === "chat") return ["/v1/chat/completions", Object.assign(chosen, {
      messages: [{ role: "user", content: text }], max_tokens: 256, stream: true,
      stream_options: { include_usage: true } }, $("pg-draft").checked ? { tiankong: { draft: true } } : {})];
    if (mode === "classify") return ["/v1/tasks/classify", Object.assign(chosen, {
      text: text, labels: extra.split(",").map((l) => l.trim()).filter((l) => l) })];
    if (mode === "extract") return ["/v1/tasks/extract", Object.assign(chosen, { text: text,
      schema: JSON.parse(extra || '{"type": "object"}') })];
    return ["/v1/tasks/summarize", Object.assign(chosen, { text: text })];
  }
  async function streamed(answer, started, drafting) {
    // draft then replace: the draft's text stays on screen until the quality model's first piece replaces it
    const reader = answer.body.getReader(), decoder = new TextDecoder();
    let text = "", rest = "", tokens = null, first = null, phase = drafting ? "draft" : "", replaced = null;
    let note = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += decoder.decode(value, { stream: true });
      const lines = rest.split("\\n"); rest = lines.pop();
      for (const line of lines) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const event = JSON.parse(line.slice(6));
        if (event.error) throw new Error(event.error.message || "the stream failed");
        if (event.object === "tiankong.replace") { phase = "replace"; continue; }
        if (event.object === "tiankong.final") { phase = ""; note = " · " + event.tiankong.warning; continue; }
        const piece = event.choices && event.choices[0] && event.choices[0].delta &&
          event.choices[0].delta.content;
        if (piece) {
          if (first === null) first = performance.now();
          if (phase === "replace") {
            text = ""; phase = ""; replaced = performance.now(); $("pg-output").dataset.replaced = "1";
          }
          text += piece; show(text, phase === "draft" ? "draft" : "streaming");
        }
        if (event.usage) tokens = event.usage.completion_tokens;
      }
    }
    show(text, "done");
    const ttft = first === null ? "-" : Math.round(first - started) + " ms";
    const swap = replaced === null ? "" : " · replaced at " + Math.round(replaced - started) + " ms";
    $("pg-meta").textContent = (tokens === null ? "" : tokens + " tokens · ") + "first token " + ttft + swap +
      " · " + Math.round(performance.now() - started) + " ms in all" + note;
  }
  async function run() {
    if (running) running.abort();
    const controller = new AbortController(); running = controller;
    const mode = $("pg-mode").value, text = $("pg-input").value, extra = $("pg-extra").value;
    show("", "running"); $("pg-meta").textContent = ""; delete $("pg-output").dataset.replaced;
    const started = performance.now();
    try {
      const [path, payload] = body(mode, text, extra, $("pg-model").value);
      const answer = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(payload),
                                         signal: controller.signal });
      if (!answer.ok) {
        const data = await answer.json().catch(() => ({}));
        show((data.error && data.error.message) || "HTTP " + answer.status, "error"); return;
      }
      if (mode === "chat") { await streamed(answer, started, $("pg-draft").checked); return; }
      show(JSON.stringify(await answer.json(), null, 2), "done");
      $("pg-meta").textContent = Math.round(performance.now() - started) + " ms";
    } catch (err) {
      show(err.name === "AbortError" ? "stopped" : String(err.message || err), err.name === "AbortError" ?
           "stopped" : "error");
    } finally { if (running === controller) running = null; }
  }
  $("pg-run").addEventListener("click", run);
  $("pg-stop").addEventListener("click", () => { if (running) running.abort(); });
  const asked = new URLSearchParams(location.search);
  for (const [name, id] of [["mode", "pg-mode"], ["input", "pg-input"], ["extra", "pg-extra"]]) {
    if (asked.has(name)) $(id).value = asked.get(name);
  }
  if (asked.get("draft") === "1") $("pg-draft").checked = true;
  models().then(() => {
    if (asked.has("model")) $("pg-model").value = asked.get("model");
    if (asked.get("run") === "1") run();
  });
})();
</script>
</body>
</html>
"""
