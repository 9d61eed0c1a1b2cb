// The operators' console (issue 12). One module, no framework, no build step: it reads the same
// endpoints a script would (/v1/members, /v1/map, /v1/ownership, /v1/agreement, /v1/owners,
// /v1/balancing) and
// follows /v1/events as server-sent events. The partition map is drawn on a canvas from one
// binary body (placement/service/console/summary.py, map_payload): 65,536 partitions are 65,536 pixels,
// not 65,536 DOM nodes.

const $ = (id) => document.getElementById(id);
const MEMBERS_EVERY_MS = 2000;
const OWNERSHIP_EVERY_MS = 2000;
// Load figures are gathered every --load-aware SECONDS / 2 (at least 1 s) and plans are rarer.
const BALANCING_EVERY_MS = 5000;
// Each refresh makes the node ask every member (a few ms of CPU per member: BENCHMARKS.md), so
// it is rare, plus once the cluster has had a moment to converge after a placement change.
const AGREEMENT_EVERY_MS = 30000;
const AGREEMENT_AFTER_CHANGE_MS = 1500;
const TIMELINE_MAX = 300;
const MEMBER_KINDS = new Set(["joined", "updated", "suspect", "alive", "dead", "left"]);

const state = {
  members: [],            // /v1/members
  lastChange: new Map(),  // member id -> wall seconds of its last membership event seen
  map: null,              // {header, owners (Int32Array), width, ids, leads (Int32Array), colours}
  etag: null,
  selected: null,         // pinned partition (click), or null
  membersHtml: "",
};

// At most one run of `load` at a time; calls meanwhile make it run once more afterwards. A burst
// of events (the backlog an EventSource gets on connecting: 300 events) costs one fetch, not 300.
function coalesced(load) {
  let running = null, again = false;
  const run = () => {
    if (running) { again = true; return running; }
    running = load().finally(() => {
      running = null;
      if (again) { again = false; run().catch(report); }
    });
    return running;
  };
  return run;
}

// The members table is rebuilt at most once per frame, however many events arrive in it.
let renderPending = false;
function renderSoon() {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => {
    renderPending = false;
    renderMembers(false);
    state.memberEventAt = wallNow();  // when the last membership events reached the table
  });
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error((body && body.detail) || `${path}: HTTP ${r.status}`);
  return body;
}

// Wall-clock milliseconds (the same clock as the node's event times), for benchmarks/bench_console.py.
const wallNow = () => performance.timeOrigin + performance.now();

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// Seconds since the node last heard from a member (from /v1/members; blank: never, or itself).
function heard(s) {
  if (s === null || s === undefined) return "";
  return s < 10 ? `${s.toFixed(1)} s` : s < 5400 ? `${s.toFixed(0)} s` : `${(s / 3600).toFixed(1)} h`;
}

