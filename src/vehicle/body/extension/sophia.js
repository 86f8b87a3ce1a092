// vehicle's own pi extension (loaded with `pi -e sophia.js`).
//
// It owns three things inside the pi child:
//   1. the boot config: read once per process from fd 3 (written by the host,
//      then closed), it carries the model providers, with their keys, the
//      run budget and, optionally, the graph's MCP endpoint. The keys never
//      touch argv, the environment or a file.
//   2. the budget guard: it counts the model requests and the cost of the
//      current run and, before a request that would exceed the budget, aborts
//      the run and tells the host with a UI notify
//      "sophia.budget {json}" (the host turns it into budget.exceeded).
//   3. the graph tools: with `mcp: {url}` in the boot config it registers
//      that endpoint with pi's built-in MCP support (`-e builtin:mcp`), its
//      tools declared to the model as `mcp__graph__<tool>`. Every MCP HTTP
//      request carries the newest delegation token, asked of the host just
//      before it (UI `input` titled "sophia.delegated-token"); a tool call
//      the host has no token for is refused before any request is made. The
//      token lives only in memory, for the one request it was asked for.
//      A reader's session (the role at creation) is offered and may call
//      only the tools whose scopes (`_meta.sophia.local.requiredScopes`) are
//      all readers', whatever the server lists; a public session's fence
//      also keeps pi's MCP resource tools, which name no graph, shut.
//
//   4. a spare body's hand-off: a spare (boot config `spare: true`) is started
//      before anyone's session exists, so its boot config holds no session's
//      facts (only its proxy token). When the host switches it to a session
//      (`switch_session`), the extension asks the host for that session's
//      facts (UI `input` titled "sophia.session": the budget, a reader's
//      tools, a public conversation's graphs) before pi lets go of the spare's
//      own session, and refuses the switch without them; a spare is handed
//      over once, and refuses any later switch. A spare made for one new
//      session is switched to that session's file early (the host answers
//      `{"prepare": true}`: no facts yet) and handed over without a switch:
//      the host then gives the facts with the command `/sophia-session`.
//
// pi evaluates this module once per process but calls the factory again after
// fork, clone, new_session and switch_session, so everything that must outlive
// one runtime lives on globalThis; what belongs to one session (the run's
// counters, the tools told, the tokens handed over, the reader tools) is reset
// when another session starts in the same process.

import * as fs from "node:fs";
import * as net from "node:net";
import { createProvider } from "@earendil-works/pi-ai/models";

const STATE_KEY = Symbol.for("vehicle.sophia.state");
const BUDGET_PREFIX = "sophia.budget ";
// The UI request a spare asks its session's facts with, at its hand-off.
const SESSION_TITLE = "sophia.session";
// The command a spare already switched to its session is handed over with.
const HAND_OFF_COMMAND = "sophia-session";
const TOOLS_PREFIX = "sophia.tools ";

// The graph tools: the MCP server's name (its tools are mcp__graph__<tool>),
// the auth provider pi's MCP transport asks for a bearer token on every HTTP
// request, and the UI request the host answers with the delegation token.
const MCP_SERVER = "graph";
const MCP_AUTH_PROVIDER = "sophia-delegation";
const TOKEN_TITLE = "sophia.delegated-token";
const GRAPH_TOOL_PREFIX = `mcp__${MCP_SERVER}__`;
// How long the host has to answer a token request (it answers from memory).
const TOKEN_TIMEOUT_MS = 30000;
// A token asked for in a tool call's preflight serves that call's request
// only if the request follows within this time; otherwise it is asked again.
const HANDOFF_MS = 10000;
const NO_TOKEN =
  "no delegation token: the session's owner must send a request before the graph tools can be used";
const TOKEN_REFUSED =
  "the graph refused the delegation token (expired or revoked): the session's owner must send a request";
