// The status line above each lane's column (its name, how it differs from the other lane, its state), and the badges and banner at the top.

defineLive("StatusView", ["Common", "KvBlocks", "LiveState", "Waits"], () => {
  const { el, setText, fmt } = Common;
  const { KIND, maxBatch, prefixOn, isRemote } = LiveState;

  // header: short labels of how this lane differs from the other one, e.g. ["block 128"] (text).
  function build(name, header, inst) {
    const node = el("div", "ifl-status");
    const pill = el("span", "ifl-pill", "…");
    const facts = el("span", "ifl-facts", "");
    const launch = el("button", "ifl-launch", "Launch batch now");
    launch.hidden = true;
    launch.title = "Launch what waits as a batch, full or not (the presenter's)";
    launch.onclick = () => inst && inst.launch(name);
    node.append(el("span", "ifl-sname", name));
    if (header.length) node.append(el("span", "ifl-shead", header.join(" · ")));
    node.append(pill, facts, launch);
    return { node, pill, facts, launch, sig: "" };
  }

  // What the lane's queue waits for: the head's reason (not one merely behind it), as the scheduler said.
  function headWait(S) {
    let best = null;
    for (const R of S.reqs.values()) {
      if (R.done || !R.wait) continue;
      const w = R.wait, rank = w.why === "behind" ? w.rank : w.why === "queued" ? w.ahead + 1 : 0;
      if (!best || rank < best.rank || (rank === best.rank && R.rid < best.R.rid)) best = { R, rank };
    }
    return best ? best.R.wait : null;
  }

  function pillOf(svc, eng) {
    if (svc && eng === undefined) return ["not running", "err"];
    if (eng && eng.error) return ["load error", "err"];
    if (eng && eng.reconfiguring) return ["restarting", "wait"];
    if (eng && !eng.ready) return ["loading model", "wait"];
    if (svc && svc.paused) return ["paused", "pause"];
    if (eng) return ["ready", "ok"];
    return ["connecting", "wait"];
  }

  function draw(inst, S, view) {
    const svc = inst.server.status;
    const eng = svc && svc.engines ? svc.engines[S.name] : undefined;
    const queue = [...S.reqs.values()].filter((R) => [KIND.queued, KIND.preempted, KIND.swapped].includes(R.state)).length;
    const [pill, cls] = pillOf(svc, eng);
    const config = inst.laneConfig(S.name);
    const facts = isRemote(S, config) ? remoteFacts(S, config, queue) : engineFacts(S, config, queue, inst.contract.parts);
    const wait = queue ? headWait(S) : null;
    if (wait) facts.push(Waits.say(inst.contract, wait, inst.serviceClock()));
    if (svc && svc.slow_motion_s) facts.push(`slow motion ${fmt(svc.slow_motion_s, 2)} s`);
    if (eng && eng.error) facts.push(eng.error);
    const ev = S.lastEvent;
    if (ev && ev.error && ev.event !== "ready" && ev.event !== "restarted") facts.push(`${ev.event.replace(/_/g, " ")}: ${ev.error}`);
    const canLaunch = inst.server.role === "presenter" && !!wait && wait.why === "batch_filling" && !(svc && svc.replay);
    const sig = `${pill}|${facts.join("|")}|${canLaunch}`;
    if (view.sig === sig) return;
    view.sig = sig;
    view.launch.hidden = !canLaunch;
    setText(view.pill, pill);
    view.pill.dataset.kind = cls;
    setText(view.facts, facts.join("  ·  "));
  }

  function engineFacts(S, config, queue, parts) {
    const holders = (kv) => (kv && kv.block_tables ? Object.keys(kv.block_tables).length : 0);  // rows holding KV
    const limit = maxBatch(S, config);
    const batch = `batch ${holders(S.kv)}${limit ? `/${limit}` : ""}`;
    // a disaggregated lane: the decode engine's batch (S.kv), then the prefill engine's pool holders
    const split = S.pools ? [`${batch} decoding`, `${holders(S.pools[parts.prefill])} on the prefill engine`] : [batch];
    const part = S.steps.length ? S.steps[S.steps.length - 1].part : null;  // which engine stepped last
    const last = S.lastStepMs != null ? fmt(S.lastStepMs, 0) + " ms" + (part ? ` (${part})` : "") : "–";
    return [...split, `queue ${queue}`, `last step ${last}`, `iteration ${Math.max(S.lastIt, 0)}`];
  }

  // A remote server: no batch or iterations of ours to count; its own gauges where it exports them.
  function remoteFacts(S, config, queue) {
    const host = config && config.remote ? hostOf(config.remote) : "";
    const g = S.server[S.server.length - 1];
    const gauges = g ? [g.running != null ? `${fmt(g.running, 0)} running` : null,
                        g.waiting != null ? `${fmt(g.waiting, 0)} waiting` : null,
                        g.kv != null ? `KV ${fmt(g.kv, 0)}%` : null].filter(Boolean) : [];
    return [`remote server${host ? ` ${host}` : ""}`,
            gauges.length ? `its /metrics: ${gauges.join(", ")}` : "no /metrics read from it",
            `${queue} before their first token`];
  }

  function hostOf(url) {
    try {
      return new URL(url).host;
    } catch (e) {
      return "";
    }
  }

  // The badges and banner at the top, from the component's skeleton (live_view.html).
  function badges(root) {
    const q = (s) => root.querySelector(s);
    return { banner: q(".ifl-banner"), conn: q(".ifl-conn"), follow: q(".ifl-follow"), note: q(".ifl-note"),
             gpu: q(".ifl-gpu"), fps: q(".ifl-fps") };
  }

  // b: badges(); zoomed: the timeline shows a dragged range, not "now".
  function drawBadges(inst, b, zoomed) {
    const st = inst.state;
    const live = inst.server.status && inst.server.status.replay ? "● recording" : "● live";  // a replay (engine/workshop/recording)
    setText(b.conn, inst.link.conn === "live" ? live : inst.link.conn === "reconnecting" ? "reconnecting…" : "connecting…");
    b.conn.dataset.kind = inst.link.conn;
    b.follow.hidden = !zoomed;
    setText(b.follow, "zoomed · double-click a chart to follow now");
    const g = st && st.gpu.length ? st.gpu[st.gpu.length - 1] : null;
    inst.root.classList.toggle("ifl-has-gpu", !!g);
    const lanes = st ? inst.cfg.lanes.map((n) => st.by.get(n)).filter(Boolean) : [];
    inst.root.classList.toggle("ifl-has-prefix", lanes.some((S) => hasPrefix(inst, S)));
    inst.root.classList.toggle("ifl-has-spec", lanes.some((S) => speculates(inst, S)));
    inst.root.classList.toggle("ifl-has-swap", lanes.some((S) => S.host != null));
    inst.root.classList.toggle("ifl-has-stall", lanes.some((S) => S.stalls > 0));
    inst.root.classList.toggle("ifl-has-split", lanes.some((S) => S.pools != null));
    inst.root.classList.toggle("ifl-has-roofline", lanes.some((S) => S.peaks != null));
    inst.root.classList.toggle("ifl-has-paused", !!st && st.pauses.length > 0 && inst.cfg.axis === "time");
    inst.root.classList.toggle("ifl-has-remote", lanes.some((S) => isRemote(S, inst.laneConfig(S.name))));
    b.gpu.hidden = !g;
    if (g) setText(b.gpu, `GPU ${fmt(g.util, 0)}% · ${fmt(g.usedMb / 1024, 1)} / ${fmt(g.totalMb / 1024, 1)} GiB`);
    b.note.hidden = !(st && st.coalesced > 0);
    if (st && st.coalesced > 0) {
      setText(b.note, `fell behind: ${st.coalesced.toLocaleString()} events skipped`);
      b.note.title = "This view could not keep up with the engines, so the server sent it only the latest "
        + "events and skipped the ones between: a row may end unseen and a chart may have a gap. The engines "
        + "lost nothing.";
    }
    drawBanner(inst, b.banner);
  }

  // A lane that caches prefixes, or whose KV snapshot has shared or cached blocks (its legends show).
  function hasPrefix(inst, S) {
    if (!S) return false;
    if (prefixOn(S, inst.laneConfig(S.name))) return true;
    return !!S.kv && KvBlocks.sharesOrCaches(S.kv);
  }

  // A lane that drafts tokens (its configuration says so, or its steps carried drafts).
  function speculates(inst, S) {
    const config = inst.laneConfig(S.name);
    return (config && config.speculative && config.speculative !== "off") || S.drafted > 0;
  }

  // Model download / first start: progress messages shown prominently until every engine is ready.
  function drawBanner(inst, banner) {
    const svc = inst.server.status, st = inst.state;
    const engines = svc && svc.engines ? Object.entries(svc.engines).filter(([n]) => inst.cfg.lanes.includes(n)) : [];
    const failed = engines.find(([, e]) => e.error);
    const loading = engines.some(([, e]) => !e.ready && !e.error);
    let text = "", kind = "";
    if (failed) {
      text = `Engine “${failed[0]}” failed to load: ${failed[1].error}`;
      kind = "err";
    } else if (svc && svc.replay) {
      [text, kind] = [`${svc.replay.label} · ${svc.replay.speed}x${svc.replay.paused ? " · paused" : ""}`, "wait"];
    } else if (loading || (!svc && st && st.progress)) {
      text = `Loading the model… ${st && st.progress ? st.progress.message : ""}`;
      kind = "wait";
    }
    banner.hidden = !text;
    setText(banner, text);
    banner.dataset.kind = kind;
  }

  return { build, draw, badges, drawBadges, headWait };
});
