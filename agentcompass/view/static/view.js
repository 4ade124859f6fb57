// agentcompass view: live runs list and run grid, refreshed by polling the JSON endpoints every 2 s.
"use strict";
const REFRESH_MS = 2000;
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const pct = (x) => (x === null || x === undefined) ? "n/a" : (100 * x).toFixed(1) + " %";
const usd = (x) => (x === null || x === undefined) ? "unknown" : "$" + Number(x).toFixed(4);
const perSolved = (r) => !r.cost_known ? "unknown" : r.solved ? usd(r.cost_per_solved_usd) : "n/a (none solved)";
const ci = (iv) => iv ? ` (${pct(iv[0])} – ${pct(iv[1])})` : "";
const q = encodeURIComponent;

async function getJSON(url) {
  const response = await fetch(url, {credentials: "same-origin"});
  if (!response.ok) throw new Error(url + ": " + response.status);
  return response.json();
}

function setupName(r) {
  const l = r.labels || {};
  return [l.model, l.reasoning, l.harness, l.env, r.settings].filter(Boolean).join(" · ") || r.name;
}

function errorsText(r) {
  const parts = Object.entries(r.errors_by_category || {}).map(([k, v]) => `${v} ${k}`);
  return parts.length ? parts.join(", ") : "0";
}

async function watchRuns() {
  const body = document.querySelector("#runs tbody");
  const selected = new Set();
  const button = document.getElementById("compare-selected");
  button.onclick = () => { location.href = "/compare?" + [...selected].map((id) => "run=" + q(id)).join("&"); };
  async function tick() {
    const data = await getJSON("/api/runs");
    body.innerHTML = data.runs.map((r) => `<tr data-run="${esc(r.id)}">
      <td><input type="checkbox" class="pick" value="${esc(r.id)}" ${selected.has(r.id) ? "checked" : ""}></td>
      <td>${esc(r.sweep)}</td><td><a href="/run?run=${q(r.id)}">${esc(setupName(r))}</a><br><span class="muted">${esc(r.labels.benchmark)}</span></td>
      <td class="status status-${esc(r.status)}">${esc(r.status)}</td>
      <td class="progress">${r.trials}${r.trials_expected ? " / " + r.trials_expected : ""}</td>
      <td class="pass1">${pct(r.pass_at_1)}${ci(r.pass_at_1_interval)}<br><span class="muted">over ${r.pass_at_1_tasks} tasks${r.incomplete ? " · " + r.incomplete + " incomplete (infra)" : ""}</span></td>
      <td>${r.solved} / ${r.tasks_selected}</td><td>${perSolved(r)}</td><td>${esc(errorsText(r))}</td>
      <td>${r.report ? `<a href="${esc(r.report)}">report</a>` : ""}</td></tr>`).join("");
    body.querySelectorAll(".pick").forEach((box) => box.onchange = () => {
      box.checked ? selected.add(box.value) : selected.delete(box.value);
      button.disabled = selected.size < 2;
    });
  }
  await tick();
  setInterval(() => tick().catch(console.error), REFRESH_MS);
}

// What `agentcompass analyze` found (analysis.jsonl): the flags' detectors and the failure mode.
function analysisText(row) {
  const flags = (row.flags || []).length ? `<br><span class="flags">⚑ ${esc(row.flags.join(", "))}</span>` : "";
  return flags + (row.failure_mode ? `<br><span class="muted failure-mode">${esc(row.failure_mode)}</span>` : "");
}

function cellClass(row) {
  return row.status === "error" ? `error ${row.category || ""}` : row.status;
}

async function watchRun(runId) {
  const table = document.getElementById("grid");
  const k = Number(table.dataset.k);
  const filters = ["f-status", "f-category", "f-text", "f-flag"].map((id) => document.getElementById(id));
  let last = null;
  function render() {
    if (!last) return;
    const [status, category, text, flag] = filters.map((f) => f.value.trim().toLowerCase());
    const byTask = new Map();
    for (const row of last.rows) {
      if (!byTask.has(row.task)) byTask.set(row.task, []);
      byTask.get(row.task).push(row);
    }
    const attempts = Math.max(k, ...last.rows.map((r) => r.attempt));
    table.querySelector("thead").innerHTML = "<tr><th>task</th>" +
      Array.from({length: attempts}, (_, i) => `<th>attempt ${i + 1}</th>`).join("") + "</tr>";
    const keep = [...byTask.entries()].filter(([task, rows]) =>
      (!status || rows.some((r) => r.status === status)) &&
      (!category || rows.some((r) => r.category === category)) &&
      (!text || task.toLowerCase().includes(text) || rows.some((r) => (r.message || "").toLowerCase().includes(text))) &&
      (!flag || rows.some((r) => flag === "flagged" ? (r.flags || []).length > 0 : flag === "clean" ? r.flags && !r.flags.length : false)));
    keep.sort((a, b) => a[0].localeCompare(b[0]));
    table.querySelector("tbody").innerHTML = keep.map(([task, rows]) => {
      const cells = Array.from({length: attempts}, (_, i) => {
        const row = rows.find((r) => r.attempt === i + 1);
        if (!row) return "<td class='cell'></td>";
        const cost = row.cost_known && row.cost !== null ? "$" + row.cost.toFixed(4) : "cost unknown";
        const time = row.time !== null && row.time !== undefined ? row.time.toFixed(1) + " s" : "";
        return `<td class="cell ${esc(cellClass(row))}" data-task="${esc(task)}" data-attempt="${row.attempt}" data-status="${esc(row.status)}"
          title="${esc(row.message)}"><a href="/attempt?run=${q(runId)}&task=${q(task)}&n=${row.attempt}">${esc(row.status)}${row.category ? " (" + esc(row.category) + ")" : ""}</a>
          <br>${esc(cost)}<br>${esc(time)}${row.tampered ? "<br>⚠ tampering" : ""}${analysisText(row)}</td>`;
      }).join("");
      return `<tr><td>${esc(task)}</td>${cells}</tr>`;
    }).join("");
    document.getElementById("shown").textContent = `${keep.length} of ${byTask.size} tasks shown`;
    const s = last.summary;
    document.getElementById("headline").innerHTML = `
      <div>status<b class="status-${esc(s.status)}" id="run-status">${esc(s.status)}</b></div>
      <div>trials<b id="run-trials">${s.trials}${s.trials_expected ? " / " + s.trials_expected : ""}</b></div>
      <div>passed · failed · errors<b id="run-counts">${s.passed} · ${s.failed} · ${s.errors}</b></div>
      <div>pass@1 (95 % CI)<b>${pct(s.pass_at_1)}${ci(s.pass_at_1_interval)}</b><span class="muted">over ${s.pass_at_1_tasks} tasks${s.incomplete ? " · " + s.incomplete + " incomplete (infra)" : ""}</span></div>
      <div>solved<b>${s.solved} / ${s.tasks_selected}</b></div>
      <div>cost / solved<b>${perSolved(s)}</b></div>
      <div>errors<b>${esc(errorsText(s))}</b></div>`;
  }
  filters.forEach((f) => f.oninput = render);
  async function tick() { last = await getJSON("/api/rows?run=" + q(runId)); render(); }
  await tick();
  setInterval(() => tick().catch(console.error), REFRESH_MS);
}

// Started from here, not from an inline script: the content security policy allows this file's script only.
if (document.getElementById("runs")) watchRuns();
const grid = document.getElementById("grid");
if (grid) watchRun(grid.dataset.run);
