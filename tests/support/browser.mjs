// Headless Chromium for the page tests (Debian's /usr/bin/chromium, driven
// by playwright-core): opening a page in a language, the policy refusals
// Chromium reports, and screenshots into test-artifacts/screenshots/
// (git-ignored), which the page tests take of every state they reach.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { ROOT } from "./runtime.mjs";

export const SHOTS = join(ROOT, "test-artifacts/screenshots");

export function launch() {
  mkdirSync(SHOTS, { recursive: true });
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
}

export const shot = (page, name) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

// What Chromium reports of the pages' Content-Security-Policy: every
// refusal it logs to the console, per page opened.
const cspReports = new WeakMap();
export const violations = (page) => cspReports.get(page);

/** Opens `path` of the gate at `base` in a new context with the language
 * `lang` (its Accept-Language and the browser's locale); `prepare(ctx)`
 * runs first. */
export async function open(browser, base, path, { lang = "en-US", width = 800, prepare } = {}) {
  const ctx = await browser.newContext({ locale: lang, extraHTTPHeaders: { "accept-language": lang }, viewport: { width, height: 800 } });
  // Routes the context needs before the page loads (an image host).
  await prepare?.(ctx);
  const page = await ctx.newPage();
  const reports = [];
  cspReports.set(page, reports);
  page.on("console", (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) reports.push(`${path}: ${m.text()}`);
  });
  // A script that throws is as wrong as a refusal: it is reported too.
  page.on("pageerror", (e) => reports.push(`${path}: uncaught ${e.message}`));
  await page.goto(`${base}${path}`);
  return { ctx, page };
}
