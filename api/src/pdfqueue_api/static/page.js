// The page's script: served by the API, so the page's CSP allows no inline script.
// Data from the API only ever reaches the page as text (textContent, attributes), never as HTML.
"use strict";
const $ = (id) => document.getElementById(id);
const ROOT = new URL("../", document.currentScript.src); // the API's base, wherever it is mounted
const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const OUTCOMES = ["linked", "skipped_no_match", "skipped_already_exists", "skipped_ambiguous", "failed", "ignored"];
const LABELS = {
  linked: "linked", skipped_no_match: "skipped: no match", skipped_already_exists: "skipped: already linked",
  skipped_ambiguous: "skipped: two users",
  failed: "failed", ignored: "ignored (not a PDF)", retrying: "retrying", total_files: "files", processed: "processed",
};
const PAGE_SIZE = 50;
const OPEN = document.body.dataset.open === "true"; // the API needs no token (anonymous mode)
// Where to sign in, when the API offers it (PDFQUEUE_OIDC_PAGE_CLIENT_ID): the issuer's
// endpoints, this page's client id and scopes, as the API read and checked them.
const LOGIN = document.body.dataset.login ? JSON.parse(document.body.dataset.login) : null;
const view = { id: null, summary: null, abort: null, poll: null, samples: [], offset: 0, total: 0, retry: false, filesAt: 0, erasing: false };
let advice = {};
let batchAdvice = {};

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

function token() {
  const typed = $("token").value.trim();
  if (typed && typed !== sessionStorage.getItem("pdfqueue-token")) {
    sessionStorage.setItem("pdfqueue-token", typed);
    sessionStorage.removeItem("pdfqueue-signed-in"); // a pasted token, not the sign-in's
  }
  const held = typed || sessionStorage.getItem("pdfqueue-token") || "";
  $("signOut").hidden = !held;
  return held;
}

// Forget the token, pasted or signed in, in this tab (the issuer's own session is the
// issuer's: signing in again may not ask for a password). The field is emptied too, since
// Chromium restores a password field's value after a navigation.
function signOut() {
  for (const key of ["pdfqueue-token", "pdfqueue-signed-in"]) sessionStorage.removeItem(key);
  $("token").value = "";
  $("signOut").hidden = true;
  loginStatus("Signed out: the token is forgotten in this tab.");
  history.pushState(null, "", ROOT.pathname);
  route();
}

function auth(extra = {}) {
  const t = token();
  return t ? { ...extra, Authorization: "Bearer " + t } : extra;
}

async function call(path, options = {}) {
  const response = await fetch(new URL(path, ROOT), { ...options, headers: auth(options.headers) });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, detail);
  }
  return response;
}

function explain(error) {
  if (!(error instanceof ApiError)) return "The API could not be reached: check your connection, then reload.";
  if (error.status === 401 && LOGIN) return "The API refused the token: sign in, or enter your tenant's API token at the top.";
  if (error.status === 401) return "The API refused the token: enter your tenant's API token at the top.";
  if (error.status === 404) return "No such batch for this token (it may belong to another tenant).";
  if (error.status === 429) return "Too many uploads for now: " + error.message;
  if (error.status === 503) return "The service is busy or partly down; try again in a minute.";
  return `The API answered ${error.status}: ${error.message}`;
}

function fail(error) {
  if (error instanceof ApiError && error.status === 401 && signedOut()) return;
  $("error").textContent = explain(error);
}

