// The buyer pages and the admin console in real headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core), against the gate on bare
// workerd and the origin on SQLite. A screenshot of each state goes to
// test-artifacts/screenshots/ (git-ignored); tests/e2e-serial/faces.test.mjs
// takes one of every state in both languages.
import { after, afterEach, before } from "node:test";
import assert from "node:assert/strict";
import { EVENTUALLY_MS } from "../support/client.mjs";
import { ADMIN_TOKEN, READ_TOKEN } from "../support/keys.mjs";
import { useGate } from "../support/system.mjs";
import { launch, open as openIn, shot, violations } from "../support/browser.mjs";

// The page pays through the origin's demo payment endpoint, which confirms
// at the gate: each must know the other.
const shop = useGate({ origin: true, demoPayments: true, vars: { ORIGIN_READ_TOKEN: READ_TOKEN } });
let browser;

before(async () => {
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

const text = (page, sel) => page.textContent(sel);
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
// Every context a test opened is closed after it, failed or not: a page
// left open keeps its live socket, and the gate's stop would wait for it.
const contexts = new Set();
afterEach(async () => {
  for (const ctx of contexts) await ctx.close().catch(() => {});
  contexts.clear();
});
async function open(path, options) {
  const opened = await openIn(browser, shop.url, path, options);
  contexts.add(opened.ctx);
  return opened;
}

/** Waits until the page is on its live socket (not polling). */
const onSocket = (page) => page.waitForFunction(() => document.getElementById("mode").textContent.startsWith("●"));

shop.test("1. buy and pay: reserved with a countdown, then confirmed; the stats and the origin agree", async ({ api, origin }) => {
  const product = "page-buy";
  assert.equal((await api.put(product, { stock_total: 2, per_buyer_max: 2, quantity_max: 2, hold_ttl_ms: 60_000 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  // Hold the reserve request until the test has looked at the button.
  let release;
  const held = new Promise((ok) => (release = ok));
  await page.route("**/reservations", async (route) => {
    await held;
    await route.continue();
  });
  await page.waitForFunction(() => document.getElementById("available").textContent === "2");
  await onSocket(page);
  await shot(page, "1-open");
  await page.selectOption("#quantity", "2");
  await page.click("#buy");
  await page.waitForFunction(() => document.getElementById("buy").disabled);
  release();
  await page.waitForSelector("#res-list li .rstate");
  assert.equal(await text(page, "#res-list li .rstate"), "reserved");
  assert.equal(await text(page, "#res-list li .qty"), "2");
  await page.waitForFunction(() => /^\d+:\d\d$/.test(document.querySelector("#res-list .countdown").textContent));
  // The countdown is the hold's own: never more than its 60 s, and never
  // less than what is left of it by the gate's expires_at_ms when read,
  // however late the page's timer ran.
  const rid = await page.getAttribute("#res-list li", "data-id");
  const hold = (await api.reservation(product, await text(page, "#buyer"), rid)).body;
  const [countdown, readAt] = await page.evaluate(() => [document.querySelector("#res-list .countdown").textContent, Date.now()]);
  const [m, sec] = countdown.split(":").map(Number);
  const left = Math.ceil((hold.expires_at_ms - readAt) / 1000);
  console.log(`countdown: ${countdown} shown, ${left} s left of the hold when read`);
  assert.ok(m * 60 + sec <= 60 && m * 60 + sec >= left, `countdown ${countdown}, ${left} s left of a 60 s hold: ${JSON.stringify(hold)}`);
  await shot(page, "1-reserved");

  // No interception from here on: Playwright answers the CORS preflight of
  // a routed page itself, which hid a payment the browser would refuse.
  await page.unroute("**/reservations");
  await page.click("#res-list .pay");
  await page.waitForFunction(() => document.querySelector("#res-list .rstate").textContent === "confirmed");
  assert.match(await text(page, "#message"), /Paid/);
  await shot(page, "1-confirmed");
  const s = (await api.stats(product)).body;
  assert.equal(s.sold, 2);
  assert.equal(s.available, 0);
  const buyer = await text(page, "#buyer");
  assert.equal((await api.reservation(product, buyer, rid)).body.state, "confirmed");
  // The outbox drains to the origin, which then holds the same order.
  let orders = [];
  for (const until = Date.now() + EVENTUALLY_MS; orders.length === 0 && Date.now() < until; ) {
    orders = await origin.orders(product);
    if (orders.length === 0) await sleep(100);
  }
  assert.equal(orders.length, 1, JSON.stringify(orders));
  assert.equal(orders[0].buyer_id, buyer);
  assert.equal(orders[0].quantity, 2);
  assert.equal((await origin.product(product)).sold, 2);
  // The buyer token is in no storage a script can read, and the cookie
  // that carries it is HttpOnly: document.cookie does not show it.
  const jar = await page.evaluate(() => ({
    session: Object.entries(sessionStorage),
    local: Object.entries(localStorage),
    cookie: document.cookie,
  }));
  const token = (await ctx.cookies()).find((c) => c.name === "fg_buyer");
  assert.ok(token?.httpOnly, JSON.stringify(await ctx.cookies()));
  for (const [k, v] of [...jar.session, ...jar.local]) {
    assert.ok(!v.includes(token.value) && !/token/i.test(k), `${k}=${v}`);
  }
  assert.ok(!jar.cookie.includes("fg_buyer") && !jar.cookie.includes(token.value), jar.cookie);
  // Bought and paid under the policy without one refusal.
  assert.deepEqual(violations(page), []);
  await ctx.close();
});

shop.test("8. the policy: every page runs under it without a refusal, and an injected script does not run", async ({ api }) => {
  const product = "page-csp";
  assert.equal((await api.put(product, { stock_total: 5, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  for (const lang of ["en-US", "zh-CN"]) {
    for (const path of ["/", `/p/${product}`, "/admin"]) {
      const r = await fetch(`${shop.url}${path}`, { headers: { "accept-language": lang } });
      assert.equal(r.status, 200, path);
      const csp = r.headers.get("content-security-policy") ?? "";
      for (const part of ["default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"]) {
        assert.ok(csp.includes(part), `${path}: ${part} missing from ${csp}`);
      }
      assert.ok(!/unsafe-inline|unsafe-eval|\*/.test(csp), `${path}: ${csp}`);
      assert.equal(r.headers.get("x-content-type-options"), "nosniff", path);
      assert.equal(r.headers.get("x-frame-options"), "DENY", path);
      assert.equal(r.headers.get("referrer-policy"), "no-referrer", path);
      await r.body?.cancel();

      const { ctx, page } = await open(path, { lang });
      // The page's own script ran: it translated the page (a product's
      // title is its name, then the gate's).
      await page.waitForFunction(() => document.title.includes("flashgate"));
      if (path.startsWith("/p/")) {
        await page.waitForFunction(() => document.getElementById("available").textContent === "5");
        await onSocket(page);
      }
      await sleep(300);
      assert.deepEqual(violations(page), [], `${path} in ${lang}`);
      // A script added to the page, as an injection would add one, is refused.
      await page.evaluate(() => {
        window.injected = false;
        const s = document.createElement("script");
        s.textContent = "window.injected = true";
        document.body.append(s);
        const img = document.createElement("img");
        img.setAttribute("src", "data:,x");
        img.setAttribute("onerror", "window.injected = true");
        document.body.append(img);
      });
      await sleep(200);
      assert.equal(await page.evaluate(() => window.injected), false, `${path} ran an injected script`);
      const refused = violations(page);
      assert.ok(refused.some((v) => /inline script|script-src/i.test(v)), `${path}: no refusal reported: ${JSON.stringify(refused)}`);
      await ctx.close();
    }
  }
  // The API's answers are not to be sniffed either.
  const r = await fetch(`${shop.url}/api/products/${product}`);
  assert.equal(r.headers.get("x-content-type-options"), "nosniff");
  await r.body?.cancel();
});

// The times from a reservation's answer to the page's update are logged;
// bench/live.mjs measures them, with 2,000 sockets.
shop.test("2. live: a second page sees available drop without a reload; reservation-to-update times", async ({ api }) => {
  const product = "page-live";
  const n = 20;
  assert.equal((await api.put(product, { stock_total: 100, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "100");
  await onSocket(page);
  // The page records when it showed each number; a reload would lose this.
  await page.evaluate(() => {
    window.shown = {};
    new MutationObserver(() => {
      const v = document.getElementById("available").textContent.replace(/\D/g, "");
      window.shown[v] ??= Date.now();
    }).observe(document.getElementById("available"), { childList: true, characterData: true, subtree: true });
  });
  const answered = {};
  for (let i = 0; i < n; i++) {
    assert.equal((await api.reserve(product, `live-${i}`, 1)).status, 201);
    answered[100 - (i + 1)] = Date.now();
    await sleep(300);
  }
  await page.waitForFunction((last) => window.shown[last] !== undefined, String(100 - n), { timeout: EVENTUALLY_MS });
  const shown = await page.evaluate(() => window.shown);
  const lags = Object.entries(answered).map(([v, at]) => shown[v] - at);
  const missing = lags.filter((l) => Number.isNaN(l)).length;
  assert.equal(missing, 0, `every reservation was shown: ${JSON.stringify({ answered, shown })}`);
  lags.sort((a, b) => a - b);
  console.log(`reservation answer -> other page shows it: p50 ${lags[Math.floor(n / 2)]} ms, p99 ${lags[n - 1]} ms (n=${n})`);
  await shot(page, "2-live");
  await ctx.close();
});

shop.test("3. every unit held elsewhere: the page says they may come back, and shows them when a hold expires", async ({ api }) => {
  const product = "page-soldout";
  assert.equal((await api.put(product, { stock_total: 1, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 3_000 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "1");
  await onSocket(page);
  assert.equal((await api.reserve(product, "elsewhere", 1)).status, 201);
  await page.waitForFunction(() => document.getElementById("available").textContent === "0");
  assert.equal(await page.locator("#buy").isDisabled(), true);
  // Held, not sold: not "sold out", and the page says why it may change.
  assert.equal(await text(page, "#buy"), "All held");
  assert.equal(await text(page, "#state"), "All held");
  assert.match(await text(page, "#notice"), /not paid for within 3 s come back on sale/);
  await shot(page, "3-held-out");
  // The hold expires at the object's alarm; the page hears it.
  await page.waitForFunction(() => document.getElementById("available").textContent === "1", null, { timeout: EVENTUALLY_MS });
  assert.equal(await page.locator("#buy").isEnabled(), true);
  await shot(page, "3-back");
  await ctx.close();
});

shop.test("4. waiting room: the position falls and the page is admitted by itself", async ({ api }) => {
  const product = "page-room";
  assert.equal((await api.put(product, { stock_total: 10, admit_per_s: 1, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  // Five buyers are ahead of the page. The room admits one a second from
  // the opening, so how many are still ahead when the page joins depends
  // on how long the page took to load (more than 3 s in one CI run).
  for (const b of ["ahead-1", "ahead-2", "ahead-3", "ahead-4", "ahead-5"]) assert.equal((await api.join(product, b)).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  await page.waitForFunction(() => document.getElementById("available").textContent === "10");
  await page.evaluate(() => {
    window.positions = [];
    new MutationObserver(() => {
      const m = /position (\d+)/.exec(document.getElementById("queue").textContent);
      if (m && window.positions.at(-1) !== Number(m[1])) window.positions.push(Number(m[1]));
    }).observe(document.getElementById("queue"), { childList: true, characterData: true, subtree: true });
  });
  await page.click("#buy");
  await page.waitForFunction(() => !document.getElementById("queue-row").hidden);
  await page.waitForFunction(() => /position/.test(document.getElementById("queue").textContent));
  await shot(page, "4-waiting");
  await page.waitForSelector("#res-list li .rstate", { timeout: EVENTUALLY_MS });
  assert.equal(await text(page, "#res-list li .rstate"), "reserved");
  assert.equal(await text(page, "#queue"), "your turn");
  const positions = await page.evaluate(() => window.positions);
  console.log(`waiting room positions shown: ${positions.join(" -> ")}`);
  // From the join's answer on (which counts the tickets this isolate
  // issued that no snapshot holds yet), the position only falls.
  assert.ok(positions.length >= 1, `positions: ${positions}`);
  // Polled each second at one admission a second, a page that joined with
  // more than one ahead sees its position fall at least once.
  if (positions[0] > 1) assert.ok(positions.length >= 2, `positions: ${positions}`);
  for (let i = 1; i < positions.length; i++) assert.ok(positions[i] < positions[i - 1], `the position fell: ${positions}`);
  await shot(page, "4-admitted");
  await ctx.close();
});

shop.test("5. a double click yields one reservation", async ({ api }) => {
  const product = "page-double";
  assert.equal((await api.put(product, { stock_total: 5, per_buyer_max: 5, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  // The page retries a request the network failed (not one the gate
  // answered) with the same idempotency key: that is one reserve, so count
  // keys, and say how many requests carried them.
  const keys = [];
  const failed = [];
  const isReserve = (r) => r.method() === "POST" && r.url().endsWith(`/api/products/${product}/reservations`);
  page.on("request", (r) => { if (isReserve(r)) keys.push(r.headers()["idempotency-key"]); });
  page.on("requestfailed", (r) => { if (isReserve(r)) failed.push(r.failure()?.errorText); });
  await page.waitForFunction(() => document.getElementById("available").textContent === "5");
  await page.dblclick("#buy");
  await page.waitForSelector("#res-list li .rstate");
  await sleep(500);
  console.log(`double click: ${keys.length} reserve request(s), ${new Set(keys).size} key(s), failed in the network: ${JSON.stringify(failed)}`);
  assert.equal(new Set(keys).size, 1, `one reserve (one idempotency key): ${JSON.stringify(keys)}`);
  assert.equal(keys.length, 1 + failed.length, "a second request only where the network failed the first");
  assert.equal(await page.locator("#res-list li").count(), 1);
  assert.equal((await api.stats(product)).body.held, 1);
  await ctx.close();
});

shop.test("6. admin: create a product in the console, a buyer buys, the live view shows the sale and the outbox draining", async ({ api }) => {
  const product = "console-made";
  const { ctx, page } = await open("/admin");
  await page.fill("#token", ADMIN_TOKEN);
  await page.click("#save-token");
  await page.fill("#product", product);
  await page.click("#open");
  // The form has every config field, bounded by the gate's OpenAPI document.
  await page.waitForSelector('#fields [name="stock_total"]');
  for (const f of ["stock_total", "mode", "per_buyer_max", "quantity_max", "hold_ttl_ms", "opens_at_ms", "admit_per_s", "reservations_max"]) {
    assert.equal(await page.locator(`#fields [name="${f}"]`).count(), 1, f);
  }
  await page.fill('#fields [name="stock_total"]', "5");
  await page.fill('#fields [name="per_buyer_max"]', "2");
  await page.click('#config button[type="submit"]');
  await page.waitForFunction(() => /Created/.test(document.getElementById("message").textContent));
  assert.equal((await api.product(product)).body.stock_total, 5);
  // A buyer buys and pays (as the shop's payment backend confirms).
  const r = await api.reserve(product, "console-buyer", 2);
  assert.equal(r.status, 201);
  assert.equal((await api.confirm(product, "console-buyer", r.body.reservation_id)).status, 200);
  await page.waitForFunction(() => document.getElementById("s-sold").textContent === "2", null, { timeout: 5000 });
  await page.waitForFunction(() => document.getElementById("s-backlog").textContent === "0", null, { timeout: EVENTUALLY_MS });
  await page.waitForFunction(() => document.getElementById("s-drift").textContent === "0", null, { timeout: EVENTUALLY_MS });
  assert.notEqual(await text(page, "#s-success"), "none");
  assert.ok((await page.locator("#chart polyline").count()) === 3, "the chart draws three lines");
  await shot(page, "6-admin");
  // Pause from the console: buyers are refused.
  await page.click("#pause");
  await page.waitForFunction(() => document.getElementById("s-state").textContent === "paused");
  assert.equal((await api.reserve(product, "late", 1)).body.code, "paused");
  await ctx.close();
});

shop.test("7. at 360 px nothing overflows, and with Accept-Language zh-CN the pages are in Chinese", async ({ api }) => {
  const product = "page-layout";
  assert.equal((await api.put(product, { stock_total: 3, opens_at_ms: Date.now() + 3_600_000 })).status, 201);
  for (const path of ["/", `/p/${product}`, "/admin"]) {
    const { ctx, page } = await open(path, { lang: "zh-CN", width: 360 });
    await page.waitForLoadState("networkidle").catch(() => {});
    await sleep(300);
    const { scroll, client: width } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
    assert.ok(scroll <= width, `${path}: ${scroll} px wide in ${width}`);
    assert.equal(await page.getAttribute("html", "lang"), "zh-CN");
    await shot(page, `7-zh-360${path.replace(/\//g, "_")}`);
    if (path.startsWith("/p/")) {
      await page.waitForFunction(() => document.getElementById("state").textContent === "即将开抢");
      assert.match(await text(page, "#opens"), /距开抢 \d+:\d\d/);
      assert.equal(await text(page, "#buy"), "立即抢购");
    }
    if (path === "/") {
      await page.waitForFunction((p) => document.getElementById("list").textContent.includes(p), product);
      assert.match(await text(page, "#list"), /即将开抢/);
    }
    await ctx.close();
  }
  // English by default.
  const { ctx, page } = await open(`/p/${product}`, { lang: "en-US" });
  await page.waitForFunction(() => document.getElementById("state").textContent === "opens soon");
  await ctx.close();
});

shop.test("an unknown product says so, and a rate-limited reserve says when to try again", async ({ api }) => {
  const unknown = await open("/p/nothing-here");
  await unknown.page.waitForFunction(() => !document.getElementById("not-found").hidden);
  assert.match(await text(unknown.page, "#not-found"), /No such product/);
  assert.equal(await unknown.page.locator("#card").isHidden(), true);
  await unknown.ctx.close();

  const product = "limited-page";
  assert.equal((await api.put(product, { stock_total: 3 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  // The edge's 429, as the rate limiting binding makes it.
  await page.route("**/reservations", (route) =>
    route.fulfill({
      status: 429,
      headers: { "content-type": "application/problem+json", "retry-after": "7" },
      body: JSON.stringify({ type: "about:blank", title: "Too many requests", status: 429, code: "rate_limited", detail: "slow down" }),
    }),
  );
  await page.waitForFunction(() => document.getElementById("available").textContent === "3");
  await page.click("#buy");
  await page.waitForFunction(() => /try again/.test(document.getElementById("message").textContent));
  assert.match(await text(page, "#message"), /try again in 7 s/);
  assert.equal(await page.locator("#buy").isEnabled(), true, "the button comes back");
  assert.equal((await api.stats(product)).body.held, 0);
  await ctx.close();
});

shop.test("a buy whose answer is lost is retried with the same Idempotency-Key", async ({ api }) => {
  const product = "page-retry";
  assert.equal((await api.put(product, { stock_total: 5, per_buyer_max: 5, quantity_max: 1, hold_ttl_ms: 60_000 })).status, 201);
  const { ctx, page } = await open(`/p/${product}`);
  const keys = [];
  let lose = 3; // the page's own three tries of the first click all fail
  await page.route("**/reservations", async (route) => {
    keys.push(route.request().headers()["idempotency-key"]);
    if (lose-- > 0) {
      // The request reaches the gate; its answer is lost on the way back.
      await route.fetch();
      return route.abort("connectionreset");
    }
    await route.continue();
  });
  await page.waitForFunction(() => document.getElementById("available").textContent === "5");
  await page.click("#buy");
  await page.waitForFunction(() => /cannot be reached/.test(document.getElementById("message").textContent));
  await page.click("#buy");
  await page.waitForSelector("#res-list li .rstate");
  assert.equal(new Set(keys).size, 1, `one key for every try: ${keys}`);
  assert.equal((await api.stats(product)).body.held, 1, "one hold, however many tries");
  await ctx.close();
});
