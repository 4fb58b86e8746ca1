// loom's web page: search, read, grep, ask and status over the JSON API of `loom serve`.
// No framework, no build step. Document text is only ever inserted as text nodes
// (textContent, createTextNode): the page's CSP turns on Trusted Types, so even an
// accidental assignment of HTML would throw instead of running a note's markup.
"use strict";

const TOKEN_KEY = "loom-token";
const CHUNK_BYTES = 64 * 1024; // text fetched at a time when reading a document
const BEFORE_BYTES = 4 * 1024; // of it, before the place opened
const MATCHES_MAX = 500; // matches of a document listed for next/previous (the API's cap)
const WORD = "[\\p{L}\\p{N}_]";

const $ = (id) => document.getElementById(id);
const corpus = new URLSearchParams(location.search).get("corpus") || "";

// -- small helpers --------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

// An address inside the page (deep link), keeping the corpus of a multi-corpus server.
function href(path, params) {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (Array.isArray(value)) value.forEach((v) => q.append(key, v));
    else if (value !== undefined && value !== null && value !== "") q.set(key, String(value));
  }
  if (corpus) q.set("corpus", corpus);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

function navLink(path, params, ...children) {
  return el("a", { href: href(path, params), dataset: { nav: "" } }, ...children);
}

// A note's tag as a link that searches by it: with `query`, that query narrowed to it.
function tagLink(tag, query) {
  const word = `#${tag}`;
  const words = (query || "").split(/\s+/).filter(Boolean);
  const q = words.some((w) => w.toLowerCase() === word) ? query : [...words, word].join(" ");
  const a = navLink("/search", { q }, word);
  a.classList.add("tag");
  a.title = `Notes tagged ${word}`;
  return a;
}

function escapeRegex(s) {
  return s.replace(/[.*+?^${}()|[\]\\\/-]/g, "\\$&");
}

// A query's words as loom matches them (stems, without function words such as "the",
// "is", "per"): the server's rule, asked once per query, never copied here.
const termsCache = new Map();
async function termsOf(query) {
  if (!query || !query.trim()) return [];
  if (!termsCache.has(query)) {
    if (termsCache.size > 200) termsCache.clear();
    termsCache.set(query, callJSON("POST", "/terms", { text: query })
      .then((r) => [...r.terms].sort((a, b) => b.length - a.length))
      .catch((error) => { termsCache.delete(query); throw error; }));
  }
  return termsCache.get(query);
}

// JS regex that marks the query's words (whole words starting with a stem).
function wordsRegex(s) {
  if (!s || !s.length) return null;
  return new RegExp(`(?<!${WORD})(?:${s.map(escapeRegex).join("|")})${WORD}*`, "giu");
}

// The same words as an RE2 pattern for the grep API (a non-word character or the start
// before them: RE2's \b knows ASCII only).
function wordsPattern(s) {
  if (!s || !s.length) return null;
  return `(?:^|[^\\pL\\pN_])(?:${s.map((w) => w.replace(/[\\.+*?()|[\]{}^$-]/g, "\\$&")).join("|")})`;
}

// A grep pattern never runs here (a JS RegExp backtracks: `(\w+\s?)+$` froze the tab for
// 18 s): the grep API marks what matched (`spans: true`), with RE2, and the page only
// draws those marks.

// Text with marks at the given [from, to) character spans, as <mark> elements.
function markedText(text, marks) {
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const [from, to] of marks || []) {
    if (from < last || to <= from) continue;
    if (from > last) frag.append(text.slice(last, from));
    frag.append(el("mark", { text: text.slice(from, to) }));
    last = to;
  }
  if (last < text.length) frag.append(text.slice(last));
  return frag;
}

// Text with the regex's matches as <mark> elements: text nodes only, never HTML.
function highlighted(text, re) {
  const frag = document.createDocumentFragment();
  let last = 0;
  if (re) {
    re.lastIndex = 0;
    for (const m of text.matchAll(re)) {
      if (!m[0]) continue;
      if (m.index > last) frag.append(text.slice(last, m.index));
      frag.append(el("mark", { text: m[0] }));
      last = m.index + m[0].length;
    }
  }
  if (last < text.length) frag.append(text.slice(last));
  return frag;
}