// Characters that show as nothing or move other text (bidi overrides and isolates, zero-width
// ones, other format characters, controls but tab and newlines, line and paragraph
// separators), each written out as pdfqueue.domain.names.visible writes it: a name is shown
// as what it is, so `cv\u202excod.pdf` cannot pass for `cvdocx.pdf`.
const HIDDEN = /[\p{Cf}\p{Zl}\p{Zp}\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/gu;
function visible(text) {
  return String(text).replace(HIDDEN, (c) => `\u27e8U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}\u27e9`);
}

// A name from the uploader: written out (`visible`) and isolated, so that it cannot reorder
// the text around it either.
function nameNode(text) {
  const node = el("bdi", visible(text));
  node.dir = "auto";
  return node;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ["KB", "MB", "GB"];
  let i = -1;
  do { n /= 1024; i += 1; } while (n >= 1024 && i < units.length - 1);
  return `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

function duration(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${Math.round(s % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function when(iso) { return new Date(iso).toLocaleString(); }

// --- navigation --------------------------------------------------------------------------------
function go(path) { history.pushState(null, "", new URL(path, ROOT)); route(); }

function route() {
  stopLive();
  $("error").textContent = "";
  $("noToken").hidden = true;
  const rel = location.pathname.slice(ROOT.pathname.length);
  const match = /^batches\/([^/]+)$/.exec(rel);
  $("listView").hidden = Boolean(match);
  $("batchView").hidden = !match;
  if (match) showBatch(decodeURIComponent(match[1]));
  else showList();
}

function link(path, text) {
  const a = el("a", text);
  a.href = new URL(path, ROOT).href;
  a.addEventListener("click", (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    go(path);
  });
  return a;
}

// --- the batch list ----------------------------------------------------------------------------
let nextCursor = null;

async function showList(append = false) {
  document.title = "pdfqueue";
  if (!append) { $("batches").tBodies[0].replaceChildren(); nextCursor = null; }
  if (!token() && !OPEN) { needToken(); return; }
  try {
    const query = new URLSearchParams({ limit: "20" });
    if (append && nextCursor) query.set("cursor", nextCursor);
    const page = await (await call(`v1/batches?${query}`)).json();
    for (const b of page.batches) $("batches").tBodies[0].append(batchRow(b));
    nextCursor = page.next_cursor;
    $("more").hidden = !nextCursor;
    $("listEmpty").hidden = $("batches").tBodies[0].rows.length > 0;
    $("listEmpty").textContent = "No batches yet.";
  } catch (error) { fail(error); }
}

// No token, and the API wants one: say what a token is and where one comes from, instead of
// an empty table and an upload form that can only be refused.
function needToken() {
  $("listView").hidden = true;
  $("batchView").hidden = true;
  $("noToken").hidden = false;
  $("noTokenLogin").hidden = !LOGIN;
  $("token").focus();
}

function batchRow(b) {
  const tr = document.createElement("tr");
  const name = tr.insertCell();
  name.className = "name";
  const title = link(`batches/${encodeURIComponent(b.batch_id)}`, "");
  title.append(nameNode(b.file_name || b.batch_id.slice(0, 12)));
  name.append(title);
  tr.insertCell().textContent = when(b.created_at);
  tr.insertCell().textContent = b.status;
  for (const value of [b.total_files ?? "…", b.linked, b.failed]) {
    const td = tr.insertCell(); td.className = "n"; td.textContent = String(value);
  }
  const d = tr.insertCell(); d.className = "n"; d.textContent = duration(b.duration_s);
  return tr;
}

// --- upload ------------------------------------------------------------------------------------
let upload = null;

function send(file) {
  $("error").textContent = "";
  const body = new FormData();
  body.append("file", file, file.name);
  const xhr = new XMLHttpRequest();
  upload = xhr;
  xhr.open("POST", new URL("v1/batches", ROOT));
  for (const [k, v] of Object.entries(auth())) xhr.setRequestHeader(k, v);
  xhr.upload.onprogress = (ev) => {
    if (!ev.lengthComputable) return;
    $("up").max = ev.total; $("up").value = ev.loaded;
    $("upText").textContent = `${bytes(ev.loaded)} of ${bytes(ev.total)}`;
  };
  const done = () => { upload = null; $("go").disabled = false; $("progress").hidden = true; };
  xhr.onload = () => {
    done();
    let data = {};
    try { data = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
    if (xhr.status !== 202) { fail(new ApiError(xhr.status, data.detail || xhr.statusText)); return; }
    go(`batches/${encodeURIComponent(data.batch_id)}`);
  };
  xhr.onerror = () => { done(); fail(new Error("network")); };
  xhr.onabort = () => { done(); $("error").textContent = "Upload cancelled: nothing was created."; };
  $("progress").hidden = false;
  $("up").value = 0;
  $("upText").textContent = `0 B of ${bytes(file.size)}`;
  $("go").disabled = true;
  xhr.send(body);
}

// --- one batch ---------------------------------------------------------------------------------
async function showBatch(id) {
  if (!token() && !OPEN) { needToken(); return; }
  view.id = id; view.summary = null; view.samples = []; view.offset = 0; view.erasing = false;
  askErase(false, false);
  $("batchView").classList.remove("gone");
  $("erase").hidden = false;
  $("batch").textContent = id;
  $("batchTitle").textContent = "Batch";
  $("status").textContent = "loading…";
  $("rate").textContent = "";
  $("files").tBodies[0].replaceChildren();
  try {
    render(await (await call(`v1/batches/${encodeURIComponent(id)}`)).json());
  } catch (error) { $("status").textContent = ""; fail(error); return; }
  loadFiles();
  if (!TERMINAL.has(view.summary.status)) follow(id, null, 0);
}

function render(s) {
  if (view.erasing) return; // a state read before the erasure began
  const previous = view.summary;
  view.summary = s;
  if (s.file_name) { $("batchTitle").replaceChildren(nameNode(s.file_name)); document.title = `${visible(s.file_name)} · pdfqueue`; }
  $("status").textContent = s.status + (s.error ? ` — ${s.error}` : "");
  const why = s.status === "FAILED" && s.reason ? batchAdvice[s.reason] || [`The batch could not be started (${s.reason}).`, "Tell the administrator, then upload the ZIP again."] : null;
  $("why").hidden = !why;
  $("whyWhat").textContent = why ? why[0] : "";
  $("whyTodo").textContent = why ? why[1] : "";
  $("why").title = s.reason || "";
  $("proc").max = s.total_files || 1;
  $("proc").value = s.processed;
  $("rate").textContent = TERMINAL.has(s.status) ? `in ${duration(s.duration_s)}` : pace(s);
  $("counts").replaceChildren(...["total_files", "processed", ...OUTCOMES].map((f) => countRow(f, s[f])));
  chart(s);
  $("cancel").hidden = TERMINAL.has(s.status);
  $("retry").hidden = !(view.retry && TERMINAL.has(s.status) && s.failed > 0);
  const ended = previous && !TERMINAL.has(previous.status) && TERMINAL.has(s.status);
  if (ended || (!TERMINAL.has(s.status) && performance.now() - view.filesAt > 2000)) loadFiles();
}

function pace(s) {
  const now = performance.now() / 1000;
  view.samples.push([now, s.processed]);
  while (view.samples.length > 2 && now - view.samples[0][0] > 15) view.samples.shift();
  const [t0, p0] = view.samples[0];
  if (now - t0 < 1 || s.processed <= p0 || !s.total_files) return s.total_files ? `${s.processed} of ${s.total_files} files` : "";
  const rate = (s.processed - p0) / (now - t0);
  const eta = (s.total_files - s.processed) / rate;
  return `${s.processed} of ${s.total_files} files · ${rate.toFixed(1)} files/s · about ${duration(eta)} left`;
}

function countRow(field, value) {
  const tr = document.createElement("tr");
  tr.insertCell().textContent = LABELS[field] || field;
  const n = tr.insertCell();
  n.textContent = value === null || value === undefined ? "…" : String(value);
  n.className = "n";
  return tr;
}

const SVG = "http://www.w3.org/2000/svg";

function chart(s) {
  const max = Math.max(1, ...OUTCOMES.map((o) => s[o] || 0));
  const rowH = 24;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 400 ${OUTCOMES.length * rowH}`);
  svg.setAttribute("aria-hidden", "true");
  OUTCOMES.forEach((o, i) => {
    const y = i * rowH;
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "0"); label.setAttribute("y", String(y + 16));
    label.textContent = LABELS[o];
    const bar = document.createElementNS(SVG, "rect");
    bar.setAttribute("x", "160"); bar.setAttribute("y", String(y + 4));
    bar.setAttribute("height", "16");
    bar.setAttribute("width", String(Math.max((s[o] || 0) ? 2 : 0, (200 * (s[o] || 0)) / max)));
    bar.setAttribute("class", `bar-${o}`);
    const count = document.createElementNS(SVG, "text");
    count.setAttribute("x", String(166 + (200 * (s[o] || 0)) / max)); count.setAttribute("y", String(y + 16));
    count.textContent = String(s[o] || 0);
    svg.append(label, bar, count);
  });
  $("chart").replaceChildren(svg);
  $("chart").setAttribute("aria-label", "Files by outcome: " + OUTCOMES.map((o) => `${LABELS[o]} ${s[o] || 0}`).join(", "));
}

