// The /join page: one prompt at a time, its answer read from the server-sent events of POST /join/ask.
// Everything the server or the user wrote goes into the page as text (textContent), never as HTML.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const nameIn = $("name"), promptIn = $("prompt"), send = $("send"), stop = $("stop");
  const notice = $("notice"), answer = $("answer"), out = $("out"), meta = $("meta"), rid = $("rid");
  const NAME_KEY = "inflight.join.name";
  const FINISHED = { stop: "Done.", length: "Done: the answer reached its length limit.",
                     abort: "Stopped before the end.", error: "The engine failed on this request." };
  let controller = null;

  nameIn.value = localStorage.getItem(NAME_KEY) || "";

  function say(text, kind = "info") {
    notice.textContent = text;
    notice.dataset.kind = kind;
    notice.hidden = !text;
  }

  function busy(on) {
    send.disabled = on;
    stop.hidden = !on;
  }

  // The server's reason, said kindly: each status gets a plain first sentence.
  function refusal(status, message) {
    const lead = { 429: "The room is busy, so each phone waits its turn.", 413: "That is a bit long.",
                   415: "This page needs a newer browser.", 403: "This page must be opened from the address on the screen.",
                   503: "The engine is busy or still starting; try again in a moment." }[status];
    return [lead, message].filter(Boolean).join(" ") || `The server said no (HTTP ${status}).`;
  }

  async function refused(res) {
    let message = "";
    try { message = (await res.json()).error || ""; } catch { /* not JSON */ }
    answer.hidden = true;
    say(refusal(res.status, message), "warn");
  }

  function onMessage(msg) {
    if (msg.request_id != null) {
      rid.textContent = `#${msg.request_id}`;
      say(`On the big screen as #${msg.request_id}, labelled with your name.`);
    }
    if (msg.text) out.append(document.createTextNode(msg.text));
    if (msg.error) say(msg.error, "warn");
    if (msg.finish_reason) meta.textContent = FINISHED[msg.finish_reason] || `Finished (${msg.finish_reason}).`;
  }

  async function follow(body) {
    const reader = body.getReader(), decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const frame = buf.slice(0, end);
        buf = buf.slice(end + 2);
        for (const line of frame.split("\n")) if (line.startsWith("data: ")) onMessage(JSON.parse(line.slice(6)));
      }
    }
  }

  async function ask(ev) {
    ev.preventDefault();
    const name = nameIn.value.trim(), prompt = promptIn.value.trim();
    if (!name || !prompt) return say("Please give your name and a prompt.", "warn");
    localStorage.setItem(NAME_KEY, name);
    say("Sending…");
    out.textContent = meta.textContent = rid.textContent = "";
    answer.hidden = false;
    busy(true);
    controller = new AbortController();
    try {
      const res = await fetch("/join/ask", { method: "POST", headers: { "Content-Type": "application/json" },
                                             body: JSON.stringify({ name, prompt }), signal: controller.signal });
      if (res.ok) await follow(res.body);
      else await refused(res);
    } catch (e) {
      if (e.name === "AbortError") meta.textContent = FINISHED.abort;
      else say(`The connection dropped (${e.message}). Please try again.`, "warn");
    } finally {
      busy(false);
      controller = null;
    }
  }

  $("ask").addEventListener("submit", ask);
  stop.addEventListener("click", () => controller && controller.abort());
})();
