// The waiting room's proof of work on the product page, in real headless
// Chromium: the page loads the ALTCHA widget from the gate (no external
// resource, nothing the policy refuses), solves the challenge in the
// widget's Web Workers while saying how long it takes, joins with the
// payload, and buys once admitted; in English and in Chinese. Screenshots
// of the solving and of the hold go to test-artifacts/screenshots/.
import { after, before } from "node:test";
import assert from "node:assert/strict";
import { launch, open, shot, violations } from "../support/browser.mjs";
import { ADMIN_TOKEN } from "../support/keys.mjs";
import { useGate } from "../support/system.mjs";

const shop = useGate();
let browser;

before(async () => {
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

for (const [lang, solving, done] of [
  ["en-US", /^Your browser is proving it is not a script's \(about 4,096 tries\): \d+ s…$/, /^Proof of work done in \d+\.\d s\.$/],
  ["zh-CN", /^浏览器正在完成工作量证明（约 4,096 次尝试）：\d+ 秒…$/, /^工作量证明完成，用时 \d+\.\d 秒。$/],
]) {
  shop.test(`the page solves the proof of work with the widget, then joins and buys (${lang})`, async ({ api }) => {
    const product = `pow-page-${lang.slice(0, 2)}`;
    const put = await api.put(product, { stock_total: 5, admit_per_s: 50, per_buyer_max: 1, quantity_max: 1, pow: { mode: "fixed", level: 3 } });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const requests = [];
    const { ctx, page } = await open(browser, shop.url, `/p/${product}`, { lang });
    page.on("request", (r) => requests.push(r.url()));
    await page.waitForFunction(() => document.getElementById("total").textContent === "5");
    await page.click("#buy");
    await page.waitForFunction(() => !document.getElementById("pow").hidden, null, { timeout: 15_000 });
    const text = await page.textContent("#pow-text");
    if (solving.test(text)) await shot(page, `pow-solving-${lang.slice(0, 2)}`);
    await page.waitForFunction(() => /^(Reserved 1\.|已锁定 1 件)/.test(document.getElementById("message").textContent), null, { timeout: 60_000 });
    assert.match(await page.textContent("#pow-text"), done);
    await shot(page, `pow-done-${lang.slice(0, 2)}`);
    // The join carried a payload the gate took: a ticket counted, no
    // refusal, and one reservation held.
    const q = (await api.stats(product)).body;
    assert.equal(q.held, 1, JSON.stringify(q));
    assert.equal(q.room.pow_required, 0, JSON.stringify(q.room));
    // Everything came from the gate itself, and the policy refused nothing.
    assert.ok(requests.some((u) => u.endsWith("/vendor/altcha-3.2.2/pbkdf2.js")), "the widget's worker ran");
    assert.deepEqual(requests.filter((u) => !u.startsWith(shop.url)), [], "no external resource");
    assert.deepEqual(violations(page), []);
    await ctx.close();
  });
}

shop.test("the console shows a product's proof of work, the endless queue included, and changes it", async ({ api }) => {
  const product = "pow-console";
  const put = await api.put(product, { stock_total: 5, admit_per_s: 10, pow: { mode: "fixed", level: 3, infinite_queue: true } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const { ctx, page } = await open(browser, shop.url, "/admin");
  await page.fill("#token", ADMIN_TOKEN);
  await page.fill("#product", product);
  await page.click("#save-token");
  await page.waitForFunction(() => document.querySelector('#fields [name="stock_total"]').value === "5");
  const value = (f) => page.inputValue(`#fields [name="${f}"]`);
  assert.deepEqual([await value("pow.mode"), await value("pow.level"), await value("pow.infinite_queue")], ["fixed", "3", "true"]);
  await shot(page, "pow-console-en");
  // A level out of range is the gate's 422, shown, and nothing changes.
  await page.selectOption('#fields [name="pow.mode"]', "adaptive");
  await page.fill('#fields [name="pow.level"]', "9");
  await page.click('#config button[type="submit"]');
  await page.waitForFunction(() => document.getElementById("message").className === "error");
  assert.match(await page.textContent("#message"), /pow\.level/);
  assert.equal((await api.stats(product)).body.room.pow_mode, "fixed");
  // Adaptive from level 2, failed proofs asked again.
  await page.fill('#fields [name="pow.level"]', "2");
  await page.selectOption('#fields [name="pow.infinite_queue"]', "false");
  await page.click('#config button[type="submit"]');
  await page.waitForFunction(() => document.getElementById("message").className === "ok");
  const q = (await api.stats(product)).body.room;
  assert.deepEqual([q.pow_mode, q.pow_level, q.pow_infinite_queue], ["adaptive", 2, false], JSON.stringify(q));
  assert.deepEqual(violations(page), []);
  await ctx.close();
});
