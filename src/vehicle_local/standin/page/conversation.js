// One conversation: its transcript, the reply as it streams, the prompt box,
// the lease, the room and its chimes, and every event as it came.
//
// What is shown is the host's snapshot (GET /sessions/:id: the transcript up
// to its cursor) and, after that cursor, what the watch brings: a delta
// grows the reply in place, a completed message replaces it. When a run
// settles the snapshot is read again, so the page and a reload of it show
// the same transcript.

import {el, append, replace, when, usd, say} from "./dom.js";
import {Watch} from "./watch.js";
import {leaseKind} from "./api.js";

const POLICIES = ["observe", "mute", "suggest", "co-drive"];

//: Events after which the snapshot is read again (what the events do not carry).
const REREAD = new Set([
  "run.settled", "chime.received", "chime.resolved", "command.interrupted", "session.forked",
  "session.cloned", "queue.stranded",
]);

/**
 * What a reasoning model thought before it answered, folded under "Thinking"
 * (open while it streams): {node, text, value}.
 */
function thinkingBlock(value, open) {
  const text = el("div", {class: "thought"}, value);
  return {node: el("details", {class: "thinking", open}, el("summary", {}, "Thinking"), text), text, value};
}

export class Conversation {
  /**
   * @param api the routes (api.js)
   * @param root the element to draw in
   * @param principal who this tab is
   * @param onListChanged () => the session list should be read again
   * @param onOpen (sessionId, draft) => open another session
   * @param onRenew async () => renew this browser's cookie (and the tab's token)
   */
  constructor({api, root, principal, onListChanged, onOpen, onRenew}) {
    this.api = api;
    this.root = root;
    this.principal = principal;
    this.onListChanged = onListChanged;
    this.onOpen = onOpen;
    this.onRenew = onRenew;
    this.watch = null;
    this.sessionId = null;
  }

  // -- opening and closing -------------------------------------------------

  async open(sessionId, draft) {
    this.close();
    this.sessionId = sessionId;
    this.summary = null;
    this.transcript = [];
    this.chimes = [];
    this.cursor = 0;
    this.lastSeq = 0;
    this.gaps = 0;
    this.repeats = 0;
    this.count = 0;
    this.tail = [];
    this.notes = [];
    this.tools = new Map();
    this.streaming = null;
    this.lastRun = null;
    this.stream = "connecting";
    this.build();
    try {
      await this.refresh();
    } catch (e) {
      if (this.sessionId !== sessionId) return;
      replace(this.root, el("p", {class: "error", role: "alert"}, "This session cannot be opened: ", e.message));
      this.sessionId = null;
      return;
    }
    if (this.sessionId !== sessionId) return;
    if (draft) this.parts.text.value = draft;
    this.watch = new Watch({
      url: (since) => this.api.watchUrl(sessionId, since),
      since: () => this.lastSeq,
      onFrame: (frame) => this.receive(frame),
      onState: (state) => this.setStream(state),
      beforeReopen: () => this.beforeReopen(),
    });
    // From the start: the event list shows the whole log, each seq once.
    this.watch.start();
    this.parts.text.focus();
  }

  close() {
    if (this.watch) this.watch.stop();
    this.watch = null;
    this.sessionId = null;
    clearTimeout(this.rereadTimer);
  }

  async refresh() {
    const id = this.sessionId;
    const frame = await this.api.inspect(id);
    if (this.sessionId !== id) return;
    const value = frame.value;
    this.summary = value.session;
    this.transcript = value.transcript || [];
    this.chimes = (value.chimes || []).filter((c) => c.status === "pending");
    this.cursor = value.session.cursor;
    this.tail = this.tail.filter((item) => item.seq > this.cursor);
    if (this.summary.status !== "running") this.streaming = null;
    this.renderAll();
  }

  reread() {
    clearTimeout(this.rereadTimer);
    this.rereadTimer = setTimeout(() => {
      this.refresh().catch((e) => this.showError(e));
    }, 100);
  }