function utf8Len(cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// Index in `text` (UTF-16 units) of byte `bytes` of its UTF-8 form.
function indexOfByte(text, bytes) {
  let b = 0;
  let i = 0;
  while (i < text.length && b < bytes) {
    const cp = text.codePointAt(i);
    b += utf8Len(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  return i;
}

function byteOfIndex(text, index) {
  let b = 0;
  for (let i = 0; i < index && i < text.length; ) {
    const cp = text.codePointAt(i);
    b += utf8Len(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  return b;
}

function pageOf(pages, offset) {
  if (!pages || !pages.length) return null;
  let lo = 0;
  let hi = pages.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (pages[mid] <= offset) lo = mid + 1;
    else hi = mid;
  }
  return lo || 1;
}

// Sizes as the CLI gives them: decimal units (1 MB = 1,000,000 bytes).
function bytes(n) {
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let v = n;
  let u = -1;
  do { v /= 1000; u += 1; } while (v >= 1000 && u < units.length - 1);
  return `${v.toFixed(1)} ${units[u]}`;
}

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "never";
}

// -- the API ----------------------------------------------------------------------------

let tokenWaiter = null;

function askToken(again) {
  if (!tokenWaiter) {
    tokenWaiter = new Promise((resolve) => {
      const dialog = $("token-dialog");
      $("token-why").textContent = again
        ? "That token was refused. Enter the value of LOOM_HTTP_TOKEN the server was started with."
        : "This server was started with a token (LOOM_HTTP_TOKEN). It is kept for this tab only.";
      $("token").value = "";
      const form = $("token-form");
      const done = (event) => {
        event.preventDefault();
        const value = $("token").value;
        if (!value) return;
        sessionStorage.setItem(TOKEN_KEY, value);
        form.removeEventListener("submit", done);
        dialog.close();
        tokenWaiter = null;
        resolve();
      };
      form.addEventListener("submit", done);
      dialog.addEventListener("cancel", (e) => e.preventDefault(), { once: true });
      dialog.showModal();
      $("token").focus();
    });
  }
  return tokenWaiter;
}

async function call(method, path, body, signal) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    let url = path;
    let payload;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(corpus ? { ...body, corpus } : body);
    } else if (corpus) {
      url += (url.includes("?") ? "&" : "?") + `corpus=${encodeURIComponent(corpus)}`;
    }
    const resp = await fetch(url, { method, headers, body: payload, signal, cache: "no-store" });
    if (resp.status !== 401) return resp;
    sessionStorage.removeItem(TOKEN_KEY);
    await askToken(Boolean(token));
  }
}

async function callJSON(method, path, body, signal) {
  const resp = await call(method, path, body, signal);
  let data;
  try {
    data = await resp.json();
  } catch {
    data = { error: `the server answered ${resp.status} without JSON` };
  }
  if (!resp.ok) throw new Error(data.error || `the server answered ${resp.status}`);
  return data;
}

// NDJSON events of a streamed answer or scan, one object a line, as they arrive.
async function* events(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (line) yield JSON.parse(line);
    }
    if (done) break;
  }
  if (buffer.trim()) yield JSON.parse(buffer);
}

// -- views and navigation ---------------------------------------------------------------

const views = {};
let current = null;

function viewName(pathname) {
  const name = pathname.replace(/^\/+|\/+$/g, "") || "search";
  return views[name] ? name : "search";
}

function go(url, replace) {
  history[replace ? "replaceState" : "pushState"](null, "", url);
  render();
}

function render() {
  const name = viewName(location.pathname);
  const params = new URLSearchParams(location.search);
  if (current && current !== name && views[current].leave) views[current].leave();
  current = name;
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== `view-${name}`;
  }
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  views[name].enter(params);
}

document.addEventListener("click", (event) => {
  const a = event.target.closest && event.target.closest("a[data-nav]");
  if (!a || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  go(a.getAttribute("href"));
});

window.addEventListener("popstate", render);

document.addEventListener("keydown", (event) => {
  const typing = event.target.closest && event.target.closest("input, textarea, select, dialog");
  if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    if (current !== "search") go(href("/search", { q: $("q").value }));
    $("q").focus();
    $("q").select();
  } else if (current === "file" && !typing && (event.key === "n" || event.key === "N")) {
    event.preventDefault();
    views.file.step(event.key === "n" ? 1 : -1);
  }
});

// -- search -------------------------------------------------------------------------------

