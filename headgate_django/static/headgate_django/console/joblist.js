/* Headgate console: the job list — copy buttons for shortened ids, and a live first page.

   On the first page (default order) the list listens on its WebSocket; the server sends
   no rows, only "changed" when the first page's jobs moved. The page then fetches itself
   and swaps the table in, so every cell goes through the admin's filters, permissions
   and formatting. New rows and rows whose state changed are marked for a moment. */
(function () {
  "use strict";

  var MIN_GAP_MS = 500;

  function copy(button) {
    var text = button.getAttribute("data-copy");
    var done = function () {
      button.setAttribute("data-copied", "1");
      window.setTimeout(function () { button.removeAttribute("data-copied"); }, 1200);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
    } else {
      var area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
      done();
    }
  }

  function rowsById(table) {
    var found = {};
    if (!table) {
      return found;
    }
    table.querySelectorAll("tbody tr").forEach(function (tr) {
      var button = tr.querySelector(".hg-copy");
      var state = tr.querySelector(".hg-badge");
      if (button) {
        found[button.getAttribute("data-copy")] = state ? state.textContent : "";
      }
    });
    return found;
  }

  function List(root) {
    this.root = root;
    this.busy = false;
    this.again = false;
    this.last = 0;
    this.refreshes = 0;
  }

  List.prototype.refresh = function () {
    var self = this;
    if (this.busy) {
      this.again = true;
      return;
    }
    var wait = this.last + MIN_GAP_MS - Date.now();
    if (wait > 0) {
      this.busy = true;
      window.setTimeout(function () { self.busy = false; self.refresh(); }, wait);
      return;
    }
    this.busy = true;
    this.last = Date.now();
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        self.swap(new DOMParser().parseFromString(html, "text/html"));
      })
      .catch(function () {})
      .then(function () {
        self.busy = false;
        if (self.again) {
          self.again = false;
          self.refresh();
        }
      });
  };

  List.prototype.swap = function (doc) {
    var fresh = doc.querySelector("#changelist-form .results, #changelist .results");
    var current = this.root.querySelector(".results");
    if (!fresh) {
      return;
    }
    var before = rowsById(current ? current.querySelector("table") : null);
    if (current) {
      current.replaceWith(fresh);
    } else {
      this.root.appendChild(fresh);
    }
    var paginator = doc.querySelector(".paginator");
    var shown = document.querySelector(".paginator");
    if (paginator && shown) {
      shown.replaceWith(paginator);
    }
    fresh.querySelectorAll("tbody tr").forEach(function (tr) {
      var button = tr.querySelector(".hg-copy");
      var state = tr.querySelector(".hg-badge");
      if (!button) {
        return;
      }
      var id = button.getAttribute("data-copy");
      if (!(id in before)) {
        tr.classList.add("hg-new");
      } else if (state && before[id] !== state.textContent) {
        tr.classList.add("hg-changed");
      }
    });
    this.refreshes += 1;
    this.root.setAttribute("data-refreshes", String(this.refreshes));
  };

  function start() {
    document.addEventListener("click", function (e) {
      var button = e.target.closest ? e.target.closest(".hg-copy") : null;
      if (button) {
        e.preventDefault();
        copy(button);
      }
    });
    var root = document.getElementById("hg-joblist");
    if (!root || !root.getAttribute("data-ws") || !window.HGLive) {
      return;
    }
    var list = new List(root);
    var live = document.getElementById("hg-live");
    var first = true;
    var ws = root.getAttribute("data-ws");
    var path = ws + (ws.indexOf("?") < 0 ? "?" : "&") + "site=" + encodeURIComponent(root.getAttribute("data-site"));
    window.HGLive.connect(path, {
      onStatus: function (status) {
        window.HGLive.showStatus(live, status);
      },
      onMessage: function (message) {
        // The snapshot of a reconnect may follow changes missed while away.
        if (message.type === "changed" || (message.type === "snapshot" && !first)) {
          list.refresh();
        }
        first = false;
      }
    });
    window.hgJobList = list;
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