// What pi's MCP support says when the server answers 401 (it means sign-in).
const SIGN_IN_REQUIRED = "requires sign-in";
// pi's MCP resource tools: they reach every server with resources, carry no
// graph argument and no mcp__graph__ prefix.
const RESOURCE_TOOLS = new Set(["list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"]);
const READER_ONLY =
  "this conversation only reads the graph: it was started by a reader";
const RESOURCES_FENCED =
  "this conversation reads its graphs through the graph tools only, which name the graph";
// The MCP revision the scope check asks for when it lists the tools itself.
const MCP_PROTOCOL_VERSION = "2025-06-18";
// At most this many pages of tools/list.
const MAX_TOOL_PAGES = 20;

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

// A provider's or model's config with its header values made literal.
function literalHeaders(config) {
  if (config.headers !== null && typeof config.headers === "object") {
    config.headers = Object.fromEntries(
      Object.entries(config.headers).map(([name, value]) => [name, literalConfigValue(value)]),
    );
  }
  return config;
}

function newRun() {
  return { turns: 0, costUsd: 0, stopped: false };
}

const state =
  globalThis[STATE_KEY] ??
  (globalThis[STATE_KEY] = {
    boot: readBootConfig(),
    run: newRun(),
    // The RPC UI of the newest runtime (from any hook's ctx), and those
    // waiting for one.
    ui: null,
    uiWaiters: [],
    // toolCallId -> {token, at}: a token just asked for in a graph tool
    // call's preflight, used once by the next MCP request. Memory only.
    handoffs: new Map(),
  });

// The facts of the session this process serves: the boot config's, or for a
// spare, those the host gave at the hand-off (null before it: a spare serves
// no one, and its budget is the boot config's, one turn for its priming).
function facts() {
  if (state.boot?.spare === true) {
    return state.facts ?? { budget: state.boot?.budget };
  }
  return state.boot;
}

// What belongs to one session, forgotten when another starts here.
function resetSessionState() {
  state.run = newRun();
  state.reportedTools = undefined;
  state.handoffs.clear();
  state.readerTools = undefined;
  state.readerToolsPending = undefined;
}

// A spare's hand-off: the facts of the session it is switched to, asked of
// the host; a switch without them (or a second one) is refused.
async function handOff(event, ctx) {
  if (state.boot?.spare !== true) {
    return undefined;
  }
  if (state.facts !== undefined) {
    return { cancel: true };
  }
  let ui;
  try {
    ui = ctx.ui;
  } catch {
    return { cancel: true };
  }
  let raw;
  try {
    raw = await ui.input(SESSION_TITLE, JSON.stringify({ target: event?.targetSessionFile ?? null }), {
      timeout: TOKEN_TIMEOUT_MS,
    });
  } catch {
    return { cancel: true };
  }
  let given;
  try {
    given = JSON.parse(typeof raw === "string" ? raw : "");
  } catch {
    return { cancel: true };
  }
  if (given !== null && typeof given === "object" && given.prepare === true) {
    // A spare made for one new session is switched, before anyone needs
    // it, to that session's file: no facts yet (they come with
    // /sophia-session at the hand-off), and its budget stays the boot's.
    return undefined;
  }
  if (!validFacts(given)) {
    return { cancel: true };
  }
  state.facts = given;
  return undefined;
}

// A spare no session's facts have reached yet: it serves no one.
function awaitingFacts() {
  return state.boot?.spare === true && state.facts === undefined;
}

function validFacts(given) {
  return given !== null && typeof given === "object" && !Array.isArray(given) && typeof given.budget === "object";
}

// A spare already on its session's file is handed over without a switch:
// the host gives the session's facts with this command, once.
function registerHandOffCommand(pi) {
  if (!awaitingFacts()) {
    return;
  }
  pi.registerCommand(HAND_OFF_COMMAND, {
    description: "the host hands this spare to its session",
    handler: async (args) => {
      if (!awaitingFacts()) {
        throw new Error("this body serves a session already");
      }
      let given;
      try {
        given = JSON.parse(args);
      } catch {
        throw new Error("the session's facts are not JSON");
      }
      if (!validFacts(given)) {
        throw new Error("the session's facts name no budget");
      }
      state.facts = given;
      if (mcpUrl() !== null) {
        connectGraph(pi);
      }
    },
  });
}