views.search = (() => {
  const input = $("q");
  const list = $("hits");
  const count = $("search-count");
  let selected = -1;
  let inFlight = false;
  let queued = null;
  let shown = null; // the query whose results are on screen
  let seq = 0;

  function select(i) {
    const items = list.querySelectorAll("li");
    if (!items.length) return;
    selected = Math.max(0, Math.min(items.length - 1, i));
    items.forEach((li, j) => {
      li.classList.toggle("selected", j === selected);
      li.setAttribute("aria-selected", String(j === selected));
    });
    items[selected].scrollIntoView({ block: "nearest" });
  }

  function open(i) {
    const item = list.querySelectorAll("li")[i];
    if (item) go(item.querySelector("a.title").getAttribute("href"));
  }

  function hitItem(hit, query, re) {
    // The hit carries where its snippet is: opened there, with no request per hit.
    const params = { path: hit.path, q: query, offset: hit.offset ?? "" };
    const how = { bm25: "words", semantic: "meaning", both: "words and meaning" }[hit.match] || hit.match;
    const page = el("span", { class: "page" }, hit.page ? `page ${hit.page}` : "");
    const li = el("li", { role: "option", "aria-selected": "false" },
      navLink("/file", params, hit.title || hit.path),
      el("div", { class: "meta" },
        navLink("/file", params, hit.path),
        el("span", { class: "tag", title: "How it matched" }, how),
        page,
        hit.backlinks ? el("span", { class: "backlinks", title: "Notes whose [[links]] name it" },
          `linked from ${hit.backlinks} note${hit.backlinks === 1 ? "" : "s"}`) : null,
        ...(hit.tags || []).map((t) => tagLink(t, query))),
      el("p", { class: "snippet" }, highlighted(hit.snippet || "", re)));
    li.firstChild.classList.add("title");
    li.children[1].firstChild.classList.add("path");
    return li;
  }

  async function run(query) {
    if (inFlight) {
      queued = query; // only the latest query waits: typing never floods the server
      return;
    }
    inFlight = true;
    const mine = ++seq;
    try {
      if (!query.trim()) {
        list.replaceChildren();
        count.textContent = "";
        shown = query;
        if (current === "search") history.replaceState(null, "", href("/search", {}));
      } else {
        const [result, terms] = await Promise.all([
          callJSON("POST", "/search", { query, limit: 10, prefix: true, excerpt_chars: 0 }),
          termsOf(query).catch(() => [])]);
        if (mine === seq && queued === null) show(query, result, terms);
      }
    } catch (error) {
      if (queued === null) {
        list.replaceChildren();
        count.textContent = error.message;
        count.classList.add("error");
      }
    } finally {
      inFlight = false;
      if (queued !== null) {
        const next = queued;
        queued = null;
        run(next);
      }
    }
  }

  function show(query, result, terms) {
    const re = wordsRegex(terms);
    shown = query;
    selected = -1;
    count.classList.remove("error");
    const n = result.hits.length;
    count.textContent = n ? `${n} result${n === 1 ? "" : "s"}` : "No match.";
    for (const w of result.warnings || []) count.append(el("span", { class: "hint" }, ` — ${w}`));
    list.replaceChildren(...result.hits.map((hit) => hitItem(hit, query, re)));
    list.dataset.query = query; // for tests and benchmarks: the results shown are for this
    // The address follows, after the results are painted (replaceState can take ms).
    setTimeout(() => {
      if (current === "search" && input.value === query) history.replaceState(null, "", href("/search", { q: query }));
    }, 0);
  }

  input.addEventListener("input", () => run(input.value));
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown") { event.preventDefault(); select(selected + 1); }
    else if (event.key === "ArrowUp") { event.preventDefault(); select(selected - 1); }
    else if (event.key === "Enter") {
      event.preventDefault();
      open(selected < 0 ? 0 : selected);
    } else if (event.key === "Escape") {
      input.value = "";
      input.dispatchEvent(new Event("input"));
    }
  });
  $("search-form").addEventListener("submit", (e) => e.preventDefault());

  return {
    enter(params) {
      const q = params.get("q") || "";
      if (input.value !== q || shown !== q) {
        input.value = q;
        run(q);
      }
      document.title = q ? `${q} — loom` : "loom";
      input.focus();
    },
  };
})();

// -- grep ---------------------------------------------------------------------------------

views.grep = (() => {
  const form = $("grep-form");
  const out = $("grep-results");
  const count = $("grep-count");
  let seq = 0;

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const globs = $("grep-glob").value.split(/\s+/).filter(Boolean);
    go(href("/grep", { pattern: $("grep-pattern").value, glob: globs,
                       context: $("grep-context").value === "0" ? "" : $("grep-context").value,
                       case: $("grep-case").checked ? "1" : "" }));
  });

  function matchLink(m, pattern, caseSensitive) {
    const where = [`line ${m.line}`, `offset ${m.offset}`];
    if (m.page) where.push(`page ${m.page}`);
    const lines = el("pre");
    for (const b of m.before || []) lines.append(el("span", { class: "ctx" }, `${b}\n`));
    lines.append(markedText(m.text, m.marks));
    for (const a of m.after || []) lines.append(el("span", { class: "ctx" }, `\n${a}`));
    const link = navLink("/file", { path: m.path, offset: m.offset, pattern, case: caseSensitive ? "1" : "" },
      el("span", { class: "meta" }, ...where.map((w) => el("span", {}, w))), lines);
    link.classList.add("match");
    return el("li", {}, link);
  }

  async function run(params) {
    const pattern = params.get("pattern") || "";
    const globs = params.getAll("glob");
    const context = Number(params.get("context") || 0);
    const caseSensitive = params.get("case") === "1";
    $("grep-pattern").value = pattern;
    $("grep-glob").value = globs.join(" ");
    $("grep-context").value = String(context);
    $("grep-case").checked = caseSensitive;
    document.title = pattern ? `grep ${pattern} — loom` : "grep — loom";
    out.replaceChildren();
    count.classList.remove("error");
    count.textContent = "";
    if (!pattern) return;
    const mine = ++seq;
    count.textContent = "Searching…";
    try {
      const body = { pattern, context, case: caseSensitive ? "sensitive" : "ignore", limit: MATCHES_MAX,
                     spans: true };
      if (globs.length) body.glob = globs;
      const result = await callJSON("POST", "/grep", body);
      if (mine !== seq) return;
      const groups = new Map();
      for (const m of result.matches) {
        if (!groups.has(m.path)) groups.set(m.path, []);
        groups.get(m.path).push(m);
      }
      const n = result.matches.length;
      count.textContent = n
        ? `${n} match${n === 1 ? "" : "es"} in ${groups.size} file${groups.size === 1 ? "" : "s"}` +
          (result.truncated ? ` (the first ${n}: narrow the pattern or add a glob)` : "")
        : "No match.";
      out.replaceChildren(...[...groups].map(([path, ms]) => el("section", { class: "group" },
        el("h2", {}, navLink("/file", { path, pattern, case: caseSensitive ? "1" : "" }, path)),
        el("ol", {}, ...ms.map((m) => matchLink(m, pattern, caseSensitive))))));
    } catch (error) {
      if (mine !== seq) return;
      count.textContent = error.message;
      count.classList.add("error");
    }
  }

  return { enter: run };
})();

