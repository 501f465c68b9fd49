// Plays a recording embedded in this page (engine/workshop/recording/web_page.py) into the live views, at
// its recorded pacing, with no server: play, pause, speed and seek. The views are the app's own; they get
// the recorded events as the socket would hand them over, and the recorded service's status with the
// clock at the playhead.
(() => {
  const rec = JSON.parse(document.getElementById("ifl-recording").textContent);
  const host = document.getElementById("host");
  const $ = (s) => document.querySelector(s);
  const ui = { play: $(".ifl-play"), speed: $(".ifl-speed"), seek: $(".ifl-seek"), at: $(".ifl-at") };
  const player = { pos: rec.start, speed: 1, playing: true, next: 0, last: performance.now(), inst: null };

  function mount() {
    if (player.inst) player.inst.cleanup();
    liveView({ parentElement: host, data: rec.view, setStateValue: () => {} });
    player.inst = host.querySelector(".ifl-root").inflight;
    player.inst.link.conn = "live";  // the events come from this page: the views say "recording", not "connecting"
    player.next = 0;
  }

  // The recorded events up to the playhead, in one batch.
  function catchUp() {
    const batch = [];
    while (player.next < rec.times.length && rec.times[player.next] <= player.pos) batch.push(rec.events[player.next++]);
    if (batch.length) player.inst.applyEvents(batch);
  }

  // The service as recorded, its clock at the playhead (the time axis follows it).
  function showStatus() {
    const replay = { ...rec.status.replay, position: player.pos, speed: player.speed, paused: !player.playing,
                     ended: player.pos >= rec.end };
    const inst = player.inst;
    inst.server.status = { ...rec.status, t: player.pos, paused: !player.playing, replay };
    inst.server.clockOffset = player.pos - performance.now() / 1000;
    inst.markDirty();
  }

  function showControls() {
    ui.play.textContent = player.playing ? "Pause" : player.pos >= rec.end ? "Play again" : "Play";
    ui.seek.value = String(player.pos - rec.start);
    ui.at.textContent = `${(player.pos - rec.start).toFixed(1)} / ${(rec.end - rec.start).toFixed(1)} s`;
    document.body.dataset.ended = String(player.pos >= rec.end);
  }

  function seek(pos) {
    player.pos = Math.max(rec.start, Math.min(rec.end, pos));
    mount();
    catchUp();
    showStatus();
    showControls();
  }

  function tick(now) {
    if (player.playing) {
      player.pos = Math.min(rec.end, player.pos + ((now - player.last) / 1000) * player.speed);
      catchUp();
      if (player.pos >= rec.end) player.playing = false;
      showStatus();
      showControls();
    }
    player.last = now;
    requestAnimationFrame(tick);
  }

  ui.play.onclick = () => {
    if (player.pos >= rec.end) seek(rec.start);
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
