"""
Live: the local run's page in a real browser (Debian's headless Chromium,
driven by Selenium), against the real local run: C{scripts/run} as a person
starts it, the stand-in serving the page, the host with real pi, the
scripted model streaming slowly for C{[[SLOW]]}.

Each test prints where its screenshots are (under the trial's temporary
folder: artifacts, not in git).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from vehicle_local.standin import freeLoopbackPort

from tests.support._localrun import REPO, LocalRun, childrenOf, personEnv
from tests.support.browser import inBrowser, requireChromium, startChromium, waitUntil
from tests.support.live import requirePi

#: An answer with markup in it: the scripted model echoes what it is told.
HOSTILE = "<script>alert(1)</script><b>x</b><img src=x onerror=alert(2)>"

_TRANSCRIPT = """
return Array.from(document.querySelectorAll('.transcript > li.msg')).map(li => [
  li.classList.contains('user') ? 'user' : li.classList.contains('assistant') ? 'assistant' : 'tool',
  (li.querySelector('.text') || {textContent: ''}).textContent]);
"""

_FOLDED = """
const call = document.querySelector('details.tool-call'), result = document.querySelector('.msg.tool details');
return [call.open, call.querySelector('summary').textContent,
        result.open, result.querySelector('summary').textContent];
"""

_SEQS = "return Array.from(document.querySelectorAll('.events li')).map(li => Number(li.dataset.seq));"


def pageLink(run: LocalRun) -> str:
    """
    The one-time login link the banner prints.
    """
    for line in run.process.text().splitlines():
        if line.strip().startswith("page:"):
            return line.split()[1]
    raise AssertionError("no page line in the banner:\n" + run.process.text())


class Page:
    """
    One tab of the page, read and worked as a person would (in the
    browser's thread).
    """

    def __init__(self, driver: Any) -> None:
        from selenium.webdriver.common.by import By

        self.d = driver
        self.By = By

    def find(self, css: str) -> Any:
        return self.d.find_element(self.By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        return list(self.d.find_elements(self.By.CSS_SELECTOR, css))

    def click(self, css: str, index: int = 0) -> None:
        """
        Click the C{index}th element C{css} names, found again if the page
        redrew it meanwhile.
        """
        def clicked() -> bool:
            self.all(css)[index].click()
            return True

        waitUntil(clicked, 10, f"a click on {css}")

    def data(self, name: str) -> str:
        return str(self.find("#conversation").get_attribute("data-" + name) or "")

    def transcript(self) -> list[tuple[str, str]]:
        return [tuple(item) for item in self.d.execute_script(_TRANSCRIPT)]  # type: ignore[misc]

    def streaming(self) -> str | None:
        return self.d.execute_script(  # type: ignore[no-any-return]
            "const t = document.querySelector('.msg.streaming .text'); return t ? t.textContent : null;"
        )

    def seqs(self) -> list[int]:
        return list(self.d.execute_script(_SEQS))

    def waitOpen(self) -> str:
        waitUntil(lambda: self.find("#app").is_displayed(), what="the app")
        return waitUntil(lambda: self.data("session-id") and self.data("stream") == "live"
                         and self.data("session-id"), what="a live conversation")

    def newSession(self, title: str) -> str:
        before = self.data("session-id")
        self.click("#new summary")
        self.find("#new-title").send_keys(title)
        self.click("#new-form button[type=submit]")
        waitUntil(lambda: self.data("session-id") not in ("", before), what="the new session")
        session = self.waitOpen()
        waitUntil(lambda: self.data("lease") == "mine", what="the new session's lease")
        return session

    def type(self, text: str, enter: bool = True) -> None:
        from selenium.webdriver.common.keys import Keys

        box = self.find("#composer-text")
        box.send_keys(text + (Keys.ENTER if enter else ""))

    def waitIdleWith(
        self, count: int, whole: Callable[[list[tuple[str, str]]], bool] = lambda items: True,
    ) -> list[tuple[str, str]]:
        """
        Wait until the run is over and the transcript has C{count} messages,
        the last ones C{whole} (an answer shown whole, not the part of it
        streamed so far).
        """
        def settled() -> Any:
            items = self.transcript()
            return (self.data("status") == "idle" and self.streaming() is None
                    and len(items) >= count and whole(items) and items)

        return waitUntil(settled, what=f"an idle conversation of {count} messages")  # type: ignore[no-any-return]

    def waitLast(self, expected: tuple[str, str], timeout: float = 60) -> list[tuple[str, str]]:
        """
        Wait until the run is over and the transcript ends with
        C{expected}; the transcript.
        """
        def settled() -> Any:
            items = self.transcript()
            return (self.data("status") == "idle" and self.streaming() is None
                    and items[-1:] == [expected] and items)

        try:
            return waitUntil(settled, timeout, f"{expected} last")  # type: ignore[no-any-return]
        except AssertionError as e:
            raise AssertionError(f"{e}; the transcript: {self.transcript()}, "
                                 f"status {self.data('status')}")

    def pieces(self) -> list[str]:
        """
        The streamed reply as it grows, until it is replaced by the whole
        message: each distinct text seen.
        """
        seen: list[str] = []
        waitUntil(lambda: self.streaming(), what="the reply to start streaming")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.streaming()
            if text is None:
                return seen
            if not seen or seen[-1] != text:
                seen.append(text)
            time.sleep(0.03)
        raise AssertionError(f"the reply never ended: {seen}")

    def shot(self, name: str) -> Path:
        path = Path(name).absolute()
        self.d.save_screenshot(str(path))
        print(f"\nscreenshot: {path}")
        return path


class _PageCase(TestCase):
    timeout = 420

    async def start(self, data: Path | None = None, port: int | None = None) -> tuple[LocalRun, str]:
        """
        C{scripts/run} from this repository (its data dir and port fresh
        unless given); the front's address from its banner.
        """
        requirePi()
        requireChromium()
        self.base = getattr(self, "base", None) or Path(self.mktemp()).absolute()
        self.tmp = self.base / "tmp"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.data = data or self.base / "data"
        self.port = port or freeLoopbackPort()
        run = LocalRun(REPO, ["--port", str(self.port), "--data-dir", str(self.data)],
                       personEnv(self.tmp))
        self.addCleanup(run.reap)
        await run.banner()
        return run, f"http://127.0.0.1:{self.port}"

    def browser(self, name: str = "chromium") -> Any:
        driver = startChromium(self.base / name)
        self.addCleanup(lambda: inBrowser(driver.quit))
        return driver

    async def hostEvents(self, front: str, key: str, sessionId: str) -> list[int]:
        """
        Every durable seq the host has for the session (long-polls, as a
        client other than the page).
        """
        http = HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
        seqs: list[int] = []
        while True:
            response = await http.get(
                f"{front}/services/vehicle/g/demo/sessions/{sessionId}/events?since="
                f"{seqs[-1] if seqs else 0}",
                headers={b"authorization": [b"Bearer " + key.encode()]},
            )
            value = json.loads(await response.content())["value"]
            seqs += [event["seq"] for event in value["events"]]
            if not value["more"]:
                return seqs


class ConversationTests(_PageCase):
    """
    One tab: the link's login, a session, a streamed answer, markup shown
    as text, steer, abort, a reload, fork, clone, rename and delete.
    """

    async def test_aConversation(self) -> None:
        run, front = await self.start()
        link, key = pageLink(run), run.masterKey()
        driver = self.browser()
        started = time.monotonic()
        await inBrowser(self.steps, Page(driver), link, front, key)
        print(f"\nbrowser steps: {time.monotonic() - started:.1f} s")

    def steps(self, page: Page, link: str, front: str, key: str) -> None:
        from selenium.common.exceptions import NoAlertPresentException

        # The one-time link signs in and leaves the address bare; the tab
        # keeps a token of its own, not the key.
        page.d.get(link)
        waitUntil(lambda: page.find("#app").is_displayed(), what="the app")
        self.assertEqual(page.d.current_url, front + "/")
        stored = page.d.execute_script("return JSON.stringify(sessionStorage);")
        self.assertNotIn(key, stored)
        self.assertIn("vpage1.tab.", stored)
        self.assertNotIn(key, page.d.execute_script("return document.cookie;"))

        first = page.newSession("first")
        self.assertIn("this tab drives", page.find("#session-list").text)

        # The answer arrives in pieces, through EventSource, each piece the
        # one before it and more.
        page.type("[[SLOW]] count for me")
        pieces = page.pieces()
        self.assertGreaterEqual(len(pieces), 5, pieces)
        for shorter, longer in zip(pieces, pieces[1:]):
            self.assertTrue(longer.startswith(shorter) and longer != shorter, pieces)
        items = page.waitIdleWith(2, lambda items: "slow-16" in items[1][1])
        self.assertEqual(items[1][0], "assistant")
        self.assertTrue(items[1][1].startswith(pieces[-1]), (items, pieces))
        self.assertIn("slow-16", items[1][1])
        waitUntil(lambda: "cost $" in page.find(".run").text, what="the run's cost")
        self.assertIn("budget 12 turns, $0.25 a run", page.find(".run").text)

        # Markup in an answer is shown as its characters, and runs nothing.
        page.type(HOSTILE)
        items = page.waitIdleWith(4, lambda items: items[3][1].endswith("')"))
        self.assertEqual(items[2], ("user", HOSTILE))
        self.assertEqual(items[3], ("assistant", f"Hello from the scripted model (you said: '{HOSTILE}')"))
        self.assertEqual(page.d.execute_script(
            "return document.querySelectorAll('#conversation script, #conversation b, #conversation img').length;"), 0)
        self.assertRaises(NoAlertPresentException, lambda: page.d.switch_to.alert.text)

        # A tool call and its result, folded.
        tool = "mcp__graph__list_documents"
        page.type(f"[[TOOL:{tool} {{}}]]")
        items = page.waitLast(("assistant", f"The tool {tool} answered."))
        self.assertEqual(items[4:], [("user", f"[[TOOL:{tool} {{}}]]"), ("assistant", ""),
                                     ("tool", items[6][1]), ("assistant", f"The tool {tool} answered.")])
        folded = [False, "Tool call: " + tool, False, "Tool result: " + tool]
        seen: list[Any] = []

        def isFolded() -> bool:
            seen.append(page.d.execute_script(_FOLDED))
            return bool(seen[-1] == folded)

        try:
            waitUntil(isFolded, what="the call and result folded")
        except AssertionError:
            self.fail(f"the call and result, last seen {seen[-1:]}, conversation {page.transcript()}")
        page.shot("page-conversation.png")

        # Steer a slow run: the steer is taken after the reply, in the same run.
        page.type("[[SLOW]] go on")
        waitUntil(lambda: page.streaming(), what="the slow reply")
        page.type("turn left", enter=False)
        page.click("#steer")
        items = page.waitLast(("assistant", "Hello from the scripted model (you said: 'turn left')"))
        self.assertEqual(items[8], ("user", "[[SLOW]] go on"))
        self.assertIn("slow-16", items[9][1])
        self.assertEqual(items[10:], [("user", "turn left"),
                                      ("assistant", "Hello from the scripted model (you said: 'turn left')")])

        # Abort a slow run from the keyboard (Esc in the prompt box).
        from selenium.webdriver.common.keys import Keys

        page.type("[[SLOW]] stop me")
        waitUntil(lambda: page.streaming(), what="the slow reply")
        page.find("#composer-text").send_keys(Keys.ESCAPE)
        waitUntil(lambda: page.find(".run").text.startswith("Last run aborted"), what="the abort")
        self.assertEqual(page.data("status"), "idle")
        before = page.waitIdleWith(len(items) + 1)
        self.assertNotIn("slow-16", before[-1][1])

        # A reload shows the same transcript, and this tab still drives.
        page.d.refresh()
        page.waitOpen()
        try:
            waitUntil(lambda: page.transcript() == before, what="the same transcript after a reload")
        except AssertionError:
            self.fail(f"after a reload {page.transcript()!r}, before it {before!r}")
        self.assertEqual(page.data("lease"), "mine")
        self.assertEqual(page.seqs(), list(range(1, len(page.seqs()) + 1)))

        # At a phone's width the page is one column, with nothing cut off
        # to the side.
        page.d.set_window_size(390, 844)
        waitUntil(lambda: page.d.execute_script("return window.innerWidth;") <= 400, what="a phone's width")
        self.assertLessEqual(
            page.d.execute_script("return document.documentElement.scrollWidth;"),
            page.d.execute_script("return window.innerWidth;"),
        )
        page.shot("page-phone.png")
        page.d.set_window_size(1200, 1000)

        # Fork before the second question: the branch holds the first
        # exchange, and the question comes back to be sent again.
        page.click(".msg.user button.fork", 1)
        waitUntil(lambda: page.data("session-id") not in ("", first), what="the fork")
        fork = page.waitOpen()
        waitUntil(lambda: page.transcript() == before[:2], what="the fork's history")
        self.assertEqual(page.find("#composer-text").get_attribute("value"), HOSTILE)
        self.assertIn("forked from " + first, page.find(".meta").text)

        # Clone the first, rename the clone, delete it.
        page.click(f'#session-list button[data-session-id="{first}"]')
        waitUntil(lambda: page.data("session-id") == first and page.data("stream") == "live",
                  what="the first again")
        page.click("#clone")
        waitUntil(lambda: page.data("session-id") not in ("", first, fork), what="the clone")
        clone = page.waitOpen()
        waitUntil(lambda: page.transcript() == before, what="the clone's history")
        self.assertEqual(page.find("#conv-title").text, "Copy of first")
        page.click("#rename")
        box = page.find("#rename-input")
        box.clear()
        box.send_keys("a <i>renamed</i> clone" + Keys.ENTER)
        waitUntil(lambda: page.find("#conv-title").text == "a <i>renamed</i> clone", what="the rename")
        waitUntil(lambda: "a <i>renamed</i> clone" in page.find("#session-list").text,
                  what="the rename in the list")
        page.click("#delete")
        page.click("#confirm-delete")
        notice = waitUntil(lambda: page.find(".deleted").text, what="the deleted notice")
        self.assertIn("trash/" + clone, notice)
        self.assertIn("Restoring a session from the trash", notice)
        waitUntil(lambda: "renamed" not in page.find("#session-list").text, what="the list without it")
        names = page.find("#session-list").text
        self.assertIn("first", names)
        self.assertEqual(len(page.all("#session-list li")), 2)

        # A model that reasons first: its thinking is shown apart from the
        # answer, folded once the answer is whole, and again after a reload.
        page.newSession("thinker")
        said = "[[THINK]] ponder"
        page.type(said)
        answer = f"Hello from the scripted model (you said: '{said}')"
        page.waitLast(("assistant", answer))
        thought = f"The person said '{said}'; I should greet them."
        shown = "return Array.from(document.querySelectorAll('.msg.assistant details.thinking'))" \
                ".map(d => [d.open, d.querySelector('.thought').textContent]);"
        waitUntil(lambda: page.d.execute_script(shown) == [[False, thought]], what="the thinking, folded")
        page.d.refresh()
        page.waitOpen()
        waitUntil(lambda: page.d.execute_script(shown) == [[False, thought]],
                  what="the thinking after a reload")
        self.assertEqual(page.transcript(), [("user", said), ("assistant", answer)])
        logs = [entry for entry in page.d.get_log("browser") if entry["level"] == "SEVERE"]
        self.assertEqual(logs, [])


class TwoTabsTests(_PageCase):
    """
    Two tabs of one person: the lease shown, the takeover, a collaborator's
    chime, the room's policy.
    """

    async def test_takeoverAndChimes(self) -> None:
        run, front = await self.start()
        key = run.masterKey()
        driver = self.browser()
        await inBrowser(self.steps, Page(driver), front, key)

    def steps(self, a: Page, front: str, key: str) -> None:
        # The key typed once, in the first tab.
        a.d.get(front + "/")
        waitUntil(lambda: a.find("#login").is_displayed(), what="the login form")
        a.find("#login-key").send_keys("not the key\n")
        waitUntil(lambda: "not the master key" in a.find("#login-error").text, what="the refusal")
        a.find("#login-key").clear()
        a.find("#login-key").send_keys(key + "\n")
        session = a.newSession("shared")
        tabA = a.d.current_window_handle

        # A second tab of the same browser is let in by the cookie, and
        # is another client: it sees the conversation driven elsewhere.
        a.d.switch_to.new_window("tab")
        b = a
        tabB = b.d.current_window_handle
        b.d.get(front + "/#/s/" + session)
        b.waitOpen()
        waitUntil(lambda: b.data("lease") == "elsewhere", what="the lease held elsewhere")
        self.assertIn("Driven elsewhere", b.find(".lease").text)
        self.assertFalse(b.find("#send").is_enabled())
        self.assertRegex(b.find(".lease").text, r"\(page-[0-9a-f]{16}\)")

        # It takes over, as the same person; the first tab is told.
        b.click("#take-over")
        waitUntil(lambda: b.data("lease") == "mine", what="the takeover")
        b.type("hello from tab B")
        items = b.waitLast(("assistant", "Hello from the scripted model (you said: 'hello from tab B')"))
        b.d.switch_to.window(tabA)
        waitUntil(lambda: a.data("lease") == "elsewhere", what="tab A seeing the takeover")
        waitUntil(lambda: "took over" in a.find(".transcript").text, what="tab A's note")
        waitUntil(lambda: a.transcript() == items, what="tab A's transcript")
        a.type("from tab A", enter=False)
        self.assertFalse(a.find("#send").is_enabled())

        # A collaborator chimes in; the driver (tab B) sees it waiting,
        # accepts it, and the model answers it.
        b.d.switch_to.window(tabB)
        b.click(".room summary")
        self.assertEqual(b.find("#room-policy").get_attribute("value"), "suggest")
        b.find("#chime-author").clear()
        b.find("#chime-author").send_keys("Ada")
        b.find("#chime-text").send_keys("what about <u>cows</u>?")
        b.click(".chime-form button")
        waitUntil(lambda: "Chime from Ada" in b.find(".transcript").text, what="the chime's note")
        waitUntil(lambda: "what about <u>cows</u>?" in b.find(".chimes").text, what="the waiting chime")
        b.click(".chimes .chime button")
        items = b.waitIdleWith(4, lambda items: items[3][1].endswith("')"))
        self.assertEqual(items[2][0], "user")
        self.assertTrue(items[2][1].startswith("[Ada collaborator]"), items)
        self.assertIn("what about <u>cows</u>?", items[2][1])
        self.assertIn("what about <u>cows</u>?", items[3][1])
        waitUntil(lambda: b.find(".room").get_attribute("data-pending") == "0", what="no chime waiting")

        # The room's policy is the driver's to set.
        from selenium.webdriver.support.ui import Select

        Select(b.find("#room-policy")).select_by_value("observe")
        b.click(".room form.inline button")
        waitUntil(lambda: b.find(".room summary").text.startswith("Room: observe"), what="the policy")
        b.find("#chime-text").send_keys("ignored?")
        b.click(".chime-form button")
        waitUntil(lambda: "refused the chime" in b.find("#notice").text, what="the refusal")
        b.d.switch_to.window(tabA)
        waitUntil(lambda: a.find(".room summary").get_attribute("textContent").startswith("Room: observe"),
                  what="tab A seeing the policy")
        b.d.switch_to.window(tabB)
        b.click(".room summary")
        b.shot("page-two-tabs.png")


class ResumeTests(_PageCase):
    """
    The host killed mid-stream and the run started again: the page goes on
    from the last event it saw, no gap, no repeat; a reload shows the same.
    """

    async def test_hostKilledMidStream(self) -> None:
        run, front = await self.start()
        key = run.masterKey()
        driver = self.browser()
        page = Page(driver)
        session = await inBrowser(self.before, page, pageLink(run))

        # Kill the host (not the run): the run ends with it, and is
        # started again on the same port and data dir.
        host = [pid for pid, line in childrenOf(run.process.pid)
                if "twistd" in line and " vehicle" in line]
        self.assertEqual(len(host), 1, childrenOf(run.process.pid))
        os.kill(host[0], signal.SIGKILL)
        self.assertEqual(await run.process.ended, 1)
        await inBrowser(waitUntil, lambda: page.data("stream") != "live", 30, "the stream to drop")
        again, _ = await self.start(self.data, self.port)

        await inBrowser(self.after, page)
        # The page saw the host's log as it is, each event once (the host
        # may have written another since: a body going dormant).
        shown = await inBrowser(page.seqs)
        seqs = await self.hostEvents(front, key, session)
        self.assertEqual(shown, seqs[: len(shown)])
        self.assertEqual(shown, list(range(1, len(shown) + 1)))
        self.assertGreater(len(shown), 10)

    def before(self, page: Page, link: str) -> str:
        page.d.get(link)
        session = page.newSession("resume")
        page.type("[[SLOW]] keep talking")
        waitUntil(lambda: len(page.streaming() or "") > 10, what="a few pieces")
        return session

    def after(self, page: Page) -> None:
        waitUntil(lambda: page.data("stream") == "live", 120, "the stream back")
        waitUntil(lambda: "Interrupted" in page.find(".transcript").text, what="the interrupted run")
        self.assertIsNone(page.streaming())
        waitUntil(lambda: page.find("#send").is_enabled() and page.data("status") == "idle",
                  what="the prompt box")
        page.type("after the restart")
        items = page.waitLast(("assistant", "Hello from the scripted model (you said: 'after the restart')"))
        self.assertEqual(items[0], ("user", "[[SLOW]] keep talking"))
        self.assertEqual(items.count(("user", "after the restart")), 1)
        box = page.find(".events-box")
        self.assertEqual((box.get_attribute("data-gaps"), box.get_attribute("data-repeats")), ("0", "0"))
        seen = page.seqs()
        self.assertEqual(seen, list(range(1, len(seen) + 1)))
        page.d.refresh()
        page.waitOpen()
        waitUntil(lambda: page.transcript() == items, what="the same transcript after a reload")
        waitUntil(lambda: page.seqs()[: len(seen)] == seen, what="the whole log again")


class Keyboard:
    """
    A person with a keyboard and no mouse: every key goes to whatever has
    the focus (never to an element picked by the test), and the focus
    moves only by Tab and Shift+Tab.
    """

    #: The most Tab presses a walk may take to reach what it looks for.
    MOST = 60

    def __init__(self, page: Page) -> None:
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys as Named

        self.page = page
        self.named = Named
        self.chain = lambda: ActionChains(page.d)

    def press(self, *keys: str) -> None:
        self.chain().send_keys(*keys).perform()

    def focused(self, css: str) -> bool:
        return bool(self.page.d.execute_script(
            "return !!document.activeElement && document.activeElement.matches(arguments[0]);", css))

    def tabTo(self, css: str, back: bool = False) -> None:
        """
        Press Tab (Shift+Tab, C{back}) until C{css} has the focus; each
        stop on the way is visible and shows that it has the focus.
        """
        for _ in range(self.MOST):
            if self.focused(css):
                return
            if back:
                self.chain().key_down(self.named.SHIFT).send_keys(self.named.TAB).key_up(
                    self.named.SHIFT).perform()
            else:
                self.press(self.named.TAB)
            shown = self.page.d.execute_script(
                "const e = document.activeElement;"
                "if (!e || e === document.body) return 'nothing';"
                "const r = e.getBoundingClientRect(), s = getComputedStyle(e);"
                "if (r.width === 0 || r.height === 0) return 'hidden: ' + e.outerHTML.slice(0, 80);"
                "if (s.outlineStyle === 'none' && s.boxShadow === 'none')"
                "  return 'no focus ring: ' + e.outerHTML.slice(0, 80);"
                "return '';")
            assert shown in ("", "nothing"), f"on the way to {css}: {shown}"
        raise AssertionError(f"{self.MOST} presses of Tab never reached {css}")


class KeyboardTests(_PageCase):
    """
    The page with the keyboard alone: sign in, start a session, talk,
    abort, rename, move between sessions and delete, by Tab, Enter and Esc.
    """

    async def test_keyboardAlone(self) -> None:
        run, front = await self.start()
        key = run.masterKey()
        driver = self.browser()
        await inBrowser(self.steps, Page(driver), front, key)

    def newSession(self, keys: Keyboard, title: str) -> str:
        page = keys.page
        before = page.data("session-id")
        keys.tabTo("#new summary")
        keys.press(keys.named.ENTER)
        keys.tabTo("#new-title")
        keys.press(title, keys.named.ENTER)
        waitUntil(lambda: page.data("session-id") not in ("", before), what="the new session")
        session = page.waitOpen()
        # The new conversation's prompt box has the focus.
        waitUntil(lambda: keys.focused("#composer-text"), what="the prompt box focused")
        return session

    def steps(self, page: Page, front: str, key: str) -> None:
        keys = Keyboard(page)
        page.d.get(front + "/")
        waitUntil(lambda: page.find("#login").is_displayed(), what="the login form")
        self.assertTrue(keys.focused("#login-key"))
        keys.press(key, keys.named.ENTER)
        waitUntil(lambda: page.find("#app").is_displayed(), what="the app")
        # Before the key was typed, the tab asked whether it was signed in
        # already: the one refusal the browser logs, read and let go.
        refused = [e["message"] for e in page.d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual([m.split(" - ")[0] for m in refused], [front + "/page/login"] * len(refused))

        first = self.newSession(keys, "by keys")
        keys.press("hello from the keys", keys.named.ENTER)
        page.waitLast(("assistant", "Hello from the scripted model (you said: 'hello from the keys')"))

        # Esc in the prompt box aborts a run under way.
        keys.press("[[SLOW]] stop me", keys.named.ENTER)
        waitUntil(lambda: page.streaming(), what="the slow reply")
        keys.press(keys.named.ESCAPE)
        waitUntil(lambda: page.find(".run").text.startswith("Last run aborted"), what="the abort")

        # Rename: the button opens the field with the focus in it.
        keys.tabTo("#rename", back=True)
        keys.press(keys.named.ENTER)
        waitUntil(lambda: keys.focused("#rename-input"), what="the title field focused")
        keys.chain().key_down(keys.named.CONTROL).send_keys("a").key_up(keys.named.CONTROL).perform()
        keys.press("renamed by keys", keys.named.ENTER)
        waitUntil(lambda: page.find("#conv-title").text == "renamed by keys", what="the rename")

        # A second session, then back to the first through the list.
        second = self.newSession(keys, "second")
        self.assertNotEqual(second, first)
        keys.tabTo(f'#session-list button[data-session-id="{first}"]', back=True)
        keys.press(keys.named.ENTER)
        waitUntil(lambda: page.data("session-id") == first and page.data("stream") == "live",
                  what="the first session again")
        waitUntil(lambda: page.find("#conv-title").text == "renamed by keys", what="its title")

        # Delete it: the confirmation takes the focus, Enter confirms.
        keys.tabTo("#delete")
        keys.press(keys.named.ENTER)
        waitUntil(lambda: keys.focused("#confirm-delete"), what="the confirmation focused")
        keys.press(keys.named.ENTER)
        notice = waitUntil(lambda: page.find(".deleted").text, what="the deleted notice")
        self.assertIn("trash/" + first, notice)
        waitUntil(lambda: keys.focused(".deleted h2"), what="the notice focused")
        waitUntil(lambda: "renamed by keys" not in page.find("#session-list").text,
                  what="the list without it")
        logs = [entry for entry in page.d.get_log("browser") if entry["level"] == "SEVERE"]
        self.assertEqual(logs, [])