// -- a document ------------------------------------------------------------------------------

views.file = (() => {
  const box = $("doc");
  const pre = $("doc-text");
  const pos = $("match-pos");
  const prev = $("match-prev");
  const next = $("match-next");
  let doc = null; // {path, total, pages, re, matches, at, chunks: [{start, end, node}]}
  let seq = 0;
  let loading = false;
  const NEAR_PX = 800; // fetch more text when the reader is this close to an end

  function fail(message) {
    const p = $("file-error");
    p.textContent = message;
    p.hidden = false;
  }

  // One fetched range as nodes: page breaks, the regex's marks, the span asked for.
  function chunkNode(start, text) {
    const end = start + byteOfIndex(text, text.length);
    const cuts = new Map(); // char index → page number starting there
    if (doc.pages) {
      for (let p = 0; p < doc.pages.length; p++) {
        const at = doc.pages[p];
        if (p > 0 && at >= start && at < end) cuts.set(indexOfByte(text, at - start), p + 1);
      }
    }
    const marks = [];
    if (doc.span) {
      const [a, b] = doc.span;
      if (b > start && a < end) {
        marks.push({ from: indexOfByte(text, Math.max(0, a - start)),
                     to: indexOfByte(text, Math.min(end, b) - start), cls: "current", offset: a });
      }
    } else if (doc.spans) {
      for (const [at, length] of doc.spans) {
        if (at + length <= start || at >= end) continue;
        marks.push({ from: indexOfByte(text, Math.max(0, at - start)),
                     to: indexOfByte(text, Math.min(end, at + length) - start), offset: at });
      }
    } else if (doc.re) {
      doc.re.lastIndex = 0;
      for (const m of text.matchAll(doc.re)) {
        if (m[0]) marks.push({ from: m.index, to: m.index + m[0].length, offset: start + byteOfIndex(text, m.index) });
      }
    }
    const points = new Set([0, text.length, ...cuts.keys()]);
    for (const m of marks) { points.add(m.from); points.add(m.to); }
    const sorted = [...points].sort((a, b) => a - b);
    const node = el("span", { class: "chunk", dataset: { start, end } });
    let mi = 0;
    for (let k = 0; k < sorted.length; k++) {
      const a = sorted[k];
      if (cuts.has(a)) {
        node.append(el("span", { class: "pagebreak", role: "separator", dataset: { page: cuts.get(a) } },
          `page ${cuts.get(a)}`));
      }
      if (k === sorted.length - 1) break;
      const b = sorted[k + 1];
      while (mi < marks.length && marks[mi].to <= a) mi++;
      const piece = text.slice(a, b);
      const m = marks[mi];
      if (m && m.from <= a && b <= m.to) {
        node.append(el("mark", { class: m.cls, dataset: { offset: m.offset } }, piece));
      } else {
        node.append(piece);
      }
    }
    return { start, end, node };
  }

  async function fetchRange(offset, length) {
    return callJSON("POST", "/file", { path: doc.path, offset, length });
  }

  // Text before (-1) or after (1) what is loaded, as the reader scrolls near an end.
  async function more(direction) {
    const d = doc;
    if (!d.chunks.length) return;
    const first = d.chunks[0];
    const last = d.chunks[d.chunks.length - 1];
    if (direction < 0 ? first.start <= 0 : last.end >= d.total) return;
    loading = true;
    try {
      const offset = direction < 0 ? Math.max(0, first.start - CHUNK_BYTES) : last.end;
      const length = direction < 0 ? first.start - offset : CHUNK_BYTES;
      const range = await fetchRange(offset, length);
      if (d !== doc) return;
      if (direction < 0) {
        const chunk = chunkNode(range.offset, range.content);
        const height = box.scrollHeight;
        pre.prepend(chunk.node);
        d.chunks.unshift(chunk);
        box.scrollTop += box.scrollHeight - height; // the reader's place does not move
      } else {
        const chunk = chunkNode(range.offset, range.content);
        pre.append(chunk.node);
        d.chunks.push(chunk);
      }
    } catch (error) {
      fail(error.message);
    } finally {
      loading = false;
    }
    if (d === doc) fill();
  }

  // Keep text loaded a screen or so beyond both edges of the view.
  function fill() {
    if (!doc || loading || !doc.chunks.length) return;
    if (box.scrollTop < NEAR_PX && doc.chunks[0].start > 0) more(-1);
    else if (box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_PX &&
             doc.chunks[doc.chunks.length - 1].end < doc.total) more(1);
  }

  // Load the text around byte `offset` (replacing what was loaded) and bring it into view.
  async function show(offset) {
    const d = doc;
    const start = offset === null ? 0 : Math.max(0, offset - BEFORE_BYTES);
    const range = await fetchRange(start, CHUNK_BYTES);
    if (d !== doc) return;
    const chunk = chunkNode(range.offset, range.content);
    d.chunks = [chunk];
    pre.replaceChildren(chunk.node);
    if (offset === null) box.scrollTop = 0;
    else reveal(offset);
    fill();
  }

  function reveal(offset) {
    for (const m of pre.querySelectorAll("mark.current")) m.classList.remove("current");
    let target = null;
    for (const m of pre.querySelectorAll("mark")) {
      if (Number(m.dataset.offset) >= offset - 4) { target = m; break; }
    }
    if (!target || Number(target.dataset.offset) > offset + 64) target = caretAt(offset);
    if (!target) return;
    if (target.tagName === "MARK") {
      // Every piece of it: a passage across page breaks is marked whole.
      for (const m of pre.querySelectorAll("mark")) {
        if (m.dataset.offset === target.dataset.offset) m.classList.add("current");
      }
    }
    // Scroll the text box only (scrollIntoView would scroll the page and hide the header).
    box.scrollTop += target.getBoundingClientRect().top - box.getBoundingClientRect().top -
      box.clientHeight / 2;
    const page = pageOf(doc.pages, offset);
    $("file-page").textContent = page ? `page ${page} of ${doc.pages.length}` : "";
  }

  // A marker at a byte offset with no match there (a document opened at an offset).
  function caretAt(offset) {
    pre.querySelector(".here")?.classList.remove("here");
    for (const chunk of doc.chunks) {
      if (offset < chunk.start || offset > chunk.end) continue;
      let skip = offset - chunk.start;
      const walker = document.createTreeWalker(chunk.node, NodeFilter.SHOW_TEXT);
      for (let t = walker.nextNode(); t; t = walker.nextNode()) {
        if (t.parentNode.classList?.contains("pagebreak")) continue;
        const len = byteOfIndex(t.data, t.data.length);
        if (skip <= len) {
          const i = indexOfByte(t.data, skip);
          const rest = i < t.data.length ? t.splitText(i) : null;
          const mark = el("span", { class: "here", id: "here", dataset: { offset } });
          t.parentNode.insertBefore(mark, rest);
          // The line from the offset on, so the place is visible, not a zero-width mark.
          if (rest) {
            const nl = rest.data.indexOf("\n");
            if (nl > 0) rest.splitText(nl);
            mark.append(rest);
          }
          return mark;
        }
        skip -= len;
      }
    }
    return null;
  }

  // A note's tags, the notes it links to and those linking to it, each opening its own.
  function showNotes(info) {
    const box = $("file-notes");
    const tags = $("file-tags");
    const links = $("file-links");
    const back = $("file-backlinks");
    for (const p of [tags, links, back]) {
      p.replaceChildren(p.firstElementChild);
      p.hidden = true;
    }
    box.hidden = true;
    if (!info) return;
    const open = (path, text) => navLink("/file", { path }, text);
    if (info.tags.length) tags.append(...info.tags.map((t) => tagLink(t, "")));
    const seen = new Set();
    for (const k of info.links) {
      const key = `${k.path ?? ""}\n${k.target}`;
      if (seen.has(key)) continue; // a note linking twice to one note lists it once
      seen.add(key);
      const text = k.alias || k.target;
      links.append(k.path ? open(k.path, text)
        : el("span", { class: "missing", title: "No indexed note has this name" }, `${text} (no such note)`));
    }
    back.append(...info.backlinks.map((b) => open(b.path, b.title || b.path)));
    for (const p of [tags, links, back]) p.hidden = p.children.length < 2;
    box.hidden = tags.hidden && links.hidden && back.hidden;
  }

  function updateNav() {
    const n = doc.matches.length;
    prev.disabled = next.disabled = n < 2;
    pos.textContent = n ? `match ${doc.at + 1} of ${n}${doc.truncated ? "+" : ""}` : (doc.re || doc.spans ? "no match" : "");
    prev.hidden = next.hidden = !n;
  }

  async function step(by) {
    if (!doc || !doc.matches.length) return;
    const n = doc.matches.length;
    doc.at = (doc.at + by + n) % n;
    updateNav();
    const offset = doc.matches[doc.at].offset;
    const loaded = doc.chunks.some((c) => offset >= c.start && offset < c.end);
    history.replaceState(null, "", href("/file", { ...doc.link, offset }));
    if (loaded) reveal(offset);
    else await show(offset);
  }

  prev.addEventListener("click", () => step(-1));
  next.addEventListener("click", () => step(1));

  box.addEventListener("scroll", () => {
    fill();
    if (!doc || !doc.pages) return;
    const top = box.getBoundingClientRect().top;
    let page = null;
    for (const b of pre.querySelectorAll(".pagebreak")) {
      if (b.getBoundingClientRect().top - top > box.clientHeight / 2) break;
      page = Number(b.dataset.page);
    }
    if (page === null && doc.chunks.length) page = pageOf(doc.pages, doc.chunks[0].start);
    if (page) $("file-page").textContent = `page ${page} of ${doc.pages.length}`;
  }, { passive: true });

  async function enter(params) {
    const path = params.get("path") || "";
    const offset = params.has("offset") ? Math.max(0, Number(params.get("offset")) || 0) : null;
    const length = params.has("length") ? Math.max(0, Number(params.get("length")) || 0) : null;
    const q = params.get("q") || "";
    const pattern = params.get("pattern") || "";
    const caseSensitive = params.get("case") === "1";
    const mine = ++seq;
    $("file-error").hidden = true;
    $("file-title").textContent = path || "No document";
    $("file-path").textContent = "";
    $("file-page").textContent = "";
    showNotes(null);
    pre.replaceChildren();
    doc = null;
    if (!path) { fail("No document named: open one from search or grep."); return; }
    document.title = `${path} — loom`;
    try {
      const terms = pattern ? [] : await termsOf(q);
      if (mine !== seq) return;
      const re = pattern ? null : wordsRegex(terms); // a user's pattern: RE2's marks only
      const grepPattern = pattern || wordsPattern(terms);
      const [info, found, notes] = await Promise.all([
        callJSON("POST", "/pages", { path }),
        grepPattern
          ? callJSON("POST", "/grep", { pattern: grepPattern, path, case: caseSensitive ? "sensitive" : "ignore",
                                      limit: MATCHES_MAX, spans: Boolean(pattern) })
          : Promise.resolve({ matches: [], truncated: false }),
        callJSON("POST", "/links", { path }).catch(() => null), // the text shows without them
      ]);
      if (mine !== seq) return;
      const spans = pattern ? found.matches.flatMap((m) => m.spans || []) : null;
      doc = { path: info.path, total: info.content_len, pages: info.pages, re, spans,
              span: length !== null && offset !== null ? [offset, offset + length] : null,
              matches: found.matches, truncated: found.truncated, at: 0, chunks: [],
              link: { path, q, pattern, case: caseSensitive ? "1" : "", length: length ?? "" } };
      $("file-title").textContent = info.title || info.path;
      $("file-path").textContent = `${info.path} · ${bytes(info.content_len)}`;
      showNotes(notes);
      if (offset !== null && doc.matches.length) {
        const i = doc.matches.findIndex((m) => m.offset >= offset - 4);
        doc.at = i < 0 ? doc.matches.length - 1 : i;
      }
      updateNav();
      const target = offset !== null ? offset : (doc.matches[0] ? doc.matches[0].offset : null);
      await show(target);
    } catch (error) {
      if (mine === seq) fail(error.message);
    }
  }

  return { enter, step };
})();

