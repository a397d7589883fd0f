// Drives the live cluster view in headless Chromium for fleet/tests/e2e/view.rs.
// Env: VIEW_URL, CHROMIUM, PLAYWRIGHT_CORE (directory), OUT_DIR, FIRST_STRAGGLER,
// SECOND_STRAGGLER, LATE_RANK, CAUSE_SUMMARY, CAUSE_ROOT (the hostile cause text the first
// straggler's agent sent). Prints "PHASE1 OK", waits for "next" on stdin (the test
// changes the data), prints "PHASE2 OK". Any page error or console error fails the run
// (a Content-Security-Policy violation is one).
"use strict";

const path = require("path");
const readline = require("readline");
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error("missing env " + k);
  return v;
};

function nextLine() {
  const rl = readline.createInterface({ input: process.stdin });
  return new Promise((resolve) => rl.once("line", (l) => { rl.close(); resolve(l); }));
}

(async () => {
  const first = env("FIRST_STRAGGLER");
  const second = env("SECOND_STRAGGLER");
  const lateRank = env("LATE_RANK");
  const out = env("OUT_DIR");
  const browser = await chromium.launch({
    executablePath: env("CHROMIUM"),
    // Root in CI containers; the page is a loopback URL the test started.
    args: ["--no-sandbox", "--disable-gpu"],
  });
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.on("pageerror", (e) => errors.push("pageerror: " + e.message));
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    // Offline: nothing but the Fleet under test may be fetched.
    const origin = new URL(env("VIEW_URL")).origin;
    await page.route("**/*", (route) =>
      route.request().url().startsWith(origin) || route.request().url().startsWith("data:")
        ? route.continue()
        : route.abort().then(() => errors.push("off-origin request: " + route.request().url())));

    await page.goto(env("VIEW_URL"));
    const row = (n) => `#stragglers tr.straggler[data-node="${n}"]`;
    await page.waitForSelector(row(first), { timeout: 30000 });
    const cells = await page.$$eval(row(first) + " td", (tds) => tds.map((t) => t.textContent));
    if (cells[0] !== first) throw new Error("straggler row names " + cells[0]);
    if (cells[3] === "-" || cells[4] === "-") throw new Error("no straggler-since: " + cells.join(" | "));
    // The cause beside the straggler: the hostile text shown as text, nothing executed or
    // turned into elements.
    const cause = await page.$eval(row(first) + " td.cause", (td) => ({
      sev: td.querySelector(".sev").textContent,
      summary: td.querySelector(".summary").textContent,
      root: td.querySelector(".root").textContent,
      elements: td.querySelectorAll("img, script").length,
    }));
    if (cause.sev !== "HIGH") throw new Error("cause severity: " + JSON.stringify(cause));
    if (cause.summary !== env("CAUSE_SUMMARY")) throw new Error("cause summary: " + JSON.stringify(cause));
    if (cause.root !== "root cause: " + env("CAUSE_ROOT")) throw new Error("cause root: " + JSON.stringify(cause));
    if (cause.elements !== 0) throw new Error("cause text became elements: " + JSON.stringify(cause));
    const pwned = await page.evaluate(() => window.__pwned);
    if (pwned !== undefined) throw new Error("hostile cause text executed: " + pwned);
    await page.waitForSelector(`#nccl .late[data-rank="${lateRank}"]`, { timeout: 30000 });
    const late = await page.textContent(`#nccl .late[data-rank="${lateRank}"]`);
    if (!/ms behind/.test(late)) throw new Error("late rank text: " + late);
    const count = await page.textContent("#straggler-count");
    if (count.trim() !== "1") throw new Error("straggler count card: " + count);
    await page.waitForFunction(() => /USD/.test(document.getElementById("cost-now").textContent));
    const panic = await page.textContent("#panic");
    if (panic.trim() !== "off") throw new Error("panic card: " + panic);
    const heat = await page.$eval("#heat", (c) => [c.width, c.height]);
    if (heat[0] < 100 || heat[1] < 5) throw new Error("heat map not drawn: " + heat);
    const gen1 = Number(await page.getAttribute("body", "data-generation"));
    const shot1 = path.join(out, "view-straggler.png");
    await page.screenshot({ path: shot1, fullPage: true });
    console.log("screenshot " + shot1);
    if (errors.length) throw new Error(errors.join("\n"));
    console.log("PHASE1 OK");

    const line = await nextLine();
    if (line !== "next") throw new Error("unexpected input " + line);
    await page.waitForFunction(
      ([a, b]) => !document.querySelector(`#stragglers tr.straggler[data-node="${a}"]`) &&
        !!document.querySelector(`#stragglers tr.straggler[data-node="${b}"]`),
      [first, second],
      { timeout: 30000 });
    const gen2 = Number(await page.getAttribute("body", "data-generation"));
    if (!(gen2 > gen1)) throw new Error("generation did not advance: " + gen1 + " -> " + gen2);
    const shot2 = path.join(out, "view-updated.png");
    await page.screenshot({ path: shot2, fullPage: true });
    console.log("screenshot " + shot2);
    if (errors.length) throw new Error(errors.join("\n"));
    console.log("PHASE2 OK");
  } finally {
    await browser.close();
  }
  // stdin stays open on the test's side: exit instead of waiting for it.
  process.exit(0);
})().catch((e) => {
  console.error("view browser test failed: " + (e && e.stack || e));
  process.exit(1);
});