// A boxed body has no network: the model (and MCP) are reached through the
// host's proxy, a Unix socket bound into the box. pi speaks HTTP to
// 127.0.0.1:<port> inside the box's own loopback; this bridge pipes each
// connection to that socket. Started once per process.
function startBridge(bridge) {
  if (bridge === null || typeof bridge !== "object") {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const server = net.createServer((client) => {
      // Each delta is one small write: never held for an ACK (Nagle).
      client.setNoDelay(true);
      const toProxy = net.connect(bridge.socket);
      client.pipe(toProxy);
      toProxy.pipe(client);
      const close = () => {
        client.destroy();
        toProxy.destroy();
      };
      client.on("error", close);
      toProxy.on("error", close);
      client.on("close", close);
      toProxy.on("close", close);
    });
    server.on("error", (error) => {
      process.stderr.write(`sophia: the model bridge failed (${error.message})\n`);
      resolve();
    });
    server.listen(bridge.port, "127.0.0.1", () => {
      // Port 0 (an unboxed body shares the host's loopback): the providers'
      // URLs name port 0 until now, when the real one is known.
      state.bridgePort = server.address().port;
      resolve();
    });
  });
}

if (state.bridgeReady === undefined) {
  state.bridgeReady = startBridge(state.boot?.bridge ?? null);
}

// -- graph tools ------------------------------------------------------------

// The MCP endpoint of the boot config, or null. pi's MCP transport sends a
// provider's token only to https or to http on loopback, which is what the
// host hands over (gardend's loopback /mcp, or the box's bridge).
function mcpUrl() {
  const url = state.boot?.mcp?.url;
  if (typeof url !== "string" || url === "") {
    return null;
  }
  // Through a bridge on a free port: the port is known once it listens.
  return state.bridgePort ? url.replace("127.0.0.1:0/", `127.0.0.1:${state.bridgePort}/`) : url;
}

function isGraphTool(name) {
  return typeof name === "string" && name.startsWith(GRAPH_TOOL_PREFIX);
}

function isResourceTool(name) {
  return RESOURCE_TOOLS.has(name);
}

// The role at creation was a reader's: the host says so in the boot config.
function readerSession() {
  return Array.isArray(facts()?.mcpReaders) || facts()?.access === "read";
}

// A public conversation reads its own graph and the public ones only.
function fenced() {
  const graphs = facts()?.graphs;
  return graphs !== null && typeof graphs === "object";
}

// A reader's scope: `<thing>.read` (search.<thing>.read included) or
// rdf.query. A tool is a reader's only if it names scopes and all are so.
function readerScope(scope) {
  return typeof scope === "string" && (scope.endsWith(".read") || scope === "rdf.query");
}

function readerListing(tool) {
  const scopes = tool?._meta?.sophia?.local?.requiredScopes;
  return Array.isArray(scopes) && scopes.length > 0 && scopes.every(readerScope);
}

// The JSON-RPC messages of an MCP answer (JSON, or an event stream's data).
function mcpMessages(contentType, text) {
  if (contentType.toLowerCase().startsWith("text/event-stream")) {
    const out = [];
    for (const block of text.split(/\r?\n\r?\n/)) {
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data !== "") {
        try {
          out.push(JSON.parse(data));
        } catch {
          // not a message
        }
      }
    }
    return out;
  }
  if (text.trim() === "") {
    return [];
  }
  return [JSON.parse(text)];
}

