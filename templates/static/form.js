// Progressive enhancement of the hosted form; every part of it also works without this file.
"use strict";
(function () {
  // Same wording as the server's time_left_text().
  function format(total) {
    var d = Math.floor(total / 86400), h = Math.floor(total % 86400 / 3600);
    var m = Math.floor(total % 3600 / 60), s = total % 60;
    if (d) { return d + " d " + h + " h"; }
    if (h) { return h + " h " + m + " min"; }
    if (m) { return m + " min " + s + " s"; }
    return s + " s";
  }

  var countdown = document.getElementById("countdown");
  if (countdown) {
    // Count from the server's "seconds left", not its clock: the two clocks may disagree.
    var deadline = Date.now() + Number(countdown.getAttribute("data-seconds-left")) * 1000;
    var tick = function () {
      var left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      countdown.textContent = left > 0 ? format(left) : "none, the time is up";
      // Wake just after the next whole second of the remaining time.
      if (left > 0) { setTimeout(tick, (deadline - Date.now()) % 1000 + 5); }
    };
    tick();
  }

  // A datetime-local input sends a wall-clock time; say which zone it is in.
  var zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
  document.querySelectorAll("[data-tz-hint]").forEach(function (hint) {
    hint.textContent = "Your local time" + (zone ? " (" + zone + ")" : "");
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
