// The waiting room's odds on the product page, in real headless Chromium
// (as tests/e2e-serial/page.test.mjs drives it): a buyer far back in a line
// three times the stock reads "unlikely" in English and in Chinese, and
// when the last unit is paid the page says sold out and leaves the room.
import { after, before } from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { useGate } from "../support/system.mjs";

const shop = useGate();
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
});

after(async () => {
  await browser?.close();
});

async function open(path, lang) {
  const ctx = await browser.newContext({ locale: lang, extraHTTPHeaders: { "accept-language": lang } });
  const page = await ctx.newPage();
  const refused = [];
  page.on("console", (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) refused.push(m.text());
  });
  await page.goto(`${shop.url}${path}`);
  return { ctx, page, refused };
}

for (const [lang, unlikely, soldOut] of [
  ["en-US", /^Unlikely: \d+ buyers ahead of you for 3 left$/, /^Sold out: nothing left and nothing held$/],
  ["zh-CN", /^希望不大：您前面有 \d+ 人，仅剩 3 件$/, /^已售罄：没有剩余，也没有保留中的$/],
]) {
  shop.test(`odds on the page (${lang}): unlikely far back, then sold out once the last unit is paid`, async ({ api }) => {
    const product = `odds-page-${lang.slice(0, 2)}`;
    // A line of 20 for 3 units, admitted one a second: the page's buyer
    // arrives last, so it stands far back for longer than the test needs.
    const put = await api.put(product, { stock_total: 3, admit_per_s: 1, per_buyer_max: 1, quantity_max: 1 });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const ahead = [];
    for (let i = 0; i < 20; i++) {
      const j = await api.join(product, `ahead-${i}`);
      assert.equal(j.status, 201, JSON.stringify(j.body));
      ahead.push(j.body.ticket);
    }
    const { ctx, page, refused } = await open(`/p/${product}`, lang);
    await page.waitForFunction(() => document.getElementById("total").textContent === "3");
    await page.click("#buy");
    await page.waitForFunction(() => !document.getElementById("odds").hidden, null, { timeout: 15_000 });
    assert.equal(await page.getAttribute("#odds", "data-verdict"), "unlikely");
    assert.match(await page.textContent("#odds"), unlikely);
    // The first three of the line, admitted one a second, buy and pay.
    let paid = 0;
    for (let i = 0; i < ahead.length && paid < 3; i++) {
      const b = `ahead-${i}`;
      for (let tries = 0; tries < 100; tries++) {
        const r = await api.reserve(product, b, 1, `k-${b}`, { "flashgate-ticket": ahead[i] });
        if (r.status === 201) {
          const c = await api.confirm(product, b, r.body.reservation_id);
          assert.equal(c.status, 200, JSON.stringify(c.body));
          paid++;
          break;
        }
        assert.equal(r.body.code, "not_admitted", JSON.stringify(r.body));
        await new Promise((ok) => setTimeout(ok, 200));
      }
    }
    assert.equal(paid, 3);
    const t0 = Date.now();
    await page.waitForFunction(() => document.getElementById("odds").dataset.verdict === "sold_out", null, { timeout: 10_000 });
    console.log(`odds page (${lang}): sold out shown ${Date.now() - t0} ms after the last payment`);
    assert.match(await page.textContent("#odds"), soldOut);
    assert.equal(await page.isHidden("#queue-row"), true, "the page left the room");
    assert.deepEqual(refused, []);
    await ctx.close();
  });
}

// A poll can admit the buyer in the same answer that says sold out (the
// admission came due as the last unit was taken). The page must end the
// wait as sold out there, not say "your turn" and send a reserve that can
// only be refused. The poll's answer is the gate's own, with only those
// two fields set as such a poll has them.
shop.test("odds on the page: a poll that admits the buyer as it says sold out ends the wait as sold out", async ({ api }) => {
  const product = "odds-page-admitted-sold-out";
  const put = await api.put(product, { stock_total: 3, admit_per_s: 1, per_buyer_max: 1, quantity_max: 1 });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  for (let i = 0; i < 10; i++) assert.equal((await api.join(product, `ahead-${i}`)).status, 201);
  const { ctx, page, refused } = await open(`/p/${product}`, "en-US");
  let reserves = 0;
  await page.route("**/reservations", (route) => {
    reserves++;
    return route.continue();
  });
  await page.route("**/queue", async (route) => {
    const real = await route.fetch();
    const body = await real.json();
    await route.fulfill({ response: real, json: { ...body, admitted: true, verdict: "sold_out", available: 0, held: 0 } });
  });
  await page.waitForFunction(() => document.getElementById("total").textContent === "3");
  await page.click("#buy");
  await page.waitForFunction(() => document.getElementById("odds").dataset.verdict === "sold_out", null, { timeout: 15_000 });
  await page.waitForFunction(() => /sold out/i.test(document.getElementById("message").textContent), null, { timeout: 5_000 });
  assert.equal(await page.isHidden("#queue-row"), true, "the page left the room");
  assert.doesNotMatch(await page.textContent("#queue"), /your turn/i);
  assert.equal(reserves, 0, "no reserve was sent on a sold-out admission");
  assert.deepEqual(refused, []);
  await ctx.close();
});
