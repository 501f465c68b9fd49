// The /engine/ws connection: reconnects with backoff, parses messages, hands them on.

defineLive("LiveSocket", [], () => {
  function socketUrl() {
    const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
    return `${proto}//${window.location.host}/engine/ws`;
  }

  // handlers: onOpen(), onMessage(msg), onConn(state) with state "connecting" | "live" | "reconnecting".
  // Returns { send(msg), isOpen(), close() }.
  function connect(handlers) {
    const conn = { ws: null, retries: 0, timer: null, closed: false };

    function open() {
      if (conn.closed) return;
      clearTimeout(conn.timer);
      conn.timer = null;
      let ws;
      try {
        ws = new WebSocket(socketUrl());
      } catch (e) {
        retry();
        return;
      }
      conn.ws = ws;
      handlers.onConn(conn.retries ? "reconnecting" : "connecting");
      ws.onopen = () => {
        conn.retries = 0;
        handlers.onConn("live");
        handlers.onOpen();
      };
      ws.onmessage = (m) => receive(m.data);
      ws.onerror = () => {};  // onclose follows and handles it
      ws.onclose = () => {
        if (conn.ws !== ws) return;
        conn.ws = null;
        if (!conn.closed) retry();
      };
    }

    // Exponential backoff with jitter: 0.5 s, 1 s, 2 s ... capped at 8 s.
    function retry() {
      handlers.onConn("reconnecting");
      const delay = Math.min(8000, 500 * 2 ** Math.min(conn.retries, 5)) * (0.8 + 0.4 * Math.random());
      conn.retries++;
      conn.timer = setTimeout(open, delay);
    }

    function receive(raw) {
      let msg;
      try {
        msg = JSON.parse(raw);
      } catch (e) {
        return;
      }
      if (msg.type === "error") console.warn("inflight /engine/ws:", msg.message);
      else handlers.onMessage(msg);
    }

    const isOpen = () => !!conn.ws && conn.ws.readyState === WebSocket.OPEN;
    open();
    return {
      isOpen,
      send(msg) {
        if (isOpen()) conn.ws.send(JSON.stringify(msg));
      },
      close() {
        conn.closed = true;
        clearTimeout(conn.timer);
        const ws = conn.ws;
        conn.ws = null;
        if (ws) {
          ws.onclose = ws.onmessage = ws.onopen = null;
          ws.close();
        }
      },
    };
  }

  return { connect };
});
