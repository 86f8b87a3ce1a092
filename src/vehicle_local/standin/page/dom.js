// Every element of the page is made here. Text from the host, the model or
// a person only ever enters the page as text (a text node or textContent),
// never as markup: an answer holding <script> shows as those characters.

/**
 * An element: el("button", {class: "x", onclick: f}, "text", child, ...).
 * Attribute values are set with setAttribute (never an on* attribute from
 * data: handlers are functions); children that are not nodes become text.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      node.className = value;
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append children (nodes, or anything else as text). */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Empty a node and fill it again. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A time as the person's clock shows it, or "" for nothing. */
export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date();
  const sameDay = date.toDateString() === today.toDateString();
  return sameDay
    ? date.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"})
    : date.toLocaleString([], {dateStyle: "medium", timeStyle: "short"});
}

/** Dollars, to the precision a run's cost needs. */
export function usd(value) {
  if (typeof value !== "number") return "$0";
  return "$" + (value < 0.01 ? value.toFixed(5) : value.toFixed(2));
}

/** Say something in the page's status line (read out by screen readers). */
export function say(text) {
  const notice = document.getElementById("notice");
  if (notice) notice.textContent = text;
}