// -- ask ------------------------------------------------------------------------------------

views.ask = (() => {
  const form = $("ask-form");
  const box = $("question");
  const answer = $("answer");
  const state = $("ask-state");
  const button = $("ask-button");
  let conversation = null;
  let running = null;

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = box.value.trim();
    if (!q || running) return;
    history.pushState(null, "", href("/ask", { q }));
    ask(q);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  function reset() {
    answer.replaceChildren();
    for (const id of ["ask-steps", "ask-quotes", "ask-sources", "ask-details"]) $(id).hidden = true;
    $("ask-steps").replaceChildren();
    $("quotes").replaceChildren();
    $("sources").replaceChildren();
    $("ask-context").replaceChildren();
    state.classList.remove("error");
    state.textContent = "";
  }

  function addStep(step) {
    const list = $("ask-steps");
    list.hidden = false;
    if (typeof step !== "object" || step === null) {
      list.append(el("li", {}, String(step)));
      return;
    }
    const name = step.tool || step.name || step.action || "step";
    const args = step.arguments ?? step.args ?? step.input;
    const result = step.result ?? step.summary ?? step.output ?? step.error;
    list.append(el("li", {}, el("code", {}, name),
      args !== undefined ? ` ${typeof args === "string" ? args : JSON.stringify(args)}` : "",
      result !== undefined ? el("div", { class: "hint" },
        (typeof result === "string" ? result : JSON.stringify(result)).slice(0, 300)) : ""));
  }

  // Where a source opens: the first of its quotes that was verified, else the window
  // sent after the file's head, else the first span sent — marked, and scrolled to.
  // Never the question's words: its "the" and "is" would be marked all over the text.
  function passage(result, src) {
    const q = (result.quotes || []).find((x) => x.verified && x.path === src.path && x.offset != null);
    if (q) return { path: src.path, offset: q.offset, length: q.length };
    const spans = Array.isArray(src.spans) ? src.spans : [];
    const span = spans.length > 1 ? spans[1] : spans[0];
    return span ? { path: src.path, offset: span.offset, length: span.length } : { path: src.path };
  }

  function passages(result) {
    const out = new Map();
    for (const s of result.sources || []) if (s && s.path) out.set(s.path, passage(result, s));
    return out;
  }

  // The answer with each cited [path] as a link to that document's passage.
  function answerNodes(text, paths, where) {
    const frag = document.createDocumentFragment();
    let last = 0;
    for (const m of text.matchAll(/\[([^\[\]\n]{1,400})\]/g)) {
      const path = m[1].replace(/,?\s*(?:page|p\.)\s*\d+$/i, "").trim();
      if (!paths.has(path)) continue;
      frag.append(text.slice(last, m.index), "[", navLink("/file", where.get(path) || { path }, m[1]), "]");
      last = m.index + m[0].length;
    }
    frag.append(text.slice(last));
    return frag;
  }

  function sourceItems(result, where) {
    const out = [];
    const seen = new Set();
    const add = (src) => {
      const s = typeof src === "string" ? { path: src } : src || {};
      if (!s.path || seen.has(s.path)) return;
      seen.add(s.path);
      const pages = Array.isArray(s.pages) ? s.pages : s.page ? [s.page] : [];
      const li = el("li", {}, navLink("/file", where.get(s.path) || { path: s.path }, s.title || s.path));
      if (s.title && s.title !== s.path) li.append(el("span", { class: "hint" }, ` ${s.path}`));
      if (pages.length) li.append(el("span", { class: "hint" }, ` · page${pages.length > 1 ? "s" : ""} ${pages.join(", ")}`));
      if (result.citations && result.citations.includes(s.path)) li.append(el("span", { class: "tag" }, "cited"));
      out.push(li);
    };
    (result.sources || []).forEach(add);
    (result.used || []).forEach(add);
    (result.citations || []).forEach(add);
    return out;
  }

  function quoteItem(q) {
    const ok = q.verified === true;
    const where = q.page ? `${q.path}, page ${q.page}` : q.path;
    const params = q.offset !== undefined && q.offset !== null
      ? { path: q.path, offset: q.offset, length: q.length }
      : { path: q.path, q: q.text };
    return el("li", {}, el("blockquote", {}, q.text || ""),
      navLink("/file", params, where),
      " ", el("span", { class: ok ? "verified" : "unverified" },
        ok ? "✓ verified in the source" : "✗ not found in what the model was given"));
  }

  function facts(dl, pairs) {
    for (const [k, v] of pairs) {
      if (v === undefined || v === null) continue;
      dl.append(el("dt", {}, k), el("dd", {}, typeof v === "object" ? JSON.stringify(v) : String(v)));
    }
  }

  function finish(result, question) {
    const paths = new Set([...(result.citations || []), ...(result.used || []).map((u) => u.path),
      ...(result.sources || []).map((s) => (typeof s === "string" ? s : s && s.path))]);
    const where = passages(result);
    answer.replaceChildren(answerNodes(result.answer || answer.textContent, paths, where));
    if (!result.answer && !(result.used || []).length) {
      state.textContent = "No indexed file matches this question: nothing was sent to the model.";
    } else {
      state.textContent = "Done.";
    }
    for (const w of result.warnings || []) state.append(el("span", { class: "hint" }, ` — ${w}`));
    if (Array.isArray(result.steps) && !$("ask-steps").children.length) result.steps.forEach(addStep);
    const quotes = result.quotes || [];
    if (quotes.length) {
      $("quotes").replaceChildren(...quotes.map(quoteItem));
      $("ask-quotes").hidden = false;
    }
    const sources = sourceItems(result, where);
    if (sources.length) {
      $("sources").replaceChildren(...sources);
      $("ask-sources").hidden = false;
    }
    const dl = $("ask-context");
    const c = result.context || {};
    facts(dl, [["Window (tokens)", c.window_tokens], ["Prompt (tokens)", c.prompt_tokens],
      ["Answer (tokens)", c.answer_tokens], ["Window from", c.source], ["Files sent", c.files_sent],
      ["Files left out", c.files_left_out]]);
    for (const [k, v] of Object.entries(result.timings || {})) facts(dl, [[`Time: ${k}`, v]]);
    if (result.conversation_id) facts(dl, [["Conversation", result.conversation_id]]);
    $("ask-details").hidden = !dl.children.length;
    if (result.conversation_id) {
      conversation = result.conversation_id;
      $("ask-follow-label").hidden = false;
    }
  }

  async function ask(question) {
    reset();
    running = new AbortController();
    button.disabled = true;
    state.textContent = "Asking…";
    const body = { question, stream: true };
    if ($("ask-agent").checked) body.agent = true;
    if (conversation && $("ask-follow").checked) body.conversation_id = conversation;
    try {
      const resp = await call("POST", "/ask", body, running.signal);
      if (!resp.ok) {
        const data = await resp.json().catch(() => ({}));
        throw new Error(data.error || `the server answered ${resp.status}`);
      }
      let result = null;
      for await (const event of events(resp)) {
        if (event.error) throw new Error(event.error);
        if (event.text !== undefined) {
          answer.append(event.text);
          state.textContent = "Answering…";
        }
        if (event.step !== undefined) addStep(event.step);
        if (event.done) result = event;
      }
      if (!result) throw new Error("the answer stopped before it was complete");
      finish(result, question);
    } catch (error) {
      if (error.name !== "AbortError") {
        state.textContent = error.message;
        state.classList.add("error");
      }
    } finally {
      running = null;
      button.disabled = false;
    }
  }

  return {
    // A link fills the box and waits: asking spends, so only the button asks.
    enter(params) {
      const q = params.get("q");
      if (q !== null && q !== box.value) {
        box.value = q;
        reset();
      }
      document.title = "ask — loom";
      box.focus();
    },
  };
})();