// --- live updates: Server-Sent Events read by fetch (EventSource cannot send a token) -----------
function stopLive() {
  if (view.abort) view.abort.abort();
  if (view.poll) clearTimeout(view.poll);
  view.abort = null; view.poll = null;
}

async function follow(id, lastId, failures) {
  const ctrl = new AbortController();
  view.abort = ctrl;
  try {
    const response = await call(`v1/batches/${encodeURIComponent(id)}/events`, {
      headers: lastId ? { "Last-Event-ID": lastId } : {}, signal: ctrl.signal,
    });
    if (response.status === 204) return;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event.event === "status" && view.id === id) { lastId = event.id; render(JSON.parse(event.data)); failures = 0; }
        if (event.event === "gone") { ctrl.abort(); if (view.id === id && !view.erasing) { hideBatch(); erased(); } return; }
      }
    }
  } catch (error) {
    if (ctrl.signal.aborted) return;
    if (error instanceof ApiError && error.status < 500) { fail(error); return; }
    failures += 1;
  }
  if (view.id !== id || ctrl.signal.aborted || TERMINAL.has(view.summary.status)) return;
  if (failures >= 3) { poll(id); return; } // streams keep breaking (a proxy?): poll instead
  view.poll = setTimeout(() => follow(id, lastId, failures), 1000 * failures);
}

