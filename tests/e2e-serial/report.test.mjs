// The console's sale report in real headless Chromium, on a flashgate-load
// run with a waiting room, a proof of work and K = 4 stock shards: opened
// while the sale runs and after it closed, in English and in Chinese. The
// figures the page shows are the history's; its four charts are drawn over
// the whole sale; the run's own check of the history passes. Screenshots go
// to test-artifacts/screenshots/report-*.png.
import { after, before } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { join } from "node:path";
import * as keys from "../support/keys.mjs";
import { EVENTUALLY_MS, sleep } from "../support/client.mjs";
import { ROOT } from "../support/runtime.mjs";
import { useGate } from "../support/system.mjs";
import { launch, open, shot, SHOTS, violations } from "../support/browser.mjs";

const target = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: ROOT })).target_directory;
const LOAD = join(target, "debug", "flashgate-load");
const shop = useGate({ origin: true, vars: { ORIGIN_READ_TOKEN: keys.READ_TOKEN } });
let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

function load(args) {
  return new Promise((ok) => {
    const proc = spawn(LOAD, [...args, "--json"], { env: { ...process.env, FLASHGATE_ADMIN_TOKEN: keys.ADMIN_TOKEN } });
    let stdout = "";
    let stderr = "";
    proc.stdout.on("data", (d) => (stdout += d));
    proc.stderr.on("data", (d) => (stderr += d));
    proc.on("close", (code) => ok({ code, report: stdout ? JSON.parse(stdout) : null, stderr }));
  });
}

/** The console, its token used and `product` opened, once its report shows. */
async function consoleOn(product, lang) {
  const { ctx, page } = await open(browser, shop.url, "/admin", { lang, width: 1000 });
  await page.fill("#token", keys.ADMIN_TOKEN);
  await page.click("#save-token");
  await page.fill("#product", product);
  await page.click("#open");
  await page.waitForFunction(() => document.querySelectorAll("#r-nums div").length > 10 && document.querySelectorAll("#r-clicks rect").length > 0, null, { timeout: EVENTUALLY_MS });
  return { ctx, page };
}

/** The figure the page shows under `key`. */
const figure = (page, key) => page.textContent(`#r-nums [data-k="${key}"] b`);

shop.test("the report of a K = 4 sale with a waiting room and a proof of work, live and finished, en and zh", { timeout: 300_000 }, async ({ api, gate, origin }) => {
  const product = "report-k4";
  const run = load([
    "--url", gate.url, "--product", product, "--stock", "120", "--buyers", "900", "--connections", "48",
    "--shards", "4", "--admit-per-s", "150", "--pow-level", "1", "--arrival", "ramp:8000", "--hold-ttl-ms", "4000",
    "--shares", "60,20,20", "--seed", "39",
    "--payment-keys", keys.PAYMENT_KEYS, "--origin", origin.url, "--origin-read-token", keys.READ_TOKEN,
  ]);
  // Live: the sale is made by the run; the console opens on it mid-run.
  const deadline = Date.now() + EVENTUALLY_MS;
  while ((await api.product(product)).status !== 200 && Date.now() < deadline) await sleep(200);
  await sleep(2_500);
  let liveCounts = Infinity;
  for (const lang of ["en-US", "zh-CN"]) {
    const live = await consoleOn(product, lang);
    await shot(live.page, `report-live-${lang.slice(0, 2)}`);
    liveCounts = Math.min(liveCounts, await live.page.locator("#r-clicks rect").count());
    assert.deepEqual(violations(live.page), [], lang);
    await live.ctx.close();
  }

  const { code, report, stderr } = await run;
  const seen = `seed 39: ${JSON.stringify({ outcomes: report?.outcomes, history: report?.history, verdict: report?.verdict?.violations })}`;
  assert.equal(code, 0, `exit ${code}: ${stderr} ${seen}`);
  assert.equal(report.status, "pass", seen);
  assert.deepEqual(report.history.violations, [], seen);
  assert.ok(report.history.history.reserved > 0 && report.history.seen.sold_out > 0, seen);
  // Once the stock is gone a K = 4 product with a room says so: no buyer
  // spins on 503s (the escrow's drains reach the shards while tickets wait).
  assert.equal(report.unavailable_answers, 0, seen);

  // Finished: the product is closed; the report covers the whole sale.
  const h = (await (await fetch(`${gate.url}/admin/products/${product}/history`, { headers: { authorization: `Bearer ${keys.ADMIN_TOKEN}` } })).json());
  assert.equal(h.objects, 4);
  assert.equal(h.drift.drift_units, 0, JSON.stringify(h.drift));
  for (const lang of ["en-US", "zh-CN"]) {
    const { ctx, page } = await consoleOn(product, lang);
    await page.waitForFunction(() => document.getElementById("s-state").textContent !== "–");
    const num = (n) => Number(n).toLocaleString(lang);
    assert.equal(await figure(page, "r_reserved"), num(h.summary.reserved), lang);
    assert.equal(await figure(page, "r_confirmed"), num(h.summary.confirmed), lang);
    // Sold-out answers the edge gave reach the history with its next
    // refresh (the console's own reads bring one): between what was read
    // before and what the buyers saw.
    const soldOut = Number((await figure(page, "r_sold_out")).replace(/\D/g, ""));
    assert.ok(soldOut >= h.summary.refused.sold_out && soldOut <= report.history.seen.sold_out, `${lang}: ${soldOut} ${seen}`);
    assert.ok((await page.locator("#r-clicks rect").count()) >= liveCounts, "the finished sale's chart covers at least what the live one did");
    for (const chart of ["r-stock", "r-queue", "r-outbox"]) assert.ok((await page.locator(`#${chart} polyline`).count()) >= 2, chart);
    // The time axis spans the sale: from its first bucket to its last.
    const first = h.buckets[0].start_ms;
    const last = h.buckets.at(-1).start_ms + h.step_ms;
    assert.ok(last - first >= 5_000, `the sale spans ${last - first} ms`);
    if (lang === "zh-CN") assert.equal(await page.textContent('#r-nums [data-k="r_sold_out"] span'), "售罄拒绝");
    assert.deepEqual(violations(page), [], lang);
    await shot(page, `report-finished-${lang.slice(0, 2)}`);
    await page.locator("section", { has: page.locator("#r-nums") }).screenshot({ path: join(SHOTS, `report-finished-${lang.slice(0, 2)}-section.png`) });
    await ctx.close();
  }
});
