// The upload page's script: served by the API, so the page's CSP allows no inline script.
const $ = (id) => document.getElementById(id);
const FIELDS = ["total_files", "processed", "linked", "skipped_no_match", "skipped_already_exists", "failed", "ignored"];
const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
$("token").value = sessionStorage.getItem("pdfqueue-token") || "";

function headers() {
  const token = $("token").value.trim();
  sessionStorage.setItem("pdfqueue-token", token);
  return token ? { Authorization: "Bearer " + token } : {};
}

function row(name, value) {
  const tr = document.createElement("tr");
  const label = tr.insertCell();
  const count = tr.insertCell();
  label.textContent = name;
  count.textContent = String(value);
  count.className = "n";
  return tr;
}

function show(s) {
  $("status").textContent = s.status + (s.error ? " — " + s.error : "");
  $("proc").max = s.total_files || 1;
  $("proc").value = s.processed;
  $("counts").replaceChildren(...FIELDS.map((f) => row(f.replaceAll("_", " "), s[f] ?? "…")));
}

async function poll(id) {
  const r = await fetch(`v1/batches/${id}`, { headers: headers() });
  if (!r.ok) { $("error").textContent = `status check failed: HTTP ${r.status}`; return; }
  const s = await r.json();
  show(s);
  if (TERMINAL.has(s.status)) {
    $("report").hidden = false;
    $("csv").onclick = async (e) => {
      e.preventDefault();
      const res = await fetch(`v1/batches/${id}/files?format=csv`, { headers: headers() });
      const url = URL.createObjectURL(await res.blob());
      Object.assign(document.createElement("a"), { href: url, download: `${id}.csv` }).click();
    };
    $("go").disabled = false;
  } else {
    setTimeout(() => poll(id), 500);
  }
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  $("error").textContent = "";
  $("report").hidden = true;
  const file = $("file").files[0];
  if (!file) return;
  const body = new FormData();
  body.append("file", file);
  const xhr = new XMLHttpRequest();
  xhr.open("POST", "v1/batches");
  for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
  xhr.upload.onprogress = (ev) => {
    if (!ev.lengthComputable) return;
    const pct = Math.round((100 * ev.loaded) / ev.total);
    $("up").value = pct; $("upText").textContent = pct + "%";
  };
  xhr.onload = () => {
    let data = {};
    try { data = JSON.parse(xhr.responseText); } catch (_) {}
    if (xhr.status !== 202) { $("error").textContent = `upload refused (HTTP ${xhr.status}): ${data.detail || xhr.statusText}`; $("go").disabled = false; return; }
    $("batch").textContent = data.batch_id;
    poll(data.batch_id);
  };
  xhr.onerror = () => { $("error").textContent = "upload failed: the API could not be reached"; $("go").disabled = false; };
  $("progress").hidden = false;
  $("go").disabled = true;
  xhr.send(body);
});
