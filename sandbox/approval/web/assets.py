"""The approvals page: one HTML shell, one script, one stylesheet, served from the package.

The script builds every element with ``createElement`` and ``textContent``: text that
came from a model is never parsed as HTML. There is no inline script or style, so the
Content-Security-Policy can forbid both. ``{csrf}`` and ``{identity}`` are filled in by
the server (the identity HTML-escaped).
"""

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{csrf}">
<title>Pending approvals — sandbox</title>
<link rel="stylesheet" href="/app.css">
<script src="/app.js" defer></script>
</head>
<body>
<header class="top">
  <h1>Pending approvals</h1>
  <p class="who">answering as <span id="identity">{identity}</span> ·
     <span id="status">loading…</span></p>
</header>
<main>
  <p id="empty" class="empty" hidden>Nothing is waiting for approval.</p>
  <div id="requests"></div>
</main>
</body>
</html>
"""

APP_JS = r"""
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  const list = document.getElementById("requests");
  const statusLine = document.getElementById("status");
  const empty = document.getElementById("empty");
  const cards = new Map();

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function button(label, action, cls) {
    const b = el("button", cls || "", label);
    b.type = "button";
    b.dataset.action = action;
    return b;
  }

  function pieces(container, parts) {
    for (const part of parts) {
      container.appendChild(el("span", part[1] ? "ctl" : "", part[0]));
    }
  }

  function wordsText(words) {
    return words.map(function (w) {
      return /^[A-Za-z0-9_\-.\/:=@%+,~]+$/.test(w) ? w : JSON.stringify(w);
    }).join(" ");
  }

  async function send(card, req, body) {
    const note = card.querySelector(".note");
    note.textContent = "sending…";
    card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    let response, data = {};
    try {
      response = await fetch("/api/requests/" + encodeURIComponent(req.id) + "/answer", {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify(body),
      });
      data = await response.json().catch(function () { return {}; });
    } catch (err) {
      note.textContent = "could not reach the server: " + err;
      card.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
      return;
    }
    if (response.ok) {
      card.classList.add("answered");
      note.textContent = "Answered: " + body.outcome +
        (body.scope && body.scope !== "once" ? " (" + body.scope + ")" : "") +
        ". Waiting for the agent to apply it.";
    } else if (data.status === "timed_out") {
      card.classList.add("timed-out");
      note.textContent = "Timed out: " + (data.error || "this request expired");
    } else {
      card.classList.add("refused");
      note.textContent = "Refused: " + (data.error || response.status);
      if (response.status === 400) {
        card.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
      }
    }
  }

  function panel(card) {
    const p = card.querySelector(".panel");
    while (p.firstChild) p.removeChild(p.firstChild);
    p.hidden = false;
    return p;
  }

  function showDeny(card, req) {
    const p = panel(card);
    const label = el("label", "", "Reason (the model sees it) ");
    const input = el("input", "reason");
    input.type = "text";
    input.maxLength = 2000;
    label.appendChild(input);
    const go = button("Deny", "deny-confirm", "danger");
    go.addEventListener("click", function () {
      send(card, req, {outcome: "deny", reason: input.value});
    });
    p.append(label, go);
    input.focus();
  }

  function showEdit(card, req) {
    const p = panel(card);
    const area = el("textarea", "editor");
    area.rows = req.is_command ? 3 : 8;
    area.value = req.is_command ? req.command : JSON.stringify(req.args, null, 2);
    const go = button(req.is_command ? "Run the edited command" : "Run with these arguments",
                      "edit-confirm");
    go.addEventListener("click", function () {
      if (req.is_command) {
        send(card, req, {outcome: "edit", command: area.value});
        return;
      }
      let args;
      try { args = JSON.parse(area.value); } catch (err) {
        card.querySelector(".note").textContent = "not JSON: " + err.message;
        return;
      }
      send(card, req, {outcome: "edit", args: args});
    });
    p.append(el("p", "help", req.is_command
      ? "Edit the command line. It is checked again by the tool's policy before it runs."
      : "Edit the arguments (JSON). They are checked again before the tool runs."), area, go);
  }

  function showRemember(card, req) {
    const p = panel(card);
    const scope = el("select", "scope");
    [["always", "always (expires)"], ["session", "this session"]].forEach(function (o) {
      const opt = el("option", "", o[1]);
      opt.value = o[0];
      scope.appendChild(opt);
    });
    const scopeLabel = el("label", "", "Remember for ");
    scopeLabel.appendChild(scope);
    p.appendChild(scopeLabel);
    const selects = [];
    let toolWide = null;
    if (req.rule_subjects) {
      p.appendChild(el("p", "help", "Each simple command of this call needs a rule. " +
        "Keep the whole command, or only its first words:"));
      req.rule_subjects.forEach(function (argv) {
        const s = el("select", "prefix");
        for (let n = argv.length; n >= 1; n--) {
          const text = wordsText(argv.slice(0, n)) +
            (n === argv.length ? "   (exactly)" : "   … (and any further words)");
          const opt = el("option", "", text);
          opt.value = String(n);
          s.appendChild(opt);
        }
        selects.push([argv, s]);
        p.appendChild(s);
      });
    } else {
      toolWide = el("select", "tool-wide");
      [["0", "these exact arguments"], ["1", "every call of " + req.tool]].forEach(function (o) {
        const opt = el("option", "", o[1]);
        opt.value = o[0];
        toolWide.appendChild(opt);
      });
      p.appendChild(toolWide);
    }
    const go = button("Save the rule and approve", "remember-confirm");
    go.addEventListener("click", function () {
      const body = {outcome: "approve", scope: scope.value};
      if (selects.length) {
        body.patterns = selects.map(function (pair) {
          const n = parseInt(pair[1].value, 10);
          return {words: pair[0].slice(0, n), prefix: n < pair[0].length};
        });
      } else if (toolWide && toolWide.value === "1") {
        body.tool_wide = true;
      }
      send(card, req, body);
    });
    p.appendChild(go);
  }

  function buildCard(req) {
    const card = el("article", "request");
    card.dataset.id = req.id;
    const head = el("header", "");
    head.append(el("span", "tool", req.tool), el("code", "rid", req.id));
    if (req.expires_at) head.appendChild(el("span", "expiry", "expires " + req.expires_at));
    card.appendChild(head);
    if (req.hint) card.appendChild(el("p", "hint", req.hint));
    const argsBox = el("div", "args");
    argsBox.appendChild(el("span", "label", req.is_command ? "command" : "arguments"));
    const pre = el("pre", req.is_command ? "command" : "json");
    pieces(pre, req.args_pieces);
    argsBox.appendChild(pre);
    card.appendChild(argsBox);
    if (req.control_characters > 0) {
      card.appendChild(el("p", "warn", "⚠ " + req.control_characters +
        " control character(s), shown escaped and highlighted"));
    }
    if (req.rule_subjects && req.rule_subjects.length > 1) {
      const parsed = el("ul", "parsed");
      req.rule_subjects.forEach(function (argv) { parsed.appendChild(el("li", "", wordsText(argv))); });
      const label = el("div", "label", "parsed commands");
      card.append(label, parsed);
    }
    const details = Object.entries(req.details || {});
    if (details.length) {
      const dl = el("dl", "details");
      details.forEach(function (kv) {
        dl.append(el("dt", "", kv[0]),
                  el("dd", "", typeof kv[1] === "string" ? kv[1] : JSON.stringify(kv[1])));
      });
      card.appendChild(dl);
    }
    const actions = el("div", "actions");
    const approve = button("Approve once", "approve", "primary");
    const session = button("Approve for this session", "session");
    const remember = button("Always approve…", "remember");
    const deny = button("Deny…", "deny", "danger");
    const edit = button("Edit…", "edit");
    approve.addEventListener("click", function () { send(card, req, {outcome: "approve"}); });
    session.addEventListener("click", function () {
      send(card, req, {outcome: "approve", scope: "session"});
    });
    remember.addEventListener("click", function () { showRemember(card, req); });
    deny.addEventListener("click", function () { showDeny(card, req); });
    edit.addEventListener("click", function () { showEdit(card, req); });
    actions.append(approve, session, remember, deny, edit);
    card.appendChild(actions);
    const p = el("div", "panel");
    p.hidden = true;
    card.appendChild(p);
    card.appendChild(el("p", "note", req.answered ? "Answered; waiting for the agent to apply it." : ""));
    if (req.answered) {
      card.classList.add("answered");
      card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    }
    return card;
  }

  async function refresh() {
    let data;
    try {
      const response = await fetch("/api/pending", {credentials: "same-origin"});
      if (!response.ok) {
        statusLine.textContent = "server refused: " + response.status + " (reload with the token URL)";
        return;
      }
      data = await response.json();
    } catch (err) {
      statusLine.textContent = "server unreachable; retrying";
      return;
    }
    const seen = new Set();
    for (const req of data.requests) {
      seen.add(req.id);
      if (!cards.has(req.id)) {
        const card = buildCard(req);
        cards.set(req.id, card);
        list.appendChild(card);
      }
    }
    for (const [id, card] of cards) {
      if (!seen.has(id)) {
        card.remove();
        cards.delete(id);
      }
    }
    empty.hidden = data.count > 0;
    statusLine.textContent = data.count + " pending · updated " + new Date().toLocaleTimeString();
  }

  refresh();
  setInterval(refresh, 1000);
})();
"""

APP_CSS = """
:root { color-scheme: light; --ink: #1d2430; --muted: #5b6678; --line: #d8dde6;
        --accent: #1f6feb; --danger: #c62828; --bg: #f6f8fb; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color: var(--ink); background: var(--bg); }
header.top { padding: 18px 28px; background: #fff; border-bottom: 1px solid var(--line); }
header.top h1 { margin: 0 0 4px; font-size: 20px; }
.who { margin: 0; color: var(--muted); font-size: 13px; }
main { padding: 20px 28px; max-width: 1000px; }
.empty { color: var(--muted); }
.request { background: #fff; border: 1px solid var(--line); border-radius: 8px;
           padding: 14px 18px; margin: 0 0 16px; }
.request header { display: flex; gap: 12px; align-items: baseline; margin-bottom: 6px; }
.request .tool { font-weight: 700; font-size: 16px; }
.request .rid, .request .expiry { color: var(--muted); font-size: 12px; }
.hint { margin: 4px 0 8px; }
.label { display: block; color: var(--muted); font-size: 12px; text-transform: uppercase;
         letter-spacing: .04em; }
pre { margin: 4px 0 8px; padding: 10px 12px; background: #0f1720; color: #e6edf3;
      border-radius: 6px; white-space: pre-wrap; word-break: break-all;
      font: 14px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
.ctl { background: #ffd33d; color: #000; border-radius: 3px; padding: 0 2px; }
.warn { color: #8a5a00; background: #fff6d6; padding: 4px 8px; border-radius: 4px; }
.details { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px;
           font-size: 13px; margin: 6px 0; }
.details dt { color: var(--muted); }
.details dd { margin: 0; font-family: ui-monospace, monospace; word-break: break-all; }
.parsed { margin: 2px 0 8px; font-family: ui-monospace, monospace; font-size: 13px; }
.actions { display: flex; flex-wrap: wrap; gap: 8px; margin-top: 10px; }
button { font: inherit; padding: 6px 12px; border-radius: 6px; border: 1px solid var(--line);
         background: #fff; cursor: pointer; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { color: var(--danger); border-color: var(--danger); }
button:disabled { opacity: .5; cursor: default; }
.panel[hidden] { display: none; }
.panel { margin-top: 10px; padding: 10px; border-top: 1px dashed var(--line);
         display: flex; flex-direction: column; gap: 8px; align-items: flex-start; }
.panel select, .panel input, .panel textarea { font: 14px ui-monospace, monospace; }
.panel textarea { width: 100%; }
.panel input.reason { width: 420px; }
.help { color: var(--muted); margin: 0; font-size: 13px; }
.note { margin: 8px 0 0; font-size: 13px; color: var(--muted); }
.answered { opacity: .75; border-color: #2e7d32; }
.timed-out { border-color: #8a5a00; }
.refused { border-color: var(--danger); }
"""