function parseEvent(block) {
  const event = { data: "" };
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const name = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
    if (name === "data") event.data += value; else event[name] = value;
  }
  return event;
}

async function poll(id) {
  try {
    render(await (await call(`v1/batches/${encodeURIComponent(id)}`)).json());
  } catch (error) { fail(error); }
  if (view.id === id && !TERMINAL.has(view.summary.status)) view.poll = setTimeout(() => poll(id), 1000);
}

// --- erasing the batch: a confirmation step of the page's own, then DELETE ?erase=true ------------
function askErase(open, focus = true) {
  $("eraseConfirm").hidden = !open;
  $("erase").setAttribute("aria-expanded", String(open));
  if (focus) (open ? $("eraseNo") : $("erase")).focus(); // the safe answer first
}

function hideBatch() {
  view.erasing = true;
  stopLive(); // the batch is (about to be) gone: its event stream would wait for ever
  askErase(false, false);
  $("batchView").classList.add("gone"); // the style hides the report and its actions
  for (const a of ["cancel", "retry", "erase"]) $(a).hidden = true;
  $("files").tBodies[0].replaceChildren();
  $("counts").replaceChildren();
  $("chart").replaceChildren();
}

async function erase(id) {
  hideBatch();
  $("status").textContent = "ERASING";
  $("rate").textContent = "hidden and cancelled; the rest goes once its last jobs have ended";
  try {
    const response = await call(`v1/batches/${encodeURIComponent(id)}?erase=true`, { method: "DELETE" });
    if (view.id !== id) return;
    if (response.status === 202) {
      const wait = Math.max(1, Number(response.headers.get("Retry-After")) || 5);
      $("rate").textContent = `hidden and cancelled; the rest goes once its last jobs have ended (about ${wait} s)`;
      view.poll = setTimeout(() => erase(id), wait * 1000);
      return;
    }
    erased();
  } catch (error) {
    if (view.id !== id) return;
    if (error instanceof ApiError && error.status === 404) erased(); // finished meanwhile (a purge)
    else { $("rate").textContent = ""; fail(error); }
  }
}

function erased() {
  $("status").textContent = "ERASED";
  $("rate").textContent = "its ZIP, report, stored PDFs and links are gone";
  $("batchTitle").textContent = "Batch erased";
  document.title = "Batch erased · pdfqueue";
}

// --- the per-file table, paged by the server ---------------------------------------------------
async function loadFiles() {
  const id = view.id;
  view.filesAt = performance.now(); // while the batch runs, the table refreshes at most this often
  const query = new URLSearchParams({ offset: String(view.offset), limit: String(PAGE_SIZE), sort: $("fSort").value });
  if ($("fOutcome").value) query.set("outcome", $("fOutcome").value);
  if ($("fReason").value) query.set("reason", $("fReason").value);
  if ($("fSearch").value.trim()) query.set("search", $("fSearch").value.trim());
  try {
    const page = await (await call(`v1/batches/${encodeURIComponent(id)}/files/page?${query}`)).json();
    if (view.id !== id || view.erasing) return;
    view.total = page.total;
    $("files").tBodies[0].replaceChildren(...page.files.map(fileRow));
    reasons(page.reasons);
    const last = Math.min(page.offset + page.files.length, page.total);
    $("pageInfo").textContent = page.total ? `Files ${page.offset + 1}–${last} of ${page.total}` : "No files match.";
    $("prev").disabled = page.offset === 0;
    $("next").disabled = last >= page.total;
  } catch (error) { if (!view.erasing) fail(error); }
}