  async beforeReopen() {
    // The browser gave up on the stream: is the session still there, and
    // are we still let in? Then renew the cookie and open it again.
    try {
      await this.refresh();
    } catch (e) {
      if (e.status === 404) {
        this.showDeleted(null);
        return false;
      }
      if (e.status === 401) return false;
      return "later";
    }
    try {
      await this.onRenew();
    } catch (e) {
      return e.status === 401 ? false : "later";
    }
    return true;
  }

  // -- the skeleton --------------------------------------------------------

  build() {
    const p = {};
    p.title = el("h2", {id: "conv-title", tabindex: "-1"});
    p.status = el("span", {class: "pill"});
    p.meta = el("p", {class: "meta"});
    p.renameInput = el("input", {id: "rename-input", type: "text", autocomplete: "off", maxlength: "200"});
    p.renameForm = el("form", {class: "inline", hidden: true, onsubmit: (e) => { e.preventDefault(); this.rename(); }},
      el("label", {for: "rename-input"}, "New title "), p.renameInput,
      el("button", {type: "submit"}, "Save"),
      el("button", {type: "button", onclick: () => this.toggle(p.renameForm, false)}, "Cancel"));
    p.confirm = el("div", {class: "inline confirm", hidden: true, role: "group", "aria-label": "Confirm delete"},
      el("span", {}, "Delete this conversation? The host moves it to its trash; it can be restored by hand. "),
      el("button", {type: "button", class: "danger", id: "confirm-delete", onclick: () => this.remove()}, "Delete"),
      el("button", {type: "button", onclick: () => this.toggle(p.confirm, false)}, "Keep it"));
    p.actions = el("div", {class: "actions"},
      el("button", {type: "button", id: "rename", onclick: () => {
        p.renameInput.value = (this.summary && this.summary.title) || "";
        this.toggle(p.renameForm, true, p.renameInput);
      }}, "Rename"),
      el("button", {type: "button", id: "clone", onclick: () => this.branch("clone")}, "Clone"),
      el("button", {type: "button", id: "delete", onclick: () => this.toggle(p.confirm, true, p.confirm.querySelector("button"))}, "Delete"));
    p.lease = el("div", {class: "lease", role: "status"});
    p.transcript = el("ol", {class: "transcript", "aria-label": "Transcript"});
    p.run = el("p", {class: "run", role: "status"});
    p.text = el("textarea", {id: "composer-text", rows: "3", "aria-describedby": "composer-hint",
      onkeydown: (e) => this.key(e)});
    p.send = el("button", {type: "submit", id: "send"}, "Send");
    p.steer = el("button", {type: "button", id: "steer", onclick: () => this.send("steer")}, "Steer");
    p.followUp = el("button", {type: "button", id: "follow-up", onclick: () => this.send("follow_up")}, "Follow up");
    p.abort = el("button", {type: "button", id: "abort", class: "danger", onclick: () => this.abort()}, "Abort");
    p.composer = el("form", {class: "composer", onsubmit: (e) => { e.preventDefault(); this.send(); }},
      el("label", {for: "composer-text"}, "Your message"),
      p.text,
      el("p", {id: "composer-hint", class: "hint"},
        "Enter sends (while a run is under way: queued as a follow-up); Shift+Enter for a new line; Esc aborts a run."),
      el("div", {class: "buttons"}, p.send, p.steer, p.followUp, p.abort));
    p.error = el("p", {class: "error", role: "alert"});
    p.policy = el("select", {id: "room-policy"}, POLICIES.map((name) => el("option", {value: name}, name)));
    p.chimes = el("ul", {class: "chimes"});
    p.chimeAuthor = el("input", {id: "chime-author", type: "text", autocomplete: "off", value: "a collaborator"});
    p.chimeText = el("textarea", {id: "chime-text", rows: "2"});
    p.chimeDelivery = el("select", {id: "chime-delivery"},
      el("option", {value: "follow_up"}, "follow up"), el("option", {value: "steer"}, "steer"));
    p.roomSummary = el("summary");
    p.room = el("details", {class: "room"}, p.roomSummary,
      el("form", {class: "inline", onsubmit: (e) => { e.preventDefault(); this.setPolicy(); }},
        el("label", {for: "room-policy"}, "Room policy "), p.policy, el("button", {type: "submit"}, "Set")),
      el("h3", {}, "Chimes waiting for the driver"), p.chimes,
      el("form", {class: "chime-form", onsubmit: (e) => { e.preventDefault(); this.chime(); }},
        el("h3", {}, "Chime in as a collaborator"),
        el("label", {for: "chime-author"}, "Name"), p.chimeAuthor,
        el("label", {for: "chime-text"}, "Words"), p.chimeText,
        el("label", {for: "chime-delivery"}, "Delivered as"), p.chimeDelivery,
        el("button", {type: "submit"}, "Chime")));
    p.eventsSummary = el("summary");
    p.events = el("ol", {class: "events"});
    p.eventsBox = el("details", {class: "events-box"}, p.eventsSummary, p.events);
    this.parts = p;
    replace(this.root,
      el("header", {class: "conv-head"}, el("div", {class: "title-row"}, p.title, p.status), p.meta,
        p.actions, p.renameForm, p.confirm),
      p.lease, p.transcript, p.run, p.composer, p.error, p.room, p.eventsBox);
    this.root.dataset.sessionId = this.sessionId;
    this.renderEvents();
  }