// One MCP request of the scope check, with a token asked for it alone.
async function mcpPost(connection, message, signal) {
  const token = await askToken({ purpose: "mcp-scopes" }, signal);
  if (token === undefined) {
    throw new Error(NO_TOKEN);
  }
  const headers = {
    authorization: `Bearer ${token}`,
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  };
  const proxyToken = state.boot?.bridge?.token;
  if (typeof proxyToken === "string" && proxyToken !== "") {
    headers["x-vehicle-proxy"] = proxyToken;
  }
  if (connection.session) {
    headers["mcp-session-id"] = connection.session;
  }
  if (connection.version) {
    headers["mcp-protocol-version"] = connection.version;
  }
  // A server that never answers must not hold the run: each request of
  // the scope check has the token's deadline.
  const deadline = AbortSignal.timeout(TOKEN_TIMEOUT_MS);
  const response = await fetch(connection.url, {
    method: "POST",
    headers,
    body: JSON.stringify(message),
    redirect: "error",
    signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
  });
  const text = await response.text();
  if (!response.ok) {
    throw new Error(`${message.method}: HTTP ${response.status}`);
  }
  connection.session = response.headers.get("mcp-session-id") ?? connection.session;
  const messages = mcpMessages(response.headers.get("content-type") ?? "", text);
  if (message.id === undefined) {
    return undefined;
  }
  const answer = messages.find((m) => m?.id === message.id);
  if (answer?.error || typeof answer?.result !== "object" || answer.result === null) {
    throw new Error(`${message.method}: ${answer?.error?.message ?? "no result"}`);
  }
  return answer.result;
}

// The names of the server's reader tools, by their scopes: asked of the
// server itself (pi keeps no tool's _meta), once per process.
async function listReaderTools(signal) {
  const connection = { url: mcpUrl(), session: null, version: null };
  const init = await mcpPost(
    connection,
    {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: {
        protocolVersion: MCP_PROTOCOL_VERSION,
        capabilities: {},
        clientInfo: { name: "vehicle-sophia-scopes", version: "1.0.0" },
      },
    },
    signal,
  );
  connection.version = typeof init.protocolVersion === "string" ? init.protocolVersion : null;
  await mcpPost(connection, { jsonrpc: "2.0", method: "notifications/initialized" }, signal);
  const readers = new Set();
  let cursor;
  for (let page = 0; page < MAX_TOOL_PAGES; page += 1) {
    const result = await mcpPost(
      connection,
      { jsonrpc: "2.0", id: 2 + page, method: "tools/list", params: cursor ? { cursor } : {} },
      signal,
    );
    for (const tool of Array.isArray(result.tools) ? result.tools : []) {
      if (typeof tool?.name === "string" && readerListing(tool)) {
        readers.add(tool.name);
      }
    }
    cursor = typeof result.nextCursor === "string" && result.nextCursor !== "" ? result.nextCursor : undefined;
    if (cursor === undefined) {
      break;
    }
  }
  return readers;
}

// The reader tools (short names) a reader's session may have; empty (none)
// until the server's listing could be read, which is tried again each time.
async function readerTools(signal) {
  if (state.readerTools instanceof Set) {
    return state.readerTools;
  }
  if (state.readerToolsPending === undefined) {
    state.readerToolsPending = listReaderTools(signal).then(
      (names) => {
        state.readerTools = names;
        return names;
      },
      (error) => {
        process.stderr.write(`sophia: the graph tools' scopes could not be read (${error.message})\n`);
        return new Set();
      },
    );
    state.readerToolsPending.finally(() => {
      state.readerToolsPending = undefined;
    });
  }
  return state.readerToolsPending;
}

// Why a tool is shut to this conversation, or null when it is not.
async function shutReason(name, signal) {
  if (isResourceTool(name) && fenced()) {
    return RESOURCES_FENCED;
  }
  if (isGraphTool(name) && readerSession()) {
    const readers = await readerTools(signal);
    if (!readers.has(name.slice(GRAPH_TOOL_PREFIX.length))) {
      return READER_ONLY;
    }
  }
  return null;
}

