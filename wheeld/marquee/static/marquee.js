// The marquee page: render each board snapshot pushed by the server.
// EventSource reconnects by itself when the server restarts.
"use strict";

function text(id, value) { document.getElementById(id).textContent = value; }

function chip(number, color, tag) {
  const el = document.createElement(tag);
  el.textContent = number;
  el.className = color;
  return el;
}

function render(state) {
  const labels = state.labels || {};
  document.documentElement.lang = labels.bets_open === "PLACE YOUR BETS" ? "en" : "es";
  text("table-name", state.table ? state.table.name || "" : "");
  text("limits", state.table && state.table.limits ? `${labels.limits}: ${state.table.limits}` : "");

  const last = document.getElementById("last");
  last.textContent = state.last ? state.last.number : "";
  last.className = "last " + (state.last ? state.last.color : "green");

  const phase = document.getElementById("phase");
  const phaseKey = state.closed ? "closed" : state.phase;
  phase.textContent = labels[phaseKey] || "";
  phase.className = "phase " + phaseKey;

  const banner = document.getElementById("no-spin");
  banner.hidden = !state.no_spin;
  text("no-spin-title", labels.no_spin || "");
  text("no-spin-reason", state.no_spin ? state.no_spin.text : "");

  text("history-title", labels.last_numbers || "");
  const history = document.getElementById("history");
  history.replaceChildren(...(state.history || []).map((n) => {
    const li = chip(n.number, n.color, "li");
    li.dataset.testid = "history-number";
    return li;
  }));

  const stats = state.stats || {};
  for (const key of ["red", "black", "green", "odd", "even", "hot", "cold", "dozens"]) {
    text("label-" + key, labels[key] || key);
  }
  for (const key of ["red", "black", "green", "odd", "even"]) {
    text("pct-" + key, stats.games ? `${stats[key]}%` : "–");
  }
  text("pct-dozens", stats.games ? stats.dozens.map((d) => `${d}%`).join(" · ") : "–");
  for (const key of ["hot", "cold"]) {
    document.getElementById(key).replaceChildren(
      ...(stats[key] || []).map((n) => chip(n.number, n.color, "span")));
  }
  text("games", stats.games ? `${stats.games} ${labels.games}` : "");

  const offline = document.getElementById("offline");
  offline.hidden = state.online !== false;
  offline.textContent = labels.offline || "";
}

function connect() {
  const source = new EventSource("events");
  source.onmessage = (event) => render(JSON.parse(event.data));
}

// The event stream starts with the whole current board, so no separate fetch
// (which could land after a newer event and paint an older board).
connect();