  toggle(node, show, focus) {
    node.hidden = !show;
    if (show && focus) focus.focus();
  }

  // -- drawing -------------------------------------------------------------

  renderAll() {
    this.renderHead();
    this.renderLease();
    this.renderTranscript();
    this.renderRun();
    this.renderRoom();
  }

  renderHead() {
    const s = this.summary;
    const p = this.parts;
    p.title.textContent = s.title || s.preview || "New conversation";
    p.status.textContent = s.status === "running" ? "running" : "idle";
    p.status.className = "pill " + (s.status === "running" ? "running" : "idle");
    this.root.dataset.status = s.status;
    const bits = [s.model, s.profile + (s.isolation ? " (" + s.isolation + ")" : ""),
      "started " + when(s.createdAt), "stream " + this.stream];
    if (s.parent) bits.push((s.parent.kind === "fork" ? "forked from " : "cloned from ") + s.parent.sessionId);
    p.meta.textContent = bits.join(" · ");
    this.root.dataset.stream = this.stream;
    const running = s.status === "running";
    p.send.textContent = running ? "Queue" : "Send";
    p.steer.hidden = !running;
    p.followUp.hidden = !running;
    p.abort.hidden = !running;
  }

  leaseState() {
    const lease = this.summary && this.summary.lease;
    return {kind: leaseKind(lease, this.api.clientId), lease};
  }

  renderLease() {
    const state = this.leaseState();
    this.root.dataset.lease = state.kind;
    const p = this.parts;
    if (state.kind === "mine") {
      replace(p.lease, el("span", {class: "drives"}, "This tab drives this conversation."));
    } else if (state.kind === "elsewhere") {
      const same = state.lease.principal === this.principal;
      replace(p.lease,
        el("span", {class: "elsewhere"}, "Driven elsewhere: ",
          same ? "another tab or client of yours (" : "someone else (",
          state.lease.clientId, ")."),
        same ? el("button", {type: "button", id: "take-over", onclick: () => this.claim(true)}, "Take over here") : null);
    } else {
      replace(p.lease, el("span", {}, "Nobody drives this conversation now."),
        el("button", {type: "button", id: "drive", onclick: () => this.claim(false)}, "Drive it from this tab"));
    }
    const mine = state.kind === "mine";
    for (const button of [p.send, p.steer, p.followUp, p.abort]) button.disabled = !mine;
  }

