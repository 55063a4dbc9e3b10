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

test("a product with a waiting room: the page joins, shows the position, and reserves by itself when admitted", async () => {
  const api = client(gate.url);
  const product = "room-page";
  assert.equal((await api.put(product, { stock_total: 3, admit_per_s: 1, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  const queueCalls = [];
  page.on("request", (r) => {
    if (r.url().endsWith(`/api/products/${product}/queue`)) queueCalls.push(r.method());
  });
  await page.goto(`${gate.url}/?product=${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "3");
  await page.click("#buy");
  // The room shows itself, then the page reserves with the ticket.
  await page.waitForFunction(() => !document.getElementById("queue-row").hidden);
  await page.waitForFunction(() => !document.getElementById("reservation").hidden, null, { timeout: 20_000 });
  assert.equal(await page.textContent("#rstate"), "held");
  assert.equal(await page.textContent("#queue"), "your turn");
  assert.equal(queueCalls[0], "POST", "the page joined first");
  const s = (await api.stats(product)).body;
  assert.equal(s.held, 1);
  assert.ok(s.queue.reported >= 1, JSON.stringify(s.queue));
  console.log(`waiting room page: ${queueCalls.length} queue calls (1 join, then polls) before the reserve`);
  await ctx.close();
});

test("a rate-limited reserve says when to try again", async () => {
  const api = client(gate.url);
  const product = "limited-page";
  assert.equal((await api.put(product, { stock_total: 3 })).status, 201);
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  // The edge's 429, as the rate limiting binding makes it.
  await page.route("**/reservations", (route) =>
    route.fulfill({
      status: 429,
      headers: { "content-type": "application/problem+json", "retry-after": "7" },
      body: JSON.stringify({ type: "about:blank", title: "Too many requests", status: 429, code: "rate_limited", detail: "slow down" }),
    }),
  );
  await page.goto(`${gate.url}/?product=${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "3");
  await page.click("#buy");
  await page.waitForFunction(() => /try again/.test(document.getElementById("message").textContent));
  assert.match(await page.textContent("#message"), /try again in 7 s/);
  assert.equal(await page.locator("#buy").isEnabled(), true, "the button comes back");
  assert.equal((await api.stats(product)).body.held, 0);
  await ctx.close();
});
