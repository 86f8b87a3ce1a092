// The local run's page: the stand-in's login, then the sessions and one
// conversation at a time (#/s/<sessionId> in the address, so a reload
// opens it again). No framework, no build step, nothing from outside.

import {Api, ApiError, logIn, logOut} from "./api.js";
import {Conversation} from "./conversation.js";
import {Sessions} from "./sessions.js";
import {say} from "./dom.js";

const LOGIN = "vehicle.login";
const CLIENT = "vehicle.clientId";

/** This tab's own client id: kept for the tab's life (a reload keeps the lease). */
function clientId() {
  let id = sessionStorage.getItem(CLIENT);
  if (!id) {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    id = "page-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    sessionStorage.setItem(CLIENT, id);
  }
  return id;
}

/**
 * A duplicated tab starts with a copy of its parent's session storage, and
 * so its client id: the older tab answers, and the newer takes a new one.
 */
function keepClientIdOwn(onChanged) {
  if (typeof BroadcastChannel !== "function") return;
  const channel = new BroadcastChannel("vehicle.page.clients");
  const born = Date.now() + Math.random();
  channel.onmessage = (event) => {
    const message = event.data || {};
    if (message.clientId !== sessionStorage.getItem(CLIENT)) return;
    if (message.kind === "hello" && message.born > born) {
      channel.postMessage({kind: "mine", clientId: message.clientId, to: message.born});
    } else if (message.kind === "mine" && message.to === born) {
      sessionStorage.removeItem(CLIENT);
      onChanged(clientId());
    }
  };
  channel.postMessage({kind: "hello", clientId: sessionStorage.getItem(CLIENT), born});
}

function storedLogin() {
  try {
    const login = JSON.parse(sessionStorage.getItem(LOGIN) || "null");
    if (login && Date.parse(login.expiresAt) > Date.now()) return login;
  } catch (e) {
    // fall through
  }
  sessionStorage.removeItem(LOGIN);
  return null;
}

function keep(login) {
  sessionStorage.setItem(LOGIN, JSON.stringify(login));
  return login;
}

async function signIn() {
  // The one-time link: its code is in the fragment; take it out of the address first.
  const match = /^#login=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (match) {
    history.replaceState(null, "", location.pathname);
    try {
      return keep(await logIn({code: match[1]}));
    } catch (e) {
      showLogin("That link was used already (it works once): type the key instead.");
      return null;
    }
  }
  const stored = storedLogin();
  if (stored) return stored;
  try {
    // Another tab of this browser signed in: its cookie lets this one in.
    return keep(await logIn({}));
  } catch (e) {
    showLogin("");
    return null;
  }
}

function showLogin(message) {
  document.getElementById("app").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message;
  document.getElementById("login-key").focus();
}

function waitForKey() {
  return new Promise((resolve) => {
    const form = document.getElementById("login-form");
    const input = document.getElementById("login-key");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const login = keep(await logIn({key: input.value}));
        input.value = "";
        resolve(login);
      } catch (e) {
        document.getElementById("login-error").textContent =
          e.status === 401 ? "That is not the master key." : "Not signed in: " + e.message;
        input.select();
      }
    });
  });
}

function route() {
  const match = /^#\/s\/([A-Za-z0-9_-]{1,80})$/.exec(location.hash);
  return match ? match[1] : null;
}

async function main() {
  let login = await signIn();
  if (!login) login = await waitForKey();
  document.getElementById("login").hidden = true;
  document.getElementById("app").hidden = false;
  const out = document.getElementById("logout");
  out.hidden = false;
  const graph = login.graphs[0];
  document.getElementById("who").textContent = "signed in as " + login.principal + " · graph " + graph;

  const api = new Api({
    mount: login.mount, graph, token: login.token, clientId: clientId(),
    onUnauthorized: () => {
      sessionStorage.removeItem(LOGIN);
      conversation.close();
      showLogin("The login lapsed: type the key again.");
      waitForKey().then(() => location.reload());
    },
  });
  keepClientIdOwn((id) => { api.clientId = id; });
  out.addEventListener("click", async () => {
    sessionStorage.removeItem(LOGIN);
    await logOut();
    location.replace("/");
  });

  const open = (sessionId, draft) => {
    if (route() === sessionId) conversation.open(sessionId, draft);
    else {
      pendingDraft = draft;
      location.hash = "#/s/" + sessionId;
    }
  };
  let pendingDraft = "";
  const sessions = new Sessions({
    api, list: document.getElementById("session-list"), note: document.getElementById("list-note"),
    form: document.getElementById("new-form"), onOpen: open,
  });
  let listTimer = null;
  const listChanged = () => {
    clearTimeout(listTimer);
    listTimer = setTimeout(() => sessions.refresh(), 200);
  };
  const conversation = new Conversation({
    api, root: document.getElementById("conversation"), principal: login.principal,
    onListChanged: listChanged, onOpen: open,
    onRenew: async () => {
      const renewed = keep(await logIn({}, api.token));
      api.token = renewed.token;
    },
  });
  const show = () => {
    const id = route();
    sessions.select(id);
    if (id) {
      conversation.open(id, pendingDraft);
      pendingDraft = "";
    }
  };
  window.addEventListener("hashchange", show);
  await sessions.refresh();
  show();
  // The list's states and drivers change from elsewhere too.
  setInterval(() => { if (!document.hidden) sessions.refresh(); }, 15000);
  say("");
}

main().catch((e) => {
  const message = e instanceof ApiError ? e.message : String(e);
  say("The page failed: " + message);
});
