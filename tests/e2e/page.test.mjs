// The buyer page in real headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core), against the gate on bare workerd.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { freePort, startGate } from "../support/runtime.mjs";
import { startOrigin } from "../support/origin.mjs";
import { client } from "../support/client.mjs";

let gate;
let origin;
let browser;

before(async () => {
  // The page pays through the origin's demo payment endpoint, which
  // confirms at the gate: each must know the other.
  const gatePort = await freePort();
  origin = await startOrigin({ gateUrl: `http://127.0.0.1:${gatePort}` });
  gate = await startGate({ port: gatePort, originUrl: origin.url, demoPaymentUrl: origin.url });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
});

after(async () => {
  await browser?.close();
  await gate?.stop();
  await origin?.stop();
});

test("a buyer reserves, the button is disabled in flight, pays; the next buyer sees sold out", async () => {
  const api = client(gate.url);
  const product = "page";
  assert.equal((await api.put(product, { stock_total: 2, per_buyer_max: 2, quantity_max: 2, hold_ttl_ms: 60_000 })).status, 201);

  const first = await browser.newContext();
  const page = await first.newPage();
  // Hold the reserve request until the test has looked at the button.
  let release;
  const held = new Promise((ok) => (release = ok));
  let reserveRequests = 0;
  await page.route("**/reservations", async (route) => {
    reserveRequests++;
    await held;
    await route.continue();
  });
  await page.goto(`${gate.url}/?product=${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "2");
  const buy = page.locator("#buy");
  assert.equal(await buy.isEnabled(), true);
  await page.selectOption("#quantity", "2");
  await buy.click();
  // In flight: the button is disabled, so a second click sends nothing.
  await page.waitForFunction(() => document.getElementById("buy").disabled);
  await buy.click({ force: true }).catch(() => {});
  release();
  await page.waitForFunction(() => !document.getElementById("reservation").hidden);
  assert.equal(reserveRequests, 1, "one click, one request");
  assert.equal(await page.textContent("#rstate"), "held");
  assert.equal(await page.textContent("#rqty"), "2");
  const rid = await page.textContent("#rid");

  await page.click("#pay");
  await page.waitForFunction(() => document.getElementById("rstate").textContent === "confirmed");
  assert.match(await page.textContent("#message"), /Paid/);
  const shot = join(mkdtempSync(join(tmpdir(), "flashgate-page-")), "buyer.png");
  await page.screenshot({ path: shot });
  console.log(`buyer page screenshot: ${shot}`);

  const s = (await api.stats(product)).body;
  assert.equal(s.sold, 2);
  assert.equal(s.available, 0);
  const buyerId = await page.textContent("#buyer");
  const v = await api.reservation(product, buyerId, rid);
  assert.equal(v.body.state, "confirmed");

  // Another buyer, in another browser profile, finds the product sold out.
  const second = await browser.newContext();
  const other = await second.newPage();
  await other.goto(`${gate.url}/?product=${product}`);
  await other.waitForFunction(() => document.getElementById("available").textContent === "0");
  assert.equal(await other.locator("#buy").isDisabled(), true);
  assert.equal(await other.textContent("#buy"), "Sold out");
  await first.close();
  await second.close();
});

test("an unknown product says so", async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${gate.url}/?product=nothing-here`);
  await page.waitForFunction(() => document.getElementById("message").textContent.length > 0);
  assert.match(await page.textContent("#message"), /no product/);
  assert.equal(await page.locator("#buy").isDisabled(), true);
  await ctx.close();
});