  renderTranscript() {
    // The snapshot's messages, the messages since its cursor and the notes
    // the event log makes (aborts, interruptions, chimes...), in time order.
    const shown = this.transcript.slice(0, this.transcript.length - this.broughtAgain());
    const items = [
      ...shown.map((item) => ({at: item.timestamp, node: this.transcriptItem(item)})),
      ...this.tail, ...this.notes,
    ];
    let last = 0;
    for (const item of items) {
      const at = Date.parse(item.at);
      item.time = Number.isNaN(at) ? last : at;
      last = item.time;
    }
    items.sort((x, y) => x.time - y.time);
    replace(this.parts.transcript, items.map((item) => item.node));
    if (this.streaming) this.parts.transcript.append(this.streaming.node);
    if (!items.length && !this.streaming) {
      this.parts.transcript.append(el("li", {class: "empty"}, "Nothing said yet."));
    }
  }

  /**
   * How many of the snapshot's last messages the watch has brought again.
   * The snapshot's transcript is pi's file, read as its cursor is taken: a
   * message pi has written whose event is not recorded yet is in the
   * transcript and comes after the cursor too. The watch's copy is shown.
   */
  broughtAgain() {
    const brought = this.tail.filter((item) => item.message).map((item) => item.message);
    for (let k = Math.min(this.transcript.length, brought.length); k > 0; k--) {
      const last = this.transcript.slice(this.transcript.length - k);
      if (last.every((m, i) => m.role === brought[i].role && (m.text || "") === (brought[i].text || ""))) {
        return k;
      }
    }
    return 0;
  }

  transcriptItem(item) {
    if (item.role === "user") {
      return el("li", {class: "msg user", dataset: {entry: item.entryId}},
        el("div", {class: "who"}, "You", el("time", {datetime: item.timestamp || ""}, " · " + when(item.timestamp))),
        el("div", {class: "text"}, item.text || ""),
        el("button", {type: "button", class: "fork", onclick: () => this.branch("fork", item.entryId)},
          "Fork from here"));
    }
    if (item.role === "assistant") {
      return el("li", {class: "msg assistant", dataset: {entry: item.entryId}},
        el("div", {class: "who"}, "pi", el("time", {datetime: item.timestamp || ""}, " · " + when(item.timestamp))),
        item.thinking ? thinkingBlock(item.thinking, false).node : null,
        item.text ? el("div", {class: "text"}, item.text) : null,
        (item.toolCalls || []).map((call) => el("details", {class: "tool-call"},
          el("summary", {}, "Tool call: ", call.name || "?"), el("p", {}, "call id ", call.id || "?"))));
    }
    return el("li", {class: "msg tool" + (item.isError ? " failed" : ""), dataset: {entry: item.entryId}},
      el("details", {}, el("summary", {}, (item.isError ? "Tool failed: " : "Tool result: ") + (item.toolName || "?")),
        el("pre", {class: "text"}, item.text || "")));
  }

  renderRun() {
    const s = this.summary;
    const budget = s.budget ? "budget " + s.budget.maxTurns + " turns, " + usd(s.budget.maxCostUsd) + " a run" : "";
    const run = this.lastRun;
    if (!run) {
      this.parts.run.textContent = budget ? "No run yet · " + budget : "";
      return;
    }
    const how = run.aborted ? "aborted" : "done";
    const turns = run.turns ?? 0;
    this.parts.run.textContent = "Last run " + how + (run.stopReason ? " (" + run.stopReason + ")" : "") + ": " +
      turns + (turns === 1 ? " turn" : " turns") + ", cost " + usd(run.costUsd) + (budget ? " · " + budget : "");
  }

  renderRoom() {
    const p = this.parts;
    p.policy.value = this.summary.roomPolicy;
    p.roomSummary.textContent = "Room: " + this.summary.roomPolicy + " · " + this.chimes.length + " chime" +
      (this.chimes.length === 1 ? "" : "s") + " waiting";
    replace(p.chimes, this.chimes.length ? this.chimes.map((chime) => el("li", {class: "chime"},
      el("div", {class: "who"}, chime.author, " (as a ", chime.delivery.replace("_", " "), ") · ", when(chime.receivedAt)),
      el("div", {class: "text"}, chime.text || ""),
      el("button", {type: "button", onclick: () => this.resolve("accept_chime", chime.chimeId)}, "Accept"),
      el("button", {type: "button", onclick: () => this.resolve("reject_chime", chime.chimeId)}, "Reject"),
    )) : el("li", {class: "empty"}, "None."));
    if (!this.chimes.length) this.parts.room.dataset.pending = "0";
    else this.parts.room.dataset.pending = String(this.chimes.length);
  }