// -- status and scan -------------------------------------------------------------------------

views.status = (() => {
  const button = $("scan-button");
  let scanning = false;

  async function load() {
    const s = await callJSON("GET", "/status");
    const dl = $("status-facts");
    const v = s.vectors || {};
    const g = s.grep_index || {};
    const last = s.last_scan;
    const report = last && last.report;
    const pairs = [
      ["Files", `${s.files} (${s.notes} notes, ${s.pdfs} PDFs, ${s.documents} other documents)`],
      ["Failed", String(s.failed)],
      ["Skipped", `${s.skipped} (no text)`],
      ["Text", bytes(s.text_bytes)],
      ["Index", `${s.index} · ${bytes(s.index_bytes)}`],
      ["Config", s.config],
      ["Vectors", v.enabled ? `${v.files} files by ${v.model}${v.pending ? `, ${v.pending} pending` : ""}${v.stale ? `, ${v.stale} stale` : ""}` : "off"],
      ["Grep index", g.pending ? `${g.pending} files to add (${g.building ? "being built now" : "by the next scan"}); grep reads them directly meanwhile` : "complete"],
      ["Last scan", last ? `${when(last.finished_at)}${report ? ` — ${summary(report)}` : ""}` : "never"],
    ];
    for (const [kind, engine] of Object.entries(s.engines || {})) pairs.push([`Engine: ${kind}`, engine]);
    dl.replaceChildren();
    for (const [k, val] of pairs) dl.append(el("dt", {}, k), el("dd", {}, val));
    $("status-roots").replaceChildren(...(s.roots || []).map((r) =>
      el("li", {}, el("strong", {}, r.name), ` ${r.path}`)));
    if (!(s.roots || []).length) $("status-roots").append(el("li", {}, "None yet: run loom scan DIR."));
    const failures = s.failures || [];
    $("failures-none").hidden = failures.length > 0;
    $("failures").hidden = !failures.length;
    $("failures").tBodies[0].replaceChildren(...failures.map((f) =>
      el("tr", {}, el("td", {}, f.path), el("td", {}, f.error))));
    button.disabled = scanning || !(s.roots || []).length;
  }

  function summary(r) {
    // `unchanged`: found as they were; `skipped`: no text (an older report counted
    // both in `skipped`).
    const skipped = (r.skips || []).length;
    const counts = { ...r, skipped, unchanged: r.unchanged ?? (r.skipped || 0) - skipped };
    const parts = ["added", "updated", "moved", "removed", "unchanged", "skipped", "failed"]
      .filter((k) => counts[k]).map((k) => `${counts[k]} ${k}`);
    return `${parts.join(", ") || "nothing changed"} in ${((r.duration_ms || 0) / 1000).toFixed(1)} s`;
  }

  button.addEventListener("click", async () => {
    if (scanning) return;
    scanning = true;
    button.disabled = true;
    const bar = $("scan-progress");
    const text = $("scan-state");
    $("scan-live").hidden = false;
    bar.removeAttribute("value");
    text.classList.remove("error");
    text.textContent = "Scanning…";
    try {
      const resp = await call("POST", "/scan", { stream: true, force: $("scan-force").checked });
      if (!resp.ok) {
        const data = await resp.json().catch(() => ({}));
        throw new Error(data.error || `the server answered ${resp.status}`);
      }
      for await (const event of events(resp)) {
        if (event.error) throw new Error(event.error);
        if (event.progress) {
          const p = event.progress;
          bar.max = Math.max(1, p.total);
          bar.value = p.done;
          text.textContent = `${p.done} of ${p.total} · ${p.path}`;
        }
        if (event.done) {
          bar.max = 1;
          bar.value = 1;
          text.textContent = `Scan finished: ${summary(event)}.`;
        }
      }
    } catch (error) {
      text.textContent = error.message;
      text.classList.add("error");
    } finally {
      scanning = false;
      await load().catch(() => {});
      button.disabled = false;
    }
  });

  return {
    enter() {
      document.title = "status — loom";
      load().catch((error) => {
        $("status-facts").replaceChildren(el("dt", {}, "Error"), el("dd", { class: "error" }, error.message));
      });
    },
  };
})();

render();
