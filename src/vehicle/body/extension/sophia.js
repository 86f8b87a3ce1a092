// vehicle's own pi extension (loaded with `pi -e sophia.js`).
//
// It owns two things inside the pi child:
//   1. the boot config: read once per process from fd 3 (written by the host,
//      then closed), it carries the model providers, with their keys, and the
//      run budget. The keys never touch argv, the environment or a file.
//   2. the budget guard: it counts the model requests and the cost of the
//      current run and, before a request that would exceed the budget, aborts
//      the run and tells the host with a UI notify
//      "sophia.budget {json}" (the host turns it into budget.exceeded).
//
// pi evaluates this module once per process but calls the factory again after
// fork, clone and new_session, so everything that must outlive one runtime
// lives on globalThis.

import * as fs from "node:fs";
import * as net from "node:net";

const STATE_KEY = Symbol.for("vehicle.sophia.state");
const BUDGET_PREFIX = "sophia.budget ";

// fd 3 is the host's boot channel only when it is a pipe, file or socket the
// host handed over. Without it, Node's own event loop may hold fd 3 (an
// epoll/eventfd anon inode), which must not be read or closed.
function readBootConfig() {
  let stat;
  try {
    stat = fs.fstatSync(3);
  } catch {
    return null;
  }
  if (!(stat.isFIFO() || stat.isFile() || stat.isSocket())) {
    return null;
  }
  let raw;
  try {
    raw = fs.readFileSync(3, "utf8");
  } finally {
    try {
      fs.closeSync(3);
    } catch {
      // already closed
    }
  }
  if (raw.trim() === "") {
    return null;
  }
  try {
    const config = JSON.parse(raw);
    if (config === null || typeof config !== "object" || Array.isArray(config)) {
      throw new Error("not a JSON object");
    }
    return config;
  } catch (error) {
    // Never echo the content: it holds keys.
    process.stderr.write(`sophia: the boot config on fd 3 is not valid JSON (${error.message})\n`);
    return null;
  }
}

// pi expands "$NAME", "${NAME}" and a leading "!command" in apiKey values;
// "$$" and "$!" stand for literal "$" and "!". A function replacer, because a
// replacement string would treat "$" specially itself.
function literalConfigValue(value) {
  return String(value).replace(/[$!]/g, (character) => "$" + character);
}

function newRun() {
  return { turns: 0, costUsd: 0, stopped: false };
}

const state =
  globalThis[STATE_KEY] ??
  (globalThis[STATE_KEY] = { boot: readBootConfig(), run: newRun() });

// A boxed body has no network: the model (and MCP) are reached through the
// host's door, a Unix socket bound into the box. pi speaks HTTP to
// 127.0.0.1:<port> inside the box's own loopback; this bridge pipes each
// connection to that socket. Started once per process.
function startBridge(bridge) {
  if (bridge === null || typeof bridge !== "object") {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const server = net.createServer((client) => {
      const door = net.connect(bridge.socket);
      client.pipe(door);
      door.pipe(client);
      const close = () => {
        client.destroy();
        door.destroy();
      };
      client.on("error", close);
      door.on("error", close);
      client.on("close", close);
      door.on("close", close);
    });
    server.on("error", (error) => {
      process.stderr.write(`sophia: the model bridge failed (${error.message})\n`);
      resolve();
    });
    server.listen(bridge.port, "127.0.0.1", () => resolve());
  });
}

if (state.bridgeReady === undefined) {
  state.bridgeReady = startBridge(state.boot?.bridge ?? null);
}

function limit(value) {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : null;
}

function registerProviders(pi) {
  const providers = state.boot?.providers;
  if (providers === null || typeof providers !== "object") {
    return;
  }
  for (const [name, config] of Object.entries(providers)) {
    if (config === null || typeof config !== "object") {
      continue;
    }
    const provider = { ...config };
    if (typeof provider.apiKey === "string") {
      provider.apiKey = literalConfigValue(provider.apiKey);
    }
    pi.registerProvider(name, provider);
  }
}

function budgetExceeded(run, budget) {
  const maxTurns = limit(budget?.maxTurns);
  const maxCostUsd = limit(budget?.maxCostUsd);
  if (maxTurns !== null && run.turns >= maxTurns) {
    return "max_turns";
  }
  if (maxCostUsd !== null && run.costUsd >= maxCostUsd) {
    return "max_cost";
  }
  return null;
}

export default async function sophia(pi) {
  await state.bridgeReady;
  registerProviders(pi);

  // One prompt (with its steering and follow-ups) is one run.
  pi.on("before_agent_start", () => {
    state.run = newRun();
  });

  pi.on("message_end", (event) => {
    const message = event.message;
    if (message?.role !== "assistant") {
      return;
    }
    const total = message.usage?.cost?.total;
    if (typeof total === "number" && Number.isFinite(total)) {
      state.run.costUsd += total;
    }
  });

  // Runs right before each model request: stop before the request that would
  // go over the budget, so exactly maxTurns requests are made.
  pi.on("before_provider_request", (_event, ctx) => {
    const run = state.run;
    const budget = state.boot?.budget;
    const reason = run.stopped ? null : budgetExceeded(run, budget);
    if (run.stopped || reason !== null) {
      ctx.abort();
      if (reason !== null) {
        run.stopped = true;
        const report = {
          reason,
          turns: run.turns,
          costUsd: run.costUsd,
          maxTurns: limit(budget?.maxTurns),
          maxCostUsd: limit(budget?.maxCostUsd),
        };
        ctx.ui.notify(BUDGET_PREFIX + JSON.stringify(report), "warning");
      }
      return undefined;
    }
    run.turns += 1;
    return undefined;
  });
}