  renderEvents() {
    const p = this.parts;
    p.eventsSummary.textContent = "Events: " + this.count + " (last seq " + this.lastSeq + "), gaps " +
      this.gaps + ", repeats " + this.repeats;
    p.eventsBox.dataset.gaps = String(this.gaps);
    p.eventsBox.dataset.repeats = String(this.repeats);
    p.eventsBox.dataset.lastSeq = String(this.lastSeq);
  }

  setStream(state) {
    this.stream = state;
    if (this.summary) this.renderHead();
  }

  // -- the watch -----------------------------------------------------------

  receive(frame) {
    if (frame.type === "message.delta" || frame.type === "thinking.delta") {
      if (frame.seq === undefined || frame.seq === null) {
        this.delta(frame.data || {}, frame.type === "thinking.delta");
      }
      return;
    }
    const seq = frame.seq;
    if (typeof seq !== "number") return;
    if (seq <= this.lastSeq) {
      this.repeats += 1;
      this.renderEvents();
      return;
    }
    if (seq !== this.lastSeq + 1) this.gaps += 1;
    this.lastSeq = seq;
    this.count += 1;
    this.parts.events.append(el("li", {dataset: {seq: String(seq), type: frame.type}},
      String(seq), " ", frame.type, " · ", when(frame.timestamp)));
    if (frame.type === "run.settled") {
      this.lastRun = frame.data;
      if (this.summary) this.renderRun();
    }
    this.renderEvents();
    this.remember(frame);
    if (seq > this.cursor && this.summary) this.live(frame);
  }

  /** The notes an event makes, from the whole log (so a reload shows them too). */
  remember(frame) {
    const data = frame.data || {};
    const text = {
      "run.error": () => ["The model failed: " + data.message, "note error-note"],
      "budget.exceeded": () => ["Budget reached (" + data.reason.replace("_", " ") + "): " + data.turns +
        " turns, " + usd(data.costUsd) + "; the run was stopped.", "note error-note"],
      "command.failed": () => ["A command failed: " + data.error, "note error-note"],
      "command.aborted": () => ["Aborted.", "note"],
      "command.interrupted": () => ["Interrupted: the host stopped while it ran (" + (data.reason || "") + ").",
        "note"],
      "body.exited": () => ["The body ended unasked.", "note error-note"],
      "chime.received": () => ["Chime from " + data.author + " (as a " + data.delivery.replace("_", " ") + ").",
        "note chime-note"],
      "lease.revoked": () => data.clientId === this.api.clientId
        ? ["Another tab or client of yours took over (" + data.by.clientId + ").", "note"] : null,
    }[frame.type];
    const made = text && text();
    if (!made) return;
    this.notes.push({at: frame.timestamp, node: el("li", {class: made[1], dataset: {seq: String(frame.seq)}}, made[0])});
    if (this.summary) this.renderTranscript();
  }

  delta(data, thought) {
    if (!this.streaming) {
      const text = el("div", {class: "text"});
      const node = el("li", {class: "msg assistant streaming", "aria-busy": "true"},
        el("div", {class: "who"}, "pi", el("span", {class: "typing"}, " · replying")), text);
      this.streaming = {node, text, value: "", thinking: null};
      const empty = this.parts.transcript.querySelector("li.empty");
      if (empty) empty.remove();
      this.parts.transcript.append(node);
    }
    if (this.summary && this.summary.status !== "running") {
      // A reply is streaming: a run is under way, whatever came first.
      this.summary.status = "running";
      this.renderHead();
    }
    if (thought) {
      // What the model thinks before it answers: shown apart, open while
      // it streams, and never as part of the answer.
      if (!this.streaming.thinking) {
        this.streaming.thinking = thinkingBlock("", true);
        this.streaming.text.before(this.streaming.thinking.node);
      }
      this.streaming.thinking.value += data.text || "";
      this.streaming.thinking.text.textContent = this.streaming.thinking.value;
      return;
    }
    this.streaming.value += data.text || "";
    this.streaming.text.textContent = this.streaming.value;
  }

