// Sandtop's live view. Everything shown that came from the run, the
// model, the guest or a page is set as text (textContent), never as
// markup. The page talks only to its own origin.
//
// The page key: the login's answer carries it in a meta tag (the page
// `/` serves has it empty). It is kept in this tab's sessionStorage,
// which only script of this exact origin (port included) can read, and
// sent with the WebSocket handshake and the snapshot request: the view's
// cookie reaches every port of 127.0.0.1, the key does not.
"use strict";

const KEY_ITEM = "sandtop-page-key";
const pageKey = (() => {
  const meta = document.querySelector('meta[name="sandtop-page-key"]');
  const given = meta ? meta.getAttribute("content") : "";
  if (meta) meta.remove();
  if (given) {
    try {
      sessionStorage.setItem(KEY_ITEM, given);
    } catch (e) {
      // No storage: the key lives in this page only (a reload needs a new link).
    }
    // The address bar shows the page, not the spent login link.
    history.replaceState(null, "", "/");
    return given;
  }
  try {
    return sessionStorage.getItem(KEY_ITEM) || "";
  } catch (e) {
    return "";
  }
})();

const $ = (id) => document.getElementById(id);
const view = {
  frames: 0,
  seq: 0,
  screen: null,
  viewOnly: true,
  runAttached: false,
  localControl: false,
  holder: "agent",
  lastCall: null,
  latencies: [],
  log: [],
  meta: null,
  queue: [],
  awaiting: false,
  questions: {},
  hasKey: pageKey !== "",
  snapshots: [],
};
window.sandtopView = view;

const screen = $("screen");
const overlay = $("overlay");
const ctx = screen.getContext("2d");
const octx = overlay.getContext("2d");

function logLine(text) {
  view.log.push(text);
  const li = document.createElement("li");
  li.textContent = text;
  $("log").prepend(li);
  while ($("log").children.length > 100) $("log").lastChild.remove();
}

function inControl() {
  return !view.viewOnly && (view.localControl || view.holder === "operator");
}

function renderControls() {
  const control = inControl();
  $("take").disabled = view.viewOnly || control || view.holder === "take_requested";
  $("give").disabled = view.viewOnly || !control;
  $("controls").classList.toggle("hidden", view.viewOnly);
  screen.classList.toggle("in-control", control);
  const h = $("holder");
  h.textContent = control ? "you have control" : view.holder === "take_requested" ? "taking control at the next step" : view.runAttached ? "the agent has control" : "no run";
  h.className = "badge" + (control ? " operator" : "");
  $("control-note").textContent = control ? "Your mouse and keys go to the guest." : "";
  for (const b of document.querySelectorAll(".question button, .question input")) {
    b.disabled = view.viewOnly;
  }
}

// ---- frames ----
let fpsCount = 0;
setInterval(() => {
  $("fps").textContent = fpsCount + " frames/s";
  fpsCount = 0;
}, 1000);

function drawFrame(blob) {
  const meta = view.meta;
  createImageBitmap(blob).then((bmp) => {
    if (screen.width !== bmp.width || screen.height !== bmp.height) {
      screen.width = overlay.width = bmp.width;
      screen.height = overlay.height = bmp.height;
    }
    ctx.drawImage(bmp, 0, 0);
    bmp.close();
    view.frames += 1;
    fpsCount += 1;
    if (meta) {
      view.seq = meta.seq;
      view.screen = meta.screen;
      view.latencies.push(Date.now() - meta.t_unix_ms);
      if (view.latencies.length > 1000) view.latencies.shift();
    }
    drawOverlay();
  });
}

// ---- the last call's targets ----
function toScreen(map, x, y) {
  const r = map.region;
  const i = map.image;
  return [
    r.x + Math.floor(((2 * x + 1) * r.width) / (2 * i.width)),
    r.y + Math.floor(((2 * y + 1) * r.height) / (2 * i.height)),
  ];
}

function pointsOf(a) {
  if (a.path) return a.path.map((p) => [p.x, p.y]);
  if (typeof a.x === "number" && typeof a.y === "number") return [[a.x, a.y]];
  return [];
}

