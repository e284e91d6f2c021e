/* Headgate console: the schedule list — spec in words, next five fire times in the viewer's
   zone and in UTC, newest events with their outcomes, paused or parked state — kept live. */
(function () {
  "use strict";

  var h = window.HGLive.h;  // an element with attributes and children (live.js)

  var OUTCOME = { enqueued: "completed", deduplicated: "scheduled", failed: "archived", skipped: "cancelled",
    parked: "quarantined" };

  function times(when) {
    if (!when) {
      return ["—"];
    }
    return [h("time", { datetime: when.iso }, [when.local]), h("br"), h("small", {}, [when.utc])];
  }

  function row(s) {
    var flags = [];
    if (s.paused) {
      flags.push(h("span", { "class": "hg-flag hg-paused", "data-flag": "paused" }, ["paused"]));
    }
    if (s.declared) {
      flags.push(h("span", { "class": "hg-flag", "data-flag": "declared" }, ["declared"]));
    }
    if (s.plan_error) {
      flags.push(h("span", { "class": "hg-flag hg-paused", "data-flag": "parked" }, ["parked"]));
    }
    var runs = s.plan_error ? [h("em", { "class": "hg-plan-error" }, ["cannot be planned: " + s.plan_error +
        " (edit or resume it to plan it again)"])]
      : s.paused ? [h("em", {}, ["paused: resuming starts from the first tick after then"])]
      : s.next_runs.length ? [h("ol", { "class": "hg-runs" }, s.next_runs.map(function (t) {
        return h("li", {}, times(t));
      }))] : ["never fires again"];
    var events = s.events.length ? [h("ul", { "class": "hg-events" }, s.events.map(function (e) {
      var outcome = h("span", { "class": "hg-badge hg-s-" + (OUTCOME[e.outcome] || "pending"), "data-outcome": e.outcome }, [e.outcome]);
      var tick = e.tick ? e.tick.local : "";
      var target = e.url ? h("a", { href: e.url }, [e.target_id]) : e.target_id;
      return h("li", {}, [outcome, " ", h("time", { datetime: e.tick && e.tick.iso }, [tick]),
        e.reason ? " — " + e.reason : "", target ? h("br") : null, target ? h("small", {}, [target]) : null]);
    }))] : ["none yet"];
    return h("tr", { "data-schedule": s.name, "data-paused": s.paused ? "1" : "0" }, [
      h("th", { scope: "row" }, [s.name, h("br")].concat(flags)),
      h("td", {}, [h("span", { "class": "hg-described" }, [s.described]), h("br"), h("code", {}, [s.spec]),
        h("br"), h("small", {}, ["missed ticks: " + s.on_missed])]),
      h("td", {}, [s.target_type + " " + s.target_name]),
      h("td", { "class": "hg-next" }, runs),
      h("td", {}, events)
    ]);
  }

  function render(snap) {
    var body = document.getElementById("hg-schedules-body");
    var rows = snap.schedules.map(row);
    if (!rows.length) {
      rows = [h("tr", {}, [h("td", { colspan: "5" }, ["No schedules."])])];
    }
    body.replaceChildren.apply(body, rows);
    var next = document.getElementById("hg-next-page");
    next.hidden = !snap.next_after;
    if (snap.next_after) {
      next.setAttribute("href", "?after=" + encodeURIComponent(snap.next_after));
    }
    document.getElementById("hg-schedules").setAttribute("data-ready", "1");
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("hg-schedules");
    render(JSON.parse(document.getElementById("hg-snapshot").textContent));
    var status = document.getElementById("hg-live");
    window.HGLive.connect(root.getAttribute("data-ws"), {
      onStatus: function (s) { window.HGLive.showStatus(status, s); },
      onMessage: function (message) {
        if (message.type === "snapshot") {
          render(message.snapshot);
        }
      }
    });
  });
})();