  endStreaming() {
    if (this.streaming) this.streaming.node.remove();
    this.streaming = null;
  }

  addTail(frame, node, message) {
    this.tail.push({seq: frame.seq, at: frame.timestamp, node, message});
    const empty = this.parts.transcript.querySelector("li.empty");
    if (empty) empty.remove();
    if (this.streaming) this.parts.transcript.insertBefore(node, this.streaming.node);
    else this.parts.transcript.append(node);
  }

  live(frame) {
    const data = frame.data || {};
    const s = this.summary;
    switch (frame.type) {
      case "message.completed":
        if (data.role === "assistant") this.endStreaming();
        this.addTail(frame, this.transcriptItem({
          role: data.role, text: data.text, thinking: data.thinking, toolCalls: data.toolCalls,
          timestamp: frame.timestamp,
        }), {role: data.role, text: data.text});
        if (data.role === "user") {
          // A fork point once the snapshot names its entry.
          this.tail[this.tail.length - 1].node.querySelector("button.fork").remove();
        }
        // The snapshot had it already (read ahead of its cursor): one copy.
        if (this.broughtAgain()) this.renderTranscript();
        break;
      case "tool.started": {
        const node = el("li", {class: "msg tool running"},
          el("details", {}, el("summary", {}, "Tool running: " + data.toolName),
            el("p", {}, "arguments: " + data.argsBytes + " bytes")));
        this.tools.set(data.toolCallId, node);
        this.addTail(frame, node);
        break;
      }
      case "tool.result": {
        const node = this.tools.get(data.toolCallId);
        if (node) {
          node.classList.remove("running");
          if (data.isError) node.classList.add("failed");
          node.querySelector("summary").textContent =
            (data.isError ? "Tool failed: " : "Tool result: ") + data.toolName;
        }
        break;
      }
      case "run.started":
        s.status = "running";
        this.renderHead();
        say("A run started.");
        break;
      case "run.settled":
        s.status = "idle";
        this.endStreaming();
        this.renderHead();
        this.onListChanged();
        say("The run settled.");
        break;
      case "command.interrupted":
      case "body.exited":
        this.endStreaming();
        break;
      case "lease.claimed":
      case "lease.renewed": {
        const expires = new Date(Date.parse(frame.timestamp) + data.ttlMs).toISOString();
        s.lease = {principal: data.principal, clientId: data.clientId, ttlMs: data.ttlMs,
          claimedAt: frame.timestamp, expiresAt: expires};
        this.renderLease();
        if (frame.type === "lease.claimed") this.onListChanged();
        break;
      }
      case "lease.revoked":
      case "lease.released":
      case "lease.expired":
        if (s.lease && s.lease.clientId === data.clientId) s.lease = null;
        this.renderLease();
        this.onListChanged();
        break;
      case "session.renamed":
        s.title = data.title;
        this.renderHead();
        this.onListChanged();
        break;
      case "room.policy":
        s.roomPolicy = data.policy;
        this.renderRoom();
        break;
      case "session.deleted":
        this.showDeleted({sessionId: this.sessionId, trashedAs: data.trashedAs});
        return;
      default:
        break;
    }
    if (REREAD.has(frame.type)) this.reread();
  }

  // -- acts ----------------------------------------------------------------

  showError(error) {
    let text = error.message || String(error);
    if (error.code === "lease_held") text = "Another tab or client drives this conversation: " + text;
    this.parts.error.textContent = text;
    this.parts.error.dataset.code = error.code || "";
  }

  clearError() {
    this.parts.error.textContent = "";
    this.parts.error.dataset.code = "";
  }

