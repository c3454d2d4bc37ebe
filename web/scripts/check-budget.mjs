// Fails the build when the JavaScript a browser loads before first paint exceeds the budget:
// the gzip sizes of the scripts index.html names (entry and modulepreload) plus every chunk
// they import statically, transitively. Lazily imported chunks are not counted.
import { readFileSync, existsSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

const budget = Number(process.env.KOLLECT_JS_BUDGET_BYTES ?? 300 * 1024);
const dist = process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), "../../hub/internal/webui/dist");
const indexPath = join(dist, "index.html");
if (!existsSync(indexPath)) {
  console.error(`check-budget: ${indexPath} does not exist; run the build first`);
  process.exit(1);
}
const html = readFileSync(indexPath, "utf8");
const roots = [...html.matchAll(/<(?:script[^>]*\ssrc|link[^>]*rel="modulepreload"[^>]*\shref)="([^"]+\.js)"/g)].map((m) => m[1]);
if (!roots.length) {
  console.error("check-budget: index.html names no script");
  process.exit(1);
}

// Static imports in a minified ES module: `import"./x.js"`, `import{a}from"./x.js"`,
// `export*from"./x.js"`. Dynamic `import("./x.js")` is skipped on purpose.
const staticImport = /(?:^|[;}\s])(?:import|export)\s*(?:[\w*{}\s,$]*?\s*from\s*)?["'](\.{1,2}\/[^"']+\.js)["']/g;

const seen = new Map();
const visit = (urlPath) => {
  const rel = urlPath.replace(/^\//, "");
  if (seen.has(rel)) return;
  const file = join(dist, rel);
  const code = readFileSync(file);
  seen.set(rel, gzipSync(code, { level: 9 }).length);
  for (const m of code.toString("utf8").matchAll(staticImport)) visit(posix.join(posix.dirname("/" + rel), m[1]));
};
roots.forEach(visit);

let total = 0;
for (const [file, size] of seen) {
  total += size;
  console.log(`  ${(size / 1024).toFixed(1).padStart(7)} KB  ${file}`);
}
const verdict = total <= budget ? "within" : "OVER";
console.log(`first-load JavaScript: ${(total / 1024).toFixed(1)} KB gzipped, ${verdict} the budget of ${(budget / 1024).toFixed(0)} KB`);
if (total > budget) process.exit(1);
