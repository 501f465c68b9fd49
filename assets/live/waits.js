// Why a request waits, in words: the scheduler's own reasons (engine/scheduler/waits.py) phrased with the
// templates the engine sends in the wire contract, so the hover, the cards and the narration say the same.
// Pure (no DOM): it loads in node for the tests.

defineLive("Waits", [], () => {
  const MAX_HISTORY = 8;  // reasons kept per waiting stretch (the latest are the ones shown)

  // One reason -> text. contract.waits: { templates: {why: "text with {fields}"}, launchAt }.
  function say(contract, w, now) {
    if (!w) return "";
    const template = (contract.waits.templates || {})[w.why];
    let text = template ? template.replace(/\{(\w+)\}/g, (_, k) => (w[k] == null ? "?" : String(w[k]))) : String(w.why);
    if (w.kv) text += `; ${w.kv}`;  // a preemption: where its KV went (engine/scheduler/waits.py)
    if (w.launch_at_s != null && now != null) {
      const s = Math.max(0, w.launch_at_s - now);
      text += ` (${contract.waits.launchAt.replace(/\{s(:[^}]*)?\}/, s.toFixed(1))})`;
    }
    return text;
  }

  // A stretch's reasons, oldest first ({t, w}), as tooltip lines: the latest three with how long each held.
  function lines(contract, whys, end, now) {
    if (!whys || !whys.length) return [];
    const shown = whys.slice(-3);
    return shown.map((h, i) => {
      const until = i + 1 < shown.length ? shown[i + 1].t : end;
      const took = until != null && h.t != null ? ` (${Math.max(0, until - h.t).toFixed(1)} s)` : "";
      return `${i === 0 ? "why" : "then"}: ${say(contract, h.w, now)}${took}`;
    });
  }

  // Record a reason on a waiting stretch (an open queued or preempted segment): a new entry when the
  // reason itself changes, the latest details otherwise.
  function note(open, w, t) {
    if (!open) return;
    const whys = open.whys || (open.whys = []);
    const last = whys[whys.length - 1];
    if (last && last.w.why === w.why) last.w = w;
    else whys.push({ t, w });
    if (whys.length > MAX_HISTORY) whys.splice(0, whys.length - MAX_HISTORY);
  }

  return { say, lines, note };
});
