// deepctx HTML report: flame graph (d3-flame-graph), tree and flat tables, source lines, findings,
// timeline and diff. Everything comes from the JSON embedded in the page; nothing is fetched.
(function () {
  "use strict";
  const timings = {}; let lastMark = performance.now();
  const mark = (name) => { const t = performance.now(); timings[name] = Math.round(t - lastMark); lastMark = t; };
  const D = JSON.parse(document.getElementById("deepctx-data").textContent);
  mark("parse");
  const folding = foldState(D);
  if (folding && (folding.startup || folding.plumbing || folding.dispatch)) foldTree(D, folding);
  mark("fold");

  // What the toggles fold: the page's address (#show=startup,plumbing,dispatch) where a toggle was changed, else
  // what the report was written with. null for a page without flags (a diff).
  function foldState(D) {
    if (!D.nodes.flags) return null;
    const m = /(?:^#|&)show=([a-z,]*)/.exec(location.hash);
    if (!m) return { startup: D.fold.startup, plumbing: D.fold.plumbing, dispatch: D.fold.dispatch !== false };
    const show = m[1].split(",");
    return { startup: !show.includes("startup"), plumbing: !show.includes("plumbing"), dispatch: !show.includes("dispatch") };
  }
  // Folds the recorded tree in place, as profiles/tree.py does: flagged frames hand their children (and a
  // plumbing frame its self values) to another node, where children of the same frame and thread merge;
  // start-up frames left with nothing go. Parents keep smaller ids than their children. Siblings in the
  // page's data are distinct, so only a node that receives children from elsewhere, or was merged, looks
  // its children up by frame (100k nodes: about 100 ms).
  function foldTree(D, fold) {
    const N = D.nodes, F = N.flags, count = N.parent.length, ms = D.metrics;
    const LIFT = 1, PLUMBING = 2, STARTUP = 4, DISPATCH = 8;
    const map = new Int32Array(count), base = new Int32Array(count);
    const orig = new Int32Array(count), parentOf = new Int32Array(count), firstKid = new Int32Array(count).fill(-1);
    const nextSib = new Int32Array(count).fill(-1), zone = new Uint8Array(count), shared = new Uint8Array(count);
    const index = new Map();  // new id of a shared node -> Map(frame -> new id of its child)
    let made = 0;
    const frameKey = (i) => N.kind[i] + "," + N.name[i] + "," + N.file[i] + "," + N.line[i] + "," + N.module[i] + "," + N.tid[i];
    function kidsOf(p) {
      let kids = index.get(p);
      if (!kids) {
        kids = new Map();
        for (let c = firstKid[p]; c >= 0; c = nextSib[c]) kids.set(frameKey(orig[c]), c);
        index.set(p, kids);
      }
      return kids;
    }
    function childOf(p, i) {
      let kids = null, key = "";
      if (p >= 0 && shared[p]) {
        kids = kidsOf(p); key = frameKey(i);
        const j = kids.get(key);
        if (j !== undefined) { shared[j] = 1; return j; }  // merged: its children now come from two places
      }
      const j = made++;
      orig[j] = i; parentOf[j] = p;
      if (p >= 0) { nextSib[j] = firstKid[p]; firstKid[p] = j; }
      if (kids) kids.set(key, j);
      return j;
    }
    for (let i = 0; i < count; i++) {
      const p = N.parent[i], f = F[i];
      if (p < 0) { map[i] = base[i] = childOf(-1, i); continue; }
      const lifted = fold.startup && (f & LIFT);
      const into = lifted ? base[p] : map[p];
      if (lifted) shared[into] = 1;
      if ((fold.plumbing && (f & PLUMBING)) || (fold.dispatch && (f & DISPATCH))) {
        map[i] = into; base[i] = base[p]; shared[into] = 1; continue;
      }
      map[i] = childOf(into, i);
      const k = D.kinds[N.kind[i]];
      base[i] = k === "thread" || k === "root" ? map[i] : base[p];
      if (fold.startup && (f & STARTUP)) zone[map[i]] = 1;
    }
    const vals = {};
    for (const m of ms) {
      const v = (vals[m] = new Float64Array(made)), src = D.values[m];
      for (let i = 0; i < count; i++) v[map[i]] += src[i];
    }
    const kids = new Int32Array(made), gone = new Uint8Array(made);
    for (let j = 1; j < made; j++) kids[parentOf[j]]++;
    for (let j = made - 1; j > 0; j--) {
      if (zone[j] && !kids[j] && ms.every((m) => !vals[m][j])) { gone[j] = 1; kids[parentOf[j]]--; }
    }
    const renum = new Int32Array(made), keep = [];
    for (let j = 0; j < made; j++) if (!gone[j]) { renum[j] = keep.length; keep.push(j); }
    const out = {}, outVals = {};
    for (const k of Object.keys(N)) {
      if (k === "flags") continue;
      const src = N[k], col = (out[k] = new Float64Array(keep.length));
      for (let x = 0; x < keep.length; x++) col[x] = k === "parent" ? (x ? renum[parentOf[keep[x]]] : -1) : src[orig[keep[x]]];
    }
    for (const m of ms) { const col = (outVals[m] = new Float64Array(keep.length)); for (let x = 0; x < keep.length; x++) col[x] = vals[m][keep[x]]; }
    D.nodes = out;
    D.values = outVals;
  }
  const S = D.strings, N = D.nodes, n = N.parent.length;
  const KIND = D.kinds;
  const isDiff = D.mode === "diff";
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  // --- tree structure: preorder arrays, children in CSR form ------------------------------------------
  const parent = Int32Array.from(N.parent);
  const childCount = new Int32Array(n);
  for (let i = 1; i < n; i++) childCount[parent[i]]++;
  const childStart = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) childStart[i + 1] = childStart[i] + childCount[i];
  const childList = new Int32Array(Math.max(0, n - 1));
  const fill = childStart.slice(0, n);
  for (let i = 1; i < n; i++) childList[fill[parent[i]]++] = i;
  const kindOf = (i) => KIND[N.kind[i]];
  // Frames with a source line the source pane shows: Python lines, and a PC-sampled kernel's CUDA lines.
  const sourced = (i) => (KIND[N.kind[i]] === "python" || KIND[N.kind[i]] === "gpu_line") && N.file[i] >= 0;
  const nameOf = (i) => S[N.name[i]];
  const fileOf = (i) => (N.file[i] >= 0 ? S[N.file[i]] : null);
  const moduleOf = (i) => (N.module[i] >= 0 ? S[N.module[i]] : null);
  const children = (i) => childList.subarray(childStart[i], childStart[i + 1]);

  // --- metric values: self from the page, totals summed child to parent ---------------------------------
  const selfOf = {}, totalOf = {}, baseSelf = {}, baseTotal = {};
  function totals(self) {
    const t = Float64Array.from(self);
    for (let i = n - 1; i > 0; i--) t[parent[i]] += t[i];
    return t;
  }
  for (const m of D.metrics) {
    selfOf[m] = Float64Array.from(D.values[m]);
    totalOf[m] = totals(selfOf[m]);
    if (isDiff) { baseSelf[m] = Float64Array.from(D.base[m]); baseTotal[m] = totals(baseSelf[m]); }
  }
  mark("data");
  const shown = D.metrics.filter((m) => totalOf[m][0] > 0 || (isDiff && baseTotal[m][0] > 0));
  let metric = D.defaultMetric;
  let view = "top-down";
  let selected = -1;

  function fmt(m, v) {
    if (!v) return "";
    const unit = D.units[m] || "count";
    const a = Math.abs(v), sign = v < 0 ? "-" : "";
    const sig = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
    if (unit === "ns") {
      if (a >= 1e9) return sign + sig(a / 1e9) + " s";
      if (a >= 1e6) return sign + sig(a / 1e6) + " ms";
      if (a >= 1e3) return sign + sig(a / 1e3) + " µs";
      return sign + a + " ns";
    }
    if (unit === "bytes") {
      if (a >= 2 ** 30) return sign + sig(a / 2 ** 30) + " GiB";
      if (a >= 2 ** 20) return sign + sig(a / 2 ** 20) + " MiB";
      if (a >= 2 ** 10) return sign + sig(a / 2 ** 10) + " KiB";
      return sign + a + " B";
    }
    return sign + String(a);
  }
  const pct = (v, t) => (t ? ((100 * v) / t).toFixed(1) + "%" : "");
  const signed = (m, v) => (v > 0 ? "+" + fmt(m, v) : v < 0 ? fmt(m, v) : "0");
  const status = (b, a) => (b === a ? "same" : b === 0 ? "appeared" : a === 0 ? "vanished" : a > b ? "grew" : "shrank");

  function where(i) {
    const f = fileOf(i);
    if (f) return f + (N.line[i] ? ":" + N.line[i] : "");
    const k = kindOf(i);
    if (k === "thread") return N.tid[i] >= 0 ? "tid " + N.tid[i] : "";
    return k === "native" ? moduleOf(i) || "" : "[" + k + "]";
  }
  function frameHtml(i) {
    const k = kindOf(i);
    const label = k === "thread" ? "[thread] " + nameOf(i) : nameOf(i);
    const note = N.note && N.note[i] >= 0 ? '<span class="note"> ' + esc(S[N.note[i]]) + "</span>" : "";
    return '<span class="k-' + k + '">' + esc(label) + '</span><span class="where">' + esc(where(i)) + "</span>" + note;
  }

  // --- header ----------------------------------------------------------------------------------------------
  $("title").textContent = D.title;
  $("meta").textContent = D.subtitle;
  for (const w of D.meta.warnings || []) { const d = document.createElement("div"); d.textContent = "warning: " + w; $("warnings").appendChild(d); }
  for (const m of shown.length ? shown : D.metrics) {
    const o = document.createElement("option");
    o.value = m; o.textContent = D.titles[m] + " (" + fmt(m, totalOf[m][0]) + ")";
    if (m === metric) o.selected = true;
    $("metric").appendChild(o);
  }

  // --- flame graph -------------------------------------------------------------------------------------
  const COLORS = { root: [0, 0, 80], thread: [270, 25, 78], python: [130, 45, 62], native: [28, 70, 66], op: [48, 80, 60],
    api: [215, 70, 68], kernel: [0, 70, 62], memcpy: [285, 55, 68], memset: [285, 40, 72], sync: [38, 90, 55] };
  function hash(s) { let h = 0; for (let i = 0; i < s.length && i < 24; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return (h >>> 0) % 13; }
  function colorFor(kind, name) { const c = COLORS[kind] || [0, 0, 70]; return "hsl(" + c[0] + "," + c[1] + "%," + (c[2] + hash(name) - 6) + "%)"; }
  function diffColor(d) {
    const b = d.data.bu ? 0 : baseTotal[metric][d.data.id], a = d.data.bu ? 0 : totalOf[metric][d.data.id];
    const delta = a - b, mag = Math.min(1, Math.abs(delta) / Math.max(a, b, 1));
    if (!delta) return "hsl(0,0%,86%)";
    return delta > 0 ? "hsl(0," + Math.round(30 + 60 * mag) + "%," + Math.round(85 - 30 * mag) + "%)"
      : "hsl(215," + Math.round(30 + 60 * mag) + "%," + Math.round(85 - 30 * mag) + "%)";
  }

  const topData = (function () {
    const objs = new Array(n);
    for (let i = 0; i < n; i++) objs[i] = { id: i, name: kindOf(i) === "thread" ? "[thread] " + nameOf(i) : nameOf(i), kind: kindOf(i), children: undefined };
    for (let i = 1; i < n; i++) { const p = objs[parent[i]]; (p.children || (p.children = [])).push(objs[i]); }
    return objs[0];
  })();

  // Bottom-up: each node's self value charged to its chain of callers, functions merged (lines dropped).
  // One map for the whole inverted tree, keyed by (inverted parent, function id) as one number.
  const buCache = {};
  let nFn = 0;
  for (let i = 0; i < n; i++) if (N.fn[i] >= nFn) nFn = N.fn[i] + 1;
  // Caller chains below this share of the total are left out of the bottom-up flame graph: a random
  // 100k-node tree inverts to 400k nodes, which no screen shows, and building them costs seconds.
  const BU_MIN_SHARE = 1 / 20000;
  function bottomUpData(m) {
    if (buCache[m]) return buCache[m];
    const self = selfOf[m];
    // Pass 1: numbers only. Inverted node k: its parent, the tree node it stands for, its self value.
    const invParent = [-1], invNode = [0], invSelf = [0];
    const index = new Map();
    for (let i = 1; i < n; i++) {
      const v = self[i];
      if (!v) continue;
      let cur = 0;
      for (let j = i; j > 0; j = parent[j]) {
        const key = cur * nFn + N.fn[j];
        let next = index.get(key);
        if (next === undefined) {
          next = invParent.length;
          invParent.push(cur); invNode.push(j); invSelf.push(0); index.set(key, next);
        }
        cur = next;
      }
      invSelf[cur] += v;
    }
    // Pass 2: totals (children come after parents), then objects for the visible part only.
    const k = invParent.length, tot = Float64Array.from(invSelf);
    for (let x = k - 1; x > 0; x--) tot[invParent[x]] += tot[x];
    const floor = tot[0] * BU_MIN_SHARE, objs = new Array(k);
    objs[0] = { bu: true, id: 0, name: "bottom-up", kind: "root", v: tot[0], children: [] };
    let kept = 1;
    for (let x = 1; x < k; x++) {
      const p = objs[invParent[x]];
      if (!p || tot[x] < floor) continue;
      const j = invNode[x];
      // A node whose children are dropped carries their value as its own, so widths stay exact.
      const o = { bu: true, id: j, name: kindOf(j) === "thread" ? "[thread] " + nameOf(j) : nameOf(j), kind: kindOf(j), v: tot[x], children: [] };
      p.v -= tot[x];
      objs[x] = o; p.children.push(o); kept++;
    }
    document.body.dataset.bottomUpNodes = String(kept);
    return (buCache[m] = objs[0]);
  }

  const flameEl = $("flame");
  const chart = (flamegraph.default || flamegraph.flamegraph)()
    .width(Math.max(320, flameEl.clientWidth || 1000))
    .cellHeight(18)
    .inverted(true)
    .selfValue(true)
    .minFrameSize(2)
    .transitionDuration(120)
    .resetHeightOnZoom(true)
    .sort((a, b) => b.value - a.value)
    .getValue((d) => (d.bu ? d.v : selfOf[metric][d.id]))
    .setColorMapper((d) => (d.highlight ? "#e600e6" : isDiff ? diffColor(d) : colorFor(d.data.kind, d.data.name)))
    .setSearchMatch((d, term) => {
      if (!term) return false;
      const t = term.toLowerCase(), i = d.data.id;
      return d.data.name.toLowerCase().includes(t) || ((fileOf(i) || "").toLowerCase().includes(t) && !d.data.bu);
    })
    .setSearchHandler((results) => {
      document.body.dataset.searchMatches = String(results.length);
      // d3-flame-graph sums getValue, which is a self value here: sum the totals of outermost matches.
      let sum = 0;
      for (const r of results) { let a = r.parent; while (a && !a.highlight) a = a.parent; if (!a) sum += r.value; }
      const all = rootValue();
      $("details").textContent = results.length ? "search: " + results.length + " frames, " + fmt(metric, sum) + " of " +
        fmt(metric, all) + " (" + pct(sum, all) + ")" : "search: no match";
    })
    .setDetailsElement($("details"))
    .setLabelHandler((d) => {
      const i = d.data.id;
      let s = d.data.name + "\n" + where(i) + "\n" + D.titles[metric] + ": " + fmt(metric, d.value) + " (" + pct(d.value, rootValue()) + ")";
      if (isDiff && !d.data.bu) s += "\nbefore " + fmt(metric, baseTotal[metric][i]) + ", change " + signed(metric, totalOf[metric][i] - baseTotal[metric][i]);
      return s;
    })
    .onClick((d) => {
      zoomed = true;
      document.body.dataset.zoomed = d.data.name;
      select(d.data.id, "flame");
    });
  // Bottom-up charges every self value once, so both views have the same total.
  function rootValue() { return totalOf[metric][0]; }
  let zoomed = false, flameView = "top-down";
  function drawFlame() {
    if (zoomed) chart.resetZoom(); // clears the zoom flags d3-flame-graph keeps on the data objects
    zoomed = false;
    // Top-down again: keep the hierarchy (values come from getValue on update); bottom-up is per metric.
    if (view === "top-down" && flameView === "top-down") chart.update(); else chart.update(view === "bottom-up" ? bottomUpData(metric) : topData);
    flameView = view;
    document.body.dataset.zoomed = "";
    document.body.dataset.view = view;
    document.body.dataset.metric = metric;
  }
  mark("flame-data");
  d3.select(flameEl).datum(topData).call(chart);
  mark("flame");
  window.addEventListener("resize", () => { chart.width(Math.max(320, flameEl.clientWidth)); chart.update(); });

  $("search").addEventListener("input", (e) => {
    const t = e.target.value.trim();
    if (t) chart.search(t); else { chart.clear(); document.body.dataset.searchMatches = "0"; $("details").textContent = ""; }
  });
  $("reset").addEventListener("click", () => { chart.resetZoom(); zoomed = false; document.body.dataset.zoomed = ""; });
  // The toggles rebuild the page from the recorded tree: the address keeps the choice across the reload.
  if (folding) {
    $("show-startup").checked = !folding.startup;
    $("show-plumbing").checked = !folding.plumbing;
    $("show-dispatch").checked = !folding.dispatch;
    const refold = () => {
      const show = ["startup", "plumbing", "dispatch"].filter((k) => $("show-" + k).checked);
      location.hash = "show=" + show.join(",");
      location.reload();
    };
    $("show-startup").addEventListener("change", refold);
    $("show-plumbing").addEventListener("change", refold);
    $("show-dispatch").addEventListener("change", refold);
    document.body.dataset.fold = [["startup", folding.startup], ["plumbing", folding.plumbing], ["dispatch", folding.dispatch]]
      .filter((kv) => kv[1]).map((kv) => kv[0]).join(" ");
  } else {
    $("folds").hidden = true;
  }
  $("view").addEventListener("change", (e) => { view = e.target.value; drawFlame(); });
  $("metric").addEventListener("change", (e) => { metric = e.target.value; drawFlame(); refreshPanes(); });

  // --- tabs ---------------------------------------------------------------------------------------------
  const tabs = [["tree", "Tree"], ["flat", "Functions"], ["source", "Source"], ["findings", "Findings (" + (D.findings || []).length + ")"]];
  if (D.compiles && D.compiles.length) tabs.push(["compiles", "Compiles (" + D.compiles.length + ")"]);
  if (D.trace && D.trace.length) tabs.push(["timeline", "Timeline"]);
  if (isDiff) tabs.unshift(["changes", "Changes"]);
  // Panes render when shown: the flat and source panes walk the whole tree, which a 100k-node profile
  // should not pay for at load or on every metric change while they are hidden.
  let activeTab = null;
  const stale = { flat: true, source: true };
  function showTab(name) {
    activeTab = name;
    for (const b of $("tabs").children) b.classList.toggle("active", b.dataset.tab === name);
    for (const p of document.querySelectorAll(".pane")) p.classList.toggle("active", p.id === "pane-" + name);
    if (name === "timeline") drawTimeline();
    if (name === "flat" && stale.flat) renderFlat();
    if (name === "source" && stale.source) renderSource();
    document.body.dataset.tab = name;
  }
  function refreshPanes() {
    renderTree();
    stale.flat = stale.source = true;
    if (activeTab === "flat") renderFlat();
    if (activeTab === "source") renderSource();
  }
  for (const [key, label] of tabs) {
    const b = document.createElement("button");
    b.type = "button"; b.dataset.tab = key; b.textContent = label; b.id = "tab-" + key;
    b.addEventListener("click", () => showTab(key));
    $("tabs").appendChild(b);
  }

  // --- tree table: only expanded nodes have rows, so 100k-node trees cost what is open ---------------------
  const expanded = new Uint8Array(n);
  const MAX_CHILDREN = 200;
  function sortedChildren(i) { return Array.from(children(i)).sort((a, b) => totalOf[metric][b] - totalOf[metric][a]); }
  function autoExpand() {
    // Open the heavy paths: children with at least 5% of the total, up to 60 rows.
    const floor = 0.05 * totalOf[metric][0];
    let rows = 0; const st = [0];
    while (st.length && rows < 60) {
      const i = st.pop(); expanded[i] = 1;
      for (const c of sortedChildren(i).reverse()) if (totalOf[metric][c] >= floor && totalOf[metric][c] > 0) { st.push(c); rows++; }
    }
  }
  function headCells() {
    let h = '<tr><th class="name">frame</th><th>%</th>';
    if (isDiff) return h + "<th>before</th><th>after</th><th>change</th><th>status</th></tr>";
    for (const m of shown) h += "<th>" + esc(D.titles[m]) + "<br>self</th><th>" + esc(D.titles[m]) + "<br>total</th>";
    return h + "</tr>";
  }
  function valueCells(i) {
    let h = "<td>" + pct(totalOf[metric][i], totalOf[metric][0]) + "</td>";
    if (isDiff) {
      const b = baseTotal[metric][i], a = totalOf[metric][i], st = status(b, a);
      return h + "<td>" + fmt(metric, b) + "</td><td>" + fmt(metric, a) + '</td><td class="' + st + '">' + signed(metric, a - b) + '</td><td class="' + st + '">' + st + "</td>";
    }
    for (const m of shown) h += "<td>" + fmt(m, selfOf[m][i]) + "</td><td>" + fmt(m, totalOf[m][i]) + "</td>";
    return h;
  }
  function renderTree() {
    $("tree").tHead.innerHTML = headCells();
    const out = [];
    const st = [[0, 0]];
    while (st.length) {
      const [i, depth] = st.pop();
      const kids = childCount[i];
      const tog = kids ? (expanded[i] ? "▾" : "▸") : "";
      out.push('<tr data-id="' + i + '"' + (i === selected ? ' class="sel"' : "") + '><td class="name" style="padding-left:' +
        (6 + depth * 14) + 'px"><span class="tog">' + tog + "</span>" + frameHtml(i) + "</td>" + valueCells(i) + "</tr>");
      if (expanded[i] && kids) {
        const sorted = sortedChildren(i);
        if (sorted.length > MAX_CHILDREN) out.push(null); // placeholder, fixed below
        const cut = sorted.slice(0, MAX_CHILDREN);
        for (let k = cut.length - 1; k >= 0; k--) st.push([cut[k], depth + 1]);
        if (sorted.length > MAX_CHILDREN) out[out.length - 1] = '<tr><td class="name" style="padding-left:' + (20 + depth * 14) + 'px">… ' + (sorted.length - MAX_CHILDREN) + " more children (smallest) not listed</td></tr>";
      }
    }
    $("tree").tBodies[0].innerHTML = out.filter((x) => x !== null).join("");
  }
  $("tree").tBodies[0].addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-id]"); if (!tr) return;
    const i = +tr.dataset.id;
    if (e.target.classList.contains("tog")) { expanded[i] ^= 1; renderTree(); return; }
    select(i, "tree");
  });

  // --- flat table: functions, lines merged; totals count each call path once -------------------------------
  function renderFlat() {
    stale.flat = false;
    const self = selfOf[metric], tot = totalOf[metric];
    const rows = new Map(), active = new Map();
    const st = [[0, false]];
    while (st.length) {
      const [i, leaving] = st.pop();
      const k = kindOf(i);
      const key = N.fn[i];
      if (k === "root" || k === "thread") { if (!leaving) for (const c of children(i)) st.push([c, false]); continue; }
      if (leaving) { active.set(key, active.get(key) - 1); continue; }
      let r = rows.get(key);
      if (!r) rows.set(key, (r = { i: i, self: 0, total: 0 }));
      r.self += self[i];
      if (!active.get(key)) r.total += tot[i];
      active.set(key, (active.get(key) || 0) + 1);
      st.push([i, true]);
      for (const c of children(i)) st.push([c, false]);
    }
    const list = Array.from(rows.values()).filter((r) => r.self || r.total).sort((a, b) => b.self - a.self || b.total - a.total).slice(0, 300);
    $("flat").tHead.innerHTML = '<tr><th class="name">function</th><th>% self</th><th>self</th><th>total</th></tr>';
    $("flat").tBodies[0].innerHTML = list.map((r) => '<tr data-id="' + r.i + '"><td class="name">' + frameHtml(r.i) + "</td><td>" +
      pct(r.self, tot[0]) + "</td><td>" + fmt(metric, r.self) + "</td><td>" + fmt(metric, r.total) + "</td></tr>").join("") ||
      '<tr><td class="name empty">nothing measured for this metric</td></tr>';
  }
  $("flat").tBodies[0].addEventListener("click", (e) => { const tr = e.target.closest("tr[data-id]"); if (tr) select(+tr.dataset.id, "flat"); });

  // --- source pane -------------------------------------------------------------------------------------
  const files = Object.keys(D.sources || {}).sort();
  for (const f of files) { const o = document.createElement("option"); o.value = f; o.textContent = f; $("source-file").appendChild(o); }
  let sourceFile = files[0] || null, sourceLine = 0;
  function lineValues() {
    // Per file:line of Python frames (and kernels' CUDA lines): self sum, and totals counting each call path once.
    const self = selfOf[metric], tot = totalOf[metric], out = new Map(), active = new Map();
    const st = [[0, false]];
    while (st.length) {
      const [i, leaving] = st.pop();
      const py = sourced(i);
      const key = py ? S[N.file[i]] + ":" + N.line[i] : null;
      if (leaving) { active.set(key, active.get(key) - 1); continue; }
      if (py) {
        let r = out.get(key); if (!r) out.set(key, (r = [0, 0]));
        r[0] += self[i]; if (!active.get(key)) r[1] += tot[i];
        active.set(key, (active.get(key) || 0) + 1);
        st.push([i, true]);
      }
      for (const c of children(i)) st.push([c, false]);
    }
    return out;
  }
  function renderSource() {
    stale.source = false;
    const box = $("source");
    if (!sourceFile || !(sourceFile in D.sources)) {
      box.innerHTML = '<div class="empty">' + (sourceFile ? "the source of " + esc(sourceFile) + " was not readable when the report was made" :
        "no Python source in this profile (Python frames name their files)") + "</div>";
      $("source-note").textContent = "";
      return;
    }
    $("source-file").value = sourceFile;
    const vals = lineValues(), lines = D.sources[sourceFile].split("\n");
    const html = [];
    for (let k = 0; k < lines.length; k++) {
      const v = vals.get(sourceFile + ":" + (k + 1)) || [0, 0];
      html.push('<div class="line' + (k + 1 === sourceLine ? " hl" : "") + '" data-line="' + (k + 1) + '"><span class="no">' + (k + 1) +
        '</span><span class="m">' + fmt(metric, v[0]) + '</span><span class="m">' + fmt(metric, v[1]) + '</span><span class="code">' + esc(lines[k]) + "</span></div>");
    }
    box.innerHTML = html.join("");
    $("source-note").textContent = "columns: self, total " + D.titles[metric];
    const hl = box.querySelector(".line.hl");
    if (hl) hl.scrollIntoView({ block: "center" });
  }
  $("source-file").addEventListener("change", (e) => { sourceFile = e.target.value; sourceLine = 0; renderSource(); });
  function showSource(file, line) { sourceFile = file; sourceLine = line || 0; stale.source = true; showTab("source"); }

  // --- selection links the panes ---------------------------------------------------------------------------
  function select(i, from) {
    selected = i;
    document.body.dataset.selected = String(i);
    // Python frame of the selection, or of its nearest Python caller.
    let j = i;
    while (j > 0 && !sourced(j)) j = parent[j];
    if (j > 0) {
      sourceFile = S[N.file[j]]; sourceLine = N.line[j];
      if (from === "flame") showTab("source"); else stale.source = true;
      if (activeTab === "source") renderSource();
    }
    if (from !== "tree") { for (let a = parent[i]; a > 0; a = parent[a]) expanded[a] = 1; expanded[0] = 1; }
    renderTree();
  }

  // --- findings ----------------------------------------------------------------------------------------
  function renderFindings() {
    const fs = D.findings || [];
    if (!fs.length) { $("findings").innerHTML = '<div class="empty">No findings: the analyzer has not reported anything for this profile.</div>'; return; }
    $("findings").innerHTML = fs.map((f, k) => {
      const loc = f.location || {};
      const locText = loc.file ? loc.file + (loc.line ? ":" + loc.line : "") + (loc.function ? " (" + loc.function + ")" : "") : loc.function || "";
      const ev = Object.entries(f.evidence || {}).map(([a, b]) => "<dt>" + esc(a) + "</dt><dd>" + esc(typeof b === "object" ? JSON.stringify(b) : b) + "</dd>").join("");
      return '<div class="finding" data-k="' + k + '"><h3>' + esc(f.title || f.rule) + '</h3><div><code>' + esc(f.rule || "") + "</code>" +
        (locText ? ' &middot; <span class="loc" data-k="' + k + '">' + esc(locText) + "</span>" : "") + "</div>" +
        (ev ? "<dl>" + ev + "</dl>" : "") + (f.suggestion ? "<div><b>suggestion:</b> " + esc(f.suggestion) + "</div>" : "") +
        "<div>" + (f.estimated_speedup != null ? "estimated speedup: " + esc(f.estimated_speedup) + "× " : "") +
        (f.confidence != null ? "&middot; confidence: " + esc(f.confidence) : "") + "</div></div>";
    }).join("");
  }
  // --- torch.compile's compiles: recompile causes and graph breaks (the profile's compiles part) -----------
  function renderCompiles() {
    const at = (file, line) => esc(String(file).split("/").pop() + ":" + line);
    $("compiles").innerHTML = (D.compiles || []).map((c) => '<div class="finding"><h3>' + esc(c.id) + " " + esc(c.function) +
      " (" + at(c.file, c.line) + ")</h3><div>" + (c.called_from ? "called at " + at(c.called_from.file, c.called_from.line) + " &middot; " : "") +
      esc(Number(c.time_s).toFixed(2)) + " s, " + esc(c.ops) + " ops</div>" +
      (c.recompile_reason ? "<div><b>recompiled:</b> " + esc(c.recompile_reason) + "</div>" : "") +
      (c.fail_reason ? "<div><b>failed:</b> " + esc(c.fail_reason) + "</div>" : "") +
      (c.graph_breaks || []).map((b) => "<div><b>graph break</b> at " + at(b.file, b.line) + ": " + esc(b.reason) + "</div>").join("") +
      "</div>").join("");
  }
  if (D.compiles && D.compiles.length) renderCompiles();
  $("findings").addEventListener("click", (e) => {
    const el = e.target.closest(".loc"); if (!el) return;
    const loc = (D.findings[+el.dataset.k] || {}).location || {};
    if (loc.file) showSource(loc.file, loc.line);
  });

  // --- timeline: canvas lanes per thread and per GPU stream, d3-zoom for zoom and pan ---------------------
  let tl = null;
  function buildTimeline() {
    const lanes = new Map();
    for (const e of D.trace) {
      const gpu = ["kernel", "memcpy", "memset", "sync"].includes(e.kind);
      const key = gpu ? "GPU " + (e.device || 0) + " stream " + (e.stream || 0) : "thread " + (e.tid != null ? e.tid : "?");
      if (!lanes.has(key)) lanes.set(key, { name: key, gpu: gpu, events: [] });
      lanes.get(key).events.push(e);
    }
    const list = Array.from(lanes.values()).sort((a, b) => a.gpu - b.gpu || a.name.localeCompare(b.name, undefined, { numeric: true }));
    let t0 = Infinity, t1 = -Infinity;
    for (const l of list) { l.events.sort((a, b) => a.start_ns - b.start_ns); for (const e of l.events) { t0 = Math.min(t0, e.start_ns); t1 = Math.max(t1, e.start_ns + (e.dur_ns || 0)); } }
    return { lanes: list, t0: t0, t1: t1 > t0 ? t1 : t0 + 1, k: d3.zoomIdentity };
  }
  function drawTimeline() {
    if (!D.trace || !D.trace.length) return;
    const cv = $("timeline");
    if (!tl) {
      tl = buildTimeline();
      d3.select(cv).call(d3.zoom().scaleExtent([1, 1e7]).on("zoom", (ev) => { tl.k = ev.transform; paint(); }));
      cv.addEventListener("mousemove", (ev) => { const e = hit(ev); $("timeline-info").textContent = e ? e.name + " [" + e.kind + "] " + fmtNs(e.dur_ns) + (e.correlation != null ? ", correlation " + e.correlation : "") : info(); });
    }
    paint();
  }
  const LABEL_W = 150, ROW = 20;
  const fmtNs = (v) => fmt("gpu_time_ns", v) || "0 ns";
  function info() { return tl.lanes.length + " lanes, " + D.trace.length + " events over " + fmtNs(tl.t1 - tl.t0) + " (scroll to zoom, drag to pan)"; }
  function xScale(cv) { const w = cv.clientWidth - LABEL_W; return (t) => LABEL_W + tl.k.applyX(((t - tl.t0) / (tl.t1 - tl.t0)) * w); }
  function paint() {
    const cv = $("timeline"), dpr = window.devicePixelRatio || 1;
    cv.height = Math.max(60, tl.lanes.length * ROW + 10) * dpr; cv.width = cv.clientWidth * dpr;
    cv.style.height = cv.height / dpr + "px";
    const g = cv.getContext("2d"); g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cv.width, cv.height); g.font = "11px sans-serif";
    const x = xScale(cv), w = cv.clientWidth;
    tl.lanes.forEach((l, r) => {
      const y = 4 + r * ROW;
      for (const e of l.events) {
        const a = x(e.start_ns), b = x(e.start_ns + (e.dur_ns || 0));
        if (b < LABEL_W || a > w) continue;
        g.fillStyle = colorFor(e.kind === "cpu" ? "native" : e.kind, e.name);
        g.fillRect(Math.max(LABEL_W, a), y, Math.max(1, b - Math.max(LABEL_W, a)), ROW - 4);
        if (b - a > 40) { g.fillStyle = "#111"; g.save(); g.beginPath(); g.rect(Math.max(LABEL_W, a), y, b - Math.max(LABEL_W, a), ROW - 4); g.clip(); g.fillText(e.name, Math.max(LABEL_W, a) + 2, y + 12); g.restore(); }
      }
      g.fillStyle = "#fff"; g.fillRect(0, y, LABEL_W, ROW); g.fillStyle = "#333"; g.fillText(l.name, 4, y + 12);
    });
    $("timeline-info").textContent = info();
    document.body.dataset.timeline = String(tl.lanes.length);
  }
  function hit(ev) {
    const cv = $("timeline"), r = cv.getBoundingClientRect(), px = ev.clientX - r.left, row = Math.floor((ev.clientY - r.top - 4) / ROW);
    const l = tl.lanes[row]; if (!l) return null;
    const x = xScale(cv);
    for (const e of l.events) if (x(e.start_ns) <= px && px <= Math.max(x(e.start_ns) + 1, x(e.start_ns + (e.dur_ns || 0)))) return e;
    return null;
  }

  // --- diff: changes as computed by deepctx diff ------------------------------------------------------------
  function renderChanges() {
    const c = D.changes; if (!c) return;
    let h = "<h3>GPU activity by kernel (" + esc(D.titles[c.kernel_metric] || c.kernel_metric) + ")</h3>";
    h += c.kernels.length ? '<table class="grid"><thead><tr><th class="name">kernel</th><th>status</th><th>calls before</th><th>calls after</th><th>before</th><th>after</th><th>change</th></tr></thead><tbody>' +
      c.kernels.map((k) => '<tr><td class="name"><span class="k-' + k.kind + '">' + esc(k.name) + '</span> <span class="where">[' + k.kind + ']</span></td><td class="' + k.status + '">' + k.status +
        "</td><td>" + k.calls_before + "</td><td>" + k.calls_after + "</td><td>" + fmt(c.kernel_metric, k.before) + "</td><td>" + fmt(c.kernel_metric, k.after) +
        '</td><td class="' + k.status + '">' + signed(c.kernel_metric, k.after - k.before) + "</td></tr>").join("") + "</tbody></table>" : '<div class="empty">no GPU activity in either profile</div>';
    h += "<h3>call paths by self " + esc(D.titles[c.path_metric] || c.path_metric) + "</h3>";
    h += c.paths.length ? '<table class="grid"><thead><tr><th class="name">call path (innermost first)</th><th>status</th><th>before</th><th>after</th><th>change</th></tr></thead><tbody>' +
      c.paths.map((p) => '<tr><td class="name" title="' + esc(p.path.join("\n")) + '">' + esc(p.path.slice().reverse().join(" ← ")) + '</td><td class="' + p.status + '">' + p.status + "</td><td>" +
        fmt(c.path_metric, p.before) + "</td><td>" + fmt(c.path_metric, p.after) + '</td><td class="' + p.status + '">' + signed(c.path_metric, p.after - p.before) + "</td></tr>").join("") +
      "</tbody></table>" : '<div class="empty">no call path changed</div>';
    $("changes").innerHTML = h;
  }

  autoExpand();
  renderTree(); mark("tree");
  renderFindings(); renderChanges();
  showTab(tabs[0][0]);
  mark("rest");
  window.deepctx = { chart: chart, select: select, showTab: showTab, nodes: n, timings: timings };
  document.body.dataset.ready = "1";
})();
