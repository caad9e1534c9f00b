"""Debian's headless Chromium driven by Selenium through chromium-driver: what the console tests and
bench/console.py drive. A real browser, with its own profile directory, one per use."""
import json
import pathlib
import time

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"


class Browser:
    def __init__(self, profile, width=1400, height=1000):
        self.profile = pathlib.Path(profile)
        self.size = (width, height)
        self.d = None

    def __enter__(self):
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  f"--window-size={self.size[0]},{self.size[1]}", f"--user-data-dir={self.profile}"):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(DRIVER), options=o)
        self.d.set_page_load_timeout(60)
        return self

    def __exit__(self, *exc):
        self.d.quit()

    def open(self, url):
        self.d.get(url)

    def login(self, url, token):
        self.d.get(f"{url}/?token={token}")
        self.wait_css("#who:not(:empty)")

    def css(self, sel):
        return self.d.find_element(By.CSS_SELECTOR, sel)

    def all(self, sel):
        return self.d.find_elements(By.CSS_SELECTOR, sel)

    def wait_css(self, sel, timeout=20):
        def present(d):
            try:
                return d.find_element(By.CSS_SELECTOR, sel)
            except NoSuchElementException:
                return False
            except WebDriverException as e:   # asked while the page loads anew (a logout's reload): ask again
                if "aborted by navigation" in str(e):   # (CI: the logout test failed on it once)
                    return False
                raise
        try:
            return WebDriverWait(self.d, timeout).until(present)
        except TimeoutException:
            raise AssertionError(f"no {sel!r} within {timeout} s on {self.d.current_url}:\n"
                                 f"{self.d.find_element(By.TAG_NAME, 'body').text[:2000]}\n{self.console()}")

    def wait_until(self, fn, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = fn()
                if v:
                    return v
            except Exception:  # the page may be redrawing what fn reads
                pass
            time.sleep(0.1)
        raise AssertionError(f"{what}: not within {timeout} s on {self.d.current_url}:\n"
                             f"{self.d.find_element(By.TAG_NAME, 'body').text[:2000]}\n{self.console()}")

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def js_async(self, script, *args):
        return self.d.execute_async_script(script, *args)

    def console(self):
        return "\n".join(f"{l['level']}: {l['message']}" for l in self.d.get_log("browser"))

    def screenshot(self, path):
        """The whole page, not only the window: the window grows to the page's height for it."""
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        h = self.js("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
        self.d.set_window_size(self.size[0], min(max(h + 40, self.size[1]), 6000))
        self.js("window.scrollTo(0, 0)")
        time.sleep(0.3)
        self.d.save_screenshot(str(path))
        self.d.set_window_size(*self.size)
        return path

    def first_paint_ms(self, url):
        """First contentful paint of a fresh load of url, from the browser's own Paint Timing."""
        self.d.get("about:blank")
        self.d.get(url)
        return self.wait_until(lambda: self.js(
            "const p = performance.getEntriesByName('first-contentful-paint'); return p.length ? p[0].startTime : 0"),
            "a first contentful paint")

    def uplot_render_ms(self, n):
        """Time for uPlot (as the console loads it) to draw one series of n points, in this page."""
        return self.js_async("""
            const n = arguments[0], done = arguments[arguments.length - 1];
            const xs = new Float64Array(n), ys = new Float64Array(n);
            for (let i = 0; i < n; i++) { xs[i] = i; ys[i] = Math.exp(-i / n) + 0.05 * Math.sin(i / 7); }
            const el = document.createElement('div'); document.body.append(el);
            const t = performance.now();
            const u = new uPlot({ width: 1200, height: 300, scales: { x: { time: false } },
                                  series: [{}, { stroke: 'red', points: { show: false } }],
                                  hooks: { draw: [() => { const ms = performance.now() - t;
                                                          setTimeout(() => { u.destroy(); el.remove(); done(ms); }); }] } },
                                [xs, ys], el);""", n)
