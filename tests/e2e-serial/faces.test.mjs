// Every state of the buyer page and of the console, in English and in
// Chinese, in real headless Chromium against the gate on bare workerd and
// the origin on SQLite. Each state is screenshotted into
// test-artifacts/screenshots/ (git-ignored) as faces-<lang>-<state>.png,
// and the text it shows is asserted: a page must never say less, or other,
// than what is true. A product's face comes from the admin API, with a
// hostile name that must stay text.
import { after, afterEach, before } from "node:test";
import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { ADMIN_TOKEN, READ_TOKEN } from "../support/keys.mjs";
import { useGate } from "../support/system.mjs";
import { launch, open as openIn, shot, violations } from "../support/browser.mjs";

const shop = useGate({ origin: true, demoPayments: true, vars: { ORIGIN_READ_TOKEN: READ_TOKEN } });
let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// The face's image host, answered by the test (the machine has no
// network): an SVG, which the page may show only because its policy allows
// https images. A refused image would never reach this route.
const IMAGE_HOST = "https://images.example.invalid";
const IMAGE = `<svg xmlns="http://www.w3.org/2000/svg" width="640" height="320"><defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1"><stop offset="0" stop-color="#7cb342"/><stop offset="1" stop-color="#33691e"/></linearGradient></defs><rect width="640" height="320" fill="url(#g)"/><ellipse cx="320" cy="220" rx="150" ry="40" fill="#f1f8e9"/><path d="M200 120h240l-30 100h-180z" fill="#fff"/></svg>`;
let imagesServed = 0;
const withImages = (ctx) =>
  ctx.route(`${IMAGE_HOST}/**`, (route) => {
    imagesServed++;
    return route.fulfill({ status: 200, contentType: "image/svg+xml", body: IMAGE });
  });
// Every context a test opened is closed after it, failed or not: a page
// left open keeps its live socket, and the gate's stop would wait for it.
const contexts = new Set();
afterEach(async () => {
  for (const ctx of contexts) await ctx.close().catch(() => {});
  contexts.clear();
});
async function open(path, options = {}) {
  const opened = await openIn(browser, shop.url, path, { prepare: withImages, ...options });
  contexts.add(opened.ctx);
  return opened;
}
const text = (page, sel) => page.textContent(sel);
/** Waits for the page's state; a timeout says the state it was in. */
async function stateIs(page, key, timeout = 15_000) {
  try {
    await page.waitForFunction((k) => document.querySelector("main").dataset.state === k, key, { timeout });
  } catch (e) {
    const was = await page.evaluate(() => [document.querySelector("main").dataset.state, document.querySelector("main").innerText]).catch(() => []);
    throw new Error(`waited for state ${key}; the page is ${was[0]}, showing: ${was[1]}; reported: ${JSON.stringify(violations(page))}`, { cause: e });
  }
}

// A name that would run a script if any page wrote it as HTML.
const HOSTILE = `<img src=x onerror="window.pwned=1">Tea</b>`;
const FACE = {
  name: { zh: "明前龙井 <script>window.pwned=1</script>", en: HOSTILE },
  price: { amount: "19.90", currency: "CNY" },
  image_url: `${IMAGE_HOST}/longjing.svg`,
  description: { zh: "杭州西湖产区，手工炒制。\n每人限购一件。", en: "Hand-roasted spring tea.\nOne per buyer." },
};

// What each language says, by state: the texts the pages must show.
const WORDS = {
  "en-US": {
    tag: "en", name: HOSTILE, price: /CN¥19\.90|¥19\.90|CNY\s?19\.90/, buy: "Buy", join: "Join the queue",
    open: /open/, prequeue: /The queue is open: join now/, waiting: /places are drawn at the opening/,
    reserved: /Reserved 1/, paid: /Paid/, paused: /paused this sale/, heldOut: /not paid for within 1 min come back/,
    soldOut: /Sold out: every unit is sold/, notFound: /No such product/, allHeld: "All held", soldOutLabel: "sold out",
  },
  "zh-CN": {
    tag: "zh", name: FACE.name.zh, price: /¥19\.90/, buy: "立即抢购", join: "加入排队",
    open: /抢购中/, prequeue: /排队已开始/, waiting: /开抢时随机排序/,
    reserved: /已锁定 1 件/, paid: /支付成功/, paused: /商家已暂停/, heldOut: /1 分钟 内未支付的商品会重新开放/,
    soldOut: /已售罄：所有商品均已售出/, notFound: /商品不存在/, allHeld: "已全部锁定", soldOutLabel: "已售罄",
  },
};

