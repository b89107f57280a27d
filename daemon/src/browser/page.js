// sandtopd's page agent. Evaluated by the daemon as `(SOURCE)(REQUEST)` in a
// WebDriver BiDi *sandbox* realm of the tab's document: it sees the page's
// DOM through Xray wrappers, but the page's own scripts cannot see or patch
// what it defines, nor replace the DOM methods it calls. It returns one
// JSON string. Nothing here navigates, submits or types: it reads, keeps
// the ref registry, and locates elements; input comes from BiDi's input
// module (trusted events), driven by the daemon.
//
// Refs: every element reported gets a ref "<doc>.<n>", where <doc> is a
// random id of this document's registry (a new document — reload,
// navigation, another tab — has another registry, so an old ref is stale
// there) and <n> a counter. An element keeps its ref while it lives; the
// registry holds elements weakly.
//
// Size: ~700 lines, one function by necessity (the daemon evaluates this
// source whole, in one realm, per call): the read walk, the ref registry,
// the actions' element side and the URL policy and target checks (issue
// 30), which must run in the same evaluation as the element lookups they
// guard.
(function (request) {
  "use strict";
  const L = request.limits;
  const g = globalThis;
  if (!g.__sandtopRegistry) {
    const bytes = new Uint8Array(6);
    crypto.getRandomValues(bytes);
    g.__sandtopRegistry = {
      doc: Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""),
      next: 1,
      byRef: new Map(),
      byEl: new WeakMap(),
      // Scope refs (read_page_scoped): another namespace of the same
      // document, so both kinds go stale together.
      scopeByRef: new Map(),
      scopeByEl: new WeakMap(),
    };
  }
  const reg = g.__sandtopRegistry;
  // Inputs that hold a credential the operator gave (sign-in): reads omit
  // their values, as they do for passwords.
  if (!reg.priv) reg.priv = new WeakSet();
  const doc = document;

  // --- text hygiene -------------------------------------------------------
  // Valid Unicode only (no lone surrogates), no control characters, runs of
  // white space as one space, cut to a byte budget at a character boundary.
  const enc = new TextEncoder();
  function clean(s) {
    if (typeof s !== "string") return "";
    s = s.toWellFormed ? s.toWellFormed() : s.replace(/[\ud800-\udfff]/g, "\ufffd");
    return s.replace(/[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/g, " ")
      .replace(/\s+/g, " ").trim();
  }
  function cut(s, max) {
    if (enc.encode(s).length <= max) return [s, false];
    let out = "", n = 0;
    for (const ch of s) {
      const b = enc.encode(ch).length;
      if (n + b > max) break;
      out += ch; n += b;
    }
    return [out, true];
  }

  // --- visibility and geometry ---------------------------------------------
  function visible(el) {
    if (!el.isConnected) return false;
    if (el.checkVisibility && !el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  }
  // The element's box in the top-level viewport (same-origin frames add
  // their frame element's offset).
  function topRect(el) {
    let r = el.getBoundingClientRect();
    let x = r.left, y = r.top;
    let win = el.ownerDocument.defaultView;
    while (win && win.frameElement) {
      const fe = win.frameElement;
      const fr = fe.getBoundingClientRect();
      x += fr.left + fe.clientLeft;
      y += fr.top + fe.clientTop;
      win = fe.ownerDocument.defaultView;
    }
    return { x, y, w: r.width, h: r.height };
  }

  // --- roles and names -----------------------------------------------------
  const TEXT_TYPES = new Set(["", "text", "email", "search", "tel", "url", "password", "number",
    "date", "datetime-local", "month", "time", "week"]);
  function roleOf(el) {
    const aria = (el.getAttribute("role") || "").trim().split(/\s+/)[0].toLowerCase();
    const tag = el.localName;
    if (tag === "input") {
      const t = (el.getAttribute("type") || "").toLowerCase();
      if (t === "hidden") return null;
      if (["button", "submit", "reset", "image"].includes(t)) return "button";
      if (t === "checkbox") return aria === "switch" ? "checkbox" : "checkbox";
      if (t === "radio") return "radio";
      if (t === "range") return "slider";
      if (t === "file" || t === "color") return "unsupported";
      if (TEXT_TYPES.has(t)) return el.list ? "combobox" : "textbox";
      return "textbox";
    }
    if (tag === "textarea") return "textbox";
    if (tag === "select") return (el.multiple || el.size > 1) ? "listbox" : "combobox";
    if (tag === "button") return "button";
    switch (aria) {
      case "button": case "link": case "menuitem": case "tab": case "option": case "menuitemcheckbox":
      case "menuitemradio": case "treeitem":
        return aria === "menuitemcheckbox" ? "checkbox" : aria === "menuitemradio" ? "radio" : "button";
      case "textbox": case "searchbox": return "textbox";
      case "combobox": return "combobox";
      case "checkbox": case "switch": return "checkbox";
      case "radio": return "radio";
      case "slider": case "spinbutton": return "slider";
      case "listbox": return "listbox";
    }
    if (tag === "a" && el.hasAttribute("href")) return "button";
    if (tag === "summary") return "button";
    if (el.isContentEditable && (!el.parentElement || !el.parentElement.isContentEditable)) return "textbox";
    return null;
  }
  function textOf(el, depth) {
    // The text an element contributes to a name: its descendants' text,
    // alt text of images, without hidden parts.
    if (depth > 8) return "";
    let out = "";
    for (const n of el.childNodes) {
      if (n.nodeType === 3) out += n.data;
      else if (n.nodeType === 1) {
        const c = n;
        if (c.localName === "script" || c.localName === "style") continue;
        if (c.getAttribute("aria-hidden") === "true") continue;
        if (c.localName === "img") { out += " " + (c.getAttribute("alt") || "") + " "; continue; }
        out += " " + textOf(c, depth + 1) + " ";
      }
      if (out.length > 4 * L.label) break;
    }
    return out;
  }
  function byIds(el, attr) {
    const ids = (el.getAttribute(attr) || "").trim();
    if (!ids) return "";
    const root = el.getRootNode();
    return ids.split(/\s+/).map((id) => {
      const t = root.getElementById ? root.getElementById(id) : el.ownerDocument.getElementById(id);
      return t ? textOf(t, 0) : "";
    }).join(" ");
  }
  function nameOf(el, role) {
    let n = clean(byIds(el, "aria-labelledby"));
    if (!n) n = clean(el.getAttribute("aria-label") || "");
    if (!n && el.labels && el.labels.length) n = clean(Array.from(el.labels, (l) => textOf(l, 0)).join(" "));
    if (!n && el.localName === "input") {
      const t = (el.getAttribute("type") || "").toLowerCase();
      if (["button", "submit", "reset"].includes(t)) n = clean(el.value || (t === "submit" ? "Submit" : t === "reset" ? "Reset" : ""));
      if (t === "image") n = clean(el.getAttribute("alt") || "");
    }
    if (!n && role === "button") n = clean(textOf(el, 0));
    if (!n) n = clean(el.getAttribute("title") || "");
    if (!n) n = clean(el.getAttribute("placeholder") || "");
    if (!n && el.closest) {
      const fs = el.closest("fieldset");
      const lg = fs && fs.querySelector("legend");
      if (lg && role !== "button") n = clean(textOf(lg, 0));
    }
    return n;
  }
  function isPassword(el) {
    return (el.localName === "input" && (el.getAttribute("type") || "").toLowerCase() === "password") ||
      reg.priv.has(el);
  }

  // --- the registry ---------------------------------------------------------
  function refFor(el, omitted) {
    let r = reg.byEl.get(el);
    if (r) return r;
    if (reg.byRef.size >= L.refs) {
      // Drop refs of elements that are gone before giving up.
      for (const [k, w] of reg.byRef) if (!w.deref() || !w.deref().isConnected) reg.byRef.delete(k);
      if (reg.byRef.size >= L.refs) { omitted.add("target_limit"); return null; }
    }
    r = reg.doc + "." + (reg.next++);
    reg.byEl.set(el, r);
    reg.byRef.set(r, new WeakRef(el));
    return r;
  }
  function isScopeRef(ref) {
    return typeof ref === "string" && ref.startsWith(reg.doc + ".s");
  }
  function scopeFor(el) {
    let r = reg.scopeByEl.get(el);
    if (r) return r;
    if (reg.scopeByRef.size >= L.refs) {
      for (const [k, w] of reg.scopeByRef) if (!w.deref() || !w.deref().isConnected) reg.scopeByRef.delete(k);
      if (reg.scopeByRef.size >= L.refs) return null;
    }
    r = reg.doc + ".s" + (reg.next++);
    reg.scopeByEl.set(el, r);
    reg.scopeByRef.set(r, new WeakRef(el));
    return r;
  }
  function resolveScope(ref) {
    if (!isScopeRef(ref)) return null;
    const w = reg.scopeByRef.get(ref);
    const el = w && w.deref();
    if (!el || !el.isConnected || !visible(el)) return null;
    return el;
  }
  function resolve(ref) {
    if (typeof ref !== "string" || !ref.startsWith(reg.doc + ".") || isScopeRef(ref)) return null;
    const w = reg.byRef.get(ref);
    const el = w && w.deref();
    if (!el || !el.isConnected || !visible(el)) return null;
    return el;
  }

  // --- the walk -------------------------------------------------------------
  // Iterative, over the light DOM, open shadow roots and same-origin frames,
  // with budgets: nodes visited, frames, elements reported.
  function walk(visit, omitted) {
    let nodes = 0, frames = 0;
    const stack = [[doc.documentElement, 0]];
    while (stack.length) {
      const [node, depth] = stack.pop();
      if (!node) continue;
      if (++nodes > L.nodes) { omitted.add("work_limit"); return; }
      if (node.nodeType !== 1) continue;
      const el = node;
      const tag = el.localName;
      if (tag === "script" || tag === "style" || tag === "template" || tag === "noscript") continue;
      if (visit(el) === "stop") return;
      if (tag === "iframe" || tag === "frame") {
        let inner = null;
        try { inner = el.contentDocument; } catch (_) { inner = null; }
        if (!inner) { if (visible(el)) omitted.add("remote_action"); continue; }
        if (depth >= L.frame_depth || ++frames > L.frames) { omitted.add("frame_limit"); continue; }
        stack.push([inner.documentElement, depth + 1]);
        continue;
      }
      const kids = el.children;
      for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], depth]);
      if (el.shadowRoot) {
        const sk = el.shadowRoot.children;
        for (let i = sk.length - 1; i >= 0; i--) stack.push([sk[i], depth]);
      }
    }
  }

  function describe(el, role, omitted) {
    const ref = refFor(el, omitted);
    if (!ref) return null;
    let label = nameOf(el, role);
    if (!label) { omitted.add("name_limit"); return null; }
    let cutDone;
    [label, cutDone] = cut(label, L.label);
    if (cutDone) omitted.add("name_limit");
    const out = { ref, role, label };
    if (role === "checkbox" || role === "radio") {
      const c = el.localName === "input" ? el.checked : el.getAttribute("aria-checked") === "true";
      out.checked = !!c;
    }
    const value = (v) => {
      let [s, c] = cut((v || "").toWellFormed ? (v || "").toWellFormed() : String(v || ""), L.value);
      s = s.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, " ");
      if (c) omitted.add("value");
      return s;
    };
    if (role === "textbox") {
      if (isPassword(el)) { if (el.value) omitted.add("private"); }
      else if (el.localName === "input" || el.localName === "textarea") out.value = value(el.value);
      else if (el.isContentEditable) out.value = value(el.innerText);
    } else if (role === "slider" && el.localName === "input") {
      out.value = value(el.value);
    } else if ((role === "combobox" || role === "listbox") && el.localName === "select") {
      const opts = [];
      for (const o of el.options) {
        if (opts.length >= 100) { omitted.add("report_limit"); break; }
        let [ol] = cut(clean(o.label || o.text), L.label);
        if (!ol) ol = "(empty)";
        const item = { label: ol, value: value(o.value) };
        if (role === "listbox") item.selected = o.selected;
        opts.push(item);
      }
      out.options = opts;
      if (role === "combobox") out.value = value(el.value);
    } else if (role === "combobox" && el.localName === "input") {
      out.value = value(el.value);
    }
    return out;
  }

  function read(mode, query) {
    const omitted = new Set();
    const elements = [];
    const root = doc.documentElement;
    if (!root || !/^(text\/html|application\/xhtml\+xml)$/.test(doc.contentType || "") || !doc.body) {
      return { text: "", elements, omitted: ["unsupported_root"] };
    }
    const words = query ? clean(query).toLowerCase().split(" ").filter(Boolean) : null;
    if (mode !== "text") {
      walk((el) => {
        const role = roleOf(el);
        if (!role) return;
        if (el.disabled || el.getAttribute("aria-disabled") === "true" || el.inert) return;
        if (!visible(el)) return;
        if (role === "unsupported") { omitted.add("unsupported_control"); return; }
        if (words) {
          const hay = (nameOf(el, role) + " " + (isPassword(el) ? "" : (el.value || "")) + " " + role).toLowerCase();
          if (!words.every((w) => hay.includes(w))) return;
        }
        if (elements.length >= L.elements) { omitted.add("report_limit"); return "stop"; }
        const d = describe(el, role, omitted);
        if (d) elements.push(d);
      }, omitted);
    }
    let text = "";
    if (mode === "all" || mode === "text" || mode === "find") {
      let raw = doc.body.innerText || "";
      if (raw.length > 8 * L.text) { raw = raw.slice(0, 8 * L.text); omitted.add("text_limit"); }
      raw = raw.toWellFormed ? raw.toWellFormed() : raw;
      raw = raw.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, " ");
      let lines = raw.split("\n").map((l) => l.replace(/[ \t\u00a0]+/g, " ").trim()).filter(Boolean);
      if (words) lines = lines.filter((l) => words.every((w) => l.toLowerCase().includes(w)));
      let t, c;
      [t, c] = cut(lines.join("\n"), L.text);
      if (c) omitted.add("text_limit");
      text = t;
    }
    return { text, elements, omitted: Array.from(omitted) };
  }

  // --- scoped reads ----------------------------------------------------------
  // Sections: landmarks and named regions, by ARIA role or the HTML element
  // that implies one.
  const SECTION_ROLES = new Set(["region", "navigation", "main", "banner", "contentinfo",
    "complementary", "form", "search", "dialog", "alertdialog", "article", "group"]);
  const IMPLICIT = { header: "banner", nav: "navigation", main: "main", aside: "complementary",
    footer: "contentinfo", form: "form", dialog: "dialog", section: "region", article: "article",
    fieldset: "group", search: "search" };
  function sectionRole(el) {
    const aria = (el.getAttribute("role") || "").trim().split(/\s+/)[0].toLowerCase();
    const role = aria || IMPLICIT[el.localName];
    return role && SECTION_ROLES.has(role) ? role : null;
  }
  // The first heading that belongs to `el` itself, not to a section
  // nested in it.
  function ownHeading(el) {
    for (const h of el.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
      let p = h.parentElement, nested = false;
      for (; p && p !== el; p = p.parentElement) if (sectionRole(p)) { nested = true; break; }
      if (!nested) return h;
    }
    return null;
  }
  function sectionLabel(el) {
    const role = sectionRole(el);
    if (!role) return null;
    let name = clean(byIds(el, "aria-labelledby")) || clean(el.getAttribute("aria-label"));
    if (!name && el.localName === "fieldset") {
      const lg = el.querySelector(":scope > legend");
      if (lg) name = clean(textOf(lg, 0));
    }
    if (!name) {
      const h = ownHeading(el);
      if (h) name = clean(textOf(h, 0));
    }
    if (!name) name = role;
    return cut(name, L.label)[0] || role;
  }
  // Visits `root` and what lies at most `maxDepth` DOM levels below it
  // (children, open shadow roots and same-origin frames each one level).
  function walkFrom(root, maxDepth, visit, omitted) {
    let nodes = 0, frames = 0;
    const stack = [[root, 0, 0]];
    while (stack.length) {
      const [el, level, frameDepth] = stack.pop();
      if (!el || el.nodeType !== 1) continue;
      if (++nodes > L.nodes) { omitted.add("work_limit"); return; }
      const tag = el.localName;
      if (tag === "script" || tag === "style" || tag === "template" || tag === "noscript") continue;
      if (visit(el, level) === "stop") return;
      if (level >= maxDepth) continue;
      if (tag === "iframe" || tag === "frame") {
        let inner = null;
        try { inner = el.contentDocument; } catch (_) { inner = null; }
        if (!inner) { if (visible(el)) omitted.add("remote_action"); continue; }
        if (frameDepth >= L.frame_depth || ++frames > L.frames) { omitted.add("frame_limit"); continue; }
        stack.push([inner.documentElement, level + 1, frameDepth + 1]);
        continue;
      }
      const kids = el.children;
      for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], level + 1, frameDepth]);
      if (el.shadowRoot) {
        const sk = el.shadowRoot.children;
        for (let i = sk.length - 1; i >= 0; i--) stack.push([sk[i], level + 1, frameDepth]);
      }
    }
  }
  function scopedRead(rootRef, depth, mode) {
    const omitted = new Set();
    const elements = [], scopes = [];
    if (!/^(text\/html|application\/xhtml\+xml)$/.test(doc.contentType || "") || !doc.body) {
      return { text: "", elements, omitted: ["unsupported_root"], scopes };
    }
    let root = doc.body;
    if (rootRef !== null && rootRef !== undefined) {
      root = resolveScope(rootRef);
      if (!root) {
        if (typeof rootRef === "string" && rootRef.startsWith(reg.doc + ".") && reg.byRef.has(rootRef))
          return { error: "not_actionable", why: "not a scope ref" };
        return { error: "stale_target" };
      }
    }
    walkFrom(root, depth, (el, level) => {
      if (level > 0 && visible(el)) {
        const label = sectionLabel(el);
        if (label && scopes.length >= L.elements) omitted.add("report_limit");
        else if (label) {
          const ref = scopeFor(el);
          if (ref) scopes.push({ ref, label });
          else omitted.add("target_limit");
        }
      }
      const role = roleOf(el);
      if (!role) return;
      if (el.disabled || el.getAttribute("aria-disabled") === "true" || el.inert) return;
      if (!visible(el)) return;
      if (role === "unsupported") { omitted.add("unsupported_control"); return; }
      if (elements.length >= L.elements) { omitted.add("report_limit"); return "stop"; }
      const d = describe(el, role, omitted);
      if (d) elements.push(d);
    }, omitted);
    let text = "";
    if (mode === "all") {
      let raw = root.innerText || "";
      if (raw.length > 8 * L.text) { raw = raw.slice(0, 8 * L.text); omitted.add("text_limit"); }
      raw = raw.toWellFormed ? raw.toWellFormed() : raw;
      raw = raw.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, " ");
      const lines = raw.split("\n").map((l) => l.replace(/[ \t\u00a0]+/g, " ").trim()).filter(Boolean);
      let c;
      [text, c] = cut(lines.join("\n"), L.text);
      if (c) omitted.add("text_limit");
    }
    return { text, elements, omitted: Array.from(omitted), scopes };
  }

  // --- the host's URL policy (issue 30) ----------------------------------------
  // request.policy: null (no policy), or the exact origins a document may
  // have for the call to act on it. A document's origin is read from its
  // window through this realm's Xray view, which the page cannot redefine.
  // A document passes when it is the active document of its frame, has an
  // allowed origin, and so does every frame's document up to this realm's
  // own (the tab's current top document). A frame the agent cannot look
  // into (cross-origin) has no provable origin: it never passes.
  const policy = Array.isArray(request.policy) ? request.policy : null;
  const OUT = { error: "out_of_policy" };
  function docOrigin(d) {
    const w = d && d.defaultView;
    if (!w || w.document !== d) return null;
    return String(w.origin);
  }
  function policyError(d) {
    if (!policy) return null;
    for (let cur = d, n = 0; ; n++) {
      const o = docOrigin(cur);
      if (o === null) return { error: "stale_target" };
      if (!policy.includes(o)) return OUT;
      if (cur === doc) return null;
      const fe = n < 8 ? cur.defaultView.frameElement : null;
      if (!fe) return OUT;
      cur = fe.ownerDocument;
    }
  }
  // The innermost element holding the keyboard focus and its document
  // (through same-origin frames and open shadow roots), or null when a
  // frame the agent cannot look into holds it.
  function focused() {
    let d = doc, a = doc.activeElement;
    for (let n = 0; n < 16 && a; n++) {
      if (a.shadowRoot && a.shadowRoot.activeElement) { a = a.shadowRoot.activeElement; continue; }
      if (a.localName !== "iframe" && a.localName !== "frame") break;
      let inner = null;
      try { inner = a.contentDocument; } catch (_) { inner = null; }
      if (!inner) return null;
      d = inner; a = inner.activeElement;
    }
    return { doc: d, el: a };
  }
  // The document under a viewport point, through same-origin frames; null
  // when a frame the agent cannot look into is there.
  function docAt(x, y) {
    let d = doc;
    for (let n = 0; n < 8; n++) {
      const hit = d.elementFromPoint(x, y);
      if (!hit || (hit.localName !== "iframe" && hit.localName !== "frame")) return d;
      let inner = null;
      try { inner = hit.contentDocument; } catch (_) { inner = null; }
      if (!inner) return null;
      const r = hit.getBoundingClientRect();
      x -= r.left + hit.clientLeft; y -= r.top + hit.clientTop;
      d = inner;
    }
    return null;
  }
  // The focus as the "page" op reports it: the ref of the element holding
  // it, "none" (nothing but the body), "frame" (a frame the agent cannot
  // look into) or "limit" (no ref left: never matches).
  function focusId() {
    const f = focused();
    if (!f) return "frame";
    if (!f.el || f.el === f.doc.body || f.el === f.doc.documentElement) return "none";
    return refFor(f.el, new Set()) || "limit";
  }
  // request.page (issue 31 item 6): null, or the document (this registry's
  // id: a new load has another) and focus the call was approved on.
  const page = request.page && typeof request.page === "object" ? request.page : null;
  function pageError() {
    if (!page) return null;
    if (typeof page.document === "string" && page.document !== reg.doc) return { error: "stale_target", why: "another document" };
    if (typeof page.focus === "string" && (page.focus === "limit" || focusId() !== page.focus)) return { error: "stale_target", why: "the focus moved" };
    return null;
  }
  // The "policy" op: the approved page, the top document, and the
  // documents of the target (which must hold the focus), of the focus, or
  // under the points.
  function policyCheck() {
    const moved = pageError();
    if (moved) return moved;
    const top = policyError(doc);
    if (top) return top;
    if (typeof request.ref === "string") {
      if (isScopeRef(request.ref)) return SCOPE_REFUSED;
      const el = resolve(request.ref);
      if (!el) return { error: "stale_target" };
      const e = policyError(el.ownerDocument);
      if (e) return e;
      const f = focused();
      if (!f || !f.el || !(f.el === el || el.contains(f.el))) return { error: "not_actionable", why: "lost the focus" };
      return { ok: true };
    }
    if (request.focus) {
      const f = focused();
      if (!f) return OUT;
      return policyError(f.doc) || { ok: true };
    }
    for (const p of request.points || []) {
      const d = docAt(p[0], p[1]);
      if (!d) return OUT;
      const e = policyError(d);
      if (e) return e;
    }
    return { ok: true };
  }

  // --- the target as approved (issue 30 item 4) --------------------------------
  // request.expect: null, or the role and label the operator was shown.
  // A target that no longer has both is refused as stale.
  const expect = request.expect && typeof request.expect === "object" ? request.expect : null;
  function labelOf(el, role) {
    const n = nameOf(el, role);
    return n ? cut(n, L.label)[0] : "";
  }
  function expectError(el) {
    if (!expect) return null;
    const role = roleOf(el);
    if (role !== expect.role || labelOf(el, role) !== expect.label) return { error: "stale_target", why: "changed" };
    return null;
  }
  // The "describe" op: the element a ref names now, as a read reports it.
  function describeRef(ref) {
    if (isScopeRef(ref)) return SCOPE_REFUSED;
    const el = resolve(ref);
    if (!el) return { error: "stale_target" };
    const role = roleOf(el);
    if (!role || role === "unsupported") return { error: "not_actionable" };
    const omitted = new Set();
    const d = describe(el, role, omitted);
    if (!d) return { error: "not_actionable" };
    return { text: "", elements: [d], omitted: Array.from(omitted) };
  }

  // --- actions' element side --------------------------------------------------
  const SCOPE_REFUSED = { error: "not_actionable", why: "scope ref" };
  function locate(ref, need) {
    if (isScopeRef(ref)) return SCOPE_REFUSED;
    const el = resolve(ref);
    if (!el) return { error: "stale_target" };
    const pe = policyError(el.ownerDocument) || expectError(el);
    if (pe) return pe;
    const role = roleOf(el);
    if (el.disabled || el.inert) return { error: "not_actionable", why: "disabled" };
    if (need === "editable" && role !== "textbox" && !(role === "combobox" && el.localName === "input"))
      return { error: "not_actionable", why: "not a text field" };
    if (need === "select" && el.localName !== "select") return { error: "not_actionable", why: "not a select" };
    if (need !== "scroll") {
      const r0 = topRect(el);
      const vw = top.innerWidth, vh = top.innerHeight;
      if (r0.y < 0 || r0.x < 0 || r0.y + r0.h > vh || r0.x + r0.w > vw)
        el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
    } else {
      el.scrollIntoView({ block: "center", inline: "center", behavior: "instant" });
      return { ok: true };
    }
    const r = topRect(el);
    // A point inside the element's visible part, clamped to the viewport.
    const vw = top.innerWidth, vh = top.innerHeight;
    const x = Math.min(Math.max(r.x + r.w / 2, 0), vw - 1);
    const y = Math.min(Math.max(r.y + r.h / 2, 0), vh - 1);
    if (need === "pointer") {
      // What is under that point must be the element or inside it.
      const inner = el.getBoundingClientRect();
      const lx = inner.left + (x - r.x), ly = inner.top + (y - r.y);
      let hit = el.ownerDocument.elementFromPoint(lx, ly);
      while (hit && hit.shadowRoot && hit !== el) {
        const deeper = hit.shadowRoot.elementFromPoint(lx, ly);
        if (!deeper || deeper === hit) break;
        hit = deeper;
      }
      const inside = (n) => { for (; n; n = n.parentNode || n.host) if (n === el) return true; return false; };
      const label = hit && hit.closest && hit.closest("label");
      if (!hit || !(inside(hit) || (label && el.labels && Array.from(el.labels).includes(label)))) {
        return { error: "not_actionable", why: "covered by another element" };
      }
    }
    if (need === "editable") {
      el.focus({ preventScroll: true });
      if (typeof el.select === "function") el.select();
      else {
        const range = el.ownerDocument.createRange();
        range.selectNodeContents(el);
        const sel = el.ownerDocument.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
      }
      if (el.ownerDocument.activeElement !== el && !el.contains(el.ownerDocument.activeElement))
        return { error: "not_actionable", why: "did not take focus" };
    }
    return { ok: true, x: Math.round(x), y: Math.round(y) };
  }

  function selectValues(ref, values) {
    if (isScopeRef(ref)) return SCOPE_REFUSED;
    const el = resolve(ref);
    if (!el) return { error: "stale_target" };
    const pe = policyError(el.ownerDocument) || expectError(el);
    if (pe) return pe;
    if (el.localName !== "select" || el.disabled) return { error: "not_actionable", why: "not an enabled select" };
    if (!el.multiple && values.length > 1) return { error: "not_actionable", why: "one value for a single select" };
    const picks = [];
    for (const v of values) {
      const o = Array.from(el.options).find((o) => o.value === v) ||
        Array.from(el.options).find((o) => clean(o.label || o.text) === clean(v));
      if (!o || o.disabled) return { error: "not_actionable", why: "no such option" };
      picks.push(o);
    }
    for (const o of el.options) o.selected = picks.includes(o);
    el.dispatchEvent(new Event("input", { bubbles: true }));
    el.dispatchEvent(new Event("change", { bubbles: true }));
    return { ok: true };
  }

  // set_checked's element side: the state of a checkbox or radio (native,
  // or by ARIA role), through the same ref resolution as every action.
  function checkedState(ref) {
    if (isScopeRef(ref)) return SCOPE_REFUSED;
    const el = resolve(ref);
    if (!el) return { error: "stale_target" };
    const pe = policyError(el.ownerDocument) || expectError(el);
    if (pe) return pe;
    const role = roleOf(el);
    if (role !== "checkbox" && role !== "radio") return { error: "not_actionable", why: "not a checkbox or radio" };
    if (el.disabled || el.inert || el.getAttribute("aria-disabled") === "true")
      return { error: "not_actionable", why: "disabled" };
    const native = el.localName === "input" && (el.type === "checkbox" || el.type === "radio");
    const checked = native ? el.checked : el.getAttribute("aria-checked") === "true";
    return { ok: true, checked: checked, radio: role === "radio" };
  }

  // The origin a document was loaded from, as the browser's security
  // model has it (the window's origin) and as its address says (the
  // document's URI, which for an error page is about:neterror even while
  // the tab's URL still names the address that failed): both must agree,
  // else "null".
  function loadedOrigin(d) {
    let a = "null", b = "null";
    try { a = String(d.defaultView.origin); } catch (e) { a = "null"; }
    try { b = new URL(d.documentURI).origin; } catch (e) { b = "null"; }
    return a === b ? a : "null";
  }

  // Sign-in's element side: the tab's document and the document holding
  // `ref` were both loaded from `origin`, and `ref` is an enabled, visible,
  // writable <input> whose type is one of `types`; with `mark`, it becomes
  // private (reads omit its value) and, unless it is a password input, its
  // text is masked on screen too; with `focused`, it must hold the focus
  // (checked before each part of a value is typed).
  function credential(ref, types, mark, origin, focused) {
    if (isScopeRef(ref)) return SCOPE_REFUSED;
    if (typeof origin !== "string" || loadedOrigin(doc) !== origin) return { error: "wrong_origin" };
    const el = resolve(ref);
    if (!el) return { error: "stale_target" };
    if (loadedOrigin(el.ownerDocument) !== origin) return { error: "wrong_origin" };
    if (el.localName !== "input") return { error: "not_actionable", why: "wrong kind of field" };
    if (el.disabled || el.readOnly || el.inert) return { error: "not_actionable", why: "disabled" };
    const t = (el.getAttribute("type") || "text").toLowerCase();
    if (!types.includes(t)) return { error: "not_actionable", why: "wrong kind of field" };
    if (focused) {
      // The element, its document's focus, and every frame up to the top
      // document focused on the way to it.
      let d = el.ownerDocument;
      if (d.activeElement !== el) return { error: "not_actionable", why: "lost the focus" };
      for (let w = d.defaultView; w && w !== top; w = w.parent) {
        const fe = w.frameElement;
        if (!fe || fe.ownerDocument.activeElement !== fe) return { error: "not_actionable", why: "lost the focus" };
      }
    }
    if (mark) {
      reg.priv.add(el);
      if (t !== "password") {
        if (CSS.supports("-webkit-text-security", "disc")) el.style.setProperty("-webkit-text-security", "disc", "important");
        else el.style.setProperty("color", "transparent", "important");
      }
    }
    return { ok: true };
  }

  let out;
  switch (request.op) {
    case "read": out = read(request.mode, request.query || null); break;
    case "locate": out = locate(request.ref, request.need); break;
    case "select": out = selectValues(request.ref, request.values); break;
    case "checked": out = checkedState(request.ref); break;
    case "credential": out = credential(request.ref, request.types || [], !!request.mark, request.origin, !!request.focused); break;
    case "scoped": out = scopedRead(request.root, request.depth, request.mode); break;
    case "policy": out = policyCheck(); break;
    case "describe": out = describeRef(request.ref); break;
    case "page": out = { document: reg.doc, focus: focusId() }; break;
    case "tab": {
      const [title, c] = cut((doc.title || "").toWellFormed ? (doc.title || "").toWellFormed() : "", L.title);
      out = { title: title.replace(/[\u0000-\u001f\u007f]/g, " "), title_truncated: c,
        visible: doc.visibilityState === "visible", width: innerWidth, height: innerHeight,
        scroll: [Math.round(scrollX), Math.round(scrollY)] };
      break;
    }
    case "has_text": {
      const hay = clean(doc.body ? doc.body.innerText : "").toLowerCase();
      out = { found: hay.includes(clean(request.text).toLowerCase()) };
      break;
    }
    default: out = { error: "bad_op" };
  }
  return JSON.stringify(out);
})