  async act(work) {
    this.clearError();
    try {
      return await work();
    } catch (e) {
      this.showError(e);
      return null;
    }
  }

  key(event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      this.send();
    } else if (event.key === "Escape" && this.summary && this.summary.status === "running") {
      event.preventDefault();
      this.abort();
    }
  }

  async send(kind) {
    const text = this.parts.text.value;
    if (!text.trim()) return;
    if (!kind) kind = this.summary.status === "running" ? "follow_up" : "prompt";
    const done = await this.act(() => this.api.command(this.sessionId, kind, {text}));
    if (done) {
      this.parts.text.value = "";
      say(kind === "steer" ? "Steer sent." : kind === "follow_up" ? "Follow-up queued." : "Sent.");
    }
  }

  async abort() {
    const done = await this.act(() => this.api.command(this.sessionId, "abort"));
    if (done) say("Abort sent.");
  }

  async claim(takeover) {
    const frame = await this.act(() => this.api.claim(this.sessionId, takeover));
    if (frame) {
      this.summary = frame.value.session;
      this.renderHead();
      this.renderLease();
      this.onListChanged();
      say("This tab drives now.");
    }
  }

  async rename() {
    const title = this.parts.renameInput.value.trim();
    const frame = await this.act(() => this.api.rename(this.sessionId, title || null));
    if (frame) {
      this.summary = frame.value.session;
      this.toggle(this.parts.renameForm, false);
      this.renderHead();
      this.onListChanged();
      this.parts.title.focus();
    }
  }

  async branch(kind, entryId) {
    const frame = await this.act(() =>
      this.api.command(this.sessionId, kind, kind === "fork" ? {entryId} : {}));
    if (frame) {
      this.onListChanged();
      this.onOpen(frame.value.session.sessionId, frame.value.selectedText || "");
    }
  }

  async setPolicy() {
    const policy = this.parts.policy.value;
    const frame = await this.act(() => this.api.command(this.sessionId, "set_room_policy", {policy}));
    if (frame) {
      this.summary.roomPolicy = policy;
      this.renderRoom();
      say("Room policy: " + policy + ".");
    }
  }

  async resolve(kind, chimeId) {
    const frame = await this.act(() => this.api.command(this.sessionId, kind, {chimeId}));
    if (frame) this.reread();
  }

  async chime() {
    const p = this.parts;
    const frame = await this.act(() => this.api.chime(this.sessionId, {
      author: p.chimeAuthor.value.trim(), text: p.chimeText.value, delivery: p.chimeDelivery.value,
    }));
    if (frame) {
      p.chimeText.value = "";
      say(frame.type === "chime.rejected" ? "The room refused the chime." : "Chime sent.");
    }
  }

  async remove() {
    const frame = await this.act(() => this.api.remove(this.sessionId));
    if (frame) this.showDeleted(frame.value);
  }

  showDeleted(value) {
    const id = this.sessionId;
    this.close();
    this.onListChanged();
    const trashed = value && value.trashedAs;
    replace(this.root, el("div", {class: "deleted", role: "status"},
      el("h2", {tabindex: "-1"}, "Deleted"),
      el("p", {}, "The conversation ", id || "", " is gone from your list",
        trashed ? "; the host moved it to its trash as " : ".", trashed ? el("code", {}, "trash/" + trashed) : null,
        trashed ? "." : null),
      el("p", {class: "hint"}, "To restore it: stop the local run (Ctrl-C), move ",
        el("code", {}, "<data dir>/services/vehicle/trash/" + (trashed || "<id>")), " back to ",
        el("code", {}, "<data dir>/services/vehicle/sessions/" + (id || "<id>")),
        " and start it again (docs/operating.md, “Restoring a session from the trash”). The data dir is ",
        el("code", {}, ".data"), " unless you gave --data-dir."),
      value && value.mirror ? el("p", {class: "hint"}, "Its record in the graph, document ", value.mirror.documentId,
        " in ", value.mirror.graphId, ", stays where it is.") : null));
    this.root.dataset.sessionId = "";
    this.root.querySelector("h2").focus();
  }
}