/** Asserts that no name became markup, nothing ran, and the page broke no
 * rule of its policy (the https image included). */
async function clean(page, where) {
  assert.equal(await page.evaluate(() => window.pwned), undefined, `${where}: a name ran`);
  assert.equal(await page.locator("img[onerror], #name *, #list .name *").count(), 0, `${where}: markup from a name`);
  assert.deepEqual(violations(page), [], where);
}

/** `read()` until `ok(value)`, for reads the edge caches for a second. */
async function eventually(read, ok, what, tries = 40) {
  let v;
  for (let i = 0; i < tries; i++) {
    v = await read();
    if (ok(v)) return v;
    await new Promise((done) => setTimeout(done, 100));
  }
  assert.fail(`${what}: ${JSON.stringify(v)}`);
}

for (const lang of ["en-US", "zh-CN"]) {
  const w = WORDS[lang];
  const name = (state) => `faces-${w.tag}-${state}`;

  shop.test(`${lang}: open, then the pre-queue joined from the page, waiting, admitted, holding, paid`, async ({ api }) => {
    const id = `face-open-${w.tag}`;
    const put = await api.put(id, { stock_total: 3, per_buyer_max: 1, quantity_max: 2, hold_ttl_ms: 60_000, face: FACE });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const { ctx, page } = await open(`/p/${id}`, { lang });
    await stateIs(page, "open");
    // The face, as text; the hostile name is shown, not run.
    assert.equal(await text(page, "#name"), w.name);
    assert.match(await text(page, "#price"), w.price);
    assert.equal(await text(page, "#description"), FACE.description[w.tag]);
    // The image loads: the policy allowed its https host.
    await page.waitForFunction(() => document.querySelector("#image-slot img")?.naturalWidth > 0);
    assert.equal(await page.getAttribute("#image-slot img", "src"), FACE.image_url);
    assert.ok(imagesServed > 0);
    assert.match(await text(page, "#state"), w.open);
    assert.equal(await text(page, "#buy"), w.buy);
    // The quantity offers what one buyer may have: 1 (per_buyer_max), not 2.
    assert.deepEqual(await page.$$eval("#quantity option", (o) => o.map((x) => x.textContent)), ["1"]);
    // No "You are" followed by nothing before a session exists.
    assert.equal(await page.locator("#who").isHidden(), true);
    await shot(page, name("open"));
    await clean(page, `${lang} open`);
    await ctx.close();

    // A pre-queue: the sale opens in a few seconds, the queue is open now.
    const room = `face-room-${w.tag}`;
    const opensAt = Date.now() + 6_000;
    assert.equal((await api.put(room, { stock_total: 3, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000, admit_per_s: 5, opens_at_ms: opensAt, prequeue_ms: 600_000, face: FACE })).status, 201);
    const r = await open(`/p/${room}`, { lang });
    await stateIs(r.page, "prequeue");
    assert.equal(await r.page.locator("#buy").isEnabled(), true, "a buyer can join the pre-queue from the page");
    assert.equal(await text(r.page, "#buy"), w.join);
    assert.match(await text(r.page, "#notice"), w.prequeue);
    await shot(r.page, name("prequeue"));
    await r.page.click("#buy");
    await stateIs(r.page, "waiting");
    assert.match(await text(r.page, "#queue"), w.waiting);
    assert.equal(await r.page.locator("#who").isVisible(), true, "once a session exists, it is named");
    assert.notEqual((await text(r.page, "#buyer")).trim(), "");
    await shot(r.page, name("waiting"));
    // At the opening the room admits the page, which reserves by itself.
    await r.page.waitForSelector("#res-list li .rstate", { timeout: 30_000 });
    assert.match(await text(r.page, "#message"), w.reserved);
    await shot(r.page, name("holding"));
    await r.page.click("#res-list .pay");
    await r.page.waitForFunction((paid) => new RegExp(paid).test(document.getElementById("message").textContent), w.paid.source);
    // The buyer has its one unit: the page says the limit, and Buy is off.
    await stateIs(r.page, "limit");
    assert.equal(await r.page.locator("#buy").isDisabled(), true);
    await shot(r.page, name("paid"));
    await clean(r.page, `${lang} pre-queue`);
    await r.ctx.close();
  });

  shop.test(`${lang}: paused, every unit held, sold out, and an unknown product, each said in words`, async ({ api }) => {
    const paused = `face-paused-${w.tag}`;
    assert.equal((await api.put(paused, { stock_total: 3, mode: "paused", face: FACE })).status, 201);
    let { ctx, page } = await open(`/p/${paused}`, { lang });
    await stateIs(page, "paused");
    assert.match(await text(page, "#notice"), w.paused);
    assert.equal(await page.locator("#buy").isDisabled(), true);
    await shot(page, name("paused"));
    await ctx.close();

    const held = `face-held-${w.tag}`;
    assert.equal((await api.put(held, { stock_total: 1, per_buyer_max: 1, quantity_max: 1, hold_ttl_ms: 60_000, face: FACE })).status, 201);
    const hold = await api.reserve(held, "someone-else", 1);
    assert.equal(hold.status, 201);
    ({ ctx, page } = await open(`/p/${held}`, { lang }));
    await stateIs(page, "held_out");
    assert.equal(await text(page, "#buy"), w.allHeld);
    assert.match(await text(page, "#notice"), w.heldOut);
    await shot(page, name("held-out"));
    // Paid: now it is sold out, and the page says that instead, live.
    assert.equal((await api.confirm(held, "someone-else", hold.body.reservation_id)).status, 200);
    await stateIs(page, "sold_out");
    assert.equal(await text(page, "#buy"), w.soldOutLabel);
    assert.match(await text(page, "#notice"), w.soldOut);
    await shot(page, name("sold-out"));
    await ctx.close();

    ({ ctx, page } = await open("/p/no-such-product", { lang }));
    await stateIs(page, "not_found");
    assert.match(await text(page, "#not-found"), w.notFound);
    assert.match(await text(page, "#not-found"), /no-such-product/);
    assert.equal(await page.locator("#card").isHidden(), true, "no empty card");
    assert.doesNotMatch(await page.textContent("body"), /unknown_product|no product has the id/i, "no raw API message");
    await shot(page, name("not-found"));
    await ctx.close();

    // The list shows the faces too, as text.
    ({ ctx, page } = await open("/", { lang }));
    await page.waitForFunction((n) => document.getElementById("list").textContent.includes(n), w.name);
    assert.match(await text(page, "#list"), w.price);
    await shot(page, name("list"));
    await clean(page, `${lang} list`);
    await ctx.close();
  });

  shop.test(`${lang}: the console: empty, a refused token, a product opened with its settings, a bad number, an unknown product, a face saved, orders and the chart`, async ({ api }) => {
    const id = `face-console-${w.tag}`;
    assert.equal((await api.put(id, { stock_total: 4, per_buyer_max: 2, quantity_max: 1, hold_ttl_ms: 120_000, attempt_window_ms: 5_000, face: FACE })).status, 201);
    const { ctx, page } = await open("/admin", { lang });
    await page.waitForSelector('#fields [name="hold_ttl_ms"]');
    // Human labels and help beside each field, in the page's language.
    const zh = lang === "zh-CN";
    assert.match(await text(page, "#fields"), zh ? /支付时限 \(分钟\)/ : /Time to pay \(minutes\)/);
    assert.match(await text(page, "#fields"), zh ? /锁定后等待支付的分钟数/ : /Minutes units stay held for a buyer to pay/);
    await shot(page, name("console-empty"));

    // A wrong token is refused before anything is called saved.
    await page.fill("#token", "not-the-token");
    await page.click("#save-token");
    await page.waitForFunction(() => document.getElementById("message").className === "error");
    assert.match(await text(page, "#message"), zh ? /拒绝/ : /refused this admin token/);
    await shot(page, name("console-error"));

    await page.fill("#token", ADMIN_TOKEN);
    await page.fill("#product", id);
    await page.click("#save-token");
    await page.waitForFunction(() => document.getElementById("message").className === "ok");
    // The product list, and the product's current settings in people's units.
    await page.waitForFunction((p) => document.getElementById("products").textContent.includes(p), id);
    await page.waitForFunction(() => document.querySelector('#fields [name="stock_total"]').value === "4");
    const value = (f) => page.inputValue(`#fields [name="${f}"]`);
    assert.equal(await value("hold_ttl_ms"), "2", "two minutes");
    assert.equal(await value("attempt_window_ms"), "5", "five seconds");
    assert.equal(await value("face.name.en"), HOSTILE);
    assert.equal(await value("face.price.amount"), "19.90");
    // Every member of the API's product update has its field, and no other
    // (the proof of work's members each one, as the API names them).
    const all = await page.$$eval("#fields [name]", (els) => els.map((e) => e.name));
    const names = all.filter((n) => !n.startsWith("face.") && !n.startsWith("pow.")).concat("face", "pow");
    const spec = await (await fetch(`${shop.url}/openapi.json`)).json();
    assert.deepEqual([...names].sort(), Object.keys(spec.components.schemas.ConfigPatch.properties).sort());
    assert.deepEqual(all.filter((n) => n.startsWith("pow.")).map((n) => n.slice(4)).sort(), Object.keys(spec.components.schemas.PowSetting.properties).sort());

    // A bad number says so, replaces the success, and sends nothing.
    let puts = 0;
    page.on("request", (r) => r.method() === "PUT" && puts++);
    await page.fill('#fields [name="hold_ttl_ms"]', "abc");
    await page.click('#config button[type="submit"]');
    await page.waitForFunction(() => document.getElementById("message").className === "error");
    assert.match(await text(page, "#message"), zh ? /支付时限：“abc”无效/ : /Time to pay: “abc” is not accepted/);
    await page.fill('#fields [name="hold_ttl_ms"]', "99999");
    await page.click('#config button[type="submit"]');
    await page.waitForFunction(() => /99999/.test(document.getElementById("message").textContent));
    assert.match(await text(page, "#message"), /1,440|1440/);
    assert.equal(puts, 0, "nothing was sent");
    assert.equal((await api.stats(id)).status, 200);
    assert.equal((await api.product(id)).body.hold_ttl_ms, 120_000, "nothing changed");

    // A face and a time saved from the console reach the page.
    await page.fill('#fields [name="hold_ttl_ms"]', "3");
    await page.fill('#fields [name="face.name.en"]', "Longjing, spring");
    await page.click('#config button[type="submit"]');
    await page.waitForFunction(() => document.getElementById("message").className === "ok");
    assert.match(await text(page, "#message"), zh ? /已保存/ : /Saved/);
    const after = await eventually(async () => (await api.product(id)).body, (p) => p.hold_ttl_ms === 180_000, "the saved product");
    assert.equal(after.hold_ttl_ms, 180_000);
    assert.equal(after.face.name.en, "Longjing, spring");
    assert.equal(after.face.name.zh, FACE.name.zh, "the rest of the face is kept");
    // Saved again as it stands: nothing to send, and it says so.
    const putsBefore = puts;
    await page.click('#config button[type="submit"]');
    await page.waitForFunction(() => /Nothing to save|没有需要保存/.test(document.getElementById("message").textContent));
    assert.equal(puts, putsBefore, "an unchanged form sends nothing");

    // A sale: the live view, its chart with axes and times, and the order.
    const r = await api.reserve(id, "console-buyer", 1);
    assert.equal((await api.confirm(id, "console-buyer", r.body.reservation_id)).status, 200);
    await page.waitForFunction(() => document.getElementById("s-sold").textContent === "1", null, { timeout: 10_000 });
    await page.waitForFunction(() => document.querySelectorAll("#chart text").length >= 6);
    assert.equal(await page.locator("#chart polyline").count(), 3);
    assert.match(await page.textContent("#chart"), /\d+:\d\d:\d\d/, "time labels");
    for (let i = 0; i < 50 && !(await text(page, "#orders")).includes("console-buyer"); i++) {
      await page.click("#orders-first");
      await new Promise((ok) => setTimeout(ok, 200));
    }
    assert.match(await text(page, "#orders"), /console-buyer/);
    assert.equal(await text(page, "#orders-error"), "");
    await shot(page, name("console-product"));

    // An unknown product clears the last one's numbers and says so.
    await page.fill("#product", "no-such-product");
    await page.click("#open");
    await page.waitForFunction(() => document.getElementById("message").className === "error");
    assert.match(await text(page, "#message"), zh ? /尚不存在/ : /No product “no-such-product” yet/);
    assert.equal(await text(page, "#s-sold"), "–");
    assert.equal(await value("stock_total"), "");
    assert.equal(await value("face.name.en"), "");
    assert.equal(await page.locator("#orders tr").count(), 0);
    await shot(page, name("console-unknown"));
    await clean(page, `${lang} console`);
    await ctx.close();
  });
}

