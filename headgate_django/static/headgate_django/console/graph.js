/* Headgate console: draws a laid-out workflow graph as SVG, with zoom, pan and keyboard focus.

   The layered layout (node centres, bends of long edges) is computed on the server by
   igraph's Sugiyama implementation; this file only draws it, so a 999-node graph renders in
   a few tens of milliseconds. States are shown by fill colour AND by a text label in each
   node (and in its accessible name), never by colour alone. An edge is solid once its
   dependency is satisfied and dashed while the dependent still waits for it. */
(function () {
  "use strict";

  var NS = "http://www.w3.org/2000/svg";
  var MIN_ZOOM = 0.02;
  var MAX_ZOOM = 3;
  var READABLE_ZOOM = 0.8; // 13 px names stay above 10 px on screen

  function make(tag, attrs, parent) {
    var el = document.createElementNS(NS, tag);
    for (var key in attrs) {
      if (attrs[key] !== null && attrs[key] !== undefined) {
        el.setAttribute(key, attrs[key]);
      }
    }
    if (parent) {
      parent.appendChild(el);
    }
    return el;
  }

  /* Cubic segments with horizontal tangents through each point: reads well left to right. */
  function edgePath(points) {
    var d = "M" + points[0][0] + "," + points[0][1];
    for (var i = 1; i < points.length; i++) {
      var a = points[i - 1];
      var b = points[i];
      var mx = (a[0] + b[0]) / 2;
      d += "C" + mx + "," + a[1] + " " + mx + "," + b[1] + " " + b[0] + "," + b[1];
    }
    return d;
  }

  function shorten(text, max) {
    return text.length > max ? text.slice(0, max - 1) + "…" : text;
  }

  function describe(node) {
    return node.name + ", " + node.kind.replace("_", " ") + " node, state " + node.state;
  }

  function Graph(svg, options) {
    this.svg = svg;
    this.onSelect = options.onSelect;
    this.onGroup = options.onGroup || function () {};
    this.t = { x: 0, y: 0, k: 1 };
    this.items = {};
    this.selected = null;
    this.keyboard = false;
    var defs = make("defs", {}, svg);
    var marker = make("marker", {
      id: "hg-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
      markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"
    }, defs);
    make("path", { d: "M0,0L10,5L0,10z", "class": "hg-arrowhead" }, marker);
    this.view = make("g", { "class": "hg-viewport" }, svg);
    this.bindPanZoom();
  }

  /* What the members of a group have in common, for its label: "s03-task*". */
  function commonLabel(names, fallback) {
    var prefix = names[0];
    for (var i = 1; i < names.length && prefix; i++) {
      while (names[i].indexOf(prefix) !== 0) {
        prefix = prefix.slice(0, -1);
      }
    }
    return prefix.length >= 2 ? prefix + "*" : fallback;
  }

  /* The state a group is coloured by: the one most in need of attention that it holds. */
  var ATTENTION = ["running", "archived", "quarantined", "undecodable", "retryable", "available",
    "scheduled", "pending", "missing", "cancelled", "completed"];

  Graph.prototype.render = function (snapshot) {
    var layout = snapshot.layout;
    var W = layout.node[0];
    var H = layout.node[1];
    var nodes = snapshot.nodes;
    var drawn = snapshot.drawn || nodes.map(function (n) { return n.name; });
    var pos = layout.positions;
    var frag = document.createDocumentFragment();
    var edgeLayer = make("g", { "class": "hg-edges" }, frag);
    var nodeLayer = make("g", { "class": "hg-nodes" }, frag);
    var items = {};
    var i;
    this.width = layout.width;
    this.height = layout.height;
    this.data = {};
    this.groups = {};
    this.groupOf = {};
    for (i = 0; i < nodes.length; i++) {
      this.data[nodes[i].name] = nodes[i];
    }
    var groups = snapshot.groups || [];
    for (i = 0; i < groups.length; i++) {
      this.groups[groups[i].id] = groups[i];
      if (!groups[i].expanded) {
        for (var m = 0; m < groups[i].members.length; m++) {
          this.groupOf[groups[i].members[m]] = groups[i].id;
        }
      }
    }
    for (i = 0; i < drawn.length; i++) {
      var group = this.groupOf[drawn[i]] ? null : (this.groups[drawn[i]] || null);
      items[drawn[i]] = {
        data: group ? null : this.data[drawn[i]], group: group && !group.expanded ? group : null,
        index: i, out: [], deps: [], dependents: []
      };
    }
    for (i = 0; i < layout.edges.length; i++) {
      var edge = layout.edges[i];
      var a = pos[edge[0]];
      var b = pos[edge[1]];
      var from = drawn[edge[0]];
      var to = drawn[edge[1]];
      var points = [[a[0] + W / 2, a[1]]].concat(edge[2], [[b[0] - W / 2, b[1]]]);
      var path = make("path", {
        d: edgePath(points), "marker-end": "url(#hg-arrow)", "data-from": from, "data-to": to
      }, edgeLayer);
      items[from].out.push(path);
      items[from].dependents.push(to);
      items[to].deps.push(from);
    }
    for (i = 0; i < drawn.length; i++) {
      var item = items[drawn[i]];
      var attrs = {
        transform: "translate(" + (pos[i][0] - W / 2) + "," + (pos[i][1] - H / 2) + ")",
        tabindex: "0", role: "button"
      };
      var label;
      if (item.group) {
        attrs["data-group"] = drawn[i];
        attrs["aria-expanded"] = "false";
        label = item.group.members.length + " × " + commonLabel(item.group.members,
          this.data[item.group.members[0]].job_kind);
      } else {
        attrs["data-node"] = drawn[i];
        label = drawn[i];
      }
      var g = make("g", attrs, nodeLayer);
      if (item.group) {
        make("rect", { x: 5, y: -5, width: W, height: H, rx: 6, "class": "hg-stack" }, g);
      }
      make("rect", { width: W, height: H, rx: 6 }, g);
      make("text", { x: 10, y: 20, "class": "hg-name" }, g).textContent = shorten(label, 24);
      item.el = g;
      item.stateText = make("text", { x: 10, y: 39, "class": "hg-state" }, g);
      item.title = make("title", {}, g);
      item.x = pos[i][0];
      item.y = pos[i][1];
    }
    this.items = items;
    this.nodeW = W;
    this.nodeH = H;
    for (var name in items) {
      this.paint(name);
    }
    // Size the view before inserting: reading the canvas size afterwards would force a
    // synchronous layout of thousands of fresh SVG elements.
    this.home();
    this.view.replaceChildren(frag);
    if (this.selected && !items[this.selected]) {
      this.selected = null;
    }
  };

  /* Redraw a group from its members' current states: colour, per-state counts, edges. */
  Graph.prototype.paintGroup = function (id) {
    var item = this.items[id];
    var members = item.group.members;
    var counts = {};
    var done = true;
    for (var i = 0; i < members.length; i++) {
      var n = this.data[members[i]];
      counts[n.state] = (counts[n.state] || 0) + 1;
      done = done && n.done;
    }
    var parts = [];
    var worst = null;
    ATTENTION.forEach(function (state) {
      if (counts[state]) {
        parts.push(counts[state] + " " + state);
        worst = worst || state;
      }
    });
    item.el.setAttribute("class", "hg-node hg-group hg-s-" + worst + (id === this.selected ? " hg-selected" : ""));
    item.el.setAttribute("data-state", worst);
    item.el.setAttribute("data-counts", JSON.stringify(counts));
    var text = parts.join(" · ");
    item.stateText.textContent = shorten(text, 30);
    item.el.setAttribute("aria-label", "group of " + members.length + " alike nodes, " + text
      + "; press Enter to expand");
    item.title.textContent = members.length + " alike nodes — " + text + " (click to expand)";
    var edgeClass = "hg-edge hg-bundle " + (done ? "hg-done" : "hg-wait");
    for (var e = 0; e < item.out.length; e++) {
      item.out[e].setAttribute("class", edgeClass);
    }
  };

  /* Redraw one node (and its outgoing edges) from its current data. */
  Graph.prototype.paint = function (name) {
    var item = this.items[name];
    if (item.group) {
      this.paintGroup(name);
      return;
    }
    var n = item.data;
    var cls = "hg-node hg-s-" + n.state + (name === this.selected ? " hg-selected" : "");
    item.el.setAttribute("class", cls);
    item.el.setAttribute("data-state", n.state);
    item.el.setAttribute("aria-label", describe(n));
    if (name === this.selected) {
      item.el.setAttribute("aria-current", "true");
    } else {
      item.el.removeAttribute("aria-current");
    }
    item.stateText.textContent = n.state + (n.kind === "task" ? "" : " · " + n.kind.replace("_", " "));
    item.title.textContent = n.name + " — " + n.state;
    var edgeClass = "hg-edge " + (n.done ? "hg-done" : "hg-wait");
    for (var i = 0; i < item.out.length; i++) {
      item.out[i].setAttribute("class", edgeClass);
    }
  };

  /* Apply changed node dicts; returns true if any was known. */
  Graph.prototype.update = function (nodes) {
    var any = false;
    var groups = {};
    for (var i = 0; i < nodes.length; i++) {
      var name = nodes[i].name;
      this.data[name] = nodes[i];
      var item = this.items[name];
      if (item) {
        item.data = nodes[i];
        this.paint(name);
        any = true;
      } else if (this.groupOf[name]) {
        groups[this.groupOf[name]] = true;
        any = true;
      }
    }
    for (var id in groups) {
      this.paintGroup(id);
    }
    return any;
  };

  Graph.prototype.select = function (name) {
    var previous = this.selected;
    this.selected = this.items[name] ? name : null;
    if (previous && this.items[previous]) {
      this.paint(previous);
    }
    if (this.selected) {
      this.paint(this.selected);
    }
  };

  Graph.prototype.focusNode = function (name) {
    var item = this.items[name];
    if (item) {
      item.el.focus();
    }
  };

  // -- zoom and pan -----------------------------------------------------------------

  Graph.prototype.apply = function () {
    // Far out, labels are unreadable anyway: drop them (and arrowheads) from painting.
    this.svg.classList.toggle("hg-far", this.t.k < 0.35);
    this.view.setAttribute(
      "transform", "translate(" + this.t.x + "," + this.t.y + ") scale(" + this.t.k + ")"
    );
  };

  Graph.prototype.zoomAt = function (factor, px, py) {
    var k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, this.t.k * factor));
    this.t.x = px - (px - this.t.x) * (k / this.t.k);
    this.t.y = py - (py - this.t.y) * (k / this.t.k);
    this.t.k = k;
    this.apply();
  };

  Graph.prototype.zoom = function (factor) {
    this.zoomAt(factor, this.svg.clientWidth / 2, this.svg.clientHeight / 2);
  };

  Graph.prototype.fit = function () {
    if (!this.width) {
      return;
    }
    var w = this.svg.clientWidth || 800;
    var h = this.svg.clientHeight || 600;
    var k = Math.min(1, w / this.width, h / this.height);
    this.t = { k: k, x: (w - this.width * k) / 2, y: Math.max(0, (h - this.height * k) / 2) };
    this.apply();
  };

  /* The first view: the whole graph if its labels stay readable so, else the start of it
     (its roots, on the left) at a zoom where they are. "Fit" shows everything. */
  Graph.prototype.home = function () {
    if (!this.width) {
      return;
    }
    var w = this.svg.clientWidth || 800;
    var h = this.svg.clientHeight || 600;
    var k = Math.min(1, w / this.width, h / this.height);
    if (k >= READABLE_ZOOM) {
      this.fit();
      return;
    }
    k = READABLE_ZOOM;
    this.t = { k: k, x: 8, y: this.height * k < h ? (h - this.height * k) / 2 : 8 };
    this.apply();
  };

  Graph.prototype.actualSize = function () {
    this.zoomAt(1 / this.t.k, this.svg.clientWidth / 2, this.svg.clientHeight / 2);
  };

  /* Keep a node in view; when reached by keyboard in a far-out view, zoom in to read it. */
  Graph.prototype.reveal = function (name) {
    var item = this.items[name];
    var w = this.svg.clientWidth;
    var h = this.svg.clientHeight;
    if (this.keyboard && this.t.k < 0.6) {
      this.t.k = 1;
    }
    var sx = this.t.x + item.x * this.t.k;
    var sy = this.t.y + item.y * this.t.k;
    var margin = (this.nodeW / 2) * this.t.k + 8;
    if (sx < margin || sx > w - margin || sy < margin || sy > h - margin || this.keyboard) {
      if (sx < margin || sx > w - margin || sy < margin || sy > h - margin) {
        this.t.x = w / 2 - item.x * this.t.k;
        this.t.y = h / 2 - item.y * this.t.k;
      }
      this.apply();
    }
  };

  Graph.prototype.bindPanZoom = function () {
    var self = this;
    var svg = this.svg;
    var drag = null;
    svg.addEventListener("wheel", function (e) {
      e.preventDefault();
      var box = svg.getBoundingClientRect();
      self.zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - box.left, e.clientY - box.top);
    }, { passive: false });
    svg.addEventListener("pointerdown", function (e) {
      self.keyboard = false;
      drag = { x: e.clientX, y: e.clientY, tx: self.t.x, ty: self.t.y, moved: false };
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag) {
        return;
      }
      var dx = e.clientX - drag.x;
      var dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) > 4) {
        drag.moved = true;
        svg.setPointerCapture(e.pointerId);
        svg.classList.add("hg-panning");
      }
      if (drag.moved) {
        self.t.x = drag.tx + dx;
        self.t.y = drag.ty + dy;
        self.apply();
      }
    });
    function endDrag(e) {
      if (drag && !drag.moved) {
        var node = e.target.closest ? e.target.closest("[data-node], [data-group]") : null;
        if (node && node.hasAttribute("data-group")) {
          self.onGroup(node.getAttribute("data-group"));
        } else if (node) {
          self.onSelect(node.getAttribute("data-node"));
        }
      }
      drag = null;
      svg.classList.remove("hg-panning");
    }
    svg.addEventListener("pointerup", endDrag);
    svg.addEventListener("pointercancel", function () {
      drag = null;
    });
    svg.addEventListener("focusin", function (e) {
      var node = e.target.closest ? e.target.closest("[data-node], [data-group]") : null;
      if (node && self.keyboard) {
        self.reveal(node.getAttribute("data-node") || node.getAttribute("data-group"));
      }
    });
    svg.addEventListener("keydown", function (e) {
      self.keyboard = true;
      var node = e.target.closest ? e.target.closest("[data-node], [data-group]") : null;
      var name = node ? node.getAttribute("data-node") || node.getAttribute("data-group") : null;
      if (name && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        if (node.hasAttribute("data-group")) {
          self.onGroup(name);
        } else {
          self.onSelect(name);
        }
      } else if (name && e.key.indexOf("Arrow") === 0) {
        e.preventDefault();
        self.step(name, e.key);
      } else if (e.key === "+" || e.key === "=") {
        self.zoom(1.25);
      } else if (e.key === "-") {
        self.zoom(0.8);
      } else if (e.key === "0") {
        self.fit();
      }
    });
    document.addEventListener("keydown", function (e) {
      if (e.key === "Tab") {
        self.keyboard = true;
      }
    });
  };

  /* Arrow keys walk the graph: left to a dependency, right to a dependent, up and down
     to the nearest node above or below in the same column. */
  Graph.prototype.step = function (name, key) {
    var item = this.items[name];
    var target = null;
    if (key === "ArrowLeft") {
      target = item.deps[0];
    } else if (key === "ArrowRight") {
      target = item.dependents[0];
    } else {
      var best = null;
      for (var other in this.items) {
        var o = this.items[other];
        if (o.x !== item.x || other === name) {
          continue;
        }
        var dy = o.y - item.y;
        if ((key === "ArrowDown" && dy > 0) || (key === "ArrowUp" && dy < 0)) {
          if (best === null || Math.abs(dy) < best) {
            best = Math.abs(dy);
            target = other;
          }
        }
      }
    }
    if (target) {
      this.focusNode(target);
    }
  };

  window.HGGraph = Graph;
})();
