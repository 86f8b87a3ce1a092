// The person's sessions on the graph: title, state, last activity and who
// drives each; a new one (chat or agent, a model, a title).

import {el, replace, when} from "./dom.js";
import {leaseKind} from "./api.js";

export class Sessions {
  constructor({api, list, note, form, onOpen}) {
    this.api = api;
    this.list = list;
    this.note = note;
    this.form = form;
    this.onOpen = onOpen;
    this.current = null;
    this.sessions = [];
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.create();
    });
  }

  async refresh() {
    try {
      const frame = await this.api.list();
      this.sessions = frame.value.sessions;
      this.note.textContent = this.sessions.length ? "" : "No sessions yet.";
    } catch (e) {
      this.note.textContent = "The list could not be read: " + e.message;
      return;
    }
    this.render();
  }

  select(sessionId) {
    this.current = sessionId;
    this.render();
  }

  holder(summary) {
    const kind = leaseKind(summary.lease, this.api.clientId);
    if (kind === "none") return "nobody drives";
    return kind === "mine" ? "this tab drives" : "driven elsewhere (" + summary.lease.clientId + ")";
  }

  render() {
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.sessionId : null;
    replace(this.list, this.sessions.map((s) => {
      const button = el("button", {
        type: "button", class: "session", dataset: {sessionId: s.sessionId},
        "aria-current": s.sessionId === this.current ? "true" : null,
        onclick: () => this.onOpen(s.sessionId),
      },
      el("span", {class: "name"}, s.title || s.preview || "New conversation"),
      el("span", {class: "facts"},
        s.status, " · ", s.profile, " · ", when(s.updatedAt), " · ", this.holder(s)));
      return el("li", {}, button);
    }));
    if (focused) {
      const again = this.list.querySelector(`button[data-session-id="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  async create() {
    const data = new FormData(this.form);
    const fields = {profile: data.get("profile") || "chat"};
    const model = String(data.get("model") || "").trim();
    const title = String(data.get("title") || "").trim();
    if (model) fields.model = model;
    if (title) fields.title = title;
    try {
      const frame = await this.api.create(fields);
      this.form.reset();
      this.form.closest("details").open = false;
      this.note.textContent = "";
      await this.refresh();
      this.onOpen(frame.value.session.sessionId);
    } catch (e) {
      this.note.textContent = "Not started: " + e.message;
    }
  }
}
