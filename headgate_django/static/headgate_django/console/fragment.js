/* Headgate console: a live page drawn by the server. The socket sends the page's fragment
   (the same template the first render used) whenever what it shows changed; it replaces
   the fragment in place, so the page never reloads and the browser's position stays. */
(function () {
  "use strict";

  function start(root) {
    var status = document.getElementById("hg-live");
    var path = root.getAttribute("data-ws") + "?site=" + encodeURIComponent(root.getAttribute("data-site"));
    var updates = 0;
    window.HGLive.connect(path, {
      onStatus: function (value) {
        if (status) {
          window.HGLive.showStatus(status, value);
        }
      },
      onMessage: function (message) {
        if (message.type !== "snapshot" || !message.snapshot || typeof message.snapshot.html !== "string") {
          return;
        }
        root.innerHTML = message.snapshot.html;
        updates += 1;
        root.setAttribute("data-updates", String(updates));
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var roots = document.querySelectorAll(".hg-fragment[data-ws]");
    for (var i = 0; i < roots.length; i += 1) {
      start(roots[i]);
    }
  });
})();
