// Progressive enhancement of the hosted form; every part of it also works without this file.
"use strict";
(function () {
  var countdown = document.getElementById("countdown");
  if (countdown) {
    // The server's wording (time_left_text), in the page's language: "{m} min {s} s".
    var formats = {};
    ["d", "h", "m", "s", "zero"].forEach(function (unit) {
      formats[unit] = countdown.getAttribute("data-format-" + unit) || "";
    });
    var format = function (total) {
      var parts = {d: Math.floor(total / 86400), h: Math.floor(total % 86400 / 3600),
                   m: Math.floor(total % 3600 / 60), s: total % 60};
      var unit = parts.d ? "d" : parts.h ? "h" : parts.m ? "m" : "s";
      return formats[unit].replace(/\{([dhms])\}/g, function (_, k) { return String(parts[k]); });
    };
    // Count from the server's "seconds left", not its clock: the two clocks may disagree.
    var deadline = Date.now() + Number(countdown.getAttribute("data-seconds-left")) * 1000;
    var tick = function () {
      var left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      countdown.textContent = left > 0 ? format(left) : formats.zero;
      // Wake just after the next whole second of the remaining time.
      if (left > 0) { setTimeout(tick, (deadline - Date.now()) % 1000 + 5); }
    };
    tick();
  }

  // Moments are written in the tenant's zone; show them in the reader's own.
  var lang = document.documentElement.lang || undefined;
  document.querySelectorAll("time[data-local]").forEach(function (node) {
    var when = new Date(node.getAttribute("datetime"));
    if (isNaN(when.getTime())) { return; }
    try {
      node.textContent = new Intl.DateTimeFormat(lang, {dateStyle: "medium", timeStyle: "short"}).format(when);
      node.title = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) { /* an old browser keeps the server's text */ }
  });

  // A one-time code pasted as "123 456" or "123-456": keep the digits (the server does the same).
  document.querySelectorAll("input[data-code-length]").forEach(function (input) {
    input.addEventListener("input", function () {
      var digits = input.value.replace(/[\s.\-\u2010-\u2015]+/g, "");
      if (digits !== input.value && /^[0-9]*$/.test(digits)) { input.value = digits; }
    });
  });

  // A datetime-local input sends a wall-clock time; say which zone it is in.
  var zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
  document.querySelectorAll("[data-tz-hint]").forEach(function (hint) {
    hint.textContent = hint.getAttribute("data-tz-hint") + (zone ? " (" + zone + ")" : "");
  });
  var form = document.querySelector("form[data-answer]");
  if (form) {
    // A page restored from the back/forward cache may be sent again (the server says if it is too late).
    window.addEventListener("pageshow", function () { form.removeAttribute("data-sent"); });
    form.addEventListener("submit", function (event) {
      // A double click would send twice; the second would win the page and show "link used"
      // although the first was accepted. (Disabling the button would drop its Approve/Reject value.)
      if (form.getAttribute("data-sent")) { event.preventDefault(); return; }
      form.setAttribute("data-sent", "1");
      document.querySelectorAll("input[data-offset-for]").forEach(function (hidden) {
        var input = document.getElementById(hidden.getAttribute("data-offset-for"));
        if (!input || !input.value) { return; }
        var when = new Date(input.value);  // no zone in the string: read as local time
        if (!isNaN(when.getTime())) { hidden.value = String(-when.getTimezoneOffset()); }
      });
    });
  }
})();
