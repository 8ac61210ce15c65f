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

// The strip of last numbers, newest on top (the lanes are the CSS's). Its
// rows keep a readable height, so on a small screen a long history cannot
// fit: the oldest numbers that do not fit whole are left out, never cut.
function renderStrip(state) {
  const history = document.getElementById("history");
  history.style.setProperty("--slots", Math.max(1, state.history_shown || 18));
  history.replaceChildren(...(state.history || []).map((n) => {
    const li = chip(n.number, n.color, "li");
    li.dataset.testid = "history-number";
    return li;
  }));
  const bottom = history.getBoundingClientRect().bottom;
  while (history.lastElementChild
         && history.lastElementChild.getBoundingClientRect().bottom > bottom + 0.5) {
    history.lastElementChild.remove();
  }
}

// The latest board: a new screen size lays the strip out again from it.
let latest = null;
new ResizeObserver(() => { if (latest) renderStrip(latest); })
  .observe(document.getElementById("history"));

function render(state) {
  latest = state;
  const labels = state.labels || {};
  document.documentElement.lang = labels.bets_open === "PLACE YOUR BETS" ? "en" : "es";
  text("table-name", state.table ? state.table.name || "" : "");
  // The id, for staff, in a corner of every screen (offline and closed included).
  text("table-id", state.table && state.table.id ? `${labels.table || ""} ${state.table.id}`.trim() : "");
  text("limits", state.table && state.table.limits ? `${labels.limits}: ${state.table.limits}` : "");

  const last = document.getElementById("last");
  last.textContent = state.last ? state.last.number : "";
  last.className = "last " + (state.last ? state.last.color : "green");

  // Only a daemon heard online makes the board current: until then (never
  // connected, status not yet said, last will) it is offline, so it can
  // never invite bets on its own.
  const online = state.online === true;
  const phase = document.getElementById("phase");
  const phaseKey = !online ? "offline" : state.closed ? "closed" : state.phase;
  phase.textContent = labels[phaseKey] || "";
  phase.className = "phase " + phaseKey;

  // A closed table covers the whole screen; the no-spin banner sits under
  // the last number, never over it, and never over the closed screen.
  const closed = document.getElementById("closed");
  closed.hidden = !(online && state.closed);
  text("closed-title", labels.closed || "");
  // "anunciar las tres (3) últimas lanzadas": what <base>/table said with the close.
  const closedNumbers = state.closed_numbers || [];
  document.getElementById("closed-last").hidden = closedNumbers.length === 0;
  text("closed-label", labels.closed_last || "");
  document.getElementById("closed-numbers").replaceChildren(
    ...closedNumbers.map((n) => chip(n.number, n.color, "li")));

  const banner = document.getElementById("no-spin");
  banner.hidden = !state.no_spin || state.closed;
  document.querySelector(".winner").classList.toggle("with-no-spin", !banner.hidden);
  text("no-spin-title", labels.no_spin || "");
  text("no-spin-reason", state.no_spin ? state.no_spin.text : "");

  text("history-title", labels.last_numbers || "");
  renderStrip(state);

  const stats = state.stats || {};
  for (const key of ["red", "black", "green", "odd", "even", "hot", "cold", "dozens"]) {
    text("label-" + key, labels[key] || key);
  }
  // Low and high read "1–18" and "19–36" on every board, in any language.
  text("label-columns", labels.columns || "2:1");
  for (const key of ["red", "black", "green", "odd", "even", "low", "high"]) {
    text("pct-" + key, stats.games ? `${stats[key]}%` : "–");
  }
  for (const key of ["dozens", "columns"]) {
    text("pct-" + key, stats.games ? stats[key].map((d) => `${d}%`).join(" · ") : "–");
  }
  for (const key of ["hot", "cold"]) {
    document.getElementById(key).replaceChildren(...(stats[key] || []).map((n) => {
      const el = chip(n.number, n.color, "span");
      el.title = `×${n.count}`;
      const count = document.createElement("sub");
      count.textContent = n.count;
      el.append(count);
      return el;
    }));
  }
  // Hot and cold wait for a minimum sample: say for how many games.
  const heatAfter = document.getElementById("heat-after");
  heatAfter.hidden = !stats.heat_after;
  heatAfter.textContent = !stats.heat_after ? ""
    : labels.stats_after ? labels.stats_after.replace("{n}", stats.heat_after)
    : `${stats.games} / ${stats.heat_after} ${labels.games || ""}`;
  text("games", stats.games ? `${stats.games} ${labels.games}` : "");

  const offline = document.getElementById("offline");
  offline.hidden = online;
  offline.textContent = labels.offline || "";
}

// Without the server the board is not current: say so rather than show a
// stale number. EventSource retries by itself after a dropped stream, but
// gives up for good on an error status (503 when the server is full), so
// that case starts a new one after a pause.
const RETRY_MS = 5000;

function showOffline() {
  document.getElementById("offline").hidden = false;
}

function connect() {
  const source = new EventSource("events");
  source.onmessage = (event) => {
    try {
      render(JSON.parse(event.data));
    } catch (error) {
      console.error("marquee: bad board snapshot", error);
    }
  };
  source.onerror = () => {
    showOffline();
    if (source.readyState === EventSource.CLOSED) {
      setTimeout(connect, RETRY_MS);
    }
  };
}

// The event stream starts with the whole current board, so no separate fetch
// (which could land after a newer event and paint an older board).
connect();