function drawOverlay() {
  octx.clearRect(0, 0, overlay.width, overlay.height);
  const c = view.lastCall;
  // A denied call never ran: nothing to mark.
  if (!c || !view.screen || c.state === "denied") return;
  const k = overlay.width / view.screen.width;
  octx.lineWidth = 3;
  octx.strokeStyle = c.state === "operator" ? "#d97706" : "#dc2626";
  for (const a of c.actions) {
    const pts = pointsOf(a).map(([x, y]) => toScreen(c.scale_map, x, y)).map(([x, y]) => [x * k, y * k]);
    if (pts.length > 1) {
      octx.beginPath();
      octx.moveTo(pts[0][0], pts[0][1]);
      for (const p of pts.slice(1)) octx.lineTo(p[0], p[1]);
      octx.stroke();
    }
    for (const [x, y] of pts) {
      octx.beginPath();
      octx.arc(x, y, 10, 0, 2 * Math.PI);
      octx.stroke();
    }
  }
}

// ---- run state ----
function setText(id, text) {
  $(id).textContent = text;
}

function onState(s) {
  view.holder = s.holder;
  setText("phase", s.ending ? s.phase + " (" + s.ending + ")" : s.phase);
  setText("step", s.step + " of " + s.max_steps);
  const u = s.usage;
  setText("usage", u.requests + " requests, " + u.input_tokens + " in, " + u.output_tokens + " out, " + u.total_tokens + " total tokens");
  view.lastCall = s.last_call || null;
  const list = $("last-call");
  list.replaceChildren();
  if (view.lastCall) {
    for (const a of view.lastCall.actions) {
      const li = document.createElement("li");
      li.textContent = JSON.stringify(a);
      list.append(li);
    }
    const li = document.createElement("li");
    li.textContent = "call " + view.lastCall.call_id + ": " + view.lastCall.state;
    list.append(li);
  }
  drawOverlay();
  renderControls();
}

function onQuestion(q) {
  if (view.questions[q.id]) return;
  const box = document.createElement("div");
  box.className = "question";
  box.dataset.id = q.id;
  box.dataset.kind = q.kind;
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = q.title;
  const text = document.createElement("pre");
  text.textContent = q.text;
  const note = document.createElement("div");
  note.className = "origin-note";
  note.textContent = "Everything in the box above comes from the model, the guest or a page: it is not Sandtop speaking.";
  box.append(title, text, note);
  const buttons = document.createElement("div");
  for (const a of q.answers) {
    if (a === "text") {
      const input = document.createElement("input");
      input.type = "text";
      input.className = "answer-text";
      input.placeholder = "Your answer";
      const send = document.createElement("button");
      send.type = "button";
      send.textContent = "Send answer";
      send.className = "approve answer-send";
      send.addEventListener("click", () => answer(q.id, "text", input.value));
      buttons.append(input, send);
      continue;
    }
    const b = document.createElement("button");
    b.type = "button";
    b.className = a + " answer-" + a;
    b.textContent = a === "approve" ? "Approve" : a === "deny" ? (q.kind === "ask_user" ? "Refuse" : "Deny") : "Cancel";
    b.addEventListener("click", () => answer(q.id, a));
    buttons.append(b);
  }
  box.append(buttons);
  view.questions[q.id] = box;
  $("questions").append(box);
  $("no-questions").classList.add("hidden");
  renderControls();
}

function onClosed(c) {
  const box = view.questions[c.id];
  if (box) {
    box.remove();
    delete view.questions[c.id];
  }
  logLine("question " + c.id + " answered by the " + c.by + ": " + c.answer);
  $("no-questions").classList.toggle("hidden", Object.keys(view.questions).length > 0);
}

function answer(id, word, text) {
  const msg = { type: "answer", id: id, answer: word };
  if (word === "text") msg.text = text;
  send(msg);
}

function onNetwork(e) {
  const li = document.createElement("li");
  li.textContent = JSON.stringify(e.entry);
  $("network").prepend(li);
  while ($("network").children.length > 50) $("network").lastChild.remove();
}

