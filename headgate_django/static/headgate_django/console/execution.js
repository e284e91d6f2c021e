/* Headgate console: the durable execution page — header, Operations (pending and uncertain
   ones flagged in text and colour), what a parked execution waits for (a select's branches),
   sleeps with their due time, the chain of runs and the history timeline, kept live. */
(function () {
  "use strict";

  var h = window.HGLive.h;  // an element with attributes and children (live.js)

  function when(iso) {
    return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "—";
  }

  function summary(event) {
    var parts = [];
    for (var key in event.summary) {
      parts.push(key + "=" + JSON.stringify(event.summary[key]));
    }
    var cell = [parts.join(", ")];
    if (event.payload) {
      cell.push(h("details", {}, [h("summary", {}, ["payload"]),
        h("pre", { "class": "hg-json" }, [JSON.stringify(event.payload, null, 2)])]));
    }
    return cell;
  }

  function render(snap) {
    var state = document.getElementById("hg-state");
    state.textContent = snap.state;
    state.className = "hg-badge hg-wf-" + ({ succeeded: "succeeded", failed: "failed", cancelled: "cancelled" }[snap.state] || "running");
    var header = document.getElementById("hg-header");
    var fields = [["Task queue", snap.task_queue], ["Created", when(snap.created_at)],
      ["Updated", when(snap.updated_at)], ["Finished", when(snap.finished_at)],
      ["History length", snap.last_seq],
      ["History size", snap.history_warning || "within the thresholds"],
      ["Failure reason", snap.failure_reason || "—"],
      ["Suspended because", snap.suspended_reason || "—"],
      ["Waiting for", snap.pending.length ? snap.pending.join(", ") : "no Operation"],
      ["Uncertain", snap.uncertain.length ? snap.uncertain.join(", ") : "none"]];
    header.replaceChildren.apply(header, fields.reduce(function (all, f) {
      return all.concat([h("dt", {}, [f[0]]), h("dd", {}, [f[1]])]);
    }, []));
    var ops = snap.operations.map(function (op) {
      return h("tr", { "class": "hg-op-" + op.status, "data-command": op.command_id }, [
        h("td", {}, [op.command_id]),
        h("td", {}, [op.name + "@" + op.version]),
        h("td", {}, [h("span", { "class": "hg-flag" }, [op.status])]),
        h("td", {}, [op.url ? h("a", { href: op.url }, [(op.job_state || "") + " " + op.job_id]) : op.job_id]),
        h("td", {}, [op.attempt === undefined || op.attempt === null ? "—" : op.attempt + " / " + op.max_attempts]),
        h("td", {}, [op.detail || ""])
      ]);
    });
    if (!ops.length) {
      ops = [h("tr", {}, [h("td", { colspan: "6" }, ["No Operation scheduled yet."])])];
    }
    var body = document.getElementById("hg-ops-body");
    body.replaceChildren.apply(body, ops);
    renderWaiting(snap.waiting);
    var timers = document.getElementById("hg-timers");
    timers.replaceChildren(snap.timers.length ? h("ul", {}, snap.timers.map(function (t) {
      return h("li", { "class": t.fired ? "hg-sleep-fired" : "hg-sleep-pending", "data-command": t.command_id }, [
        t.command_id + ": " + (t.duration_ms / 1000) + " s, ",
        t.fired ? "fired" : h("span", { "class": "hg-flag" }, ["pending"]),
        t.fired ? null : h("span", { "class": "hg-due" }, [" due " + when(t.due_at)])
      ]);
    })) : h("p", {}, ["No sleeps."]));
    renderRuns(snap.execution_id, snap.runs || []);
    renderFamily(snap);
    var history = document.getElementById("hg-history-body");
    history.replaceChildren.apply(history, snap.events.map(function (e) {
      return h("tr", {}, [h("td", { "class": "hg-num" }, [e.seq]), h("td", {}, [when(e.at)]),
        h("td", {}, [e.type]), h("td", {}, summary(e))]);
    }));
  }

  function renderWaiting(waiting) {
    var box = document.getElementById("hg-waiting");
    if (!waiting || !waiting.branches.length) {
      box.replaceChildren(h("p", {}, ["Nothing: the execution is not parked."]));
      return;
    }
    var title = waiting.select ? waiting.select + " waits for the first of:" : "waits for:";
    box.replaceChildren(h("p", { "class": "hg-select" }, [title]), h("ul", {}, waiting.branches.map(function (b) {
      return h("li", { "class": "hg-branch", "data-branch": b.id }, [
        b.id + " — " + b.label, b.due_at ? h("span", { "class": "hg-due" }, [", due " + when(b.due_at)]) : null
      ]);
    })));
  }

  function renderRuns(executionId, runs) {
    var root = document.getElementById("hg-execution");
    var finished = root.getAttribute("data-run-history-url");
    var current = root.getAttribute("data-history-url");
    var list = document.getElementById("hg-runs");
    list.replaceChildren.apply(list, runs.map(function (run) {
      var href = run.current
        ? (current ? current + "?execution__id__exact=" + encodeURIComponent(executionId) : null)
        : (finished ? finished + "?run__id__exact=" + run.pk : null);
      var label = "run " + run.number + " (" + run.run_id + "), " + run.events + " events" +
        (run.current ? ", current" : ", ended " + when(run.finished_at));
      return h("li", { "class": run.current ? "hg-run-current" : "hg-run", "data-run": run.run_id },
        [href ? h("a", { href: href }, [label]) : label]);
    }));
  }

  function renderFamily(snap) {
    var family = document.getElementById("hg-family");
    // Every snapshot re-renders the page, and the first one comes as the socket opens: a
    // link replaced by its own copy between a press and its release loses the click.
    var shown = JSON.stringify([snap.parent_id || null, snap.children]);
    if (family.getAttribute("data-shown") === shown) {
      return;
    }
    family.setAttribute("data-shown", shown);
    var template = family.getAttribute("data-url") || "";
    var mark = family.getAttribute("data-mark");
    function link(id, text) {
      return template ? h("a", { href: template.replace(mark, encodeURIComponent(id)) }, [text]) : text;
    }
    var items = [];
    if (snap.parent_id) {
      items.push(h("p", { "class": "hg-parent" }, ["Child of ", link(snap.parent_id, snap.parent_id)]));
    }
    if (snap.children.length) {
      items.push(h("ul", { "class": "hg-children" }, snap.children.map(function (c) {
        return h("li", {}, [link(c.id, c.id), " " + c.name + "@" + c.version + " ",
          h("span", { "class": "hg-flag" }, [c.state])]);
      })));
    }
    family.replaceChildren.apply(family, items.length ? items : [h("p", {}, ["No parent, no children."])]);
  }

  function start() {
    var root = document.getElementById("hg-execution");
    render(JSON.parse(document.getElementById("hg-snapshot").textContent));
    root.setAttribute("data-ready", "1");
    var live = document.getElementById("hg-live");
    var path = root.getAttribute("data-ws") + "?site=" + encodeURIComponent(root.getAttribute("data-site"));
    window.HGLive.connect(path, {
      onStatus: function (status) {
        window.HGLive.showStatus(live, status);
      },
      onMessage: function (message) {
        if (message.type === "gone") {
          root.querySelector(".hg-gone").hidden = false;
        } else if (message.type === "snapshot") {
          render(message.snapshot);
        }
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