function fileRow(f) {
  const tr = document.createElement("tr");
  tr.insertCell().textContent = String(f.index);
  tr.cells[0].className = "n";
  const name = tr.insertCell(); name.append(nameNode(f.name)); name.className = "name";
  tr.insertCell().append(el("span", LABELS[f.outcome] || f.outcome, `o-${f.outcome}`));
  const why = tr.insertCell();
  const words = f.reason ? advice[f.reason] || [`The file could not be processed (${f.reason}).`, "Try again later; if it persists, tell the administrator."] : null;
  if (words) { why.append(el("span", words[0]), el("span", words[1], "advice")); why.title = f.reason; }
  if (f.tries > 1) why.append(el("span", `Try ${f.tries}; before: ${f.previous_reason || "unknown"}.`, "tries"));
  return tr;
}

function reasons(list) {
  const select = $("fReason");
  const chosen = select.value;
  const wanted = $("fOutcome").value;
  const options = [el("option", "all")];
  options[0].value = "";
  for (const r of list) {
    if (!r.reason || (wanted && r.outcome !== wanted)) continue;
    const o = el("option", `${r.reason} (${r.files})`);
    o.value = r.reason;
    options.push(o);
  }
  select.replaceChildren(...options);
  select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
}

async function download(format) {
  try {
    const path = `v1/batches/${encodeURIComponent(view.id)}/files${format === "csv" ? "?format=csv" : ""}`;
    const blob = await (await call(path)).blob();
    const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: `${view.id}.${format}` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  } catch (error) { fail(error); }
}

// --- signing in at the identity provider: the authorization code flow with PKCE ----------------
// (RFC 7636, S256), as a public client. The page goes to the issuer with a fresh `state` and
// the hash of a fresh verifier, both kept in this tab; the issuer sends it back here with a
// code, which only the holder of the verifier can exchange for an access token. That token
// then goes where a pasted one goes and is sent the same way. The redirect URI is the page's
// root (one URI to register); the view the user was on is kept and returned to.
function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomText() { return b64url(crypto.getRandomValues(new Uint8Array(32))); }

async function s256(text) { return b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text))); }

async function signIn() {
  const pending = { state: randomText(), verifier: randomText(), back: location.pathname };
  sessionStorage.setItem("pdfqueue-login", JSON.stringify(pending));
  const url = new URL(LOGIN.authorize);
  const query = {
    response_type: "code", client_id: LOGIN.client, redirect_uri: ROOT.href, scope: LOGIN.scopes,
    state: pending.state, code_challenge: await s256(pending.verifier), code_challenge_method: "S256",
  };
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  location.assign(url.href);
}

