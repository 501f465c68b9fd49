// The live view's modules. Each file registers one module with the modules it needs:
//   defineLive("Gantt", ["Common", "Timeline", "Waits"], () => { ...; return { draw, ... }; });
// and is reachable by its name from any other. A module is made on first use (the views mount after
// every file has run), so the files can be bundled in any order: pages/ui/live_view.py joins them in
// name order. A module that needs one nobody defined, or that needs itself while being made, fails
// loudly, naming them; tests/test_live_modules.py checks that each file declares what it uses.
function defineLive(name, needs, make) {
  const defs = (defineLive.defs ??= new Map());
  defs.set(name, { needs, make });
  Object.defineProperty(globalThis, name, { configurable: true, get: () => makeLive(name) });
}

function makeLive(name) {
  const def = defineLive.defs.get(name);
  const making = (makeLive.making ??= []);
  if (making.includes(name)) throw new Error(`live view: modules need each other while being made: ${[...making, name].join(" -> ")}`);
  const missing = def.needs.filter((n) => !defineLive.defs.has(n));
  if (missing.length) throw new Error(`live view: module ${name} needs ${missing.join(", ")}, which no file defines`);
  making.push(name);
  try {
    const made = def.make();
    Object.defineProperty(globalThis, name, { configurable: true, value: made });  // later uses: no getter
    return made;
  } finally {
    making.pop();
  }
}

if (typeof module !== "undefined") globalThis.defineLive = defineLive;  // node (tests/js): files share it
