// A session's events through the browser's own EventSource (the SSE watch).
//
// The browser reconnects by itself after a dropped connection, sending
// Last-Event-ID: the host replays from there, so nothing is missed and
// nothing comes twice. When the browser gives up instead (an HTTP error:
// the gateway's 502 while the host restarts, or a lapsed cookie), this
// opens a new EventSource from the last seq seen (?since=), after asking
// `beforeReopen` whether to (it checks the session and renews the cookie).

//: Every event type of the protocol ("Watch"), the ephemeral delta, and the
//: host's own ephemeral thinking.delta (what a reasoning model thought).
export const EVENT_TYPES = [
  "session.created", "session.revived", "session.shutdown", "session.forked", "session.cloned",
  "session.renamed", "session.deleted", "body.materialized", "body.dormant", "body.exited",
  "body.notice", "lease.claimed", "lease.renewed", "lease.released", "lease.revoked",
  "lease.expired", "command.accepted", "command.delivered", "command.completed",
  "command.aborted", "command.failed", "command.cancelled", "command.interrupted",
  "run.started", "run.ended", "run.settled", "run.error", "message.completed", "tool.started",
  "tool.result", "queue.updated", "queue.stranded", "budget.exceeded", "room.policy",
  "chime.received", "chime.resolved", "compaction.started", "compaction.ended",
  "retry.started", "extension.error", "abort.slow", "mirror.written", "mirror.failed",
  "message.delta", "thinking.delta",
];

export class Watch {
  /**
   * @param url (since) => the watch's address
   * @param since () => the last seq seen
   * @param onFrame (frame) => called with each event, as the host sent it
   * @param onState ("live" | "reconnecting" | "offline" | "closed") => ...
   * @param beforeReopen async () => whether to open again after the browser gave up
   */
  constructor({url, since, onFrame, onState, beforeReopen}) {
    this.url = url;
    this.since = since;
    this.onFrame = onFrame;
    this.onState = onState;
    this.beforeReopen = beforeReopen;
    this.source = null;
    this.timer = null;
    this.failures = 0;
    this.stopped = false;
  }

  start() {
    this.stopped = false;
    this.open();
  }

  open() {
    const source = new EventSource(this.url(this.since()));
    this.source = source;
    source.onopen = () => {
      this.failures = 0;
      this.onState("live");
    };
    source.onerror = () => {
      if (this.source !== source) return;
      if (source.readyState === EventSource.CLOSED) {
        this.onState("offline");
        this.later();
      } else {
        this.onState("reconnecting");
      }
    };
    const receive = (message) => {
      if (this.source !== source) return;
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch (e) {
        return;
      }
      this.onFrame(frame);
    };
    for (const type of EVENT_TYPES) source.addEventListener(type, receive);
  }

  later() {
    this.close();
    if (this.stopped) return;
    const delay = Math.min(5000, 500 * 2 ** Math.min(this.failures, 4));
    this.failures += 1;
    this.timer = setTimeout(async () => {
      this.timer = null;
      if (this.stopped) return;
      let again;
      try {
        again = await this.beforeReopen();
      } catch (e) {
        again = "later";
      }
      if (this.stopped) return;
      if (again === true) this.open();
      else if (again === "later") this.later();
      else this.stop();
    }, delay);
  }

  close() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  stop() {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.close();
    this.onState("closed");
  }
}