// Back from the issuer (this URL has `state`): check it is the answer to this tab's own
// sign-in, once (a replayed or forged answer is refused before any request), then exchange
// the code. The code and state leave the address bar (and history) first, whatever happens.
async function finishSignIn() {
  const answer = new URLSearchParams(location.search);
  if (!LOGIN || !answer.has("state")) return;
  const pending = JSON.parse(sessionStorage.getItem("pdfqueue-login") || "null");
  sessionStorage.removeItem("pdfqueue-login");
  history.replaceState(null, "", ROOT.origin + (pending?.back || ROOT.pathname)); // a path of this origin
  if (!pending || answer.get("state") !== pending.state) { loginStatus("Sign-in refused: this answer is not to a sign-in of this tab. Choose Sign in to try again."); return; }
  if (!answer.has("code")) { loginStatus(`Sign-in failed: ${answer.get("error_description") || answer.get("error") || "no code"}.`); return; }
  try {
    const response = await fetch(LOGIN.token, {
      method: "POST",
      body: new URLSearchParams({
        grant_type: "authorization_code", code: answer.get("code"), redirect_uri: ROOT.href,
        client_id: LOGIN.client, code_verifier: pending.verifier,
      }),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok || typeof body.access_token !== "string") throw new Error(body.error_description || body.error || response.statusText);
    sessionStorage.setItem("pdfqueue-token", body.access_token);
    sessionStorage.setItem("pdfqueue-signed-in", "1");
    $("token").value = body.access_token;
    $("signOut").hidden = false;
    loginStatus("Signed in.");
  } catch (error) {
    loginStatus(`Sign-in failed: the identity provider refused (${error.message || "no answer"}). Choose Sign in to try again.`);
  }
}

// The API refused a token the sign-in got (expired, or revoked): forget it and say so. The
// page never signs in again by itself, so an issuer whose tokens the API refuses is no loop.
function signedOut() {
  if (!LOGIN || !sessionStorage.getItem("pdfqueue-signed-in")) return false;
  for (const key of ["pdfqueue-token", "pdfqueue-signed-in"]) sessionStorage.removeItem(key);
  $("token").value = "";
  $("signOut").hidden = true;
  const words = "Signed out: your sign-in has ended. Choose Sign in to sign in again.";
  loginStatus(words);
  needToken();
  $("error").textContent = words;
  return true;
}

function loginStatus(text) { $("loginStatus").textContent = text; }

// --- wiring ------------------------------------------------------------------------------------
async function offersRetry() {
  try {
    const spec = await (await fetch(new URL("openapi.json", ROOT))).json();
    view.retry = Boolean(spec.paths && spec.paths["/v1/batches/{batch_id}/retry"]);
  } catch (_) { view.retry = false; }
}

function wire() {
  $("token").value = sessionStorage.getItem("pdfqueue-token") || "";
  $("tokenForm").addEventListener("submit", (e) => { e.preventDefault(); token(); route(); });
  $("signIn").hidden = !LOGIN;
  $("signIn").addEventListener("click", () => signIn().catch((error) => loginStatus(`Sign-in could not start: ${error.message}`)));
  $("signOut").hidden = !sessionStorage.getItem("pdfqueue-token");
  $("signOut").addEventListener("click", signOut);
  $("form").addEventListener("submit", (e) => {
    e.preventDefault();
    const file = $("file").files[0];
    if (file) send(file);
  });
  $("upCancel").addEventListener("click", () => upload && upload.abort());
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) { $("file").files = e.dataTransfer.files; send(e.dataTransfer.files[0]); }
  });
  $("more").addEventListener("click", () => showList(true));
  $("home").addEventListener("click", (e) => { e.preventDefault(); go(""); });
  $("back").addEventListener("click", (e) => { e.preventDefault(); go(""); });
  $("cancel").addEventListener("click", async () => {
    if (!confirm("Cancel this batch? Files not processed yet are dropped.")) return;
    try { render(await (await call(`v1/batches/${encodeURIComponent(view.id)}`, { method: "DELETE" })).json()); } catch (error) { fail(error); }
  });
  $("erase").addEventListener("click", () => askErase($("eraseConfirm").hidden));
  $("eraseNo").addEventListener("click", () => askErase(false));
  $("eraseYes").addEventListener("click", () => erase(view.id));
  $("eraseConfirm").addEventListener("keydown", (e) => { if (e.key === "Escape") askErase(false); });
  $("retry").addEventListener("click", async () => {
    try {
      await call(`v1/batches/${encodeURIComponent(view.id)}/retry`, { method: "POST" });
      showBatch(view.id);
    } catch (error) { fail(error); }
  });
  $("csv").addEventListener("click", (e) => { e.preventDefault(); download("csv"); });
  $("json").addEventListener("click", (e) => { e.preventDefault(); download("json"); });
  let typing = null;
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("filters").addEventListener("input", (e) => {
    clearTimeout(typing);
    if (e.target.id === "fOutcome") $("fReason").value = "";
    view.offset = 0;
    typing = setTimeout(loadFiles, e.target.id === "fSearch" ? 300 : 0);
  });
  $("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE_SIZE); loadFiles(); });
  $("next").addEventListener("click", () => { view.offset += PAGE_SIZE; loadFiles(); });
  window.addEventListener("popstate", route);
}

wire();
Promise.all([
  fetch(new URL("static/advice.json", ROOT)).then((r) => r.json()).then((a) => { advice = a; }).catch(() => {}),
  fetch(new URL("static/batch-advice.json", ROOT)).then((r) => r.json()).then((a) => { batchAdvice = a; }).catch(() => {}),
  offersRetry(),
  finishSignIn(),
]).finally(route);
