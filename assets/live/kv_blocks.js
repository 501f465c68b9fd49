// Per-block state of one KV snapshot (a step event's kv object): who holds each block, at which
// logical index and with how many tokens; which blocks are shared (in more than one block table: the
// prefix cache handed them to several requests) and which are cached-evictable (ref count 0, reused on
// a prefix hit, else evicted least recently used first). The wire carries only the tables and the
// cached list (whole, or the changes since the engine's previous step: fold); this is their inverse,
// derived once per snapshot. Pure data: loads in node for the tests.

defineLive("KvBlocks", ["Contract"], () => {
  const clamp = (x, a, b) => Math.min(b, Math.max(a, x));
  const derived = new WeakMap();  // kv snapshot -> its per-block arrays
  const light = new WeakMap();    // kv snapshot -> sharesOrCaches()
  const handed = new WeakMap();   // kv snapshot -> the derived arrays of the snapshot it was folded from

  // -> { n, bs, owner (first holder or -1), logical, tokens, refs (holders per block), sharers (block ->
  // [{ rid, logical }], shared blocks only), lru (position in the eviction order, -1 when not cached),
  // cached (count), held, slots, used, reservedUnused, tables }. Good until a later snapshot of the same pool
  // is asked for: its arrays then pass on to that one (ask again for this one's).
  function of(kv) {
    let kb = derived.get(kv);
    if (kb && !kb.spent) return kb;
    const n = kv.num_blocks, bs = kv.block_size, tables = kv.block_tables || {};
    kb = { n, bs, ...blockArrays(n, handed.get(kv)), sharers: new Map(), cached: 0, held: 0, slots: 0,
           used: kv.used, reservedUnused: kv.reserved_unused_slots, tables };
    for (const [key, table] of Object.entries(tables)) addTable(kb, Number(key), table, (kv.kv_tokens || {})[key] ?? 0);
    (kv.cached || []).forEach((b, i) => {
      if (b >= 0 && b < n && kb.refs[b] === 0) kb.lru[b] = kb.cached++;
    });
    derived.set(kv, kb);
    return kb;
  }

  // A snapshot's per-block arrays, cleared: those of the snapshot it was folded from where they are at hand
  // (that one is then spent: of() works it out again if asked), else new. A GPU's pool is hundreds of
  // thousands of blocks, and a lane steps hundreds of times a second.
  function blockArrays(n, old) {
    if (!old || old.spent || old.n !== n) {
      return { owner: new Int32Array(n).fill(-1), logical: new Int32Array(n).fill(-1), tokens: new Int32Array(n),
               refs: new Int32Array(n), lru: new Int32Array(n).fill(-1) };
    }
    old.spent = true;
    const { owner, logical, tokens, refs, lru } = old;
    old.owner = old.logical = old.tokens = old.refs = old.lru = null;  // (a kb kept past its time fails loudly)
    owner.fill(-1);
    logical.fill(-1);
    tokens.fill(0);
    refs.fill(0);
    lru.fill(-1);
    return { owner, logical, tokens, refs, lru };
  }

  function addTable(kb, rid, table, kvTok) {
    kb.held += kvTok;
    kb.slots += table.length * kb.bs;
    table.forEach((b, i) => {
      if (b < 0 || b >= kb.n) return;
      kb.tokens[b] = Math.max(kb.tokens[b], clamp(kvTok - i * kb.bs, 0, kb.bs));
      if (++kb.refs[b] === 1) {
        kb.owner[b] = rid;
        kb.logical[b] = i;
      } else if (kb.refs[b] === 2) kb.sharers.set(b, [{ rid: kb.owner[b], logical: kb.logical[b] }, { rid, logical: i }]);
      else kb.sharers.get(b).push({ rid, logical: i });
    });
  }

  // Whether a snapshot has cached blocks no request holds, or blocks two holders share (the legends' question,
  // asked every frame), from its tables alone: of()'s per-block arrays cost a pass over the whole pool
  // (hundreds of thousands of blocks on a GPU) for a view that may not be on the page.
  function sharesOrCaches(kv) {
    const kb = derived.get(kv);
    if (kb && !kb.spent) return kb.cached > 0 || kb.sharers.size > 0;
    let answer = light.get(kv);
    if (answer === undefined) light.set(kv, (answer = heldTwiceOrCached(kv)));
    return answer;
  }

  function heldTwiceOrCached(kv) {
    const n = kv.num_blocks, held = new Set();
    for (const table of Object.values(kv.block_tables || {})) {
      for (const b of table) {
        if (b < 0 || b >= n) continue;
        if (held.has(b)) return true;
        held.add(b);
      }
    }
    return (kv.cached || []).some((b) => b >= 0 && b < n && !held.has(b));
  }

  // The requests a request shares blocks with: [{ rid, blocks }] by most shared blocks first.
  function sharedWith(kb, rid) {
    const count = new Map();
    for (const b of kb.tables[String(rid)] || []) {
      for (const s of kb.sharers.get(b) || []) if (s.rid !== rid) count.set(s.rid, (count.get(s.rid) || 0) + 1);
    }
    return [...count].map(([r, blocks]) => ({ rid: r, blocks })).sort((a, b) => b.blocks - a.blocks || a.rid - b.rid);
  }

  // A step event's kv as the wire sends it -> the whole snapshot (engine/kv_wire.py fold_kv): a key frame
  // (its tables whole) as it is; otherwise the changes since `prev`, the snapshot of the same engine's
  // previous step (request id -> [start, blocks...] or null; kv_tokens the same, where a scheduled row's
  // is not its entry's context_len; cached when it changed). E: the contract's entry field positions.
  function fold(prev, kv, entries, E) {
    if (kv.block_tables) return kv;
    const base = prev || {};
    const tables = { ...(base.block_tables || {}) }, kvTokens = { ...(base.kv_tokens || {}) };
    for (const e of entries || []) kvTokens[Contract.entryRid(E, e)] = Contract.entryCtx(E, e);
    for (const [rid, change] of Object.entries(kv.tables || {})) {
      if (!Array.isArray(change)) delete tables[rid];
      else {
        const old = tables[rid] || [];
        tables[rid] = old.slice(0, Math.min(Math.max(0, Number(change[0]) || 0), old.length)).concat(change.slice(1));
      }
    }
    for (const [rid, n] of Object.entries(kv.kv_tokens || {})) {
      if (n == null) delete kvTokens[rid];
      else kvTokens[rid] = n;
    }
    const { tables: _changes, ...rest } = kv;
    const out = { ...rest, block_tables: tables, kv_tokens: kvTokens, cached: kv.cached || base.cached || [] };
    const arrays = derived.get(prev) || handed.get(prev);  // (steps folded between two frames pass them on)
    if (arrays) handed.set(out, arrays);
    return out;
  }

  return { of, sharesOrCaches, sharedWith, fold };
});