function ago(at) {
  if (!at) return "";
  const s = Math.max(0, Date.now() / 1000 - at);
  return s < 90 ? `${s.toFixed(0)} s ago` : s < 5400 ? `${(s / 60).toFixed(0)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
}

// ----- colours: one per member index, spread by the golden angle so neighbours differ ---------
function colour(i) {
  const h = (i * 137.508) % 360, s = 0.65, l = i % 2 ? 0.45 : 0.6;
  const f = (n) => {
    const k = (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}
const css = ([r, g, b]) => `rgb(${r},${g},${b})`;

// ----- the partition map ----------------------------------------------------------------------
const loadMap = coalesced(fetchMap);
async function fetchMap() {
  const r = await fetch("/v1/map", { headers: state.etag ? { "If-None-Match": state.etag } : {} });
  if (r.status === 304) return;
  if (!r.ok) throw new Error(`/v1/map: HTTP ${r.status}`);
  const buf = await r.arrayBuffer();
  const n = new DataView(buf).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, n)));
  const owners = new Int32Array(buf, 4 + n);
  const ids = header.members.map((m) => m[0]);
  const width = header.owners_width;
  const leads = new Int32Array(ids.length);
  for (let p = 0; p < header.partitions; p++) if (width && owners[p * width] >= 0) leads[owners[p * width]]++;
  state.map = { header, owners, width, ids, leads, colours: ids.map((_, i) => colour(i)) };
  state.etag = r.headers.get("ETag");
  $("summary").textContent = `${ids.length} members · ${header.partitions} partitions × ${header.replicas} · ` +
    `placement ${header.checksum.slice(0, 12)}`;
  drawMap();
  renderLegend();
  renderMembers(true);
  showPartition(state.selected);
  state.mapAt = wallNow();  // when this snapshot's map was drawn
}

function geometry() {
  const P = state.map.header.partitions, side = Math.ceil(Math.sqrt(P));
  return { P, side, cell: Math.max(1, Math.floor(512 / side)) };
}

function drawMap() {
  const { P, side, cell } = geometry(), { owners, width, colours } = state.map;
  const canvas = $("map");
  canvas.width = canvas.height = side * cell;
  const img = new ImageData(side, side), px = img.data;
  for (let p = 0; p < P; p++) {
    const o = width ? owners[p * width] : -1, c = o >= 0 ? colours[o] : [200, 200, 200];
    px[4 * p] = c[0]; px[4 * p + 1] = c[1]; px[4 * p + 2] = c[2]; px[4 * p + 3] = 255;
  }
  const off = document.createElement("canvas");
  off.width = off.height = side;
  off.getContext("2d").putImageData(img, 0, 0);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, side * cell, side * cell);
  state.mapImage = off;
  markSelected();
}

function markSelected() {
  if (state.selected === null || !state.map) return;
  const { side, cell } = geometry(), ctx = $("map").getContext("2d");
  const x = (state.selected % side) * cell, y = Math.floor(state.selected / side) * cell, r = Math.max(cell, 4);
  ctx.strokeStyle = "#000";
  ctx.lineWidth = 2;
  ctx.strokeRect(x - r, y - r, cell + 2 * r, cell + 2 * r);
}

function partitionAt(event) {
  if (!state.map) return null;
  const canvas = $("map"), rect = canvas.getBoundingClientRect(), { P, side, cell } = geometry();
  const x = Math.floor((event.clientX - rect.left) * canvas.width / rect.width / cell);
  const y = Math.floor((event.clientY - rect.top) * canvas.height / rect.height / cell);
  const p = y * side + x;
  return x >= 0 && x < side && p >= 0 && p < P ? p : null;
}

function replicasOf(p) {
  const { owners, width, ids } = state.map;
  return Array.from(owners.subarray(p * width, (p + 1) * width)).filter((i) => i >= 0).map((i) => ids[i]);
}

function showPartition(p) {
  if (p === null || !state.map) return;
  const names = replicasOf(p).map((id, k) =>
    `<span class="swatch" style="background:${css(state.map.colours[state.map.ids.indexOf(id)])}"></span>` +
    `${esc(id)}${k === 0 ? " (leader)" : ""}`);
  $("partition-info").innerHTML = `partition <b>${p}</b>: ${names.join(", ") || "no owner"}` +
    (state.selected === p ? " (pinned; click again to unpin)" : "");
}

function renderLegend() {
  const { ids, leads, colours } = state.map;
  const order = ids.map((_, i) => i).sort((a, b) => leads[b] - leads[a]).slice(0, 24);
  $("legend").innerHTML = order.map((i) => `<span class="item"><span class="swatch" style="background:` +
    `${css(colours[i])}"></span>${esc(ids[i])} ${leads[i]}</span>`).join("") +
    (ids.length > order.length ? ` … and ${ids.length - order.length} more` : "");
}

// ----- members --------------------------------------------------------------------------------
const loadMembers = coalesced(fetchMembers);
async function fetchMembers() {
  state.members = await getJSON("/v1/members");
  renderMembers(false);
}

function renderMembers(force) {
  const leads = new Map();
  if (state.map) state.map.ids.forEach((id, i) => leads.set(id, state.map.leads[i]));
  const counts = {};
  const rows = state.members.slice().sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((m) => {
    counts[m.status] = (counts[m.status] || 0) + 1;
    const tags = Object.entries(m.tags).map(([k, v]) => `${k}=${v}`).join(" ");
    return `<tr data-member="${esc(m.id)}" data-status="${esc(m.status)}"><td>${esc(m.id)}</td>` +
      `<td class="status">${esc(m.status)}</td><td class="num">${m.incarnation}</td><td class="num">${m.weight}</td>` +
      `<td class="num">${leads.get(m.id) ?? 0}</td><td class="num">${heard(m.heard_s_ago)}</td>` +
      `<td>${ago(state.lastChange.get(m.id))}</td>` +
      `<td>${esc(m.gossip)}</td><td>${esc(m.http)}</td><td>${esc(tags)}</td></tr>`;
  }).join("");
  if (force || rows !== state.membersHtml) {
    state.membersHtml = rows;
    document.querySelector("#members tbody").innerHTML = rows;
    if (rows) state.membersAt = wallNow();  // when the members table last changed
  }
  $("member-counts").textContent = Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(" · ");
}

// A membership event updates its row at once; the next poll of /v1/members confirms it.
function applyMemberEvent(event) {
  state.lastChange.set(event.member, event.at);
  const m = state.members.find((x) => x.id === event.member);
  const status = { joined: "alive", alive: "alive", suspect: "suspect", dead: "dead", left: "left" }[event.kind];
  if (m && status) m.status = status;
  else if (!m) loadMembers().catch(report);
  renderSoon();
}

