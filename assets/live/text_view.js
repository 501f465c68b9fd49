// View: the generated text, one card per request (newest first), streamed from the step deltas.

defineLive("TextView", ["Common", "LiveState", "Waits"], () => {
  const { el, setText, reqColor } = Common;
  const { KIND } = LiveState;
  const MAX_CARDS = 24;  // cards per lane

  function build(inst, cell) {
    const list = el("div", "ifl-cards");
    // The wheel scrolls the page, not this pane, until the pane is clicked (it used to catch the wheel of
    // anyone scrolling past it); leaving it gives the wheel back to the page.
    list.title = "Click to scroll the answers";
    list.addEventListener("click", () => list.classList.add("ifl-armed"));
    list.addEventListener("mouseleave", () => list.classList.remove("ifl-armed"));
    cell.appendChild(list);
    return { cell, list, cards: new Map(), order: "" };
  }

  // The card's state, and while it waits, why (the scheduler's reason).
  function statusLabel(R, S, inst) {
    const base = stateLabel(R, S);
    return !R.done && R.wait && inst ? `${base} · ${Waits.say(inst.contract, R.wait, inst.serviceClock())}` : base;
  }

  function stateLabel(R, S) {
    if (R.lost) return "ended unseen (events skipped: this view fell behind)";
    if (R.reason === "abort") return "aborted";
    if (R.reason === "error") return "error";
    if (R.state === KIND.finished) {
      const held = R.lastKind === KIND.held && R.lastIt === S.lastIt && S.kv && S.kv.block_tables
        && String(R.rid) in S.kv.block_tables;
      return `finished${R.reason ? ` · ${R.reason}` : ""}${held ? " · still held" : ""}`;
    }
    return { queued: "queued", prefill: "prefill", decode: "decoding", preempted: "preempted", swapped: "swapped out",
             recompute: "recomputing", held: "held" }[R.state] || R.state;
  }

  function draw(inst, S, view) {
    const sig = `${S.rev}|${S.textRev}|${inst.sel}`;
    if (!inst.changed(view.list, sig)) return;
    const ids = [...S.reqs.keys()].sort((a, b) => b - a).slice(0, MAX_CARDS);
    const keep = new Set(ids);
    for (const [rid, card] of view.cards) {
      if (!keep.has(rid)) {
        card.node.remove();
        view.cards.delete(rid);
      }
    }
    const order = ids.join(",");
    ids.forEach((rid) => {
      const R = S.reqs.get(rid);
      let card = view.cards.get(rid);
      if (!card) view.cards.set(rid, (card = buildCard(inst, R)));
      updateCard(inst, S, R, card);
    });
    if (order !== view.order) {  // newest first; only touch the DOM order when it changed
      view.order = order;
      ids.forEach((rid) => view.list.appendChild(view.cards.get(rid).node));
    }
    if (!ids.length && !view.list.firstChild) view.list.appendChild(el("div", "ifl-empty", "no requests yet"));
    else if (ids.length) view.list.querySelectorAll(".ifl-empty").forEach((n) => n.remove());
  }

  function buildCard(inst, R) {
    const node = el("div", "ifl-card");
    const head = el("div", "ifl-card-head");
    const chip = el("span", "ifl-chip", `#${R.rid}`);
    chip.style.background = reqColor(R.rid);
    const tag = el("span", "ifl-tag", "");
    const state = el("span", "ifl-state", "");
    const count = el("span", "ifl-count", "");
    head.append(chip, tag, state, count);
    const prompt = el("div", "ifl-prompt", "");
    const out = el("div", "ifl-out", "");
    node.append(head, prompt, out);
    node.style.borderLeftColor = reqColor(R.rid);
    node.onclick = () => inst.pick(R.rid);
    return { node, tag, state, count, prompt, out, textRev: -1 };
  }

  function updateCard(inst, S, R, card) {
    setText(card.tag, R.name ?? R.tag ?? "");  // a participant's name says more than the tag "join"
    card.tag.classList.toggle("ifl-named", R.name != null);
    setText(card.state, statusLabel(R, S, inst));
    card.state.dataset.state = R.state;
    const counts = [];
    if (R.nPrompt != null) counts.push(`${R.nPrompt} prompt`);
    counts.push(`${R.nOut}${R.maxTokens ? `/${R.maxTokens}` : ""} out`);
    if (R.preemptions) counts.push(`${R.preemptions}× preempted`);
    setText(card.count, counts.join(" · "));
    setText(card.prompt, R.synthetic ? `synthetic prompt, ${R.nPrompt ?? "?"} tokens` : R.prompt ?? "");
    card.prompt.classList.toggle("ifl-synthetic", R.synthetic);
    if (card.textRev !== R.textRev || R.synthetic) {
      card.textRev = R.textRev;
      drawOut(card.out, R);
    }
    card.node.classList.toggle("ifl-dim", inst.sel != null && inst.sel !== R.rid);
    card.node.classList.toggle("ifl-sel", inst.sel === R.rid);
  }

  // The answer, and where the request went on past the model's own end (ignore_eos) a mark there and
  // the rest dimmed: a fixed-length scenario's text after it (often a new turn, "system") is the model
  // continuing, not a broken one.
  function drawOut(node, R) {
    const text = outText(R);
    const chars = R.answerEnd == null || R.synthetic ? null : Array.from(text);  // counted in characters
    if (!chars || R.answerEnd > chars.length) {
      if (node.childElementCount || node.textContent !== text) node.textContent = text;
      return;
    }
    const mark = el("span", "ifl-answer-end", "end of answer");
    mark.title = "The model sampled its end-of-text token here. This request asked it to go on to its full "
      + "length (ignore_eos: the scenario fixes every request's length), so the dimmed text after the mark is "
      + "the model continuing past its answer; a chat server would have stopped here.";
    node.replaceChildren(chars.slice(0, R.answerEnd).join(""), mark,
                         el("span", "ifl-past-answer", chars.slice(R.answerEnd).join("")));
  }

  // A synthetic prompt's answer is shown as its length: decoded from random token ids, it reads as noise.
  function outText(R) {
    if (R.synthetic) return `${R.nOut} token${R.nOut === 1 ? "" : "s"} generated${R.done ? "" : " so far"}`;
    return R.text || (R.done ? (R.error ? `(${R.error})` : "(no text)") : "…");
  }

  return { build, draw, statusLabel };
});
