// The live view's modules. Each file registers one module with the modules it needs:
//   defineLive("Gantt", ["Common", "Waits"], () => { ...; return { draw, ... }; });
// and is reachable by its name from any other. A module is made on first use (the views mount after
// every file has run), the modules it needs before it, so the files can be bundled in any order
// (engine/paths.py live_view_js() joins them in name order). A need that no file defines, or modules
// that need each other, fail loudly, naming them; tests/assets/live/test_live_modules.py checks that each file
// declares what it uses.
function defineLive(name, needs, make) {
  const defs = (defineLive.defs ??= new Map());
  defs.set(name, { needs, make });
  Object.defineProperty(globalThis, name, { configurable: true, get: () => makeLive(name, []) });
}

// chain: the modules being made that need this one, outermost first.
function makeLive(name, chain) {
  if (chain.includes(name)) throw new Error(`live view: modules need each other: ${[...chain, name].join(" -> ")}`);
  const def = defineLive.defs.get(name);
  for (const need of def.needs) {
    if (!defineLive.defs.has(need)) throw new Error(`live view: module ${name} needs ${need}, which no file defines`);
    if (Object.getOwnPropertyDescriptor(globalThis, need).get) makeLive(need, [...chain, name]);  // not made yet
  }
  const made = def.make();
  Object.defineProperty(globalThis, name, { configurable: true, value: made });  // later uses: no getter
  return made;
}

if (typeof module !== "undefined") globalThis.defineLive = defineLive;  // node (tests/js): files share it