// ----- ownership and agreement ---------------------------------------------------------------
function ranges(list) {
  const out = [];
  for (let i = 0; i < list.length; i++) {
    let j = i;
    while (j + 1 < list.length && list[j + 1] === list[j] + 1) j++;
    out.push(i === j ? `${list[i]}` : `${list[i]}-${list[j]}`);
    i = j;
  }
  return out.length > 40 ? out.slice(0, 40).join(", ") + ` … (${out.length} ranges)` : out.join(", ");
}

const loadOwnership = coalesced(fetchOwnership);
async function fetchOwnership() {
  const o = await getJSON("/v1/ownership");
  const listed = (ps) => (ps.length ? `${ps.length}: ${ranges(ps)}` : "0");
  const rows = [["mode", o.mode], ["owned", listed(o.owned)], ["releasing", listed(o.releasing)], ["waiting", o.waiting],
    ["paused", o.paused ?? "no"], ["lease", o.lease_valid_for_s == null ? "-" : `${o.lease_valid_for_s.toFixed(2)} s left`]];
  // What the cluster survives (exclusive mode, once a stable view is held): a warning when one
  // crash would stop all work, with what to add.
  const s = o.survival;
  if (s) rows.push(["witnesses", `${s.witnesses.join(", ")}${o.votes ? " (this node votes)" : ""}`],
    ["survives", s.summary], ["split", s.split]);
  $("ownership").innerHTML = rows.map(([k, v]) =>
    `<dt>${k}</dt><dd${k === "survives" && s.warning ? ' class="warning"' : ""}>${esc(v)}</dd>`).join("");
  // Gossip without keys (no --key-file): what it allows and the fix, above everything else.
  const banner = $("security-warning");
  banner.hidden = !o.security_warning;
  banner.textContent = o.security_warning ? `WARNING: ${o.security_warning}` : "";
}

async function loadAgreement() {
  const a = await getJSON("/v1/agreement");
  const verdict = $("agreement-verdict");
  verdict.dataset.agree = a.agree;
  const unconfirmed = a.unconfirmed || [];
  verdict.textContent = a.agree ? `all ${a.members.length - a.unreachable.length} answering agree` :
    Object.keys(a.checksums).length <= 1 && unconfirmed.length ?
      `UNCONFIRMED: cannot reach ${unconfirmed.join(", ")} (stable view)` :
      `DISAGREE: ${Object.keys(a.checksums).length} checksums`;
  document.querySelector("#agreement tbody").innerHTML = a.members.map((m) => {
    const differs = m.checksum !== null && m.checksum !== a.majority;
    const note = m.checksum === null ? `unreachable: ${m.error}` : differs ? "differs" : "";
    return `<tr data-member="${esc(m.id)}"><td>${esc(m.id)}</td><td>${esc((m.checksum || "").slice(0, 16))}</td>` +
      `<td class="${m.checksum === null || differs ? "differs" : ""}">${esc(note)}</td></tr>`;
  }).join("");
}

// ----- load-aware weights (GET /v1/balancing) -------------------------------------------------
const num = (x, digits = 3) => (x === null || x === undefined ? "–" : String(+x.toFixed(digits)));
const clock = (at) => (at ? new Date(at * 1000).toLocaleTimeString() : "–");

const loadBalancing = coalesced(fetchBalancing);
async function fetchBalancing() {
  const b = await getJSON("/v1/balancing");
  state.balancing = b;
  const note = $("load-note"), verdict = $("load-verdict");
  $("load-detail").hidden = !b.load_aware;
  note.classList.toggle("off", !b.load_aware);
  if (!b.load_aware) {  // one plain sentence, no empty tables
    verdict.textContent = "off";
    note.textContent = b.note;
    return;
  }
  const f = b.figures;
  verdict.textContent = `by ${b.by} every ${num(b.every_s)} s · ${b.plans} plans · ${b.pinned} partitions pinned · ` +
    `move budget left ${num(100 * (b.budget_left || 0), 1)} % of the partitions`;
  note.textContent = [`${b.note}.`, f ? `Figures of ${clock(f.at)} (round ${f.round}); mean ${num(f.mean)} work/s` +
    (f.unanswered.length ? `; no answer from ${f.unanswered.join(", ")}: their partitions read as idle.` : ".") :
    "No figures gathered yet.", `Hot (red): load/mean above ${num(b.trigger)}, the planner's trigger.`].join(" ");
  document.querySelector("#load tbody").innerHTML = b.members.map((m) => {
    const hot = m.load_over_mean !== null && m.load_over_mean > b.trigger;
    const load = m.answered === false ? `<td class="num unanswered">${num(m.load)} (no answer)</td>` :
      `<td class="num">${num(m.load)}</td>`;
    return `<tr data-member="${esc(m.id)}"${hot ? ' class="hot"' : ""}><td>${esc(m.id)}</td>${load}` +
      `<td class="num">${num(m.load_over_mean)}</td><td class="num">${num(m.weight, 4)}</td>` +
      `<td class="num">${num(m.placed_weight, 4)}</td><td class="num">${num(m.planned_weight, 4)}</td></tr>`;
  }).join("");
  document.querySelector("#plans tbody").innerHTML = b.steps.slice().reverse().map((s) => {
    const changes = Object.entries(s.weights).map(([id, w]) => `${id} ${num(w.old, 4)} → ${num(w.new, 4)}`)
      .concat((s.moves || []).map((m) => `p${m.partition} ${m.old} → ${m.new}`));
    if (s.moves && s.moves.length < s.moved) changes.push(`+${s.moved - s.moves.length} more`);
    const views = s.count > 1 ? `${s.first_view}–${s.view} (${s.count} plans)` : `${s.view}`;
    return `<tr data-changed="${s.changed}"><td>${clock(s.at)}</td><td class="num">${esc(views)}</td>` +
      `<td>${clock(s.loads_at)}</td><td>${num(s.max_over_mean_before)} → ${num(s.max_over_mean_after)}</td>` +
      `<td class="num">${s.moved} of ${s.partitions}</td><td>${esc(changes.join(", ") || "none")}</td>` +
      `<td>${esc(s.own)}</td><td>${esc(s.reason)}</td></tr>`;
  }).join("") || `<tr><td colspan="8">no plan yet: the first comes once a stable view commits figures</td></tr>`;
}

