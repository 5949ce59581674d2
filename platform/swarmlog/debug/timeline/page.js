"use strict";
// The timeline page: draws one page of rows at a time as SVG, from the JSON embedded above.
// Every text from the log goes in through textContent, never as markup: a payload can hold anything.
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const doc = JSON.parse(document.getElementById("timeline-data").textContent);
  const rows = doc.rows;
  const lanes = doc.lanes;
  const byOffset = new Map(rows.map((r, i) => [r.o, i]));
  const ZOOMS = [5, 9, 14, 20, 26, 34];
  const GUTTER = 78, NOTE_W = 460, HEADER_H = 28;
  const LANE_W = Math.max(100, Math.min(150, Math.floor(800 / Math.max(1, lanes.length))));
  const NOTES = {"timeout": "TIMEOUT ", "timer-fired": "fired ", "timer-set": "set ", "timer-cancelled": "cancelled ",
                 "effect": "effect ", "llm": "llm ", "http": "http ", "failure": "FAILED ", "broadcast": "(to all) "};
  const state = {page: 0, size: 250, zoom: 3, selected: null, causalAll: true};

  const $ = (id) => document.getElementById(id);
  const svg = $("diagram"), header = $("header-svg"), overview = $("overview-svg");
  const laneX = (i) => GUTTER + i * LANE_W + LANE_W / 2;
  const width = GUTTER + lanes.length * LANE_W + NOTE_W;

  function el(name, attrs, parent, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function pages() { return Math.max(1, Math.ceil(rows.length / state.size)); }
  function rowH() { return ZOOMS[state.zoom]; }
  function pageOf(offset) { const i = byOffset.get(offset); return i === undefined ? null : Math.floor(i / state.size); }

  // --- the header: title, legend, lane names ---------------------------------------------------------------
  function drawHeader() {
    const range = `offsets ${doc.start}..${doc.end - 1}`;
    const timeouts = rows.filter((r) => r.k === "timeout").length;
    $("title").textContent = `timeline of ${doc.topic}, ${range}: ${rows.length} events, ${lanes.length} agents` +
      (timeouts ? `, ${timeouts} timeout${timeouts > 1 ? "s" : ""}` : "") +
      (doc.code_version ? ` — code ${doc.code_version}` : "");
    const legend = $("legend");
    for (const [kind, what] of [["message", "message"], ["timer-set", "timer set"], ["timer-fired", "timer fired"],
                                ["timeout", "timeout (the wall clock fired it)"], ["effect", "effect"],
                                ["llm", "LLM call"], ["http", "HTTP"], ["failure", "handler failed"],
                                ["causal", "caused by"]]) {
      const s = document.createElement("span");
      const icon = el("svg", {width: kind === "message" || kind === "causal" ? 30 : 16, height: 14,
                              "class": `legend-icon kind-${kind}`}, s);
      if (kind === "message") {
        el("circle", {"class": "sender", cx: 4, cy: 7, r: 3}, icon);
        el("line", {"class": "arrow", x1: 4, y1: 7, x2: 27, y2: 7}, icon);
        el("path", {"class": "arrow head", d: "M 28 7 l -7 -4 m 0 8 l 7 -4"}, icon);
      } else if (kind === "causal") {
        el("line", {"class": "causal", x1: 2, y1: 7, x2: 28, y2: 7}, icon);
      } else {
        drawMark(icon, kind, 8, 7, 6);
      }
      s.appendChild(document.createTextNode(` ${what}`));
      legend.appendChild(s);
    }
    header.setAttribute("width", width); header.setAttribute("height", HEADER_H);
    lanes.forEach((name, i) => {
      const g = el("g", {"class": "lane", "data-agent": name, "data-index": i}, header);
      el("text", {"class": "lane-name", x: laneX(i), y: 18}, g, name);
    });
    el("text", {"class": "offset", x: GUTTER - 24, y: 18}, header, "offset");
    const jd = $("jump-divergence");
    if (doc.divergence && byOffset.has(doc.divergence.offset)) jd.hidden = false; else jd.hidden = true;
    $("jump-timeout").hidden = !rows.some((r) => r.k === "timeout");
  }

  // --- one page of the diagram --------------------------------------------------------------------------
  function draw() {
    const h = rowH();
    const first = state.page * state.size;
    const page = rows.slice(first, first + state.size);
    const y = (i) => (i - first) * h + h / 2;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("width", width);
    svg.setAttribute("height", Math.max(h * page.length, 40) + 8);
    svg.classList.toggle("dense", h < 14);
    const lifelines = el("g", {"class": "lifelines"}, svg);
    lanes.forEach((name, i) => el("line", {"class": "lifeline", "data-agent": name, x1: laneX(i), x2: laneX(i),
                                           y1: 0, y2: h * page.length + 8}, lifelines));
    const causal = el("g", {"class": "causal-layer"}, svg);
    const events = el("g", {"class": "events"}, svg);
    page.forEach((r, k) => drawRow(events, r, y(first + k), h));
    // Causal arrows: from each cause on this page to what it caused (off-page causes get a stub to follow).
    page.forEach((r, k) => {
      const yTo = y(first + k);
      const xTo = r.l === null ? GUTTER + 6 : laneX(r.l);
      r.c.forEach((c, n) => {
        const ci = byOffset.get(c);
        if (ci !== undefined && ci >= first && ci < first + state.size) {
          const cr = rows[ci];
          const xFrom = cr.l === null ? GUTTER + 6 : laneX(cr.l);
          const yFrom = y(ci);
          const bend = xFrom === xTo ? 26 + 6 * n : 0;
          const d = `M ${xFrom} ${yFrom} C ${xFrom + bend} ${yFrom + (yTo - yFrom) / 2}, ` +
                    `${xTo + bend} ${yFrom + (yTo - yFrom) / 2}, ${xTo} ${yTo}`;
          el("path", {"class": "causal", "data-from": c, "data-to": r.o, d: d}, causal);
        } else {
          const t = el("text", {"class": "offpage", "data-from": c, "data-to": r.o, x: xTo + 10, y: yTo - h / 2 + 9},
                       causal, `⇡${c}`);
          t.addEventListener("click", (ev) => { ev.stopPropagation(); select(c, true); });
        }
      });
    });
    applyCausal();
    $("page-info").textContent = `events ${rows.length ? first + 1 : 0}–${first + page.length} of ${rows.length} ` +
      `(page ${state.page + 1}/${pages()})`;
    $("prev-page").disabled = state.page === 0;
    $("next-page").disabled = state.page >= pages() - 1;
    $("zoom-info").textContent = `row ${h}px`;
    drawOverview();
  }

  function drawRow(parent, r, yc, h) {
    const cls = ["event", `kind-${r.k}`];
    if (r.k === "timeout") cls.push("timeout");
    if (r.d) cls.push("divergence");
    if (state.selected === r.o) cls.push("selected");
    const g = el("g", {"class": cls.join(" "), "data-offset": r.o, "data-type": r.ty, "data-kind": r.k,
                       "data-agent": r.l === null ? "" : lanes[r.l], "data-label": r.lb}, parent);
    if (r.k === "message" || r.k === "broadcast") g.setAttribute("data-to", r.t.map((i) => lanes[i]).join(" "));
    el("rect", {"class": "hit", x: 0, y: yc - h / 2, width: width, height: h}, g);
    el("text", {"class": "offset", x: GUTTER - 24, y: yc + 4}, g, String(r.o));
    if (r.d) el("text", {"class": "divergence-mark", x: GUTTER - 20, y: yc + 4}, g, "!!");
    const noteX = GUTTER + lanes.length * LANE_W + 8;
    const note = (NOTES[r.k] || "") + r.s;
    if (r.l === null) {
      el("rect", {"class": "banner", x: GUTTER, y: yc - h / 2 + 1, width: lanes.length * LANE_W, height: h - 2}, g);
      el("text", {"class": "note", x: GUTTER + 8, y: yc + 4}, g, `${r.lb}: ${r.s}`);
    } else if (r.k === "message" || r.k === "broadcast") {
      const x0 = laneX(r.l);
      el("circle", {"class": "sender", cx: x0, cy: yc, r: Math.min(4, h / 3)}, g);
      r.t.forEach((ti) => {
        const x1 = laneX(ti);
        const dir = x1 > x0 ? -1 : 1;
        el("line", {"class": "arrow message", "data-from": lanes[r.l], "data-to": lanes[ti], x1: x0, y1: yc,
                    x2: x1 + dir * 2, y2: yc}, g);
        el("path", {"class": "arrow head", d: `M ${x1} ${yc} l ${dir * 7} -4 m 0 8 l ${-dir * 7} -4`}, g);
      });
      if (r.t.length) {
        const xs = [x0, ...r.t.map(laneX)];
        const far = r.t.map(laneX).reduce((a, b) => (Math.abs(b - x0) > Math.abs(a - x0) ? b : a));
        el("text", {"class": "arrow-label", x: (x0 + (r.t.length === 1 ? far : Math.max(...xs))) / 2, y: yc - 3}, g,
           r.lb);
      }
      el("text", {"class": "note", x: noteX, y: yc + 4}, g, clip(note, 70));
    } else {
      const x0 = laneX(r.l);
      if (r.k === "timeout") el("rect", {"class": "timeout-band", x: GUTTER, y: yc - h / 2, width: lanes.length * LANE_W,
                                         height: h}, g);
      drawMark(g, r.k, x0, yc, Math.max(2, Math.min(9, h / 2 - 2)));
      el("text", {"class": "note", x: noteX, y: yc + 4}, g, clip(note, 70));
    }
    g.addEventListener("click", () => select(r.o, false));
  }

  // Marks are shapes, not glyphs: no font on the reader's machine decides whether a timeout shows.
  function drawMark(g, kind, x, y, r) {
    const hands = `M ${x} ${y - r * 0.65} L ${x} ${y} L ${x + r * 0.5} ${y}`;
    if (kind === "timer-set" || kind === "timer-fired" || kind === "timeout") {
      el("circle", {"class": "mark", cx: x, cy: y, r: r}, g);
      el("path", {"class": "hands", d: hands}, g);
    } else if (kind === "timer-cancelled") {
      el("circle", {"class": "mark", cx: x, cy: y, r: r}, g);
      el("path", {"class": "hands", d: `M ${x - r * 0.7} ${y + r * 0.7} L ${x + r * 0.7} ${y - r * 0.7}`}, g);
    } else if (kind === "effect") {
      el("path", {"class": "mark", d: `M ${x} ${y - r} L ${x + r} ${y} L ${x} ${y + r} L ${x - r} ${y} Z`}, g);
    } else if (kind === "llm") {
      const q = r * 0.35;
      el("path", {"class": "mark", d: `M ${x} ${y - r} L ${x + q} ${y - q} L ${x + r} ${y} L ${x + q} ${y + q} ` +
                                      `L ${x} ${y + r} L ${x - q} ${y + q} L ${x - r} ${y} L ${x - q} ${y - q} Z`}, g);
    } else if (kind === "http") {
      el("rect", {"class": "mark", x: x - r, y: y - r * 0.7, width: 2 * r, height: 1.4 * r, rx: 2}, g);
      el("path", {"class": "hands", d: `M ${x - r * 0.6} ${y} L ${x + r * 0.6} ${y}`}, g);
    } else if (kind === "failure") {
      el("path", {"class": "mark cross", d: `M ${x - r} ${y - r} L ${x + r} ${y + r} M ${x - r} ${y + r} ` +
                                            `L ${x + r} ${y - r}`}, g);
    } else {
      el("circle", {"class": "mark", cx: x, cy: y, r: r * 0.7}, g);
    }
  }

  function clip(s, n) { s = s.replace(/\s+/g, " "); return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  function applyCausal() {
    const sel = state.selected;
    svg.querySelectorAll(".causal").forEach((p) => {
      const related = sel !== null && (Number(p.dataset.from) === sel || Number(p.dataset.to) === sel);
      p.classList.toggle("hl", related);
      p.classList.toggle("hidden", !state.causalAll && !related);
    });
  }

  // --- the overview: the whole range, the page shown, the timeouts and the divergence ----------------------
  function drawOverview() {
    while (overview.firstChild) overview.removeChild(overview.firstChild);
    const H = overview.clientHeight || 400, n = Math.max(1, rows.length);
    overview.setAttribute("viewBox", `0 0 18 ${H}`);
    const first = state.page * state.size;
    el("rect", {"class": "ov-page", x: 0, y: first / n * H, width: 18,
                height: Math.max(3, Math.min(state.size, n - first) / n * H)}, overview);
    rows.forEach((r, i) => {
      const cls = r.d ? "ov-divergence" : r.k === "timeout" ? "ov-timeout" : r.k === "failure" ? "ov-failure" : null;
      if (cls) el("line", {"class": cls, x1: 2, x2: 16, y1: i / n * H, y2: i / n * H}, overview);
    });
  }
  $("overview").addEventListener("click", (ev) => {
    const H = overview.clientHeight || 400;
    const i = Math.min(rows.length - 1, Math.max(0, Math.floor(ev.offsetY / H * rows.length)));
    if (rows.length) { state.page = Math.floor(i / state.size); draw(); }
  });

  // --- details of the selected event -------------------------------------------------------------------
  function link(parent, offset, text) {
    const a = document.createElement("a");
    a.textContent = text; a.dataset.offset = offset;
    a.addEventListener("click", () => select(offset, true));
    parent.appendChild(a);
  }

  function select(offset, scroll) {
    const p = pageOf(offset);
    state.selected = offset;
    if (p !== null && p !== state.page) { state.page = p; draw(); }
    svg.querySelectorAll(".event.selected").forEach((g) => g.classList.remove("selected"));
    const g = svg.querySelector(`.event[data-offset="${offset}"]`);
    if (g) {
      g.classList.add("selected");
      if (scroll) {  // vertically only: the lanes stay where the reader put them
        const sc = $("scroller"), i = byOffset.get(offset) - state.page * state.size;
        sc.scrollTop = Math.max(0, i * rowH() - sc.clientHeight / 2);
      }
    }
    applyCausal();
    showDetails(offset);
    history.replaceState(null, "", `#offset=${offset}`);
  }

  function showDetails(offset) {
    const box = $("details");
    box.textContent = "";
    const e = doc.events[String(offset)];
    const i = byOffset.get(offset);
    const r = i === undefined ? null : rows[i];
    const h = document.createElement("h2");
    h.id = "details-title";
    h.textContent = e ? `offset ${offset}: ${e.event_type || "(undecodable)"}` : `offset ${offset}: not in this range`;
    box.appendChild(h);
    if (!e) return;
    const add = (tag, text, cls) => { const x = document.createElement(tag); x.textContent = text;
                                      if (cls) x.className = cls; box.appendChild(x); return x; };
    if (r && r.d) add("p", `DIVERGES: ${r.d}`, "diverged").id = "details-divergence";
    if (e.event_type) {
      add("p", `from ${e.agent} to ${e.to === null ? "every other agent (broadcast)" : e.to}` +
               ` · event id ${e.event_id} · run ${e.run_id} · v${e.version}` +
               (e.timestamp_ms ? ` · log time ${new Date(e.timestamp_ms).toISOString()}` : ""));
    } else {
      add("p", `does not decode: ${e.error}`, "diverged");
    }
    if (e.conversation) {
      add("h3", "conversation");
      box.appendChild(conversationView(e.conversation));
      // The recorded bytes stay one click away.
      const raw = document.createElement("details");
      const sum = document.createElement("summary"); sum.textContent = "raw payload (as recorded)";
      const pre = document.createElement("pre"); pre.id = "payload";
      pre.textContent = JSON.stringify(e.payload, null, 2);
      raw.appendChild(sum); raw.appendChild(pre); box.appendChild(raw);
    } else {
      add("h3", "payload");
      add("pre", JSON.stringify(e.payload === undefined ? null : e.payload, null, 2)).id = "payload";
    }
    add("h3", `caused by (${r ? r.c.length : 0})`);
    const ul1 = add("ul", ""); ul1.id = "causes";
    (r ? r.c : []).forEach((c) => { const li = document.createElement("li"); link(li, c, describe(c)); ul1.appendChild(li); });
    add("h3", `caused (${r ? r.cd.length : 0}, in this range)`);
    const ul2 = add("ul", ""); ul2.id = "caused";
    (r ? r.cd : []).forEach((c) => { const li = document.createElement("li"); link(li, c, describe(c)); ul2.appendChild(li); });
    add("h3", "headers");
    add("pre", Object.entries(e.headers || {}).map(([k, v]) => `${k} = ${v}`).join("\n"));
  }

  // A model call as its turns: who said what, the tools called, the reply (swarmlog.debug.conversation).
  function conversationView(c) {
    const div = document.createElement("div");
    div.id = "conversation"; div.className = "conversation";
    const el = (tag, text, cls) => { const x = document.createElement(tag); x.textContent = text;
                                     if (cls) x.className = cls; div.appendChild(x); return x; };
    const facts = [`model ${c.model || "?"}`, c.api + (c.streamed ? ", streamed" : "")];
    if (c.usage) facts.push(`${c.usage.input_tokens ?? "?"} in + ${c.usage.output_tokens ?? "?"} out tokens`);
    if (c.latency_ms !== null && c.latency_ms !== undefined) facts.push(`server took ${c.latency_ms} ms`);
    if (c.status !== null && c.status !== undefined) facts.push(`HTTP ${c.status}`);
    if (c.stop_reason) facts.push(`stop: ${c.stop_reason}`);
    el("p", facts.join(" · "), "facts");
    if (c.tools && c.tools.length) el("p", `tools offered: ${c.tools.join(", ")}`, "facts");
    const turn = (m, reply) => {
      const t = document.createElement("div");
      t.className = `turn role-${m.role}${reply ? " reply" : ""}`;
      const who = document.createElement("div"); who.className = "who";
      who.textContent = m.role + (m.tool_call_id ? ` (result of ${m.tool_call_id})` : "") + (m.name ? ` ${m.name}` : "");
      t.appendChild(who);
      if (m.text) { const p = document.createElement("pre"); p.textContent = m.text; t.appendChild(p); }
      (m.tool_calls || []).forEach((tc) => {
        const p = document.createElement("pre"); p.className = "tool-call";
        const args = typeof tc.arguments === "string" ? tc.arguments : JSON.stringify(tc.arguments, null, 2);
        p.textContent = `→ ${tc.name}(${args})${tc.id ? `  [${tc.id}]` : ""}`;
        t.appendChild(p);
      });
      div.appendChild(t);
    };
    c.messages.forEach((m) => turn(m, false));
    el("div", "reply", "reply-rule");
    if (c.error) el("p", `ERROR ${c.error}`, "diverged");
    c.reply.forEach((m) => turn(m, true));
    return div;
  }

  function describe(offset) {
    const i = byOffset.get(offset);
    if (i === undefined) return `${offset} (before this range)`;
    const r = rows[i];
    return `${offset} ${r.l === null ? "" : lanes[r.l] + " "}${r.ty} ${r.lb}`;
  }

  // --- controls ---------------------------------------------------------------------------------------
  $("prev-page").addEventListener("click", () => { if (state.page > 0) { state.page--; draw(); } });
  $("next-page").addEventListener("click", () => { if (state.page < pages() - 1) { state.page++; draw(); } });
  $("page-size").addEventListener("change", (ev) => {
    const keep = state.page * state.size;
    state.size = Number(ev.target.value); state.page = Math.floor(keep / state.size); draw();
  });
  $("zoom-in").addEventListener("click", () => { if (state.zoom < ZOOMS.length - 1) { state.zoom++; draw(); } });
  $("zoom-out").addEventListener("click", () => { if (state.zoom > 0) { state.zoom--; draw(); } });
  $("causal-all").addEventListener("change", (ev) => { state.causalAll = ev.target.checked; applyCausal(); });
  $("goto-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const want = Number($("goto").value);
    if (!Number.isFinite(want) || !rows.length) return;
    // The event at that offset, or the first one after it (offsets are ordered, not contiguous).
    let i = rows.findIndex((r) => r.o >= want);
    if (i < 0) i = rows.length - 1;
    select(rows[i].o, true);
  });
  $("jump-divergence").addEventListener("click", () => { if (doc.divergence) select(doc.divergence.offset, true); });
  $("jump-timeout").addEventListener("click", () => {
    const r = rows.find((x) => x.k === "timeout"); if (r) select(r.o, true);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
    if (ev.key === "PageDown") { $("next-page").click(); ev.preventDefault(); }
    else if (ev.key === "PageUp") { $("prev-page").click(); ev.preventDefault(); }
    else if (ev.key === "+" || ev.key === "=") $("zoom-in").click();
    else if (ev.key === "-") $("zoom-out").click();
    else if (ev.key === "j" || ev.key === "ArrowDown" || ev.key === "k" || ev.key === "ArrowUp") {
      const i = state.selected === null ? -1 : byOffset.get(state.selected);
      const next = (ev.key === "j" || ev.key === "ArrowDown") ? i + 1 : i - 1;
      if (next >= 0 && next < rows.length) { select(rows[next].o, true); ev.preventDefault(); }
    }
  });

  drawHeader();
  draw();
  const m = /offset=(\d+)/.exec(location.hash);
  if (m && byOffset.has(Number(m[1]))) select(Number(m[1]), true);
  document.body.dataset.ready = "1";
})();
