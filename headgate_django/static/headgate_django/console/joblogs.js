/* Headgate console: the job page's attempt logs, filtered by level in place. Each entry
   row carries data-level; the select hides rows below the chosen level. */
(function () {
  "use strict";

  var LEVELS = ["debug", "info", "warning", "error"];

  function apply(root, level) {
    var floor = LEVELS.indexOf(level);
    var rows = root.querySelectorAll("tr.hg-log");
    for (var i = 0; i < rows.length; i += 1) {
      var shown = LEVELS.indexOf(rows[i].getAttribute("data-level")) >= floor;
      rows[i].hidden = !shown;
    }
    root.setAttribute("data-level", level);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var roots = document.querySelectorAll(".hg-logs");
    for (var i = 0; i < roots.length; i += 1) {
      (function (root) {
        var select = root.querySelector("select.hg-log-level");
        if (!select) {
          return;
        }
        select.addEventListener("change", function () {
          apply(root, select.value);
        });
        apply(root, select.value);
      })(roots[i]);
    }
  });
})();