// One model request without any graph or resource tool, for a conversation
// whose tools are restricted (undefined: nothing to change).
function withoutGraphTools(payload) {
  if (!(readerSession() || fenced()) || !Array.isArray(payload?.tools)) {
    return undefined;
  }
  const kept = payload.tools.filter((tool) => {
    const name = tool?.function?.name ?? tool?.name;
    return !(isGraphTool(name) || isResourceTool(name));
  });
  const filtered = { ...payload, tools: kept };
  if (kept.length === 0) {
    delete filtered.tools;
    delete filtered.tool_choice;
  }
  return filtered;
}

// Take the shut tools out of pi's active set and of one model request.
async function withoutShutTools(pi, payload, signal) {
  if (mcpUrl() === null || !(readerSession() || fenced())) {
    return undefined;
  }
  let active;
  try {
    active = pi.getActiveTools();
  } catch {
    active = [];
  }
  const shut = new Set();
  for (const name of active) {
    if ((await shutReason(name, signal)) !== null) {
      shut.add(name);
    }
  }
  const tools = Array.isArray(payload?.tools) ? payload.tools : [];
  for (const tool of tools) {
    const name = tool?.function?.name ?? tool?.name;
    if (typeof name === "string" && !shut.has(name) && (await shutReason(name, signal)) !== null) {
      shut.add(name);
    }
  }
  if (shut.size === 0) {
    return undefined;
  }
  try {
    pi.setActiveTools(active.filter((name) => !shut.has(name)));
  } catch {
    // The request below is filtered all the same.
  }
  if (tools.length === 0) {
    return undefined;
  }
  const kept = tools.filter((tool) => !shut.has(tool?.function?.name ?? tool?.name));
  const filtered = { ...payload, tools: kept };
  if (kept.length === 0) {
    delete filtered.tools;
    delete filtered.tool_choice;
  }
  return filtered;
}

// The context's abort signal (undefined when it has none or went stale).
function signalOf(ctx) {
  try {
    return ctx.signal;
  } catch {
    return undefined;
  }
}

// Keep the newest runtime's UI: ctx goes stale when pi replaces its runtime
// (fork, clone, new_session), the RPC UI itself does not.
function captureUi(ctx) {
  let ui;
  try {
    ui = ctx?.ui;
  } catch {
    return;
  }
  if (ui === null || ui === undefined || typeof ui.input !== "function") {
    return;
  }
  state.ui = ui;
  const waiters = state.uiWaiters.splice(0);
  for (const wake of waiters) {
    wake(ui);
  }
}

function currentUi() {
  if (state.ui !== null) {
    return Promise.resolve(state.ui);
  }
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      const index = state.uiWaiters.indexOf(wake);
      if (index >= 0) {
        state.uiWaiters.splice(index, 1);
      }
      resolve(null);
    }, TOKEN_TIMEOUT_MS);
    function wake(ui) {
      clearTimeout(timer);
      resolve(ui);
    }
    state.uiWaiters.push(wake);
  });
}

// Ask the host for the newest delegation token; undefined when it has none
// (it answered cancelled), did not answer in time, or there is no UI.
// `detail` goes in the placeholder, the only free-form field of the request.
async function askToken(detail, signal) {
  const ui = await currentUi();
  if (ui === null) {
    return undefined;
  }
  let value;
  try {
    value = await ui.input(TOKEN_TITLE, JSON.stringify(detail), {
      timeout: TOKEN_TIMEOUT_MS,
      signal,
    });
  } catch {
    return undefined;
  }
  return typeof value === "string" && value.trim() !== "" ? value.trim() : undefined;
}

// The token for one MCP HTTP request: the one a tool call's preflight just
// asked for (used once), else a fresh answer from the host.
async function tokenForRequest(signal) {
  const now = Date.now();
  for (const [toolCallId, handoff] of state.handoffs) {
    state.handoffs.delete(toolCallId);
    if (now - handoff.at <= HANDOFF_MS) {
      return handoff.token;
    }
  }
  return askToken({ purpose: "mcp" }, signal);
}