// ----- events ---------------------------------------------------------------------------------
function addEvent(event) {
  const li = document.createElement("li");
  li.value = event.seq;
  li.dataset.kind = event.kind;
  li.textContent = `${new Date(event.at * 1000).toLocaleTimeString()} ${event.kind} ${event.member} ${event.detail}`;
  const list = $("timeline");
  list.prepend(li);
  while (list.childElementCount > TIMELINE_MAX) list.lastElementChild.remove();
  if (MEMBER_KINDS.has(event.kind)) applyMemberEvent(event);
  if (event.kind === "placement") {
    loadMap().catch(report);
    loadBalancing().catch(report);
    clearTimeout(state.agreementTimer);
    state.agreementTimer = setTimeout(() => loadAgreement().catch(report), AGREEMENT_AFTER_CHANGE_MS);
  }
  if (event.kind === "ownership" || event.kind === "survival") loadOwnership().catch(report);
}

function follow() {
  const source = new EventSource(`/v1/events?limit=${TIMELINE_MAX}`);
  source.onopen = () => { $("connection").dataset.state = "live"; $("connection").textContent = "live"; };
  source.onerror = () => { $("connection").dataset.state = "lost"; $("connection").textContent = "reconnecting…"; };
  source.onmessage = (e) => addEvent(JSON.parse(e.data));
}

function report(error) {
  $("connection").dataset.state = "lost";
  $("connection").textContent = String(error.message || error);
}

function every(ms, load) {
  const run = () => load().catch(report).finally(() => setTimeout(run, ms));
  run();
}

// ----- wiring ---------------------------------------------------------------------------------
function wire() {
  const canvas = $("map");
  canvas.addEventListener("mousemove", (e) => { if (state.selected === null) showPartition(partitionAt(e)); });
  canvas.addEventListener("click", (e) => {
    const p = partitionAt(e);
    state.selected = p === state.selected ? null : p;
    if (state.mapImage) drawMap();
    showPartition(p);
  });
  $("key-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = $("key").value;
    const out = $("key-result");
    try {
      const o = await getJSON(`/v1/owners?key=${encodeURIComponent(key)}`);
      out.className = "";
      out.textContent = `${JSON.stringify(key)} → partition ${o.partition} → ${o.owners.map((x) => x.id).join(", ")}`;
      state.selected = o.partition;
      if (state.map) { drawMap(); showPartition(o.partition); }
    } catch (error) {
      out.className = "error";
      out.textContent = String(error.message || error);
    }
  });
}

async function main() {
  wire();
  const health = await getJSON("/healthz").catch(() => ({ node: "?" }));
  $("node").textContent = health.node;
  document.title = `placement ${health.node}`;
  await loadMap().catch(report);
  await loadMembers().catch(report);  // first paint before the agreement fan-out loads the node
  every(MEMBERS_EVERY_MS, loadMembers);
  every(OWNERSHIP_EVERY_MS, loadOwnership);
  every(AGREEMENT_EVERY_MS, loadAgreement);
  every(BALANCING_EVERY_MS, loadBalancing);
  every(5000, loadMap);  // placement events trigger it too; this catches a missed one
  follow();
  setInterval(() => renderMembers(true), 5000);  // "last change" ages
  window.consoleState = state;  // for the browser test and for poking around in devtools
}

main();
