"""The README's and the documentation's screenshots, made from the running demo appliance:
docs/images/overview.png (the Overview) and docs/images/efficiency.png (the Efficiency page).

Usage, after the demo bootstrap (`manage.py bootstrap --no-input`) with its portal running:

    .venv/bin/python docs/screenshots.py --url https://127.0.0.1:PORT --password-file var/keys/admin-password

Playwright's Python package drives Debian's Chromium (/usr/bin/chromium, `apt-get install chromium`); no
browser is downloaded. The demo portal's certificate is its own, so TLS errors are ignored for it.
"""

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

IMAGES = Path(__file__).resolve().parent / "images"
PAGES = {"overview.png": "/", "efficiency.png": "/analytics/"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the demo portal, e.g. https://127.0.0.1:8443")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password-file", type=Path, default=Path("var/keys/admin-password"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    options = parser.parse_args()
    base = options.url.rstrip("/")
    IMAGES.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=options.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900}, ignore_https_errors=True,
                                color_scheme="light")
        page.goto(f"{base}/accounts/login/")
        page.fill("input[name=username]", options.username)
        page.fill("input[name=password]", options.password_file.read_text().strip())
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        for name, path in PAGES.items():
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(IMAGES / name), full_page=False)
            print(f"{IMAGES / name}")
        browser.close()


if __name__ == "__main__":
    main()
