// Loads the live view's modules in node for the tests: every module registers itself by name
// (assets/live/modules.js) and is then a global; live_view.js, the browser's entry point (an ES module),
// stays out.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const ASSETS = path.join(__dirname, "..", "..", "assets", "live");
require(path.join(ASSETS, "modules.js"));
for (const f of fs.readdirSync(ASSETS).sort()) {
  if (f.endsWith(".js") && f !== "modules.js" && f !== "live_view.js") require(path.join(ASSETS, f));
}
