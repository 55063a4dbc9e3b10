// The ALTCHA widget the gate serves (web/vendor/altcha/) is the npm
// package's own files, unmodified, at the version package.json pins and the
// served paths name; and the gate answers each path with those bytes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../support/runtime.mjs";
import { useGate } from "../support/system.mjs";

const FILES = [
  ["altcha.js", "dist/external/altcha.min.js", "text/javascript"],
  ["pbkdf2.js", "dist/workers/pbkdf2.js", "text/javascript"],
  ["altcha.css", "dist/external/altcha.css", "text/css"],
  ["zh-cn.js", "dist/i18n/zh-cn.js", "text/javascript"],
  ["LICENSE.txt", "LICENSE.txt", null],
];
const pkg = JSON.parse(readFileSync(join(ROOT, "node_modules/altcha/package.json"), "utf8"));
const pinned = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).devDependencies.altcha;

const system = useGate();

test("the vendored files are the pinned package's, byte for byte", () => {
  assert.equal(pkg.version, pinned);
  for (const [mine, theirs] of FILES) {
    assert.ok(readFileSync(join(ROOT, "web/vendor/altcha", mine)).equals(readFileSync(join(ROOT, "node_modules/altcha", theirs))), `${mine} differs from ${theirs}`);
  }
});

system.test("the gate serves them under the version's path, as they are", async () => {
  for (const [mine, , type] of FILES.filter((f) => f[2])) {
    const r = await fetch(`${system.url}/vendor/altcha-${pkg.version}/${mine}`);
    assert.equal(r.status, 200, mine);
    assert.ok(r.headers.get("content-type").startsWith(type), `${mine}: ${r.headers.get("content-type")}`);
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    assert.ok(Buffer.from(await r.arrayBuffer()).equals(readFileSync(join(ROOT, "web/vendor/altcha", mine))), mine);
  }
  // Nothing else under it.
  const other = await fetch(`${system.url}/vendor/altcha-${pkg.version}/LICENSE.txt`);
  assert.equal(other.status, 404);
});
