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
    var checker = answerChecks(form);
    // A page restored from the back/forward cache may be sent again (the server says if it is too late).
    window.addEventListener("pageshow", function () { form.removeAttribute("data-sent"); });
    form.addEventListener("submit", function (event) {
      // A double click would send twice; the second would win the page and show "link used"
      // although the first was accepted. (Disabling the button would drop its Approve/Reject value.)
      if (form.getAttribute("data-sent")) { event.preventDefault(); return; }
      if (!checker.all()) { event.preventDefault(); return; }
      form.setAttribute("data-sent", "1");
      document.querySelectorAll("input[data-offset-for]").forEach(function (hidden) {
        var input = document.getElementById(hidden.getAttribute("data-offset-for"));
        if (!input || !input.value) { return; }
        var when = new Date(input.value);  // no zone in the string: read as local time
        if (!isNaN(when.getTime())) { hidden.value = String(-when.getTimezoneOffset()); }
      });
    });
  }

  // Checks as the person goes, in the server's own words: each field carries its bounds and the
  // server's sentence for breaking each (data-msg-*, from core's messages), checked in the order
  // the server picks one problem per field (messages.PRIORITY). The browser's own bubbles stay
  // off; without this script the form is exactly the server-checked form it always was.
  function answerChecks(form) {
    form.noValidate = true;
    var boxes = Array.prototype.slice.call(form.querySelectorAll("[data-field][data-kind]"));
    var summary = document.getElementById("errors");
    var headings = [];
    try { headings = JSON.parse(summary.getAttribute("data-headings") || "[]"); } catch (e) { headings = []; }
    var EMAIL_LOCAL = /^[^@\s"(),:;<>[\\\]]{1,64}$/;
    var EMAIL_LABEL = /^[\p{L}\p{N}](?:[\p{L}\p{N}\p{M}_-]{0,61}[\p{L}\p{N}\p{M}])?$/u;
    var FORMATS = {
      date: /^\d{4}-\d{2}-\d{2}$/,
      time: /^([01]\d|2[0-3]):[0-5]\d(:([0-5]\d|60)(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?$/,
      "date-time": /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/
    };

    function controls(box) {
      return Array.prototype.slice.call(box.querySelectorAll("input:not([type=hidden]), select, textarea"));
    }
    function isEmail(value) {
      var at = value.lastIndexOf("@");
      if (at < 1) { return false; }
      var local = value.slice(0, at), domain = value.slice(at + 1);
      if (!EMAIL_LOCAL.test(local) || local[0] === "." || local[local.length - 1] === "." ||
          local.indexOf("..") >= 0 || domain.length > 253) { return false; }
      var labels = domain.split(".");
      return labels.length >= 2 && labels.every(function (l) { return EMAIL_LABEL.test(l); }) &&
        !/^\d+$/.test(labels[labels.length - 1]);
    }
    function isUri(value) {
      var url;
      try { url = new URL(value); } catch (e) { return false; }
      var scheme = url.protocol.replace(/:$/, "").toLowerCase();
      if (["javascript", "data", "vbscript"].indexOf(scheme) >= 0) { return false; }
      return ["http", "https", "ftp", "ftps", "ws", "wss"].indexOf(scheme) < 0 || Boolean(url.hostname);
    }
    function formatOk(kind, control, input, value) {
      if (kind === "email") { return isEmail(value); }
      if (kind === "uri") { return isUri(value); }
      // A browser's date and time pickers only ever hold a whole, valid value.
      if (["date", "time", "datetime-local"].indexOf(input.type) >= 0) { return !input.validity.badInput; }
      var shape = FORMATS[kind];
      if (!shape || !shape.test(value)) { return false; }
      return kind === "time" || !isNaN(Date.parse(kind === "date" ? value + "T00:00:00Z" : value));
    }
    function length(value) { return Array.from(value).length; }

    // The first problem of a field, as the server would word it, or "" when it has none.
    function problemOf(box) {
      var d = box.dataset, kind = d.kind, control = d.control, inputs = controls(box);
      if (!inputs.length || control === "checkbox") { return ""; }
      var required = Boolean(box.querySelector("[required]"));
      if (control === "radio" || control === "yes_no" || control === "select") {
        var chosen = control === "select" ? inputs[0].value : inputs.filter(function (i) { return i.checked; }).length;
        return !chosen && required ? d.msgRequired || "" : "";
      }
      if (control === "checkboxes") {
        var ticked = inputs.filter(function (i) { return i.checked; }).length;
        if (!ticked && !required) { return ""; }
        if (d.minitems && ticked < Number(d.minitems)) { return d.msgMinitems || ""; }
        if (d.maxitems && ticked > Number(d.maxitems)) { return d.msgMaxitems || ""; }
        return "";
      }
      if (control === "date_range") {
        var start = inputs[0].value, end = inputs[1].value;
        if (!start && !end) { return required ? d.msgRequired || "" : ""; }
        if (!start || !end) { return d.msgMinitems || ""; }
        return start > end ? d["msgDate_order"] || "" : "";
      }
      var input = inputs[0];
      var value = kind === "password" ? input.value : input.value.trim();
      if (control === "code") { value = value.replace(/[\s.\-\u2010-\u2015]+/g, ""); }
      if (!value.trim()) { return required ? d.msgRequired || "" : ""; }
      if (kind === "integer" || kind === "number") {
        var number = Number(value);
        if (!isFinite(number) || (kind === "integer" && !Number.isInteger(number))) { return d.msgType || ""; }
        var bounds = [["minimum", function (b) { return number < b; }],
                      ["exclusiveminimum", function (b) { return number <= b; }],
                      ["maximum", function (b) { return number > b; }],
                      ["exclusivemaximum", function (b) { return number >= b; }],
                      ["multipleof", function (b) { var q = number / b; return Math.abs(q - Math.round(q)) > 1e-9; }]];
        for (var i = 0; i < bounds.length; i++) {
          var key = bounds[i][0], bound = d[key];
          if (bound !== undefined && bounds[i][1](Number(bound))) {
            return d["msg" + key.charAt(0).toUpperCase() + key.slice(1)] || "";
          }
        }
        return "";
      }
      if (d.msgFormat && !formatOk(kind, control, input, value)) { return d.msgFormat; }
      if (d.msgPattern && input.validity.patternMismatch) { return d.msgPattern; }
      if (d.minlength && length(value) < Number(d.minlength)) { return d.msgMinlength || ""; }
      if (d.maxlength && length(value) > Number(d.maxlength)) { return d.msgMaxlength || ""; }
      return "";
    }

    // Show (or clear) a field's message exactly where and how the server puts it.
    function show(box, message) {
      var inputs = controls(box);
      var base = box.dataset.target.replace(/-0$/, "");
      var errorId = base + "-error";
      var note = document.getElementById(errorId);
      if (message) {
        if (!note) {
          note = document.createElement("p");
          note.className = "error";
          note.id = errorId;
          var notes = box.querySelectorAll(":scope > .help, :scope > .hint");
          var after = notes.length ? notes[notes.length - 1] : box.querySelector(":scope > label, :scope > legend");
          after.insertAdjacentElement("afterend", note);
        }
        note.textContent = message;
      } else if (note) {
        note.remove();
      }
      box.classList.toggle("invalid", Boolean(message));
      inputs.forEach(function (input) {
        var ids = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter(function (id) {
          return id && id !== errorId;
        });
        if (message) { ids.push(errorId); input.setAttribute("aria-invalid", "true"); }
        else { input.removeAttribute("aria-invalid"); }
        if (ids.length) { input.setAttribute("aria-describedby", ids.join(" ")); }
        else { input.removeAttribute("aria-describedby"); }
      });
    }

    function summarise(found) {
      var list = summary.querySelector("ul");
      list.textContent = "";
      found.forEach(function (item) {
        var entry = document.createElement("li"), link = document.createElement("a");
        link.href = "#" + item.box.dataset.target;
        link.textContent = item.box.dataset.label + ": " + item.message;
        entry.appendChild(link);
        list.appendChild(entry);
      });
      summary.querySelector("h2").textContent = found.length ? headings[found.length - 1] || "" : "";
      summary.hidden = !found.length;
    }

    function check(boxesToCheck) {
      return boxesToCheck.map(function (box) {
        var message = problemOf(box);
        show(box, message);
        return {box: box, message: message};
      }).filter(function (item) { return item.message; });
    }

    var touched = [];
    boxes.forEach(function (box) {
      box.addEventListener("input", function () {
        if (touched.indexOf(box) < 0) { touched.push(box); }
        // Once a field shows a problem, it clears the moment the answer is right.
        if (box.classList.contains("invalid")) { check([box]); if (!summary.hidden) { summarise(check(boxes)); } }
      });
      box.addEventListener("change", function () { if (touched.indexOf(box) < 0) { touched.push(box); } });
      box.addEventListener("focusout", function (event) {
        // Leaving the field (not moving between its own options) after typing in it. Not towards a
        // send button: sending checks everything, and a message appearing now would move the button
        // away from under the pointer between press and release, and the click would be lost.
        var next = event.relatedTarget;
        if ((next && (box.contains(next) || (next.type === "submit" && form.contains(next)))) ||
            (touched.indexOf(box) < 0 && !box.classList.contains("invalid"))) {
          return;
        }
        check([box]);
        if (!summary.hidden) { summarise(check(boxes)); }
      });
    });

    return {
      all: function () {
        var found = check(boxes);
        summarise(found);
        if (found.length) { document.getElementById(found[0].box.dataset.target).focus(); }
        return !found.length;
      }
    };
  }
})();