shop.test("the admin list and the orders page refuse a stranger and a bad query, and change nothing", async ({ api }) => {
  const id = "face-orders";
  assert.equal((await api.put(id, { stock_total: 2 })).status, 201);
  const before = (await api.stats(id)).body;
  for (const [path, auth, status, code] of [
    ["/admin/products", null, 401, "unauthorized"],
    ["/admin/products", "Bearer wrong", 401, "unauthorized"],
    [`/admin/products/${id}/orders`, null, 401, "unauthorized"],
    [`/admin/products/${id}/orders?limit=abc`, null, 401, "unauthorized"],
    [`/admin/products/${id}/orders?limit=0`, ADMIN_TOKEN, 400, "invalid_query"],
    [`/admin/products/${id}/orders?limit=101`, ADMIN_TOKEN, 400, "invalid_query"],
    [`/admin/products/${id}/orders?after=1%26product_id%3Dother`, ADMIN_TOKEN, 400, "invalid_query"],
    [`/admin/products/${id}/orders?product_id=other`, ADMIN_TOKEN, 400, "invalid_query"],
    ["/admin/products/no-such/orders", ADMIN_TOKEN, 404, "unknown_product"],
  ]) {
    const headers = auth ? { authorization: auth.startsWith("Bearer") ? auth : `Bearer ${auth}` } : {};
    const r = await fetch(`${shop.url}${path}`, { headers });
    const body = await r.json();
    assert.equal(r.status, status, `${path}: ${JSON.stringify(body)}`);
    assert.equal(body.code, code, path);
    assert.match(r.headers.get("content-type"), /application\/problem\+json/, path);
  }
  const ok = await fetch(`${shop.url}/admin/products/${id}/orders?limit=5`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { orders: [], next_after: null, origin_error: null });
  // The list reads the catalog again within 5 s of a product's creation.
  await eventually(
    async () => (await fetch(`${shop.url}/admin/products`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json(),
    (list) => list.products.some((p) => p.product_id === id),
    "the admin list names the new product",
    80,
  );
  assert.deepEqual((await api.stats(id)).body.counters, before.counters);

  // The largest face the bounds allow, in Chinese (3 bytes a character,
  // 6 once escaped for the command header), is taken whole and read back.
  const most = {
    name: { zh: "龙".repeat(40), en: "n".repeat(120) },
    price: { amount: "999999999.999", currency: "KWD" },
    image_url: `${IMAGE_HOST}/${"a".repeat(512 - IMAGE_HOST.length - 1)}`,
    description: { zh: "茶".repeat(200), en: "d".repeat(600) },
  };
  const big = await api.put(id, { face: most });
  assert.equal(big.status, 200, JSON.stringify(big.body));
  assert.deepEqual(big.body.face, most);
  await eventually(async () => (await api.product(id)).body.face, (f) => isDeepStrictEqual(f, most), "the largest face, read back");

  // A bad face over the API: a 422 naming the member, and nothing changes.
  for (const face of [
    { image_url: "http://images.example/a.png" },
    { image_url: `${most.image_url}b` },
    { name: { zh: "龙".repeat(41) } },
    { name: { en: "x".repeat(121) } },
    { description: { en: "d".repeat(601) } },
    { price: { amount: "19.9", currency: "cny" } },
    { price: { amount: "1000000000", currency: "CNY" } },
    { colour: "red" },
  ]) {
    const r = await api.put(id, { stock_total: 9, face });
    assert.equal(r.status, 422, JSON.stringify(face));
    assert.equal(r.body.code, "invalid_body");
    assert.equal((await api.stats(id)).body.stock_total, 2, JSON.stringify(face));
  }
  assert.deepEqual((await api.stats(id)).body.counters, before.counters, "no refused update counted or changed anything");
});