// ---- the socket ----
let ws = null;

function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg));
}

function onText(m) {
  switch (m.type) {
    case "page":
      view.viewOnly = m.view_only;
      break;
    case "view":
      view.runAttached = m.run_attached;
      view.localControl = m.local_control;
      setText("session", m.session);
      if (!m.run_attached) {
        view.holder = "agent";
        setText("phase", "no run attached");
        for (const id of Object.keys(view.questions)) onClosed({ id: id, by: "run's end", answer: "closed" });
      }
      if (m.problem) logLine(m.problem);
      break;
    case "hello":
      setText("task", m.task);
      setText("folder", m.run_folder);
      break;
    case "state":
      onState(m);
      break;
    case "question":
      onQuestion(m);
      break;
    case "closed":
      onClosed(m);
      break;
    case "network":
      onNetwork(m);
      break;
    case "signed_in":
      logLine("sign-in " + m.call_id + ": " + m.origin + " received " +
        m.fields.map((f) => f.label + " (" + f.kind + ")").join(", ") +
        " from the " + (m.source === "file" ? "--credentials file" : "terminal"));
      break;
    case "frame":
      view.meta = m;
      break;
    case "acted":
      view.awaiting = false;
      if (!m.ok) logLine("your input was refused: " + (m.error || "unknown error"));
      flush();
      break;
    case "refused":
      view.awaiting = false;
      logLine(m.what + " refused: " + m.why);
      flush();
      break;
    default:
      break;
  }
  renderControls();
}

