
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').getAttribute("content");
  const list = document.getElementById("requests");
  const live = document.getElementById("live");
  const countLine = document.getElementById("count");
  const empty = document.getElementById("empty");
  const moreBox = document.getElementById("more");
  const moreText = document.getElementById("more-text");
  const moreButton = document.getElementById("more-button");
  const PAGE = 50;
  const KEEP_RESOLVED = 30;
  const cards = new Map();        // id -> {card, req, state}
  const state = {tail: null, more: false, count: null, ready: false, loading: null,
                 again: false, queued: [], connected: false};

  // -- small helpers ---------------------------------------------------------------

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

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function pieces(container, parts) {
    clear(container);
    for (const part of parts) {
      container.appendChild(el("span", part[1] === "cut" ? "cutmark" : part[1] ? "ctl" : "", part[0]));
    }
  }

  // A cut, escaped text from the server: {pieces, chars, truncated}.
  function textBlock(tag, cls, t) {
    const node = el(tag, cls);
    for (const part of t.pieces) node.appendChild(el("span", part[1] ? "ctl" : "", part[0]));
    if (t.truncated) node.appendChild(el("span", "cutmark", " … (" + number(t.chars) + " characters, cut)"));
    return node;
  }

  function wordsText(words) {
    return words.map(function (w) {
      return /^[A-Za-z0-9_\-.\/:=@%+,~]+$/.test(w) ? w : JSON.stringify(w);
    }).join(" ");
  }

  function shorten(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

  function number(n) { return Number(n).toLocaleString(); }

  const relative = new Intl.RelativeTimeFormat(undefined, {numeric: "auto", style: "short"});

  function relText(ms) {
    const diff = (ms - Date.now()) / 1000;
    const abs = Math.abs(diff);
    if (abs < 45) return diff >= 0 ? "in a few seconds" : "just now";
    if (abs < 3600) return relative.format(Math.round(diff / 60), "minute");
    if (abs < 86400) return relative.format(Math.round(diff / 3600), "hour");
    return relative.format(Math.round(diff / 86400), "day");
  }

  // Local time, and how far from now: "2:45:08 PM (in 15 min.)".
  function whenText(ms) {
    const d = new Date(ms);
    const sameDay = new Date().toDateString() === d.toDateString();
    return (sameDay ? d.toLocaleTimeString() : d.toLocaleString()) + " (" + relText(ms) + ")";
  }

  // A <time> whose text is refreshed by the clock below (no request is made for it).
  function clockNode(ms, relOnly) {
    const t = el("time", "clock" + (relOnly ? " rel" : ""));
    t.dateTime = new Date(ms).toISOString();
    t.dataset.ms = String(ms);
    t.title = new Date(ms).toString();
    t.textContent = relOnly ? relText(ms) : whenText(ms);
    return t;
  }

  function tickClocks() {
    document.querySelectorAll("time.clock").forEach(function (t) {
      const ms = Number(t.dataset.ms);
      t.textContent = t.classList.contains("rel") ? relText(ms) : whenText(ms);
    });
    document.querySelectorAll("article.request.waiting").forEach(function (card) {
      const ms = Number(card.dataset.expires || 0);
      if (ms && ms < Date.now()) card.classList.add("overdue");
    });
  }

  function copyButton(text) {
    const b = button("Copy", "copy", "copy small");
    b.title = "Copy " + text;
    b.addEventListener("click", function () {
      const done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { b.textContent = "Select it"; });
      } else {
        b.textContent = "Select it";
      }
    });
    return b;
  }

  function idLine(text) {
    const wrap = el("span", "idwrap");
    const code = el("code", "idv", text);
    code.title = text;
    wrap.append(code, copyButton(text));
    return wrap;
  }

  async function getJSON(url) {
    const response = await fetch(url, {credentials: "same-origin"});
    let data = {};
    try { data = await response.json(); } catch (err) { data = {}; }
    if (!response.ok) {
      const e = new Error(data.error || ("HTTP " + response.status));
      e.status = response.status;
      throw e;
    }
    return data;
  }

  // -- what each answer means ------------------------------------------------------

  const KINDS = {
    static: "asks before every call",
    predicate: "its check asked for approval",
    tool: "the tool asked from inside",
    edit: "an edited call, asked again",
  };

  function commandsPreview(req) {
    const subjects = req.rule_subjects_shown || [];
    const shown = subjects.slice(0, 3).map(function (a) { return shorten(wordsText(a), 60); });
    let text = shown.join(" · ");
    if (subjects.length > 3) text += " and " + (subjects.length - 3) + " more";
    return text;
  }

  function sessionName(req) {
    return req.session_id ? "session " + shorten(req.session_id, 40) : "this agent's session";
  }

  function meanings(req) {
    const commandTool = req.rule_subjects_count !== null && req.rule_subjects_count !== undefined;
    let session, always;
    if (commandTool) {
      const preview = req.rule_subjects_shown ? commandsPreview(req)
        : req.rule_subjects_count + " parsed commands";
      session = "Also runs, without asking, later calls in " + sessionName(req) +
        " made only of these exact commands: " + preview + " (24 h at most).";
      let example = "";
      const first = (req.rule_subjects_shown || [])[0];
      if (first && first.length > 1) example = " such as “" + shorten(wordsText(first.slice(0, 2)), 40) + " …”";
      always = "A rule for every session, 30 days. You choose, per command: exactly it, " +
        "or a prefix of its words" + example + ".";
    } else {
      session = "Also runs, without asking, later " + req.tool + " calls with exactly these " +
        "arguments in " + sessionName(req) + " (24 h at most).";
      always = "A rule for every session, 30 days. You choose: these exact arguments, or " +
        "every call of " + req.tool + ".";
    }
    return {
      once: "Runs this exact call, one time.",
      session: session,
      always: always + " Revocable: sandbox approvals rules.",
      deny: "Nothing runs. The agent is told your reason.",
      edit: req.is_command ? "Run a changed command instead, once; the policy's refusals still apply."
        : "Run with changed arguments instead, once; they are checked again first.",
    };
  }

  // -- how a request was answered --------------------------------------------------

  function outcomeText(a) {
    if (a.status === "timed_out") return "Expired before anyone answered";
    if (a.status === "cancelled") return "Cancelled (the agent stopped waiting)";
    if (a.status === "error") return "Failed";
    if (a.status === "gone") return "No longer pending";
    const outcome = a.outcome || (a.status === "approved" ? "approve" : a.status === "denied" ? "deny" : a.status === "edited" ? "edit" : a.status);
    if (outcome === "approve") {
      return a.scope === "session" ? "Approved for this session"
        : a.scope === "always" ? "Always approved (rule saved)" : "Approved once";
    }
    if (outcome === "deny") return "Denied";
    if (outcome === "edit") return "Edited";
    return String(outcome || "Answered");
  }

  function showState(entry, answer, final, mine) {
    const card = entry.card;
    const box = card.querySelector(".status");
    clear(box);
    box.hidden = false;
    const outcome = answer.outcome || answer.status;
    card.classList.remove("waiting");
    card.classList.add(final ? "resolved" : "answered");
    card.classList.toggle("st-approve", outcome === "approve" || answer.status === "approved");
    card.classList.toggle("st-deny", outcome === "deny" || answer.status === "denied");
    card.classList.toggle("st-edit", outcome === "edit" || answer.status === "edited");
    card.classList.toggle("st-expired", answer.status === "timed_out" || answer.status === "cancelled" || answer.status === "error");
    const head = el("p", "status-head");
    head.appendChild(el("strong", "", outcomeText(answer)));
    const by = [];
    if (mine || entry.mine) by.push("by you");
    else if (answer.decided_by) by.push("by " + answer.decided_by);
    if (answer.channel) by.push("via " + answer.channel);
    if (by.length) head.appendChild(el("span", "by", " " + by.join(" ")));
    if (answer.at) {
      head.appendChild(document.createTextNode(" · "));
      head.appendChild(clockNode(answer.at * 1000));
    }
    box.appendChild(head);
    if (answer.reason && answer.status !== "timed_out") box.appendChild(el("p", "status-reason", "Reason: " + answer.reason));
    if (!final) box.appendChild(el("p", "status-wait", "Waiting for the agent to apply it."));
    card.querySelectorAll(".actions button, .panel button").forEach(function (b) { b.disabled = true; });
    card.querySelector(".actions").hidden = true;
    card.querySelector(".panel").hidden = true;
    entry.state = final ? "resolved" : "answered";
    if (final) {
      const hide = button("Hide", "hide", "small");
      hide.addEventListener("click", function () { card.remove(); cards.delete(entry.req.id); updateCounts(); });
      box.appendChild(hide);
      pruneResolved();
    }
    updateCounts();
  }

  function pruneResolved() {
    const resolved = [];
    for (const [id, entry] of cards) if (entry.state === "resolved") resolved.push(id);
    while (resolved.length > KEEP_RESOLVED) {
      const id = resolved.shift();
      cards.get(id).card.remove();
      cards.delete(id);
    }
  }

  // -- answering -------------------------------------------------------------------

  async function send(entry, body) {
    const card = entry.card;
    const note = card.querySelector(".note");
    note.textContent = "sending…";
    card.querySelectorAll("button").forEach(function (b) { if (b.dataset.action !== "copy") b.disabled = true; });
    let response, data = {};
    try {
      response = await fetch("/api/requests/" + encodeURIComponent(entry.req.id) + "/answer", {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
        body: JSON.stringify(body),
      });
      data = await response.json().catch(function () { return {}; });
    } catch (err) {
      note.textContent = "Could not reach the server: " + err;
      card.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
      return;
    }
    if (response.ok) {
      note.textContent = "Answered: " + body.outcome +
        (body.scope && body.scope !== "once" ? " (" + body.scope + ")" : "") + ".";
      entry.mine = true;  // the first answer wins: this one is ours
      if (entry.state !== "resolved") showState(entry, data.answer || {outcome: body.outcome, scope: body.scope}, false, true);
    } else if (data.status === "timed_out") {
      note.textContent = "Too late: " + (data.error || "this request expired");
      showState(entry, {status: "timed_out"}, true, false);
    } else {
      note.textContent = "Refused: " + (data.error || response.status);
      if (response.status === 400) {
        card.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
      }
    }
  }

  // The whole request, when the card shows its arguments cut.
  async function full(entry) {
    if (entry.full) return entry.full;
    entry.full = await getJSON("/api/requests/" + encodeURIComponent(entry.req.id) + "/args");
    return entry.full;
  }

  async function withFull(entry, then) {
    const req = entry.req;
    const needs = req.args_truncated || (req.rule_subjects_count && !req.rule_subjects);
    if (!needs) { then(req); return; }
    const note = entry.card.querySelector(".note");
    note.textContent = "loading the full arguments…";
    try {
      const f = await full(entry);
      note.textContent = "";
      then(Object.assign({}, req, {args: f.args, command: f.command, rule_subjects: f.rule_subjects,
                                    rule_subjects_shown: f.rule_subjects_shown}));
    } catch (err) {
      note.textContent = "Could not load the full arguments: " + err.message;
    }
  }

  function panel(card) {
    const p = card.querySelector(".panel");
    clear(p);
    p.hidden = false;
    return p;
  }

  function showDeny(entry) {
    const p = panel(entry.card);
    const label = el("label", "field", "Reason (the agent sees it)");
    const input = el("input", "reason");
    input.type = "text";
    input.maxLength = 2000;
    input.placeholder = "e.g. use the staging copy";
    label.appendChild(input);
    const go = button("Deny", "deny-confirm", "danger");
    go.addEventListener("click", function () { send(entry, {outcome: "deny", reason: input.value}); });
    input.addEventListener("keydown", function (ev) { if (ev.key === "Enter") go.click(); });
    const row = el("div", "row");
    const cancel = button("Cancel", "cancel", "small");
    cancel.addEventListener("click", function () { p.hidden = true; });
    row.append(go, cancel);
    p.append(label, row);
    input.focus();
  }

  function showEdit(entry, req) {
    const p = panel(entry.card);
    const area = el("textarea", "editor");
    area.rows = req.is_command ? 3 : 8;
    area.value = req.is_command ? req.command : JSON.stringify(req.args, null, 2);
    const go = button(req.is_command ? "Run the edited command" : "Run with these arguments",
                      "edit-confirm", "primary");
    go.addEventListener("click", function () {
      if (req.is_command) { send(entry, {outcome: "edit", command: area.value}); return; }
      let args;
      try { args = JSON.parse(area.value); } catch (err) {
        entry.card.querySelector(".note").textContent = "Not JSON: " + err.message;
        return;
      }
      send(entry, {outcome: "edit", args: args});
    });
    p.append(el("p", "help", req.is_command
      ? "Edit the command line. Sending it approves the edited command: the policy's refusals are checked again, then it runs once."
      : "Edit the arguments (JSON). Sending them approves the edited call: they are validated and checked again, then it runs once."), area, go);
  }

  function showRemember(entry, req) {
    const p = panel(entry.card);
    const scope = el("select", "scope");
    [["always", "every session, 30 days"], ["session", "this session only"]].forEach(function (o) {
      const opt = el("option", "", o[1]);
      opt.value = o[0];
      scope.appendChild(opt);
    });
    const scopeLabel = el("label", "field", "Remember for");
    scopeLabel.appendChild(scope);
    p.appendChild(scopeLabel);
    const selects = [];
    let toolWide = null;
    if (req.rule_subjects) {
      p.appendChild(el("p", "help", "A call is approved only when every command in it is covered. " +
        "For each command, keep it exact or keep only its first words:"));
      req.rule_subjects.forEach(function (argv, i) {
        const shownWords = (req.rule_subjects_shown || [])[i] || argv;
        const s = el("select", "prefix");
        for (let n = argv.length; n >= 1; n--) {
          const text = wordsText(shownWords.slice(0, n)) +
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
      const covers = el("label", "field", "Covering");
      covers.appendChild(toolWide);
      p.appendChild(covers);
    }
    const go = button("Save the rule and approve", "remember-confirm", "primary");
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
      send(entry, body);
    });
    p.appendChild(go);
  }

  // -- one card --------------------------------------------------------------------

  function choice(label, action, cls, help, onClick) {
    const box = el("div", "choice " + (cls || ""));
    const b = button(label, action, cls);
    const id = "h-" + Math.random().toString(36).slice(2);
    const p = el("p", "choice-help", help);
    p.id = id;
    b.setAttribute("aria-describedby", id);
    b.addEventListener("click", onClick);
    box.append(b, p);
    return box;
  }

  function argsSection(entry) {
    const req = entry.req;
    const box = el("section", "args");
    box.appendChild(el("div", "label", req.is_command ? "Command" : "Arguments"));
    const pre = el("pre", req.is_command ? "command" : "json");
    pieces(pre, req.args_pieces);
    box.appendChild(pre);
    const foot = el("p", "digest");
    const digest = el("code", "sha", "sha256 " + req.digest.slice(0, 12) + "…");
    digest.title = req.digest;
    if (req.args_truncated) {
      foot.classList.add("cut");
      foot.appendChild(el("span", "", "Cut to fit: " + number(req.args_chars) + " characters in all · "));
      foot.appendChild(digest);
      const all = button("Show all", "expand", "small");
      all.addEventListener("click", async function () {
        all.disabled = true;
        all.textContent = "loading…";
        try {
          const f = await full(entry);
          pieces(pre, f.args_pieces);
          clear(foot);
          foot.classList.remove("cut");
          foot.append(el("span", "", "All " + number(f.args_chars) + " characters · "), digest);
        } catch (err) {
          all.disabled = false;
          all.textContent = "Show all";
          entry.card.querySelector(".note").textContent = "Could not load the arguments: " + err.message;
        }
      });
      foot.appendChild(all);
    } else {
      foot.append(el("span", "", number(req.args_chars) + " characters · "), digest);
    }
    box.appendChild(foot);
    return box;
  }

  function buildCard(req) {
    const card = el("article", "request waiting");
    card.dataset.id = req.id;
    const entry = {card: card, req: req, state: "waiting", full: null};
    if (req.expires_at) card.dataset.expires = String(Date.parse(req.expires_at));

    const head = el("header", "card-head");
    const title = el("div", "title");
    title.append(el("h2", "tool", req.tool), el("span", "badge", KINDS[req.kind] || req.kind));
    head.appendChild(title);
    if (req.expires_at) {
      const exp = el("span", "expiry");
      exp.append(document.createTextNode("expires "), clockNode(Date.parse(req.expires_at), true));
      head.appendChild(exp);
    }
    card.appendChild(head);

    if (req.description && req.description.pieces.length && !(req.what && req.what.pieces.length)) {
      card.appendChild(textBlock("p", "description", req.description));
    }
    if (req.what && req.what.pieces.length) {
      const what = el("p", "what");
      what.append(el("span", "why", "What happens: "), textBlock("span", "", req.what));
      card.appendChild(what);
    }
    if (req.why && req.why.pieces.length) {
      const why = el("p", "hint");
      why.append(el("span", "why", "Why asked: "), textBlock("span", "", req.why));
      card.appendChild(why);
    }

    const meta = el("dl", "meta");
    function row(label, node, cls) {
      const dd = el("dd", cls || "");
      dd.append(node);
      meta.append(el("dt", cls || "", label), dd);
    }
    if (req.session_id) {
      const who = el("span", "idrow");
      who.append(el("span", "", "session"), idLine(req.session_id));
      row("Asked by", who);
    } else {
      row("Asked by", el("span", "", "an agent with no session id"));
    }
    row("Call", idLine(req.call_id));
    row("Request", idLine(req.id));
    row("Asked", clockNode(Date.parse(req.created_at)));
    if (req.expires_at) row("Expires", clockNode(Date.parse(req.expires_at)), "expires-row");
    else row("Expires", el("span", "", "never: waits until answered"), "expires-row");
    if (req.edited_from) row("Edited from", idLine(req.edited_from));
    card.appendChild(meta);

    card.appendChild(argsSection(entry));
    if (req.control_characters > 0) {
      card.appendChild(el("p", "warn", "⚠ " + (req.control_characters_at_least ? "at least " : "") +
        req.control_characters + " control character(s) in the arguments, shown escaped and highlighted"));
    }
    if (req.rule_subjects_shown && req.rule_subjects_shown.length > 1) {
      card.appendChild(el("div", "label", "Parsed commands (each must be approved)"));
      const parsed = el("ul", "parsed");
      req.rule_subjects_shown.forEach(function (argv) { parsed.appendChild(el("li", "", wordsText(argv))); });
      card.appendChild(parsed);
    }
    const details = Object.entries(req.details || {});
    if (details.length) {
      const dl = el("dl", "details");
      details.forEach(function (kv) {
        dl.append(el("dt", "", kv[0]), textBlock("dd", "", kv[1]));
      });
      card.appendChild(dl);
    }

    const m = meanings(req);
    const actions = el("div", "actions");
    actions.append(
      choice("Approve once", "approve", "primary", m.once, function () { send(entry, {outcome: "approve"}); }),
      choice("Approve for this session", "session", "", m.session, function () {
        send(entry, {outcome: "approve", scope: "session"});
      }),
      choice("Always approve…", "remember", "", m.always, function () { withFull(entry, function (r) { showRemember(entry, r); }); }),
      choice("Deny…", "deny", "danger", m.deny, function () { showDeny(entry); }),
      choice("Edit…", "edit", "quiet", req.editable ? m.edit : "Not offered: the arguments " +
        "hold control characters, which an editor would show raw. Deny, and say why.",
        function () { withFull(entry, function (r) { showEdit(entry, r); }); }));
    if (!req.editable) actions.querySelector('button[data-action="edit"]').disabled = true;
    card.appendChild(actions);
    const p = el("div", "panel");
    p.hidden = true;
    card.appendChild(p);
    const status = el("div", "status");
    status.hidden = true;
    status.setAttribute("role", "status");
    card.appendChild(status);
    card.appendChild(el("p", "note", ""));
    cards.set(req.id, entry);
    if (req.answer) showState(entry, req.answer, false, false);
    return card;
  }

  // -- following the server ----------------------------------------------------------

  function updateCounts() {
    let waiting = 0;
    for (const entry of cards.values()) if (entry.state !== "resolved") waiting += 1;
    const total = state.count === null ? waiting : state.count;
    countLine.textContent = total === 1 ? "1 waiting" : total + " waiting";
    empty.hidden = total > 0 || cards.size > 0;
    const beyond = Math.max(0, total - waiting);
    moreBox.hidden = !(state.more && beyond > 0);
    moreText.textContent = beyond + " more waiting after these";
  }

  function addCards(data) {
    // The cards the server rendered into the first response give way to live ones.
    const firstPaint = document.getElementById("first-paint");
    if (firstPaint) firstPaint.remove();
    for (const req of data.requests) {
      if (cards.has(req.id)) continue;
      list.appendChild(buildCard(req));
    }
    if (data.next) state.tail = data.next;
    state.more = data.more;
  }

  // New requests are fetched only after the last one shown, and only when the page
  // shows everything up to now ("Show more" fetches the next page by hand).
  function loadAfterTail(force) {
    if (state.loading) { state.again = true; return state.loading; }
    if (state.more && !force) { updateCounts(); return Promise.resolve(); }
    const url = "/api/pending?limit=" + PAGE + (state.tail ? "&after=" + encodeURIComponent(state.tail) : "");
    state.loading = getJSON(url).then(function (data) {
      addCards(data);
      live.textContent = "live";
    }, function (err) {
      live.textContent = err.status === 401 ? "not signed in: open the URL with the token again" : "could not list: " + err.message;
    }).then(function () {
      state.loading = null;
      updateCounts();
      if (state.again) { state.again = false; return loadAfterTail(false); }
    });
    return state.loading;
  }

  function onAnswered(data) {
    const entry = cards.get(data.id);
    if (entry && entry.state === "waiting") showState(entry, data, false, false);
    else if (entry && entry.state === "answered") showState(entry, data, false, false);
  }

  function onResolved(data) {
    const entry = cards.get(data.id);
    if (entry && entry.state !== "resolved") showState(entry, data, true, false);
    // Keep a screenful waiting: fetch the next page when most shown ones are answered.
    let waiting = 0;
    for (const e of cards.values()) if (e.state === "waiting") waiting += 1;
    if (state.more && waiting < PAGE / 2) loadAfterTail(true);
  }

  function handle(kind, data) {
    if (!state.ready) { state.queued.push([kind, data]); return; }
    if (kind === "pending") {
      state.count = data.count;
      if (data.added > 0) loadAfterTail(false).then(function () { fetchMissing(data.ids || []); });
      else updateCounts();
    } else if (kind === "answered") onAnswered(data);
    else if (kind === "resolved") onResolved(data);
  }

  // A request parked by a slower process can sort before the last card shown, so paging
  // after that card misses it: fetch any announced id still absent, one by one.
  async function fetchMissing(ids) {
    if (state.more) return;
    for (const id of ids) {
      if (cards.has(id)) continue;
      try {
        const r = await getJSON("/api/requests/" + encodeURIComponent(id));
        if (r.status === "pending" && !cards.has(id)) list.appendChild(buildCard(r));
      } catch (err) { /* gone already */ }
    }
    updateCounts();
  }

  // After a reconnect, events were missed: look again at what the page shows.
  async function resync() {
    const waiting = [];
    for (const [id, entry] of cards) if (entry.state !== "resolved") waiting.push(id);
    for (const id of waiting) {
      try {
        const r = await getJSON("/api/requests/" + encodeURIComponent(id));
        if (r.status !== "pending") onResolved(Object.assign({id: id}, r.decision || {status: r.status}));
        else if (r.answer) onAnswered(Object.assign({id: id}, r.answer));
      } catch (err) { /* shown on the next event */ }
    }
    await loadAfterTail(false);
  }

  function connect() {
    const source = new EventSource("/api/events");
    source.addEventListener("hello", async function (ev) {
      const data = JSON.parse(ev.data);
      state.count = data.count;
      live.textContent = "live";
      live.classList.add("on");
      if (!state.connected) {
        state.connected = true;
        await loadAfterTail(true);
      } else {
        state.ready = false;
        await resync();
      }
      state.ready = true;
      const queued = state.queued;
      state.queued = [];
      queued.forEach(function (q) { handle(q[0], q[1]); });
      updateCounts();
    });
    ["pending", "answered", "resolved"].forEach(function (kind) {
      source.addEventListener(kind, function (ev) { handle(kind, JSON.parse(ev.data)); });
    });
    source.addEventListener("error", function () {
      live.classList.remove("on");
      if (source.readyState === EventSource.CLOSED) {
        live.textContent = "disconnected";
        getJSON("/api/pending?limit=1").then(function () {
          setTimeout(connect, 2000);
        }, function (err) {
          live.textContent = err.status === 401 ? "not signed in: open the URL with the token again"
            : "server unreachable; retrying";
          if (err.status !== 401) setTimeout(connect, 5000);
        });
      } else {
        live.textContent = "reconnecting…";
      }
    });
  }

  moreButton.addEventListener("click", function () { loadAfterTail(true); });
  setInterval(tickClocks, 15000);
  connect();
})();