function noModels() {
  throw new Error(`${MCP_AUTH_PROVIDER} only authenticates the graph tools; it has no models`);
}

// A provider with no models, whose key is resolved on every request: pi's
// MCP transport asks `auth: {provider}` for a bearer token before each HTTP
// request it makes (and awaits it). Its availability check never asks.
function delegationProvider() {
  return createProvider({
    id: MCP_AUTH_PROVIDER,
    name: "Sophia delegation",
    models: [],
    api: { stream: noModels, streamSimple: noModels },
    auth: {
      apiKey: {
        name: "the session owner's delegation token",
        check: async () => ({ type: "api_key", source: TOKEN_TITLE }),
        resolve: async ({ signal } = {}) => {
          const token = await tokenForRequest(signal);
          return token === undefined ? undefined : { auth: { apiKey: token }, source: TOKEN_TITLE };
        },
      },
    },
  });
}

function registerGraphTools(pi) {
  if (mcpUrl() === null) {
    return;
  }
  pi.registerProvider(delegationProvider());
  if (awaitingFacts()) {
    // A spare serves no one yet: its graph is connected when it is handed
    // to its session (a connection now would find no token).
    return;
  }
  connectGraph(pi);
}

// Register the graph's MCP server: pi connects it at once (asking the
// delegation provider for the session's token).
function connectGraph(pi) {
  const url = mcpUrl();
  const config = {
    url,
    auth: { provider: MCP_AUTH_PROVIDER },
    exposure: "direct",
    description: "The person's Sophia graph: its documents and folders",
  };
  const proxyToken = state.boot?.bridge?.token;
  if (typeof proxyToken === "string" && proxyToken !== "") {
    // Through the host's proxy: it opens to this body's token only (the
    // bearer is the person's, for gardend).
    config.headers = { "x-vehicle-proxy": proxyToken };
  }
  pi.registerMcpServer(MCP_SERVER, config);
}

// -- budget -----------------------------------------------------------------

