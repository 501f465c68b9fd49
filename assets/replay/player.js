// Plays a recording embedded in this page (engine/workshop/recording/web_page.py) into the live views, at
// its recorded pacing, with no server: play, pause, speed and seek. The views are the app's own; they get
// the recorded events as the socket would hand them over, and the recorded service's status with the
// clock at the playhead. The events come in chunks, each gzipped in a script tag of its own: a chunk is
// unpacked when the playhead enters the one before it, and only those two are kept, so a long recording
// opens at once and holds little memory. A seek shows its chunk from the start, as the app's replay does.
(() => {
  const rec = JSON.parse(document.getElementById("ifl-recording").textContent);
  const host = document.getElementById("host");
  const $ = (s) => document.querySelector(s);
  const ui = { play: $(".ifl-play"), speed: $(".ifl-speed"), seek: $(".ifl-seek"), at: $(".ifl-at") };
  const player = { pos: rec.start, speed: 1, playing: true, chunk: 0, next: 0, events: null,
                   last: performance.now(), inst: null };
  const unpacking = new Map();  // chunk -> the promise of its [time, event] pairs
  const unpacked = new Map();   // chunk -> its pairs, once there

  // Chunk i's pairs, or null if it was let go meanwhile (a seek past it: not parsed for nothing).
  async function unpack(i) {
    const b64 = document.getElementById(`ifl-chunk-${i}`).textContent;
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const text = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
    return unpacking.has(i) ? JSON.parse(text) : null;
  }

  function want(i) {
    if (i >= rec.chunks.length || unpacking.has(i)) return;
    unpacking.set(i, unpack(i).then((pairs) => { if (pairs && unpacking.has(i)) unpacked.set(i, pairs); })
      .catch((e) => { player.error = `this page cannot unpack its recording (${e.message || e})`; }));
  }

  // Enter chunk c: its events (now, or when unpacked), the next one unpacked ahead, the others let go.
  function enter(c) {
    player.chunk = c;
    player.next = 0;
    if (c >= rec.chunks.length) { player.events = []; return; }  // (a recording of no events)
    for (const i of [...unpacking.keys()]) if (i !== c && i !== c + 1) { unpacking.delete(i); unpacked.delete(i); }
    want(c);
    want(c + 1);
    player.events = unpacked.get(c) || null;
    if (player.events) player.error = null;
    else unpacking.get(c).then(() => {
      if (player.chunk === c && unpacked.has(c)) { player.events = unpacked.get(c); player.error = null; }
    });
  }

  function chunkAt(pos) {
    let c = 0;
    while (c + 1 < rec.chunks.length && rec.chunks[c + 1].t0 <= pos) c++;
    return c;
  }

  function mount() {
    if (player.inst) player.inst.cleanup();
    liveView({ parentElement: host, data: rec.view, setStateValue: () => {} });
    player.inst = host.querySelector(".ifl-root").inflight;
    player.inst.link.conn = "live";  // the events come from this page: the views say "recording", not "connecting"
  }

  // The recorded events up to the playhead, in one batch (up to where a chunk is still being unpacked).
  function catchUp() {
    const batch = [];
    while (player.events) {
      const events = player.events;
      while (player.next < events.length && events[player.next][0] <= player.pos) batch.push(events[player.next++][1]);
      if (player.next < events.length || player.chunk + 1 >= rec.chunks.length) break;
      enter(player.chunk + 1);
    }
    if (batch.length) player.inst.applyEvents(batch);
  }

  // The service as recorded, its clock at the playhead (the time axis follows it).
  function showStatus() {
    const replay = { ...rec.status.replay, position: player.pos, speed: player.speed, paused: !player.playing,
                     ended: ended() };
    const inst = player.inst;
    inst.server.status = { ...rec.status, t: player.pos, paused: !player.playing, replay };
    inst.server.clockOffset = player.pos - performance.now() / 1000;
    inst.markDirty();
  }

  // At the end, every event drawn (the last chunk may still be unpacking when the playhead gets there).
  function ended() {
    const last = Math.max(0, rec.chunks.length - 1);
    return player.pos >= rec.end && !!player.events && player.chunk >= last && player.next >= player.events.length;
  }

  function showControls() {
    ui.play.textContent = player.playing ? "Pause" : ended() ? "Play again" : "Play";
    ui.seek.value = String(player.pos - rec.start);
    const at = `${(player.pos - rec.start).toFixed(1)} / ${(rec.end - rec.start).toFixed(1)} s`;
    ui.at.textContent = player.error || at;
    document.body.dataset.ended = String(ended());
  }

  function seek(pos) {
    player.pos = Math.max(rec.start, Math.min(rec.end, pos));
    mount();
    enter(chunkAt(player.pos));
    catchUp();
    showStatus();
    showControls();
  }

  function tick(now) {
    const ready = !!player.events, playing = player.playing;  // the playhead waits while its chunk is unpacked
    if (playing && ready) player.pos = Math.min(rec.end, player.pos + ((now - player.last) / 1000) * player.speed);
    catchUp();
    if (playing && ended()) player.playing = false;
    if (playing || !ready || player.error) {
      showStatus();
      showControls();
    }
    player.last = now;
    requestAnimationFrame(tick);
  }

  ui.play.onclick = () => {
    if (ended()) seek(rec.start);
    player.playing = !player.playing;
    showStatus();
    showControls();
  };
  ui.speed.onchange = () => { player.speed = Number(ui.speed.value); showStatus(); };
  ui.seek.max = String(rec.end - rec.start);
  ui.seek.oninput = () => seek(rec.start + Number(ui.seek.value));
  window.inflightPlayer = player;  // for the console and the browser test
  seek(rec.start);
  requestAnimationFrame(tick);
})();