function connect() {
  if (!pageKey) {
    $("link").textContent = "no key";
    $("link").className = "badge bad";
    logLine("This tab has no key to the view: use the tab where the link host-cli printed was opened, or start host-cli view again for a new link.");
    return;
  }
  ws = new WebSocket("ws:" + "/" + "/" + location.host + "/ws", ["sandtop-view", "sandtop-key." + pageKey]);
  ws.binaryType = "blob";
  ws.addEventListener("open", () => {
    $("link").textContent = "live";
    $("link").className = "badge ok";
  });
  ws.addEventListener("close", () => {
    $("link").textContent = "disconnected";
    $("link").className = "badge bad";
    setTimeout(connect, 1000);
  });
  ws.addEventListener("message", (ev) => {
    if (typeof ev.data === "string") {
      let m;
      try {
        m = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      onText(m);
    } else {
      drawFrame(ev.data);
    }
  });
}

// ---- the operator's input (only while in control) ----
function enqueue(a) {
  const last = view.queue[view.queue.length - 1];
  if (a.type === "type" && last && last.type === "type") {
    last.text += a.text;
  } else if (a.type === "move" && last && last.type === "move") {
    view.queue[view.queue.length - 1] = a;
  } else {
    view.queue.push(a);
  }
  flush();
}

function flush() {
  if (view.awaiting || view.queue.length === 0 || !inControl()) return;
  const actions = view.queue.splice(0, 64);
  view.awaiting = true;
  send({ type: "act", actions: actions });
}

function point(ev) {
  const sx = screen.width / screen.clientWidth;
  const sy = screen.height / screen.clientHeight;
  const w = view.screen ? view.screen.width / screen.width : 1;
  const h = view.screen ? view.screen.height / screen.height : 1;
  const maxX = view.screen ? view.screen.width - 1 : screen.width - 1;
  const maxY = view.screen ? view.screen.height - 1 : screen.height - 1;
  return {
    x: Math.max(0, Math.min(maxX, Math.floor(ev.offsetX * sx * w))),
    y: Math.max(0, Math.min(maxY, Math.floor(ev.offsetY * sy * h))),
  };
}

const BUTTONS = ["left", "wheel", "right", "back", "forward"];
let press = null;
let lastMove = 0;

screen.addEventListener("contextmenu", (ev) => ev.preventDefault());
screen.addEventListener("mousedown", (ev) => {
  if (!inControl()) return;
  ev.preventDefault();
  screen.focus();
  const p = point(ev);
  press = { button: BUTTONS[ev.button] || "left", path: [p] };
});
screen.addEventListener("mousemove", (ev) => {
  if (!inControl()) return;
  const p = point(ev);
  if (press) {
    const last = press.path[press.path.length - 1];
    if (Math.abs(p.x - last.x) + Math.abs(p.y - last.y) >= 4) press.path.push(p);
    return;
  }
  const now = Date.now();
  if (now - lastMove >= 150) {
    lastMove = now;
    enqueue({ type: "move", x: p.x, y: p.y });
  }
});
screen.addEventListener("mouseup", (ev) => {
  if (!inControl() || !press) return;
  ev.preventDefault();
  const p = point(ev);
  const first = press.path[0];
  if (press.button === "left" && Math.abs(p.x - first.x) + Math.abs(p.y - first.y) >= 4) {
    press.path.push(p);
    enqueue({ type: "drag", path: press.path.slice(0, 1000) });
  } else {
    enqueue({ type: "click", button: press.button, x: first.x, y: first.y });
  }
  press = null;
});
screen.addEventListener(
  "wheel",
  (ev) => {
    if (!inControl()) return;
    ev.preventDefault();
    const k = ev.deltaMode === 1 ? 40 : ev.deltaMode === 2 ? 400 : 1;
    const p = point(ev);
    enqueue({ type: "scroll", x: p.x, y: p.y, scroll_x: Math.round(ev.deltaX * k), scroll_y: Math.round(ev.deltaY * k) });
  },
  { passive: false },
);

const KEYS = {
  Enter: "ENTER", Backspace: "BACKSPACE", Tab: "TAB", Escape: "ESC", Delete: "DELETE",
  Insert: "INSERT", Home: "HOME", End: "END", PageUp: "PAGEUP", PageDown: "PAGEDOWN",
  ArrowUp: "ARROWUP", ArrowDown: "ARROWDOWN", ArrowLeft: "ARROWLEFT", ArrowRight: "ARROWRIGHT",
  " ": "SPACE",
};
for (let i = 1; i <= 12; i++) KEYS["F" + i] = "F" + i;
const MODIFIERS = ["Control", "Shift", "Alt", "Meta", "AltGraph", "CapsLock"];

screen.addEventListener("keydown", (ev) => {
  if (!inControl()) return;
  ev.preventDefault();
  if (MODIFIERS.includes(ev.key)) return;
  const chord = ev.ctrlKey || ev.altKey || ev.metaKey;
  if (!chord && [...ev.key].length === 1) {
    enqueue({ type: "type", text: ev.key });
    return;
  }
  const name = KEYS[ev.key] || ([...ev.key].length === 1 ? ev.key.toUpperCase() : null);
  if (!name) return;
  const keys = [];
  if (ev.ctrlKey) keys.push("CTRL");
  if (ev.altKey) keys.push("ALT");
  if (ev.shiftKey && chord) keys.push("SHIFT");
  if (ev.metaKey) keys.push("SUPER");
  keys.push(name);
  enqueue({ type: "keypress", keys: keys });
});

// ---- the snapshot: fetched with the key, saved from a blob ----
async function snapshot() {
  try {
    const r = await fetch("/snapshot.png", { headers: { "Sandtop-Page-Key": pageKey }, cache: "no-store" });
    if (!r.ok) {
      const why = await r.text();
      view.snapshots.push({ ok: false, status: r.status });
      logLine("no snapshot: " + why);
      return;
    }
    const blob = await r.blob();
    view.snapshots.push({ ok: true, status: r.status, bytes: blob.size, type: blob.type });
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = "sandtop-snapshot.png";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) {
    view.snapshots.push({ ok: false, status: 0 });
    logLine("no snapshot: " + e);
  }
}

$("snapshot").addEventListener("click", snapshot);
$("take").addEventListener("click", () => send({ type: "take" }));
$("give").addEventListener("click", () => {
  view.queue = [];
  send({ type: "give" });
});

renderControls();
connect();
