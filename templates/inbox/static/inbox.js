// The operator inbox, live: cards come and go with the tenant's event stream (resumed with
// Last-Event-ID after a drop), countdowns tick, the title and favicon carry the pending count,
// j/k/Enter/Esc move around, and opt-in notifications say only "A question is waiting".
// Nothing is kept in localStorage or sessionStorage; every page also works without this file.
"use strict";
(function () {
  var list = document.getElementById("cards");
  var back = document.getElementById("back");

  // -- keyboard: j/k move between cards, Enter opens (links do that already), Esc goes back.
  document.addEventListener("keydown", function (e) {
    var tag = (e.target && e.target.tagName) || "";
    if (/^(INPUT|TEXTAREA|SELECT)$/.test(tag) || e.altKey || e.ctrlKey || e.metaKey) { return; }
    if (e.key === "Escape" && back) { window.location.href = back.getAttribute("href"); return; }
    if (!list || (e.key !== "j" && e.key !== "k")) { return; }
    var links = Array.prototype.slice.call(list.querySelectorAll("a.open"));
    if (!links.length) { return; }
    var at = links.indexOf(document.activeElement);
    var next = e.key === "j" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
    if (at < 0) { next = 0; }
    links[next].focus();
    e.preventDefault();
  });

  if (!list) { return; }
  var counter = document.getElementById("pending-count");
  var empty = document.getElementById("empty");
  var live = document.getElementById("live");
  var favicon = document.getElementById("favicon");
  var baseTitle = document.title.replace(/^\(\d+\)\s*/, "");

  function cards() { return list.querySelectorAll("li.card"); }

  function refresh() {
    var n = cards().length;
    counter.textContent = String(n);
    empty.hidden = n > 0;
    document.title = (n ? "(" + n + ") " : "") + baseTitle;
    favicon.setAttribute("href", "/inbox/favicon/" + n + ".svg");
  }

  function timeLeft(total) {
    var d = Math.floor(total / 86400), h = Math.floor(total % 86400 / 3600);
    var m = Math.floor(total % 3600 / 60), s = total % 60;
    if (d) { return d + " d " + h + " h"; }
    if (h) { return h + " h " + m + " min"; }
    if (m) { return m + " min " + s + " s"; }
    return s + " s";
  }

  function startClock(card) {
    var deadline = Date.now() + Number(card.getAttribute("data-seconds-left")) * 1000;
    var out = card.querySelector(".count");
    var tick = function () {
      if (!card.isConnected) { return; }
      var left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      out.textContent = left > 0 ? timeLeft(left) : "none";
      if (left > 0) { setTimeout(tick, (deadline - Date.now()) % 1000 + 5); }
    };
    tick();
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  // The same markup as templates/inbox/_card.html, built with textContent only (never HTML).
  function build(c) {
    var li = el("li", "card");
    li.setAttribute("data-id", c.id);
    li.setAttribute("data-seconds-left", String(c.seconds_left));
    var a = el("a", "open");
    a.href = c.href;
    a.appendChild(el("span", "q", c.question));
    li.appendChild(a);
    var facts = el("p", "facts");
    facts.appendChild(el("span", "asker", c.asker));
    if (c.run_id) { facts.appendChild(document.createTextNode(" ")); facts.appendChild(el("span", "run", "run " + c.run_id)); }
    if (c.kind === "approval") { facts.appendChild(document.createTextNode(" ")); facts.appendChild(el("span", "tag approval", "approval")); }
    if (c.sensitive) { facts.appendChild(document.createTextNode(" ")); facts.appendChild(el("span", "tag sensitive", "sensitive")); }
    var left = el("span", "left", "Time left: ");
    left.setAttribute("role", "timer");
    left.appendChild(el("span", "count", ""));
    facts.appendChild(document.createTextNode(" "));
    facts.appendChild(left);
    li.appendChild(facts);
    if (c.tally) { li.appendChild(el("p", "tally", c.tally)); }
    var ul = el("ul", "deliveries");
    ul.setAttribute("aria-label", "Channels");
    c.channels.forEach(function (ch) {
      var states = c.deliveries.filter(function (d) { return d.channel === ch; }).map(function (d) { return d.status; });
      ul.appendChild(el("li", "", ch + (states.length ? ": " + states.join(", ") : "")));
    });
    li.appendChild(ul);
    return li;
  }

  function find(id) {
    var all = cards();
    for (var i = 0; i < all.length; i++) { if (all[i].getAttribute("data-id") === id) { return all[i]; } }
    return null;
  }

  // -- notifications: opt-in, and generic: never the question, never an answer.
  var notifyButton = document.getElementById("notify");
  var canNotify = "Notification" in window;
  if (canNotify && Notification.permission === "default") {
    notifyButton.hidden = false;
    notifyButton.addEventListener("click", function () {
      Notification.requestPermission().then(function () { notifyButton.hidden = true; });
    });
  }
  function notify() {
    if (canNotify && Notification.permission === "granted" && document.visibilityState !== "visible") {
      new Notification("A question is waiting", {tag: "handraise-inbox"});
    }
  }

  function added(c) {
    if (c.status !== "pending" || find(c.id)) { return; }
    var card = build(c);
    list.insertBefore(card, list.firstChild);
    startClock(card);
    refresh();
    live.textContent = "A new question is waiting.";
    notify();
  }

  function removed(id) {
    var card = find(id);
    if (!card) { return; }
    var focused = card.contains(document.activeElement);
    card.remove();
    refresh();
    live.textContent = "A question was closed.";
    if (focused) { document.getElementById("content").focus(); }
  }

  Array.prototype.forEach.call(cards(), startClock);

  // The stream starts after the list's own read (data-after). While the connection lives the
  // browser resends the last id it saw as Last-Event-ID on each of its own reconnects; when it
  // gives up (the server went away), we open a new one after that same id. Either way the
  // server first replays what was recorded meanwhile: nothing is missed.
  var lastId = list.getAttribute("data-after");
  var stream = null;
  var retry = 1000;
  function track(e) { if (e.lastEventId) { lastId = e.lastEventId; } }
  function connect() {
    stream = new EventSource(list.getAttribute("data-events") + "?after=" + encodeURIComponent(lastId));
    function arrived(e) {
      track(e);
      var data = JSON.parse(e.data);
      if (data.status !== "pending" || find(data.id)) { return; }
      // The event carries the request; the card wants its asker's name and deliveries too.
      fetch("/inbox/api/requests/" + encodeURIComponent(data.id), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (c) { if (c && c.may_answer !== false) { added(c); } });
    }
    stream.addEventListener("request.created", arrived);
    // An escalation step reached: the request may now be this person's to answer too.
    stream.addEventListener("request.scheduled", arrived);
    stream.addEventListener("request.resolved", function (e) { track(e); removed(JSON.parse(e.data).id); });
    // A vote on a quorum request: its card shows the new tally.
    stream.addEventListener("request.voted", function (e) {
      track(e);
      var data = JSON.parse(e.data);
      var card = find(data.id);
      if (data.status !== "pending" || !card) { return; }
      fetch("/inbox/api/requests/" + encodeURIComponent(data.id), {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (c) {
          if (!c || !c.tally) { return; }
          var line = card.querySelector(".tally");
          if (!line) { line = el("p", "tally"); card.insertBefore(line, card.querySelector(".deliveries")); }
          line.textContent = c.tally;
        });
    });
    stream.addEventListener("open", function () { retry = 1000; });
    stream.addEventListener("error", function () {
      if (stream.readyState === EventSource.CLOSED) {
        setTimeout(connect, retry);
        retry = Math.min(retry * 2, 30000);
      }
    });
  }
  connect();
  // For tests and the curious: the live stream, and a way to drop it and come back.
  window.handraiseInbox = {
    drop: function () { stream.close(); },
    resume: function () { stream.close(); connect(); },
    lastId: function () { return lastId; }
  };
})();
