// Weir's web UI: draws what the REST API answers, polling it every second.
// Loaded by the loader in index.html (which found the token). Pages, by
// path: /ui/ (overview), /ui/jobs/<id>, /ui/taskmanagers,
// /ui/taskmanagers/<id>, /ui/modules. Links change the path with
// history.pushState; the back button and a reload land on the same page.
// Everything the API says is put in the page as text (textContent), never
// as markup.
(function () {
  "use strict";

  const TOKEN_KEY = "weir-token";
  const POLL_MS = 1000;
  const SVG = "http://www.w3.org/2000/svg";
  const main = document.getElementById("main");
  const statusLine = document.getElementById("status");

  // ---- the API ----------------------------------------------------------

  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (t) h.Authorization = "Bearer " + t;
    return h;
  }

  async function api(path, options) {
    const opts = Object.assign({ cache: "no-store" }, options || {});
    opts.headers = authHeaders(opts.headers);
    const r = await fetch(path, opts);
    if (r.status === 401) {
      // The token was refused (or changed): back to the loader's prompt.
      sessionStorage.removeItem(TOKEN_KEY);
      location.reload();
      throw new Error("the token was refused");
    }
    const text = await r.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      body = { error: text };
    }
    if (!r.ok) {
      const e = new Error((body && body.error) || "HTTP " + r.status);
      e.status = r.status;
      throw e;
    }
    return body;
  }

  function post(path, body) {
    return api(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  // ---- building the page ------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  // Replaces `el`'s children (null and false children are skipped, as in h()).
  function fill(el, ...children) {
    el.replaceChildren();
    append(el, children);
  }

  function link(path, text) {
    return h("a", { href: path, "data-nav": true }, text);
  }

  function table(headers, rows, attrs) {
    return h(
      "table",
      attrs || {},
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
      h("tbody", {}, rows)
    );
  }

  function section(title, ...content) {
    return h("section", {}, h("h2", {}, title), content);
  }

  function badge(state) {
    return h("span", { class: "badge state-" + state }, state);
  }

  // ---- formatting -------------------------------------------------------

  function count(n) {
    if (n === null || n === undefined) return "–";
    if (n < 1000) return String(Math.round(n));
    const units = ["k", "M", "G", "T"];
    let i = -1;
    while (n >= 1000 && i < units.length - 1) {
      n /= 1000;
      i++;
    }
    return (n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0)) + " " + units[i];
  }

  function rate(n) {
    return n === null || n === undefined ? "–" : count(n) + "/s";
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
  }

  function pct(share) {
    return share === null || share === undefined ? "–" : Math.round(share * 100) + " %";
  }

  function ms(n) {
    if (n === null || n === undefined) return "–";
    if (n < 1000) return n + " ms";
    if (n < 60000) return (n / 1000).toFixed(1) + " s";
    if (n < 3600000) return Math.floor(n / 60000) + " min " + Math.round((n % 60000) / 1000) + " s";
    return Math.floor(n / 3600000) + " h " + Math.round((n % 3600000) / 60000) + " min";
  }

  function time(unixMs) {
    if (!unixMs) return "–";
    const d = new Date(unixMs);
    const today = new Date().toDateString() === d.toDateString();
    return today ? d.toLocaleTimeString() : d.toLocaleString();
  }

  // Source-to-vertex latency from latency markers (absent unless the job
  // sets latency_tracking_interval_ms).
  function latency(l) {
    if (!l) return "—";
    return l.p50 + " / " + l.p99 + " ms";
  }

  function watermark(w) {
    if (w === null || w === undefined) return "–";
    if (w <= -9e18) return "none yet";
    if (w >= 9e18) return "end of input";
    return new Date(w).toISOString().replace("T", " ").replace("Z", " UTC");
  }

  // The time of day only (UTC), for the graph's nodes.
  function shortWatermark(w) {
    const full = watermark(w);
    return /^\d{4}-/.test(full) ? full.slice(11) : full;
  }

  function shortHash(hash) {
    return hash ? hash.replace(/^sha256:/, "").slice(0, 12) : "";
  }

  // ---- routing ----------------------------------------------------------

  let page = null;
  let timer = null;

  function route() {
    const p = location.pathname.replace(/\/+$/, "");
    let m;
    if ((m = /^\/ui\/jobs\/([^/]+)$/.exec(p))) return jobPage(decodeURIComponent(m[1]));
    if ((m = /^\/ui\/taskmanagers\/([^/]+)$/.exec(p))) return taskManagerPage(decodeURIComponent(m[1]));
    if (p === "/ui/taskmanagers") return taskManagersPage();
    if (p === "/ui/modules") return modulesPage();
    if (p === "" || p === "/ui") return overviewPage();
    return notFoundPage();
  }

  function navigate() {
    if (location.pathname === "/") history.replaceState(null, "", "/ui/");
    clearTimeout(timer);
    page = route();
    fill(main, page.root);
    for (const a of document.querySelectorAll("header nav a")) {
      a.classList.toggle("here", a.getAttribute("href") === location.pathname);
    }
    poll(page);
  }

  async function poll(current) {
    if (current !== page) return;
    try {
      await current.refresh();
      statusLine.textContent = "updated " + new Date().toLocaleTimeString();
      statusLine.className = "";
    } catch (e) {
      statusLine.textContent = String(e.message || e);
      statusLine.className = "error";
    }
    if (current === page) timer = setTimeout(() => poll(current), POLL_MS);
  }

  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a[data-nav]");
    if (!a || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
    e.preventDefault();
    if (a.getAttribute("href") !== location.pathname) history.pushState(null, "", a.getAttribute("href"));
    navigate();
  });
  window.addEventListener("popstate", navigate);

  // A page: a root element built once, sections filled by each refresh.
  function slots(names) {
    const root = h("div", { class: "page" });
    const parts = {};
    for (const n of names) {
      parts[n] = h("div", { class: "part part-" + n });
      root.append(parts[n]);
    }
    return { root, parts };
  }

  // ---- overview ---------------------------------------------------------

  function overviewPage() {
    const { root, parts } = slots(["cards", "jobs", "taskmanagers"]);
    async function refresh() {
      const [ov, jobs, tms] = await Promise.all([
        api("/v1/overview"),
        api("/v1/jobs"),
        api("/v1/taskmanagers"),
      ]);
      document.title = "Weir";
      fill(parts.cards, 
        h("h1", {}, "Overview"),
        h(
          "div",
          { class: "cards" },
          card("TaskManagers", ov.taskmanagers, link("/ui/taskmanagers", "list")),
          card("Slots free", ov.slots_free + " / " + ov.slots_total),
          card("Running jobs", ov.jobs.running),
          card("Finished", ov.jobs.finished),
          card("Failed", ov.jobs.failed),
          card("Canceled", ov.jobs.canceled),
          card("Modules", ov.modules, link("/ui/modules", "store")),
          card("Version", ov.version)
        )
      );
      fill(parts.jobs, 
        section(
          "Jobs",
          jobs.length === 0
            ? h("p", { class: "empty" }, "No jobs yet: weir submit JOB.toml")
            : table(
                ["Name", "State", "Id", "Submitted", "Duration", "Failure"],
                jobs.map((j) =>
                  h(
                    "tr",
                    { class: "job", "data-job": j.id, "data-state": j.state },
                    h("td", {}, link("/ui/jobs/" + encodeURIComponent(j.id), j.name)),
                    h("td", {}, badge(j.state)),
                    h("td", { class: "mono" }, j.id),
                    h("td", {}, time(j.submitted_at_ms)),
                    h("td", {}, ms((j.ended_at_ms || Date.now()) - j.submitted_at_ms)),
                    h("td", { class: "failure" }, j.failure || "")
                  )
                )
              )
        )
      );
      fill(parts.taskmanagers, section("TaskManagers", taskManagerTable(tms)));
    }
    return { root, refresh };
  }

  function card(title, value, extra) {
    return h("div", { class: "card" }, h("div", { class: "card-value" }, String(value)), h("div", { class: "card-title" }, title, extra ? [" · ", extra] : null));
  }

  function taskManagerTable(tms) {
    if (tms.length === 0) return h("p", { class: "empty" }, "No TaskManager registered.");
    return table(
      ["Id", "State", "Slots free", "Data address", "Last heartbeat", "Memory", "Buffered now / max", "Sent", "Received"],
      tms.map((t) =>
        h(
          "tr",
          { class: "taskmanager", "data-taskmanager": t.id },
          h("td", {}, link("/ui/taskmanagers/" + encodeURIComponent(t.id), t.id)),
          h("td", {}, badge(t.state), t.lost_reason ? h("div", { class: "failure" }, t.lost_reason) : null),
          h("td", {}, t.slots_free + " / " + t.slots_total),
          h("td", { class: "mono" }, t.data_address),
          h("td", {}, ms(t.last_heartbeat_ms_ago) + " ago"),
          h("td", { class: "num" }, t.memory ? bytes(t.memory.rss_bytes) : "—"),
          h("td", {}, bytes(t.net.buffered_bytes) + " / " + bytes(t.net.max_buffered_bytes)),
          h("td", {}, bytes(t.net.bytes_sent)),
          h("td", {}, bytes(t.net.bytes_received))
        )
      )
    );
  }

  // ---- job --------------------------------------------------------------

  function jobPage(id) {
    const { root, parts } = slots(["head", "actions", "diagnosis", "graph", "vertices", "subtasks", "checkpoints", "restores", "exceptions", "savepoints", "logs"]);
    const base = "/v1/jobs/" + encodeURIComponent(id);
    let logs = [];
    let after = 0;
    let terminal = false;
    const message = h("span", { class: "action-result" });
    const dir = h("input", { type: "text", placeholder: "/absolute/savepoint/dir", size: 36, "aria-label": "savepoint directory" });
    const act = (what, run) => async () => {
      message.textContent = what + "…";
      message.className = "action-result";
      try {
        const r = await run();
        message.textContent = what + ": " + (r && (r.status || r.state) ? r.status || r.state : "done");
      } catch (e) {
        message.textContent = what + " refused: " + e.message;
        message.className = "action-result error";
      }
    };
    const buttons = [
      h("button", { class: "danger", onclick: act("cancel", () => post(base + "/cancel")) }, "Cancel job"),
      dir,
      h("button", { onclick: act("savepoint", () => post(base + "/savepoints", { dir: dir.value.trim() })) }, "Savepoint"),
      h("button", { onclick: act("stop with savepoint", () => post(base + "/savepoints", { dir: dir.value.trim(), stop: true })) }, "Stop with savepoint"),
    ];
    fill(parts.actions, h("div", { class: "actions" }, buttons, message));

    async function refresh() {
      const [job, cps] = await Promise.all([api(base), api(base + "/checkpoints")]);
      const got = await api(base + "/logs?after=" + after + "&limit=1000");
      logs = logs.concat(got.lines).slice(-500);
      after = got.next;
      document.title = job.name + " · Weir";
      terminal = ["finished", "failed", "canceled"].includes(job.state);
      for (const b of parts.actions.querySelectorAll("button")) b.disabled = terminal;
      dir.disabled = terminal;

      fill(parts.head, 
        h("h1", {}, job.name, " ", badge(job.state)),
        h(
          "dl",
          { class: "facts" },
          fact("Id", h("span", { class: "mono" }, job.id)),
          fact("Submitted", time(job.submitted_at_ms)),
          fact("Duration", ms((job.ended_at_ms || Date.now()) - job.submitted_at_ms)),
          fact("Attempt", job.attempt),
          fact("Tasks", job.tasks),
          fact("Most queued batches", job.max_queued_batches),
          job.from_savepoint ? fact("From savepoint", job.from_savepoint) : null
        ),
        job.failure ? h("p", { class: "failure" }, "Failure: ", job.failure) : null
      );
      fill(parts.diagnosis, 
        job.bottleneck
          ? h("p", { class: "diagnosis" + (job.bottleneck.vertex ? " has-bottleneck" : ""), "data-bottleneck": job.bottleneck.vertex || "" }, h("strong", {}, "Why this speed: "), job.bottleneck.message)
          : null
      );
      fill(parts.graph, section("Job graph", drawGraph(job)));
      fill(parts.vertices, 
        section(
          "Vertices",
          table(
            ["Vertex", "Role", "Task", "Par.", "State", "Records in", "In/s", "Records out", "Out/s", "Busy", "Backpressured", "Idle", "Watermark", "Latency p50 / p99"],
            job.vertices.map((v) =>
              h(
                "tr",
                { class: "vertex-row", "data-vertex-row": v.id },
                h("td", {}, v.id),
                h("td", {}, v.role),
                h("td", { class: "mono" }, v.task),
                h("td", { class: "num" }, v.parallelism),
                h("td", {}, badge(v.state)),
                h("td", { class: "num records-in", "data-value": v.records_in }, count(v.records_in)),
                h("td", { class: "num" }, rate(v.records_in_per_s)),
                h("td", { class: "num records-out", "data-value": v.records_out }, count(v.records_out)),
                h("td", { class: "num" }, rate(v.records_out_per_s)),
                h("td", { class: "num" }, pct(v.busy_ratio)),
                h("td", { class: "num" }, pct(v.backpressured_ratio)),
                h("td", { class: "num" }, pct(v.idle_ratio)),
                h("td", {}, watermark(v.watermark)),
                h("td", { class: "num latency" }, latency(v.latency_ms))
              )
            )
          )
        )
      );
      fill(parts.subtasks, 
        section(
          "Subtasks",
          table(
            ["Subtask", "TaskManager", "State"],
            job.vertices.flatMap((v) =>
              v.subtasks.map((st) =>
                h(
                  "tr",
                  { class: "subtask" },
                  h("td", {}, v.id + " [" + st.index + "]"),
                  h("td", {}, link("/ui/taskmanagers/" + encodeURIComponent(st.taskmanager), st.taskmanager)),
                  h("td", {}, badge(st.state))
                )
              )
            )
          )
        )
      );
      fill(parts.checkpoints, checkpointSection(cps));
      fill(parts.restores, 
        cps.enabled
          ? section(
              "Restores",
              cps.restores.length === 0
                ? h("p", { class: "empty" }, "Not restarted.")
                : table(
                    ["Attempt", "At", "From checkpoint", "Skipped"],
                    cps.restores
                      .slice()
                      .reverse()
                      .map((r) =>
                        h(
                          "tr",
                          { class: "restore" },
                          h("td", { class: "num" }, r.attempt),
                          h("td", {}, time(r.at_ms)),
                          h("td", {}, r.checkpoint === null ? "none (from the start)" : r.checkpoint),
                          h("td", {}, (r.skipped || []).join(", "))
                        )
                      )
                  )
            )
          : null
      );
      fill(parts.exceptions, 
        section(
          "Exceptions",
          job.exceptions.length === 0
            ? h("p", { class: "empty" }, "No failures.")
            : h(
                "ol",
                { class: "exceptions" },
                job.exceptions.map((x) =>
                  h(
                    "li",
                    { class: "exception", "data-attempt": x.attempt },
                    h("div", { class: "exception-head" }, time(x.time_ms), " · attempt ", x.attempt, x.task ? [" · task ", x.task, x.subtask !== null ? " [" + x.subtask + "]" : ""] : null, x.taskmanager ? [" · ", link("/ui/taskmanagers/" + encodeURIComponent(x.taskmanager), x.taskmanager)] : null),
                    h("div", { class: "root-cause" }, x.root_cause)
                  )
                )
              )
        )
      );
      fill(parts.savepoints, 
        job.savepoints.length === 0
          ? null
          : section(
              "Savepoints",
              table(
                ["Id", "Status", "Directory", "Stop", "Checkpoint", "Requested", "Size", "Failure"],
                job.savepoints.map((sp) =>
                  h(
                    "tr",
                    { class: "savepoint" },
                    h("td", {}, sp.id),
                    h("td", {}, badge(sp.status)),
                    h("td", { class: "mono" }, sp.dir),
                    h("td", {}, sp.stop ? "yes" : ""),
                    h("td", {}, sp.checkpoint === null ? "" : sp.checkpoint),
                    h("td", {}, time(sp.requested_at_ms)),
                    h("td", {}, bytes(sp.bytes)),
                    h("td", { class: "failure" }, sp.failure || "")
                  )
                )
              )
            )
      );
      fill(parts.logs, 
        section(
          "Operator logs",
          logs.length === 0
            ? h("p", { class: "empty" }, "Nothing logged.")
            : h(
                "pre",
                { class: "logs" },
                logs.map((l) => h("div", { class: "log log-" + l.level }, new Date(l.time_ms).toLocaleTimeString(), " ", l.level.toUpperCase().padEnd(5), " ", l.operator, "[", l.subtask, "] ", l.message))
              ),
          got.dropped ? h("p", { class: "empty" }, got.dropped + " lines dropped (rate limit or ring bound)") : null
        )
      );
    }
    return { root, refresh };
  }

  function fact(name, value) {
    return [h("dt", {}, name), h("dd", {}, value)];
  }

  function checkpointSection(cps) {
    if (!cps.enabled) return section("Checkpoints", h("p", { class: "empty" }, "This job takes no checkpoints ([job.checkpoints])."));
    const completed = cps.history.filter((c) => c.status === "completed");
    return section(
      "Checkpoints",
      h(
        "dl",
        { class: "facts" },
        fact("Latest stored", cps.latest === null ? "none yet" : cps.latest),
        fact("Completed (listed)", completed.length),
        fact("Aborted (listed)", cps.history.filter((c) => c.status === "aborted").length)
      ),
      cps.history.length === 0
        ? h("p", { class: "empty" }, "None triggered yet.")
        : table(
            ["Id", "Status", "Triggered", "Duration", "Acked", "Full size", "Incremental", "Max alignment", "Failure"],
            cps.history.slice(0, 30).map((c) =>
              h(
                "tr",
                { class: "checkpoint", "data-checkpoint": c.id, "data-status": c.status },
                h("td", { class: "num" }, c.id),
                h("td", {}, badge(c.status)),
                h("td", {}, time(c.triggered_at_ms)),
                h("td", { class: "num" }, ms(c.duration_ms)),
                h("td", { class: "num" }, c.acked + " / " + c.total),
                h("td", { class: "num" }, bytes(c.full_size)),
                h("td", { class: "num" }, bytes(c.incremental_size)),
                h("td", { class: "num" }, ms(c.max_alignment_ms)),
                h("td", { class: "failure" }, c.failure || "")
              )
            )
          )
    );
  }

  // The job graph as a layered DAG: sources left, sinks right; one group
  // (class "vertex", data-vertex=<id>) per vertex; chained vertices framed
  // together; edges labeled with their partitioner.
  function drawGraph(job) {
    const W = 210, H = 104, GX = 80, GY = 26, PAD = 16;
    const ids = job.vertices.map((v) => v.id);
    const index = new Map(ids.map((id, i) => [id, i]));
    const edges = job.edges.filter((e) => index.has(e.from) && index.has(e.to));
    // Longest path from a source: the layer.
    const layer = ids.map(() => 0);
    const indeg = ids.map(() => 0);
    for (const e of edges) indeg[index.get(e.to)]++;
    const queue = ids.map((_, i) => i).filter((i) => indeg[i] === 0);
    while (queue.length) {
      const v = queue.shift();
      for (const e of edges) {
        if (index.get(e.from) !== v) continue;
        const t = index.get(e.to);
        layer[t] = Math.max(layer[t], layer[v] + 1);
        if (--indeg[t] === 0) queue.push(t);
      }
    }
    const layers = [];
    ids.forEach((_, i) => (layers[layer[i]] = layers[layer[i]] || []).push(i));
    // One pass of barycenters: a vertex near its inputs.
    const row = ids.map(() => 0);
    layers.forEach((members, l) => {
      if (l > 0) {
        const bary = (i) => {
          const ins = edges.filter((e) => index.get(e.to) === i).map((e) => row[index.get(e.from)]);
          return ins.length ? ins.reduce((a, b) => a + b, 0) / ins.length : 0;
        };
        members.sort((a, b) => bary(a) - bary(b));
      }
      members.forEach((i, r) => (row[i] = r));
    });
    const tallest = Math.max(...layers.map((m) => m.length));
    const pos = ids.map((_, i) => {
      const offset = ((tallest - layers[layer[i]].length) * (H + GY)) / 2;
      return { x: PAD + layer[i] * (W + GX), y: PAD + 18 + offset + row[i] * (H + GY) };
    });
    const width = PAD * 2 + layers.length * W + (layers.length - 1) * GX;
    const height = PAD * 2 + 18 + tallest * H + (tallest - 1) * GY + 6;
    const svg = s("svg", { class: "graph", viewBox: "0 0 " + width + " " + height, width: width, height: height, role: "img", "aria-label": "job graph" });
    svg.append(
      s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" })))
    );
    // Chains: a frame around the vertices of one task.
    const tasks = new Map();
    job.vertices.forEach((v, i) => (tasks.get(v.task) || tasks.set(v.task, []).get(v.task)).push(i));
    for (const [task, members] of tasks) {
      if (members.length < 2) continue;
      const xs = members.map((i) => pos[i].x), ys = members.map((i) => pos[i].y);
      const x = Math.min(...xs) - 8, y = Math.min(...ys) - 20;
      svg.append(
        s("g", { class: "chain", "data-task": task },
          s("rect", { x, y, width: Math.max(...xs) + W + 8 - x, height: Math.max(...ys) + H + 8 - y, rx: 10 }),
          s("text", { x: x + 8, y: y + 13, class: "chain-label" }, "chained: " + task))
      );
    }
    for (const e of edges) {
      const a = pos[index.get(e.from)], b = pos[index.get(e.to)];
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2;
      const mx = (x1 + x2) / 2;
      svg.append(
        s("g", { class: "edge" + (e.chained ? " chained" : ""), "data-from": e.from, "data-to": e.to },
          s("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }),
          s("text", { x: mx, y: (y1 + y2) / 2 - 5, class: "edge-label", "text-anchor": "middle" }, e.chained ? "chained" : e.partition + (e.from_tag ? " (" + e.from_tag + ")" : "")))
      );
    }
    const bottleneck = job.bottleneck && job.bottleneck.chain ? new Set(job.bottleneck.chain) : new Set();
    job.vertices.forEach((v, i) => {
      const { x, y } = pos[i];
      const busy = v.busy_ratio || 0, bp = v.backpressured_ratio || 0;
      const cls = "vertex role-" + v.role + " state-" + v.state + (bottleneck.has(v.id) ? " bottleneck" : "") + (bp >= 0.5 ? " backpressured" : busy >= 0.5 ? " busy" : "");
      const bar = W - 20;
      svg.append(
        s("g", { class: cls, "data-vertex": v.id, "data-records-in": v.records_in, "data-records-out": v.records_out, transform: `translate(${x} ${y})` },
          s("title", {}, v.id + ": busy " + pct(v.busy_ratio) + ", backpressured " + pct(v.backpressured_ratio) + ", idle " + pct(v.idle_ratio)),
          s("rect", { class: "box", width: W, height: H, rx: 6, style: "fill:" + loadColor(v) }),
          s("text", { x: 10, y: 18, class: "vertex-name" }, v.id),
          s("text", { x: W - 10, y: 18, class: "vertex-par", "text-anchor": "end" }, v.role + " · p=" + v.parallelism),
          s("text", { x: 10, y: 36 }, "in " + count(v.records_in) + " (" + rate(v.records_in_per_s) + ")"),
          s("text", { x: 10, y: 52 }, "out " + count(v.records_out) + " (" + rate(v.records_out_per_s) + ")"),
          s("text", { x: 10, y: 68 }, "busy " + pct(v.busy_ratio) + " · backpr. " + pct(v.backpressured_ratio)),
          s("text", { x: 10, y: 84, class: "vertex-wm" }, "watermark " + shortWatermark(v.watermark)),
          s("rect", { class: "bar-bg", x: 10, y: 91, width: bar, height: 6 }),
          s("rect", { class: "bar-busy", x: 10, y: 91, width: bar * busy, height: 6 }),
          s("rect", { class: "bar-bp", x: 10 + bar * busy, y: 91, width: bar * bp, height: 6 }),
          bottleneck.has(v.id) ? s("text", { x: W / 2, y: -6, class: "bottleneck-label", "text-anchor": "middle" }, "bottleneck") : null)
      );
    });
    return h("div", { class: "graph-wrap" }, svg, h("p", { class: "legend" }, h("span", { class: "key key-busy" }), " busy ", h("span", { class: "key key-bp" }), " backpressured ", h("span", { class: "key key-idle" }), " idle (share of time over the last seconds)"));
  }

  // Flink's colors: idle blue, busy red, backpressured grey-black.
  function loadColor(v) {
    if (v.busy_ratio === null || v.busy_ratio === undefined) return "#f4f6f8";
    const busy = v.busy_ratio, bp = v.backpressured_ratio || 0, idle = v.idle_ratio || 0;
    const total = busy + bp + idle || 1;
    const BUSY = [229, 57, 53], BP = [80, 80, 90], IDLE = [66, 133, 244];
    // The mix of the three, lightened so that the text stays legible.
    const c = [0, 1, 2].map((k) => (busy * BUSY[k] + bp * BP[k] + idle * IDLE[k]) / total);
    const [r, g, b] = c.map((x) => Math.round(255 - (255 - x) * 0.45));
    return `rgb(${r}, ${g}, ${b})`;
  }

  // ---- TaskManagers -----------------------------------------------------

  function taskManagersPage() {
    const { root, parts } = slots(["list"]);
    async function refresh() {
      const tms = await api("/v1/taskmanagers");
      document.title = "TaskManagers · Weir";
      fill(parts.list, h("h1", {}, "TaskManagers"), taskManagerTable(tms));
    }
    return { root, refresh };
  }

  function taskManagerPage(id) {
    const { root, parts } = slots(["head", "slots", "subtasks"]);
    async function refresh() {
      const tms = await api("/v1/taskmanagers");
      const tm = tms.find((t) => t.id === id);
      document.title = id + " · Weir";
      if (!tm) {
        fill(parts.head, h("h1", {}, id), h("p", { class: "failure" }, "No TaskManager with this id has registered."));
        return;
      }
      const jobIds = [...new Set(tm.occupied.map((o) => o.job))];
      const jobs = await Promise.all(jobIds.map((j) => api("/v1/jobs/" + encodeURIComponent(j)).catch(() => null)));
      const names = new Map(jobs.filter(Boolean).map((j) => [j.id, j.name]));
      fill(parts.head, 
        h("h1", {}, "TaskManager ", id, " ", badge(tm.state)),
        tm.lost_reason ? h("p", { class: "failure" }, "Lost: ", tm.lost_reason) : null,
        h(
          "dl",
          { class: "facts" },
          fact("Data address", h("span", { class: "mono" }, tm.data_address)),
          fact("Registered", time(tm.registered_at_ms)),
          fact("Last heartbeat", ms(tm.last_heartbeat_ms_ago) + " ago"),
          fact("Slots free", tm.slots_free + " / " + tm.slots_total),
          fact("Network buffers now", bytes(tm.net.buffered_bytes)),
          fact("Network buffers, most", bytes(tm.net.max_buffered_bytes)),
          fact("Bytes sent", bytes(tm.net.bytes_sent)),
          fact("Bytes received", bytes(tm.net.bytes_received)),
          fact("Channels out / in", (tm.net.channels_out || 0) + " / " + (tm.net.channels_in || 0)),
          fact("Credits held / buffers in flight", (tm.net.credits_available || 0) + " / " + (tm.net.buffers_in_flight || 0)),
          fact("Waited for credits", ms(Math.round((tm.net.credit_wait_ns || 0) / 1e6))),
          fact("Memory (resident)", tm.memory ? h("span", { class: "tm-memory", "data-rss": tm.memory.rss_bytes }, bytes(tm.memory.rss_bytes) + " now, " + bytes(tm.memory.peak_rss_bytes) + " at most") : "not reported")
        )
      );
      const bySlot = new Map(tm.occupied.map((o) => [o.slot, o.job]));
      const rows = [];
      for (let i = 0; i < tm.slots_total; i++) {
        const j = bySlot.get(i);
        rows.push(h("tr", { class: "slot" }, h("td", { class: "num" }, i), h("td", {}, j ? link("/ui/jobs/" + encodeURIComponent(j), names.get(j) || j) : h("span", { class: "empty" }, "free"))));
      }
      fill(parts.slots, section("Slots", table(["Slot", "Job"], rows)));
      const subtasks = [];
      for (const job of jobs.filter(Boolean)) {
        for (const v of job.vertices) {
          for (const st of v.subtasks) {
            if (st.taskmanager === id) subtasks.push(h("tr", {}, h("td", {}, link("/ui/jobs/" + encodeURIComponent(job.id), job.name)), h("td", {}, v.id + " [" + st.index + "]"), h("td", {}, badge(st.state))));
          }
        }
      }
      fill(parts.subtasks, section("Subtasks here", subtasks.length ? table(["Job", "Subtask", "State"], subtasks) : h("p", { class: "empty" }, "None.")));
    }
    return { root, refresh };
  }

  // ---- modules ----------------------------------------------------------

  function modulesPage() {
    const { root, parts } = slots(["list"]);
    async function refresh() {
      const [modules, jobs] = await Promise.all([api("/v1/modules"), api("/v1/jobs")]);
      document.title = "Modules · Weir";
      fill(parts.list, 
        h("h1", {}, "Module store"),
        modules.length === 0
          ? h("p", { class: "empty" }, "No modules: weir upload MODULE.wasm --name NAME")
          : table(
              ["Name", "Version", "Hash", "Size", "Uploaded", "Used by"],
              modules.map((m) => {
                const users = jobs.filter((j) => (j.modules || []).includes(m.hash));
                return h(
                  "tr",
                  { class: "module", "data-module": m.name + "@" + m.version },
                  h("td", {}, m.name),
                  h("td", {}, m.version),
                  h("td", { class: "mono", title: m.hash }, shortHash(m.hash)),
                  h("td", { class: "num" }, bytes(m.size)),
                  h("td", {}, time(m.uploaded_at_ms)),
                  h("td", {}, users.length ? users.map((j, i) => [i ? ", " : "", link("/ui/jobs/" + encodeURIComponent(j.id), j.name), " (", j.state, ")"]) : h("span", { class: "empty" }, "no job"))
                );
              })
            )
      );
    }
    return { root, refresh };
  }

  function notFoundPage() {
    const root = h("div", { class: "page" }, h("h1", {}, "Not found"), h("p", {}, "No page at ", location.pathname, ". ", link("/ui/", "Overview")));
    return { root, refresh: async () => {} };
  }

  navigate();
})();
