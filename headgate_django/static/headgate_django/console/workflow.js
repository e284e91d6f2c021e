/* Headgate console: the workflow page — header, graph, node panel and timeline, kept live.

   The first snapshot is embedded in the page (so the graph draws without waiting for the
   socket); the socket then sends a fresh snapshot on every (re)connect and small patches
   with only the nodes, events or signals that changed. Nothing here can change data. */
(function () {
  "use strict";

  // What each recorded error was, in words: only "error" counts as a failed attempt.
  var ERROR_KINDS = {
    error: "failed",
    crash: "crashed (lease lapsed)",
    undecodable: "payload undecodable (not counted as a failure)",
    skip: "skipped",
    timeout: "timed out"
  };
  var STATE_ORDER = ["running", "available", "scheduled", "retryable", "pending", "completed",
    "archived", "cancelled", "quarantined", "undecodable", "missing"];

  function h(tag, attrs, children) {
    var el = document.createElement(tag);
    for (var key in attrs || {}) {
      if (attrs[key] !== null && attrs[key] !== undefined) {
        el.setAttribute(key, attrs[key]);
      }
    }
    (children || []).forEach(function (child) {
      if (child === null || child === undefined) {
        return;
      }
      el.appendChild(typeof child === "string" || typeof child === "number"
        ? document.createTextNode(String(child)) : child);
    });
    return el;
  }

  function badge(state) {
    return h("span", { "class": "hg-badge hg-s-" + state }, [state]);
  }

  function when(iso) {
    return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "—";
  }

  function json(value) {
    return h("pre", { "class": "hg-json" }, [JSON.stringify(value, null, 2)]);
  }

  function Page(root) {
    var self = this;
    this.root = root;
    this.byName = {};
    this.selected = root.getAttribute("data-selected") || null;
    this.graph = new window.HGGraph(document.getElementById("hg-graph"), {
      onSelect: function (name) {
        self.select(name);
      },
      onGroup: function (id) {
        self.setGroup(id, true);
      }
    });
    this.panel = document.getElementById("hg-panel");
    root.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var action = button.getAttribute("data-zoom");
        if (action === "in") {
          self.graph.zoom(1.25);
        } else if (action === "out") {
          self.graph.zoom(0.8);
        } else if (action === "fit") {
          self.graph.fit();
        } else {
          self.graph.actualSize();
        }
      });
    });
    root.addEventListener("click", function (e) {
      var collapse = e.target.closest("[data-collapse]");
      if (collapse) {
        e.preventDefault();
        self.setGroup(collapse.getAttribute("data-collapse"), false);
        return;
      }
      var target = e.target.closest("[data-select]");
      if (target) {
        e.preventDefault();
        self.select(target.getAttribute("data-select"));
        self.graph.focusNode(target.getAttribute("data-select"));
      }
    });
  }

  /* The group ids drawn expanded, as the page's URL and socket carry them. */
  Page.prototype.expanded = function () {
    return (this.snap.groups || []).filter(function (g) {
      return g.expanded;
    }).map(function (g) {
      return g.id;
    });
  };

  Page.prototype.expandQuery = function (ids) {
    return ids.map(function (id) {
      return "&expand=" + encodeURIComponent(id);
    }).join("");
  };

  /* Expand (open) or collapse a fan-out group: the server lays the graph out again and
     answers over the socket with a whole snapshot; without a socket, the page reloads. */
  Page.prototype.setGroup = function (id, open) {
    var ids = this.expanded().filter(function (g) {
      return g !== id;
    });
    if (open) {
      ids.push(id);
    }
    this.wanted = ids;
    var url = new URL(window.location.href);
    url.searchParams.delete("expand");
    ids.forEach(function (g) {
      url.searchParams.append("expand", g);
    });
    this.root.setAttribute("data-ready", "0");
    this.asked = performance.now();
    if (this.socket && this.socket.send({ type: "expand", groups: ids })) {
      window.history.replaceState(null, "", url);
    } else {
      window.location.assign(url);
    }
  };

  /* Draw everything from a whole snapshot (first load, or a graft changed the shape). */
  Page.prototype.load = function (snapshot) {
    this.snap = snapshot;
    this.index();
    this.graph.render(snapshot);
    if (this.asked) {
      window.hgGroupMs = performance.now() - this.asked;
      this.asked = null;
      this.root.setAttribute("data-ready", "1");
    }
    if (this.selected && !this.byName[this.selected]) {
      this.selected = null;
    }
    this.graph.select(this.selected);
    this.header();
    this.timeline();
    this.detail();
  };

  Page.prototype.index = function () {
    this.byName = {};
    for (var i = 0; i < this.snap.nodes.length; i++) {
      this.byName[this.snap.nodes[i].name] = i;
    }
  };

  Page.prototype.receive = function (message) {
    if (message.type === "gone") {
      this.root.querySelector(".hg-gone").hidden = false;
      return;
    }
    if (message.type === "drawing") {
      // The same nodes drawn with other groups expanded (the answer to setGroup).
      this.load(Object.assign({}, this.snap, message.drawing));
      return;
    }
    if (message.type === "snapshot") {
      var next = message.snapshot;
      if (next.graph_key !== this.snap.graph_key) {
        this.load(next);
        return;
      }
      var changed = next.nodes.filter(function (node, i) {
        return JSON.stringify(node) !== JSON.stringify(this.snap.nodes[i]);
      }, this);
      message = { header: next, nodes: changed, events: next.events, signals: next.signals };
    }
    this.patch(message);
  };

  Page.prototype.patch = function (message) {
    var snap = this.snap;
    if (message.header) {
      ["status", "coordinator", "revision", "generation", "failed", "counts",
        "signals_revealed"].forEach(function (key) {
        if (key in message.header) {
          snap[key] = message.header[key];
        }
      });
    }
    if (message.nodes && message.nodes.length) {
      for (var i = 0; i < message.nodes.length; i++) {
        snap.nodes[this.byName[message.nodes[i].name]] = message.nodes[i];
      }
      this.graph.update(message.nodes);
    }
    if (message.events) {
      snap.events = message.events;
      this.timeline();
    }
    if (message.signals) {
      snap.signals = message.signals;
    }
    this.header();
    this.detail();
  };

  Page.prototype.header = function () {
    var snap = this.snap;
    var status = document.getElementById("hg-status");
    status.textContent = snap.status + (snap.status_detail ? " (" + snap.status_detail + ")" : "");
    status.className = "hg-badge hg-wf-" + snap.status;
    var coordinator = document.getElementById("hg-coordinator");
    coordinator.textContent = snap.coordinator.state;
    coordinator.href = snap.coordinator.url || "#";
    document.getElementById("hg-revision").textContent = snap.revision;
    document.getElementById("hg-generation").textContent = snap.generation;
    var counts = document.getElementById("hg-counts");
    var parts = [snap.nodes.length + " nodes"];
    STATE_ORDER.forEach(function (state) {
      if (snap.counts[state]) {
        parts.push(snap.counts[state] + " " + state);
      }
    });
    counts.textContent = parts.join(" · ");
  };

  Page.prototype.select = function (name) {
    this.selected = name in this.byName ? name : null;
    this.graph.select(this.selected);
    var url = new URL(window.location.href);
    url.searchParams.delete("job");
    if (this.selected) {
      url.searchParams.set("node", this.selected);
    } else {
      url.searchParams.delete("node");
    }
    window.history.replaceState(null, "", url);
    this.detail();
  };

  Page.prototype.nodeLinks = function (names) {
    if (!names.length) {
      return h("span", {}, ["none"]);
    }
    return h("ul", { "class": "hg-links" }, names.map(function (name) {
      return h("li", {}, [h("a", { href: "?node=" + encodeURIComponent(name), "data-select": name }, [name])]);
    }));
  };

  Page.prototype.waitDetail = function (node) {
    var w = node.wait;
    if (!w) {
      return null;
    }
    var text;
    if (node.kind === "signal") {
      text = "Waits for signal “" + w.signal + "”.";
    } else if (node.kind === "timer") {
      text = w.wake_at ? "Fires at " + when(w.wake_at) + "."
        : "Fires " + (w.delay_ms / 1000) + " s after its latest dependency finished.";
    } else if (node.kind === "condition") {
      return h("div", {}, ["Waits until this CEL condition is true:", h("pre", { "class": "hg-json" }, [w.condition])]);
    } else {
      text = "Waits for child workflow “" + w.child_workflow_id + "”.";
    }
    return h("p", {}, [text]);
  };

  Page.prototype.signalHistory = function (node) {
    var snap = this.snap;
    var matching = snap.signals.filter(function (s) {
      return s.signal === node.wait.signal;
    });
    if (!matching.length) {
      return h("p", {}, ["No emission recorded yet."]);
    }
    return h("ol", { "class": "hg-signals" }, matching.map(function (s) {
      var body = [h("div", {}, ["#" + s.id + " · key " + s.idempotency_key + " · " + when(s.emitted_at)])];
      if (snap.signals_revealed) {
        body.push(h("div", {}, ["payload", json(s.payload)]), h("div", {}, ["source", json(s.source)]));
      } else {
        body.push(h("p", { "class": "hg-note" }, ["Payload and source need the “Can view signal emission” permission."]));
      }
      return h("li", {}, body);
    }));
  };

  Page.prototype.detail = function () {
    var panel = this.panel;
    if (!this.selected) {
      panel.replaceChildren(h("p", { "class": "hg-note" }, [
        "Select a node (click it, or Tab to it and press Enter) to see its detail."]));
      return;
    }
    var node = this.snap.nodes[this.byName[this.selected]];
    var item = this.graph.items[node.name];
    var rows = [
      ["Kind", node.kind.replace("_", " ") + " (" + node.job_kind + ")"],
      ["State", badge(node.state)],
      ["Job", node.url ? h("a", { href: node.url }, [node.job_id]) : node.job_id + " (no row)"],
      ["Queue", node.queue || "—"],
      ["Attempts", node.attempt === null ? "—"
        : node.attempt + " failed · " + node.crash_attempt + " crashed · at most " + node.max_attempts],
      ["Claimed", when(node.claimed_at)],
      ["Finished", when(node.finalized_at)],
      ["Completion evidence", when(node.completed_at)]
    ];
    var dl = h("dl", { "class": "hg-fields" });
    rows.forEach(function (row) {
      dl.appendChild(h("dt", {}, [row[0]]));
      dl.appendChild(h("dd", {}, [row[1]]));
    });
    var parts = [h("h2", {}, [node.name]), dl];
    var group = (this.snap.groups || []).filter(function (g) {
      return g.expanded && g.members.indexOf(node.name) >= 0;
    })[0];
    if (group) {
      parts.push(h("p", {}, ["One of " + group.members.length + " alike nodes. ",
        h("button", { type: "button", "class": "button", "data-collapse": group.id }, ["Collapse group"])]));
    }
    var wait = this.waitDetail(node);
    if (wait) {
      parts.push(h("h3", {}, ["Waiting for"]), wait);
    }
    if (node.kind === "signal") {
      parts.push(h("h3", {}, ["Signal history"]), this.signalHistory(node));
    }
    if (node.last_error) {
      parts.push(h("h3", {}, ["Last error"]), h("p", {}, [
        "Attempt " + node.last_error.attempt + ", " + (ERROR_KINDS[node.last_error.kind] || node.last_error.kind)
          + ", at " + node.last_error.at + ":"
      ]), h("pre", { "class": "hg-json" }, [node.last_error.error]));
    }
    parts.push(h("h3", {}, ["Dependencies"]), this.nodeLinks(item ? item.deps : node.deps));
    parts.push(h("h3", {}, ["Dependents"]), this.nodeLinks(item ? item.dependents : []));
    var events = this.snap.events.filter(function (e) {
      return e.node === node.name;
    });
    parts.push(h("h3", {}, ["Node timeline"]), events.length
      ? h("ul", {}, events.map(function (e) {
        return h("li", {}, [when(e.at) + " · " + e.event + " (#" + e.sequence + ")"]);
      }))
      : h("p", {}, ["No events for this node yet."]));
    panel.replaceChildren.apply(panel, parts);
  };

  Page.prototype.timeline = function () {
    var body = document.getElementById("hg-timeline-body");
    var rows = this.snap.events.map(function (e) {
      return h("tr", {}, [
        h("td", { "class": "hg-num" }, [e.sequence]),
        h("td", {}, [when(e.at)]),
        h("td", {}, [e.event]),
        h("td", {}, [e.node ? h("a", { href: "?node=" + encodeURIComponent(e.node), "data-select": e.node }, [e.node]) : "—"]),
        h("td", { "class": "hg-num" }, [e.revision]),
        h("td", { "class": "hg-num" }, [e.generation])
      ]);
    });
    if (!rows.length) {
      rows = [h("tr", {}, [h("td", { colspan: "6" }, ["No events yet: the coordinator has not ticked."])])];
    }
    body.replaceChildren.apply(body, rows);
  };

  function start() {
    var root = document.getElementById("hg-workflow");
    var t0 = performance.now();
    var snapshot = JSON.parse(document.getElementById("hg-snapshot").textContent);
    var parsed = performance.now();
    var page = new Page(root);
    page.load(snapshot);
    var built = performance.now();
    window.requestAnimationFrame(function () {
      window.requestAnimationFrame(function () {
        var painted = performance.now();
        var nav = performance.getEntriesByType("navigation")[0];
        window.hgTiming = {
          nodes: snapshot.nodes.length,
          parse_ms: parsed - t0,
          build_ms: built - t0,
          painted_ms: painted - t0,
          since_response_ms: nav ? painted - nav.responseEnd : null
        };
        root.setAttribute("data-ready", "1");
      });
    });
    var live = document.getElementById("hg-live");
    var base = root.getAttribute("data-ws") + "?site=" + encodeURIComponent(root.getAttribute("data-site"));
    page.socket = window.HGLive.connect(function () {
      return base + page.expandQuery(page.wanted || page.expanded());
    }, {
      onStatus: function (status) {
        window.HGLive.showStatus(live, status);
      },
      onMessage: function (message) {
        page.receive(message);
      }
    });
    window.hgPage = page;
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