// The host names the active tools (graph tools included) in run.started and
// the snapshot: tell it which they are, whenever the list changes.  This is
// told as each run starts (pi has then waited for the graph's server) and
// before each model request (a server that connected late).
function reportTools(pi, ctx) {
  let names;
  try {
    names = JSON.stringify(pi.getActiveTools());
  } catch {
    return;
  }
  if (names === state.reportedTools) {
    return;
  }
  state.reportedTools = names;
  try {
    ctx.ui.notify(TOOLS_PREFIX + names, "info");
  } catch {
    // No UI (not in RPC mode): nothing to tell.
  }
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
    if (state.bridgePort && typeof provider.baseUrl === "string") {
      provider.baseUrl = provider.baseUrl.replace("127.0.0.1:0/", `127.0.0.1:${state.bridgePort}/`);
    }
    if (typeof provider.apiKey === "string") {
      provider.apiKey = literalConfigValue(provider.apiKey);
    }
    // Header values are templates to pi as keys are; the host resolved
    // every reference it takes, so what comes here is meant as written.
    literalHeaders(provider);
    if (Array.isArray(provider.models)) {
      provider.models = provider.models.map((model) =>
        model !== null && typeof model === "object" ? literalHeaders({ ...model }) : model,
      );
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
  registerGraphTools(pi);
  registerHandOffCommand(pi);

  pi.on("session_before_switch", handOff);

  pi.on("session_start", (event, ctx) => {
    captureUi(ctx);
    if (event?.reason !== "startup") {
      // Another session in this process (a spare handed over, a new,
      // forked or resumed one): nothing of the last one carries over.
      resetSessionState();
    }
  });

  // One prompt (with its steering and follow-ups) is one run.
  pi.on("before_agent_start", (event, ctx) => {
    captureUi(ctx);
    state.run = newRun();
    const graphs = facts()?.graphs;
    const sections = event?.systemPromptOptions?.sections;
    if (graphs && sections && typeof sections === "object") {
      // The model is told the graphs it may read, and how to name one.
      sections["public-graphs"] =
        `This conversation lives on the graph ${graphs.own} and may read these public graphs: ` +
        `${(graphs.public ?? []).join(", ")}. Name one as graphId in each graph tool call ` +
        `(none: ${graphs.own}); no other graph can be read.`;
    }
  });

  // Every before_agent_start handler has run (pi's MCP extension waits
  // there for the servers whose tools are declared to the model): the run's
  // tools are known. The shut ones are taken out and the rest told before
  // pi reports the run's start (it tells its extensions first).
  pi.on("agent_start", async (_event, ctx) => {
    captureUi(ctx);
    try {
      await withoutShutTools(pi, undefined, signalOf(ctx));
    } catch (error) {
      // Told by the first model request, which filters them all the same.
      process.stderr.write(`sophia: the tools could not be filtered (${error.message})\n`);
      return;
    }
    reportTools(pi, ctx);
  });

  // A graph tool call asks for the token first: without one no request is
  // made and the call fails with a clear reason; with one, the call's
  // request uses it (see tokenForRequest).
  pi.on("tool_call", async (event, ctx) => {
    captureUi(ctx);
    if (mcpUrl() === null || !(isGraphTool(event.toolName) || isResourceTool(event.toolName))) {
      return undefined;
    }
    const signal = signalOf(ctx);
    // Shut tools (a reader's session and a writer's tool, a fenced one and
    // the resource tools) are refused before any request is made.
    const shut = await shutReason(event.toolName, signal);
    if (shut !== null) {
      return { block: true, reason: shut };
    }
    if (!isGraphTool(event.toolName)) {
      return undefined;
    }
    // A public conversation reads its own graph and the public ones, and
    // names no other (gardend would refuse it too; this says why, sooner).
    const graphs = facts()?.graphs;
    const named = event.input?.graphId ?? event.input?.graph_id;
    if (graphs && typeof named === "string" && ![graphs.own, ...(graphs.public ?? [])].includes(named)) {
      return {
        block: true,
        reason: `the graph ${named} is not one this conversation reads`,
      };
    }
    const token = await askToken({ toolName: event.toolName, toolCallId: event.toolCallId }, signal);
    if (token === undefined) {
      return { block: true, reason: NO_TOKEN };
    }
    state.handoffs.set(event.toolCallId, { token, at: Date.now() });
    return undefined;
  });

  // A preflight token its call did not use is dropped with the call. A 401
  // (pi speaks of signing in) is told as what it is here; pi reconnects, with
  // a token asked anew, on the next call.
  pi.on("tool_result", (event) => {
    state.handoffs.delete(event.toolCallId);
    if (!isGraphTool(event.toolName) || !event.isError) {
      return undefined;
    }
    const text = (event.content ?? []).map((part) => part?.text ?? "").join("");
    if (!text.includes(SIGN_IN_REQUIRED)) {
      return undefined;
    }
    return { content: [{ type: "text", text: TOKEN_REFUSED }], isError: true };
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
  pi.on("before_provider_request", async (event, ctx) => {
    captureUi(ctx);
    // A reader's session is offered the reader tools only, by their scopes,
    // and a fenced one no resource tool, whatever the server lists.
    let payload;
    try {
      payload = await withoutShutTools(pi, event?.payload, signalOf(ctx));
    } catch (error) {
      // Unsure which tools are shut: offer none of the graph's.
      process.stderr.write(`sophia: the tools could not be filtered (${error.message})\n`);
      payload = withoutGraphTools(event?.payload);
    }
    reportTools(pi, ctx);
    const run = state.run;
    const budget = facts()?.budget;
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
    return payload;
  });
}
