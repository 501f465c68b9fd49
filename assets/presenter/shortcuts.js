// The presenter's keyboard: space pause/resume, right arrow one iteration (pausing first), s slow motion,
// 1-9 start scenario n. Runs in the Streamlit page itself; the guard below adds the listener once.
// Each key opens a short-lived /engine/ws connection: its hello carries the current status (paused,
// slow motion), the command follows, and the reply closes it. Keys typed into a field are left alone.
(function () {
  if (window.__inflightShortcuts) return;
  window.__inflightShortcuts = true;
  const SLOW_S = 0.5;
  const url = (window.location.protocol === "https:" ? "wss:" : "ws:") + "//" + window.location.host + "/engine/ws";

  function commandFor(key, status) {
    if (key === " ") return {cmd: status.paused ? "resume" : "pause"};
    if (key === "ArrowRight") return {cmd: status.paused ? "step" : "pause"};
    if (key === "s" || key === "S") return {cmd: "slow_motion", interval_s: status.slow_motion_s > 0 ? 0 : SLOW_S};
    if (/^[1-9]$/.test(key)) return {cmd: "scenario", number: Number(key)};
    return null;
  }

  function send(key) {
    const ws = new WebSocket(url);
    ws.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (msg.type === "hello") {
        ws.send(JSON.stringify(commandFor(key, msg.status)));
      } else if (msg.type === "reply" || msg.type === "error") {
        if (msg.type === "error") console.warn("inflight shortcut:", msg.message);
        window.__inflightLastReply = msg;  // for the browser test
        ws.close();
      }
    };
  }

  function typing(target) {
    const tag = (target && target.tagName) || "";
    return target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(tag));
  }

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    if (commandFor(e.key, {paused: false, slow_motion_s: 0}) === null) return;
    e.preventDefault();  // space would scroll the page
    send(e.key);
  }, true);
})();
