// The live view in headless Chromium for scripts/chains_e2e.py: waits until the straggler
// row of NODE_ID shows a cause, prints it as one JSON line and takes a screenshot (SHOT).
// Env: VIEW_URL, CHROMIUM, PLAYWRIGHT_CORE (directory), NODE_ID, SHOT. Any page or console
// error (a Content-Security-Policy violation is one) or off-origin request fails the run.
"use strict";

const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error("missing env " + k);
  return v;
};

(async () => {
  const browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    const origin = new URL(env("VIEW_URL")).origin;
    await page.route("**/*", (route) =>
      route.request().url().startsWith(origin) || route.request().url().startsWith("data:")
        ? route.continue()
        : route.abort().then(() => errors.push("off-origin request: " + route.request().url())));
    await page.goto(env("VIEW_URL"));
    const cell = `#stragglers tr.straggler[data-node="${env("NODE_ID")}"] td.cause .root`;
    await page.waitForSelector(cell, { timeout: 30000 });
    const cause = await page.$eval(`#stragglers tr.straggler[data-node="${env("NODE_ID")}"] td.cause`, (td) => ({
      severity: td.querySelector(".sev").textContent,
      summary: td.querySelector(".summary").textContent,
      root: td.querySelector(".root").textContent,
    }));
    await page.screenshot({ path: env("SHOT"), fullPage: true });
    if (errors.length) throw new Error(errors.join("\n"));
    console.log(JSON.stringify(cause));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error("chains view browser check failed: " + (e && e.stack || e));
  process.exit(1);
});
