// The protocol's routes through the stand-in's gateway, as this tab: its
// tab token as the bearer, its own x-vehicle-client-id.

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

/** Who holds a session's lease, as this tab sees it: "none", "mine" or "elsewhere". */
export function leaseKind(lease, clientId) {
  if (!lease || Date.parse(lease.expiresAt) <= Date.now()) return "none";
  return lease.clientId === clientId ? "mine" : "elsewhere";
}

/** A fresh requestId (the protocol's idempotency key). */
export function requestId(prefix = "page") {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return prefix + "-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The stand-in's login: {key}, {code} or {} (this browser's cookie, or the bearer). */
export async function logIn(body, token) {
  const headers = {"Content-Type": "application/json"};
  if (token) headers.Authorization = "Bearer " + token;
  let response;
  try {
    response = await fetch("/page/login", {
      method: "POST", headers, body: JSON.stringify(body), credentials: "same-origin", cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, "network", "the local run did not answer");
  }
  const data = await response.json().catch(() => null);
  if (!response.ok || !data || !data.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "refused", error.message || response.statusText);
  }
  return data;
}

export async function logOut() {
  await fetch("/page/logout", {
    method: "POST", headers: {"Content-Type": "application/json"}, body: "{}", credentials: "same-origin",
  }).catch(() => null);
}

export class Api {
  constructor({mount, graph, token, clientId, onUnauthorized}) {
    this.mount = mount;
    this.graph = graph;
    this.token = token;
    this.clientId = clientId;
    this.onUnauthorized = onUnauthorized;
  }

  get base() {
    return this.mount + "/g/" + encodeURIComponent(this.graph);
  }

  async call(method, path, body) {
    const headers = {
      Authorization: "Bearer " + this.token,
      "X-Vehicle-Client-Id": this.clientId,
      Accept: "application/json",
    };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(this.base + path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "same-origin", cache: "no-store",
      });
    } catch (e) {
      throw new ApiError(0, "network", "the local run did not answer");
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      // The host's error frame, or the gateway's {ok: false, error}.
      const error = data && data.type === "error" ? data : (data && data.error) || {};
      if (response.status === 401 && this.onUnauthorized) this.onUnauthorized();
      throw new ApiError(response.status, error.code || "http_" + response.status,
        error.message || response.statusText || "refused", error.details);
    }
    return data;
  }

  list() { return this.call("GET", "/sessions"); }
  create(fields) { return this.call("POST", "/sessions", {requestId: requestId(), ...fields}); }
  inspect(id) { return this.call("GET", "/sessions/" + encodeURIComponent(id)); }
  rename(id, title) {
    return this.call("PATCH", "/sessions/" + encodeURIComponent(id), {requestId: requestId(), title});
  }
  remove(id) { return this.call("DELETE", "/sessions/" + encodeURIComponent(id)); }
  claim(id, takeover) {
    const body = {requestId: requestId()};
    if (takeover) body.takeover = true;
    return this.call("POST", "/sessions/" + encodeURIComponent(id) + "/claim", body);
  }
  command(id, type, fields = {}) {
    return this.call("POST", "/sessions/" + encodeURIComponent(id) + "/commands",
      {type, requestId: requestId(), ...fields});
  }
  chime(id, fields) {
    return this.call("POST", "/sessions/" + encodeURIComponent(id) + "/chimes",
      {requestId: requestId(), ...fields});
  }
  /** The SSE watch's address (the browser's EventSource carries the cookie). */
  watchUrl(id, since) {
    return this.base + "/sessions/" + encodeURIComponent(id) + "/events?since=" + since;
  }
}
