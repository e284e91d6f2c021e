/* Headgate console: one WebSocket per live page, reconnecting until the page goes away.

   After a server restart (or a network blip) the socket closes; we retry with a capped
   exponential backoff, and the server answers every new connection with a fresh
   snapshot, so the page is back in sync without a reload. */
(function () {
  "use strict";

  var TOO_MANY = 4429;
  var BUSY_RETRY = 30000;

  function connect(path, handlers) {
    var delay = 250;
    var socket = null;
    var stopped = false;
    // A socket that never opened is not a restart: nothing here serves the console's
    // WebSocket (a WSGI server, or an ASGI application without its routes).
    var opened = false;

    function url() {
      // A function when the path changes with the page's view (the graph's open groups).
      var now = typeof path === "function" ? path() : path;
      return (window.location.protocol === "https:" ? "wss://" : "ws://") + window.location.host + now;
    }

    function open() {
      handlers.onStatus("connecting");
      socket = new WebSocket(url());
      socket.onopen = function () {
        delay = 250;
        opened = true;
        handlers.onStatus("live");
      };
      socket.onmessage = function (event) {
        var message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          return;
        }
        if (message.type === "gone") {
          stopped = true;
        }
        handlers.onMessage(message);
      };
      socket.onclose = function (event) {
        if (stopped) {
          handlers.onStatus("closed");
          return;
        }
        if (event.code === TOO_MANY) {
          // The user's other console pages hold every live socket the server allows:
          // retry slowly, as one of them may close.
          handlers.onStatus("busy");
          window.setTimeout(open, BUSY_RETRY + Math.random() * 1000);
          return;
        }
        handlers.onStatus(opened ? "reconnecting" : "unreachable");
        window.setTimeout(open, delay + Math.random() * 100);
        delay = Math.min(delay * 2, 4000);
      };
    }

    open();
    return {
      /* Send a view request; false when the socket is not open (the caller falls back). */
      send: function (message) {
        if (!socket || socket.readyState !== 1) {
          return false;
        }
        socket.send(JSON.stringify(message));
        return true;
      },
      close: function () {
        stopped = true;
        if (socket) {
          socket.close();
        }
      }
    };
  }

  var LABELS = {
    connecting: "Connecting…",
    live: "Live",
    reconnecting: "Reconnecting…",
    unreachable: "Not live: no WebSocket (serve the project with ASGI, see the console's Set up)",
    busy: "Not live (too many console pages open; retrying)",
    closed: "Not live (the object is gone)"
  };

  function showStatus(el, status) {
    el.textContent = LABELS[status] || status;
    el.setAttribute("data-status", status);
  }

  /* An element with ``attrs`` (null and undefined ones left out) and ``children``
     (elements, or anything else as text), for the pages that build their DOM. */
  function h(tag, attrs, children) {
    var el = document.createElement(tag);
    for (var key in attrs || {}) {
      if (attrs[key] !== null && attrs[key] !== undefined) {
        el.setAttribute(key, attrs[key]);
      }
    }
    (children || []).forEach(function (child) {
      if (child !== null && child !== undefined) {
        el.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
      }
    });
    return el;
  }

  window.HGLive = { connect: connect, showStatus: showStatus, h: h };
})();
