// The harnessd console's one script. Every page reads and works without it; it
// only keeps the live sections current. It follows the audit log's stream
// (GET /v1/events?follow=1, newline-delimited JSON) and, when an event arrives,
// fetches the page again from the server and swaps in the sections marked
// data-live. Event text is never put into the page: the only HTML inserted is the
// server's own rendering, parsed with DOMParser (which runs no script).
(function () {
  "use strict";

  var live = document.querySelectorAll("[data-live]");
  if (live.length === 0 || !window.fetch || !window.DOMParser) {
    return;
  }
  var source = null;
  for (var i = 0; i < live.length; i++) {
    if (live[i].dataset.follow) {
      source = live[i].dataset.follow;
      break;
    }
  }
  if (!source) {
    return;
  }

  var refreshing = false;
  var again = false;
  var timer = null;

  // What the reader typed or where the focus was survives a swap: fields are
  // matched by id.
  function carryOver(from, to) {
    var fields = from.querySelectorAll("textarea[id], input[id]:not([type=hidden]), select[id]");
    for (var i = 0; i < fields.length; i++) {
      var twin = to.querySelector("#" + CSS.escape(fields[i].id));
      if (!twin) continue;
      if (fields[i].type === "checkbox") twin.checked = fields[i].checked;
      else twin.value = fields[i].value;
    }
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var focused = document.activeElement && document.activeElement.id;
    var sections = document.querySelectorAll("[data-live]");
    for (var i = 0; i < sections.length; i++) {
      var old = sections[i];
      var fresh = old.id && doc.getElementById(old.id);
      if (!fresh) continue;
      var node = document.importNode(fresh, true);
      carryOver(old, node);
      old.replaceWith(node);
    }
    if (focused) {
      var back = document.getElementById(focused);
      if (back) back.focus();
    }
  }

  function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("status " + r.status);
        return r.text();
      })
      .then(swap)
      .catch(function () {})
      .then(function () {
        refreshing = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  // Several events in a burst make one fetch (each renders the page again, which
  // may read the log: a busy task must not make it read without pause).
  function soon() {
    if (timer) return;
    timer = setTimeout(function () {
      timer = null;
      refresh();
    }, 300);
  }

  function onLine(text) {
    if (!text) return;
    var ev;
    try {
      ev = JSON.parse(text);
    } catch (e) {
      return;
    }
    if (ev && typeof ev.type === "string" && ev.type !== "text_delta") soon();
  }

  var delay = 1000;
  function follow() {
    fetch(source, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok || !r.body) throw new Error("status " + r.status);
        document.body.dataset.stream = "open";
        delay = 1000;
        var reader = r.body.getReader();
        var decoder = new TextDecoder();
        var rest = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) return;
            rest += decoder.decode(chunk.value, { stream: true });
            var lines = rest.split("\n");
            rest = lines.pop();
            lines.forEach(onLine);
            return pump();
          });
        }
        return pump();
      })
      .catch(function () {})
      .then(function () {
        // The stream ended (the daemon restarted, the network dropped): what
        // was missed is caught up by rendering the page again, then the stream
        // is followed anew.
        document.body.dataset.stream = "closed";
        setTimeout(function () {
          refresh();
          follow();
        }, delay);
        delay = Math.min(delay * 2, 30000);
      });
  }

  follow();
})();
